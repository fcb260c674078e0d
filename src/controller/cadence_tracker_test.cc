#include "controller/cadence_tracker.h"

#include <gtest/gtest.h>

#include <cmath>

#include "policy/cadence.h"

namespace bulwark {
namespace {

void Feed(CadenceTracker* t, int steps, double step_s, double stall_s) {
  for (int i = 0; i < steps; ++i) t->OnStep(step_s, stall_s);
}

TEST(CadenceTrackerTest, WaitsForEnoughStepReports) {
  CadenceTracker t(2, 0.004);
  Feed(&t, CadenceTracker::kMinStepReports - 1, 0.1, 0.001);
  EXPECT_FALSE(t.Evaluate(100, 0, 0.001, 9).has_value());
  t.OnStep(0.1, 0.001);
  EXPECT_TRUE(t.Evaluate(100, 0, 0.001, 10).has_value());
}

TEST(CadenceTrackerTest, AnnouncesTheOptimumAheadOfTheRanks) {
  CadenceTracker t(2, 0.004);
  Feed(&t, 10, 0.1, 0.001);
  t.OnPersist(1.0);
  // Rate: the prior (30 node-days at 0.004) plus nothing observed in 0 node-days.
  auto u = t.Evaluate(100, 0, 0, 37);
  ASSERT_TRUE(u.has_value());
  const double w = 0.001 + CadenceTracker::kBackgroundCost * 1.0;
  const long k = std::lround(MetaOptimalInterval(w, 2, 0.004) / 0.1);
  EXPECT_EQ(u->interval_steps, k);
  EXPECT_NEAR(u->failures_per_node_day, 0.004, 1e-12);
  // At least 2 s (20 steps) of lead, rounded up to a multiple of the interval.
  EXPECT_EQ(u->from_step % k, 0);
  EXPECT_GE(u->from_step, 37 + 20);
  EXPECT_LT(u->from_step, 37 + 20 + k);
  EXPECT_NE(u->reason.find("from step " + std::to_string(u->from_step)), std::string::npos)
      << u->reason;
  EXPECT_EQ(t.interval_steps(), k);
}

TEST(CadenceTrackerTest, ReevaluatesOnlyAfterTheIntervalAndOnMaterialChange) {
  CadenceTracker t(2, 0.004);
  Feed(&t, 10, 0.1, 0.001);
  t.OnPersist(1.0);
  auto first = t.Evaluate(100, 0, 0, 10);
  ASSERT_TRUE(first.has_value());
  // Too soon.
  EXPECT_FALSE(t.Evaluate(100 + CadenceTracker::kEvalEverySeconds - 1, 30, 0.01, 50));
  // Same inputs later: no material change.
  EXPECT_FALSE(t.Evaluate(100 + CadenceTracker::kEvalEverySeconds, 0, 0, 60));
  // 30 failures in 0.01 node-days: the rate jumps and the interval shrinks.
  auto second = t.Evaluate(100 + 2 * CadenceTracker::kEvalEverySeconds, 30, 0.01, 200);
  ASSERT_TRUE(second.has_value());
  const double rate = EstimateFailureRate(0.004, CadenceTracker::kPriorNodeDays, 30, 0.01);
  EXPECT_NEAR(second->failures_per_node_day, rate, 1e-12);
  EXPECT_LT(second->interval_steps, first->interval_steps);
  EXPECT_EQ(second->from_step % second->interval_steps, 0);
  EXPECT_GT(second->from_step, 200);
}

TEST(CadenceTrackerTest, PersistTimeFloorsTheInterval) {
  // A huge failure rate wants tiny intervals; a persist of 3 s caps how often.
  CadenceTracker t(8, 500);
  Feed(&t, 10, 0.5, 0.0);
  t.OnPersist(3.0);
  auto u = t.Evaluate(0, 0, 0, 0);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->interval_steps, 6);  // 3 s / 0.5 s
  EXPECT_NE(u->reason.find("to persist"), std::string::npos) << u->reason;
}

TEST(CadenceTrackerTest, IgnoresGarbageMeasurements) {
  CadenceTracker t(2, 0.004);
  for (int i = 0; i < 10; ++i) t.OnStep(std::nan(""), -1);
  EXPECT_FALSE(t.Evaluate(0, 0, 0, 0).has_value());  // no valid step reports yet
  Feed(&t, 10, 0.2, 0.002);
  t.OnPersist(-4);
  t.OnPersist(INFINITY);
  auto u = t.Evaluate(0, 0, 0, 0);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->interval_steps, std::lround(MetaOptimalInterval(0.002, 2, 0.004) / 0.2));
}

}  // namespace
}  // namespace bulwark
