#include "policy/replay_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "policy/diagnosis_policy.h"

namespace bulwark {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Incident Fault(FaultKind kind, const std::string& subtype, int rank, long step) {
  Incident i;
  i.kind = kind;
  i.subtype = subtype;
  i.rank = rank;
  i.node = rank / 2;
  i.step = step;
  return i;
}

// Losses of 2 ranks for steps 11..15: rank r at step s is s + r / 10.
LossTable Recorded() {
  LossTable t;
  for (long s = 11; s <= 15; ++s) {
    for (int r = 0; r < 2; ++r) t[s][r] = static_cast<double>(s) + r / 10.0;
  }
  return t;
}

// The RNG and data digests a deterministic trainer reports with those losses.
StepDigests DigestsOf(long s, int r) {
  return {static_cast<uint64_t>(s * 100 + r + 1), static_cast<uint64_t>(s * 1000 + r + 7)};
}
DigestTable RecordedDigests() {
  DigestTable t;
  for (long s = 11; s <= 15; ++s) {
    for (int r = 0; r < 2; ++r) t[s][r] = DigestsOf(s, r);
  }
  return t;
}

// Feeds the re-run of steps 11..upto with the recorded losses and digests (rank 0 at
// `nan_step`: NaN).
void Rerun(ReplayCheck* c, long upto, long nan_step = -1) {
  for (long s = 11; s <= upto; ++s) {
    for (int r = 0; r < 2; ++r) {
      c->OnLoss(s, r, s == nan_step && r == 0 ? kNaN : static_cast<double>(s) + r / 10.0,
                DigestsOf(s, r));
    }
  }
}

TEST(LossWindowTest, KeepsTheNewestStepsAndForgetsTheFutureOnResume) {
  LossWindow w(3);
  for (long s = 1; s <= 5; ++s) w.Record(s, 0, static_cast<double>(s));
  EXPECT_EQ(w.Range(-1, 100).size(), 3u);
  EXPECT_EQ(w.Range(-1, 100).begin()->first, 3);
  EXPECT_EQ(w.Range(3, 4).size(), 1u);
  w.DropAfter(3);
  EXPECT_EQ(w.Range(-1, 100).rbegin()->first, 3);
  // Digests are kept with their losses; ranks that reported none are left out; a NaN is
  // kept for its digests, not among the losses.
  w.Record(3, 2, std::numeric_limits<double>::quiet_NaN(), {9, 9});
  EXPECT_EQ(w.Range(-1, 100).at(3).count(2), 0u);
  EXPECT_EQ(w.DigestRange(-1, 100).at(3).at(2), (StepDigests{9, 9}));
  w.Record(3, 1, 3.5, {7, 0});
  const DigestTable d = w.DigestRange(-1, 100);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.at(3).size(), 2u);
  EXPECT_EQ(d.at(3).at(1), (StepDigests{7, 0}));
  // Bounded by losses too: 4 ranks a step, at most 10 losses: the last 2 steps stay.
  LossWindow many(100, 10);
  for (long s = 1; s <= 5; ++s) {
    for (int r = 0; r < 4; ++r) many.Record(s, r, 1.0);
  }
  const LossTable kept = many.Range(-1, 100);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.begin()->first, 4);
  many.Record(5, 0, 2.0);  // a report again replaces, it does not count twice
  EXPECT_EQ(many.Range(-1, 100).size(), 2u);
}

TEST(ReplayCheckTest, ANanThatComesBackWithTheSameDataIsTheData) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  ReplayCheck c(nan, Recorded(), /*data_skipped=*/false, /*moved_ranks=*/{0, 1});
  Rerun(&c, 14);
  EXPECT_FALSE(c.passed());
  Classification k = Classify(c, &nan);
  EXPECT_EQ(k.cause, FaultCause::kData);
  EXPECT_THAT(k.evidence, HasSubstr("came back at step 15 on rank 0 on another node"));
  EXPECT_THAT(k.evidence, HasSubstr("steps 11-14: 8 of 8 losses of 2 ranks equal bit for bit"));
}

TEST(ReplayCheckTest, ANanThatComesBackAfterItsDataWasSkippedIsTheProgram) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  ReplayCheck c(nan, Recorded(), /*data_skipped=*/true, {});
  c.OnLoss(12, 0, 99.0);  // other data: nothing is compared
  EXPECT_EQ(c.compared(), 0);
  EXPECT_EQ(Classify(c, &nan).cause, FaultCause::kCode);
  // Passing the step with the batches skipped confirms the data.
  c.OnLoss(15, 0, 2.5);
  ASSERT_TRUE(c.passed());
  EXPECT_EQ(Classify(c, nullptr).cause, FaultCause::kData);
}

TEST(ReplayCheckTest, ANanThatDoesNotComeBackOnAnotherNodeIsTheNodes) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  LossTable rec = Recorded();
  rec[15][0] = kNaN;
  ReplayCheck c(nan, rec, false, {0, 1});
  Rerun(&c, 14);
  c.OnLoss(15, 0, 15.0);  // the NaN's rank passes its step
  ASSERT_TRUE(c.passed());
  EXPECT_EQ(c.compared(), 8);
  EXPECT_FALSE(c.Complete()) << "rank 1's loss of step 15 (another node's report) is due";
  c.OnLoss(15, 1, 15.1);
  EXPECT_TRUE(c.Complete());
  EXPECT_EQ(c.compared(), 9);
  c.OnLoss(15, 1, 15.1);  // reported twice: compared once
  EXPECT_EQ(c.compared(), 9);
  Classification k = Classify(c, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kHardware);
  EXPECT_THAT(k.evidence, HasSubstr("did not come back with the same data on another node"));
}

// The NaN's own step: its loss is the fault, but its digests say whether the re-run of
// that step read the same data; other data is no verdict, not the node's fault.
TEST(ReplayCheckTest, ANansStepIsComparedByItsDigests) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  LossTable rec = Recorded();
  rec[15].erase(0);  // the NaN: no loss, as LossWindow::Range gives it
  ReplayCheck same(nan, rec, false, {0, 1}, RecordedDigests());
  Rerun(&same, 15);
  ASSERT_TRUE(same.passed());
  Classification k = Classify(same, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kHardware);
  // Rank 1's report of step 15, after rank 0 passed, is compared too.
  EXPECT_THAT(k.evidence, HasSubstr("steps 11-15: 9 of 9 losses of 2 ranks"));
  EXPECT_THAT(k.evidence, HasSubstr("data digests 10 of 10 equal"));
  ReplayCheck other(nan, rec, false, {0, 1}, RecordedDigests());
  Rerun(&other, 14);
  other.OnLoss(15, 0, 1.5, {DigestsOf(15, 0).rng, 4242});  // step 15 read another batch
  ASSERT_TRUE(other.passed());
  k = Classify(other, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kUnknown);
  EXPECT_THAT(k.evidence, HasSubstr("the re-run did not compute what was recorded"));
  EXPECT_THAT(k.evidence, HasSubstr("rank 0 read other data than recorded at step 15"));
}

TEST(ReplayCheckTest, ANanThatDoesNotComeBackOnTheSameNodeIsTransient) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  ReplayCheck c(nan, Recorded(), false, {});
  Rerun(&c, 15);
  EXPECT_EQ(Classify(c, nullptr).cause, FaultCause::kTransient);
}

TEST(ReplayCheckTest, ALossThatDiffersBitForBitWithTheSameRandomNumbersAndDataIsTheHardware) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  ReplayCheck c(nan, Recorded(), false, {}, RecordedDigests());
  EXPECT_TRUE(c.rng_recorded());
  c.OnLoss(12, 1, std::nextafter(12.1, 13.0), DigestsOf(12, 1));  // one ulp away
  Rerun(&c, 15);
  EXPECT_EQ(c.first_diff().step, 12);
  EXPECT_EQ(c.first_diff().rank, 1);
  EXPECT_EQ(c.rng().compared, c.rng().equal);
  EXPECT_EQ(c.data().compared, c.data().equal);
  EXPECT_GT(c.rng().compared, 0);
  Classification k = Classify(c, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kHardware);
  EXPECT_THAT(k.evidence, HasSubstr("first difference at step 12 on rank 1"));
  EXPECT_THAT(k.evidence, HasSubstr("RNG states 10 of 10 equal; data digests 10 of 10 equal"));
  // The same divergence with the fault coming back: still not the data's.
  ReplayCheck again(nan, Recorded(), false, {}, RecordedDigests());
  again.OnLoss(12, 1, 0.5, DigestsOf(12, 1));
  EXPECT_EQ(Classify(again, &nan).cause, FaultCause::kHardware);
}

TEST(ReplayCheckTest, ALossThatDiffersGetsNoVerdictWithoutEvidenceOfDeterminism) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  // No digests recorded: the trainer never asked for determinism.
  ReplayCheck blind(nan, Recorded(), false, {});
  blind.OnLoss(12, 1, std::nextafter(12.1, 13.0));
  Rerun(&blind, 15);
  Classification k = Classify(blind, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kUnknown);
  EXPECT_THAT(k.evidence, HasSubstr("did not call bulwark.deterministic"));
  EXPECT_THAT(k.evidence, HasSubstr("no verdict"));
  EXPECT_EQ(Classify(blind, &nan).cause, FaultCause::kUnknown);  // came back: no verdict either
  // Rank 1 drew other random numbers at step 12.
  ReplayCheck rng(nan, Recorded(), false, {}, RecordedDigests());
  rng.OnLoss(12, 1, std::nextafter(12.1, 13.0), {999, DigestsOf(12, 1).data});
  Rerun(&rng, 15);
  EXPECT_EQ(rng.rng().first_diff_step, 12);
  k = Classify(rng, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kUnknown);
  EXPECT_THAT(k.evidence,
              HasSubstr("rank 1's random-generator state differs from the record at step 12"));
  // Rank 0 read other data at step 13.
  ReplayCheck data(nan, Recorded(), false, {}, RecordedDigests());
  data.OnLoss(13, 0, 0.25, {DigestsOf(13, 0).rng, 12345});
  Rerun(&data, 15);
  k = Classify(data, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kUnknown);
  EXPECT_THAT(k.evidence, HasSubstr("rank 0 read other data than recorded at step 13"));
  EXPECT_THAT(data.Summary(), HasSubstr("data digests 9 of 10 equal (first difference at step "
                                        "13 on rank 0)"));
  // Equal losses need no digests: a NaN that did not come back elsewhere is the node's.
  LossTable rec = Recorded();
  rec[15][0] = kNaN;
  ReplayCheck moved(nan, rec, false, {0, 1});
  Rerun(&moved, 15);
  EXPECT_EQ(Classify(moved, nullptr).cause, FaultCause::kHardware);
}

// Gradients summed by DDP's ring (SumOrder::kUnordered): a re-run's last bits differ with
// no machine computing wrong, so the difference is never the hardware's; whether the
// fault came back still decides.
TEST(ReplayCheckTest, UnorderedSumsMakeBitDifferencesSayNothing) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  DigestTable unordered = RecordedDigests();
  for (auto& [step, ranks] : unordered) {
    for (auto& [rank, d] : ranks) d.sums = SumOrder::kUnordered;
  }
  const auto ulp_off = [&](ReplayCheck* c) {
    StepDigests d = DigestsOf(12, 1);
    d.sums = SumOrder::kUnordered;
    c->OnLoss(12, 1, std::nextafter(12.1, 13.0), d);  // one ulp away
    Rerun(c, 15);
  };
  // Passed on the same node: transient, not hardware; the evidence says why.
  ReplayCheck passed(nan, Recorded(), false, {}, unordered);
  EXPECT_TRUE(passed.unordered_sums());
  ulp_off(&passed);
  EXPECT_EQ(passed.first_diff().step, 12);
  Classification k = Classify(passed, nullptr);
  EXPECT_EQ(k.cause, FaultCause::kTransient) << k.evidence;
  EXPECT_THAT(k.evidence, HasSubstr("only whether the fault came back counts"));
  EXPECT_THAT(k.evidence, HasSubstr("bulwark.ordered_allreduce_hook"));
  // The NaN came back at its step with the same data: the data, ulps or not.
  ReplayCheck again(nan, Recorded(), false, {}, unordered);
  ulp_off(&again);
  EXPECT_EQ(Classify(again, &nan).cause, FaultCause::kData);
  // A re-run that alone reports unordered sums (the record predates the report) counts too.
  ReplayCheck rerun_only(nan, Recorded(), false, {}, RecordedDigests());
  EXPECT_FALSE(rerun_only.unordered_sums());
  ulp_off(&rerun_only);
  EXPECT_TRUE(rerun_only.unordered_sums());
  EXPECT_EQ(Classify(rerun_only, nullptr).cause, FaultCause::kTransient);
  // Ordered sums keep the bit-for-bit verdict.
  EXPECT_EQ(ParseSumOrder("ordered"), SumOrder::kOrdered);
  EXPECT_EQ(ParseSumOrder("unordered"), SumOrder::kUnordered);
  EXPECT_EQ(ParseSumOrder("ring"), SumOrder::kUnknown);
  EXPECT_STREQ(SumOrderName(SumOrder::kUnordered), "unordered");
}

// The program's own crash: an exit status (an exception), or a signal the process raises
// on itself (a segfault, a bus error, an illegal instruction, a division by zero, an
// abort); not a signal sent from outside.
TEST(ReplayCheckTest, TheProgramsOwnCrashAtTheSameStepIsTheProgram) {
  for (const auto& [how, other_how] :
       {std::pair<std::string, std::string>{"exit 1", "exit 2"}, {"SIGSEGV", "SIGBUS"}}) {
    SCOPED_TRACE(how);
    // Rank 1 crashes during step 14 (the last step reported is 13).
    Incident crash = Fault(FaultKind::kCrash, how, 1, 13);
    EXPECT_TRUE(Replayable(crash));
    EXPECT_EQ(FaultStep(crash), 14);
    ReplayCheck c(crash, Recorded(), false, {});
    Rerun(&c, 13);
    EXPECT_FALSE(c.passed());
    Classification k = Classify(c, &crash);
    EXPECT_EQ(k.cause, FaultCause::kCode);
    EXPECT_THAT(k.evidence, HasSubstr("rank 1 failed again (" + how + ") at step 14"));
    // Another exit status or signal, rank or step is another fault: no verdict.
    Incident other = crash;
    other.subtype = other_how;
    EXPECT_EQ(Classify(c, &other).cause, FaultCause::kUnknown);
    other = crash;
    other.step = 12;
    EXPECT_EQ(Classify(c, &other).cause, FaultCause::kUnknown);
    // A crash that does not come back is transient.
    ReplayCheck t(crash, Recorded(), false, {});
    Rerun(&t, 14);
    ASSERT_TRUE(t.passed());
    EXPECT_EQ(Classify(t, nullptr).cause, FaultCause::kTransient);
  }
  for (const char* sig : {"SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"}) {
    EXPECT_TRUE(Replayable(Fault(FaultKind::kCrash, sig, 1, 13))) << sig;
  }
  // Signals from outside, hangs and lost nodes are not replayed.
  EXPECT_FALSE(Replayable(Fault(FaultKind::kCrash, "SIGKILL", 1, 13)));
  EXPECT_FALSE(Replayable(Fault(FaultKind::kCrash, "SIGTERM", 1, 13)));
  EXPECT_FALSE(Replayable(Fault(FaultKind::kHang, "no_progress", 1, 13)));
}

TEST(ReplayCheckTest, NoVerdictBeforeTheFaultStepOrWhenAnotherFaultInterrupts) {
  Incident nan = Fault(FaultKind::kNan, "nan", 0, 15);
  ReplayCheck c(nan, Recorded(), false, {});
  Rerun(&c, 13);
  EXPECT_EQ(Classify(c, nullptr).cause, FaultCause::kUnknown);
  Incident hang = Fault(FaultKind::kHang, "no_progress", 1, 13);
  EXPECT_EQ(Classify(c, &hang).cause, FaultCause::kUnknown);
}

FaultPolicySpec Policy() {
  FaultPolicySpec p;
  p.restart_budget = 10;
  return p;
}

TEST(RecoveryPolicyReplayTest, AFirstNanIsReplayedOnAStandbyWhenOneIsReady) {
  RecoveryPolicy policy(Policy(), 1);
  JobHistory h;
  h.committed_steps = {10};
  h.high_water_step = 15;
  h.spares_available = 1;
  Incident nan = Fault(FaultKind::kNan, "nan", 2, 15);
  Decision d = policy.Decide(nan, h, 0);
  EXPECT_EQ(d.action, Action::kReplaceNode);
  EXPECT_EQ(d.replace_node, 1);
  EXPECT_EQ(d.resume_step_max, 10);
  EXPECT_EQ(d.skip_batches_from, -1) << "the replay keeps the data";
  EXPECT_THAT(d.reason, HasSubstr("tells the data from the node"));
  EXPECT_TRUE(ShouldDiagnose(nan, 0, d).run) << "the node out of the job is tested";
  h.spares_available = 0;
  d = policy.Decide(nan, h, 0);
  EXPECT_EQ(d.action, Action::kRollback);
  EXPECT_FALSE(ShouldDiagnose(nan, 0, d).run);
}

TEST(RecoveryPolicyReplayTest, DataSkipsTheBatchesAndCodeGivesUp) {
  RecoveryPolicy policy(Policy(), 1);
  JobHistory h;
  h.committed_steps = {10};
  h.high_water_step = 15;
  Incident first = Fault(FaultKind::kNan, "nan", 0, 15);
  h.incidents = {first};
  h.progress_at_incident = {15};
  Incident again = first;
  again.cause = FaultCause::kData;
  again.cause_evidence = "the NaN came back";
  Decision d = policy.Decide(again, h, 0);
  EXPECT_EQ(d.action, Action::kRollback);
  EXPECT_EQ(d.skip_batches_from, 11);
  EXPECT_EQ(d.skip_batches_to, 16);
  EXPECT_THAT(d.reason, HasSubstr("a replay shows it is the data: the NaN came back"));
  Incident crash = Fault(FaultKind::kCrash, "exit 1", 1, 13);
  crash.cause = FaultCause::kCode;
  crash.cause_evidence = "rank 1 failed again";
  d = policy.Decide(crash, JobHistory{}, 0);
  EXPECT_EQ(d.action, Action::kGiveUp);
  EXPECT_THAT(d.reason, HasSubstr("a replay shows it is the program: rank 1 failed again"));
}

}  // namespace
}  // namespace bulwark
