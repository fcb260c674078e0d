#include "ledger/ettr_ledger.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace bulwark {
namespace {

using C = TimeCategory;

double Sum(const LedgerReport& r) {
  double s = 0;
  for (const auto& [c, v] : r.seconds) s += v;
  return s;
}

Incident Fault(FaultKind kind, long step, double fault_time, double detect_time) {
  Incident in;
  in.kind = kind;
  in.rank = 0;
  in.step = step;
  in.fault_time = fault_time;
  in.detect_time = detect_time;
  return in;
}

TEST(EttrLedgerTest, CategoryNames) {
  EXPECT_STREQ(TimeCategoryName(C::kProductive), "productive");
  EXPECT_STREQ(TimeCategoryName(C::kReinit), "reinit");
  EXPECT_STREQ(TimeCategoryName(C::kIdle), "idle");
  EXPECT_STREQ(TimeCategoryName(C::kDiagnosis), "diagnosis");
}

TEST(EttrLedgerTest, EmptyLedgerHasEveryCategoryAndIsIdle) {
  EttrLedger l(100);
  LedgerReport r = l.Report(105);
  EXPECT_EQ(r.seconds.size(), 8u);
  EXPECT_DOUBLE_EQ(r.wall_s, 5);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kIdle), 5);
  EXPECT_EQ(r.ettr(), 0);
  EXPECT_EQ(r.steps_completed, 0);
}

TEST(EttrLedgerTest, CleanRun) {
  EttrLedger l(0);
  l.OnAttemptLaunched(2, -1);
  l.OnStep(10, 0, 5, 0, 100);  // [2,5] reinit, [5,10] productive
  l.OnStep(15, 1, 5, 0, 100);
  l.OnStep(20, 2, 5, 1, 100);  // 4 s productive + 1 s checkpoint stall
  l.OnEnd(22);
  LedgerReport r = l.Report(1000);  // after OnEnd, `now` does not matter
  EXPECT_DOUBLE_EQ(r.wall_s, 22);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kIdle), 4);  // [0,2] before launch + [20,22] after
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 3);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 14);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kCheckpoint), 1);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRework), 0);
  EXPECT_DOUBLE_EQ(Sum(r), r.wall_s);
  EXPECT_DOUBLE_EQ(r.ettr(), 14.0 / 22.0);
  EXPECT_EQ(r.steps_completed, 3);
  EXPECT_EQ(r.steps_reworked, 0);
  EXPECT_DOUBLE_EQ(r.tokens, 300);
  EXPECT_TRUE(r.incidents.empty());
}

// A controller restarted mid-attempt adopts the running ranks: no reinit, and the
// steps the previous controller already counted are not counted as new again.
TEST(EttrLedgerTest, AdoptedAttemptChargesNoReinit) {
  EttrLedger l(100);
  l.OnAttemptAdopted(101, 40);
  l.OnStep(102, 40, 0.5, 0, 10);  // reported again from the agents' backlog: rework
  l.OnStep(103, 41, 1, 0, 10);    // [102,103] productive
  l.OnStep(104, 42, 1, 0, 10);
  l.OnEnd(104);
  LedgerReport r = l.Report(104);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 0);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 2);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRework), 0.5);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kIdle), 1.5);  // [100,101] and before step 40's end
  EXPECT_DOUBLE_EQ(Sum(r), r.wall_s);
  EXPECT_EQ(r.steps_completed, 2);
}

TEST(EttrLedgerTest, CrashWithRework) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(10, 0, 4, 0, 1);  // reinit 6
  l.OnStep(14, 1, 4, 0, 1);
  l.OnStep(18, 2, 4, 0, 1);
  l.OnFault(Fault(FaultKind::kCrash, 2, 20, 21), "restart_in_place");  // rework 2, detect 1
  l.OnAttemptLaunched(25, 1);                                          // restart 4
  l.OnStep(33, 2, 4, 0, 1);  // reinit 4, rework 4 (step 2 again)
  l.OnStep(37, 3, 4, 0, 1);
  l.OnEnd(37);
  LedgerReport r = l.Report(37);
  EXPECT_DOUBLE_EQ(r.wall_s, 37);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 16);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 10);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRework), 6);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kDetection), 1);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 4);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kIdle), 0);
  EXPECT_DOUBLE_EQ(Sum(r), 37);
  EXPECT_EQ(r.steps_completed, 4);
  EXPECT_EQ(r.steps_reworked, 1);
  EXPECT_DOUBLE_EQ(r.tokens, 4);  // the reworked step's tokens are not counted
  ASSERT_EQ(r.incidents.size(), 1u);
  const IncidentRow& row = r.incidents[0];
  EXPECT_EQ(row.action, "restart_in_place");
  EXPECT_EQ(row.incident.kind, FaultKind::kCrash);
  EXPECT_DOUBLE_EQ(row.detection_s, 1);
  EXPECT_DOUBLE_EQ(row.restart_s, 4);
  EXPECT_DOUBLE_EQ(row.reinit_s, 4);
  EXPECT_DOUBLE_EQ(row.rework_s, 6);
  EXPECT_EQ(row.rework_steps, 1);
  EXPECT_EQ(row.resumed_from_step, 1);
  EXPECT_DOUBLE_EQ(row.total_s(), 15);
}

// Stop-diagnose: the relaunch waits for a node's checks; that wait is kDiagnosis, the
// rest of the restart kRestart, and both go to the incident's row.
TEST(EttrLedgerTest, AWaitForDiagnosticsIsItsOwnCategory) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(4, 0, 4, 0, 1);
  l.OnFault(Fault(FaultKind::kHang, 0, 4, 6), "restart_in_place");  // detection 2
  l.OnDiagnosisWait(7, true);                                       // restart 1
  l.OnDiagnosisWait(7.5, true);                                     // no change
  l.OnDiagnosisWait(10, false);                                     // diagnosis 3
  l.OnDiagnosisWait(11, true);                                      // restart 1
  l.OnAttemptLaunched(12, 0);                                       // diagnosis 1, ends the wait
  l.OnStep(16, 1, 4, 0, 1);
  l.OnFault(Fault(FaultKind::kCrash, 1, 16, 16), "restart_in_place");
  l.OnAttemptLaunched(18, 1);  // restart 2: the last wait ended with its launch
  l.OnEnd(18);
  LedgerReport r = l.Report(18);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kDiagnosis), 4);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 4);
  EXPECT_DOUBLE_EQ(Sum(r), 18);
  ASSERT_EQ(r.incidents.size(), 2u);
  EXPECT_DOUBLE_EQ(r.incidents[0].diagnosis_s, 4);
  EXPECT_DOUBLE_EQ(r.incidents[0].restart_s, 2);
  EXPECT_DOUBLE_EQ(r.incidents[0].total_s(), 8);  // detection 2 + restart 2 + diagnosis 4
  EXPECT_DOUBLE_EQ(r.incidents[1].diagnosis_s, 0);
  // Outside a restart the flag charges nothing: running time stays what it is.
  EttrLedger m(0);
  m.OnAttemptLaunched(0, -1);
  m.OnDiagnosisWait(1, true);
  m.OnStep(4, 0, 4, 0, 1);
  m.OnEnd(4);
  EXPECT_DOUBLE_EQ(m.Report(4).seconds.at(C::kDiagnosis), 0);
}

TEST(EttrLedgerTest, APlannedRestartIsChargedToNoIncident) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(10, 0, 4, 0, 1);                                            // reinit 6
  l.OnFault(Fault(FaultKind::kCrash, 0, 12, 12), "restart_in_place");  // rework 2
  l.OnAttemptLaunched(13, 0);                                          // restart 1
  l.OnStep(20, 1, 4, 0, 1);                                            // reinit 3
  l.OnPlannedRestart(20);      // an update between two steps: nothing cut short
  l.OnAttemptLaunched(22, 1);  // restart 2
  l.OnStep(27, 2, 4, 0, 1);    // reinit 1
  l.OnEnd(27);
  LedgerReport r = l.Report(27);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 3);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 10);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRework), 2);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 12);
  EXPECT_DOUBLE_EQ(Sum(r), 27);
  ASSERT_EQ(r.incidents.size(), 1u);  // the crash row kept only the crash's costs
  EXPECT_DOUBLE_EQ(r.incidents[0].restart_s, 1);
  EXPECT_DOUBLE_EQ(r.incidents[0].reinit_s, 3);
}

// A crash recast as the node loss it followed: one row, the node loss's, with the
// crash's costs; nothing to recast before a fault or after a planned restart.
TEST(EttrLedgerTest, ACrashRecastAsItsRootKeepsItsCosts) {
  EttrLedger l(0);
  EXPECT_FALSE(l.RecastLastFault(Fault(FaultKind::kNodeLost, 0, 9, 9), "replace_node"));
  l.OnAttemptLaunched(0, -1);
  l.OnStep(10, 0, 4, 0, 1);                                            // reinit 6
  l.OnFault(Fault(FaultKind::kCrash, 0, 12, 13), "restart_in_place");  // rework 2, detect 1
  Incident lost = Fault(FaultKind::kNodeLost, 0, 12, 13.5);
  lost.node = 1;
  EXPECT_TRUE(l.RecastLastFault(lost, "replace_node"));
  l.OnAttemptLaunched(15, 0);  // restart 2
  l.OnStep(20, 1, 4, 0, 1);    // reinit 1
  LedgerReport r = l.Report(20);
  ASSERT_EQ(r.incidents.size(), 1u);
  EXPECT_EQ(r.incidents[0].incident.kind, FaultKind::kNodeLost);
  EXPECT_EQ(r.incidents[0].incident.node, 1);
  EXPECT_EQ(r.incidents[0].action, "replace_node");
  EXPECT_DOUBLE_EQ(r.incidents[0].rework_s, 2);
  EXPECT_DOUBLE_EQ(r.incidents[0].detection_s, 1);
  EXPECT_DOUBLE_EQ(r.incidents[0].restart_s, 2);
  EXPECT_DOUBLE_EQ(Sum(r), 20);
  l.OnPlannedRestart(21);
  EXPECT_FALSE(l.RecastLastFault(lost, "replace_node"));
}

TEST(EttrLedgerTest, HangHasLongDetection) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(5, 0, 5, 0, 0);
  l.OnStep(10, 1, 5, 0, 0);
  l.OnFault(Fault(FaultKind::kHang, 1, 10, 40), "restart_in_place");
  l.OnAttemptLaunched(42, 1);
  l.OnStep(50, 2, 5, 0, 0);
  LedgerReport r = l.Report(50);
  EXPECT_DOUBLE_EQ(r.wall_s, 50);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 15);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kDetection), 30);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 2);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 3);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRework), 0);
  ASSERT_EQ(r.incidents.size(), 1u);
  EXPECT_DOUBLE_EQ(r.incidents[0].detection_s, 30);
  EXPECT_DOUBLE_EQ(r.incidents[0].reinit_s, 3);
  EXPECT_EQ(r.incidents[0].rework_steps, 0);
}

TEST(EttrLedgerTest, NanRollbackCountsReworkSteps) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  for (long s = 0; s <= 9; ++s) l.OnStep(s + 1, s, 1, 0, 10);   // [0,10] productive
  l.OnFault(Fault(FaultKind::kNan, 10, 10.5, 11), "rollback");  // rework 0.5, detect 0.5
  l.OnAttemptLaunched(12, 5);                                   // restart 1
  for (long s = 6; s <= 11; ++s) l.OnStep(s + 8, s, 1, 0, 10);  // step 6 ends at 14
  l.OnEnd(19);
  LedgerReport r = l.Report(19);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 12);  // steps 0..11
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRework), 4.5);     // partial 0.5 + steps 6..9
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kDetection), 0.5);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 1);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 1);
  EXPECT_DOUBLE_EQ(Sum(r), 19);
  EXPECT_EQ(r.steps_completed, 12);
  EXPECT_EQ(r.steps_reworked, 4);
  EXPECT_DOUBLE_EQ(r.tokens, 120);
  ASSERT_EQ(r.incidents.size(), 1u);
  EXPECT_EQ(r.incidents[0].action, "rollback");
  EXPECT_EQ(r.incidents[0].rework_steps, 4);
  EXPECT_DOUBLE_EQ(r.incidents[0].rework_s, 4.5);
  EXPECT_EQ(r.incidents[0].resumed_from_step, 5);
  EXPECT_DOUBLE_EQ(r.ettr(), 12.0 / 19.0);
}

TEST(EttrLedgerTest, CheckpointStallSplitAndClamping) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(10, 0, 5, 2, 0);   // reinit 5, productive 3, checkpoint 2
  l.OnStep(12, 1, 5, 1, 0);   // step longer than the interval: clamped to 2 s
  l.OnStep(14, 2, 2, 10, 0);  // stall longer than the step: all 2 s checkpoint
  l.OnStep(17, 3, 1, -4, 0);  // negative stall -> 0; 2 s idle gap, 1 s productive
  LedgerReport r = l.Report(17);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 5);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 3 + 1 + 0 + 1);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kCheckpoint), 2 + 1 + 2);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kIdle), 2);
  EXPECT_DOUBLE_EQ(Sum(r), 17);
}

TEST(EttrLedgerTest, OutOfOrderTimestampsClampToCursor) {
  EttrLedger l(10);
  l.OnAttemptLaunched(5, -1);  // before the start: zero-length
  l.OnStep(20, 0, 4, 0, 0);    // reinit 6, productive 4
  l.OnStep(18, 1, 1, 0, 0);    // earlier than the cursor: zero-length, still a new step
  l.OnFault(Fault(FaultKind::kCrash, 1, 15, 25), "restart_in_place");  // fault clamps to 20
  l.OnAttemptLaunched(24, 1);  // earlier than detection end: zero restart
  l.OnEnd(23);
  LedgerReport r = l.Report(0);
  EXPECT_DOUBLE_EQ(r.wall_s, 15);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 6);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 4);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kDetection), 5);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 0);
  EXPECT_EQ(r.steps_completed, 2);
  for (const auto& [c, v] : r.seconds) EXPECT_GE(v, 0) << TimeCategoryName(c);
}

TEST(EttrLedgerTest, SnapshotClosesOpenIntervalWithoutMutating) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(4, 0, 4, 0, 0);
  EXPECT_DOUBLE_EQ(l.Report(6).seconds.at(C::kIdle), 2);  // step in progress shows as idle
  l.OnStep(8, 1, 4, 0, 0);                                // the snapshot did not consume [4,8]
  l.OnFault(Fault(FaultKind::kCrash, 1, 9, 10), "restart_in_place");
  LedgerReport r = l.Report(13);  // restarting: open interval -> restart
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kProductive), 8);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kIdle), 0);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 3);
  EXPECT_DOUBLE_EQ(r.incidents[0].restart_s, 3);
  EXPECT_DOUBLE_EQ(r.wall_s, 13);
  l.OnStep(12, 1, 1, 0, 0);  // stale report from the dead attempt: ignored
  l.OnAttemptLaunched(14, 0);
  r = l.Report(16);  // starting: open interval -> reinit
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kRestart), 4);
  EXPECT_DOUBLE_EQ(r.seconds.at(C::kReinit), 2);
  EXPECT_DOUBLE_EQ(r.incidents[0].reinit_s, 2);
  EXPECT_EQ(r.steps_completed, 2);
}

TEST(EttrLedgerTest, SecondFaultDuringStartupChargesPreviousIncidentReinit) {
  EttrLedger l(0);
  l.OnAttemptLaunched(0, -1);
  l.OnStep(2, 0, 2, 0, 0);
  l.OnFault(Fault(FaultKind::kCrash, 0, 3, 4), "restart_in_place");
  l.OnAttemptLaunched(5, -1);
  l.OnFault(Fault(FaultKind::kNodeLost, 0, 8, 11), "replace_node");
  l.OnAttemptLaunched(12, -1);
  l.OnEnd(12);
  LedgerReport r = l.Report(12);
  ASSERT_EQ(r.incidents.size(), 2u);
  EXPECT_DOUBLE_EQ(r.incidents[0].rework_s, 1);
  EXPECT_DOUBLE_EQ(r.incidents[0].reinit_s, 3);  // [5,8] startup cut short
  EXPECT_DOUBLE_EQ(r.incidents[1].detection_s, 3);
  EXPECT_DOUBLE_EQ(r.incidents[1].restart_s, 1);
  EXPECT_DOUBLE_EQ(Sum(r), 12);
}

// Random event streams (fixed seed, some timestamps going backwards): the categories
// always partition the wall time, nothing is negative, and the incident rows account for
// all detection and restart time.
TEST(EttrLedgerTest, SumInvariantUnderRandomSequences) {
  std::mt19937_64 rng(20240607);
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng() >> 11) * 0x1.0p-53;
  };
  for (int trial = 0; trial < 300; ++trial) {
    const double t0 = uniform(0, 1e6);
    EttrLedger l(t0);
    double t = t0;
    long step = -1;
    for (int e = 0; e < 60; ++e) {
      t += uniform(-0.5, 5);  // occasionally earlier than the previous event
      switch (rng() % 7) {
        case 0:
          l.OnAttemptLaunched(t, step);
          break;
        case 1:
        case 2:
        case 3:
          step += static_cast<long>(rng() % 3) - 1;  // new, repeated or older step
          l.OnStep(t, step, uniform(0, 6), uniform(-1, 3), uniform(0, 100));
          break;
        case 4:
          l.OnFault(Fault(FaultKind::kCrash, step, t - uniform(-1, 3), t + uniform(-1, 4)),
                    "restart_in_place");
          break;
        case 6:
          l.OnDiagnosisWait(t, rng() % 2 == 0);
          break;
        case 5: {
          LedgerReport snap = l.Report(t + uniform(-1, 2));
          EXPECT_NEAR(Sum(snap), snap.wall_s, 1e-9 * std::max(1.0, snap.wall_s));
          break;
        }
      }
    }
    if (rng() % 2) l.OnEnd(t + uniform(-1, 3));
    LedgerReport r = l.Report(t + 10);
    const double tol = 1e-9 * std::max(1.0, r.wall_s);
    EXPECT_NEAR(Sum(r), r.wall_s, tol) << "trial " << trial;
    EXPECT_GE(r.wall_s, 0);
    double det = 0, restart = 0, reinit = 0, rework = 0, diagnosis = 0;
    for (const IncidentRow& row : r.incidents) {
      det += row.detection_s;
      restart += row.restart_s;
      diagnosis += row.diagnosis_s;
      reinit += row.reinit_s;
      rework += row.rework_s;
      EXPECT_GE(row.total_s(), 0);
    }
    for (const auto& [c, v] : r.seconds) EXPECT_GE(v, 0) << TimeCategoryName(c);
    EXPECT_NEAR(det, r.seconds.at(C::kDetection), tol);
    EXPECT_NEAR(restart, r.seconds.at(C::kRestart), tol);
    EXPECT_NEAR(diagnosis, r.seconds.at(C::kDiagnosis), tol);
    EXPECT_LE(reinit, r.seconds.at(C::kReinit) + tol);
    EXPECT_LE(rework, r.seconds.at(C::kRework) + tol);
    EXPECT_LE(r.ettr(), 1.0);
  }
}

}  // namespace
}  // namespace bulwark

namespace bulwark {
namespace {

// Settled() only ever grows per category, through steps, a fault and a restart, while
// Report(now) shows a step in progress as idle that later becomes productive.
TEST(EttrLedgerTest, SettledCategoriesNeverDecrease) {
  EttrLedger l(0);
  l.OnAttemptLaunched(1, -1);
  std::map<TimeCategory, double> prev;
  auto check = [&](const char* when) {
    const LedgerReport s = l.Settled();
    double sum = 0;
    for (const auto& [c, v] : s.seconds) {
      EXPECT_GE(v, prev[c]) << when << ": " << TimeCategoryName(c);
      prev[c] = v;
      sum += v;
    }
    EXPECT_NEAR(sum, s.wall_s, 1e-9) << when;
  };
  for (int i = 1; i <= 5; ++i) {
    l.OnStep(2.0 + i, i, 1.0, 0.1, 100);
    check("step");
  }
  EXPECT_EQ(l.Report(7.5).seconds.at(TimeCategory::kIdle), 1.5);  // 1 s before launch + 0.5
  l.OnStep(8.0, 6, 1.0, 0, 100);
  EXPECT_EQ(l.Report(8.0).seconds.at(TimeCategory::kIdle), 1.0);  // the 0.5 was productive
  check("step 6");
  l.OnFault(Fault(FaultKind::kCrash, 6, 8.5, 9.0), "restart");
  check("fault");
  l.OnAttemptLaunched(10, 4);
  check("launch");
  l.OnStep(12, 5, 1.0, 0, 100);  // rework
  l.OnStep(13, 7, 1.0, 0, 100);
  check("after restart");
  l.OnEnd(14);
  check("end");
  EXPECT_DOUBLE_EQ(l.Settled().wall_s, 14);
  EXPECT_DOUBLE_EQ(l.Settled().ettr(), l.Report(14).ettr());
}

}  // namespace
}  // namespace bulwark
