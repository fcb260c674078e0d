#include "policy/recovery_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark {
namespace {

using ::testing::HasSubstr;

FaultPolicySpec Spec() {
  FaultPolicySpec s;
  s.restart_budget = 10;
  s.backoff_base_seconds = 1;
  s.backoff_cap_seconds = 30;
  s.max_same_fault_without_progress = 3;
  return s;
}

Incident Crash(int rank, long step) {
  Incident in;
  in.kind = FaultKind::kCrash;
  in.subtype = "SIGKILL";
  in.rank = rank;
  in.node = rank / 4;
  in.step = step;
  return in;
}

Incident Nan(long step) {
  Incident in;
  in.kind = FaultKind::kNan;
  in.rank = 0;
  in.node = 0;
  in.step = step;
  return in;
}

Incident NodeLost(int node) {
  Incident in;
  in.kind = FaultKind::kNodeLost;
  in.node = node;
  in.step = 50;
  return in;
}

JobHistory History(long high_water, std::vector<long> committed) {
  JobHistory h;
  h.high_water_step = high_water;
  h.committed_steps = std::move(committed);
  return h;
}

void AddEarlier(JobHistory& h, const Incident& in, long progress) {
  h.incidents.push_back(in);
  h.progress_at_incident.push_back(progress);
  ++h.restarts_used;
}

TEST(RecoveryPolicyTest, Names) {
  EXPECT_STREQ(FaultKindName(FaultKind::kNodeLost), "node_lost");
  EXPECT_STREQ(FaultKindName(FaultKind::kFatalLog), "fatal_log");
  EXPECT_STREQ(ActionName(Action::kReplaceNode), "replace_node");
  EXPECT_STREQ(ActionName(Action::kGiveUp), "give_up");
}

TEST(RecoveryPolicyTest, CrashRestartsInPlaceFromNewestWithReadableReason) {
  RecoveryPolicy p(Spec(), 7);
  JobHistory h = History(120, {50, 100});
  h.restarts_used = 1;
  Decision d = p.Decide(Crash(3, 120), h, 0);
  EXPECT_EQ(d.action, Action::kRestartInPlace);
  EXPECT_EQ(d.resume_step_max, -1);
  EXPECT_FALSE(d.resume_from_scratch);
  EXPECT_EQ(d.skip_batches_from, -1);
  EXPECT_EQ(d.backoff_seconds, 0) << "the first failure after progress restarts at once";
  EXPECT_THAT(d.reason, HasSubstr("rank 3 crashed (SIGKILL) at step 120; restarting in place "
                                  "from step 100 (restart 2 of 10)"));
  EXPECT_THAT(d.reason, Not(HasSubstr("backoff")));
  h.consecutive_failures = 1;  // the last restart made no progress: now it waits
  d = p.Decide(Crash(3, 120), h, 0);
  EXPECT_GE(d.backoff_seconds, 0.5);
  EXPECT_LE(d.backoff_seconds, 1.0);
  EXPECT_THAT(d.reason, HasSubstr("(restart 2 of 10) after "));
  EXPECT_THAT(d.reason, HasSubstr(" s backoff"));
}

TEST(RecoveryPolicyTest, BudgetExhaustedGivesUpWithDiagnosis) {
  FaultPolicySpec s = Spec();
  s.restart_budget = 2;
  RecoveryPolicy p(s, 1);
  JobHistory h = History(300, {200});
  AddEarlier(h, Crash(1, 100), 100);
  AddEarlier(h, NodeLost(2), 200);
  Decision d = p.Decide(Crash(3, 300), h, 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_THAT(d.reason, HasSubstr("restart budget is exhausted (2 of 2"));
  EXPECT_THAT(d.reason, HasSubstr("2 crash, 1 node_lost"));
  EXPECT_THAT(d.reason, HasSubstr("rank 3's log"));
  // One restart left: continue.
  h.restarts_used = 1;
  EXPECT_EQ(p.Decide(Crash(3, 300), h, 0).action, Action::kRestartInPlace);
}

TEST(RecoveryPolicyTest, SameFaultWithoutProgressGivesUp) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(120, {100});
  AddEarlier(h, Crash(3, 120), 120);
  // Second occurrence: 2 < 3, continue.
  EXPECT_EQ(p.Decide(Crash(3, 120), h, 0).action, Action::kRestartInPlace);
  AddEarlier(h, Crash(3, 120), 120);
  Decision d = p.Decide(Crash(3, 120), h, 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_THAT(d.reason, HasSubstr("the same fault 3 times with no new progress"));
  EXPECT_THAT(d.reason, HasSubstr("training reached step 120"));
}

TEST(RecoveryPolicyTest, SameFaultWithProgressContinues) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(400, {300});
  AddEarlier(h, Crash(3, 100), 100);
  AddEarlier(h, Crash(3, 200), 200);
  AddEarlier(h, Crash(3, 300), 300);
  // Only the last one (progress 400 == high water) would count; it is not there.
  EXPECT_EQ(p.Decide(Crash(3, 400), h, 0).action, Action::kRestartInPlace);
  // A different rank failing repeatedly without progress is not "the same fault".
  h.high_water_step = 300;
  h.progress_at_incident = {300, 300, 300};
  EXPECT_EQ(p.Decide(Crash(5, 300), h, 0).action, Action::kRestartInPlace);
  EXPECT_EQ(p.Decide(Crash(3, 300), h, 0).action, Action::kGiveUp);
}

TEST(RecoveryPolicyTest, NodeLostWithSpareReplaces) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(50, {40});
  h.spares_available = 1;
  Decision d = p.Decide(NodeLost(2), h, 0);
  EXPECT_EQ(d.action, Action::kReplaceNode);
  EXPECT_EQ(d.replace_node, 2);
  EXPECT_THAT(d.reason, HasSubstr("node 2 was lost (missed heartbeats) at step 50; replacing "
                                  "node 2 with a standby and restarting from step 40"));
}

TEST(RecoveryPolicyTest, WithTheMemoryTierTheReasonSaysWhereTheResumeComesFrom) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(154, {150});
  h.memory_tier = true;
  EXPECT_THAT(p.Decide(Crash(1, 154), h, 0).reason,
              HasSubstr("restarting in place from the newest step in memory (on disk: step 150)"));
  h.committed_steps.clear();
  EXPECT_THAT(p.Decide(Crash(1, 154), h, 0).reason,
              HasSubstr("from the newest step in memory (no committed checkpoint on disk)"));
}

TEST(RecoveryPolicyTest, NodeLostWithoutSpareRestartsInPlace) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(50, {});
  Decision d = p.Decide(NodeLost(2), h, 0);
  EXPECT_EQ(d.action, Action::kRestartInPlace);
  EXPECT_EQ(d.replace_node, -1);
  EXPECT_THAT(d.reason, HasSubstr("no spare node"));
  EXPECT_THAT(d.reason, HasSubstr("from scratch (no committed checkpoint)"));
}

TEST(RecoveryPolicyTest, HardwareFatalLogFollowsTheNode) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(50, {40});
  h.spares_available = 2;
  Incident in;
  in.kind = FaultKind::kFatalLog;
  in.subtype = "xid";
  in.rank = 5;
  in.node = 1;
  in.step = 50;
  Decision d = p.Decide(in, h, 0);
  EXPECT_EQ(d.action, Action::kReplaceNode);
  EXPECT_EQ(d.replace_node, 1);
  in.subtype = "oom";
  EXPECT_EQ(p.Decide(in, h, 0).action, Action::kRestartInPlace);
  in.subtype = "ecc";
  h.spares_available = 0;
  EXPECT_EQ(p.Decide(in, h, 0).action, Action::kRestartInPlace);
}

TEST(RecoveryPolicyTest, NanRollsBackToNewestCommittedStrictlyBelow) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(499, {300, 400, 500});
  Decision d = p.Decide(Nan(500), h, 0);
  EXPECT_EQ(d.action, Action::kRollback);
  EXPECT_EQ(d.resume_step_max, 400);  // 500 is not strictly below the NaN step
  EXPECT_FALSE(d.resume_from_scratch);
  EXPECT_EQ(d.skip_batches_from, -1);
  EXPECT_EQ(d.skip_batches_to, -1);
  EXPECT_THAT(d.reason, HasSubstr("NaN/Inf loss at step 500; rolling back to step 400"));

  d = p.Decide(Nan(450), History(449, {300, 400, 500}), 0);
  EXPECT_EQ(d.resume_step_max, 400);
}

TEST(RecoveryPolicyTest, FirstNanWithTheMemoryTierRollsBackOneStep) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(854, {840, 850});
  h.memory_tier = true;
  Decision d = p.Decide(Nan(855), h, 0);
  EXPECT_EQ(d.action, Action::kRollback);
  EXPECT_EQ(d.resume_step_max, 854);
  EXPECT_FALSE(d.resume_from_scratch);
  EXPECT_THAT(d.reason, HasSubstr("rolling back to step 854 (the step before the NaN"));
  // A recurrence within the window goes back through the committed steps, skipping data.
  AddEarlier(h, Nan(855), 854);
  d = p.Decide(Nan(856), h, 0);
  EXPECT_EQ(d.resume_step_max, 840);
  EXPECT_EQ(d.skip_batches_from, 841);
  EXPECT_EQ(d.skip_batches_to, 857);
}

TEST(RecoveryPolicyTest, NanWithNoCommittedStepBelowStartsFromScratch) {
  RecoveryPolicy p(Spec(), 1);
  Decision d = p.Decide(Nan(30), History(29, {30, 40}), 0);
  EXPECT_EQ(d.action, Action::kRollback);
  EXPECT_EQ(d.resume_step_max, -1);
  EXPECT_TRUE(d.resume_from_scratch);
  EXPECT_THAT(d.reason, HasSubstr("from scratch"));
}

TEST(RecoveryPolicyTest, RepeatedNanRollsBackFurtherAndSkipsData) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(499, {200, 300, 400});
  AddEarlier(h, Nan(500), 499);
  Decision d = p.Decide(Nan(502), h, 0);  // within the window of the earlier NaN
  EXPECT_EQ(d.action, Action::kRollback);
  EXPECT_EQ(d.resume_step_max, 300);
  EXPECT_EQ(d.skip_batches_from, 301);
  EXPECT_EQ(d.skip_batches_to, 503);
  EXPECT_THAT(d.reason, HasSubstr("rolling back further to step 300 and skipping the data "
                                  "batches of steps [301, 503)"));

  // A NaN far from the earlier one is a new fault: plain rollback.
  h.high_water_step = 899;
  h.committed_steps = {700, 800};
  d = p.Decide(Nan(900), h, 0);
  EXPECT_EQ(d.resume_step_max, 800);
  EXPECT_EQ(d.skip_batches_from, -1);
}

TEST(RecoveryPolicyTest, RepeatedNanClampsToOldestCheckpointThenGivesUp) {
  RecoveryPolicy p(Spec(), 1);
  JobHistory h = History(499, {400});
  AddEarlier(h, Nan(500), 499);
  Decision d = p.Decide(Nan(500), h, 0);
  EXPECT_EQ(d.resume_step_max, 400);
  EXPECT_EQ(d.skip_batches_from, 401);
  EXPECT_EQ(d.skip_batches_to, 501);
  AddEarlier(h, Nan(500), 499);
  d = p.Decide(Nan(500), h, 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_THAT(d.reason, HasSubstr("learning rate"));
}

TEST(RecoveryPolicyTest, BackoffGrowsAndCaps) {
  RecoveryPolicy p(Spec(), 42);
  EXPECT_EQ(p.Backoff(1), 0) << "one failure after progress is no crash loop";
  for (int n = 2; n <= 13; ++n) {
    const double nominal = std::min(30.0, static_cast<double>(1L << (n - 2)));
    const double b = p.Backoff(n);
    EXPECT_GE(b, 0.5 * nominal) << n;
    EXPECT_LE(b, nominal) << n;
  }
  EXPECT_LE(p.Backoff(1000000), 30.0);
  EXPECT_GE(p.Backoff(1000000), 15.0);
  EXPECT_EQ(p.Backoff(0), 0);
  FaultPolicySpec zero = Spec();
  zero.backoff_base_seconds = 0;
  EXPECT_EQ(RecoveryPolicy(zero, 1).Backoff(5), 0);
}

TEST(RecoveryPolicyTest, BackoffJitterIsDeterministicAndSpread) {
  EXPECT_EQ(RecoveryPolicy(Spec(), 9).Backoff(3), RecoveryPolicy(Spec(), 9).Backoff(3));
  double lo = 1, hi = 0;
  int differs = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    const double f = RecoveryPolicy(Spec(), seed).Backoff(2);  // nominal 1 s
    lo = std::min(lo, f);
    hi = std::max(hi, f);
    if (f != RecoveryPolicy(Spec(), seed + 1).Backoff(2)) ++differs;
  }
  EXPECT_GE(lo, 0.5);
  EXPECT_LE(hi, 1.0);
  EXPECT_LT(lo, 0.55);
  EXPECT_GT(hi, 0.95);
  EXPECT_GT(differs, 990);
}

TEST(RecoveryPolicyTest, ConsecutiveFailuresDriveBackoff) {
  RecoveryPolicy p(Spec(), 3);
  JobHistory h = History(10, {});
  h.consecutive_failures = 0;
  EXPECT_EQ(p.Decide(Crash(1, 10), h, 0).backoff_seconds, 0);
  h.consecutive_failures = 4;
  h.incidents = {Crash(2, 1), Crash(4, 2), Crash(6, 3), Crash(7, 4)};
  h.progress_at_incident = {10, 10, 10, 10};
  const double b = p.Decide(Crash(1, 10), h, 0).backoff_seconds;
  EXPECT_EQ(b, p.Backoff(5));
  EXPECT_GE(b, 4.0);
}

TEST(RecoveryPolicyTest, HangTimeoutMath) {
  FaultPolicySpec s = Spec();
  s.hang_timeout_floor_seconds = 30;
  s.hang_timeout_multiplier = 10;
  EXPECT_EQ(RecoveryPolicy::HangTimeout(s, {}), 30);
  EXPECT_EQ(RecoveryPolicy::HangTimeout(s, {1.0, 2.0, 0.5}), 30);  // 10 * 2 = 20 < floor
  EXPECT_EQ(RecoveryPolicy::HangTimeout(s, {5.0}), 50);
  // 200 durations: 1..200 / 10. Nearest rank ceil(0.99 * 200) = 198 -> 19.8 s.
  std::vector<double> d;
  for (int i = 200; i >= 1; --i) d.push_back(i / 10.0);
  EXPECT_DOUBLE_EQ(RecoveryPolicy::HangTimeout(s, d), 198.0);
  // 100 durations, one outlier: ceil(99) = 99th smallest excludes the single max.
  std::vector<double> e(99, 1.0);
  e.push_back(1000);
  EXPECT_DOUBLE_EQ(RecoveryPolicy::HangTimeout(s, e), 30.0);
  e.push_back(1000);  // 101 values: rank ceil(99.99) = 100 -> 1000
  EXPECT_DOUBLE_EQ(RecoveryPolicy::HangTimeout(s, e), 10000.0);
  // Garbage values are ignored.
  EXPECT_EQ(RecoveryPolicy::HangTimeout(s, {-1.0, std::nan("")}), 30);
}

}  // namespace
}  // namespace bulwark
