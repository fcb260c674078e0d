#include "policy/cadence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace bulwark {
namespace {

TEST(CadenceTest, MetaIntervalMatchesHandComputation) {
  // lambda = 1000 * 0.005 / 86400 per s; dt* = sqrt(2 * 10 * 86400 / 5) = sqrt(345600).
  EXPECT_NEAR(MetaOptimalInterval(10, 1000, 0.005), 587.8775, 1e-3);
  // Quadrupling N halves the interval.
  EXPECT_NEAR(MetaOptimalInterval(10, 4000, 0.005), 293.9388, 1e-3);
  EXPECT_TRUE(std::isinf(MetaOptimalInterval(10, 1000, 0)));
  EXPECT_TRUE(std::isinf(MetaOptimalInterval(10, 0, 0.005)));
  EXPECT_EQ(MetaOptimalInterval(0, 1000, 0.005), 0);
  EXPECT_EQ(MetaOptimalInterval(std::nan(""), 1000, 0.005), 0);
}

TEST(CadenceTest, DalyIntervalMatchesHandComputation) {
  // sqrt(2 * 10 * 3600) - 10 = 268.328 - 10.
  EXPECT_NEAR(DalyOptimalInterval(10, 3600), 258.328, 1e-3);
  EXPECT_EQ(DalyOptimalInterval(100, 150), 100);  // w >= M/2: expansion invalid
  EXPECT_TRUE(std::isinf(DalyOptimalInterval(10, std::numeric_limits<double>::infinity())));
}

TEST(CadenceTest, OptimumWhenUnconstrained) {
  CadenceInput in;
  in.nodes = 1000;
  in.failures_per_node_day = 0.005;
  in.blocking_cost_s = 10;
  in.persist_s = 60;
  in.step_s = 0;
  CadenceDecision d = ChooseCadence(in);
  EXPECT_EQ(d.bound, "optimum");
  EXPECT_NEAR(d.interval_s, 587.8775, 1e-3);
  EXPECT_EQ(d.interval_steps, 0);
  EXPECT_NE(d.reason.find("sqrt(2*w/(N*r_f))"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("N=1000"), std::string::npos) << d.reason;
}

TEST(CadenceTest, RoundsToWholeSteps) {
  CadenceInput in;
  in.nodes = 1000;
  in.failures_per_node_day = 0.005;
  in.blocking_cost_s = 10;
  in.step_s = 7;  // 587.88 / 7 = 83.98 -> 84 steps = 588 s
  CadenceDecision d = ChooseCadence(in);
  EXPECT_EQ(d.interval_steps, 84);
  EXPECT_DOUBLE_EQ(d.interval_s, 588);
  EXPECT_NE(d.reason.find("(84 steps)"), std::string::npos) << d.reason;
}

TEST(CadenceTest, PersistTimeBoundsTheInterval) {
  CadenceInput in;
  in.nodes = 1000;
  in.failures_per_node_day = 0.005;
  in.blocking_cost_s = 0.1;  // optimum sqrt(2*0.1*86400/5) = 58.79 s
  in.persist_s = 90;
  in.step_s = 2;
  CadenceDecision d = ChooseCadence(in);
  EXPECT_EQ(d.bound, "persist");
  EXPECT_EQ(d.interval_steps, 45);
  EXPECT_NE(d.reason.find("to persist"), std::string::npos) << d.reason;
}

TEST(CadenceTest, StepBoundsTheInterval) {
  CadenceInput in;
  in.nodes = 100000;
  in.failures_per_node_day = 0.01;
  in.blocking_cost_s = 0.001;  // optimum 0.416 s
  in.step_s = 5;
  CadenceDecision d = ChooseCadence(in);
  EXPECT_EQ(d.bound, "step");
  EXPECT_EQ(d.interval_steps, 1);
  EXPECT_DOUBLE_EQ(d.interval_s, 5);
}

TEST(CadenceTest, CeilingWhenNoFailuresExpected) {
  CadenceInput in;
  in.nodes = 4;
  in.failures_per_node_day = 0;
  in.blocking_cost_s = 3;
  in.max_interval_s = 1800;
  CadenceDecision d = ChooseCadence(in);
  EXPECT_EQ(d.bound, "max");
  EXPECT_DOUBLE_EQ(d.interval_s, 1800);
  EXPECT_NE(d.reason.find("unbounded"), std::string::npos) << d.reason;
}

TEST(CadenceTest, BadInputsAreTreatedAsZero) {
  CadenceInput in;
  in.nodes = 8;
  in.failures_per_node_day = -1;
  in.blocking_cost_s = std::nan("");
  in.persist_s = -5;
  in.step_s = std::numeric_limits<double>::infinity();
  in.max_interval_s = 0;  // falls back to 6 h
  CadenceDecision d = ChooseCadence(in);
  EXPECT_EQ(d.bound, "max");
  EXPECT_DOUBLE_EQ(d.interval_s, 6 * 3600.0);
  EXPECT_EQ(d.interval_steps, 0);
}

TEST(CadenceTest, FailureRateEstimateBlendsPriorAndObservation) {
  // No observation: the prior.
  EXPECT_DOUBLE_EQ(EstimateFailureRate(0.005, 200, 0, 0), 0.005);
  // Prior worth 200 node-days (1 failure) plus 3 failures in 100 node-days -> 4/300.
  EXPECT_NEAR(EstimateFailureRate(0.005, 200, 3, 100), 4.0 / 300, 1e-12);
  // Long history dominates the prior.
  EXPECT_NEAR(EstimateFailureRate(0.005, 10, 1000, 10000), 1000.05 / 10010, 1e-12);
  // No prior weight and no observation: the prior rate as given.
  EXPECT_DOUBLE_EQ(EstimateFailureRate(0.02, 0, 0, 0), 0.02);
  EXPECT_DOUBLE_EQ(EstimateFailureRate(0.02, 0, 2, 4), 0.5);
  EXPECT_DOUBLE_EQ(EstimateFailureRate(0.02, -3, -1, 4), 0);
}

}  // namespace
}  // namespace bulwark
