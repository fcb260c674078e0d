// The fixture of the in-process recovery end-to-end tests (test-only, header-only):
// runs `bulwark run` to completion and reads which processes each incident kept.
#pragma once

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "e2e_util.h"

namespace bulwark::e2e {

class InProcessE2E : public E2EBase {
 protected:
  // Runs `bulwark run SPEC` to completion; returns (exit code, output, report).
  // `extra_args` go after the spec (e.g. --machines).
  std::tuple<int, std::string, Json> Run(const std::string& spec, double timeout_s = 300,
                                         const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> argv = {
        build_ + "/bin/bulwark", "run",       spec,          "--report",
        dir_ + "/report.json",   "--run-dir", dir_ + "/run", "--store",
        dir_ + "/bulwark.db"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    auto [code, out] = RunProcess(argv, {}, timeout_s);
    EXPECT_NE(code, -1) << "bulwark run did not finish in " << timeout_s << " s:\n" << out;
    std::ifstream rf(dir_ + "/report.json");
    std::stringstream ss;
    ss << rf.rdbuf();
    return {code, out, Json::parse(ss.str(), nullptr, false)};
  }

  // The tiny trainer's step log: one entry per step run ("rank step pid [code]").
  struct StepRun {
    int rank = -1;
    long step = -1;
    long pid = -1;
    std::string code;
  };
  static std::vector<StepRun> ReadStepLog(const std::string& log) {
    std::vector<StepRun> out;
    std::ifstream f(log);
    for (std::string line; std::getline(f, line);) {
      std::istringstream in(line);
      StepRun r;
      if (in >> r.rank >> r.step >> r.pid) {
        in >> r.code;
        out.push_back(r);
      }
    }
    return out;
  }
  // rank -> the pids that ran its steps.
  static std::map<int, std::set<long>> PidsByRank(const std::string& log) {
    std::map<int, std::set<long>> out;
    for (const StepRun& r : ReadStepLog(log)) out[r.rank].insert(r.pid);
    return out;
  }

  // `bulwark run SPEC` in the background: Start, then Finish for its outcome.
  struct Background {
    Child child;
    std::string out;
  };
  Background Start(const std::string& spec) {
    SpawnOptions so;
    so.argv = {build_ + "/bin/bulwark", "run",       spec,          "--report",
               dir_ + "/report.json",   "--run-dir", dir_ + "/run", "--store",
               dir_ + "/bulwark.db"};
    so.env = CurrentEnv();
    auto c = Spawn(so);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return Background{c.ok() ? std::move(*c) : Child{}, ""};
  }
  // Reads the job's output until `pred` holds on it or timeout_s passes.
  bool WaitOutput(Background& b, const std::function<bool(const std::string&)>& pred,
                  double timeout_s) {
    const double deadline = Now() + timeout_s;
    bool eof = false;
    while (!pred(b.out) && Now() < deadline && !eof) {
      PollReadable({b.child.output.get()}, 0.1);
      b.out += ReadAvailable(b.child.output.get(), &eof);
    }
    return pred(b.out);
  }
  // Reads the job's output until rank 0's step log reaches `step`.
  bool WaitForStep(Background& b, long step, double timeout_s) {
    return WaitOutput(
        b,
        [&](const std::string&) {
          for (const StepRun& r : ReadStepLog(dir_ + "/steps.log")) {
            if (r.rank == 0 && r.step >= step) return true;
          }
          return false;
        },
        timeout_s);
  }
  std::tuple<int, std::string, Json> Finish(Background& b, double timeout_s = 300) {
    WaitOutput(
        b, [](const std::string&) { return false; }, timeout_s);
    auto e = WaitExit(b.child.pid, 5);
    if (!e) {
      TerminateGroup(b.child.pid, b.child.pgid, 1);
      ADD_FAILURE() << "bulwark run did not finish:\n" << b.out;
      return {-1, b.out, Json()};
    }
    std::ifstream rf(dir_ + "/report.json");
    std::stringstream ss;
    ss << rf.rdbuf();
    return {e->code, b.out, Json::parse(ss.str(), nullptr, false)};
  }

  // The ranks an incident's report row says were kept and given new processes.
  static std::set<int> Ranks(const Json& inc, const char* key) {
    std::set<int> out;
    if (!inc.contains("processes") || !inc["processes"].contains(key)) return out;
    for (const Json& e : inc["processes"][key]) out.insert(e["rank"].get<int>());
    return out;
  }
};

}  // namespace bulwark::e2e
