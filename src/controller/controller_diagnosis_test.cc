// Stop-diagnose and the bitwise alignment check in the controller (docs/diagnosis.md),
// on a FakeClock with the test playing every agent (controller_fixture.h).
#include <gtest/gtest.h>

#include "controller/controller_fixture.h"

namespace bulwark {
namespace {

const char* kA = "00000000000000aa";
const char* kB = "00000000000000bb";

class ControllerDiagnosisTest : public testing::ControllerFixture {
 protected:
  // Every rank reports a digest of its parameters after `step`; rank `odd` reports `d`.
  void Digests(long step, int odd = -1, const char* d = kB, int world = 4) {
    for (int r = 0; r < world; ++r) {
      Send(r / 2, {{"type", "digest"},
                   {"attempt", 0},
                   {"rank", r},
                   {"step", step},
                   {"digest", r == odd ? d : kA}});
    }
    for (int i = 0; i < 5; ++i) ctl_->RunOnce();
  }
  // Without a standby: see ControllerFixture::FaultThenDiagnose.
  Json FaultWithoutStandby(const char* kind, const char* subtype, int rank) {
    return FaultThenDiagnose(TwoNodeSpec("diag", 0), kind, subtype, rank);
  }
  static Json Failed(const std::string& evidence) {
    return {{"type", "diagnosis"},
            {"results",
             Json::array(
                 {Json{{"name", "matmul"}, {"ok", false}, {"seconds", 0.5}, {"evidence", evidence}},
                  Json{{"name", "disk:/ck"},
                       {"ok", true},
                       {"seconds", 0.2},
                       {"evidence", "16 MiB read back"}}})}};
  }
};

TEST_F(ControllerDiagnosisTest, ARankWhoseParametersDivergeSendsItsNodeToItsChecks) {
  Begin(TwoNodeSpec("diag", 1));
  Expect(0, "start");
  Expect(1, "start");
  ASSERT_EQ(backend_.started.size(), 3u);  // two slots and a standby
  const int standby = Connect(backend_.started[2].node_id, 102);
  Started(0);
  Step(0, 10);
  Digests(10);     // every rank agrees: step 10 is verified
  Digests(20, 3);  // rank 3 (node-1) differs from ranks 0..2
  Expect(0, "stop");
  Expect(1, "stop");
  Stopped(0, {});
  // node-1 leaves the job for its checks; the standby takes slot 1 at once.
  Json diagnose = Expect(1, "diagnose");
  EXPECT_EQ(diagnose["checks"], Json::array({"matmul", "disk"}));
  EXPECT_GT(diagnose["budget_s"].get<double>(), 0);
  Json start = Expect(standby, "start");
  EXPECT_EQ(start["group_rank"], 1);
  // The checks fail: node-1 is quarantined through the backend and released.
  Json verdict = Failed("two runs differ bit for bit: silent data corruption");
  verdict["id"] = diagnose["id"];
  Send(1, verdict);
  Expect(1, "shutdown");
  ASSERT_EQ(backend_.quarantined.size(), 1u);
  EXPECT_EQ(backend_.quarantined[0].rfind("node-1: bulwark: failed diagnostics: unhealthy", 0), 0u)
      << backend_.quarantined[0];
  Json report = Finish();
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["kind"], "sdc");
  EXPECT_EQ(inc["rank"], 3);
  EXPECT_EQ(inc["node_id"], "node-1");
  EXPECT_EQ(inc["good_step"], 10);
  EXPECT_EQ(inc["decision"]["action"], "replace_node");
  EXPECT_EQ(inc["decision"]["resume_step_max"], 10);
  EXPECT_NE(inc["detail"].get<std::string>().find("rank 3 differ bit for bit from those of "
                                                  "ranks 0, 1, 2"),
            std::string::npos)
      << inc["detail"];
  const Json& d = inc["diagnosis"];
  EXPECT_EQ(d["node_id"], "node-1");
  EXPECT_EQ(d["verdict"], "unhealthy");
  EXPECT_EQ(d["action"], "quarantined");
  EXPECT_EQ(d["checks"].size(), 2u);
  EXPECT_EQ(d["charged_s"], 0.0);  // a standby ran the job meanwhile
  EXPECT_EQ(report["seconds"]["diagnosis"], 0.0);
}

TEST_F(ControllerDiagnosisTest, WithoutAStandbyTheRelaunchWaitsForTheVerdictAndIsCharged) {
  Json diagnose = FaultWithoutStandby("crash", "SIGSEGV", 1);
  // Nothing starts while node-0 is tested; the wait is the ledger's diagnosis time.
  for (int i = 0; i < 40; ++i) ctl_->RunOnce();
  for (const Json& m : agents_[0].Read()) EXPECT_NE(m["type"], "start") << m.dump();
  clock_.Advance(3);
  Send(0, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results", Json::array({Json{{"name", "matmul"},
                                         {"ok", true},
                                         {"seconds", 0.3},
                                         {"evidence", "256x256 float32 twice: equal"}}})}});
  Json start = Expect(0, "start");
  EXPECT_EQ(start["attempt"], 1);
  EXPECT_EQ(start["group_rank"], 0);
  EXPECT_TRUE(backend_.quarantined.empty());
  Json report = Finish();
  const Json& d = report["incidents"][0]["diagnosis"];
  EXPECT_EQ(d["verdict"], "healthy");
  EXPECT_EQ(d["action"], "kept in slot 0");
  EXPECT_GE(d["charged_s"].get<double>(), 3.0);
  EXPECT_GE(report["seconds"]["diagnosis"].get<double>(), 3.0);
  EXPECT_GE(report["incidents"][0]["diagnosis_s"].get<double>(), 3.0);
}

TEST_F(ControllerDiagnosisTest, ChecksThatNeverAnswerFailTheNodeAtTheirDeadline) {
  FaultWithoutStandby("fatal_log", "xid", 2);
  const size_t before = backend_.started.size();
  // No answer: past the deadline the node is quarantined and a new node takes slot 1.
  for (int i = 0; i < 20000 && backend_.quarantined.empty(); ++i) ctl_->RunOnce();
  ASSERT_EQ(backend_.quarantined.size(), 1u);
  EXPECT_NE(backend_.quarantined[0].find("no verdict within"), std::string::npos)
      << backend_.quarantined[0];
  for (int i = 0; i < 100 && backend_.started.size() == before; ++i) ctl_->RunOnce();
  ASSERT_EQ(backend_.started.size(), before + 1);
  EXPECT_EQ(backend_.started.back().slot, 1);
  Json report = Finish();
  EXPECT_EQ(report["incidents"][0]["diagnosis"]["verdict"], "unhealthy");
}

TEST_F(ControllerDiagnosisTest, DivergenceWithoutAMajorityNamesNoNodeAndTestsNone) {
  Begin(TwoNodeSpec("diag", 1));
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 10);
  Digests(10);
  for (int r = 0; r < 4; ++r) {  // two against two
    Send(r / 2, {{"type", "digest"},
                 {"attempt", 0},
                 {"rank", r},
                 {"step", 20},
                 {"digest", r < 2 ? kA : kB}});
  }
  Expect(0, "stop");
  Expect(1, "stop");
  Stopped(0, {});
  Json start = Expect(0, "start");
  EXPECT_EQ(start["attempt"], 1);
  for (const Json& m : agents_[1].Read()) EXPECT_NE(m["type"], "diagnose") << m.dump();
  Json report = Finish();
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["kind"], "sdc");
  EXPECT_EQ(inc["rank"], -1);
  EXPECT_EQ(inc["decision"]["resume_step_max"], 10);
  EXPECT_NE(inc["detail"].get<std::string>().find("no majority"), std::string::npos);
  EXPECT_FALSE(inc.contains("diagnosis")) << inc.dump();
}

TEST_F(ControllerDiagnosisTest, DigestsOfAnotherAttemptAreNotCompared) {
  Begin(TwoNodeSpec("diag", 1));
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 10);
  for (int r = 0; r < 4; ++r) {  // a late report of an earlier attempt: 3 against 1
    Send(r / 2, {{"type", "digest"},
                 {"attempt", 5},
                 {"rank", r},
                 {"step", 20},
                 {"digest", r == 3 ? kB : kA}});
  }
  for (int i = 0; i < 50; ++i) ctl_->RunOnce();
  for (const Json& m : agents_[0].Read()) EXPECT_NE(m["type"], "stop") << m.dump();
  Json report = Finish();
  for (const Json& inc : report["incidents"]) EXPECT_NE(inc["kind"], "sdc") << inc.dump();
}

TEST_F(ControllerDiagnosisTest, APythonErrorIsNotTheMachinesAndNobodyIsTested) {
  Begin(TwoNodeSpec("diag", 1));
  Expect(0, "start");
  Expect(1, "start");
  Started(0);
  Step(0, 5);
  const double t = clock_.NowWall();
  Send(1, {{"type", "incident"},
           {"attempt", 0},
           {"kind", "crash"},
           {"subtype", "exit 1"},
           {"rank", 2},
           {"step", 5},
           {"fault_time", t},
           {"detect_time", t},
           {"detail", "rank 2 exited 1: ValueError"}});
  Expect(1, "stop");
  Stopped(0, {});
  Json start = Expect(1, "start");
  EXPECT_EQ(start["attempt"], 1);  // the same node, not the standby
  Json report = Finish();
  const Json& d = report["incidents"][0]["diagnosis"];
  EXPECT_EQ(d["run"], false);
  EXPECT_NE(d["reason"].get<std::string>().find("software cause"), std::string::npos) << d;
  EXPECT_TRUE(backend_.quarantined.empty());
}

}  // namespace
}  // namespace bulwark
