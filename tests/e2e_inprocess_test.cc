// End-to-end: in-process recovery (docs/sdk.md "Generations") with the real `bulwark`
// binary, real agents and real trainers. Each fault kind is recovered with the
// surviving ranks' processes unchanged, which the trainers' step logs and the report
// prove; an unmodified script recovers through the warm pool; nothing is left behind.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "e2e_inprocess_util.h"

namespace bulwark {
namespace {

using e2e::InProcessE2E;
using e2e::RunProcess;

TEST_F(InProcessE2E, EveryFaultKindKeepsTheSurvivingRanksProcesses) {
  // 2 nodes x 2 ranks of the tiny trainer under bulwark.run, a memory snapshot every
  // step; a crash, a hang, a NaN and a node loss. The tiny trainer's ranks do not wait
  // for each other, so the others run on while the hung rank is found (2 s, 65 steps):
  // the faults are 70+ steps apart. Heartbeats may miss 10 beats: on a loaded CI machine
  // (or under ASan) 1.5 s without one is no proof of a lost node.
  const std::string log = dir_ + "/steps.log";
  auto [code, out, report] = Run(WriteSpec(
      "inproc", 2, 2, 330,
      "faultPolicy: {restartBudget: 6, backoff: {baseSeconds: 0.1, capSeconds: 1}, "
      "hangTimeout: {floorSeconds: 2, multiplier: 5, startupSeconds: 60}, "
      "heartbeat: {intervalSeconds: 0.5, misses: 10}, stopGraceSeconds: 1, spareNodes: 1, "
      "diagnoseSuspectNodes: false}\n"
      "chaos:\n"
      "  - {kind: kill_rank, atStep: 30, rank: 1}\n"
      "  - {kind: hang_rank, atStep: 80, rank: 2}\n"
      "  - {kind: nan_loss, atStep: 200, rank: 0}\n"
      "  - {kind: kill_agent, atStep: 270, node: 1}\n",
      ", memorySlots: 4",
      ", TINY_IN_PROCESS: \"1\", TINY_SAVE_EVERY_STEP: \"1\", TINY_STEP_TIME: \"0.03\", "
      "TINY_STEP_LOG: \"" +
          log + "\""));
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["phase"], "Succeeded");
  EXPECT_EQ(report["last_step"], 330);
  const Json& incs = report["incidents"];
  std::vector<std::string> kinds;
  for (const Json& i : incs) {
    if (!i.value("secondary", false)) kinds.push_back(i["kind"]);
  }
  ASSERT_EQ(kinds, (std::vector<std::string>{"crash", "hang", "nan", "node_lost"}))
      << report.dump(2) << out;
  const std::vector<std::set<int>> replaced = {{1}, {2}, {}, {2, 3}};
  for (size_t i = 0; i < 4; ++i) {
    const Json& inc = incs[i];
    ASSERT_TRUE(inc.contains("processes")) << inc.dump(2);
    EXPECT_EQ(inc["processes"]["in_process"], true) << inc.dump(2);
    EXPECT_EQ(Ranks(inc, "replaced_pids"), replaced[i]) << inc.dump(2);
    std::set<int> kept;
    for (int r = 0; r < 4; ++r) {
      if (!replaced[i].count(r)) kept.insert(r);
    }
    EXPECT_EQ(Ranks(inc, "kept_pids"), kept) << inc.dump(2);
    // Every new process came from a warm rank or was started anew; none is a survivor.
    for (const Json& e : inc["processes"].value("replaced_pids", Json::array())) {
      EXPECT_NE(e["pid"], e["old_pid"]);
    }
  }
  // The step log agrees: rank 0 ran every step in one process; rank 1 in two (the
  // crash), rank 2 in three (the hang, the lost node), rank 3 in two (the lost node).
  const auto pids = PidsByRank(log);
  EXPECT_EQ(pids.at(0).size(), 1u);
  EXPECT_EQ(pids.at(1).size(), 2u);
  EXPECT_EQ(pids.at(2).size(), 3u);
  EXPECT_EQ(pids.at(3).size(), 2u);
  // Every generation restored the agreed step (the tiny trainer exits 3 otherwise) —
  // from memory, or from disk when a loaded machine let the peer replicas fall behind
  // (E2E.ReplacementNodeRestoresFromPeerMemory covers the peer path at a slower pace).
  EXPECT_NE(out.find("resumed from step"), std::string::npos);
  ExpectNoLeftovers();
}

TEST_F(InProcessE2E, AnUnmodifiedScriptRestartsThroughTheWarmPool) {
  // No SDK: every rank restarts, but the new processes are warm ranks the agents
  // started while the first attempt ran (after 5 s of rank start-up).
  std::string spec = WriteSpec("plainwarm", 2, 2, 1, e2e::kFastPolicy);
  {
    std::ifstream in(spec);
    std::string y((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    y.replace(y.find("tests/trainers/tiny_trainer.py"), 30, "tests/trainers/plain_loop.py");
    y.replace(y.find("args: [\"--steps\", \"1\"]"), 22,
              "args: [\"--seconds\", \"12\", \"--crash-after\", \"8\"]");
    std::ofstream(spec) << y;
  }
  auto [code, out, report] = Run(spec);
  ASSERT_EQ(code, 0) << out;
  const Json& incs = report["incidents"];
  ASSERT_GE(incs.size(), 1u) << report.dump(2);
  const Json& p = incs[0]["processes"];
  EXPECT_EQ(p["in_process"], false) << p.dump(2);
  ASSERT_EQ(p["replaced_pids"].size(), 4u) << p.dump(2);
  for (const Json& e : p["replaced_pids"]) EXPECT_EQ(e["how"], "warm") << p.dump(2);
  EXPECT_NE(out.find("0 kept, 2 from the warm pool, 0 new"), std::string::npos) << out;
  ExpectNoLeftovers();
}

// The spec of the hot-update tests: 2 nodes x 2 ranks of the tiny trainer under
// bulwark.run, memory snapshots every step, `env_extra` added to its environment. The
// tiny trainer's ranks do not wait for each other, and on a loaded machine they drift
// apart by more than 4 steps (12 were seen beside two fuzzers): 16 memory slots keep a
// step every rank holds, so the update resumes from memory, not from the disk's step.
std::string UpdateSpecText(const std::string& src, const std::string& dir, const std::string& tag,
                           const std::string& env_extra) {
  std::ostringstream y;
  y << "name: hotupd\nnodes: 2\nprocsPerNode: 2\n"
    << "command: [\"/usr/bin/python3\", \"" << src << "/tests/trainers/tiny_trainer.py\"]\n"
    << "args: [\"--steps\", \"400\"]\n"
    << "env: {BW_E2E_TAG: \"" << tag << "\", TINY_IN_PROCESS: \"1\", TINY_SAVE_EVERY_STEP: \"1\", "
    << "TINY_STEP_TIME: \"0.03\", TINY_STEP_LOG: \"" << dir << "/steps.log\""
    << (std::string(BW_TEST_PRELOAD).empty()
            ? std::string()
            : ", LD_PRELOAD: \"" + std::string(BW_TEST_PRELOAD) +
                  "\", ASAN_OPTIONS: \"detect_leaks=0:verify_asan_link_order=0\"")
    << env_extra << "}\n"
    << "checkpoint: {dir: " << dir << "/ckpt, intervalSteps: 10, keep: 3, memorySlots: 16}\n"
    << "faultPolicy: {restartBudget: 4, backoff: {baseSeconds: 0.1, capSeconds: 1}, "
       "hangTimeout: {floorSeconds: 3, multiplier: 5, startupSeconds: 60}, "
       "heartbeat: {intervalSeconds: 0.5, misses: 10}, stopGraceSeconds: 1, spareNodes: 1}\n";
  return y.str();
}

TEST_F(InProcessE2E, HotUpdateSwitchesCodeAtAStepBoundary) {
  const std::string spec = dir_ + "/job.yaml";
  std::ofstream(spec) << UpdateSpecText(src_, dir_, tag_, ", TINY_CODE: \"v1\"");
  Background job = Start(spec);
  ASSERT_TRUE(WaitForStep(job, 100, 120)) << job.out;
  const std::string next = dir_ + "/job-v2.yaml";
  std::ofstream(next) << UpdateSpecText(src_, dir_, tag_, ", TINY_CODE: \"v2\"");
  auto [rc, text] = RunProcess(
      {build_ + "/bin/bulwark", "update", next, "--run-dir", dir_ + "/run", "--verify-steps", "30"},
      {}, 30);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("update 1 accepted (env)"), std::string::npos) << text;
  auto [code, out, report] = Finish(job);
  ASSERT_EQ(code, 0) << out;
  ASSERT_TRUE(report.contains("updates")) << report.dump(2);
  const Json& u = report["updates"][0];
  EXPECT_EQ(u["result"], "succeeded") << u.dump(2);
  EXPECT_EQ(u["fields"], "env");
  EXPECT_EQ(report["incidents"].size(), 0u) << report.dump(2);  // no fault, no restart charged
  EXPECT_EQ(report["restarts"], 0);
  EXPECT_NE(out.find("UpdateApplied"), std::string::npos) << out;
  EXPECT_NE(out.find("UpdateSucceeded"), std::string::npos) << out;
  // No agent was replaced: no node was lost or started after the first ones.
  EXPECT_EQ(out.find("NodeLost"), std::string::npos) << out;
  EXPECT_EQ(out.find("node-3"), std::string::npos) << out;
  // Every rank ran v1, then v2 from the newest step every rank held in memory (the step
  // continues: the tiny trainer's ranks drift apart by a step or two, DDP ranks would not),
  // each version in one process.
  std::map<int, long> last_v1, first_v2;
  std::map<int, std::set<long>> pids_v1, pids_v2;
  for (const StepRun& r : ReadStepLog(dir_ + "/steps.log")) {
    if (r.code == "v1") {
      last_v1[r.rank] = std::max(last_v1[r.rank], r.step);
      pids_v1[r.rank].insert(r.pid);
    } else {
      ASSERT_EQ(r.code, "v2");
      if (!first_v2.count(r.rank)) first_v2[r.rank] = r.step;
      pids_v2[r.rank].insert(r.pid);
    }
  }
  // The ranks drift apart (see UpdateSpecText), so the resume step is the newest one
  // every rank held: near the slowest rank's last v1 step.
  long slowest_v1 = -1;
  for (const auto& [rank, step] : last_v1) {
    slowest_v1 = slowest_v1 < 0 ? step : std::min(slowest_v1, step);
  }
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(first_v2.count(rank)) << "rank " << rank << " never ran v2";
    EXPECT_EQ(first_v2[rank], first_v2[0]) << "rank " << rank << ": one resume step for all";
    EXPECT_GE(first_v2[rank], slowest_v1 - 8) << "rank " << rank;
    EXPECT_LE(first_v2[rank], last_v1[rank] + 1) << "rank " << rank;
    EXPECT_EQ(pids_v1[rank].size(), 1u);
    EXPECT_EQ(pids_v2[rank].size(), 1u);
  }
  EXPECT_EQ(report["last_step"], 400);
  ExpectNoLeftovers();
}

TEST_F(InProcessE2E, CrashingUpdateIsRolledBack) {
  const std::string spec = dir_ + "/job.yaml";
  std::ofstream(spec) << UpdateSpecText(src_, dir_, tag_, ", TINY_CODE: \"v1\"");
  Background job = Start(spec);
  ASSERT_TRUE(WaitForStep(job, 100, 120)) << job.out;
  // Bad input first: a change that cannot be applied in place names the field and why.
  std::string bad = UpdateSpecText(src_, dir_, tag_, ", TINY_CODE: \"v1\"");
  bad.replace(bad.find("nodes: 2"), 8, "nodes: 3");
  std::ofstream(dir_ + "/job-bad.yaml") << bad;
  auto [rc_bad, text_bad] = RunProcess(
      {build_ + "/bin/bulwark", "update", dir_ + "/job-bad.yaml", "--run-dir", dir_ + "/run"}, {},
      30);
  EXPECT_EQ(rc_bad, 2) << text_bad;
  EXPECT_NE(text_bad.find("nodes: 2 -> 3 cannot change in place"), std::string::npos) << text_bad;
  auto [rc_same, text_same] =
      RunProcess({build_ + "/bin/bulwark", "update", spec, "--run-dir", dir_ + "/run"}, {}, 30);
  EXPECT_EQ(rc_same, 1) << text_same;
  EXPECT_NE(text_same.find("nothing to update"), std::string::npos) << text_same;
  // The new code dies at start-up: the update is rolled back, the job is not failed.
  std::ofstream(dir_ + "/job-v2.yaml")
      << UpdateSpecText(src_, dir_, tag_, ", TINY_CODE: \"v2\", TINY_CRASH_AT_START: \"1\"");
  auto [rc, text] = RunProcess(
      {build_ + "/bin/bulwark", "update", dir_ + "/job-v2.yaml", "--run-dir", dir_ + "/run"}, {},
      30);
  EXPECT_EQ(rc, 0) << text;
  auto [code, out, report] = Finish(job);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["phase"], "Succeeded");
  const Json& u = report["updates"][0];
  EXPECT_EQ(u["result"], "rolled back") << u.dump(2);
  EXPECT_NE(u["failure"].get<std::string>().find("simulated startup failure"), std::string::npos)
      << u.dump(2);
  EXPECT_EQ(report["restarts"], 0);  // a failed update costs no restart of the budget
  const size_t failed = out.find("UpdateFailed: update 1 (env) failed after 0 new step(s)");
  ASSERT_NE(failed, std::string::npos) << out;
  EXPECT_NE(out.find("simulated startup failure", failed), std::string::npos) << out;
  EXPECT_NE(out.find("UpdateRolledBack"), std::string::npos) << out;
  EXPECT_NE(out.find("UpdateRefused: update refused: nodes: 2 -> 3"), std::string::npos) << out;
  bool v2_ran = false;
  for (const StepRun& r : ReadStepLog(dir_ + "/steps.log")) v2_ran = v2_ran || r.code == "v2";
  EXPECT_FALSE(v2_ran);
  EXPECT_EQ(report["last_step"], 400);
  ExpectNoLeftovers();
}

TEST_F(InProcessE2E, UpdatingAJobThatIsNotRunningSaysSo) {
  const std::string spec = dir_ + "/job.yaml";
  std::ofstream(spec) << UpdateSpecText(src_, dir_, tag_, "");
  auto [rc, text] =
      RunProcess({build_ + "/bin/bulwark", "update", spec, "--run-dir", dir_ + "/run"}, {}, 30);
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("job 'hotupd' is not running"), std::string::npos) << text;
}

TEST_F(InProcessE2E, ElasticJobShrinksWhenANodeIsLostAndGrowsBack) {
  // 3 nodes x 1 rank on 3 modelled machines; node 1's machine dies at step 60 and is
  // repaired 5 s later. No spare and no free machine: after waiting 1 s the job
  // continues on 2 nodes (the survivors keep their processes; old rank 2 becomes rank
  // 1), then grows back to 3 when the machine returns.
  const std::string log = dir_ + "/steps.log";
  const std::string spec =
      WriteSpec("elastic", 3, 1, 600,
                "faultPolicy: {restartBudget: 4, backoff: {baseSeconds: 0.1, capSeconds: 1}, "
                "hangTimeout: {floorSeconds: 3, multiplier: 5, startupSeconds: 60}, "
                "heartbeat: {intervalSeconds: 0.5, misses: 10}, stopGraceSeconds: 1}\n"
                "elastic: {minNodes: 2, waitSeconds: 1}\n"
                "chaos:\n"
                "  - {kind: kill_agent, atStep: 60, node: 1}\n",
                ", memorySlots: 4",
                ", TINY_IN_PROCESS: \"1\", TINY_SAVE_EVERY_STEP: \"1\", TINY_STEP_TIME: \"0.03\", "
                "TINY_STEP_LOG: \"" +
                    log + "\"");
  auto [code, out, report] = Run(spec, 300, {"--machines", "3", "--repair-seconds", "5"});
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["phase"], "Succeeded");
  EXPECT_EQ(report["last_step"], 600);
  ASSERT_TRUE(report.contains("resizes")) << report.dump(2);
  const Json& rs = report["resizes"];
  ASSERT_EQ(rs.size(), 2u) << rs.dump(2);
  EXPECT_EQ(rs[0]["from_nodes"], 3);
  EXPECT_EQ(rs[0]["to_nodes"], 2);
  EXPECT_EQ(rs[1]["from_nodes"], 2);
  EXPECT_EQ(rs[1]["to_nodes"], 3);
  EXPECT_GE(rs[1]["at_s"].get<double>() - rs[0]["at_s"].get<double>(), 3.0) << rs.dump(2);
  EXPECT_EQ(report["max_nodes"], 3);
  // The node loss kept the two survivors' processes.
  const Json& incs = report["incidents"];
  ASSERT_GE(incs.size(), 1u);
  EXPECT_EQ(incs[0]["kind"], "node_lost") << incs[0].dump(2);
  EXPECT_EQ(Ranks(incs[0], "kept_pids"), (std::set<int>{0, 1})) << incs[0].dump(2);
  // The step log: rank 0 is one process throughout; the process of rank 2 ran on as
  // rank 1 while the job had 2 nodes and kept that number after the growth; rank 2
  // came back in a new process.
  const auto runs = ReadStepLog(log);
  std::map<long, std::set<int>> ranks_of_pid;
  std::map<int, std::set<long>> pids_of_rank;
  std::map<long, std::set<int>> ranks_at_step;
  for (const StepRun& r : runs) {
    ranks_of_pid[r.pid].insert(r.rank);
    pids_of_rank[r.rank].insert(r.pid);
    ranks_at_step[r.step].insert(r.rank);
  }
  EXPECT_EQ(pids_of_rank[0].size(), 1u);
  int renumbered = 0;
  for (const auto& [pid, ranks] : ranks_of_pid) {
    renumbered += ranks == std::set<int>{1, 2} ? 1 : 0;
  }
  EXPECT_EQ(renumbered, 1) << "no process ran as rank 2 and then as rank 1";
  EXPECT_EQ(ranks_at_step[600], (std::set<int>{0, 1, 2}));
  bool ran_on_two = false;
  for (const auto& [step, ranks] : ranks_at_step) ran_on_two |= ranks == std::set<int>{0, 1};
  EXPECT_TRUE(ran_on_two) << "no step ran on the 2-node world";
  EXPECT_NE(out.find("Resized"), std::string::npos) << out;
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
