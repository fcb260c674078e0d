// Replay bundles and the classification of faults by replay in the controller
// (docs/diagnosis.md), on a FakeClock with the test playing every agent
// (controller_fixture.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

#include "controller/controller_fixture.h"

namespace bulwark {
namespace {

double LossOf(long step, int rank) { return 2.0 + step * 0.01 + rank * 0.001; }
// The RNG digest a deterministic trainer reports with that loss (16 hex digits).
std::string RngOf(long step, int rank) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016lx", static_cast<unsigned long>(step * 10 + rank + 1));
  return hex;
}

// One step report that differs from LossOf/RngOf.
struct Odd {
  long step = -1;
  int rank = -1;
  double loss = 0;
  std::string rng;
};

class ControllerReplayTest : public testing::ControllerFixture {
 protected:
  void BeginWithoutStandby() { Begin(TwoNodeSpec("replay", 0)); }
  // A 2-node job with one standby whose attempt 0 runs on slots 0 and 1; the standby's
  // agent.
  int StartWithStandby() {
    Begin(TwoNodeSpec("replay", 1));
    Expect(0, "start");
    Expect(1, "start");
    EXPECT_EQ(backend_.started.size(), 3u);
    const int standby = Connect(backend_.started.at(2).node_id, 102);
    Started(0);
    return standby;
  }
  // The agents serving slots 0 and 1 (`slot_agents`) report `attempt`'s ranks started.
  void StartedOn(int attempt, std::vector<int> slot_agents) {
    for (int s = 0; s < 2; ++s) {
      Json ranks = Json::array();
      for (int l = 0; l < 2; ++l) {
        const int r = s * 2 + l, pid = 1000 * (attempt + 1) + r;
        ranks.push_back({{"rank", r}, {"local_rank", l}, {"pid", pid}, {"pgid", pid}});
      }
      Send(slot_agents[s], {{"type", "started"}, {"attempt", attempt}, {"ranks", ranks}});
    }
  }
  // `agent` forwards rank `rank`'s report of `step`.
  void Step(int agent, int attempt, int rank, long step, double loss, const std::string& rng) {
    Send(agent, {{"type", "step"},
                 {"attempt", attempt},
                 {"rank", rank},
                 {"step", step},
                 {"loss", loss},
                 {"rng", rng},
                 {"step_time", 0.1},
                 {"t", clock_.NowWall()}});
  }
  // Every rank reports steps [from, to] with LossOf and RngOf; `odd` replaces one of them.
  void Losses(int attempt, std::vector<int> slot_agents, long from, long to, Odd odd = {}) {
    for (long s = from; s <= to; ++s) {
      for (int r = 0; r < 4; ++r) {
        const bool is_odd = s == odd.step && r == odd.rank;
        Step(slot_agents[r / 2], attempt, r, s, is_odd ? odd.loss : LossOf(s, r),
             is_odd ? odd.rng : RngOf(s, r));
      }
      for (int i = 0; i < 3; ++i) ctl_->RunOnce();
    }
  }
  void Incident(int agent, int attempt, const char* kind, const char* subtype, int rank,
                long step) {
    const double t = clock_.NowWall();
    Send(agent, {{"type", "incident"},
                 {"attempt", attempt},
                 {"kind", kind},
                 {"subtype", subtype},
                 {"rank", rank},
                 {"step", step},
                 {"fault_time", t},
                 {"detect_time", t},
                 {"detail", std::string(kind) + " " + subtype}});
  }
};

TEST_F(ControllerReplayTest, ANanThatDoesNotComeBackOnAStandbyQuarantinesItsNode) {
  const int standby = StartWithStandby();
  Losses(0, {0, 1}, 1, 11);
  Incident(0, 0, "nan", "nan", 1, 12);  // rank 1 (node-0): a NaN at step 12
  Expect(0, "stop");
  Expect(1, "stop");
  Stopped(0, {});
  Expect(0, "diagnose");  // node-0 out of the job, tested meanwhile
  Expect(standby, "start");
  Expect(1, "start");
  StartedOn(1, {standby, 1});
  Losses(1, {standby, 1}, 1, 12);  // the same losses, and step 12 passes on the standby
  Expect(0, "shutdown");
  ASSERT_EQ(backend_.quarantined.size(), 1u);
  EXPECT_NE(backend_.quarantined[0].find("node-0: bulwark: a replay found the node computed "
                                         "wrong"),
            std::string::npos)
      << backend_.quarantined[0];
  Json report = Finish();
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["decision"]["action"], "replace_node");
  EXPECT_EQ(inc["classification"]["cause"], "hardware") << inc.dump(2);
  EXPECT_NE(inc["classification"]["evidence"].get<std::string>().find(
                "did not come back with the same data on another node (steps 1-11: 44 of 44 "
                "losses of 4 ranks equal bit for bit; RNG states 44 of 44 equal)"),
            std::string::npos)
      << inc["classification"].dump();
  EXPECT_EQ(inc["classification"]["action"], "quarantined");
  // The bundle: what `bulwark replay` re-runs.
  const Json& b = inc["replay"];
  EXPECT_EQ(b["fault_step"], 12);
  EXPECT_EQ(b["checkpoint_step"], -1);  // none committed yet
  EXPECT_EQ(b["from_scratch"], true);   // so a replay runs from step 1, as the job did
  EXPECT_NE(FormatIncidentDiagnosis(inc, "replay", 1, "")
                .find("replay: `bulwark replay replay 1` re-runs steps 1-12 from scratch"),
            std::string::npos)
      << FormatIncidentDiagnosis(inc, "replay", 1, "");
  EXPECT_EQ(b["losses"]["11"]["3"], LossOf(11, 3));
  EXPECT_EQ(b["digests"]["11"]["3"], Json({{"rng", RngOf(11, 3)}}));
  EXPECT_EQ(b["world"], 4);
  EXPECT_EQ(b["nodes"], Json::array({"node-0", "node-1"}));
  EXPECT_FALSE(b["code"]["digest"].get<std::string>().empty());
}

// An agent merges a burst of step reports into one (docs/protocol.md §2); the merged
// steps' losses and digests (`earlier`) still reach the record a replay bundle keeps.
TEST_F(ControllerReplayTest, StepsAnAgentMergedKeepTheirLossesInTheBundle) {
  BeginWithoutStandby();
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Losses(0, {0, 1}, 1, 9);
  Json earlier = Json::array();
  for (long s : {10, 11})
    earlier.push_back({{"step", s}, {"loss", LossOf(s, 1)}, {"rng", RngOf(s, 1)}});
  Send(0, {{"type", "step"},
           {"attempt", 0},
           {"rank", 1},
           {"step", 12},
           {"loss", LossOf(12, 1)},
           {"rng", RngOf(12, 1)},
           {"step_time", 0.3},
           {"t", clock_.NowWall()},
           {"earlier", earlier},
           {"coalesced", 3}});
  for (int i = 0; i < 3; ++i) ctl_->RunOnce();
  Incident(0, 0, "nan", "nan", 1, 13);
  Expect(0, "stop");
  Json report = Finish();
  const Json& b = report["incidents"][0]["replay"];
  for (long s : {10, 11, 12}) {
    EXPECT_EQ(b["losses"][std::to_string(s)]["1"], LossOf(s, 1)) << s << b["losses"].dump();
    EXPECT_EQ(b["digests"][std::to_string(s)]["1"]["rng"], RngOf(s, 1)) << s;
  }
}

// The ranks on other nodes report their last steps before the fault in their own time,
// often after the faulting node's incident: those losses still reach the bundle (it is
// refreshed at the relaunch), or a replay of the incident compares fewer steps.
TEST_F(ControllerReplayTest, StepsReportedAfterTheFaultStillReachTheBundle) {
  const int standby = StartWithStandby();
  Losses(0, {0, 1}, 1, 10);
  for (int r : {0, 1}) Step(0, 0, r, 11, LossOf(11, r), RngOf(11, r));
  Incident(0, 0, "nan", "nan", 1, 12);
  Expect(0, "stop");
  Expect(1, "stop");
  // Step 11 of node-1's ranks, late (while they stop), and the fault's step.
  for (long s : {11, 12}) {
    for (int r : {0, 2, 3}) {
      if (r == 0 && s == 11) continue;  // reported in time
      Step(r / 2, 0, r, s, LossOf(s, r), RngOf(s, r));
    }
  }
  Stopped(0, {});
  Expect(0, "diagnose");
  Expect(standby, "start");
  Expect(1, "start");
  Json report = Finish();
  const Json& b = report["incidents"][0]["replay"];
  ASSERT_TRUE(b["losses"].contains("11") && b["digests"].contains("11")) << b.dump();
  for (int r = 0; r < 4; ++r) {
    const std::string rank = std::to_string(r);
    EXPECT_EQ(b["losses"]["11"].value(rank, Json()), LossOf(11, r)) << r << b["losses"].dump();
    EXPECT_EQ(b["digests"]["11"].value(rank, Json()), Json({{"rng", RngOf(11, r)}})) << r;
  }
  // The fault's step, as a report in time would have left it: the others' losses.
  EXPECT_EQ(b["losses"]["12"],
            Json({{"0", LossOf(12, 0)}, {"2", LossOf(12, 2)}, {"3", LossOf(12, 3)}}));
  // The late reports are the record, not progress: the job's step stays at 11.
  EXPECT_EQ(report["last_step"], 11) << report.dump(2);
}

TEST_F(ControllerReplayTest, ACrashThatComesBackAtTheSameStepIsTheProgramAndGivesUp) {
  BeginWithoutStandby();
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Losses(0, {0, 1}, 1, 5);
  Incident(1, 0, "crash", "exit 1", 2, 5);
  Expect(0, "stop");
  Expect(1, "stop");
  Stopped(0, {});
  Expect(0, "start");
  Expect(1, "start");
  Started(1);
  Losses(1, {0, 1}, 1, 5);
  Incident(1, 1, "crash", "exit 1", 2, 5);  // again, after the same losses
  Expect(0, "stop");
  Stopped(1, {});
  for (int i = 0; i < 20; ++i) ctl_->RunOnce();
  Json report = Finish();
  ASSERT_EQ(report["incidents"].size(), 2u);
  const Json& again = report["incidents"][1];
  EXPECT_EQ(again["decision"]["action"], "give_up");
  EXPECT_EQ(again["classification"]["cause"], "code");
  EXPECT_NE(again["decision"]["reason"].get<std::string>().find(
                "a replay shows it is the program: rank 2 failed again (exit 1) at step 6 "
                "after a re-run on the same data (steps 1-5: 20 of 20 losses"),
            std::string::npos)
      << again["decision"]["reason"];
  EXPECT_EQ(report["incidents"][0]["classification"]["cause"], "code");
}

TEST_F(ControllerReplayTest, ANanThatComesBackIsTheDataAndPassingWithItSkippedConfirmsIt) {
  BeginWithoutStandby();
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Losses(0, {0, 1}, 1, 7);
  Incident(0, 0, "nan", "nan", 0, 8);
  Expect(0, "stop");
  Stopped(0, {});
  Expect(0, "start");
  Started(1);
  Losses(1, {0, 1}, 1, 7);
  Incident(0, 1, "nan", "nan", 0, 8);  // the same NaN after the same losses: the data
  Json stop = Expect(0, "stop");
  Stopped(1, {});
  Json start = Expect(0, "start");
  EXPECT_EQ(start["skip_from"], 0);
  EXPECT_EQ(start["skip_to"], 9);
  Started(2);
  Send(0, {{"type", "step"},
           {"attempt", 2},
           {"rank", 0},
           {"step", 8},
           {"loss", 1.5},
           {"step_time", 0.1},
           {"t", clock_.NowWall()}});
  for (int i = 0; i < 5; ++i) ctl_->RunOnce();
  Json report = Finish();
  const Json& second = report["incidents"][1];
  EXPECT_EQ(second["decision"]["action"], "rollback");
  EXPECT_NE(second["decision"]["reason"].get<std::string>().find(
                "a replay shows it is the data: the NaN came back at step 8 on rank 0 with "
                "the same data (steps 1-7: 28 of 28 losses"),
            std::string::npos)
      << second["decision"]["reason"];
  EXPECT_EQ(report["incidents"][0]["classification"]["cause"], "data");
  EXPECT_EQ(second["classification"]["cause"], "data");
  EXPECT_NE(second["classification"]["evidence"].get<std::string>().find(
                "with the data batches up to step 8 skipped, the re-run passed it"),
            std::string::npos)
      << second["classification"].dump();
}

// Rank 1 (node-0) computes a NaN at step 11; through the gradient all-reduce every
// rank's loss is NaN at step 12. node-1's agent reports rank 2's NaN at step 12 before
// node-0's, lagging, reports its own: the incident is rank 1's at step 11, and the job
// rolls back to step 10, not 11. Each agent forwards a step report, then its incident.
TEST_F(ControllerReplayTest, TheEarliestNanIsTheIncidentWhicheverAgentReportsFirst) {
  BeginWithoutStandby();
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Losses(0, {0, 1}, 1, 10);
  for (int r : {2, 3}) Step(1, 0, r, 11, LossOf(11, r), RngOf(11, r));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int r : {2, 3}) Step(1, 0, r, 12, nan, RngOf(12, r));
  Incident(1, 0, "nan", "nan", 2, 12);
  auto no_stop_yet = [&](const char* why) {
    for (int i = 0; i < 5; ++i) ctl_->RunOnce();
    for (int n : {0, 1}) {
      for (const Json& m : agents_[n].Read()) EXPECT_NE(m["type"], "stop") << why;
    }
  };
  no_stop_yet("stopped before node-0's reports of step 11 came");
  Step(0, 0, 0, 11, LossOf(11, 0), RngOf(11, 0));
  Step(0, 0, 1, 11, nan, RngOf(11, 1));
  no_stop_yet("stopped between rank 1's NaN step report and its incident");
  Incident(0, 0, "nan", "nan", 1, 11);
  Expect(0, "stop");
  Expect(1, "stop");
  Json report = Finish();
  ASSERT_EQ(report["incidents"].size(), 1u) << report.dump(2);
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["rank"], 1) << inc.dump(2);
  EXPECT_EQ(inc["step"], 11) << inc.dump(2);
  EXPECT_EQ(inc["node_id"], "node-0") << inc.dump(2);
  EXPECT_EQ(inc["decision"]["resume_step_max"], 10) << inc.dump(2);
  EXPECT_EQ(inc["replay"]["fault_step"], 11) << inc.dump(2);
  // The steps reported while the NaN was held are not progress.
  EXPECT_EQ(report["last_step"], 10) << report.dump(2);
}

// A NaN whose peers' reports never reach the step before it (a node's reports stall) is
// acted on after kNanSettleS (2 s) all the same.
TEST_F(ControllerReplayTest, ANanWaitsAtMostTwoSecondsForTheOtherRanksReports) {
  BeginWithoutStandby();
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Losses(0, {0, 1}, 1, 10);
  const double held_at = clock_.NowWall();
  Incident(1, 0, "nan", "nan", 3, 12);  // node-0's ranks stay at step 10
  Expect(1, "stop");
  EXPECT_GE(clock_.NowWall() - held_at, 2.0);
  EXPECT_LT(clock_.NowWall() - held_at, 2.5);
  Json report = Finish();
  ASSERT_EQ(report["incidents"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["incidents"][0]["rank"], 3);
  EXPECT_EQ(report["incidents"][0]["step"], 12);
}

// A NaN of rank 1 at step 12, replayed on a standby, where rank 3 (node-1, which stays)
// computes another loss at step 5 and reports `rng` with it: the incident's
// classification.
class ControllerReplayDiffTest : public ControllerReplayTest {
 protected:
  Json Run(const std::string& rng) {
    const int standby = StartWithStandby();
    Losses(0, {0, 1}, 1, 11);
    Incident(0, 0, "nan", "nan", 1, 12);
    Expect(0, "stop");
    Expect(1, "stop");
    Stopped(0, {});
    Expect(0, "diagnose");
    Expect(standby, "start");
    Expect(1, "start");
    StartedOn(1, {standby, 1});
    Losses(1, {standby, 1}, 1, 12, {5, 3, 9.5, rng});
    Json report = Finish();
    return report["incidents"][0]["classification"];
  }
};

// The same random numbers: one of the two computations was wrong.
TEST_F(ControllerReplayDiffTest, ADifferentLossWithTheSameRandomNumbersIsTheHardware) {
  const Json c = Run(RngOf(5, 3));
  EXPECT_EQ(c["cause"], "hardware") << c.dump();
  EXPECT_NE(c["evidence"].get<std::string>().find("RNG states 44 of 44 equal"), std::string::npos)
      << c.dump();
}

// Other random numbers: the trainer is not deterministic, and no node is blamed.
TEST_F(ControllerReplayDiffTest, ADifferentLossWithOtherRandomNumbersBlamesNoNode) {
  const Json c = Run("00000000deadbeef");
  EXPECT_EQ(c["cause"], "unknown") << c.dump();
  EXPECT_NE(c["evidence"].get<std::string>().find(
                "rank 3's random-generator state differs from the record at step 5"),
            std::string::npos)
      << c.dump();
  EXPECT_EQ(c["action"], "none");
  // (Finish() drops the agents while node-0 is tested: that quarantine is the test's.)
  for (const std::string& q : backend_.quarantined) {
    EXPECT_EQ(q.find("a replay found"), std::string::npos) << q;
  }
}

}  // namespace
}  // namespace bulwark
