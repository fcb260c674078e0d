// The fixture of the in-process recovery end-to-end tests (test-only, header-only):
// runs `bulwark run` to completion and reads which processes each incident kept.
#pragma once

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "e2e_util.h"

namespace bulwark::e2e {

class InProcessE2E : public E2EBase {
 protected:
  // Runs `bulwark run SPEC` to completion; returns (exit code, output, report).
  std::tuple<int, std::string, Json> Run(const std::string& spec, double timeout_s = 300) {
    auto [code, out] = RunProcess({build_ + "/bin/bulwark", "run", spec, "--report",
                                   dir_ + "/report.json", "--run-dir", dir_ + "/run", "--store",
                                   dir_ + "/bulwark.db"},
                                  {}, timeout_s);
    EXPECT_NE(code, -1) << "bulwark run did not finish in " << timeout_s << " s:\n" << out;
    std::ifstream rf(dir_ + "/report.json");
    std::stringstream ss;
    ss << rf.rdbuf();
    return {code, out, Json::parse(ss.str(), nullptr, false)};
  }

  // rank -> the pids that ran its steps, from the trainer's step log ("rank step pid").
  std::map<int, std::set<long>> PidsByRank(const std::string& log) {
    std::map<int, std::set<long>> out;
    std::ifstream f(log);
    int rank;
    long step, pid;
    while (f >> rank >> step >> pid) out[rank].insert(pid);
    return out;
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
