#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/operator.h"

namespace bulwark::op {
namespace {

using ::testing::HasSubstr;

TEST(FormatMetricsTest, PrometheusTextWithJobLabels) {
  OperatorStats s;
  s.reconciles = 7;
  s.quarantined = 1;
  s.running_jobs = 2;
  s.ettr["ml/gpt"] = 0.97;
  const std::string t = FormatMetrics(s, true);
  EXPECT_THAT(t, HasSubstr("# TYPE bulwark_operator_reconciles_total counter\n"
                           "bulwark_operator_reconciles_total 7\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_operator_leader 1\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_operator_trainjobs{state=\"running\"} 2\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_trainjob_ettr_ratio{namespace=\"ml\",name=\"gpt\"} 0.97\n"));
}

}  // namespace
}  // namespace bulwark::op
