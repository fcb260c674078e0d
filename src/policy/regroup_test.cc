#include "policy/regroup.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

// 2 nodes x 2 ranks, every rank under bulwark.run.
RegroupInput Job() {
  RegroupInput in;
  in.world_size = 4;
  in.procs_per_node = 2;
  in.capable = {0, 1, 2, 3};
  return in;
}

Incident Fault(FaultKind kind, int rank, int node, const std::string& subtype = "") {
  Incident i;
  i.kind = kind;
  i.rank = rank;
  i.node = node;
  i.subtype = subtype;
  return i;
}

Decision Act(Action a, int replace_node = -1) {
  Decision d;
  d.action = a;
  d.replace_node = replace_node;
  return d;
}

TEST(PlanRegroup, ACrashReplacesOnlyTheCrashedRank) {
  RegroupInput in = Job();
  in.dead = {1};
  const RegroupPlan p =
      PlanRegroup(Fault(FaultKind::kCrash, 1, 0, "SIGKILL"), Act(Action::kRestartInPlace), in);
  EXPECT_TRUE(p.in_process);
  EXPECT_EQ(p.replace, std::vector<int>{1});
  EXPECT_EQ(p.keep, (std::vector<int>{0, 2, 3}));
  EXPECT_NE(p.reason.find("rank(s) 0,2,3 keep their processes"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("rank(s) 1 get new processes"), std::string::npos) << p.reason;
}

TEST(PlanRegroup, AHangReplacesTheCulpritAndEveryStoppedRank) {
  RegroupInput in = Job();
  in.stopped = {3};
  const RegroupPlan p =
      PlanRegroup(Fault(FaultKind::kHang, 2, 1, "no_progress"), Act(Action::kRestartInPlace), in);
  EXPECT_TRUE(p.in_process);
  EXPECT_EQ(p.replace, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.keep, (std::vector<int>{0, 1}));
}

TEST(PlanRegroup, ANanReplacesNobody) {
  const RegroupPlan p = PlanRegroup(Fault(FaultKind::kNan, 0, 0), Act(Action::kRollback), Job());
  EXPECT_TRUE(p.in_process);
  EXPECT_TRUE(p.replace.empty());
  EXPECT_EQ(p.keep, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(p.reason.find("no process is replaced"), std::string::npos);
}

TEST(PlanRegroup, ALostOrReplacedNodeTakesItsRanks) {
  RegroupPlan p = PlanRegroup(Fault(FaultKind::kNodeLost, -1, 1, "connection_lost"),
                              Act(Action::kReplaceNode, 1), Job());
  EXPECT_TRUE(p.in_process);
  EXPECT_EQ(p.replace, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.keep, (std::vector<int>{0, 1}));
  // A hardware fault logged by rank 0: the node is replaced, both its ranks go.
  p = PlanRegroup(Fault(FaultKind::kFatalLog, 0, 0, "xid"), Act(Action::kReplaceNode, 0), Job());
  EXPECT_EQ(p.replace, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.keep, (std::vector<int>{2, 3}));
}

TEST(PlanRegroup, ACollectiveErrorBlamesNobody) {
  const RegroupPlan p = PlanRegroup(Fault(FaultKind::kCrash, 2, 1, kCollectiveErrorSubtype),
                                    Act(Action::kRestartInPlace), Job());
  EXPECT_TRUE(p.in_process);
  EXPECT_TRUE(p.replace.empty());
}

TEST(PlanRegroup, EveryRankRestartsWhenASurvivorCannotRecoverInProcess) {
  RegroupInput in = Job();
  in.capable = {0, 1, 3};  // rank 2 is a plain script
  RegroupPlan p = PlanRegroup(Fault(FaultKind::kCrash, 1, 0), Act(Action::kRestartInPlace), in);
  EXPECT_FALSE(p.in_process);
  EXPECT_EQ(p.replace, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(p.keep.empty());
  EXPECT_NE(p.reason.find("rank(s) 2 do not run under bulwark.run"), std::string::npos) << p.reason;
  // ... but not when the plain rank is the culprit itself.
  p = PlanRegroup(Fault(FaultKind::kCrash, 2, 1), Act(Action::kRestartInPlace), in);
  EXPECT_TRUE(p.in_process);
  EXPECT_EQ(p.replace, std::vector<int>{2});
}

TEST(PlanRegroup, DisabledUnlocatedHopelessOrGivenUp) {
  RegroupInput off = Job();
  off.enabled = false;
  RegroupPlan p = PlanRegroup(Fault(FaultKind::kCrash, 1, 0), Act(Action::kRestartInPlace), off);
  EXPECT_FALSE(p.in_process);
  EXPECT_NE(p.reason.find("inProcessRestart is false"), std::string::npos);
  p = PlanRegroup(Fault(FaultKind::kCrash, -1, -1), Act(Action::kRestartInPlace), Job());
  EXPECT_FALSE(p.in_process);
  EXPECT_NE(p.reason.find("not tied to a rank or node"), std::string::npos);
  RegroupInput all_dead = Job();
  all_dead.dead = {0, 1, 2, 3};
  p = PlanRegroup(Fault(FaultKind::kCrash, 1, 0), Act(Action::kRestartInPlace), all_dead);
  EXPECT_FALSE(p.in_process);
  EXPECT_NE(p.reason.find("no rank survived"), std::string::npos);
  p = PlanRegroup(Fault(FaultKind::kCrash, 1, 0), Act(Action::kGiveUp), Job());
  EXPECT_FALSE(p.in_process);
  EXPECT_EQ(p.replace.size(), 4u);
}

}  // namespace
}  // namespace bulwark
