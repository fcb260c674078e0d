// sim_bench: times RunSimulation on one core and writes the result for bench/sim/run.py.
//
//   sim_bench CONFIG.yaml [--result OUT.json] [--seed N] [--reps R]
//
// Prints one JSON object: thread CPU seconds and wall seconds of each repetition
// (parse excluded), events processed, scheduling cycles, the steps the simulated jobs
// trained (what an engine with an event per step would have to process) and the
// headline figures. --result writes the full SimResult JSON of the last repetition.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/sim.h"

namespace {

double ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config, result;
  long seed = -1;
  int reps = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--result" && i + 1 < argc) {
      result = argv[++i];
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::atol(argv[++i]);
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (config.empty() && !a.empty() && a[0] != '-') {
      config = a;
    } else {
      std::fprintf(stderr, "usage: sim_bench CONFIG.yaml [--result OUT] [--seed N] [--reps R]\n");
      return 2;
    }
  }
  if (config.empty()) {
    std::fprintf(stderr, "usage: sim_bench CONFIG.yaml [--result OUT] [--seed N] [--reps R]\n");
    return 2;
  }
  auto cfg = bulwark::sim::LoadSimConfig(config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
    return 2;
  }
  if (seed >= 0) cfg->seed = static_cast<uint64_t>(seed);
  nlohmann::ordered_json out;
  out["config"] = config;
  out["seed"] = cfg->seed;
  nlohmann::json cpu = nlohmann::json::array(), wall = nlohmann::json::array();
  bulwark::Result<bulwark::sim::SimResult> r = bulwark::InvalidArgument("not run");
  for (int i = 0; i < reps; ++i) {
    const double c0 = ThreadCpu();
    const auto w0 = std::chrono::steady_clock::now();
    r = bulwark::sim::RunSimulation(*cfg);
    const auto w1 = std::chrono::steady_clock::now();
    const double c1 = ThreadCpu();
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      return 1;
    }
    cpu.push_back(c1 - c0);
    wall.push_back(std::chrono::duration<double>(w1 - w0).count());
  }
  out["thread_cpu_s"] = cpu;
  out["wall_s"] = wall;
  out["gpus"] = r->gpus;
  out["nodes"] = r->nodes;
  out["days"] = r->duration_s / 86400.0;
  out["jobs"] = r->jobs.size();
  out["events"] = r->events;
  out["schedule_calls"] = r->schedule_calls;
  out["steps_trained"] = r->step_equivalent;
  out["cluster_ettr"] = r->cluster_ettr;
  out["goodput"] = r->goodput;
  out["utilization"] = r->utilization;
  int faults = 0;
  for (int f : r->faults_total) faults += f;
  out["faults"] = faults;
  std::cout << out.dump(2) << std::endl;
  if (!result.empty()) {
    std::ofstream f(result);
    bulwark::sim::WriteJson(*r, f);
    if (!f) {
      std::fprintf(stderr, "could not write %s\n", result.c_str());
      return 1;
    }
  }
  return 0;
}
