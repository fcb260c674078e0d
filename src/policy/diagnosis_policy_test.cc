#include "policy/diagnosis_policy.h"

#include <gtest/gtest.h>

#include "policy/regroup.h"

namespace bulwark {
namespace {

Incident Inc(FaultKind k, const std::string& subtype = "", int node = 1) {
  Incident i;
  i.kind = k;
  i.subtype = subtype;
  i.node = node;
  i.rank = node * 2;
  return i;
}

Decision Restart() { return Decision{}; }

TEST(DiagnosisPolicyTest, UncertainCausesAreDiagnosed) {
  for (const Incident& i :
       {Inc(FaultKind::kHang), Inc(FaultKind::kSdc), Inc(FaultKind::kFatalLog, "xid"),
        Inc(FaultKind::kFatalLog, "nccl_timeout"), Inc(FaultKind::kCrash, "SIGSEGV"),
        Inc(FaultKind::kCrash, "SIGBUS"), Inc(FaultKind::kCrash, kCollectiveErrorSubtype)}) {
    DiagnosisDecision d = ShouldDiagnose(i, 0, Restart());
    EXPECT_TRUE(d.run) << FaultKindName(i.kind) << " " << i.subtype;
    EXPECT_EQ(d.node, 1);
    EXPECT_FALSE(d.reason.empty());
  }
}

TEST(DiagnosisPolicyTest, CertainCausesAreNotDiagnosedTheFirstTime) {
  for (const Incident& i :
       {Inc(FaultKind::kCrash, "exit 1"), Inc(FaultKind::kCrash, "SIGKILL"),
        Inc(FaultKind::kFatalLog, "oom"), Inc(FaultKind::kNan), Inc(FaultKind::kNodeLost)}) {
    DiagnosisDecision d = ShouldDiagnose(i, 0, Restart());
    EXPECT_FALSE(d.run) << FaultKindName(i.kind) << " " << i.subtype;
    EXPECT_FALSE(d.reason.empty());
  }
}

TEST(DiagnosisPolicyTest, ASecondFaultOnTheSameMachineIsDiagnosed) {
  DiagnosisDecision d = ShouldDiagnose(Inc(FaultKind::kCrash, "SIGKILL"), 1, Restart());
  EXPECT_TRUE(d.run);
  EXPECT_NE(d.reason.find("1 earlier fault;"), std::string::npos) << d.reason;
  EXPECT_TRUE(ShouldDiagnose(Inc(FaultKind::kFatalLog, "oom"), 2, Restart()).run);
  // A NaN or a lost node is never the machine's to test, however often.
  EXPECT_FALSE(ShouldDiagnose(Inc(FaultKind::kNan), 3, Restart()).run);
  EXPECT_FALSE(ShouldDiagnose(Inc(FaultKind::kNodeLost), 3, Restart()).run);
}

TEST(DiagnosisPolicyTest, NothingToTestWithoutANodeOrAfterGivingUp) {
  EXPECT_FALSE(ShouldDiagnose(Inc(FaultKind::kHang, "", -1), 0, Restart()).run);
  Decision give_up;
  give_up.action = Action::kGiveUp;
  EXPECT_FALSE(ShouldDiagnose(Inc(FaultKind::kHang), 0, give_up).run);
}

TEST(RecoveryPolicySdcTest, ReplacesTheNodeAndResumesNoLaterThanTheLastVerifiedStep) {
  FaultPolicySpec spec;
  spec.restart_budget = 5;
  RecoveryPolicy p(spec, 1);
  Incident i = Inc(FaultKind::kSdc);
  i.step = 40;
  i.good_step = 30;
  JobHistory h;
  h.committed_steps = {10, 20, 30, 40};
  h.spares_available = 1;
  Decision d = p.Decide(i, h, 0);
  EXPECT_EQ(d.action, Action::kReplaceNode);
  EXPECT_EQ(d.replace_node, 1);
  EXPECT_EQ(d.resume_step_max, 30);
  EXPECT_FALSE(d.resume_from_scratch);
  EXPECT_NE(d.reason.find("from step 30 (the last whose parameters were verified)"),
            std::string::npos)
      << d.reason;
  EXPECT_NE(d.reason.find("silent data corruption"), std::string::npos) << d.reason;
  // No spare: in place, still no later than the verified step; none verified: scratch.
  h.spares_available = 0;
  d = p.Decide(i, h, 0);
  EXPECT_EQ(d.action, Action::kRestartInPlace);
  EXPECT_EQ(d.resume_step_max, 30);
  i.good_step = -1;
  d = p.Decide(i, h, 0);
  EXPECT_TRUE(d.resume_from_scratch);
  EXPECT_NE(d.reason.find("from scratch"), std::string::npos) << d.reason;
}

TEST(RegroupSdcTest, TheCorruptNodesRanksAreReplaced) {
  Incident i = Inc(FaultKind::kSdc);
  Decision d;
  d.action = Action::kReplaceNode;
  d.replace_node = 1;
  RegroupInput in;
  in.enabled = true;
  in.world_size = 4;
  in.procs_per_node = 2;
  in.capable = {0, 1, 2, 3};
  RegroupPlan p = PlanRegroup(i, d, in);
  EXPECT_EQ(p.replace, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.keep, (std::vector<int>{0, 1}));
}

TEST(DiagnosisPolicyTest, AFullCheckpointDiskTestsTheNodeAtOnce) {
  // ENOSPC on a checkpoint write (the agent's fatal-log rule disk_full): without
  // checkpoints the job runs exposed, so the node's disks are tested on the first one.
  DiagnosisDecision d = ShouldDiagnose(Inc(FaultKind::kFatalLog, "disk_full"), 0, Restart());
  EXPECT_TRUE(d.run);
  EXPECT_EQ(d.reason, "a checkpoint write found no space: the node's disks are tested");
}

}  // namespace
}  // namespace bulwark
