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
      "heartbeat: {intervalSeconds: 0.5, misses: 10}, stopGraceSeconds: 1, spareNodes: 1}\n"
      "chaos:\n"
          "  - {kind: kill_rank, atStep: 30, rank: 1}\n"
          "  - {kind: hang_rank, atStep: 80, rank: 2}\n"
          "  - {kind: nan_loss, atStep: 200, rank: 0}\n"
          "  - {kind: kill_agent, atStep: 270, node: 1}\n",
      ", memorySlots: 4",
      ", TINY_IN_PROCESS: \"1\", TINY_SAVE_EVERY_STEP: \"1\", TINY_STEP_TIME: \"0.03\", "
      "TINY_STEP_LOG: \"" + log + "\""));
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["phase"], "Succeeded");
  EXPECT_EQ(report["last_step"], 330);
  const Json& incs = report["incidents"];
  std::vector<std::string> kinds;
  for (const Json& i : incs) {
    if (!i.value("secondary", false)) kinds.push_back(i["kind"]);
  }
  ASSERT_EQ(kinds, (std::vector<std::string>{"crash", "hang", "nan", "node_lost"})) << report.dump(2);
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

}  // namespace
}  // namespace bulwark
