// Node failures, node health, standby sizing, validation and determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

#include "sched/sched_test_util.h"
#include "sched/scheduler.h"
#include "sched/scheduler_impl.h"

namespace bulwark::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeJob;
using testing::MakeQueue;
using testing::MustCreate;
using testing::Racks;

TEST(NodeFailureTest, UsesStandbyFirst) {
  auto s = MustCreate(Racks({4, 4}, 2), {MakeQueue("q", 1000)});
  JobRequest j = MakeJob("j", "q", 3);
  j.standby = 1;
  ASSERT_TRUE(s->Submit(j, 0).ok());
  ASSERT_EQ(s->Schedule(0).admitted.size(), 1u);
  NodeFailureDecision d = s->OnNodeFailure(1, 5);
  EXPECT_EQ(d.action, FailureAction::kUseStandby);
  EXPECT_EQ(d.job_id, "j");
  EXPECT_EQ(d.replacement, 3);
  EXPECT_THAT(s->Placement("j")->nodes, ElementsAre(0, 3, 2));
  EXPECT_TRUE(s->Placement("j")->standby.empty());
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 24);
  EXPECT_EQ(s->Node(1).health, NodeHealth::kQuarantined);
  EXPECT_EQ(s->FreeNodes("h100"), 4);
}

TEST(NodeFailureTest, FreeNodeSameRackThenBlock) {
  auto s = MustCreate(Racks({3, 3}, 2), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("j", "q", 2), 0).ok());
  ASSERT_THAT(s->Schedule(0).admitted[0].nodes, ElementsAre(0, 1));
  NodeFailureDecision d = s->OnNodeFailure(0, 1);
  EXPECT_EQ(d.action, FailureAction::kUseFreeNode);
  EXPECT_EQ(d.replacement, 2);  // same rack
  d = s->OnNodeFailure(2, 2);
  EXPECT_EQ(d.action, FailureAction::kUseFreeNode);
  EXPECT_EQ(d.replacement, 3);  // rack r0 exhausted: closest in block
  EXPECT_THAT(s->Placement("j")->nodes, ElementsAre(3, 1));
  EXPECT_EQ(s->Placement("j")->level, TopologyLevel::kBlock);
}

TEST(NodeFailureTest, IdleAndStandbyNodeFailures) {
  auto s = MustCreate(Racks({4}), {MakeQueue("q", 1000)});
  JobRequest j = MakeJob("j", "q", 2);
  j.standby = 1;
  ASSERT_TRUE(s->Submit(j, 0).ok());
  ASSERT_EQ(s->Schedule(0).admitted.size(), 1u);
  NodeFailureDecision d = s->OnNodeFailure(3, 1);  // idle
  EXPECT_EQ(d.action, FailureAction::kNone);
  EXPECT_EQ(d.job_id, "");
  d = s->OnNodeFailure(2, 1);  // the standby
  EXPECT_EQ(d.action, FailureAction::kNone);
  EXPECT_EQ(d.job_id, "j");
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 16);
  EXPECT_EQ(s->FreeNodes("h100"), 0);
}

TEST(StandbyRestockTest, RefillsClosestToTheGangAfterUseOrLoss) {
  auto s = MustCreate(Racks({4, 4}, 2), {MakeQueue("q", 1000)});
  JobRequest j = MakeJob("j", "q", 3);
  j.standby = 1;
  ASSERT_TRUE(s->Submit(j, 0).ok());
  ASSERT_EQ(s->Schedule(0).admitted.size(), 1u);  // gang 0,1,2 in rack r0; standby 3
  ASSERT_EQ(s->OnNodeFailure(1, 5).action, FailureAction::kUseStandby);
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 24);
  // Rack r0 has nothing free (1 is quarantined): the closest is rack r1 in the block.
  CycleResult c = s->Schedule(6);
  ASSERT_EQ(c.restocked.size(), 1u);
  EXPECT_EQ(c.restocked[0].job_id, "j");
  EXPECT_EQ(c.restocked[0].node, 4);
  EXPECT_THAT(c.restocked[0].reason,
              HasSubstr("standby restocked: node n4 for job j (1 of 1 standby; gang in rack "
                        "z0/b0/r0)"));
  EXPECT_THAT(s->Placement("j")->standby, ElementsAre(4));
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 32);
  EXPECT_TRUE(s->Schedule(7).restocked.empty());  // full again: nothing to do
  // Node 1 is repaired; the standby 4 is lost: node 1, back in rack r0, refills it.
  ASSERT_TRUE(s->SetNodeHealth(1, NodeHealth::kReady).ok());
  ASSERT_EQ(s->OnNodeFailure(4, 8).action, FailureAction::kNone);
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 24);
  c = s->Schedule(9);
  ASSERT_EQ(c.restocked.size(), 1u);
  EXPECT_EQ(c.restocked[0].node, 1);
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 32);
}

TEST(StandbyRestockTest, PendingJobsFirstThenQuotaBoundsTheRefill) {
  auto s = MustCreate(Racks({6}), {MakeQueue("q", 32)});
  JobRequest a = MakeJob("a", "q", 2, 1);
  a.standby = 1;
  ASSERT_TRUE(s->Submit(a, 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("b", "q", 1), 0).ok());
  ASSERT_EQ(s->Schedule(0).admitted.size(), 2u);  // a: 0,1 + standby 2; b: 3; quota full
  ASSERT_EQ(s->OnNodeFailure(0, 1).action, FailureAction::kUseStandby);
  ASSERT_TRUE(s->Submit(MakeJob("c", "q", 1), 2).ok());
  CycleResult r = s->Schedule(2);
  ASSERT_EQ(r.admitted.size(), 1u);  // c takes the 8 GPUs a's used standby gave back
  EXPECT_TRUE(r.restocked.empty());  // 32 + 8 > nominal 32
  EXPECT_EQ(s->FreeNodes("h100"), 1);
  ASSERT_TRUE(s->Finish("c", 3).ok());
  r = s->Schedule(3);
  ASSERT_EQ(r.restocked.size(), 1u);
  EXPECT_EQ(r.restocked[0].node, 4);
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 32);
}

TEST(StandbyRestockTest, HigherPriorityFirstAndCanBeTurnedOff) {
  for (bool restock : {true, false}) {
    SCOPED_TRACE(restock ? "restock on" : "restock off");
    SchedulerConfig cfg;
    cfg.restock_standby = restock;
    auto s = MustCreate(Racks({5}), {MakeQueue("q", 1000)}, cfg);
    JobRequest lo = MakeJob("lo", "q", 1, 0), hi = MakeJob("hi", "q", 1, 5);
    lo.standby = hi.standby = 1;
    ASSERT_TRUE(s->Submit(lo, 0).ok());
    ASSERT_EQ(s->Schedule(0).admitted.size(), 1u);  // lo: 0 + standby 1 (admitted first)
    ASSERT_TRUE(s->Submit(hi, 1).ok());
    ASSERT_EQ(s->Schedule(1).admitted.size(), 1u);  // hi: 2 + standby 3
    ASSERT_EQ(s->OnNodeFailure(0, 2).action, FailureAction::kUseStandby);
    ASSERT_EQ(s->OnNodeFailure(2, 2).action, FailureAction::kUseStandby);
    CycleResult r = s->Schedule(3);  // one free node (4): the higher priority gets it
    if (!restock) {
      EXPECT_TRUE(r.restocked.empty());
      EXPECT_TRUE(s->Placement("hi")->standby.empty());
      continue;
    }
    ASSERT_EQ(r.restocked.size(), 1u);
    EXPECT_EQ(r.restocked[0].job_id, "hi");
    EXPECT_EQ(r.restocked[0].node, 4);
    ASSERT_TRUE(s->SetNodeHealth(0, NodeHealth::kReady).ok());
    r = s->Schedule(4);
    ASSERT_EQ(r.restocked.size(), 1u);
    EXPECT_EQ(r.restocked[0].job_id, "lo");
    EXPECT_EQ(r.restocked[0].node, 0);
  }
}

TEST(AdoptTest, RunningGangIsRecordedAsIsAndRestockedLater) {
  auto s = MustCreate(Racks({3, 3}, 2), {MakeQueue("q", 16)});
  JobRequest j = MakeJob("j", "q", 2);
  j.standby = 1;
  EXPECT_EQ(s->NodeIndex("n4"), 4);
  EXPECT_EQ(s->NodeIndex("nope"), -1);
  // Errors name the problem and change nothing.
  EXPECT_THAT(s->Adopt(j, {0}, {}, 0).message(), HasSubstr("1 given for a gang of 2"));
  EXPECT_THAT(s->Adopt(j, {0, 0}, {}, 0).message(), HasSubstr("node n0 listed twice"));
  EXPECT_THAT(s->Adopt(j, {0, 9}, {}, 0).message(), HasSubstr("out of range"));
  EXPECT_EQ(s->Phase("j"), JobPhase::kFinished);
  // Adopted over quota (24 > 16): recorded as is, without a quota check.
  ASSERT_TRUE(s->Adopt(j, {4, 1}, {2}, 0).ok());
  EXPECT_EQ(s->Phase("j"), JobPhase::kRunning);
  EXPECT_THAT(s->Placement("j")->nodes, ElementsAre(4, 1));
  EXPECT_EQ(s->Placement("j")->level, TopologyLevel::kBlock);
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 24);
  EXPECT_EQ(s->FreeNodes("h100"), 3);
  JobRequest k = MakeJob("k", "q", 1);
  EXPECT_THAT(s->Adopt(k, {1}, {}, 0).message(), HasSubstr("held by job j"));
  // A used standby is restocked by the next cycle, within quota once j's usage allows.
  ASSERT_EQ(s->OnNodeFailure(4, 1).action, FailureAction::kUseStandby);
  EXPECT_EQ(s->Usage("q").used_gpus.at("h100"), 16);
  EXPECT_TRUE(s->Schedule(2).restocked.empty());  // 16 + 8 > nominal 16
}

TEST(NodeFailureTest, PreemptsLowerPriorityForANode) {
  auto s = MustCreate(Racks({2}), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->Submit(MakeJob("high", "q", 1, 5), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("low", "q", 1, 0), 0).ok());
  ASSERT_EQ(s->Schedule(0).admitted.size(), 2u);
  ASSERT_THAT(s->Placement("high")->nodes, ElementsAre(0));
  NodeFailureDecision d = s->OnNodeFailure(0, 1);
  EXPECT_EQ(d.action, FailureAction::kPreemptForNode);
  EXPECT_EQ(d.replacement, 1);
  EXPECT_THAT(d.preempted, ElementsAre("low"));
  EXPECT_EQ(s->Phase("low"), JobPhase::kPending);
  EXPECT_THAT(s->Placement("high")->nodes, ElementsAre(1));
}

TEST(NodeFailureTest, RequeuesWithBackoffAndSkipsUntilDue) {
  SchedulerConfig cfg;
  cfg.seed = 7;
  auto s = MustCreate(Racks({3}), {MakeQueue("q", 1000)}, cfg);
  ASSERT_TRUE(s->Submit(MakeJob("a", "q", 2), 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("b", "q", 1), 0).ok());
  ASSERT_EQ(s->Schedule(0).admitted.size(), 2u);
  ASSERT_THAT(s->Placement("a")->nodes, ElementsAre(0, 1));
  NodeFailureDecision d = s->OnNodeFailure(0, 10);  // b has equal priority: not a victim
  EXPECT_EQ(d.action, FailureAction::kRequeue);
  const double delay = RequeueBackoff(cfg, "a", 1);
  EXPECT_DOUBLE_EQ(d.requeue_after_s, delay);
  EXPECT_GE(delay, 0.75 * 30);
  EXPECT_LT(delay, 30);
  EXPECT_EQ(s->Phase("a"), JobPhase::kPending);
  EXPECT_EQ(s->Reason("a"),
            "waiting: requeue backoff until t=" +
                std::to_string(10 + delay).substr(0, std::to_string(10 + delay).find('.') + 2));
  ASSERT_TRUE(s->Finish("b", 11).ok());
  CycleResult r = s->Schedule(12);  // fits now, but backoff not over
  EXPECT_TRUE(r.admitted.empty());
  EXPECT_EQ(r.considered, 0);
  r = s->Schedule(10 + delay);
  ASSERT_EQ(r.admitted.size(), 1u);
  EXPECT_THAT(r.admitted[0].nodes, ElementsAre(1, 2));
  // Second failure: the base doubles.
  ASSERT_TRUE(s->SetNodeHealth(0, NodeHealth::kReady).ok());
  ASSERT_TRUE(s->Submit(MakeJob("c", "q", 1), 50).ok());
  ASSERT_EQ(s->Schedule(50).admitted.size(), 1u);
  d = s->OnNodeFailure(1, 60);
  EXPECT_EQ(d.action, FailureAction::kRequeue);
  EXPECT_GE(d.requeue_after_s, 0.75 * 60);
  EXPECT_LT(d.requeue_after_s, 60);
  EXPECT_DOUBLE_EQ(d.requeue_after_s, RequeueBackoff(cfg, "a", 2));
}

TEST(NodeFailureTest, BackoffIsCappedAndSeeded) {
  SchedulerConfig a, b;
  b.seed = 2;
  EXPECT_LE(RequeueBackoff(a, "x", 30), a.requeue_backoff_cap_s);
  EXPECT_GE(RequeueBackoff(a, "x", 30), 0.75 * a.requeue_backoff_cap_s);
  EXPECT_EQ(RequeueBackoff(a, "x", 3), RequeueBackoff(a, "x", 3));
  EXPECT_NE(RequeueBackoff(a, "x", 3), RequeueBackoff(b, "x", 3));
}

TEST(NodeHealthTest, CordonedNodesAreNotPlaced) {
  auto s = MustCreate(Racks({2}), {MakeQueue("q", 1000)});
  ASSERT_TRUE(s->SetNodeHealth(0, NodeHealth::kCordoned).ok());
  EXPECT_EQ(s->FreeNodes("h100"), 1);
  ASSERT_TRUE(s->Submit(MakeJob("two", "q", 2), 0).ok());
  EXPECT_TRUE(s->Schedule(0).admitted.empty());
  ASSERT_TRUE(s->Finish("two", 0).ok());
  ASSERT_TRUE(s->Submit(MakeJob("one", "q", 1), 0).ok());
  EXPECT_THAT(s->Schedule(0).admitted[0].nodes, ElementsAre(1));
  // A node drained while in use stays with its job, and is not free after release.
  ASSERT_TRUE(s->SetNodeHealth(1, NodeHealth::kDraining).ok());
  EXPECT_EQ(s->Phase("one"), JobPhase::kRunning);
  ASSERT_TRUE(s->Finish("one", 1).ok());
  EXPECT_EQ(s->FreeNodes("h100"), 0);
  ASSERT_TRUE(s->SetNodeHealth(1, NodeHealth::kReady).ok());
  ASSERT_TRUE(s->SetNodeHealth(0, NodeHealth::kReady).ok());
  EXPECT_EQ(s->FreeNodes("h100"), 2);
  EXPECT_FALSE(s->SetNodeHealth(5, NodeHealth::kReady).ok());
}

TEST(StandbyNodesTest, MatchesHandComputedBinomial) {
  // p = 0.1 exactly: rate * lead / 86400 = -ln(0.9). Binomial(10, 0.1) CDF:
  // P(<=2) = 0.9298, P(<=3) = 0.9872, P(<=4) = 0.99837.
  const double lead = -std::log(0.9) * 86400;
  EXPECT_EQ(StandbyNodes(10, 1, lead, 0.90), 2);
  EXPECT_EQ(StandbyNodes(10, 1, lead, 0.95), 3);
  EXPECT_EQ(StandbyNodes(10, 1, lead, 0.99), 4);
  EXPECT_EQ(StandbyNodes(10, 1, lead, 0.999), 5);      // P(<=5) = 0.99985
  EXPECT_EQ(StandbyNodes(1024, 0.0065, 2 * 3600), 3);  // docs/scheduler.md worked example
  EXPECT_EQ(StandbyNodes(10, 0, lead), 0);
  EXPECT_EQ(StandbyNodes(10, 1, 0), 0);
  EXPECT_EQ(StandbyNodes(0, 1, lead), 0);
}

TEST(StandbyNodesTest, LargeClusterIsStableAndFast) {
  // 100,000 nodes, 6.5 failures per 1,000 node-days, 1 h lead: mean 27.08, and
  // (1-p)^n = e^-27 is far from underflow, so a plain Poisson sum is a fair check.
  const double p = -std::expm1(-0.0065 * 3600 / 86400);
  const double lambda = 100000 * p;
  double pmf = std::exp(-lambda), cdf = pmf;
  int want = 0;
  while (cdf < 0.99) {
    ++want;
    pmf *= lambda / want;
    cdf += pmf;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int got = StandbyNodes(100000, 0.0065, 3600);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  EXPECT_NEAR(got, want, 1);
  EXPECT_LT(us.count(), 100000);
  // p large enough that (1-p)^n underflows a double: still a sane answer near the mean.
  const int k = StandbyNodes(100000, 5, 3600);  // p ~ 0.188, mean ~ 18,800
  EXPECT_GT(k, 18800);
  EXPECT_LT(k, 19200);
}

TEST(ValidationTest, CreateErrorsNameTheField) {
  auto bad = [](std::vector<NodeSpec> nodes, std::vector<QueueSpec> queues) {
    auto r = Scheduler::Create({}, std::move(nodes), std::move(queues));
    return r.ok() ? std::string("ok") : r.status().message();
  };
  std::vector<NodeSpec> nodes = Racks({2});
  std::vector<NodeSpec> dup = nodes;
  dup[1].name = dup[0].name;
  EXPECT_THAT(bad(dup, {}), HasSubstr("name: duplicate"));
  std::vector<NodeSpec> zero = nodes;
  zero[1].gpus = 0;
  EXPECT_THAT(bad(zero, {}), HasSubstr("node[1] \"n1\": gpus: must be > 0"));
  std::vector<NodeSpec> norack = nodes;
  norack[0].rack = "";
  EXPECT_THAT(bad(norack, {}), HasSubstr("rack: empty"));
  std::vector<NodeSpec> mixed = nodes;
  mixed[1].gpus = 4;
  EXPECT_THAT(bad(mixed, {}), HasSubstr("one GPU count per gpu_type"));
  QueueSpec q = MakeQueue("q", 8);
  q.weight = 0;
  EXPECT_THAT(bad(nodes, {q}), HasSubstr("queue[0] \"q\": weight"));
  q = MakeQueue("q", -8);
  EXPECT_THAT(bad(nodes, {q}), HasSubstr("nominal_gpus[h100]: must be >= 0"));
  q = MakeQueue("q", 8);
  q.lending_limit["h100"] = -1;
  EXPECT_THAT(bad(nodes, {q}), HasSubstr("lending_limit[h100]"));
  EXPECT_THAT(bad(nodes, {MakeQueue("q", 8), MakeQueue("q", 8)}), HasSubstr("name: duplicate"));
  EXPECT_EQ(bad(nodes, {MakeQueue("q", 8)}), "ok");
}

TEST(ValidationTest, SubmitErrorsNameTheField) {
  auto s = MustCreate(Racks({2}), {MakeQueue("q", 8)});
  auto err = [&](const JobRequest& j) {
    Status st = s->Submit(j, 0);
    return st.ok() ? std::string("ok") : st.message();
  };
  EXPECT_THAT(err(MakeJob("j", "nope", 1)), HasSubstr("queue: unknown \"nope\""));
  EXPECT_THAT(err(MakeJob("j", "q", 0)), HasSubstr("nodes: must be >= 1"));
  JobRequest sb = MakeJob("j", "q", 1);
  sb.standby = -1;
  EXPECT_THAT(err(sb), HasSubstr("standby: must be >= 0"));
  EXPECT_THAT(err(MakeJob("j", "q", 3)), HasSubstr("nodes: gang of 3 exceeds the 2 h100 nodes"));
  JobRequest a100 = MakeJob("j", "q", 1);
  a100.gpu_type = "a100";
  EXPECT_THAT(err(a100), HasSubstr("exceeds the 0 a100 nodes"));
  EXPECT_THAT(err(MakeJob("", "q", 1)), HasSubstr("job id: empty"));
  EXPECT_EQ(err(MakeJob("j", "q", 1)), "ok");
  EXPECT_THAT(err(MakeJob("j", "q", 1)), HasSubstr("id: duplicate"));
  EXPECT_EQ(s->Finish("zzz", 0).code(), Code::kNotFound);
  ASSERT_TRUE(s->Finish("j", 0).ok());
  EXPECT_EQ(s->Finish("j", 0).code(), Code::kFailedPrecondition);
  EXPECT_EQ(err(MakeJob("j", "q", 1)), "ok");  // ids are unique among live jobs only
}

// A seeded random workload; returns every decision as text.
std::string RunWorkload(uint64_t seed) {
  std::vector<NodeSpec> nodes = Racks({4, 4, 3, 5, 4, 2}, 2, 2);
  for (size_t i = 0; i < nodes.size(); i += 3) nodes[i].pool = Pool::kSpot;
  QueueSpec a = MakeQueue("a", 64, "c"), b = MakeQueue("b", 64, "c"), c = MakeQueue("c", 96);
  a.borrowing_limit["h100"] = 64;
  auto s = MustCreate(nodes, {a, b, c});
  std::mt19937_64 rng(seed);
  std::string log;
  std::vector<std::string> live;
  for (int step = 0; step < 300; ++step) {
    const double now = step;
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      JobRequest j = MakeJob("j" + std::to_string(step), std::string(1, "abc"[rng() % 3]),
                             1 + static_cast<int>(rng() % 6), static_cast<int>(rng() % 3));
      j.tier = rng() % 2 ? Tier::kResearch : Tier::kProduction;
      j.standby = rng() % 4 == 0 ? 1 : 0;
      if (rng() % 5 == 0) j.required_level = TopologyLevel::kBlock;
      if (s->Submit(j, now).ok()) live.push_back(j.id);
    } else if (op < 7 && !live.empty()) {
      const size_t i = rng() % live.size();
      (void)s->Finish(live[i], now);
      live.erase(live.begin() + static_cast<long>(i));
    } else if (op == 7) {
      const int n = static_cast<int>(rng() % nodes.size());
      NodeFailureDecision d = s->OnNodeFailure(n, now);
      log += "F" + std::to_string(n) + FailureActionName(d.action) + d.reason + "\n";
      if (rng() % 2)
        (void)s->SetNodeHealth(static_cast<int>(rng() % nodes.size()), NodeHealth::kReady);
    } else {
      CycleResult r = s->Schedule(now);
      for (const auto& ad : r.admitted) {
        log += ad.job_id + ":" + ad.reason;
        for (int n : ad.nodes) log += " " + std::to_string(n);
        log += "\n";
      }
      for (const auto& p : r.preempted) log += "P" + p.victim + p.reason + "\n";
    }
  }
  return log;
}

TEST(DeterminismTest, SameInputsSameDecisions) {
  const std::string a = RunWorkload(42), b = RunWorkload(42);
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 1000u);
  EXPECT_NE(a, RunWorkload(43));
}

}  // namespace
}  // namespace bulwark::sched
