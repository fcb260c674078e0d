#include "agent/fault_detector.h"

#include <gtest/gtest.h>

#include <cmath>

namespace bulwark {
namespace {

DetectorConfig Cfg(double floor_s, double mult, double startup_s) {
  DetectorConfig c;
  c.hang_floor_s = floor_s;
  c.hang_multiplier = mult;
  c.startup_timeout_s = startup_s;
  return c;
}

class DetectorTest : public ::testing::Test {
 protected:
  FakeClock clock_{100.0, 1.7e9};
  FaultDetector det_{&clock_};

  // Reports steps 0..n-1 on `rank`, `interval` seconds apart.
  void Steps(int rank, int n, double interval, long first = 0) {
    for (int i = 0; i < n; ++i) {
      if (i > 0) clock_.Advance(interval);
      ASSERT_FALSE(det_.OnStep(rank, first + i, 1.0, 0).has_value());
    }
  }
};

TEST_F(DetectorTest, StartupTimeoutBeforeFirstStep) {
  det_.StartAttempt(0, Cfg(5, 10, 60), {0, 1});
  EXPECT_DOUBLE_EQ(det_.HangTimeoutFor(0), 60);
  clock_.Advance(59.9);
  EXPECT_FALSE(det_.CheckHangs().has_value());
  clock_.Advance(0.2);
  auto f = det_.CheckHangs();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FaultKind::kHang);
  EXPECT_EQ(f->subtype, "startup_timeout");
  EXPECT_EQ(f->stalled_ranks, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(f->fault_time, 1.7e9 + 100.0);  // launch time
  EXPECT_NEAR(f->detect_time - f->fault_time, 60.1, 1e-6);
  EXPECT_FALSE(det_.CheckHangs().has_value()) << "each rank is reported once per attempt";
}

TEST_F(DetectorTest, AFinishedRankMayTakeItsTimeToExitButNotForever) {
  DetectorConfig cfg = Cfg(2, 10, 300);
  cfg.finished_exit_timeout_s = 60;
  det_.StartAttempt(0, cfg, {0, 1});
  Steps(0, 10, 0.1);
  Steps(1, 1, 0.1, 9);
  det_.OnFinished(0);  // rank 0's interpreter is exiting (slow); rank 1 still trains
  EXPECT_DOUBLE_EQ(det_.HangTimeoutFor(0), 60);
  clock_.Advance(2.5);
  auto hang = det_.CheckHangs();
  ASSERT_TRUE(hang.has_value());
  EXPECT_EQ(hang->stalled_ranks, (std::vector<int>{1})) << "only the training rank hangs";
  clock_.Advance(57.6);  // 60.1 s after `finished`
  auto exit = det_.CheckHangs();
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->rank, 0);
  EXPECT_NE(exit->detail.find("finished training but has not exited"), std::string::npos)
      << exit->detail;
  det_.OnFinished(7);  // an unknown rank is ignored
}

TEST_F(DetectorTest, HangTimeoutFollowsStepHistory) {
  det_.StartAttempt(3, Cfg(2, 10, 300), {4});
  Steps(4, 50, 0.5);  // 49 intervals of 0.5 s -> timeout max(2, 10 * 0.5) = 5 s
  EXPECT_DOUBLE_EQ(det_.HangTimeoutFor(4), 5.0);
  clock_.Advance(4.9);
  EXPECT_FALSE(det_.CheckHangs().has_value());
  clock_.Advance(0.2);
  auto f = det_.CheckHangs();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->subtype, "no_progress");
  EXPECT_EQ(f->rank, 4);
  EXPECT_EQ(f->step, 49);
  EXPECT_NEAR(f->detect_time - f->fault_time, 5.1, 1e-6);
}

TEST_F(DetectorTest, FloorAppliesToFastSteps) {
  det_.StartAttempt(0, Cfg(3, 10, 300), {0});
  Steps(0, 20, 0.01);
  EXPECT_DOUBLE_EQ(det_.HangTimeoutFor(0), 3.0);
}

TEST_F(DetectorTest, HistoryIsBoundedToRecentSteps) {
  DetectorConfig c = Cfg(1, 2, 300);
  c.step_history = 200;
  det_.StartAttempt(0, c, {0});
  Steps(0, 10, 20.0);      // slow start: intervals of 20 s
  Steps(0, 250, 1.0, 10);  // then 249 fast intervals push the slow ones out
  EXPECT_DOUBLE_EQ(det_.HangTimeoutFor(0), 2.0);
}

TEST_F(DetectorTest, HangBlamesLeastAdvancedRank) {
  det_.StartAttempt(0, Cfg(1, 1, 300), {0, 1, 2});
  for (int s = 0; s < 5; ++s) {
    for (int r = 0; r < 3; ++r) ASSERT_FALSE(det_.OnStep(r, s, 1.0, 0));
    clock_.Advance(0.1);
  }
  ASSERT_FALSE(det_.OnStep(0, 5, 1.0, 0));  // ranks 0 and 2 reach step 5; rank 1 is stuck
  ASSERT_FALSE(det_.OnStep(2, 5, 1.0, 0));
  clock_.Advance(1.5);
  auto f = det_.CheckHangs();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->step, 4);
  EXPECT_EQ(f->stalled_ranks.size(), 3u);
}

TEST_F(DetectorTest, NanLossIsImmediate) {
  det_.StartAttempt(2, Cfg(30, 10, 300), {0, 1});
  EXPECT_FALSE(det_.OnStep(1, 7, 0.25, 0).has_value());
  auto f = det_.OnStep(1, 8, std::nan(""), 1.7e9 + 99.5);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, FaultKind::kNan);
  EXPECT_EQ(f->step, 8);
  EXPECT_EQ(f->rank, 1);
  EXPECT_DOUBLE_EQ(f->fault_time, 1.7e9 + 99.5);
  EXPECT_FALSE(det_.OnStep(1, 9, INFINITY, 0).has_value()) << "rank 1 already reported";
  auto g = det_.OnStep(0, 8, -INFINITY, 0);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->rank, 0);
}

TEST_F(DetectorTest, CrashExitAndFirstIncidentWins) {
  det_.StartAttempt(1, Cfg(30, 10, 300), {0, 1, 2});
  auto log = det_.OnLogLine(0, "RuntimeError: CUDA error: device-side assert triggered");
  ASSERT_TRUE(log.has_value());
  EXPECT_EQ(log->kind, FaultKind::kFatalLog);
  EXPECT_EQ(log->subtype, "cuda_error");
  EXPECT_FALSE(det_.OnExit(0, ExitInfo{1, 0}).has_value()) << "rank 0 already reported";
  auto crash = det_.OnExit(1, ExitInfo{137, 9});
  ASSERT_TRUE(crash.has_value());
  EXPECT_EQ(crash->kind, FaultKind::kCrash);
  EXPECT_EQ(crash->subtype, "SIGKILL");
  EXPECT_FALSE(det_.OnExit(2, ExitInfo{0, 0}).has_value()) << "exit 0 is not a fault";
  clock_.Advance(1000);
  EXPECT_FALSE(det_.CheckHangs().has_value()) << "dead and reported ranks cannot hang";
}

TEST_F(DetectorTest, ExitCodeSubtype) {
  det_.StartAttempt(0, Cfg(30, 10, 300), {5});
  auto f = det_.OnExit(5, ExitInfo{1, 0});
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->subtype, "exit 1");
  EXPECT_EQ(f->rank, 5);
}

TEST_F(DetectorTest, DisarmedAndUnknownRanksReportNothing) {
  det_.StartAttempt(0, Cfg(1, 1, 1), {0});
  EXPECT_FALSE(det_.OnStep(9, 1, std::nan(""), 0).has_value()) << "rank 9 is not ours";
  det_.Disarm();
  clock_.Advance(100);
  EXPECT_FALSE(det_.CheckHangs().has_value());
  EXPECT_FALSE(det_.OnExit(0, ExitInfo{0, 9}).has_value());
}

TEST_F(DetectorTest, NewAttemptResetsReports) {
  det_.StartAttempt(0, Cfg(30, 10, 300), {0});
  ASSERT_TRUE(det_.OnExit(0, ExitInfo{1, 0}).has_value());
  det_.StartAttempt(1, Cfg(30, 10, 300), {0});
  EXPECT_EQ(det_.attempt(), 1);
  EXPECT_TRUE(det_.OnExit(0, ExitInfo{1, 0}).has_value());
}

}  // namespace
}  // namespace bulwark
