#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "controller/job_metrics.h"
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

TEST(FormatMetricsTest, EachTrainJobsSeriesUnderOneFamilyHeader) {
  OperatorStats s;
  LedgerReport settled;
  settled.wall_s = 10;
  settled.seconds = {{TimeCategory::kProductive, 9}, {TimeCategory::kRestart, 1}};
  JobMetricsSnapshot m;
  s.job_metrics["ml/gpt"] = RenderJobMetrics("gpt", m, settled, true, 0.9, {{"namespace", "ml"}});
  s.job_metrics["nlp/gpt"] = RenderJobMetrics("gpt", m, settled, true, 0.9, {{"namespace", "nlp"}});
  const std::string t = FormatMetrics(s, true);
  size_t headers = 0;
  for (size_t p = t.find("# TYPE bulwark_productive_seconds_total counter\n");
       p != std::string::npos; p = t.find("# TYPE bulwark_productive_seconds_total", p + 1)) {
    ++headers;
  }
  EXPECT_EQ(headers, 1u) << t;
  EXPECT_THAT(t, HasSubstr("# TYPE bulwark_productive_seconds_total counter\n"
                           "bulwark_productive_seconds_total{job=\"gpt\",namespace=\"ml\"} 9\n"
                           "bulwark_productive_seconds_total{job=\"gpt\",namespace=\"nlp\"} 9\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_lost_seconds_total{job=\"gpt\",namespace=\"nlp\","
                           "cause=\"restart\"} 1\n"));
}

}  // namespace
}  // namespace bulwark::op
