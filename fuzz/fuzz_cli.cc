// The command line (cli/cli_main.h, bulwark::cli::Main): the input is split into argv
// words (on spaces and newlines) and run in process, as `bulwark` runs them. Only the
// commands that read and print run: argv[1] must be validate, render, sim, ckpt, get or
// describe, or start with '-' (--help, --version, a bad flag); no word may name a
// command that starts processes or talks to servers (run, operator, submit, chaos, top,
// update, logs, cancel), and no word may hold a '/' (paths stay inside the harness's
// scratch directory: `sim --json FILE` writes, `ckpt gc` deletes). The scratch directory
// holds the files the words can name: j.yaml (job spec), t.yaml (TrainJob), p.yaml
// (PyTorchJob), bad.yaml, s.yaml (a sim config of the same schema as
// examples/sim/one-job.yaml, scaled down to 12 nodes for 2 days with 30 times Llama 3's
// failure rates so that one `sim` input costs about a millisecond, not the example's
// 60), ck (a checkpoint root with committed steps, copied afresh from a template outside
// the scratch directory before every `ckpt` input, the only command that reads it);
// XDG_STATE_HOME points to its fuzz-cli-state, so get/describe see no store of this
// machine. After every input what it created (`sim --json FILE`, `--csv FILE`) is
// removed and a fixed file it overwrote is rewritten, so an input means the same thing
// whatever ran before it (and later inputs do not pay for validating earlier ones'
// output). Contracts checked beyond "no crash":
// the exit status is 0, 1 or 2, and nothing is written under XDG_STATE_HOME (get and
// describe only read stores).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cli/cli_main.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace fs = std::filesystem;
using bulwark::fuzz::Check;
using bulwark::fuzz::ScratchDir;

bool Allowed(const std::vector<std::string>& words) {
  if (words.empty()) return true;
  static const char* kFirst[] = {"validate", "render", "sim", "ckpt", "get", "describe"};
  bool first = words[0].rfind('-', 0) == 0;
  for (const char* w : kFirst) first = first || words[0] == w;
  if (!first) return false;
  static const char* kNever[] = {"run", "operator", "submit", "chaos",
                                 "top", "update",   "logs",   "cancel"};
  for (const std::string& w : words) {
    if (w.find('/') != std::string::npos) return false;
    for (const char* n : kNever) {
      if (w == n) return false;
    }
  }
  return true;
}

constexpr const char* kSimConfig = R"(sim: {days: 2, seed: 1, sampleMinutes: 60}
cluster:
  shape: {zones: 1, blocksPerZone: 1, racksPerBlock: 2, nodesPerRack: 6, gpusPerNode: 8,
          pools: {reserved: 1.0}, pricePerGpuHour: {reserved: 2.0}}
queues: [{name: pretrain, nominalGpus: {h100: 96}}]
strategies:
  bulwark:
    detectionSeconds: {crash: 5, hang: auto, nan: 5, hardware: 30}
    restartSeconds: 30
    checkpointIntervalSeconds: auto
    standby: 2
  baseline:
    detectionSeconds: {crash: 60, hang: 600, nan: 600, hardware: 600}
    restartSeconds: 253
    checkpointIntervalSeconds: 1800
workload:
  jobs:
    - {id: llm, queue: pretrain, nodes: 8, workHours: 40, stepSeconds: 10, strategy: bulwark}
failures: {preset: llama3, scale: 30, repairHours: 4}
)";

// The checkpoint root "ck" every `ckpt` input starts from: steps 1 and 2 committed (1
// rank), written once (the checkpoint engine fsyncs every file and directory: ~70 ms, most
// of a `ckpt` input's time) into a directory outside the scratch directory, where no
// input can name it, and copied (no fsync) into "ck" before each `ckpt` input.
fs::path& CheckpointTemplate() {
  static auto* path = new fs::path;
  return *path;
}

void WriteCheckpointTemplate() {
  CheckpointTemplate() = fs::path(ScratchDir("fuzz-cli-ck")) / "ck";
  bulwark::ckpt::Env* env = bulwark::ckpt::Env::Default();
  const std::string root = CheckpointTemplate().string();
  std::vector<uint8_t> bytes(100, 3);
  for (long step : {1, 2}) {
    bulwark::ckpt::Blob b{"state", bytes.data(), bytes.size()};
    Check(bulwark::ckpt::WriteShard(env, root, step, 0, 1, bulwark::ckpt::BlobsToTensors({b}), {})
              .ok(),
          "harness: WriteShard");
    Check(bulwark::ckpt::Commit(env, root, step, 1).ok(), "harness: Commit");
  }
}

void WriteCheckpoints() {
  std::error_code ec;
  fs::remove_all("ck", ec);
  fs::copy(CheckpointTemplate(), "ck", fs::copy_options::recursive, ec);
  Check(!ec, "harness: copy the checkpoint template", ec.message());
}

// XDG_STATE_HOME of the commands: a name of the harness's own, since it is emptied.
constexpr const char* kStateDir = "fuzz-cli-state";

// The scratch directory's fixed files: name -> content.
std::map<std::string, std::string>& FixedFiles() {
  static auto* files = new std::map<std::string, std::string>;
  return *files;
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The names in the working directory.
std::set<std::string> Listing() {
  std::set<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(".", ec)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// Removes what an input created in the working directory (names not in `before`) and
// rewrites a fixed file it changed. Only what the input made is removed: the replay
// build runs in its binaries' directory.
void RestoreScratch(const std::set<std::string>& before) {
  std::error_code ec;
  for (const std::string& name : Listing()) {
    if (!before.count(name) && !FixedFiles().count(name)) fs::remove_all(name, ec);
  }
  for (const auto& [name, content] : FixedFiles()) {
    if (fs::is_regular_file(name, ec) && ReadAll(name) == content) continue;
    fs::remove_all(name, ec);
    std::ofstream out(name, std::ios::binary | std::ios::trunc);
    out << content;
    Check(static_cast<bool>(out), "harness: write", name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fs::path src = BULWARK_SOURCE_DIR;
  const std::pair<const char*, fs::path> files[] = {
      {"j.yaml", src / "examples/pytorch-ddp/job.yaml"},
      {"t.yaml", src / "src/trainjob/testdata/trainjob-full.yaml"},
      {"p.yaml", src / "src/trainjob/testdata/pytorchjob-mnist.yaml"},
      {"bad.yaml", src / "src/spec/testdata/bad.yaml"}};
  for (const auto& [name, from] : files) {
    FixedFiles()[name] = ReadAll(from);
    Check(!FixedFiles()[name].empty(), "harness: read", from.string());
  }
  FixedFiles()["s.yaml"] = kSimConfig;
  WriteCheckpointTemplate();
  RestoreScratch(Listing());
  std::error_code ec;
  fs::remove_all(kStateDir, ec);  // the harness's own: emptied at every start
  fs::create_directories(kStateDir);
  setenv("XDG_STATE_HOME", (fs::current_path() / kStateDir).c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> words;
  std::string w;
  for (char c : text) {
    if (c == ' ' || c == '\n') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) words.push_back(w);
  if (words.size() > 32 || !Allowed(words)) return -1;  // -1: not added to the corpus
  if (!words.empty() && words[0] == "ckpt") WriteCheckpoints();
  std::vector<std::string> store = {"bulwark"};
  store.insert(store.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (std::string& s : store) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::set<std::string> before = Listing();
  int rc;
  {
    bulwark::fuzz::Silence quiet(/*out=*/true, /*err=*/true);
    rc = bulwark::cli::Main(static_cast<int>(argv.size()) - 1, argv.data());
  }
  RestoreScratch(before);
  Check(rc == 0 || rc == 1 || rc == 2, "exit status other than 0, 1, 2", std::to_string(rc));
  Check(fs::is_empty(kStateDir), "a command wrote under XDG_STATE_HOME");
  return 0;
}
