// Differential test: bw_sched against the naive oracle on seeded random workloads.
// Both must make identical decisions: admissions (job -> gang nodes, standby nodes,
// pool), preemptions (victims) and node-failure actions.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <sstream>

#include "naive_scheduler.h"
#include "sched/scheduler.h"

namespace bulwark::sched {
namespace {

std::string Key(const Admission& a) {
  std::ostringstream o;
  o << a.job_id << " pool=" << PoolName(a.pool) << " level=" << TopologyLevelName(a.level)
    << " domain=" << a.domain << " nodes=";
  for (int n : a.nodes) o << n << ",";
  o << " standby=";
  for (int n : a.standby) o << n << ",";
  return o.str();
}

std::string Key(const CycleResult& r) {
  std::string s;
  for (const auto& a : r.admitted) s += "A " + Key(a) + "\n";
  for (const auto& p : r.preempted) s += "P " + p.victim + " by " + p.preemptor + "\n";
  for (const auto& x : r.restocked) s += "R " + x.job_id + " " + std::to_string(x.node) + "\n";
  return s;
}

std::string Key(const NodeFailureDecision& d) {
  std::ostringstream o;
  o << FailureActionName(d.action) << " job=" << d.job_id << " repl=" << d.replacement
    << " requeue=" << d.requeue_after_s << " preempted=";
  for (const auto& v : d.preempted) o << v << ",";
  return o.str();
}

struct Shape {
  std::vector<NodeSpec> nodes;
  std::vector<QueueSpec> queues;
  SchedulerConfig config;
};

Shape RandomShape(std::mt19937_64& rng) {
  Shape s;
  const int zones = 1 + static_cast<int>(rng() % 2);
  int idx = 0;
  for (int z = 0; z < zones; ++z) {
    const int blocks = 1 + static_cast<int>(rng() % 3);
    for (int b = 0; b < blocks; ++b) {
      const int racks = 1 + static_cast<int>(rng() % 3);
      for (int r = 0; r < racks; ++r) {
        const int n = 1 + static_cast<int>(rng() % 5);
        for (int i = 0; i < n; ++i) {
          NodeSpec ns;
          ns.name = "n" + std::to_string(idx++);
          ns.zone = "z" + std::to_string(z);
          ns.block = "b" + std::to_string(b);
          ns.rack = "r" + std::to_string(r);
          const int pool = static_cast<int>(rng() % 4);
          ns.pool = pool == 0 ? Pool::kSpot : pool == 1 ? Pool::kReserved : Pool::kOnDemand;
          if (rng() % 6 == 0) {
            ns.gpu_type = "a100";
            ns.gpus = 4;
          }
          s.nodes.push_back(ns);
        }
      }
    }
  }
  const int nq = 2 + static_cast<int>(rng() % 4);
  for (int q = 0; q < nq; ++q) {
    QueueSpec qs;
    qs.name = "q" + std::to_string(q);
    qs.cohort = rng() % 4 == 0 ? "" : "c" + std::to_string(rng() % 2);
    qs.nominal_gpus["h100"] = 8 * static_cast<int>(rng() % 8);
    qs.nominal_gpus["a100"] = 4 * static_cast<int>(rng() % 4);
    if (rng() % 3 == 0) qs.borrowing_limit["h100"] = 8 * static_cast<int>(rng() % 4);
    if (rng() % 3 == 0) qs.lending_limit["h100"] = 8 * static_cast<int>(rng() % 4);
    qs.weight = 1 + static_cast<double>(rng() % 3);
    s.queues.push_back(qs);
  }
  s.config.preemption = rng() % 5 != 0;
  s.config.seed = rng();
  if (rng() % 3 == 0) s.config.production_pools = {Pool::kOnDemand, Pool::kSpot};
  return s;
}

// Decisions seen across all seeds, so the test proves it exercised every path.
std::map<std::string, int> g_seen;

void RunOne(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Shape shape = RandomShape(rng);
  auto created = Scheduler::Create(shape.config, shape.nodes, shape.queues);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Scheduler& fast = **created;
  NaiveScheduler naive(shape.config, shape.nodes, shape.queues);
  std::vector<std::string> live;
  const int n_nodes = static_cast<int>(shape.nodes.size());

  for (int step = 0; step < 300; ++step) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(step));
    const double now = step * 3.0;
    const int op = static_cast<int>(rng() % 20);
    if (op < 8) {
      JobRequest j;
      j.id = "j" + std::to_string(step);
      j.queue = shape.queues[rng() % shape.queues.size()].name;
      j.nodes = 1 + static_cast<int>(rng() % 3 == 0 ? rng() % 8 : rng() % 3);
      j.priority = static_cast<int>(rng() % 4);
      j.gpu_type = rng() % 5 == 0 ? "a100" : "h100";
      j.tier = rng() % 2 ? Tier::kResearch : Tier::kProduction;
      j.standby = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 2) : 0;
      const int lvl = static_cast<int>(rng() % 6);
      j.required_level = lvl < 3 ? static_cast<TopologyLevel>(lvl) : TopologyLevel::kAny;
      const bool a = fast.Submit(j, now).ok(), b = naive.Submit(j, now).ok();
      ASSERT_EQ(a, b);
      if (a) live.push_back(j.id);
    } else if (op < 12 && !live.empty()) {
      const size_t i = rng() % live.size();
      ASSERT_EQ(fast.Finish(live[i], now).ok(), naive.Finish(live[i], now).ok());
      live.erase(live.begin() + static_cast<long>(i));
    } else if (op < 14) {
      const int n = static_cast<int>(rng() % n_nodes);
      const NodeFailureDecision d = fast.OnNodeFailure(n, now);
      ASSERT_EQ(Key(d), Key(naive.OnNodeFailure(n, now)));
      ++g_seen[FailureActionName(d.action)];
    } else if (op < 15) {
      const int n = static_cast<int>(rng() % n_nodes);
      const NodeHealth h = rng() % 2 ? NodeHealth::kReady : NodeHealth::kCordoned;
      ASSERT_TRUE(fast.SetNodeHealth(n, h).ok());
      ASSERT_TRUE(naive.SetNodeHealth(n, h).ok());
    } else {
      const int max = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 2) : 1 << 30;
      CycleResult a = fast.Schedule(now, max), b = naive.Schedule(now, max);
      ASSERT_EQ(Key(a), Key(b));

      g_seen["admission"] += static_cast<int>(a.admitted.size());
      g_seen["preemption"] += static_cast<int>(a.preempted.size());
      g_seen["restock"] += static_cast<int>(a.restocked.size());
    }
    ASSERT_EQ(fast.PendingJobs(), naive.PendingJobs());
    ASSERT_EQ(fast.RunningJobs(), naive.RunningJobs());
  }
  for (const std::string& id : live) {
    const Admission* a = fast.Placement(id);
    const Admission* b = naive.Placement(id);
    ASSERT_EQ(a == nullptr, b == nullptr) << id;
    if (a != nullptr) {
      ASSERT_EQ(Key(*a), Key(*b));
    }
  }
}

TEST(SchedDiffTest, RandomWorkloadsMatchTheOracle) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    RunOne(seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (const char* k : {"admission", "preemption", "restock", "none", "use_standby",
                        "use_free_node", "preempt_for_node", "requeue"}) {
    EXPECT_GT(g_seen[k], 0) << k;
    std::printf("%s: %d\n", k, g_seen[k]);
  }
}

}  // namespace
}  // namespace bulwark::sched
