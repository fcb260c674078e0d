// The controller's side of in-process recovery on a FakeClock: the test plays the
// backend and every agent (TCP connections on loopback) and steps the controller with
// RunOnce. Checks which `stop` each fault gets (park or not, which ranks are killed),
// the backoff on the fake clock, the `start` of the next generation (store, warm
// ranks) and the processes the report says were kept and replaced.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>

#include "controller/controller_fixture.h"

namespace bulwark {
namespace {

const char* kSpec = R"(
name: gen
nodes: 2
procsPerNode: 2
command: ["/usr/bin/python3", "train.py"]
checkpoint: {intervalSteps: 10, memorySlots: 4}
faultPolicy:
  backoff: {baseSeconds: 2, capSeconds: 4}
  parkTimeoutSeconds: 3
  heartbeat: {intervalSeconds: 1000, misses: 3}
)";

using ControllerGenerationsTest = testing::ControllerFixture;
using testing::FakeBackend;

TEST_F(ControllerGenerationsTest, ACrashParksTheSurvivorsAndReportsKeptAndReplacedProcesses) {
  Begin(kSpec);
  Json start0 = Expect(0, "start");
  EXPECT_EQ(start0["warm_ranks"], 2);  // auto: procsPerNode
  EXPECT_EQ(start0["store_port"], 0);  // no store yet: rendezvous on the master port
  Expect(1, "start");
  Send(0, {{"type", "store"}, {"port", 45000}, {"host", "127.0.0.1"}});
  Started(0);
  InProcess(0, {0, 1, 2, 3});
  Step(0, 5);
  Crash(0, 1);
  Json stop = Expect(0, "stop");
  EXPECT_EQ(stop["park"], true);
  EXPECT_EQ(stop["kill"], Json::array({1}));
  EXPECT_EQ(stop["park_timeout_s"], 3);
  EXPECT_EQ(Expect(1, "stop")["park"], true);
  const double stopped_at = clock_.NowWall();
  Stopped(0, {{0, 1000}, {2, 1002}, {3, 1003}});
  Json start1 = Expect(0, "start");
  // The first failure after progress restarts without a backoff.
  EXPECT_LT(clock_.NowWall() - stopped_at, 0.5);
  EXPECT_EQ(start1["attempt"], 1);
  EXPECT_EQ(start1["store_host"], "127.0.0.1");
  EXPECT_EQ(start1["store_port"], 45000);
  Expect(1, "start");
  Started(1, {{0, {1000, "kept"}}, {1, {2001, "warm"}}, {2, {1002, "kept"}}, {3, {1003, "kept"}}});
  Step(1, 6);
  for (int i = 0; i < 20; ++i) ctl_->RunOnce();
  // While the job runs, its stored incident already says where it resumed and which
  // processes were kept (what `bulwark describe` and `bulwark replay` read).
  auto rows = store_->ListIncidents("gen");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  const Json row = Json::parse(rows->front());
  EXPECT_TRUE(row.contains("resumed_from")) << row.dump();
  EXPECT_EQ(row["processes"]["kept_pids"].size(), 3u) << row.dump();
  EXPECT_EQ(row["processes"]["replaced_pids"].size(), 1u) << row.dump();
  ctl_->Cancel();
  for (int n = 0; n < 2; ++n) Expect(n, "stop");
  Stopped(1, {});
  while (ctl_->RunOnce()) {
  }
  auto result = ctl_->Run();
  ASSERT_TRUE(result.ok());
  const Json& inc = result->report["incidents"][0];
  const Json& p = inc["processes"];
  EXPECT_EQ(p["in_process"], true);
  EXPECT_EQ(p["keep"], Json::array({0, 2, 3}));
  EXPECT_EQ(p["replace"], Json::array({1}));
  ASSERT_EQ(p["replaced_pids"].size(), 1u);
  EXPECT_EQ(p["replaced_pids"][0],
            (Json{{"rank", 1}, {"pid", 2001}, {"how", "warm"}, {"old_pid", 1001}}));
  EXPECT_EQ(p["kept_pids"].size(), 3u);
  const std::string text = FormatReport(result->report);
  EXPECT_NE(text.find("in process: kept rank(s) 0 (pid 1000), 2 (pid 1002), 3 (pid 1003); "
                      "new process for rank(s) 1 (pid 1001 -> 2001, warm)"),
            std::string::npos)
      << text;
}

TEST_F(ControllerGenerationsTest, ASupersededPersistIsOneEventPerMinuteNotAShardFailure) {
  Begin(kSpec);
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  auto skipped = [&](int rank, long step) {
    Send(rank / 2, {{"type", "ckpt"},
                    {"attempt", 0},
                    {"rank", rank},
                    {"step", step},
                    {"tier", "disk"},
                    {"superseded_by", step + 10}});
  };
  auto events = [&](const std::string& reason) {
    for (int i = 0; i < 20; ++i) ctl_->RunOnce();
    return EventMessages("gen", reason);
  };
  for (int r = 0; r < 4; ++r) skipped(r, 10);  // every rank skips step 10
  std::vector<std::string> got = events("CheckpointPersistSkipped");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0],
            "the disk write of step 10 was skipped: step 20 was staged before it began and is "
            "written instead (the disk is slower than the checkpoint cadence)");
  for (int r = 0; r < 4; ++r) skipped(r, 20);  // within the minute: counted, not told
  EXPECT_EQ(events("CheckpointPersistSkipped").size(), 1u);
  clock_.Advance(61);
  skipped(0, 30);
  got = events("CheckpointPersistSkipped");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[1].find("step 30 was skipped"), std::string::npos) << got[1];
  EXPECT_NE(got[1].find("1 more since the last such event"), std::string::npos) << got[1];
  EXPECT_TRUE(events("CheckpointShardFailed").empty());
}

// The controller itself paused for 6 s (a VM stall, a swapped-out process): nothing
// was read meanwhile, so no agent is lost for it; a node silent for 3 s of the
// controller's own time after it still is.
TEST_F(ControllerGenerationsTest, TheControllersOwnStallIsNotTheAgentsSilence) {
  std::string spec = kSpec;
  spec.replace(spec.find("intervalSeconds: 1000"), 21, "intervalSeconds: 1");
  Begin(spec);
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  auto events = [&](const std::string& reason) { return EventMessages("gen", reason); };
  auto beat = [&](int node) { Send(node, {{"type", "heartbeat"}}); };
  beat(0);
  beat(1);
  ctl_->RunOnce();
  clock_.Advance(6);
  for (int i = 0; i < 3; ++i) ctl_->RunOnce();  // 0.75 s more of silence
  ASSERT_EQ(events("ControllerStalled").size(), 1u);
  EXPECT_NE(events("ControllerStalled")[0].find("did not run for 6."), std::string::npos)
      << events("ControllerStalled")[0];
  EXPECT_TRUE(events("NodeLost").empty());
  EXPECT_TRUE(IsWarningEvent("ControllerStalled"));
  // node-0 keeps beating, node-1 stays quiet: it is lost 3 s after its last message, not
  // counting the stall.
  for (int i = 0; i < 16 && events("NodeLost").empty(); ++i) {
    clock_.Advance(0.25);
    beat(0);
    ctl_->RunOnce();
  }
  std::vector<std::string> lost = events("NodeLost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rfind("node-1 (slot 1): heartbeat_timeout", 0), 0u) << lost[0];
  EXPECT_EQ(events("ControllerStalled").size(), 1u);
}

TEST_F(ControllerGenerationsTest, ASurvivorWithoutInProcessRecoveryMeansEveryRankRestarts) {
  Begin(kSpec);
  Expect(0, "start");
  Started(0);
  InProcess(0, {0, 1, 2});  // rank 3 is a plain script
  Step(0, 5);
  Crash(0, 1);
  Json stop = Expect(0, "stop");
  EXPECT_FALSE(stop.contains("park"));
}

TEST_F(ControllerGenerationsTest, ARankThatParksOnItsOwnBecomesAnIncidentAfterTheGrace) {
  Begin(kSpec);
  Expect(0, "start");
  Started(0);
  InProcess(0, {0, 1, 2, 3});
  Step(0, 5);
  const double at = clock_.NowWall();
  Send(1, {{"type", "parked"},
           {"attempt", 0},
           {"rank", 2},
           {"pid", 1002},
           {"error", "RuntimeError: Connection reset by peer"}});
  Json stop = Expect(0, "stop");
  EXPECT_GE(clock_.NowWall() - at, 1.0);  // nothing explained it within the grace
  EXPECT_EQ(stop["park"], true);
  EXPECT_EQ(stop["kill"], Json::array());  // a failed collective blames nobody
}

TEST_F(ControllerGenerationsTest, AnIncidentWithinTheGraceExplainsARankThatParkedOnItsOwn) {
  Begin(kSpec);
  Expect(0, "start");
  Started(0);
  InProcess(0, {0, 1, 2, 3});
  Step(0, 5);
  Send(1, {{"type", "parked"},
           {"attempt", 0},
           {"rank", 2},
           {"pid", 1002},
           {"error", "RuntimeError: Connection closed by peer"}});
  Crash(0, 1);  // the peer that left, reported by its own agent
  Json stop = Expect(0, "stop");
  EXPECT_EQ(stop["kill"], Json::array({1}));
  ctl_->Cancel();
}

TEST_F(ControllerGenerationsTest, InProcessRestartOffStopsEveryRank) {
  std::string spec = kSpec;
  spec += "  inProcessRestart: false\n";
  Begin(spec);
  Expect(0, "start");
  Started(0);
  InProcess(0, {0, 1, 2, 3});
  Crash(0, 1);
  EXPECT_FALSE(Expect(0, "stop").contains("park"));
}

// A node lost while the job stops for a peer's crash, moments after it, is the
// incident: the crash followed from it (a dead node's ranks vanish from the collective,
// and its agent's connection may close only after the peers' crash reports arrive, as
// when Slurm kills a step). The crash stays on record, secondary, naming its root; the
// rows in the store say so while the job runs. A loss later than that stays secondary.
class ControllerCascadeTest : public ControllerGenerationsTest {
 protected:
  // Rank 0 (node 0) crashes; `after` s later node 1's connection closes. The store's
  // incident rows once the loss is seen.
  std::vector<Json> CrashThenLoseNode1(double after) {
    Begin(kSpec);
    Expect(0, "start");
    Expect(1, "start");
    Started(0);
    Step(0, 5);
    Crash(0, 0);
    Expect(1, "stop");
    clock_.Advance(after);
    agents_[1] = JsonLineConn(Fd());
    for (int i = 0; i < 50 && EventMessages("gen", "NodeLost").empty(); ++i) ctl_->RunOnce();
    EXPECT_EQ(EventMessages("gen", "NodeLost").size(), 1u);
    std::vector<Json> out;
    auto rows = store_->ListIncidents("gen");
    EXPECT_TRUE(rows.ok());
    if (rows.ok()) {
      for (const std::string& r : *rows) out.push_back(Json::parse(r));
    }
    return out;
  }
};

TEST_F(ControllerCascadeTest, ANodeLostMomentsAfterAPeersCrashIsTheIncident) {
  std::vector<Json> rows = CrashThenLoseNode1(0.5);
  ASSERT_EQ(rows.size(), 2u);
  const Json& lost = rows[0];
  EXPECT_EQ(lost["kind"], "node_lost") << lost.dump();
  EXPECT_EQ(lost["node"], 1);
  EXPECT_EQ(lost["decision"]["action"], "replace_node");
  EXPECT_NE(lost["decision"]["reason"].get<std::string>().find(
                "node-1 was lost 0.50 s after rank 0 (SIGKILL, node slot 0) crashed"),
            std::string::npos)
      << lost.dump();
  ASSERT_EQ(lost["cascade"].size(), 1u);
  EXPECT_EQ(lost["cascade"][0]["rank"], 0);
  EXPECT_FALSE(lost.contains("secondary"));
  EXPECT_EQ(rows[1]["kind"], "crash");
  EXPECT_EQ(rows[1]["secondary"], true);
  EXPECT_EQ(rows[1]["caused_by"], "node_lost: node-1");
  EXPECT_EQ(EventMessages("gen", "RootCause").size(), 1u);
  Json report = Finish();
  ASSERT_EQ(report["incidents"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["incidents"][0]["kind"], "node_lost");
  EXPECT_EQ(report["incidents"][0]["action"], "replace_node");
}

TEST_F(ControllerCascadeTest, ANodeLostLaterIsAConsequenceOfTheCrash) {
  std::vector<Json> rows = CrashThenLoseNode1(3.0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["kind"], "crash") << rows[0].dump();
  EXPECT_EQ(rows[0]["decision"]["action"], "restart_in_place");
  EXPECT_EQ(rows[1]["kind"], "node_lost");
  EXPECT_EQ(rows[1]["secondary"], true);
  EXPECT_TRUE(EventMessages("gen", "RootCause").empty());
  Json report = Finish();
  ASSERT_EQ(report["incidents"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["incidents"][0]["kind"], "crash");
  EXPECT_EQ(report["incidents"][0]["action"], "restart_in_place");
}

// A backend that refuses every start (not "no capacity": srun refusing a step) is asked
// again after a backoff, not at every turn of the loop, and the job fails at the stage's
// deadline naming the refusal.
TEST_F(ControllerGenerationsTest, AStartTheBackendRefusesIsRetriedWithBackoffThenNamed) {
  Begin(kSpec);
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  backend_.start_error =
      FailedPrecondition("srun: error: Unable to create step for job 7: Step limit reached");
  const int before = backend_.start_calls;
  agents_[0] = JsonLineConn(Fd());  // slot 0's node is lost
  const double lost_at = clock_.NowWall();
  Expect(1, "stop");
  Send(1,
       {{"type", "stopped"}, {"attempt", 0}, {"mem", Json::object()}, {"parked", Json::array()}});
  int turns = 0;
  while (ctl_->RunOnce() && ++turns < 200000) {
  }
  ASSERT_LT(turns, 200000) << "the job never ended";
  const double waited = clock_.NowWall() - lost_at;
  const int tries = backend_.start_calls - before;
  // Backoff 0.5, 1, 2, 4, 8, then every 10 s until the 60 s agent-connect deadline.
  EXPECT_GE(waited, 60.0);
  EXPECT_GE(tries, 5);
  EXPECT_LE(tries, 6 + static_cast<int>(waited / 10)) << tries << " tries in " << waited << " s";
  auto result = ctl_->Run();
  ASSERT_TRUE(result.ok());
  const std::string msg = result->report.value("message", "");
  EXPECT_NE(msg.find("could not start a replacement node ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("Step limit reached"), std::string::npos) << msg;
}

class ControllerEarlyExitTest : public testing::ControllerFixture {
 protected:
  // Loses slot 0's node, then runs the controller: each agent started for slot 0 ends
  // before it says hello ("agent exited (exit 2)") until `early` of them did; the next
  // one connects. Returns the wall times of slot 0's starts; stops when the job ended
  // or slot 0's agent connected (*connected).
  std::vector<double> EndEarlyAfterALoss(int early, bool* connected) {
    std::vector<double> starts;
    size_t seen = backend_.started.size();
    *connected = false;
    LoseSlot0();
    int turns = 0;
    while (++turns < 200000 && !*connected && ctl_->RunOnce()) {
      for (; seen < backend_.started.size(); ++seen) {
        const NodeRequest r = backend_.started[seen];
        if (r.slot != 0) continue;
        starts.push_back(clock_.NowWall());
        if (static_cast<int>(starts.size()) <= early) {
          backend_.losses.push_back({r.node_id, "agent exited (exit 2)"});
        } else {
          Connect(r.node_id, 500);
          *connected = true;
        }
      }
    }
    EXPECT_LT(turns, 200000) << "the job never ended";
    return starts;
  }
  // Slot 0's node is lost (its connection closes); node-1 reports its stop.
  void LoseSlot0() {
    agents_[0] = JsonLineConn(Fd());
    Expect(1, "stop");
    Send(1,
         {{"type", "stopped"}, {"attempt", 0}, {"mem", Json::object()}, {"parked", Json::array()}});
  }
  // Loses slot 0's node and runs the controller until a node is started for slot 0:
  // the seconds that took on the fake clock, or -1 if none was.
  double SecondsToReplaceSlot0() {
    size_t seen = backend_.started.size();
    LoseSlot0();
    const double lost_at = clock_.NowWall();
    int turns = 0;
    while (++turns < 200000 && ctl_->RunOnce()) {
      for (; seen < backend_.started.size(); ++seen) {
        if (backend_.started[seen].slot == 0) return clock_.NowWall() - lost_at;
      }
    }
    return -1;
  }
};

// An agent that ends before it connects (a bad flag, a run dir too long for its sockets)
// is not replaced at every turn until the 60 s deadline: replacements back off, and the
// third early end in a row of one slot fails the job with the agent's reason.
TEST_F(ControllerEarlyExitTest, AgentsThatEndBeforeConnectingFailTheJobAfterThreeInARow) {
  Begin(kSpec);
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  const double lost_at = clock_.NowWall();
  bool connected = false;
  const std::vector<double> starts = EndEarlyAfterALoss(100, &connected);
  ASSERT_FALSE(connected);
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_GE(starts[1] - starts[0], 0.5);  // backoff 0.5 s, then 1 s
  EXPECT_GE(starts[2] - starts[1], 1.0);
  while (ctl_->RunOnce()) {
  }
  EXPECT_LT(clock_.NowWall() - lost_at, 20.0);  // not the 60 s connect deadline
  auto result = ctl_->Run();
  ASSERT_TRUE(result.ok());
  const std::string msg = result->report.value("message", "");
  EXPECT_NE(msg.find("the agent for slot 0 ended before connecting 3 times in a row (last: "
                     "node-4, agent exited (exit 2))"),
            std::string::npos)
      << msg;
  EXPECT_EQ(EventMessages("gen", "Failed").size(), 1u);
}

// Early ends that stop short of the limit cost only their backoff: the slot's agent
// that then connects resets the count, and the job runs on.
TEST_F(ControllerEarlyExitTest, AnAgentThatConnectsAfterTwoEarlyEndsResetsTheCount) {
  Begin(kSpec);
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  bool connected = false;
  const std::vector<double> starts = EndEarlyAfterALoss(2, &connected);
  ASSERT_TRUE(connected);
  EXPECT_EQ(starts.size(), 3u);
  Expect(static_cast<int>(agents_.size()) - 1, "start");  // the job goes on
  EXPECT_TRUE(EventMessages("gen", "Failed").empty());
}

// A standby that keeps ending before it connects (a bad node of the cluster) backs off
// only standby starts, to minutes, with one warning: the job runs on without standbys,
// and a slot's node lost meanwhile is replaced at once, not after the standbys' backoff.
TEST_F(ControllerEarlyExitTest, StandbysThatEndBeforeConnectingDoNotHoldUpASlotsReplacement) {
  Begin(std::string(kSpec) + "  spareNodes: 1\n");
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  std::vector<double> standby_starts;
  size_t seen = 0;
  int turns = 0;
  while (standby_starts.size() < 5 && ++turns < 200000 && ctl_->RunOnce()) {
    for (; seen < backend_.started.size(); ++seen) {
      const NodeRequest r = backend_.started[seen];
      if (r.slot != -1) continue;  // the first attempt's nodes
      standby_starts.push_back(clock_.NowWall());
      backend_.losses.push_back({r.node_id, "agent exited (exit 2)"});
    }
  }
  ASSERT_EQ(standby_starts.size(), 5u);
  // Each lost standby was restocked while the job ran: no fault, no other node started.
  EXPECT_TRUE(EventMessages("gen", "FaultDetected").empty());
  EXPECT_EQ(std::count_if(backend_.started.begin(), backend_.started.end(),
                          [](const NodeRequest& r) { return r.slot >= 0; }),
            2);
  EXPECT_GE(standby_starts[3] - standby_starts[2], 2.0);  // 0.5, 1, 2, 4 s, ... to 300 s
  EXPECT_GE(standby_starts[4] - standby_starts[3], 4.0);
  for (int i = 0; i < 5; ++i) ctl_->RunOnce();  // the fifth's end is seen: 8 s to the next
  const std::vector<std::string> warned = EventMessages("gen", "StandbyStartFailed");
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find("standbys ended before connecting 3 times in a row (last: "),
            std::string::npos)
      << warned[0];
  EXPECT_NE(warned[0].find("agent exited (exit 2)); the job runs on without them"),
            std::string::npos)
      << warned[0];
  EXPECT_TRUE(EventMessages("gen", "Failed").empty());

  // Slot 0's node is lost: its replacement starts at once.
  const double took = SecondsToReplaceSlot0();
  ASSERT_GE(took, 0) << "slot 0 was never replaced";
  EXPECT_LT(took, 1.0);
}

// A backend that refuses standby starts (and only them) is asked again after a wait
// that doubles past the slots' 10 s, and a slot's node lost right after a refusal is
// replaced at once, not after the refusal's backoff.
TEST_F(ControllerEarlyExitTest, RefusedStandbysDoNotHoldUpASlotsReplacement) {
  backend_.standby_error = FailedPrecondition("no standby nodes in this partition");
  Begin(std::string(kSpec) + "  spareNodes: 1\n");
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  std::vector<double> refused;  // wall times of the standby starts asked for since
  int calls = backend_.start_calls;
  int turns = 0;
  while (refused.size() < 7 && ++turns < 200000 && ctl_->RunOnce()) {
    for (; calls < backend_.start_calls; ++calls) refused.push_back(clock_.NowWall());
  }
  ASSERT_EQ(refused.size(), 7u);
  EXPECT_EQ(backend_.started.size(), 2u);  // the first attempt's nodes only
  EXPECT_TRUE(EventMessages("gen", "FaultDetected").empty());
  EXPECT_GE(refused[6] - refused[5], 32.0);  // 0.5, 1, 2, 4, 8, 16, 32 s, ... to 300 s
  const std::vector<std::string> failed = EventMessages("gen", "NodeStartFailed");
  ASSERT_EQ(failed.size(), 8u);  // the launch's refusal, then the seven
  EXPECT_NE(failed[7].find("for a warm standby: FAILED_PRECONDITION: no standby nodes in "
                           "this partition (8 in a row; next try in 64.0 s)"),
            std::string::npos)
      << failed[7];

  // Slot 0's node is lost just after the last refusal: its replacement starts at once.
  const double took = SecondsToReplaceSlot0();
  ASSERT_GE(took, 0) << "slot 0 was never replaced";
  EXPECT_LT(took, 1.0);
  EXPECT_TRUE(EventMessages("gen", "Failed").empty());
}

// A standby that was waiting for capacity and starts while a slot's starts are being
// refused is no evidence the slot's next start will work: the slot's refusals stay
// counted, and their backoff goes on doubling.
TEST_F(ControllerEarlyExitTest, AStandbyStartedMeanwhileDoesNotResetASlotsRefusals) {
  backend_.standby_capacity = false;
  Begin(std::string(kSpec) + "  spareNodes: 1\n");
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  backend_.slot_error = FailedPrecondition("node pool gpu-a is cordoned");
  LoseSlot0();
  auto refusals = [&] { return EventMessages("gen", "NodeStartFailed"); };
  int turns = 0;
  while (refusals().size() < 3 && ++turns < 200000 && ctl_->RunOnce()) {
  }
  ASSERT_EQ(refusals().size(), 3u);
  backend_.standby_capacity = true;
  while (backend_.started.size() < 3 && ++turns < 200000 && ctl_->RunOnce()) {
  }
  ASSERT_EQ(backend_.started.size(), 3u);
  EXPECT_EQ(backend_.started[2].slot, -1);  // the standby, which never connects
  while (refusals().size() < 4 && ++turns < 200000 && ctl_->RunOnce()) {
  }
  const std::vector<std::string> failed = refusals();
  ASSERT_EQ(failed.size(), 4u);
  EXPECT_NE(failed[3].find("for slot 0: FAILED_PRECONDITION: node pool gpu-a is cordoned (4 in "
                           "a row; next try in 4.0 s)"),
            std::string::npos)
      << failed[3];
}

TEST_F(ControllerGenerationsTest, AnElasticJobShrinksAfterTheWaitAndGrowsBackAtAStepBoundary) {
  std::string spec = kSpec;
  spec += "elastic: {minNodes: 1, waitSeconds: 5}\n";
  Begin(spec);
  Expect(0, "start");
  Json first = Expect(1, "start");
  EXPECT_EQ(first["max_world_size"], 4);
  Started(0);
  InProcess(0, {0, 1, 2, 3});
  Step(0, 5);
  // Slot 0's node is lost and no machine is free.
  backend_.capacity = false;
  agents_[0] = JsonLineConn(Fd());
  const double lost_at = clock_.NowWall();
  Json stop = Expect(1, "stop");
  EXPECT_EQ(stop["park"], true);
  Send(1, {{"type", "stopped"},
           {"attempt", 0},
           {"mem", Json::object()},
           {"parked",
            Json::array({Json{{"rank", 2}, {"pid", 1002}}, Json{{"rank", 3}, {"pid", 1003}}})}});
  // After waiting 5 s for capacity, node-1 alone runs the next generation as slot 0.
  Json start1 = Expect(1, "start", 4000);
  EXPECT_GE(clock_.NowWall() - lost_at, 5.0);
  EXPECT_EQ(start1["attempt"], 1);
  EXPECT_EQ(start1["group_rank"], 0);
  EXPECT_EQ(start1["nnodes"], 1);
  EXPECT_EQ(start1["world_size"], 2);
  EXPECT_EQ(start1["max_world_size"], 4);
  Send(1, {{"type", "started"},
           {"attempt", 1},
           {"ranks", Json::array({Json{{"rank", 0},
                                       {"local_rank", 0},
                                       {"pid", 1002},
                                       {"pgid", 1002},
                                       {"how", "kept"},
                                       {"in_process", true}},
                                  Json{{"rank", 1},
                                       {"local_rank", 1},
                                       {"pid", 1003},
                                       {"pgid", 1003},
                                       {"how", "kept"},
                                       {"in_process", true}}})}});
  Send(1, {{"type", "step"},
           {"attempt", 1},
           {"rank", 0},
           {"step", 6},
           {"loss", 1.0},
           {"step_time", 0.1},
           {"t", clock_.NowWall()}});
  for (int i = 0; i < 20; ++i) ctl_->RunOnce();
  // Capacity returns: the waiting node starts as a standby and connects; the job
  // grows back at a step boundary (every rank parks, none is killed).
  backend_.capacity = true;
  for (int i = 0; i < 400 && backend_.started.size() < 3; ++i) ctl_->RunOnce();
  ASSERT_EQ(backend_.started.size(), 3u);
  const std::string fresh = backend_.started.back().node_id;
  const std::string addr = ctl_->Address();
  auto fd = TcpConnect("127.0.0.1", std::stoi(addr.substr(addr.rfind(':') + 1)), 5);
  ASSERT_TRUE(fd.ok());
  agents_.emplace_back(std::move(*fd));
  Send(2, {{"type", "hello"},
           {"node", fresh},
           {"pid", 102},
           {"peer_host", "127.0.0.1"},
           {"peer_port", 7002},
           {"free_port", 0}});
  Json grow = Expect(1, "stop");
  EXPECT_EQ(grow["park"], true);
  EXPECT_EQ(grow.value("kill", Json::array()), Json::array());
  Send(1, {{"type", "stopped"},
           {"attempt", 1},
           {"mem", Json::object()},
           {"parked",
            Json::array({Json{{"rank", 0}, {"pid", 1002}}, Json{{"rank", 1}, {"pid", 1003}}})}});
  Json start2 = Expect(1, "start", 4000);
  EXPECT_EQ(start2["group_rank"], 0);
  EXPECT_EQ(start2["world_size"], 4);
  Json joined = Expect(2, "start");
  EXPECT_EQ(joined["group_rank"], 1);
  EXPECT_EQ(joined["nnodes"], 2);
  ctl_->Cancel();
  for (int i = 0; i < 50; ++i) ctl_->RunOnce();
  agents_.clear();
  while (ctl_->RunOnce()) {
  }
  auto result = ctl_->Run();
  ASSERT_TRUE(result.ok());
  const Json& rs = result->report["resizes"];
  ASSERT_EQ(rs.size(), 2u) << rs.dump(2);
  EXPECT_EQ(rs[0]["from_nodes"], 2);
  EXPECT_EQ(rs[0]["to_nodes"], 1);
  EXPECT_EQ(rs[1]["to_nodes"], 2);
}

}  // namespace
}  // namespace bulwark
