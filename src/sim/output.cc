// Writers: JSON (everything), CSV (the time series) and the human summary.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/sim.h"

namespace bulwark::sim {
namespace {

using OJson = nlohmann::ordered_json;

OJson LostJson(const LostTime& l) {
  OJson o;
  o["detection"] = l.detection;
  o["backoff"] = l.backoff;
  o["replacement"] = l.replacement;
  o["restart"] = l.restart;
  o["rework"] = l.rework;
  o["ckpt_stall"] = l.ckpt_stall;
  o["requeue_wait"] = l.requeue_wait;
  o["total"] = l.Total();
  return o;
}

OJson FaultJson(const std::array<int, kFaultTypes>& f) {
  OJson o;
  for (int t = 0; t < kFaultTypes; ++t) o[FaultTypeName(static_cast<FaultType>(t))] = f[t];
  return o;
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace

void WriteJson(const SimResult& r, std::ostream& out) {
  OJson o;
  o["source"] = r.source;
  o["seed"] = r.seed;
  o["duration_days"] = r.duration_s / 86400.0;
  o["nodes"] = r.nodes;
  o["gpus"] = r.gpus;
  OJson c;
  c["total_gpu_h"] = r.total_gpu_h;
  c["allocated_gpu_h"] = r.allocated_gpu_h;
  c["standby_gpu_h"] = r.standby_gpu_h;
  c["productive_gpu_h"] = r.productive_gpu_h;
  c["cluster_ettr"] = r.cluster_ettr;
  c["goodput"] = r.goodput;
  c["utilization"] = r.utilization;
  c["queue_wait_s"] = {
      {"mean", r.queue_wait_mean_s}, {"p50", r.queue_wait_p50_s}, {"p99", r.queue_wait_p99_s}};
  c["lost_gpu_h"] = LostJson(r.lost_gpu_h);
  c["lost_gpu_h"]["standby_idle"] = r.standby_gpu_h;
  OJson cost;
  for (int p = 0; p < 3; ++p) {
    const PoolCost& pc = r.cost[p];
    cost[sched::PoolName(static_cast<sched::Pool>(p))] = {
        {"gpus", pc.gpus},
        {"provisioned_gpu_h", pc.provisioned_gpu_h},
        {"provisioned_cost", pc.provisioned_cost},
        {"allocated_gpu_h", pc.allocated_gpu_h},
        {"allocated_cost", pc.allocated_cost}};
  }
  c["cost"] = cost;
  c["faults"] = FaultJson(r.faults_total);
  c["faults_hit_job"] = FaultJson(r.faults_hit_job);
  c["jobs"] = {{"finished", r.jobs_finished},
               {"failed", r.jobs_failed},
               {"running", r.jobs_running},
               {"pending", r.jobs_pending},
               {"total", r.jobs.size()}};
  c["events"] = r.events;
  c["schedule_calls"] = r.schedule_calls;
  c["steps_trained"] = r.step_equivalent;
  o["cluster"] = c;
  OJson jobs = OJson::array();
  for (const JobResult& j : r.jobs) {
    OJson x;
    x["id"] = j.id;
    x["queue"] = j.queue;
    x["strategy"] = j.strategy;
    x["nodes"] = j.nodes;
    x["gpus"] = j.gpus;
    x["standby"] = j.standby;
    x["state"] = j.state;
    x["submit_s"] = j.submit_s;
    x["first_start_s"] = j.first_start_s;
    x["end_s"] = j.end_s;
    x["queue_wait_s"] = j.queue_wait_s;
    x["wall_s"] = j.wall_s;
    x["productive_s"] = j.productive_s;
    x["ettr"] = j.ettr;
    x["interval_s"] = j.interval_s;
    x["lost_s"] = LostJson(j.lost);
    x["faults"] = FaultJson(j.faults);
    x["restarts"] = j.restarts;
    x["requeues"] = j.requeues;
    x["preemptions"] = j.preemptions;
    x["replacements"] = j.replacements;
    x["standby_restocks"] = j.restocks;
    if (!j.reason.empty()) x["reason"] = j.reason;
    jobs.push_back(std::move(x));
  }
  o["jobs"] = std::move(jobs);
  out << o.dump(2) << "\n";
}

void WriteCsv(const SimResult& r, std::ostream& out) {
  out << "time_h,running_jobs,pending_jobs,busy_gpus,standby_gpus,failed_nodes,"
         "productive_gpu_h,allocated_gpu_h\n";
  char buf[256];
  for (const Sample& s : r.samples) {
    std::snprintf(buf, sizeof(buf), "%.4f,%d,%d,%d,%d,%d,%.3f,%.3f\n", s.t_s / 3600.0, s.running,
                  s.pending, s.busy_gpus, s.standby_gpus, s.failed_nodes, s.productive_gpu_h,
                  s.allocated_gpu_h);
    out << buf;
  }
}

std::string FormatSummary(const SimResult& r) {
  std::ostringstream o;
  char line[256];
  auto row = [&](const char* k, const std::string& v) {
    std::snprintf(line, sizeof(line), "  %-38s %s\n", k, v.c_str());
    o << line;
  };
  o << "bulwark sim: " << r.source << " (seed " << r.seed << ")\n";
  row("cluster", std::to_string(r.nodes) + " nodes, " + std::to_string(r.gpus) + " GPUs, " +
                     Fmt("%.1f days", r.duration_s / 86400.0));
  row("jobs finished/running/pending/failed",
      std::to_string(r.jobs_finished) + " / " + std::to_string(r.jobs_running) + " / " +
          std::to_string(r.jobs_pending) + " / " + std::to_string(r.jobs_failed));
  row("cluster ETTR (productive/allocated)", Fmt("%.4f", r.cluster_ettr));
  row("goodput (productive/total GPU-h)", Fmt("%.4f", r.goodput));
  row("GPU utilisation (allocated/total)", Fmt("%.4f", r.utilization));
  row("queue wait mean / p50 / p99", Fmt("%.2f h", r.queue_wait_mean_s / 3600) + " / " +
                                         Fmt("%.2f h", r.queue_wait_p50_s / 3600) + " / " +
                                         Fmt("%.2f h", r.queue_wait_p99_s / 3600));
  o << "  lost GPU-hours by cause:\n";
  const LostTime& l = r.lost_gpu_h;
  const double alloc = r.allocated_gpu_h > 0 ? r.allocated_gpu_h : 1;
  auto lost = [&](const char* k, double v) {
    std::snprintf(line, sizeof(line), "    %-36s %14.1f  (%5.2f%% of allocated)\n", k, v,
                  100 * v / alloc);
    o << line;
  };
  lost("detection", l.detection);
  lost("backoff", l.backoff);
  lost("replacement wait", l.replacement);
  lost("restart + checkpoint load", l.restart);
  lost("rework (lost since checkpoint)", l.rework);
  lost("checkpoint stall", l.ckpt_stall);
  lost("requeue / preemption wait", l.requeue_wait);
  lost("standby idle", r.standby_gpu_h);
  o << "  faults (hit a job / total):\n";
  for (int t = 0; t < kFaultTypes; ++t) {
    std::snprintf(line, sizeof(line), "    %-36s %7d / %d\n",
                  FaultTypeName(static_cast<FaultType>(t)), r.faults_hit_job[t], r.faults_total[t]);
    o << line;
  }
  o << "  cost by pool (allocated / provisioned):\n";
  for (int p = 0; p < 3; ++p) {
    const PoolCost& pc = r.cost[p];
    if (pc.gpus == 0) continue;
    std::snprintf(line, sizeof(line), "    %-36s %14.0f / %.0f\n",
                  sched::PoolName(static_cast<sched::Pool>(p)), pc.allocated_cost,
                  pc.provisioned_cost);
    o << line;
  }
  row("events / schedule calls",
      std::to_string(r.events) + " / " + std::to_string(r.schedule_calls));
  return o.str();
}

}  // namespace bulwark::sim
