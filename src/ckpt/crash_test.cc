// Crash-consistency test of the checkpoint write protocol (WriteShard -> Commit ->
// Retain): the writer is killed (SIGKILL, optionally with loss of unsynced file
// data) at >= 200 random points during a save, or gets an I/O error, and after
// each interruption a fresh reader must find the newest COMPLETE step — the step
// being saved if and only if its COMMIT rename happened, else the previous one —
// with exactly the bytes of one save attempt, never a partial or mixed step.
//
// Each step is saved by a world of 2 ranks (a replicated tensor written once
// across ranks, a dim-0 sharded tensor, per-rank state, a scalar and an empty
// tensor), incrementally against the newest committed step, then committed and
// retained with keep = 2. Chunks change with different periods, so steps
// reference up to 3 earlier steps and retention both keeps dependencies and
// deletes steps.
//
// Per step: (1) a counting run on a copy of the root measures the step's mutating
// operations T and where the MANIFEST and COMMIT renames fall; (2) a forked child
// runs the same save through FaultEnv armed at op K, uniform in [1, T], and dies
// there (I/O-error points run in-process and must return an error); (3) the parent
// checks the root with the real Env; (4) the parent re-runs the save to completion
// as a restarted writer would (with different bytes for one tensor, as a
// recomputed step would have) and checks retention. Every 4th step is then also
// OVERWRITTEN by a writer killed at a random point (WriteShard of a committed step
// must uncommit it before touching a shard), and completed again.
//
// Deterministic: fixed seeds; children are reaped with a blocking waitpid.
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/fault_env.h"
#include "gtest/gtest.h"

namespace bulwark::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr int kWorld = 2;
constexpr uint64_t kChunk = 64;
constexpr uint64_t kSeed = 0xB0A4C2A5ull;
// Interrupted saves: every 6th gets an I/O error, the rest a kill (one in three
// of which also loses unsynced data): 220 kill points and 44 error points; plus
// 66 kills while overwriting a committed step.
constexpr int kSteps = 264;
constexpr int kOverwriteEvery = 4;
constexpr int kMinKills = 200;
constexpr int kAbsent = -1;  // "the step is not committed"

long StepOf(int i) { return 10L * i; }
int IndexOfStep(long step) { return static_cast<int>(step / 10); }

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t NameHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// One tensor of one rank at one step, with its bytes.
struct Tensor {
  TensorMeta meta;
  std::vector<uint8_t> bytes;
};

// Deterministic bytes of tensor `name` as rank `rank` saves it at step index `i`
// in save attempt `attempt`. Chunk c changes every 1-4 steps (period from
// (name, c)), so saves are partly incremental; chunk 0 of "optim.m" also differs
// per attempt (a recomputed step is not bit-identical). Replicated tensors do not
// depend on the rank.
std::vector<uint8_t> Bytes(const std::string& name, int i, int rank, uint64_t n, int attempt) {
  std::vector<uint8_t> out(n);
  if (name == "meta.step") {
    const uint64_t v = static_cast<uint64_t>(StepOf(i));
    for (uint64_t j = 0; j < n; ++j) out[j] = static_cast<uint8_t>(v >> (8 * j));
    return out;
  }
  const uint64_t h = NameHash(name);
  for (uint64_t c = 0; c * kChunk < n; ++c) {
    const uint64_t period = 1 + Mix(h + c) % 4;
    uint64_t version = static_cast<uint64_t>(i) / period;
    if (name == "optim.m" && c == 0) version = version * 1000 + static_cast<uint64_t>(attempt);
    const uint64_t base = Mix(h ^ Mix(static_cast<uint64_t>(rank) + 7 * c) ^ Mix(version + 1000));
    for (uint64_t j = c * kChunk; j < std::min(n, (c + 1) * kChunk); ++j) {
      out[j] = static_cast<uint8_t>(Mix(base + j) >> 11);
    }
  }
  return out;
}

// The tensors rank `rank` saves at step index `i` in save attempt `attempt`.
std::vector<Tensor> MakeTensors(int i, int rank, int attempt) {
  std::vector<Tensor> out;
  auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape, bool replicated,
                 std::vector<int64_t> global = {}, std::vector<int64_t> offsets = {}) {
    Tensor t;
    t.meta.name = name;
    t.meta.dtype = dt;
    t.meta.shape = std::move(shape);
    t.meta.global_shape = std::move(global);
    t.meta.offsets = std::move(offsets);
    t.meta.replicated = replicated;
    t.bytes = Bytes(name, i, replicated ? -1 : rank, t.meta.nbytes(), attempt);
    out.push_back(std::move(t));
  };
  add("model.w", DType::kF32, {48}, /*replicated=*/true);
  add("model.emb", DType::kI32, {6, 4}, false, {12, 4}, {6L * rank, 0});
  add("optim.m", DType::kU8, {130}, false);
  add("meta.step", DType::kI64, {}, false);
  add("empty", DType::kF32, {0, 3}, false);
  return out;
}

// The save of one step as the trainer ranks and the controller do it. `mark`
// (optional) is called after each phase: "shard0", "shard1", "commit", "retain".
Status SaveStep(Env* env, const std::string& root, int i, int attempt,
                const std::function<void(const char*)>& mark = nullptr) {
  const long step = StepOf(i);
  BW_ASSIGN_OR_RETURN(long prev, NewestCommitted(env, root, step - 1));
  for (int r = 0; r < kWorld; ++r) {
    std::vector<Tensor> ts = MakeTensors(i, r, attempt);
    std::vector<TensorView> views;
    for (const Tensor& t : ts) views.push_back({t.meta, t.bytes.data(), nullptr});
    std::optional<ShardIndex> prev_index;
    if (prev >= 0) {
      BW_ASSIGN_OR_RETURN(prev_index, ReadShardIndex(env, root, prev, r, kWorld));
    }
    WriteOptions opts;
    opts.chunk_size = kChunk;
    opts.previous = prev_index ? &*prev_index : nullptr;
    BW_RETURN_IF_ERROR(WriteShard(env, root, step, r, kWorld, views, opts));
    if (mark) mark(r == 0 ? "shard0" : "shard1");
  }
  BW_RETURN_IF_ERROR(Commit(env, root, step, kWorld));
  if (mark) mark("commit");
  RetainOptions ro;
  ro.keep = 2;
  BW_RETURN_IF_ERROR(Retain(env, root, ro));
  if (mark) mark("retain");
  return Status::Ok();
}

// Empty if committed `step` holds exactly attempt `attempt`'s bytes (loaded through
// a fresh StepReader, every tensor of every rank, and model.emb resharded into one
// piece); else what differs.
std::string DataMismatch(const std::string& root, long step, int attempt) {
  const int i = IndexOfStep(step);
  auto reader = StepReader::Open(Env::Default(), root, step);
  if (!reader.ok()) return "open: " + reader.status().ToString();
  if ((*reader)->manifest().world != kWorld) return "wrong world";
  std::vector<uint8_t> emb_global;
  for (int r = 0; r < kWorld; ++r) {
    std::vector<Tensor> ts = MakeTensors(i, r, attempt);
    if ((*reader)->index(r).tensors.size() != ts.size()) return "wrong tensor count";
    for (const Tensor& t : ts) {
      std::vector<uint8_t> got(t.bytes.size(), 0xEE);
      Status st = (*reader)->Load(t.meta, got.data(), r);
      const std::string what = t.meta.name + " of rank " + std::to_string(r);
      if (!st.ok()) return what + ": " + st.ToString();
      if (got != t.bytes) return what + " has other bytes";
      if (t.meta.name == "model.emb") {
        emb_global.insert(emb_global.end(), t.bytes.begin(), t.bytes.end());
      }
    }
  }
  TensorMeta whole;
  whole.name = "model.emb";
  whole.dtype = DType::kI32;
  whole.shape = {12, 4};
  std::vector<uint8_t> got(emb_global.size());
  Status st = (*reader)->Load(whole, got.data());
  if (!st.ok()) return "resharded model.emb: " + st.ToString();
  if (got != emb_global) return "resharded model.emb has other bytes";
  return "";
}

std::set<long> Listed(const std::string& root) {
  auto l = ListCommitted(Env::Default(), root);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? std::set<long>(l->begin(), l->end()) : std::set<long>();
}

// Steps of the "step-*" directories under root.
std::set<long> StepDirs(const std::string& root) {
  std::set<long> out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0) out.insert(std::stol(n.substr(5)));
  }
  return out;
}

// After an interrupted save of step `cur`: `committed` maps the steps committed
// before it (cur included if it was) to the attempt they hold; `allowed` lists
// what cur may be now (an attempt, or kAbsent). Checks that the newest committed
// step is cur or the newest before it, that only steps committed before or cur
// are listed, that each verifies in full, and that cur and the previous newest
// step hold exactly the bytes of one attempt.
// Returns cur's state (attempt or kAbsent).
int CheckAfterInterruption(const std::string& root, long cur, const std::map<long, int>& committed,
                           const std::set<int>& allowed, const std::string& ctx) {
  SCOPED_TRACE(ctx);
  long prev = -1;
  for (const auto& [s, a] : committed) {
    if (s < cur) prev = s;
  }
  std::vector<std::string> skipped;
  auto listed = ListCommitted(Env::Default(), root, &skipped);
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (!listed.ok()) return kAbsent;
  const std::set<long> ls(listed->begin(), listed->end());
  auto newest = NewestCommitted(Env::Default(), root);
  EXPECT_TRUE(newest.ok());
  EXPECT_TRUE(newest.ok() && (*newest == prev || *newest == cur))
      << "newest committed step " << (newest.ok() ? *newest : -2) << ", expected " << prev << " or "
      << cur;
  EXPECT_EQ(ls.count(prev), 1u) << "the previous newest step " << prev << " vanished";
  int state = kAbsent;
  for (long s : ls) {
    EXPECT_TRUE(committed.count(s) || s == cur) << "unexpected committed step " << s;
    Status st = VerifyStep(Env::Default(), root, s, /*full=*/true);
    EXPECT_TRUE(st.ok()) << "listed step " << s << " does not verify: " << st.ToString();
    if (s != cur) {
      // Older steps are only deleted by the writer, never modified: VerifyStep
      // suffices for them; the previous newest is also compared byte by byte.
      auto it = committed.find(s);
      if (s == prev && it != committed.end()) {
        const std::string why = DataMismatch(root, s, it->second);
        EXPECT_EQ(why, "") << "step " << s;
      }
      continue;
    }
    // cur is committed: it must hold one allowed attempt entirely.
    std::string whys;
    for (int a : allowed) {
      if (a == kAbsent) continue;
      const std::string why = DataMismatch(root, s, a);
      if (why.empty()) {
        state = a;
        break;
      }
      whys += " attempt " + std::to_string(a) + ": " + why + ";";
    }
    EXPECT_NE(state, kAbsent) << "committed step " << s
                              << " holds none of the allowed attempts:" << whys;
    if (state == kAbsent) state = -2;  // committed, but wrong: already failed
  }
  EXPECT_EQ(allowed.count(state), 1u)
      << "step " << cur << " is in state " << state << " (attempt, or -1 = not committed)";
  return state;
}

// After a completed save of step `cur`: retention kept exactly the two newest
// committed steps and their dependency closure, and left no other step directory.
// `*retained` (if not null) gets the number of steps kept.
void CheckRetained(const std::string& root, long cur, long prev, size_t* retained = nullptr) {
  std::set<long> want = {cur};
  if (prev >= 0) want.insert(prev);
  std::vector<long> todo(want.begin(), want.end());
  while (!todo.empty()) {
    long s = todo.back();
    todo.pop_back();
    auto m = ReadCommitted(Env::Default(), root, s);
    ASSERT_TRUE(m.ok()) << "dependency " << s << ": " << m.status().ToString();
    for (long d : m->depends) {
      ASSERT_LT(d, s);
      if (want.insert(d).second) todo.push_back(d);
    }
  }
  if (retained != nullptr) *retained = want.size();
  EXPECT_EQ(Listed(root), want) << "after step " << cur;
  EXPECT_EQ(StepDirs(root), want) << "uncommitted or unretained step directories remain";
}

// The counting run of one save: op counts at phase ends and the numbers of the
// operations that decide the outcome.
struct Plan {
  uint64_t total = 0;
  std::map<std::string, uint64_t> marks;
  uint64_t uncommit = 0;         // WriteShard's removal of an existing COMMIT (0: none)
  uint64_t manifest_rename = 0;  // MANIFEST.tmp -> MANIFEST
  uint64_t commit_rename = 0;    // COMMIT.tmp -> COMMIT: the commit point
  std::vector<std::string> trace;
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Plan CountOps(const std::string& root, int i, int attempt) {
  Plan p;
  const std::string copy = root + ".count";
  fs::remove_all(copy);
  fs::copy(root, copy, fs::copy_options::recursive);
  FaultEnv env(Env::Default());
  env.set_trace(true);
  Status st =
      SaveStep(&env, copy, i, attempt, [&](const char* phase) { p.marks[phase] = env.ops(); });
  EXPECT_TRUE(st.ok()) << "counting run of step " << StepOf(i) << ": " << st.ToString();
  p.total = env.ops();
  p.trace = env.trace();
  const std::string step_dir = StepDir(copy, StepOf(i));
  for (size_t k = 0; k < p.trace.size(); ++k) {
    const std::string& t = p.trace[k];
    if (t.find(" Rename ") != std::string::npos) {
      if (EndsWith(t, step_dir + "/COMMIT")) p.commit_rename = k + 1;
      if (EndsWith(t, step_dir + "/MANIFEST")) p.manifest_rename = k + 1;
    }
    if (p.uncommit == 0 && t.find(" RemoveFile ") != std::string::npos &&
        EndsWith(t, step_dir + "/COMMIT")) {
      p.uncommit = k + 1;
    }
  }
  fs::remove_all(copy);
  return p;
}

std::string PhaseOf(const Plan& p, uint64_t k) {
  if (k <= p.marks.at("shard0")) return "shard0";
  if (k <= p.marks.at("shard1")) return "shard1";
  if (k <= p.manifest_rename) return "manifest";
  if (k <= p.commit_rename) return "commit";
  if (k <= p.marks.at("commit")) return "post-commit";
  return "retain";
}

// What the interrupted step may be after a fault at op k of `p`, which saves
// attempt `attempt` over `old` (the attempt committed before, or kAbsent).
// Directory operations before op k happened, op k itself may or may not have
// (kills tear it; errors prevent it), and nothing after it happened.
std::set<int> Allowed(const Plan& p, uint64_t k, int old, int attempt, bool error) {
  auto state_after = [&](uint64_t done) {  // state once ops 1..done happened
    if (done >= p.commit_rename) return attempt;
    if (p.uncommit != 0 && done >= p.uncommit) return kAbsent;
    return old;
  };
  std::set<int> out = {state_after(k - 1)};
  if (!error) out.insert(state_after(k));
  return out;
}

struct PhaseTally {
  int n = 0, old_state = 0, new_state = 0;
};

std::string CrashRoot() {
  const char* env = std::getenv("BW_CRASH_TEST_DIR");
  std::string base = env != nullptr ? env : "";
  // tmpfs keeps the ~20k fsyncs cheap; SIGKILL does not lose the page cache and
  // power loss is simulated by FaultEnv, so the file system does not matter.
  if (base.empty()) base = fs::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string tmpl = base + "/bw_crash_test.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// Runs SaveStep(i, attempt) in a child process armed to die at op k; true if it
// died by SIGKILL as it must.
::testing::AssertionResult KillDuringSave(const std::string& root, int i, int attempt,
                                          FaultEnv::Mode mode, uint64_t k) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) return ::testing::AssertionFailure() << "fork: " << std::strerror(errno);
  if (pid == 0) {
    ::alarm(60);  // a hung writer dies by SIGALRM, failing the check below
    FaultEnv env(Env::Default(), kSeed + static_cast<uint64_t>(i) * 31 + attempt);
    env.Arm(mode, k);
    Status st = SaveStep(&env, root, i, attempt);
    ::_exit(st.ok() ? 0 : 3);
  }
  int wstatus = 0;
  if (::waitpid(pid, &wstatus, 0) != pid) {
    return ::testing::AssertionFailure() << "waitpid: " << std::strerror(errno);
  }
  if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the writer was not killed at the fault point (exit status "
         << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1) << ", signal "
         << (WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0) << ")";
}

TEST(CrashTest, KillWriterAtRandomPointsAlwaysRestoresNewestCompleteStep) {
  const std::string dir = CrashRoot();
  ASSERT_FALSE(dir.empty());
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  const std::string root = dir + "/ckpt";
  ASSERT_TRUE(Env::Default()->MkdirAll(root).ok());

  std::map<long, int> committed;  // committed step -> the attempt it holds
  ASSERT_TRUE(SaveStep(Env::Default(), root, 0, 1).ok());
  committed[0] = 1;
  ASSERT_EQ(Listed(root), std::set<long>{0});

  std::mt19937_64 rng(kSeed);
  int kills = 0, power_losses = 0, errors = 0, overwrites = 0;
  uint64_t min_ops = ~0ull, max_ops = 0;
  std::map<std::string, PhaseTally> by_phase;
  std::map<int, int> overwrite_outcomes;  // state after an overwrite kill -> count
  size_t max_retained = 0;                // steps kept by Retain(keep 2) + dependencies
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= kSteps && !::testing::Test::HasFailure(); ++i) {
    const long step = StepOf(i);
    const FaultEnv::Mode mode = i % 6 == 0   ? FaultEnv::Mode::kError
                                : i % 3 == 1 ? FaultEnv::Mode::kPowerLoss
                                             : FaultEnv::Mode::kKill;
    const bool error = mode == FaultEnv::Mode::kError;
    // First save of the step (attempt 0), interrupted.
    const Plan plan = CountOps(root, i, 0);
    ASSERT_EQ(plan.uncommit, 0u);
    ASSERT_GT(plan.manifest_rename, plan.marks.at("shard1"));
    ASSERT_GT(plan.commit_rename, plan.manifest_rename);
    min_ops = std::min(min_ops, plan.total);
    max_ops = std::max(max_ops, plan.total);
    const uint64_t k = 1 + rng() % plan.total;
    const std::string phase = PhaseOf(plan, k);
    const std::string ctx = "step " + std::to_string(step) + ": " +
                            (error                                ? "I/O error"
                             : mode == FaultEnv::Mode::kPowerLoss ? "power loss"
                                                                  : "kill") +
                            " at op " + std::to_string(k) + " of " + std::to_string(plan.total) +
                            " (" + plan.trace[k - 1] + "), phase " + phase;
    if (error) {
      FaultEnv env(Env::Default(), kSeed + i);
      env.Arm(FaultEnv::Mode::kError, k);
      Status st = SaveStep(&env, root, i, 0);
      ASSERT_FALSE(st.ok()) << ctx << ": an injected I/O error was not reported";
      ASSERT_TRUE(env.error_fired()) << ctx;
      ++errors;
    } else {
      ASSERT_TRUE(KillDuringSave(root, i, 0, mode, k)) << ctx;
      ++kills;
      if (mode == FaultEnv::Mode::kPowerLoss) ++power_losses;
    }
    const int state =
        CheckAfterInterruption(root, step, committed, Allowed(plan, k, kAbsent, 0, error), ctx);
    PhaseTally& tally = by_phase[phase];
    ++tally.n;
    ++(state == kAbsent ? tally.old_state : tally.new_state);

    // Restart: the writer saves the step again (recomputed: attempt 1), to completion.
    const long prev = committed.rbegin()->first;
    Status st = SaveStep(Env::Default(), root, i, 1);
    ASSERT_TRUE(st.ok()) << ctx << ": re-running the save failed: " << st.ToString();
    size_t retained = 0;
    CheckRetained(root, step, prev, &retained);
    max_retained = std::max(max_retained, retained);
    committed[step] = 1;
    const std::set<long> kept = Listed(root);
    std::erase_if(committed, [&](const auto& e) { return kept.count(e.first) == 0; });
    ASSERT_EQ(DataMismatch(root, step, 1), "");

    if (i % kOverwriteEvery != 2) continue;
    // Overwrite the committed step (attempt 2), killed part-way, then complete it
    // (attempt 3).
    const Plan oplan = CountOps(root, i, 2);
    ASSERT_GT(oplan.uncommit, 0u) << "WriteShard did not remove the existing COMMIT";
    const uint64_t ok = 1 + rng() % oplan.total;
    const FaultEnv::Mode omode = i % 8 == 2 ? FaultEnv::Mode::kPowerLoss : FaultEnv::Mode::kKill;
    const std::string octx = "overwrite of step " + std::to_string(step) + ": kill at op " +
                             std::to_string(ok) + " of " + std::to_string(oplan.total) + " (" +
                             oplan.trace[ok - 1] + ")";
    ASSERT_TRUE(KillDuringSave(root, i, 2, omode, ok)) << octx;
    ++kills;
    ++overwrites;
    if (omode == FaultEnv::Mode::kPowerLoss) ++power_losses;
    const int ostate =
        CheckAfterInterruption(root, step, committed, Allowed(oplan, ok, 1, 2, false), octx);
    ++overwrite_outcomes[ostate];
    st = SaveStep(Env::Default(), root, i, 3);
    ASSERT_TRUE(st.ok()) << octx << ": re-running the save failed: " << st.ToString();
    CheckRetained(root, step, prev);
    committed[step] = 3;
    ASSERT_EQ(DataMismatch(root, step, 3), "");
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(kills, kMinKills);
  EXPECT_GE(errors, 1);

  std::string phases;
  for (const char* p : {"shard0", "shard1", "manifest", "commit", "post-commit", "retain"}) {
    const PhaseTally& t = by_phase[p];
    phases += std::string(phases.empty() ? "" : "; ") + p + " " + std::to_string(t.n) +
              " (previous " + std::to_string(t.old_state) + ", new " + std::to_string(t.new_state) +
              ")";
  }
  std::printf(
      "crash test: %d kill points (%d with unsynced-data loss, %d while overwriting a committed "
      "step) + %d I/O-error points, %llu..%llu mutating ops per save, %.1f s. Newest step after "
      "a fault in the first save, by phase: %s. After an overwrite kill: old bytes %d, "
      "uncommitted %d, new bytes %d. Retain(keep 2) kept up to %zu steps (dependencies)\n",
      kills, power_losses, overwrites, errors, static_cast<unsigned long long>(min_ops),
      static_cast<unsigned long long>(max_ops), wall_s, phases.c_str(), overwrite_outcomes[1],
      overwrite_outcomes[kAbsent], overwrite_outcomes[2], max_retained);
  ::testing::Test::RecordProperty("kill_points", kills);
  ::testing::Test::RecordProperty("error_points", errors);
}

}  // namespace
}  // namespace bulwark::ckpt
