// ParseSimConfig: accepted fields and every error carrying file:line, field path,
// the value and a fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/presets.h"
#include "sim/sim.h"

namespace bulwark::sim {
namespace {

const char* kMinimal = R"(sim: {days: 2, seed: 3}
cluster:
  shape: {zones: 1, blocksPerZone: 2, racksPerBlock: 2, nodesPerRack: 4, gpusPerNode: 8,
          pools: {onDemand: 0.5, spot: 0.25, reserved: 0.25},
          pricePerGpuHour: {onDemand: 4, spot: 1.5, reserved: 2.5}}
queues:
  - {name: q, nominalGpus: {h100: 128}}
workload:
  jobs:
    - {id: a, queue: q, nodes: 4, workHours: 10}
)";

std::string Err(const std::string& yaml) {
  auto c = ParseSimConfig(yaml, "cfg.yaml");
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(SimConfig, MinimalConfigParses) {
  auto c = ParseSimConfig(kMinimal, "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->nodes.size(), 16u);
  // Zone, block, rack and node in order: node 13 is block 1's rack 1's second.
  EXPECT_EQ(c->nodes[13].name, "z0-b1-r1-n1");
  EXPECT_EQ(c->nodes[13].zone, "z0");
  EXPECT_EQ(c->nodes[13].block, "b1");
  EXPECT_EQ(c->nodes[13].rack, "r1");
  EXPECT_EQ(c->nodes[13].gpus, 8);
  EXPECT_EQ(c->duration_s, 2 * 86400);
  EXPECT_EQ(c->seed, 3u);
  int spot = 0;
  for (const auto& n : c->nodes) spot += n.pool == sched::Pool::kSpot;
  EXPECT_EQ(spot, 4);
  ASSERT_EQ(c->jobs.size(), 1u);
  EXPECT_EQ(c->jobs[0].work_s, 36000);
  ASSERT_EQ(c->strategies.size(), 1u);  // the implicit default strategy
}

TEST(SimConfig, UnknownFieldHasLineAndSuggestion) {
  const std::string m = Err(std::string(kMinimal) + "failures: {presett: llama3}\n");
  EXPECT_NE(m.find("cfg.yaml:11: failures.presett: unknown field"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean \"preset\""), std::string::npos) << m;
}

TEST(SimConfig, BadValuesNameFieldLineAndFix) {
  std::string y = kMinimal;
  y.replace(y.find("workHours: 10"), 13, "workHours: -1");
  const std::string m = Err(y);
  EXPECT_NE(m.find("cfg.yaml:10: workload.jobs[0].workHours: must be > 0 (got -1); set workHours"),
            std::string::npos)
      << m;
}

TEST(SimConfig, UnknownQueueAndStrategyAreReportedWithLines) {
  std::string y = kMinimal;
  y.replace(y.find("queue: q, nodes"), 8, "queue: x");
  y += "    - {id: b, queue: q, nodes: 1, workHours: 1, strategy: nope}\n";
  const std::string m = Err(y);
  EXPECT_NE(m.find("cfg.yaml:10: workload.jobs[0].queue: unknown queue (got \"x\")"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("cfg.yaml:11: workload.jobs[1].strategy: unknown strategy (got \"nope\")"),
            std::string::npos)
      << m;
}

TEST(SimConfig, GangLargerThanClusterAndDuplicateIds) {
  std::string y = kMinimal;
  y += "    - {id: a, queue: q, nodes: 17, workHours: 1}\n";
  const std::string m = Err(y);
  EXPECT_NE(m.find("cfg.yaml:11: workload.jobs[1].id: duplicate job id"), std::string::npos) << m;
  EXPECT_NE(m.find("gang larger than the cluster's h100 nodes (got 17 nodes; the cluster has 16)"),
            std::string::npos)
      << m;
}

TEST(SimConfig, MissingSectionsAndSyntaxErrors) {
  EXPECT_NE(Err("sim: {days: 1}\n").find("cfg.yaml:1: cluster: required field is missing"),
            std::string::npos);
  const std::string m = Err("cluster: {shape: {zones: 1}\nqueues: [\n");
  EXPECT_NE(m.find("(yaml syntax)"), std::string::npos) << m;
  EXPECT_NE(Err("[1, 2]\n").find("must be a YAML mapping"), std::string::npos);
}

TEST(SimConfig, PoolFractionsMustSumToOne) {
  std::string y = kMinimal;
  y.replace(y.find("reserved: 0.25}"), 15, "reserved: 0.5}");
  EXPECT_NE(Err(y).find("cfg.yaml:4: cluster.shape.pools: fractions must sum to 1"),
            std::string::npos);
}

// Found by fuzz/fuzz_sim_config: pools that are all 0 used to hang the parser (the
// node split handed out the remainder only to pools with a share, forever).
TEST(SimConfig, PoolFractionsAllZeroAreAnErrorNotAHang) {
  std::string y = kMinimal;
  y.replace(y.find("{onDemand: 0.5, spot: 0.25, reserved: 0.25}"), 43,
            "{onDemand: 0, spot: 0, reserved: 0}");
  EXPECT_NE(Err(y).find("cfg.yaml:4: cluster.shape.pools: fractions must sum to 1 (got 0"),
            std::string::npos);
}

TEST(SimConfig, StrategyAutoFieldsAndFaultTrace) {
  std::string y = kMinimal;
  y += R"(strategies:
  bw: {detectionSeconds: {hang: auto, crash: 2}, checkpointIntervalSeconds: auto,
       standby: auto, inMemoryCheckpoints: true, faultPolicy: {restartBudget: 5}}
faults:
  - {atSeconds: 10, node: 3, type: hardware}
  - {atHours: 1, node: z0-b0-r0-n1, type: spot_reclaim}
failures: {preset: llama3, distribution: weibull, weibullShape: 0.7, repairHours: 24}
)";
  auto c = ParseSimConfig(y, "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const Strategy& s = c->strategies[0];
  EXPECT_TRUE(s.hang_auto);
  EXPECT_TRUE(s.interval_auto);
  EXPECT_TRUE(s.standby_auto);
  EXPECT_EQ(s.detect_s[0], 2);
  EXPECT_EQ(s.policy.restart_budget, 5);
  ASSERT_EQ(c->faults.size(), 2u);
  EXPECT_EQ(c->faults[1].node, 1);
  EXPECT_EQ(c->faults[1].at_s, 3600);
  EXPECT_TRUE(c->failures.weibull);
  double total = 0;
  for (double r : c->failures.per_node_day) total += r;
  EXPECT_NEAR(total * 1000, 419.0 / (54 * 2048) * 1000, 1e-9);
  const std::string m =
      Err(std::string(kMinimal) + "faults:\n  - {atSeconds: 1, node: 99, type: meteor}\n");
  EXPECT_NE(m.find("cfg.yaml:12: faults[0].node: no such node (got 99)"), std::string::npos) << m;
  EXPECT_NE(m.find("faults[0].type: unknown fault type (got \"meteor\")"), std::string::npos) << m;
}

// The scheduler and queues sections are the scheduler's parser (sched/config.h, tested
// in src/sched/config_test.cc); inside the sim config they keep its line numbers, paths
// and suggestions.
TEST(SimConfig, SchedulerAndQueuesSections) {
  std::string y = kMinimal;
  y += "scheduler: {preemption: false, researchPools: [spot]}\n";
  auto c = ParseSimConfig(y, "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->scheduler.preemption);
  EXPECT_EQ(c->scheduler.research_pools, std::vector<sched::Pool>{sched::Pool::kSpot});
  ASSERT_EQ(c->queues.size(), 1u);
  EXPECT_EQ(c->queues[0].nominal_gpus.at("h100"), 128);

  y = kMinimal;
  y.replace(y.find("nominalGpus"), 11, "nominalGPUs");
  y.replace(y.find("workload:"), 9, "  - {name: q}\nworkload:");
  y += "scheduler: {preemptoin: false, productionPools: [gold]}\n";
  const std::string m = Err(y);
  EXPECT_NE(m.find("cfg.yaml:7: queues[0].nominalGPUs: unknown field (got nominalGPUs); did you "
                   "mean \"nominalGpus\"?"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("cfg.yaml:8: queues[1].name: duplicate queue name (got q; the first is at "
                   "line 7); give every queue a unique name"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("cfg.yaml:12: scheduler.preemptoin: unknown field (got preemptoin); did you "
                   "mean \"preemption\"?"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("cfg.yaml:12: scheduler.productionPools: unknown pool (got \"gold\"); set "
                   "productionPools to a list of on-demand, spot, reserved"),
            std::string::npos)
      << m;
  EXPECT_NE(Err("cluster: {shape: {}}\nworkload: {}\n")
                .find("cfg.yaml:1: queues: required field is missing (got nothing); set queues to "
                      "a list of {name, cohort, nominalGpus, ...}"),
            std::string::npos);
}

TEST(SimConfig, PresetsSplitByLlama3Shares) {
  const FailurePreset* p = FindPreset("meta-rsc1");
  ASSERT_NE(p, nullptr);
  const auto r = PresetRates(*p);
  EXPECT_NEAR(r[static_cast<int>(FaultType::kHardware)], 6.5e-3 * 315 / 419, 1e-12);
  EXPECT_EQ(FindPreset("nope"), nullptr);
}

}  // namespace
}  // namespace bulwark::sim
