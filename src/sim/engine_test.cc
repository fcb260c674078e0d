// Engine tests: mechanistic accounting to the second on hand-computed scenarios,
// standby / requeue paths through the real scheduler, give-up through the real
// recovery policy, determinism and the wall-time invariant.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include "sched/scheduler.h"
#include "sim/sim.h"

namespace bulwark::sim {
namespace {

SimConfig Parse(const std::string& yaml) {
  auto c = ParseSimConfig(yaml, "test.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : SimConfig{};
}

SimResult RunSim(const SimConfig& c) {
  auto r = RunSimulation(c);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : SimResult{};
}

const JobResult& Only(const SimResult& r) {
  static const JobResult kNone;
  EXPECT_EQ(r.jobs.size(), 1u);
  return r.jobs.empty() ? kNone : r.jobs[0];
}

// Every second of a started job's wall time is productive or in one lost bucket.
void ExpectBalanced(const JobResult& j) {
  EXPECT_NEAR(j.wall_s, j.productive_s + j.lost.Total(), 1e-6 * std::max(1.0, j.wall_s)) << j.id;
}

// One job, N nodes on an N-node cluster (one rack), strategy "s" from `strategy`.
std::string OneJob(int cluster_nodes, int job_nodes, const std::string& strategy,
                   const std::string& extra, double work_h = 100, double days = 1) {
  std::ostringstream y;
  y.precision(17);
  y << "sim: {days: " << days << ", seed: 7, sampleMinutes: 0}\n"
    << "cluster:\n  shape: {zones: 1, blocksPerZone: 1, racksPerBlock: 1, nodesPerRack: "
    << cluster_nodes << ", gpusPerNode: 8}\n"
    << "queues:\n  - {name: q, nominalGpus: {h100: 100000}}\n"
    << "strategies:\n  s:\n"
    << strategy << "workload:\n  jobs:\n    - {id: j, queue: q, nodes: " << job_nodes
    << ", workHours: " << work_h << ", stepSeconds: 10, strategy: s}\n"
    << extra;
  return y.str();
}

constexpr const char* kNoBackoff = "    faultPolicy: {backoffBaseSeconds: 0}\n";

TEST(SimEngine, NoFailureEttrIsIntervalOverIntervalPlusWrite) {
  // 1 day = 60 cycles of (1410 s compute + 30 s write); no restart overhead.
  const std::string st =
      "    restartSeconds: 0\n    checkpointWriteSeconds: 30\n"
      "    checkpointIntervalSeconds: 1410\n";
  const SimResult r = RunSim(Parse(OneJob(4, 4, st, "")));
  const JobResult& j = Only(r);
  EXPECT_EQ(j.state, "running");
  EXPECT_EQ(j.wall_s, 86400);
  EXPECT_EQ(j.productive_s, 60 * 1410);
  EXPECT_DOUBLE_EQ(j.ettr, 1410.0 / 1440.0);
  EXPECT_DOUBLE_EQ(j.lost.ckpt_stall, 60 * 30);
  ExpectBalanced(j);
  EXPECT_DOUBLE_EQ(r.cluster_ettr, 1410.0 / 1440.0);  // the job holds the whole cluster
}

TEST(SimEngine, HandComputedCrashToTheSecond) {
  // t=0 start: restart 50 s (no checkpoint to load) -> compute from t0=50.
  // Cycles of 1000 s compute + 100 s write: checkpoints complete at 1150 and 2250.
  // Crash at 2500: progress 2250, last checkpoint 2000 -> rework 250.
  // Detected at 2530 (30 s); restart 50 + load 20 -> compute again from 2600 at 2000.
  // Remaining 3000 s = 3 intervals -> 2 more writes: finish at 2600 + 3000 + 200 = 5800.
  const std::string st =
      "    detectionSeconds: {crash: 30}\n    restartSeconds: 50\n"
      "    checkpointLoadSeconds: 20\n    checkpointWriteSeconds: 100\n"
      "    checkpointIntervalSeconds: 1000\n" +
      std::string(kNoBackoff);
  const std::string faults = "faults:\n  - {atSeconds: 2500, node: 0, type: crash}\n";
  const SimResult r = RunSim(Parse(OneJob(2, 2, st, faults, 5000.0 / 3600.0)));
  const JobResult& j = Only(r);
  EXPECT_EQ(j.state, "finished");
  EXPECT_DOUBLE_EQ(j.end_s, 5800);
  EXPECT_DOUBLE_EQ(j.wall_s, 5800);
  EXPECT_DOUBLE_EQ(j.productive_s, 5000);
  EXPECT_DOUBLE_EQ(j.lost.rework, 250);
  EXPECT_DOUBLE_EQ(j.lost.detection, 30);
  EXPECT_DOUBLE_EQ(j.lost.restart, 50 + 50 + 20);
  EXPECT_DOUBLE_EQ(j.lost.ckpt_stall, 4 * 100);
  EXPECT_DOUBLE_EQ(j.lost.backoff, 0);
  EXPECT_EQ(j.restarts, 1);
  EXPECT_EQ(j.faults[static_cast<int>(FaultType::kCrash)], 1);
  ExpectBalanced(j);
}

TEST(SimEngine, FaultDuringRestartRestartsTheRestart) {
  // Second crash at 2560, inside the 2530..2600 restart: 30 s of restart spent, then
  // detection 30 s (2590), restart 70 s again -> compute from 2660; finish 5860.
  const std::string st =
      "    detectionSeconds: {crash: 30}\n    restartSeconds: 50\n"
      "    checkpointLoadSeconds: 20\n    checkpointWriteSeconds: 100\n"
      "    checkpointIntervalSeconds: 1000\n" +
      std::string(kNoBackoff);
  const std::string faults =
      "faults:\n  - {atSeconds: 2500, node: 0, type: crash}\n"
      "  - {atSeconds: 2560, node: 1, type: crash}\n";
  const JobResult j = Only(RunSim(Parse(OneJob(2, 2, st, faults, 5000.0 / 3600.0))));
  EXPECT_DOUBLE_EQ(j.end_s, 5860);
  EXPECT_DOUBLE_EQ(j.lost.restart, 50 + 30 + 70);
  EXPECT_DOUBLE_EQ(j.lost.detection, 60);
  EXPECT_DOUBLE_EQ(j.lost.rework, 250);
  ExpectBalanced(j);
}

TEST(SimEngine, InMemoryCheckpointLosesOnlyTheCurrentStep) {
  // Step 10 s; crash at 2505 -> progress 2455 since t0=50, kept 2450 (last whole step).
  const std::string st =
      "    detectionSeconds: {crash: 5}\n    restartSeconds: 50\n"
      "    checkpointWriteSeconds: 0\n    checkpointIntervalSeconds: 100000\n"
      "    inMemoryCheckpoints: true\n" +
      std::string(kNoBackoff);
  const std::string faults = "faults:\n  - {atSeconds: 2505, node: 0, type: crash}\n";
  const JobResult j = Only(RunSim(Parse(OneJob(2, 2, st, faults, 5000.0 / 3600.0))));
  EXPECT_DOUBLE_EQ(j.lost.rework, 5);
  EXPECT_DOUBLE_EQ(j.lost.restart, 100);  // no load: resumed from memory
  EXPECT_DOUBLE_EQ(j.end_s, 50 + 5000 + 5 + 5 + 50);
  ExpectBalanced(j);
}

// The node indices the scheduler gives job "j" (same class, same call sequence).
std::vector<int> Placement(const SimConfig& c, int standby) {
  sched::SchedulerConfig sc = c.scheduler;
  sc.seed = c.seed;
  auto s = sched::Scheduler::Create(sc, c.nodes, c.queues);
  EXPECT_TRUE(s.ok());
  sched::JobRequest req;
  req.id = "j";
  req.queue = "q";
  req.nodes = c.jobs[0].nodes;
  req.standby = standby;
  EXPECT_TRUE((*s)->Submit(req, 0).ok());
  (*s)->Schedule(0);
  const sched::Admission* a = (*s)->Placement("j");
  return a ? a->nodes : std::vector<int>{};
}

TEST(SimEngine, HardwareFaultUsesStandbyAndPeerMemory) {
  const std::string st =
      "    detectionSeconds: {hardware: 10}\n    restartSeconds: 20\n"
      "    checkpointLoadSeconds: 60\n    checkpointWriteSeconds: 5\n"
      "    checkpointIntervalSeconds: 3600\n    standby: 1\n    inMemoryCheckpoints: true\n"
      "    peerReplication: true\n    replacementLeadSeconds: 900\n" +
      std::string(kNoBackoff);
  SimConfig c = Parse(OneJob(4, 2, st, "", 2));
  const std::vector<int> nodes = Placement(c, 1);
  ASSERT_EQ(nodes.size(), 2u);
  c.faults.push_back({1000.5, nodes[1], FaultType::kHardware});
  const JobResult j = Only(RunSim(c));
  EXPECT_EQ(j.state, "finished");
  EXPECT_EQ(j.replacements, 1);
  EXPECT_EQ(j.requeues, 0);
  EXPECT_DOUBLE_EQ(j.lost.replacement, 0);  // warm standby: no lead time
  EXPECT_DOUBLE_EQ(j.lost.rework, 0.5);     // current step only (peer memory)
  EXPECT_DOUBLE_EQ(j.lost.detection, 10);
  EXPECT_DOUBLE_EQ(j.lost.restart, 20 + 20);  // first start + restart, no load
  ExpectBalanced(j);
}

TEST(SimEngine, UsedStandbyIsRestockedAndWarmsUpForTheLeadTime) {
  // 4 nodes: gang 0,1 + standby 2, node 3 free. The first loss promotes the standby and
  // the scheduler restocks node 3 at detection (1010.5), warm at 1010.5 + 900. The
  // second loss (detected at 1210) promotes node 3 and waits out its warm-up: 700.5 s.
  // Without restocking the second loss takes free node 3 with the full 900 s lead.
  for (bool restock : {true, false}) {
    SCOPED_TRACE(restock ? "restock" : "no restock");
    const std::string st =
        "    detectionSeconds: {hardware: 10}\n    restartSeconds: 20\n"
        "    checkpointIntervalSeconds: 3600\n    checkpointWriteSeconds: 5\n"
        "    standby: 1\n    replacementLeadSeconds: 900\n" +
        std::string(kNoBackoff);
    SimConfig c = Parse(OneJob(
        4, 2, st,
        std::string("scheduler: {restockStandby: ") + (restock ? "true" : "false") + "}\n", 2));
    const std::vector<int> nodes = Placement(c, 1);
    ASSERT_EQ(nodes.size(), 2u);
    c.faults.push_back({1000.5, nodes[1], FaultType::kHardware});
    c.faults.push_back({1200, nodes[0], FaultType::kHardware});
    auto r = RunSimulation(c);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const JobResult j = Only(*r);
    EXPECT_EQ(j.replacements, 2);
    EXPECT_EQ(j.restocks, restock ? 1 : 0);
    EXPECT_DOUBLE_EQ(j.lost.replacement, restock ? 700.5 : 900);
    ExpectBalanced(j);
  }
}

TEST(SimEngine, HardwareFaultWithoutStandbyUsesFreeNodeAfterLeadTime) {
  const std::string st =
      "    detectionSeconds: {hardware: 10}\n    restartSeconds: 20\n"
      "    checkpointLoadSeconds: 60\n    checkpointWriteSeconds: 5\n"
      "    checkpointIntervalSeconds: 600\n    replacementLeadSeconds: 900\n" +
      std::string(kNoBackoff);
  SimConfig c = Parse(OneJob(4, 2, st, "", 2));
  const std::vector<int> nodes = Placement(c, 0);
  ASSERT_EQ(nodes.size(), 2u);
  c.faults.push_back({1000, nodes[0], FaultType::kHardware});
  const JobResult j = Only(RunSim(c));
  EXPECT_EQ(j.replacements, 1);
  EXPECT_DOUBLE_EQ(j.lost.replacement, 900);
  // t0 = 20; checkpoint at 620..625 -> kept 600; progress at 1000 = 975 -> rework 375.
  EXPECT_DOUBLE_EQ(j.lost.rework, 375);
  EXPECT_DOUBLE_EQ(j.lost.restart, 20 + 20 + 60);
  ExpectBalanced(j);
}

TEST(SimEngine, RequeueWhenNoCapacityUntilRepair) {
  const std::string st =
      "    detectionSeconds: {hardware: 10}\n    restartSeconds: 20\n"
      "    checkpointLoadSeconds: 60\n    checkpointWriteSeconds: 5\n"
      "    checkpointIntervalSeconds: 600\n" +
      std::string(kNoBackoff);
  SimConfig c = Parse(OneJob(2, 2, st, "failures: {repairHours: 1}\n", 2));
  c.faults.push_back({1000, 0, FaultType::kHardware});
  const JobResult j = Only(RunSim(c));
  EXPECT_EQ(j.state, "finished");
  EXPECT_EQ(j.requeues, 1);
  EXPECT_EQ(j.replacements, 0);
  // Pending from detection (1010) until the node is back (1000 + 3600) at the earliest.
  EXPECT_GE(j.lost.requeue_wait, 3600 - 10);
  EXPECT_GE(j.first_start_s, 0);
  ExpectBalanced(j);
}

TEST(SimEngine, PolicyGiveUpIsHonoured) {
  const std::string st =
      "    detectionSeconds: {crash: 5}\n    restartSeconds: 10\n"
      "    faultPolicy: {restartBudget: 1, backoffBaseSeconds: 0}\n";
  const std::string faults =
      "faults:\n  - {atSeconds: 100, node: 0, type: crash}\n"
      "  - {atSeconds: 200, node: 1, type: crash}\n";
  const JobResult j = Only(RunSim(Parse(OneJob(2, 2, st, faults))));
  EXPECT_EQ(j.state, "failed");
  EXPECT_EQ(j.restarts, 1);
  EXPECT_NE(j.reason.find("restart budget"), std::string::npos) << j.reason;
  EXPECT_DOUBLE_EQ(j.end_s, 205);
  ExpectBalanced(j);
}

const char* kCluster = R"(
sim: {days: 5, seed: 11, sampleMinutes: 60}
cluster:
  shape: {zones: 2, blocksPerZone: 2, racksPerBlock: 4, nodesPerRack: 8, gpusPerNode: 8,
          pools: {onDemand: 0.5, spot: 0.25, reserved: 0.25},
          pricePerGpuHour: {onDemand: 4, spot: 1.5, reserved: 2.5}}
queues:
  - {name: prod, cohort: c, nominalGpus: {h100: 768}}
  - {name: research, cohort: c, nominalGpus: {h100: 256}}
strategies:
  fast: {detectionSeconds: {hang: auto}, restartSeconds: 30, checkpointIntervalSeconds: auto,
         checkpointWriteSeconds: 5, standby: auto, inMemoryCheckpoints: true,
         peerReplication: true, snapshotStallSeconds: 0.05}
  slow: {restartSeconds: 300, checkpointLoadSeconds: 300, checkpointWriteSeconds: 120,
         checkpointIntervalSeconds: 1800}
workload:
  generator:
    count: 200
    arrivalsPerHour: 3
    sizes: [{nodes: 1, weight: 5}, {nodes: 4, weight: 3}, {nodes: 16, weight: 2},
            {nodes: 64, weight: 0.5}]
    workHours: {median: 6, sigma: 1, max: 200}
    queues: [{name: prod, weight: 2}, {name: research, weight: 1}]
    productionShare: 0.6
    priorities: [{priority: 0, weight: 3}, {priority: 10, weight: 1}]
    strategy: fast
failures: {preset: meta-rsc1, scale: 20, ratesPer1000NodeDays: {spotReclaim: 50},
           repairHours: 12}
)";

TEST(SimEngine, SameSeedGivesByteIdenticalJsonAndCsv) {
  SimConfig c = Parse(kCluster);
  std::ostringstream a, b, ac, bc;
  const SimResult r1 = RunSim(c);
  WriteJson(r1, a);
  WriteCsv(r1, ac);
  const SimResult r2 = RunSim(c);
  WriteJson(r2, b);
  WriteCsv(r2, bc);
  EXPECT_EQ(a.str(), b.str());
  EXPECT_EQ(ac.str(), bc.str());
  c.seed = 12;
  std::ostringstream d;
  WriteJson(RunSim(c), d);
  EXPECT_NE(a.str(), d.str());
}

TEST(SimEngine, ClusterRunBalancesEveryJobAndCountsFaults) {
  const SimResult r = RunSim(Parse(kCluster));
  ASSERT_GT(r.jobs.size(), 50u);
  int started = 0;
  for (const JobResult& j : r.jobs) {
    if (j.first_start_s < 0) continue;
    ++started;
    ExpectBalanced(j);
    EXPECT_GE(j.ettr, 0);
    EXPECT_LE(j.ettr, 1);
  }
  EXPECT_GT(started, 50);
  int faults = 0;
  for (int t = 0; t < kFaultTypes; ++t) faults += r.faults_total[t];
  EXPECT_GT(faults, 10);
  EXPECT_GT(r.faults_total[static_cast<int>(FaultType::kSpotReclaim)], 0);
  EXPECT_GT(r.cluster_ettr, 0.5);
  EXPECT_LE(r.cluster_ettr, 1.0);
  EXPECT_LE(r.goodput, r.utilization);
  EXPECT_EQ(r.samples.size(), 5u * 24 + 1);
  EXPECT_GT(r.standby_gpu_h, 0);
  // Productive GPU-hours in the last sample match the final figure (jobs keep their work).
  EXPECT_GT(r.samples.back().productive_gpu_h, 0);
}

// Every example config: each started job balances, ETTRs are in [0, 1], productive
// GPU-hours never exceed allocated ones (regression: a job admitted and preempted in
// one scheduling cycle was once mirrored as running without nodes).
TEST(SimEngine, ExampleConfigsKeepTheInvariants) {
  const std::filesystem::path dir = std::filesystem::path(BW_TEST_SOURCE_DIR) / "examples/sim";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    auto c = LoadSimConfig(e.path().string());
    ASSERT_TRUE(c.ok()) << c.status().message();
    const SimResult r = RunSim(*c);
    for (const JobResult& j : r.jobs) {
      if (j.first_start_s < 0) continue;
      ExpectBalanced(j);
      EXPECT_LE(j.ettr, 1.0) << j.id;
    }
    EXPECT_GT(r.cluster_ettr, 0) << e.path();
    EXPECT_LE(r.cluster_ettr, 1.0) << e.path();
    EXPECT_LE(r.allocated_gpu_h, r.total_gpu_h * (1 + 1e-9)) << e.path();
  }
  EXPECT_GE(n, 3);
}

}  // namespace
}  // namespace bulwark::sim
