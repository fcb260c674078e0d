// Checkpoint file readers (ckpt/checkpoint.h, cli/ckpt_cmd.h): COMMIT, MANIFEST and
// shard files (header, index, footer, chunks) of a two-step, two-rank tier root in
// an in-memory Env, read the way restore, `bulwark ckpt ls/inspect/verify/gc` and
// the SDK's load read them.
//
// Input: records [selector: 1 byte][length: 3 bytes LE][bytes], each the content of
// one of kFiles (selector % 8; a later record for the same file replaces it). The
// seeds are checkpoints written by the project's own writer (WriteShard + Commit; step
// 20 incremental on step 10, a replicated tensor, a sharded one), generated with
// FUZZ_CKPT_WRITE_SEED=DIR.
//
// Contracts checked beyond "no crash": errors carry a message; a step that ListCommitted
// lists reads with ReadCommitted; a step that VerifyStep (full) passes opens with
// StepReader and every tensor of every rank loads, checksums verified; ckpt::Retain
// never deletes the newest committed step; the CLI commands exit 0, 1 or 2.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cli/ckpt_cmd.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/mem_env.h"

namespace {

namespace ckpt = bulwark::ckpt;
using bulwark::Status;
using bulwark::fuzz::Check;

constexpr char kRoot[] = "/ckpt";
constexpr long kSteps[] = {10, 20};
constexpr int kWorld = 2;
// Loads of one tensor are capped here (the harness's buffer, not a product limit).
constexpr uint64_t kMaxLoad = 8u << 20;

std::vector<std::string> FileNames() {
  std::vector<std::string> names;
  for (long step : kSteps) {
    const std::string dir = ckpt::StepDir(kRoot, step);
    names.push_back(dir + "/COMMIT");
    names.push_back(dir + "/MANIFEST");
    for (int r = 0; r < kWorld; ++r) names.push_back(dir + "/" + ckpt::ShardFileName(r, kWorld));
  }
  return names;
}

std::map<std::string, std::string> Decode(const uint8_t* data, size_t size) {
  static const std::vector<std::string> kFiles = FileNames();
  std::map<std::string, std::string> files;
  size_t i = 0;
  while (i + 4 <= size) {
    const std::string& name = kFiles[data[i] % kFiles.size()];
    size_t len = data[i + 1] | (data[i + 2] << 8) | (static_cast<size_t>(data[i + 3]) << 16);
    i += 4;
    len = std::min(len, size - i);
    files[name] = std::string(reinterpret_cast<const char*>(data + i), len);
    i += len;
  }
  return files;
}

std::string Encode(const std::map<std::string, std::string>& files) {
  static const std::vector<std::string> kFiles = FileNames();
  std::string out;
  for (size_t s = 0; s < kFiles.size(); ++s) {
    auto it = files.find(kFiles[s]);
    if (it == files.end()) continue;
    const size_t n = it->second.size();
    out += static_cast<char>(s);
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>((n >> 8) & 0xff);
    out += static_cast<char>((n >> 16) & 0xff);
    out += it->second;
  }
  return out;
}

// Seeds: checkpoints written by WriteShard + Commit, as the agent writes them.
void WriteSeeds(const std::string& dir) {
  bulwark::fuzz::MemEnv env;
  std::vector<float> weights(64), bias(8);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint8_t> blob(300, 7);
  const ckpt::ShardIndex* prev[kWorld] = {nullptr, nullptr};
  std::vector<ckpt::ShardIndex> prev_idx(kWorld);
  for (long step : kSteps) {
    for (int r = 0; r < kWorld; ++r) {
      bias[0] = static_cast<float>(step);  // changes each step; `weights` does not
      ckpt::TensorView w;
      w.meta = {"model.w", ckpt::DType::kF32, {4, 8}, {8, 8}, {4 * r, 0}, false};
      w.data = weights.data() + 32 * r;
      ckpt::TensorView b;
      b.meta = {"model.b", ckpt::DType::kF32, {8}, {}, {}, true};
      b.data = bias.data();
      ckpt::TensorView o;
      o.meta = {"optim", ckpt::DType::kU8, {300}, {}, {}, false};
      o.data = blob.data();
      ckpt::WriteOptions opts;
      opts.chunk_size = 64;
      opts.previous = prev[r];
      Status st = ckpt::WriteShard(&env, kRoot, step, r, kWorld, {w, b, o}, opts);
      Check(st.ok(), "seed: WriteShard", st.ToString());
    }
    Status st = ckpt::Commit(&env, kRoot, step, kWorld, /*verify_data=*/true);
    Check(st.ok(), "seed: Commit", st.ToString());
    for (int r = 0; r < kWorld; ++r) {
      auto idx = ckpt::ReadShardIndex(&env, kRoot, step, r, kWorld);
      Check(idx.ok(), "seed: ReadShardIndex");
      prev_idx[r] = *idx;
      prev[r] = &prev_idx[r];
    }
  }
  const auto all = env.Files();
  std::map<std::string, std::string> step10;
  for (const auto& [p, c] : all) {
    if (p.find("step-000000000010") != std::string::npos) step10[p] = c;
  }
  std::ofstream(dir + "/both-steps", std::ios::binary) << Encode(all);
  std::ofstream(dir + "/step-10", std::ios::binary) << Encode(step10);
}

void ReadStep(bulwark::fuzz::MemEnv* env, long step, bool listed) {
  auto m = ckpt::ReadCommitted(env, kRoot, step);
  Check(m.ok() || !m.status().message().empty(), "ReadCommitted error without a message");
  if (listed) {
    Check(m.ok(), "ListCommitted lists a step ReadCommitted refuses", m.status().ToString());
  }
  for (int r = 0; r < kWorld; ++r) {
    auto idx = ckpt::ReadShardIndex(env, kRoot, step, r, kWorld);
    Check(idx.ok() || !idx.status().message().empty(), "ReadShardIndex error without message");
    auto blobs = ckpt::ReadRankTensors(env, kRoot, step, r);
    Check(blobs.ok() || !blobs.status().message().empty(), "ReadRankTensors: no message");
  }
  ckpt::VerifyReport report;
  Status verified = ckpt::VerifyStep(env, kRoot, step, /*full=*/true, &report);
  Check(verified.ok() || !verified.message().empty(), "VerifyStep error without a message");
  auto reader = ckpt::StepReader::Open(env, kRoot, step);
  if (verified.ok()) {
    Check(reader.ok(), "a verified step does not open", reader.status().ToString());
  }
  if (!reader.ok()) return;
  const ckpt::Manifest& man = (*reader)->manifest();
  for (int r = 0; r < man.world; ++r) {
    for (const ckpt::TensorEntry& t : (*reader)->index(r).tensors) {
      if (t.meta.nbytes() > kMaxLoad) {
        Check(!verified.ok() || t.meta.nbytes() <= kMaxLoad * 1024, "huge verified tensor");
        continue;
      }
      std::vector<uint8_t> buf(t.meta.nbytes());
      Status st = (*reader)->Load(t.meta, buf.data(), r);
      Check(st.ok() || !st.message().empty(), "Load error without a message");
      if (verified.ok()) {
        Check(st.ok(), "a tensor of a verified step does not load", st.ToString());
      }
    }
  }
}

void RunCli(bulwark::fuzz::MemEnv* env) {
  std::ostringstream out, err;
  int rc = bulwark::cli::CkptLs(env, {kRoot, true, true}, out, err);
  Check(rc == 0 || rc == 1 || rc == 2, "ckpt ls exit code");
  rc = bulwark::cli::CkptInspect(env, {kRoot, "20", "", true}, out, err);
  Check(rc == 0 || rc == 1 || rc == 2, "ckpt inspect exit code");
  rc = bulwark::cli::CkptVerify(env, {kRoot, "", true, false}, out, err);
  Check(rc == 0 || rc == 1 || rc == 2, "ckpt verify exit code");
  rc = bulwark::cli::CkptGc(env, {kRoot, "1", "0", true, true, {}, true}, out, err);
  Check(rc == 0 || rc == 1 || rc == 2, "ckpt gc --dry-run exit code");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_CKPT_WRITE_SEED")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bulwark::fuzz::MemEnv env;
  env.Reset(Decode(data, size));
  std::vector<std::string> skipped;
  auto listed = ckpt::ListCommitted(&env, kRoot, &skipped);
  Check(listed.ok(), "ListCommitted failed on a readable root", listed.status().ToString());
  for (const std::string& s : skipped) Check(!s.empty(), "empty skip reason");
  auto newest = ckpt::NewestCommitted(&env, kRoot);
  Check(newest.ok() && (listed->empty() ? *newest == -1 : *newest == listed->back()),
        "NewestCommitted disagrees with ListCommitted");
  for (long step : kSteps) {
    bool is_listed = false;
    for (long s : *listed) is_listed = is_listed || s == step;
    ReadStep(&env, step, is_listed);
  }
  RunCli(&env);
  // Retention over what is there: the newest committed step survives.
  std::vector<long> removed;
  Status st = ckpt::Retain(&env, kRoot, {1, 0, {}}, &removed);
  Check(st.ok() || !st.message().empty(), "Retain error without a message");
  if (*newest >= 0) {
    auto after = ckpt::NewestCommitted(&env, kRoot);
    Check(after.ok() && *after == *newest, "Retain removed the newest committed step");
  }
  return 0;
}
