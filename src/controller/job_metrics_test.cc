#include "controller/job_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

JobSpec Spec(int nodes, int procs) {
  JobSpec s;
  s.name = "gpt";
  s.nodes = nodes;
  s.procs_per_node = procs;
  return s;
}

StepSample Step(int rank, long step, double t, double step_time, double tokens) {
  StepSample s;
  s.rank = rank;
  s.step = step;
  s.t = t;
  s.step_time = step_time;
  s.tokens = tokens;
  s.loss = 2.5;
  return s;
}

TEST(JobMetricsTest, ThroughputMfuAndCostByHand) {
  JobSpec spec = Spec(2, 2);
  spec.monitoring.peak_flops = 1e12;
  spec.monitoring.price_per_gpu_hour = 2.0;
  JobMetrics m(spec, 0);
  m.SetNodes(2, 1);
  m.OnModel(6e6);
  // Four ranks, each 1000 tokens per 0.5 s step: 8000 tokens/s for the job.
  for (long step = 1; step <= 10; ++step) {
    for (int r = 0; r < 4; ++r) m.OnStep(Step(r, step, 0.5 * step, 0.5, 1000));
  }
  LedgerReport settled;
  settled.seconds[TimeCategory::kProductive] = 3600;  // one productive hour
  m.Tick(3600, settled);
  const JobMetricsSnapshot s = m.Snapshot();
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 8000);
  EXPECT_DOUBLE_EQ(s.tokens_total, 40000);
  // MFU = 6e6 FLOPs/token × 8000 tokens/s ÷ (4 devices × 1e12) = 0.012
  EXPECT_DOUBLE_EQ(s.mfu, 0.012);
  // 3 nodes × 2 devices × $2 × 1 h = $12; per productive device-hour: 12 / (1 h × 4).
  EXPECT_DOUBLE_EQ(s.cost_total, 12);
  EXPECT_DOUBLE_EQ(s.cost_per_productive_gpu_hour, 3);
  EXPECT_DOUBLE_EQ(s.cost_per_million_tokens, 12 / 0.04);
  EXPECT_EQ(s.step, 10);
  EXPECT_EQ(s.step_hist.count(), 10u);
}

TEST(JobMetricsTest, ReworkAddsNoTokensAndPeakComesFromGpuNames) {
  JobMetrics m(Spec(1, 1), 0);
  m.OnStep(Step(0, 5, 1, 1, 100));
  m.OnStep(Step(0, 4, 2, 1, 100));  // rework after a restart
  m.OnStep(Step(0, 6, 3, 1, 100));
  m.OnGpuNames({"NVIDIA H100 80GB HBM3"});
  m.Tick(4, {});
  EXPECT_EQ(m.Snapshot().tokens_total, 200);
  EXPECT_EQ(m.Snapshot().peak_flops, 989e12);
  StepSample nan = Step(0, 7, 5, 1, 100);
  nan.loss = StepSample::kNone;
  m.OnStep(nan);
  EXPECT_EQ(m.Snapshot().nonfinite_losses, 1);
  EXPECT_EQ(m.Snapshot().loss, 2.5);  // the last finite one
}

TEST(StragglerScoresTest, FastestOverEachMedian) {
  const auto s = StragglerScores(
      {{0, {1, 1, 1}}, {1, {2, 2, 9}}, {2, {1.25, 1.25, 1.25}}, {3, {5}}},  // too few samples
      3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s.at(0), 1);
  EXPECT_DOUBLE_EQ(s.at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.at(2), 0.8);
}

TEST(JobMetricsTest, ExpositionNamesUnitsAndBoundedLabels) {
  JobSpec spec = Spec(1, 8);
  spec.monitoring.peak_flops = 1e12;
  JobMetrics m(spec, 0);
  m.SetNodes(1, 0);
  for (long step = 1; step <= 12; ++step) {
    for (int r = 0; r < 8; ++r) {
      StepSample s = Step(r, step, step, 1, 10);
      s.busy = r == 5 ? 2.0 : 1.0 + 0.01 * r;
      s.data_wait = r == 3 ? 0.5 : 0.0;
      m.OnStep(s);
    }
  }
  m.OnIncident("hang");
  m.OnIncident("hang");
  m.OnCheckpointShard("disk", 1e6, 0.5);
  m.OnCommit(10, 1234.5);
  m.SetCadence(10);
  LedgerReport settled;
  settled.wall_s = 12;
  settled.seconds = {{TimeCategory::kProductive, 10}, {TimeCategory::kIdle, 2}};
  settled.steps_completed = 12;
  m.Tick(12, settled);
  const std::string t = RenderJobMetrics("gpt", m.Snapshot(), settled, true, 0.9);
  EXPECT_THAT(t, HasSubstr("bulwark_productive_seconds_total{job=\"gpt\"} 10\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_lost_seconds_total{job=\"gpt\",cause=\"idle\"} 2\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_wall_seconds_total{job=\"gpt\"} 12\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_incidents_total{job=\"gpt\",kind=\"hang\"} 2\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_checkpoint_bytes_total{job=\"gpt\",tier=\"disk\"} 1e+06\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_checkpoint_interval_seconds{job=\"gpt\"} 10\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_data_wait_ratio{job=\"gpt\"} 0.5\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_step_duration_seconds_count{job=\"gpt\"} 12\n"));
  EXPECT_THAT(t, HasSubstr("bulwark_straggler_score{job=\"gpt\",rank=\"5\"} 0.5\n"));
  // Only the three slowest ranks get a series.
  size_t n = 0;
  for (size_t p = t.find("bulwark_straggler_score{"); p != std::string::npos;
       p = t.find("bulwark_straggler_score{", p + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 3u);
  EXPECT_THAT(t, Not(HasSubstr("rank=\"0\"")));
  EXPECT_THAT(t, HasSubstr("# TYPE bulwark_tokens_total counter\n"));
}

}  // namespace
}  // namespace bulwark
