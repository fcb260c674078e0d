#include "agent/step_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StepMetricsTest, ForwardsValuesInRangeAndNamesTheRest) {
  const Json in = Json::parse(
      R"({"samples": 8, "lr": 3e-4, "grad_norm": 2.5, "data_wait": 0.01, "compute": 0.2,
          "optimizer": 0.05, "inferred": true, "other": 1})");
  Json out = Json::object();
  std::vector<std::string> refused;
  CopyStepMetrics(in, &out, &refused);
  EXPECT_TRUE(refused.empty());
  EXPECT_EQ(out, Json::parse(R"({"samples": 8.0, "lr": 3e-4, "grad_norm": 2.5,
      "data_wait": 0.01, "compute": 0.2, "optimizer": 0.05, "inferred": true})"));
}

TEST(StepMetricsTest, AbsurdOrNonNumericValuesAreDropped) {
  const Json in = Json::parse(
      R"({"samples": -1, "lr": 1e9, "grad_norm": "big", "data_wait": 1e7, "compute": null,
          "inferred": "yes"})");
  Json out = Json::object();
  std::vector<std::string> refused;
  CopyStepMetrics(in, &out, &refused);
  EXPECT_EQ(out, Json::object());
  ASSERT_EQ(refused.size(), 5u);
  EXPECT_THAT(refused[0], HasSubstr("samples (got -1): must be in [0, 1000000000000.0]"));
  EXPECT_THAT(refused[1], HasSubstr("lr (got 1000000000.0)"));
  EXPECT_THAT(refused[2], HasSubstr("grad_norm (got \"big\"): not a number"));
  EXPECT_THAT(refused[3], HasSubstr("data_wait (got 10000000.0): must be in [0, 1000000.0] s"));
  EXPECT_THAT(refused[4], HasSubstr("compute (got null): not a number"));
}

TEST(StepMetricsTest, ReplayDigestsAreForwardedOnlyAsSixteenHexDigits) {
  const Json good = Json::parse(
      R"({"rng": "00ff00ff00ff00ff", "data": "0123456789abcdef", "sums": "unordered"})");
  Json out = Json::object();
  std::vector<std::string> refused;
  CopyStepMetrics(good, &out, &refused);
  EXPECT_TRUE(refused.empty());
  EXPECT_EQ(out, good);
  const Json bad = Json::parse(R"({"rng": "00FF00FF00FF00FF", "data": 12, "sums": "ring"})");
  out = Json::object();
  CopyStepMetrics(bad, &out, &refused);
  EXPECT_EQ(out, Json::object());
  ASSERT_EQ(refused.size(), 3u);
  EXPECT_THAT(refused[0], HasSubstr("rng (got \"00FF00FF00FF00FF\"): must be 16 lowercase hex"));
  EXPECT_THAT(refused[1], HasSubstr("data (got 12)"));
  EXPECT_THAT(refused[2], HasSubstr("sums (got \"ring\"): must be \"ordered\" or \"unordered\""));
  EXPECT_FALSE(IsDigestHex(Json("0123456789abcde")));
  EXPECT_TRUE(IsDigestHex(Json("0123456789abcdef")));
}

}  // namespace
}  // namespace bulwark
