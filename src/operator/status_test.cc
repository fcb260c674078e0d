#include "operator/status.h"

#include <gtest/gtest.h>

namespace bulwark::op {
namespace {

const Json& Cond(const Json& status, const std::string& type) {
  static const Json kNone;
  for (const Json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  ADD_FAILURE() << "no condition " << type;
  return kNone;
}

constexpr double kT0 = 1795000000;  // 2026-11-18T...Z

TEST(BuildStatusTest, PendingCarriesTheSchedulersReason) {
  Observed o;
  o.phase = Phase::kPending;
  o.reason = "Pending";
  o.message = "waiting: queue research over quota for h100 by 16 GPUs";
  const Json s = BuildStatus(Json(), o, 3, kT0);
  EXPECT_EQ(s["phase"], "Pending");
  EXPECT_EQ(s["observedGeneration"], 3);
  ASSERT_EQ(s["conditions"].size(), 5u);
  const Json& adm = Cond(s, "Admitted");
  EXPECT_EQ(adm["status"], "False");
  EXPECT_EQ(adm["reason"], "Pending");
  EXPECT_EQ(adm["message"], o.message);
  EXPECT_EQ(adm["observedGeneration"], 3);
  EXPECT_EQ(Cond(s, "Running")["reason"], "NotAdmitted");
  EXPECT_EQ(Cond(s, "Failed")["status"], "False");
  EXPECT_FALSE(s.contains("currentStep"));
}

TEST(BuildStatusTest, TransitionTimesMoveOnlyWhenAConditionFlips) {
  Observed p;
  p.phase = Phase::kPending;
  p.reason = "Pending";
  const Json s0 = BuildStatus(Json(), p, 1, kT0);
  Observed r;
  r.phase = Phase::kRunning;
  r.nodes = {"n3", "n4"};
  r.standby = {"n0"};
  r.admission_reason = "admitted: rack z/b/r1";
  r.current_step = 40;
  r.restarts = 0;
  r.start_time = kT0 + 5;
  const Json s1 = BuildStatus(s0, r, 1, kT0 + 10);
  EXPECT_EQ(Cond(s1, "Admitted")["status"], "True");
  EXPECT_NE(Cond(s1, "Admitted")["lastTransitionTime"], Cond(s0, "Admitted")["lastTransitionTime"]);
  EXPECT_EQ(Cond(s1, "Failed")["lastTransitionTime"], Cond(s0, "Failed")["lastTransitionTime"]);
  EXPECT_EQ(s1["admission"]["nodes"], Json({"n3", "n4"}));
  EXPECT_EQ(s1["currentStep"], 40);
  r.current_step = 80;
  const Json s2 = BuildStatus(s1, r, 1, kT0 + 20);
  EXPECT_EQ(Cond(s2, "Running")["lastTransitionTime"], Cond(s1, "Running")["lastTransitionTime"]);
  EXPECT_FALSE(MaterialChange(s1, s2));  // only progress moved
  Observed x = r;
  x.phase = Phase::kRestarting;
  x.reason = "NodeLost";
  x.message = "node n4 failed: NotReady";
  x.restarts = 1;
  const Json s3 = BuildStatus(s2, x, 1, kT0 + 30);
  EXPECT_TRUE(MaterialChange(s2, s3));
  EXPECT_EQ(s3["phase"], "Restarting");
  EXPECT_EQ(Cond(s3, "Restarting")["status"], "True");
  EXPECT_EQ(Cond(s3, "Restarting")["reason"], "NodeLost");
  EXPECT_EQ(s3["restarts"], 1);
}

TEST(StatusWriteDueTest, MaterialAtOnceProgressPacedEttrOnlyRarely) {
  Observed r;
  r.phase = Phase::kRunning;
  r.current_step = 40;
  r.has_ledger = true;
  r.ledger.wall_s = 10;
  r.ledger.seconds[TimeCategory::kProductive] = 9;
  const Json s1 = BuildStatus(Json(), r, 1, kT0);
  const StatusWriteIntervals iv{5, 60};
  EXPECT_FALSE(StatusWriteDue(s1, s1, 1000, iv));  // nothing changed: never
  Observed stepped = r;
  stepped.current_step = 41;
  const Json s2 = BuildStatus(s1, stepped, 1, kT0 + 1);
  EXPECT_FALSE(StatusWriteDue(s1, s2, 4.9, iv));
  EXPECT_TRUE(StatusWriteDue(s1, s2, 5, iv));
  Observed waiting = r;  // same step, the ledger moved on (waiting for pods)
  waiting.ledger.wall_s = 20;
  const Json s3 = BuildStatus(s1, waiting, 1, kT0 + 10);
  ASSERT_NE(s1, s3);
  EXPECT_FALSE(StatusWriteDue(s1, s3, 59, iv));
  EXPECT_TRUE(StatusWriteDue(s1, s3, 60, iv));
  EXPECT_FALSE(StatusWriteDue(s1, s3, 7, {10, 2}));  // idle never shorter than progress
  Observed failed = r;
  failed.phase = Phase::kRestarting;
  failed.reason = "NodeLost";
  EXPECT_TRUE(StatusWriteDue(s1, BuildStatus(s1, failed, 1, kT0 + 1), 0, iv));
  EXPECT_TRUE(StatusWriteDue(Json(), s1, 0, iv));  // the first status
}

TEST(BuildStatusTest, TerminalWithCheckpointAndEttr) {
  Observed o;
  o.phase = Phase::kSucceeded;
  o.reason = "Succeeded";
  o.message = "all ranks exited 0";
  o.checkpoint_step = 150;
  o.checkpoint_tier = "disk";
  o.checkpoint_time = kT0 + 100;
  o.has_ledger = true;
  o.ledger.wall_s = 200;
  for (TimeCategory c : {TimeCategory::kProductive, TimeCategory::kCheckpoint,
                         TimeCategory::kDetection, TimeCategory::kRestart, TimeCategory::kReinit,
                         TimeCategory::kRework, TimeCategory::kIdle}) {
    o.ledger.seconds[c] = 0;
  }
  o.ledger.seconds[TimeCategory::kProductive] = 180;
  o.ledger.seconds[TimeCategory::kRestart] = 20;
  o.start_time = kT0;
  o.completion_time = kT0 + 200;
  const Json s = BuildStatus(Json(), o, 2, kT0 + 200);
  EXPECT_EQ(s["phase"], "Succeeded");
  EXPECT_EQ(Cond(s, "Succeeded")["status"], "True");
  EXPECT_EQ(Cond(s, "Running")["reason"], "Finished");
  EXPECT_EQ(s["lastCheckpoint"]["step"], 150);
  EXPECT_EQ(s["lastCheckpoint"]["tier"], "disk");
  EXPECT_DOUBLE_EQ(s["ettr"]["ratio"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(s["ettr"]["lostSeconds"]["restart"].get<double>(), 20);
  EXPECT_FALSE(s["ettr"]["lostSeconds"].contains("productive"));
  EXPECT_TRUE(s.contains("completionTime"));
  EXPECT_TRUE(s.contains("startTime"));
  EXPECT_FALSE(s.contains("lastIncident")) << "no incident, no lastIncident";
}

TEST(BuildStatusTest, LastIncidentSaysWhatHappenedWhatWasTestedAndTheCause) {
  Observed o;
  o.phase = Phase::kRunning;
  o.incidents = 2;
  o.last_incident = {
      {"kind", "nan"},
      {"step", 37},
      {"rank", 0},
      {"node_id", "node-0"},
      {"detail", "rank 0 reported a NaN/Inf loss at step 37"},
      {"decision", {{"action", "replace_node"}, {"reason", "rolling back to step 36"}}},
      {"diagnosis",
       {{"run", true},
        {"node_id", "node-0"},
        {"verdict", "healthy"},
        {"summary", "healthy: matmul; disk:/ck passed"},
        {"action", "rejoined as a warm standby"}}},
      {"classification",
       {{"cause", "hardware"},
        {"evidence", "the NaN did not come back on another node"},
        {"action", "quarantined"}}},
      {"replay", {{"losses", {{"36", {{"0", 2.5}}}}}}}};
  const Json s = BuildStatus(Json(), o, 1, kT0);
  const Json& li = s["lastIncident"];
  EXPECT_EQ(li["number"], 2);
  EXPECT_EQ(li["kind"], "nan");
  EXPECT_EQ(li["node"], "node-0");
  EXPECT_EQ(li["action"], "replace_node");
  EXPECT_EQ(li["diagnosis"],
            "node-0: healthy (healthy: matmul; disk:/ck passed); rejoined as a warm standby");
  EXPECT_EQ(li["cause"], "hardware");
  EXPECT_EQ(li["causeEvidence"], "the NaN did not come back on another node; quarantined");
  EXPECT_FALSE(li.contains("replay")) << "the bundle stays in the report, not the status";
}

}  // namespace
}  // namespace bulwark::op
