// Shared helpers of the end-to-end tests (test-only, header-only): time, waiting for
// file contents, the job spec writer and the check that no process of a job survived.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/proc.h"

namespace bulwark::e2e {

namespace fs = std::filesystem;

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Polls `path` until it contains `text` or timeout_s passes; returns whether it did.
inline bool WaitForFileText(const std::string& path, const std::string& text, double timeout_s) {
  double deadline = Now() + timeout_s;
  while (Now() < deadline) {
    std::ifstream f(path);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (s.find(text) != std::string::npos) return true;
    PollReadable({}, 0.05);
  }
  return false;
}

// Runs argv to completion (bounded by timeout_s; killed after that) and returns its
// exit code (-1 if it had to be killed or could not start) and combined output.
inline std::pair<int, std::string> RunProcess(const std::vector<std::string>& argv,
                                              const std::map<std::string, std::string>& extra_env,
                                              double timeout_s) {
  SpawnOptions so;
  so.argv = argv;
  so.env = CurrentEnv();
  for (const auto& [k, v] : extra_env) so.env[k] = v;
  auto c = Spawn(so);
  if (!c.ok()) return {-1, c.status().ToString()};
  std::string out;
  bool eof = false;
  double deadline = Now() + timeout_s;
  while (!eof && Now() < deadline) {
    PollReadable({c->output.get()}, 0.2);
    out += ReadAvailable(c->output.get(), &eof);
  }
  auto e = WaitExit(c->pid, std::max(1.0, deadline - Now()));
  if (!e) {
    TerminateGroup(c->pid, c->pgid, 1);
    return {-1, out + "\n(killed after " + std::to_string(timeout_s) + " s)"};
  }
  return {e->code, out};
}

// Per-test scratch directory, tag (found in every process of the job, for the
// leftover check) and job spec writer.
class E2EBase : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = BW_TEST_SOURCE_DIR;
    build_ = BW_TEST_BUILD_DIR;
    ASSERT_FALSE(src_.empty());
    ASSERT_FALSE(build_.empty());
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tag_ = std::string("e2e-") + info->name() + "-" + std::to_string(getpid());
    dir_ = "/tmp/bw-" + tag_;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Writes a spec for the tiny trainer; `extra` is appended verbatim (YAML),
  // `ckpt_extra` inside the checkpoint mapping and `env_extra` inside env (each
  // ", key: value..." or empty).
  std::string WriteSpec(const std::string& name, int nodes, int procs, int steps,
                        const std::string& extra, const std::string& ckpt_extra = "",
                        const std::string& env_extra = "") {
    std::ostringstream y;
    y << "name: " << name << "\n"
      << "nodes: " << nodes << "\nprocsPerNode: " << procs << "\n"
      << "command: [\"/usr/bin/python3\", \"" << src_ << "/tests/trainers/tiny_trainer.py\"]\n"
      << "args: [\"--steps\", \"" << steps << "\"]\n"
      << "env: {BW_E2E_TAG: \"" << tag_ << "\"" << env_extra
      << (std::string(BW_TEST_PRELOAD).empty()
              ? std::string()
              : ", LD_PRELOAD: \"" + std::string(BW_TEST_PRELOAD) +
                    "\", ASAN_OPTIONS: \"detect_leaks=0:verify_asan_link_order=0\"")
      << "}\n"
      << "checkpoint: {dir: " << dir_ << "/ckpt, intervalSteps: 10, keep: 3" << ckpt_extra << "}\n"
      << extra;
    std::string path = dir_ + "/job.yaml";
    std::ofstream(path) << y.str();
    return path;
  }

  // Processes whose environment or command line mentions this test's tag or dir.
  std::vector<int> Leftovers() {
    std::vector<int> out;
    DIR* d = opendir("/proc");
    if (!d) return out;
    while (dirent* de = readdir(d)) {
      int pid = atoi(de->d_name);
      if (pid <= 0 || pid == getpid()) continue;
      for (const char* f : {"/environ", "/cmdline"}) {
        std::ifstream in(std::string("/proc/") + de->d_name + f, std::ios::binary);
        std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (s.find(tag_) != std::string::npos && ProcState(pid) != 'Z') {
          out.push_back(pid);
          break;
        }
      }
    }
    closedir(d);
    return out;
  }

  void ExpectNoLeftovers() {
    double deadline = Now() + 10;
    std::vector<int> left = Leftovers();
    while (!left.empty() && Now() < deadline) {
      PollReadable({}, 0.05);
      left = Leftovers();
    }
    EXPECT_TRUE(left.empty()) << left.size() << " processes of the job survived, first pid "
                              << (left.empty() ? 0 : left[0]);
  }

  // The report's first incident of `kind`; null when there is none (or no report).
  static const Json* FirstIncident(const Json& r, const std::string& kind) {
    if (!r.is_object() || !r.contains("incidents") || !r["incidents"].is_array()) return nullptr;
    for (const auto& x : r["incidents"]) {
      if (x.is_object() && x.value("kind", "") == kind) return &x;
    }
    return nullptr;
  }

  std::string src_, build_, tag_, dir_;
};

constexpr const char* kFastPolicy =
    "faultPolicy: {restartBudget: 5, backoff: {baseSeconds: 0.1, capSeconds: 1}, "
    "hangTimeout: {floorSeconds: 1.5, multiplier: 5, startupSeconds: 60}, "
    "heartbeat: {intervalSeconds: 0.5, misses: 3}, stopGraceSeconds: 1, spareNodes: 1}\n";

}  // namespace bulwark::e2e
