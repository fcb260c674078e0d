// Small-cluster builders shared by the scheduler tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sched/scheduler.h"

namespace bulwark::sched::testing {

inline NodeSpec MakeNode(const std::string& name, const std::string& zone, const std::string& block,
                         const std::string& rack, Pool pool = Pool::kOnDemand,
                         const std::string& type = "h100") {
  NodeSpec n;
  n.name = name;
  n.zone = zone;
  n.block = block;
  n.rack = rack;
  n.pool = pool;
  n.gpu_type = type;
  return n;
}

// `per_rack[i]` nodes in rack i; racks_per_block racks per block, blocks_per_zone
// blocks per zone. Names "n<i>", labels "z<k>", "b<k>", "r<k>".
inline std::vector<NodeSpec> Racks(const std::vector<int>& per_rack, int racks_per_block = 1,
                                   int blocks_per_zone = 1, Pool pool = Pool::kOnDemand,
                                   const std::string& prefix = "n") {
  std::vector<NodeSpec> out;
  for (size_t r = 0; r < per_rack.size(); ++r) {
    const int block = static_cast<int>(r) / racks_per_block;
    const int zone = block / blocks_per_zone;
    for (int i = 0; i < per_rack[r]; ++i) {
      out.push_back(MakeNode(prefix + std::to_string(out.size()), "z" + std::to_string(zone),
                             "b" + std::to_string(block), "r" + std::to_string(r), pool));
    }
  }
  return out;
}

inline QueueSpec MakeQueue(const std::string& name, int nominal_h100,
                           const std::string& cohort = "") {
  QueueSpec q;
  q.name = name;
  q.cohort = cohort;
  q.nominal_gpus["h100"] = nominal_h100;
  return q;
}

inline JobRequest MakeJob(const std::string& id, const std::string& queue, int nodes,
                          int priority = 0) {
  JobRequest j;
  j.id = id;
  j.queue = queue;
  j.nodes = nodes;
  j.priority = priority;
  return j;
}

inline std::unique_ptr<Scheduler> MustCreate(std::vector<NodeSpec> nodes,
                                             std::vector<QueueSpec> queues,
                                             SchedulerConfig config = {}) {
  auto r = Scheduler::Create(std::move(config), std::move(nodes), std::move(queues));
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

}  // namespace bulwark::sched::testing
