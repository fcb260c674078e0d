#include "metrics/exposition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace bulwark::metrics {
namespace {

using ::testing::HasSubstr;

TEST(ExpositionTest, FamiliesOnceLabelsEscapedSpecialValues) {
  Exposition e;
  e.Counter("bulwark_x_total", "things\nseen", {{"job", "a\"b\\c\nd"}}, 3);
  e.Counter("bulwark_x_total", "ignored", {{"job", "e"}}, 4.5);
  e.Gauge("bulwark_g", "g", {}, std::numeric_limits<double>::quiet_NaN());
  e.Gauge("bulwark_h", "h", {}, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(e.Take(),
            "# HELP bulwark_x_total things\\nseen\n# TYPE bulwark_x_total counter\n"
            "bulwark_x_total{job=\"a\\\"b\\\\c\\nd\"} 3\n"
            "bulwark_x_total{job=\"e\"} 4.5\n"
            "# HELP bulwark_g g\n# TYPE bulwark_g gauge\nbulwark_g NaN\n"
            "# HELP bulwark_h h\n# TYPE bulwark_h gauge\nbulwark_h -Inf\n");
  // Take() resets: the next scrape declares its families again.
  e.Gauge("bulwark_g", "g", {}, 1);
  EXPECT_THAT(e.Take(), HasSubstr("# TYPE bulwark_g gauge\nbulwark_g 1\n"));
}

TEST(ExpositionTest, HistogramIsCumulativeWithInfBucket) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 2.0, 50.0}) h.Observe(v);
  h.Observe(std::nan(""));  // ignored
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 52.65);
  Exposition e;
  e.Family("bulwark_step_duration_seconds", "histogram", "step time");
  e.HistogramSamples("bulwark_step_duration_seconds", {{"job", "j"}}, h);
  EXPECT_EQ(e.Take(),
            "# HELP bulwark_step_duration_seconds step time\n"
            "# TYPE bulwark_step_duration_seconds histogram\n"
            "bulwark_step_duration_seconds_bucket{job=\"j\",le=\"0.1\"} 2\n"
            "bulwark_step_duration_seconds_bucket{job=\"j\",le=\"1\"} 3\n"
            "bulwark_step_duration_seconds_bucket{job=\"j\",le=\"10\"} 4\n"
            "bulwark_step_duration_seconds_bucket{job=\"j\",le=\"+Inf\"} 5\n"
            "bulwark_step_duration_seconds_sum{job=\"j\"} 52.65\n"
            "bulwark_step_duration_seconds_count{job=\"j\"} 5\n");
  const Histogram x = Histogram::Exponential(0.01, 2, 4);
  EXPECT_THAT(x.bounds(), ::testing::ElementsAre(0.01, 0.02, 0.04, 0.08));
}

}  // namespace
}  // namespace bulwark::metrics
