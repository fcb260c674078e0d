// Admission rules on small clusters whose answers were worked out by hand.
#include "sched/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "sched/sched_test_util.h"

namespace bulwark::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::MakeJob;
using testing::MakeNode;
using testing::MakeQueue;
using testing::MustCreate;
using testing::Racks;

std::vector<std::string> Ids(const CycleResult& r) {
  std::vector<std::string> out;
  for (const auto& a : r.admitted) out.push_back(a.job_id);
  return out;
}

std::vector<std::string> Victims(const CycleResult& r) {
  std::vector<std::string> out;
  for (const auto& p : r.preempted) out.push_back(p.victim);
  return out;
}

TEST(SchedulerTest, GangIsAllOrNothing) {
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)});
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->Submit(MakeJob("a", "q", 1), 0).ok());
  EXPECT_THAT(Ids(s->Schedule(0)), ElementsAre("a"));
  ASSERT_TRUE(s->Submit(MakeJob("big", "q", 4), 1).ok());
  CycleResult r = s->Schedule(1);
  EXPECT_THAT(r.admitted, IsEmpty());
  EXPECT_EQ(s->Phase("big"), JobPhase::kPending);
  EXPECT_EQ(s->Placement("big"), nullptr);
  EXPECT_EQ(s->FreeNodes("h100"), 3);  // nodes untouched
  EXPECT_THAT(s->Placement("a")->nodes, ElementsAre(0));
  EXPECT_EQ(s->Reason("big"),
            "waiting: no pool with 4 free h100 nodes in pools reserved,on-demand (largest free: "
            "3 in pool on-demand)");
}

TEST(SchedulerTest, ExclusiveOnePodPerNode) {
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)});
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(s->Submit(MakeJob("j" + std::to_string(i), "q", 1), 0).ok());
  CycleResult r = s->Schedule(0);
  ASSERT_EQ(r.admitted.size(), 4u);
  std::set<int> used;
  for (const auto& a : r.admitted) {
    ASSERT_EQ(a.nodes.size(), 1u);
    EXPECT_TRUE(used.insert(a.nodes[0]).second) << "node shared";
  }
  EXPECT_EQ(s->Phase("j4"), JobPhase::kPending);
  EXPECT_EQ(s->RunningJobs(), 4);
  EXPECT_EQ(s->PendingJobs(), 1);
}

TEST(SchedulerTest, OverNominalQuotaWaitsWithReason) {
  auto s = MustCreate(Racks({4}), {MakeQueue("research", 16)});
  ASSERT_TRUE(s->Submit(MakeJob("j", "research", 3), 0).ok());
  EXPECT_THAT(s->Schedule(0).admitted, IsEmpty());
  EXPECT_EQ(s->Reason("j"),
            "waiting: queue research over quota for h100 by 8 GPUs (nominal 16, used 0, job needs "
            "24; no cohort to borrow from)");
  ASSERT_TRUE(s->Submit(MakeJob("k", "research", 2), 0).ok());
  // Strict FIFO: k waits behind j although it would fit.
  EXPECT_THAT(s->Schedule(1).admitted, IsEmpty());
  EXPECT_THAT(s->Reason("k"), HasSubstr("behind job j"));
  ASSERT_TRUE(s->Finish("j", 2).ok());
  EXPECT_THAT(Ids(s->Schedule(2)), ElementsAre("k"));
  EXPECT_EQ(s->Usage("research").used_gpus.at("h100"), 16);
}

TEST(SchedulerTest, BorrowsUnusedCohortQuota) {
  SchedulerConfig cfg;
  cfg.preemption = false;  // no reclaim: see LenderUnderNominalReclaimsFromBorrower
  auto s = MustCreate(Racks({8}), {MakeQueue("a", 16, "c"), MakeQueue("b", 16, "c")}, cfg);
  ASSERT_TRUE(s->Submit(MakeJob("j", "a", 3), 0).ok());
  CycleResult r = s->Schedule(0);
  ASSERT_EQ(r.admitted.size(), 1u);
  EXPECT_TRUE(r.admitted[0].borrowed);
  EXPECT_THAT(r.admitted[0].reason, HasSubstr("borrowing 8 h100 GPUs from cohort c"));
  EXPECT_EQ(s->Usage("a").borrowed_gpus.at("h100"), 8);
  // b can still use the rest of its nominal (8 GPUs) but not more.
  ASSERT_TRUE(s->Submit(MakeJob("k", "b", 2), 1).ok());
  EXPECT_THAT(s->Schedule(1).admitted, IsEmpty());
  EXPECT_THAT(s->Reason("k"), HasSubstr("within its nominal h100 quota but cohort c has lent it"));
}

TEST(SchedulerTest, BorrowingLimitRespected) {
  QueueSpec a = MakeQueue("a", 16, "c");
  a.borrowing_limit["h100"] = 4;
  auto s = MustCreate(Racks({8}), {a, MakeQueue("b", 16, "c")});
  ASSERT_TRUE(s->Submit(MakeJob("j", "a", 3), 0).ok());
  EXPECT_THAT(s->Schedule(0).admitted, IsEmpty());
  EXPECT_EQ(s->Reason("j"),
            "waiting: queue a over quota for h100 by 8 GPUs; borrowing limit allows 4 more "
            "(cohort c has 16 to lend)");
}

TEST(SchedulerTest, LendingLimitRespected) {
  QueueSpec b = MakeQueue("b", 32, "c");
  b.lending_limit["h100"] = 8;
  auto s = MustCreate(Racks({8}), {MakeQueue("a", 16, "c"), b});
  ASSERT_TRUE(s->Submit(MakeJob("big", "a", 4), 0).ok());  // 32 = 16 over nominal
  EXPECT_THAT(s->Schedule(0).admitted, IsEmpty());
  EXPECT_EQ(s->Reason("big"),
            "waiting: queue a over quota for h100 by 16 GPUs; cohort c has 8 to lend");
  ASSERT_TRUE(s->Finish("big", 1).ok());
  ASSERT_TRUE(s->Submit(MakeJob("ok", "a", 3), 1).ok());  // 8 over nominal: lendable
  EXPECT_THAT(Ids(s->Schedule(1)), ElementsAre("ok"));
  // b keeps its 24 unlendable GPUs.
  ASSERT_TRUE(s->Submit(MakeJob("bj", "b", 3), 2).ok());
  EXPECT_THAT(Ids(s->Schedule(2)), ElementsAre("bj"));
}

TEST(SchedulerTest, LenderUnderNominalReclaimsFromBorrower) {
  auto s = MustCreate(Racks({4}), {MakeQueue("a", 16, "c"), MakeQueue("b", 16, "c")});
  ASSERT_TRUE(s->Submit(MakeJob("a1", "a", 2, /*priority=*/5), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("a2", "a", 2, 5), 0).ok());
  EXPECT_THAT(Ids(s->Schedule(0)), ElementsAre("a1", "a2"));
  EXPECT_FALSE(s->Placement("a1")->borrowed);
  EXPECT_TRUE(s->Placement("a2")->borrowed);
  ASSERT_TRUE(s->Submit(MakeJob("b1", "b", 2, /*priority=*/0), 1).ok());
  CycleResult r = s->Schedule(1);
  EXPECT_THAT(Ids(r), ElementsAre("b1"));
  EXPECT_THAT(Victims(r), ElementsAre("a2"));  // the borrower, not a1
  EXPECT_THAT(r.preempted[0].reason, HasSubstr("reclaim by queue b"));
  EXPECT_EQ(s->Phase("a2"), JobPhase::kPending);
  EXPECT_EQ(s->Phase("a1"), JobPhase::kRunning);
  EXPECT_THAT(s->Reason("a2"), HasSubstr("reclaim by queue b"));
}

TEST(SchedulerTest, PriorityPreemptionIsGangAtomic) {
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("low1", "q", 2), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("low2", "q", 2), 0).ok());
  EXPECT_EQ(s->Schedule(0).admitted.size(), 2u);
  ASSERT_TRUE(s->Submit(MakeJob("high", "q", 3, 10), 1).ok());
  CycleResult r = s->Schedule(1);
  EXPECT_THAT(Ids(r), ElementsAre("high"));
  EXPECT_THAT(Victims(r), ElementsAre("low2", "low1"));
  EXPECT_EQ(r.preempted[0].reason, "preempted by job high (priority 10 > 0)");
  EXPECT_EQ(s->Placement("low1"), nullptr);  // both lost every node
  EXPECT_EQ(s->Placement("low2"), nullptr);
  EXPECT_EQ(s->FreeNodes("h100"), 1);
  EXPECT_EQ(s->PendingJobs(), 2);
  // Victims are not re-admitted in the cycle that preempted them; later they are.
  EXPECT_EQ(s->Phase("low1"), JobPhase::kPending);
}

TEST(SchedulerTest, MinimalVictimSet) {
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("v1", "q", 1), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("v2", "q", 2), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("v3", "q", 1), 0).ok());
  EXPECT_EQ(s->Schedule(0).admitted.size(), 3u);
  ASSERT_TRUE(s->Submit(MakeJob("high", "q", 2, 5), 1).ok());
  CycleResult r = s->Schedule(1);
  // Greedy order v3 (most recent), v2 reaches a fit; v3 is then not needed.
  EXPECT_THAT(Victims(r), ElementsAre("v2"));
  EXPECT_EQ(s->Phase("v3"), JobPhase::kRunning);
  EXPECT_EQ(s->Phase("v1"), JobPhase::kRunning);
}

TEST(SchedulerTest, NoPreemptionWhenDisabled) {
  SchedulerConfig cfg;
  cfg.preemption = false;
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)}, cfg);
  ASSERT_TRUE(s->Submit(MakeJob("low", "q", 4), 0).ok());
  EXPECT_EQ(s->Schedule(0).admitted.size(), 1u);
  ASSERT_TRUE(s->Submit(MakeJob("high", "q", 1, 10), 1).ok());
  CycleResult r = s->Schedule(1);
  EXPECT_THAT(r.admitted, IsEmpty());
  EXPECT_THAT(r.preempted, IsEmpty());
}

TEST(SchedulerTest, NoPreemptionAcrossQueuesWithoutReclaim) {
  auto s = MustCreate(Racks({2}), {MakeQueue("a", 1000), MakeQueue("b", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("low", "a", 2), 0).ok());
  EXPECT_EQ(s->Schedule(0).admitted.size(), 1u);
  ASSERT_TRUE(s->Submit(MakeJob("high", "b", 1, 10), 1).ok());
  EXPECT_THAT(s->Schedule(1).preempted, IsEmpty());
  EXPECT_EQ(s->Phase("high"), JobPhase::kPending);
}

TEST(SchedulerTest, FairShareAlternates) {
  auto s = MustCreate(Racks({8}), {MakeQueue("a", 1000), MakeQueue("b", 1000)});
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(s->Submit(MakeJob("a" + std::to_string(i), "a", 1), 0).ok());
    ASSERT_TRUE(s->Submit(MakeJob("b" + std::to_string(i), "b", 1), 0).ok());
  }
  EXPECT_THAT(Ids(s->Schedule(0)), ElementsAre("a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"));
  EXPECT_DOUBLE_EQ(s->Usage("a").dominant_share, 0.5);
}

TEST(SchedulerTest, FairShareWeights) {
  QueueSpec a = MakeQueue("a", 1000);
  a.weight = 2;
  auto s = MustCreate(Racks({8}), {a, MakeQueue("b", 1000)});
  for (int i = 1; i <= 8; ++i) {
    ASSERT_TRUE(s->Submit(MakeJob("a" + std::to_string(i), "a", 1), 0).ok());
    ASSERT_TRUE(s->Submit(MakeJob("b" + std::to_string(i), "b", 1), 0).ok());
  }
  // Shares a = k/16, b = m/8; ties go to the lower queue index.
  EXPECT_THAT(Ids(s->Schedule(0)), ElementsAre("a1", "b1", "a2", "a3", "b2", "a4", "a5", "b3"));
}

TEST(SchedulerTest, PriorityThenFifoInsideQueue) {
  auto s = MustCreate(Racks({1}), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("first", "q", 1, 0), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("urgent", "q", 1, 9), 1).ok());
  ASSERT_TRUE(s->Submit(MakeJob("second", "q", 1, 0), 2).ok());
  EXPECT_THAT(Ids(s->Schedule(3)), ElementsAre("urgent"));
  ASSERT_TRUE(s->Finish("urgent", 4).ok());
  EXPECT_THAT(Ids(s->Schedule(4)), ElementsAre("first"));
}

TEST(SchedulerTest, TopologyBestFitRack) {
  // z0/b0/r0 has 4 nodes, z0/b0/r1 has 3: a 3-node gang takes the tighter r1.
  auto s = MustCreate(Racks({4, 3}, 2), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("j", "q", 3), 0).ok());
  CycleResult r = s->Schedule(0);
  ASSERT_EQ(r.admitted.size(), 1u);
  EXPECT_THAT(r.admitted[0].nodes, ElementsAre(4, 5, 6));
  EXPECT_EQ(r.admitted[0].level, TopologyLevel::kRack);
  EXPECT_EQ(r.admitted[0].domain, "z0/b0/r1");
  EXPECT_EQ(r.admitted[0].reason,
            "admitted: rack z0/b0/r1 in pool on-demand (best fit: 3 free for 3)");
  ASSERT_TRUE(s->Submit(MakeJob("k", "q", 2), 0).ok());
  EXPECT_THAT(s->Schedule(0).admitted[0].nodes, ElementsAre(0, 1));  // fits a rack: same rack
}

TEST(SchedulerTest, TopologyFallsBackRackBlockZone) {
  // Two blocks of two 2-node racks in one zone.
  auto s = MustCreate(Racks({2, 2, 2, 2}, 2, 2), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("blk", "q", 3), 0).ok());
  CycleResult r = s->Schedule(0);
  EXPECT_EQ(r.admitted[0].level, TopologyLevel::kBlock);
  EXPECT_EQ(r.admitted[0].domain, "z0/b0");
  EXPECT_THAT(r.admitted[0].nodes, ElementsAre(0, 1, 2));
  ASSERT_TRUE(s->Submit(MakeJob("zn", "q", 5), 0).ok());
  r = s->Schedule(0);
  EXPECT_EQ(r.admitted[0].level, TopologyLevel::kZone);
  EXPECT_THAT(r.admitted[0].nodes, ElementsAre(4, 5, 6, 7, 3));  // b1 (4 free) first, then b0
}

TEST(SchedulerTest, RequiredLevelBlockRejectsCrossBlock) {
  auto s = MustCreate(Racks({2, 2, 2, 2}, 2, 2), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->SetNodeHealth(0, NodeHealth::kCordoned).ok());
  ASSERT_TRUE(s->SetNodeHealth(4, NodeHealth::kCordoned).ok());
  JobRequest j = MakeJob("j", "q", 4);
  j.required_level = TopologyLevel::kBlock;
  ASSERT_TRUE(s->Submit(j, 0).ok());
  EXPECT_THAT(s->Schedule(0).admitted, IsEmpty());
  EXPECT_EQ(s->Reason("j"),
            "waiting: no rack/block with 4 free h100 nodes in pools reserved,on-demand (largest "
            "free: 3 in z0/b0)");
  ASSERT_TRUE(s->Finish("j", 1).ok());
  ASSERT_TRUE(s->Submit(MakeJob("any", "q", 4), 1).ok());  // may span blocks
  CycleResult r = s->Schedule(1);
  ASSERT_EQ(r.admitted.size(), 1u);
  EXPECT_EQ(r.admitted[0].level, TopologyLevel::kZone);
}

TEST(SchedulerTest, TierRouting) {
  std::vector<NodeSpec> nodes = Racks({2}, 1, 1, Pool::kSpot, "s");
  for (const NodeSpec& n : Racks({2}, 1, 1, Pool::kOnDemand, "o")) {
    NodeSpec m = n;
    m.rack = "ro";
    nodes.push_back(m);
  }
  auto s = MustCreate(nodes, {MakeQueue("q", 1000)});
  JobRequest r1 = MakeJob("r1", "q", 2);
  r1.tier = Tier::kResearch;
  JobRequest r2 = r1;
  r2.id = "r2";
  ASSERT_TRUE(s->Submit(r1, 0).ok());
  ASSERT_TRUE(s->Submit(r2, 0).ok());
  CycleResult r = s->Schedule(0);
  ASSERT_EQ(r.admitted.size(), 2u);
  EXPECT_EQ(r.admitted[0].pool, Pool::kSpot);
  EXPECT_EQ(r.admitted[1].pool, Pool::kOnDemand);  // spot full: fall back
  ASSERT_TRUE(s->Finish("r1", 1).ok());
  ASSERT_TRUE(s->Finish("r2", 1).ok());
  ASSERT_TRUE(s->Submit(MakeJob("p1", "q", 2), 1).ok());
  ASSERT_TRUE(s->Submit(MakeJob("p2", "q", 2), 1).ok());
  r = s->Schedule(1);
  ASSERT_EQ(r.admitted.size(), 1u);
  EXPECT_EQ(r.admitted[0].pool, Pool::kOnDemand);
  EXPECT_THAT(s->Reason("p2"), HasSubstr("in pools reserved,on-demand"));  // never spot

  SchedulerConfig cfg;
  cfg.production_pools = {Pool::kOnDemand, Pool::kSpot};
  auto s2 = MustCreate(nodes, {MakeQueue("q", 1000)}, cfg);
  ASSERT_TRUE(s2->Submit(MakeJob("p1", "q", 2), 1).ok());
  ASSERT_TRUE(s2->Submit(MakeJob("p2", "q", 2), 1).ok());
  r = s2->Schedule(1);
  ASSERT_EQ(r.admitted.size(), 2u);
  EXPECT_EQ(r.admitted[1].pool, Pool::kSpot);
}

TEST(SchedulerTest, StandbyReservedWithGangAndQuotaCharged) {
  auto s = MustCreate(Racks({4, 4}, 2), {MakeQueue("q", 1000)});
  JobRequest j = MakeJob("j", "q", 3);
  j.standby = 1;
  ASSERT_TRUE(s->Submit(j, 0).ok());
  CycleResult r = s->Schedule(0);
  ASSERT_EQ(r.admitted.size(), 1u);
  EXPECT_THAT(r.admitted[0].nodes, ElementsAre(0, 1, 2));
  EXPECT_THAT(r.admitted[0].standby, ElementsAre(3));  // same rack
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 32);
  EXPECT_EQ(s->FreeNodes("h100"), 4);
  // Rack of 4 holds the gang but not gang + standby: standby goes next door.
  JobRequest k = MakeJob("k", "q", 4);
  k.standby = 1;
  ASSERT_TRUE(s->Finish("j", 1).ok());
  ASSERT_TRUE(s->Submit(k, 1).ok());
  r = s->Schedule(1);
  EXPECT_THAT(r.admitted[0].nodes, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(r.admitted[0].standby, ElementsAre(4));
  EXPECT_EQ(r.admitted[0].level, TopologyLevel::kRack);
}

TEST(SchedulerTest, FailedHeadNotRetriedUntilSomethingChanges) {
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("a", "q", 3), 0).ok());
  EXPECT_EQ(s->Schedule(0).admitted.size(), 1u);
  ASSERT_TRUE(s->Submit(MakeJob("b", "q", 2), 0).ok());
  EXPECT_EQ(s->Schedule(1).considered, 1);
  EXPECT_EQ(s->Schedule(2).considered, 0);  // nothing changed
  ASSERT_TRUE(s->Finish("a", 3).ok());
  CycleResult r = s->Schedule(3);
  EXPECT_EQ(r.considered, 1);
  EXPECT_THAT(Ids(r), ElementsAre("b"));
}

}  // namespace
}  // namespace bulwark::sched
