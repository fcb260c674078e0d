#include "policy/metric_faults.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark {
namespace {

using ::testing::HasSubstr;

TEST(MetricFaultsTest, LossSpikeAgainstTheMedianAfterWarmup) {
  MetricFaultDetector d({});
  // During warm-up nothing is judged, however large.
  for (long s = 1; s <= 10; ++s) EXPECT_FALSE(d.OnLoss(s, s == 3 ? 1000.0 : 2.0 - 0.01 * s));
  EXPECT_FALSE(d.OnLoss(11, 15.0));  // 7.7 x the median: below 10 x
  auto v = d.OnLoss(12, 25.0);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, "loss_spike");
  EXPECT_EQ(v->step, 12);
  EXPECT_NEAR(v->reference, 1.96, 0.02);
  EXPECT_THAT(v->evidence,
              HasSubstr("loss 25 at step 12 is 12.8 x the median 1.95 of the last 11 losses"));
  EXPECT_FALSE(d.OnLoss(13, std::nan("")));  // the agent's NaN detection handles these
  EXPECT_FALSE(d.OnLoss(14, 1.9));
}

TEST(MetricFaultsTest, StragglerMustBeSustainedAndIsNotRepeatedWhileQuiet) {
  MetricFaultDetector d({});
  const std::map<int, double> slow = {{0, 1.0}, {1, 0.5}, {2, 0.9}};
  EXPECT_TRUE(d.Evaluate(0, slow, {}).empty());
  EXPECT_TRUE(d.Evaluate(2, slow, {}).empty());  // < period_s later: not an evaluation
  EXPECT_TRUE(d.Evaluate(5, slow, {}).empty());
  auto v = d.Evaluate(10, slow, {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "straggler");
  EXPECT_EQ(v[0].rank, 1);
  EXPECT_THAT(v[0].evidence, HasSubstr("rank 1 works 0.50 x as fast as the fastest rank"));
  for (double t = 15; t < 300; t += 5) EXPECT_TRUE(d.Evaluate(t, slow, {}).empty()) << t;
  EXPECT_EQ(d.Evaluate(320, slow, {}).size(), 1u);  // quiet_s passed, still slow
}

TEST(MetricFaultsTest, AStreakBrokenByOneGoodEvaluationStartsOver) {
  MetricFaultDetector d({});
  EXPECT_TRUE(d.Evaluate(0, {}, {{1, 0.6}}).empty());
  EXPECT_TRUE(d.Evaluate(5, {}, {{1, 0.6}}).empty());
  EXPECT_TRUE(d.Evaluate(10, {}, {{1, 0.1}}).empty());
  EXPECT_TRUE(d.Evaluate(15, {}, {{1, 0.6}}).empty());
  EXPECT_TRUE(d.Evaluate(20, {}, {{1, 0.6}}).empty());
  auto v = d.Evaluate(25, {}, {{1, 0.6}});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "data_starvation");
  EXPECT_THAT(v[0].evidence, HasSubstr("rank 1 waited for data 60% of its step time"));
  d.OnRestart();
  EXPECT_TRUE(d.Evaluate(26, {}, {{2, 0.6}}).empty());  // counts start over
}

TEST(MetricFaultsTest, ThroughputCollapseAgainstItsOwnRecentMedian) {
  MetricFaultDetector d({});
  double t = 0;
  for (int i = 0; i < 12; ++i, t += 5) EXPECT_TRUE(d.Evaluate(t, {}, {}, 1000 + i).empty());
  EXPECT_TRUE(d.Evaluate(t, {}, {}, 600).empty());  // 60 %: not a collapse
  t += 5;
  for (int i = 0; i < 2; ++i, t += 5) EXPECT_TRUE(d.Evaluate(t, {}, {}, 300).empty());
  auto v = d.Evaluate(t, {}, {}, 300);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "throughput_collapse");
  EXPECT_EQ(v[0].rank, -1);
  EXPECT_THAT(v[0].evidence, HasSubstr("300 tokens/s, 30% of its recent median"));
  d.OnRestart();
  EXPECT_TRUE(d.Evaluate(t + 5, {}, {}, 10).empty());  // no reference after a restart
}

}  // namespace
}  // namespace bulwark
