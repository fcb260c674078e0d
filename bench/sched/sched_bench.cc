// Scheduler benchmark: sustained gang admission at 10,000 nodes / 2,000 queues /
// 5,000 pending jobs, bw_sched vs the naive oracle on the same workload. Prints JSON.
//
// Loop (one "iteration"): finish some running jobs, submit replacements to keep
// `pending` jobs waiting, run Schedule(). Time is thread CPU time (one core).
//   phase "cycle":     full Schedule() calls; per-cycle latency; throughput =
//                      admissions / CPU time of all scheduler calls (Finish, Submit
//                      and Schedule);
//   phase "admission": Schedule(now, 1) repeated until nothing fits; the latency of
//                      each call that admitted one job is one admission decision.
// The naive baseline runs the identical workload (same seed) under a CPU budget and
// its decisions are compared with bw_sched's on the common prefix.
//
// Usage: sched_bench [--admissions N] [--naive-budget-s S] [--seed S]
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "naive_scheduler.h"
#include "sched/scheduler.h"

namespace bulwark::sched {
namespace {

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

struct Config {
  int zones = 4, blocks = 10, racks = 8, per_rack = 31;  // + 1 node in every 4th rack
  int queues = 2000, cohorts = 20, pending = 5000, finish_per_iter = 30;
  long admissions = 20000, admission_phase = 5000;
  double naive_budget_s = 20;
  uint64_t seed = 1;
};

std::vector<NodeSpec> BuildNodes(const Config& c) {
  std::vector<NodeSpec> nodes;
  int rack_idx = 0;
  for (int z = 0; z < c.zones; ++z) {
    for (int b = 0; b < c.blocks; ++b) {
      const Pool pool = b % 5 == 0 ? Pool::kReserved : b % 5 <= 2 ? Pool::kSpot : Pool::kOnDemand;
      for (int r = 0; r < c.racks; ++r, ++rack_idx) {
        const int n = c.per_rack + (rack_idx % 4 == 0 ? 1 : 0);
        for (int i = 0; i < n; ++i) {
          NodeSpec s;
          s.name = "node-" + std::to_string(nodes.size());
          s.zone = "zone-" + std::string(1, static_cast<char>('a' + z));
          s.block = "block-" + std::to_string(b);
          s.rack = "rack-" + std::to_string(r);
          s.pool = pool;
          nodes.push_back(std::move(s));
        }
      }
    }
  }
  return nodes;
}

std::vector<QueueSpec> BuildQueues(const Config& c, std::mt19937_64& rng) {
  std::vector<QueueSpec> qs;
  for (int i = 0; i < c.queues; ++i) {
    QueueSpec q;
    q.name = "queue-" + std::to_string(i);
    q.cohort = "cohort-" + std::to_string(i % c.cohorts);
    q.nominal_gpus["h100"] = 8 * static_cast<int>(1 + rng() % 9);  // mean 40 GPUs
    if (rng() % 4 == 0) q.borrowing_limit["h100"] = 8 * static_cast<int>(rng() % 64);
    if (rng() % 4 == 0) q.lending_limit["h100"] = 8 * static_cast<int>(rng() % 5);
    q.weight = 1 + static_cast<double>(rng() % 3);
    qs.push_back(std::move(q));
  }
  return qs;
}

// Heavy-tailed gang size in [1, 256]: Pareto(alpha = 1.1), mostly 1-4 nodes.
int GangSize(std::mt19937_64& rng) {
  const double u = (static_cast<double>(rng() >> 11) + 1) * 0x1.0p-53;
  return static_cast<int>(std::min(256.0, std::floor(std::pow(u, -1 / 1.1))));
}

JobRequest MakeJob(const Config& c, std::mt19937_64& rng, long id) {
  JobRequest j;
  j.id = "job-" + std::to_string(id);
  j.queue = "queue-" + std::to_string(rng() % c.queues);
  j.nodes = GangSize(rng);
  j.priority = static_cast<int>(rng() % 4);
  j.tier = rng() % 10 < 7 ? Tier::kResearch : Tier::kProduction;
  const int lvl = static_cast<int>(rng() % 10);
  if (lvl == 0 && j.nodes <= c.per_rack) j.required_level = TopologyLevel::kRack;
  if (lvl == 1 && j.nodes <= c.per_rack * c.racks) j.required_level = TopologyLevel::kBlock;
  if (rng() % 10 == 0) j.standby = 1 + static_cast<int>(rng() % 2);
  return j;
}

struct Stats {
  long admissions = 0, preemptions = 0, cycles = 0, considered = 0;
  double cpu_s = 0;
  std::vector<double> cycle_ms, admission_ms;
  std::vector<uint64_t> cycle_digest;  // per cycle, for the prefix comparison
  long admission_phase_admissions = 0;
  bool budget_hit = false;
};

uint64_t Digest(const CycleResult& r) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
  for (const auto& a : r.admitted) {
    for (char ch : a.job_id) mix(static_cast<unsigned char>(ch));
    for (int n : a.nodes) mix(static_cast<uint64_t>(n) + 7);
    for (int n : a.standby) mix(static_cast<uint64_t>(n) + 100003);
  }
  for (const auto& p : r.preempted) {
    for (char ch : p.victim) mix(static_cast<unsigned char>(ch) + 300);
  }
  return h;
}

bool Stopped(const Scheduler&) { return false; }
bool Stopped(const NaiveScheduler& s) { return s.stopped(); }

// per_call: max_admissions of each Schedule() call; an iteration repeats the call
// until it admits fewer than per_call. max_calls bounds the Schedule() calls.
template <typename S>
Stats Run(S& s, const Config& c, long target_admissions, long admission_phase, double budget_s,
          int per_call = 1 << 30, long max_calls = -1) {
  Stats st;
  std::mt19937_64 rng(c.seed * 7919 + 1);
  std::vector<std::string> running;
  long next_id = 0;
  double now = 0;
  const double start = CpuNow();
  auto api = [&](auto&& f) {
    const double t0 = CpuNow();
    f();
    st.cpu_s += CpuNow() - t0;
  };
  auto top_up = [&] {
    api([&] {
      while (s.PendingJobs() < c.pending) {
        if (!s.Submit(MakeJob(c, rng, next_id++), now).ok()) continue;
      }
    });
  };
  auto finish_some = [&] {
    for (int k = 0; k < c.finish_per_iter && !running.empty(); ++k) {
      const size_t i = rng() % running.size();
      const std::string id = running[i];
      running[i] = running.back();
      running.pop_back();
      if (s.Phase(id) != JobPhase::kRunning) continue;  // preempted meanwhile
      api([&] { (void)s.Finish(id, now); });
    }
  };
  auto record = [&](const CycleResult& r) {
    for (const auto& a : r.admitted) running.push_back(a.job_id);
    st.admissions += static_cast<long>(r.admitted.size());
    st.preemptions += static_cast<long>(r.preempted.size());
    st.considered += r.considered;
    st.cycle_digest.push_back(Digest(r));
  };
  top_up();
  while (st.admissions < target_admissions) {
    if (CpuNow() - start > budget_s) {
      st.budget_hit = true;
      return st;
    }
    now += 1;
    finish_some();
    top_up();
    for (;;) {
      if (st.cycles == max_calls || CpuNow() - start > budget_s) {
        st.budget_hit = st.cycles != max_calls;
        return st;
      }
      const double t0 = CpuNow();
      CycleResult r = s.Schedule(now, per_call);
      const double dt = CpuNow() - t0;
      st.cpu_s += dt;
      if (Stopped(s)) {
        st.budget_hit = true;
        return st;
      }
      st.cycle_ms.push_back(dt * 1e3);
      ++st.cycles;
      record(r);
      if (static_cast<int>(r.admitted.size()) < per_call) break;
    }
  }
  // Per-admission phase: one admission per Schedule call.
  long done = 0;
  while (done < admission_phase) {
    if (CpuNow() - start > budget_s) {
      st.budget_hit = true;
      break;
    }
    now += 1;
    finish_some();
    top_up();
    for (;;) {
      const double t0 = CpuNow();
      CycleResult r = s.Schedule(now, 1);
      const double dt = CpuNow() - t0;
      if (r.admitted.empty()) break;
      st.admission_ms.push_back(dt * 1e3);
      for (const auto& a : r.admitted) running.push_back(a.job_id);
      ++done;
    }
  }
  st.admission_phase_admissions = done;
  return st;
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - 1);
  return v[p <= 0 ? 0 : i];
}

void PrintStats(const char* name, const Stats& st, bool last) {
  std::printf(
      "  \"%s\": {\"admissions\": %ld, \"preemptions\": %ld, \"cycles\": %ld, "
      "\"considered\": %ld, \"cpu_s\": %.6f, \"admissions_per_s\": %.3f, "
      "\"budget_hit\": %s,\n",
      name, st.admissions, st.preemptions, st.cycles, st.considered, st.cpu_s,
      st.cpu_s > 0 ? st.admissions / st.cpu_s : 0.0, st.budget_hit ? "true" : "false");
  std::printf("    \"cycle_ms\": {\"p50\": %.6f, \"p99\": %.6f, \"max\": %.6f},\n",
              Pct(st.cycle_ms, 0.5), Pct(st.cycle_ms, 0.99), Pct(st.cycle_ms, 1.0));
  std::printf(
      "    \"admission_ms\": {\"n\": %ld, \"p50\": %.6f, \"p99\": %.6f, \"max\": %.6f}}%s\n",
      st.admission_phase_admissions, Pct(st.admission_ms, 0.5), Pct(st.admission_ms, 0.99),
      Pct(st.admission_ms, 1.0), last ? "" : ",");
}

int Main(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--admissions")) c.admissions = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--naive-budget-s")) c.naive_budget_s = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seed")) c.seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  std::mt19937_64 rng(c.seed);
  const std::vector<NodeSpec> nodes = BuildNodes(c);
  const std::vector<QueueSpec> queues = BuildQueues(c, rng);
  SchedulerConfig sc;
  sc.seed = c.seed;
  auto created = Scheduler::Create(sc, nodes, queues);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  Stats fast = Run(**created, c, c.admissions, c.admission_phase, 1e9);
  // Baseline: one admission per Schedule() call (the naive scheduler cannot finish a
  // full cycle of a cold 10,000-node cluster in any reasonable budget), and bw_sched
  // on exactly the same calls for the decision comparison.
  NaiveScheduler naive(sc, nodes, queues);
  const double deadline = CpuNow() + c.naive_budget_s;
  naive.set_stop([deadline] { return CpuNow() > deadline; });
  Stats slow = Run(naive, c, c.admissions, 0, c.naive_budget_s, 1);
  auto created2 = Scheduler::Create(sc, nodes, queues);
  Stats fast_prefix = Run(**created2, c, c.admissions, 0, 1e9, 1, slow.cycles);
  // Same decisions on the common prefix of completed cycles?
  size_t common = std::min(fast_prefix.cycle_digest.size(), slow.cycle_digest.size());
  size_t same = 0;
  while (same < common && fast_prefix.cycle_digest[same] == slow.cycle_digest[same]) ++same;
  std::printf(
      "{\n  \"config\": {\"nodes\": %zu, \"gpus\": %zu, \"queues\": %d, \"cohorts\": %d, "
      "\"pending\": %d, \"finish_per_iter\": %d, \"topology\": \"%d zones x %d blocks x %d "
      "racks x %d-%d nodes\", \"seed\": %llu},\n",
      nodes.size(), nodes.size() * 8, c.queues, c.cohorts, c.pending, c.finish_per_iter, c.zones,
      c.blocks, c.racks, c.per_rack, c.per_rack + 1, static_cast<unsigned long long>(c.seed));
  PrintStats("bulwark", fast, false);
  PrintStats("naive", slow, false);
  PrintStats("bulwark_on_naive_prefix", fast_prefix, false);
  std::printf("  \"prefix_cycles_compared\": %zu, \"prefix_cycles_identical\": %zu\n}\n", common,
              same);
  return 0;
}

}  // namespace
}  // namespace bulwark::sched

int main(int argc, char** argv) { return bulwark::sched::Main(argc, argv); }
