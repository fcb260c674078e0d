// Scheduler::Impl: state and indexes behind the public Scheduler (private header).
//
// Incremental state (docs/scheduler.md, "Complexity"):
//   * ClusterIndex: free nodes per (type, pool) slice and per rack/block/zone, best fit
//     by lower_bound;
//   * per queue: used GPUs per type, pending jobs ordered by (-priority, submit seq),
//     running jobs ordered by victim preference (priority asc, admit seq desc);
//   * per cohort: lendable capacity and lendable usage per type;
//   * drf_: queues with pending jobs ordered by (weighted dominant share, queue index);
//   * short_standby: running jobs holding fewer standby nodes than requested, in
//     restock order (priority desc, admission order);
//   * a failed queue head is remembered with the versions that could change the
//     outcome (free capacity of its GPU type, its queue, its cohort) and is not
//     re-evaluated until one of them moves.
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/str_format.h"
#include "sched/cluster_index.h"
#include "sched/scheduler.h"

namespace bulwark::sched {

// Bound on the preemption search: victims are chosen among the first
// kMaxVictimCandidates candidates in victim order.
inline constexpr int kMaxVictimCandidates = 256;

class Scheduler::Impl {
 public:
  static constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;

  struct NodeState {
    int type = 0;
    int gpus = 0;
    NodeHealth health = NodeHealth::kReady;
    int owner = -1;  // job index
    bool standby = false;
  };
  struct JobState {
    JobRequest req;
    int queue = 0;
    int type = 0;
    JobPhase phase = JobPhase::kPending;
    int64_t seq = 0;        // submission order (kept across preemption/requeue)
    int64_t admit_seq = 0;  // order of the latest admission
    int64_t charge = 0;     // GPUs charged to the queue while running
    double backoff_until = -1;
    int requeues = 0;
    int64_t preempted_cycle = -1;
    std::string reason;
    Admission adm;  // valid while running
  };
  struct QueueState {
    QueueSpec spec;
    int cohort = -1;
    std::vector<int64_t> nominal, borrow_limit, guaranteed, used;  // per type
    std::set<std::pair<std::pair<int, int64_t>, int>> pending;     // ((-prio, seq), job)
    std::set<std::tuple<int, int64_t, int>> running;               // (prio, -admit_seq, job)
    double share = 0;
    uint64_t version = 0;
    // Failed-head cache.
    int failed_job = -1;
    uint64_t failed_cap = 0, failed_q = 0, failed_co = 0;
  };
  struct CohortState {
    std::vector<int> members;
    std::vector<int64_t> lend_cap, lend_used;  // per type
    uint64_t version = 0;
  };

  SchedulerConfig config;
  std::vector<NodeSpec> specs;
  std::vector<NodeState> nodes;
  std::unordered_map<std::string, int> node_index;  // by NodeSpec::name
  std::vector<std::string> type_names;
  std::unordered_map<std::string, int> type_id;
  std::vector<int> gpus_per_node, nodes_of_type;  // per type
  std::vector<int64_t> total_gpus;                // per type
  std::vector<uint64_t> cap_version;              // per type
  internal::ClusterIndex index;
  std::vector<QueueState> queues;
  std::unordered_map<std::string, int> queue_id;
  std::vector<CohortState> cohorts;
  std::vector<std::string> cohort_names;
  std::vector<JobState> jobs;
  std::unordered_map<std::string, int> job_id;
  std::set<std::pair<double, int>> drf;                   // queues with pending jobs
  std::set<std::tuple<int, int64_t, int>> short_standby;  // (-priority, admit_seq, job)
  std::set<std::pair<double, int>>* cycle_candidates = nullptr;
  int64_t next_seq = 0, next_admit = 0, cycle = 0;
  int pending_count = 0, running_count = 0;
  double last_now = 0;

  // scheduler.cc
  int TypeOf(const std::string& name) const;
  void SetUsage(int q, int type, int64_t delta);  // maintains cohort usage + versions
  void UpdateShare(int q);
  void Touch(int q);  // bumps the queue's and its cohort's versions
  int ClosestFree(int node, TopologyLevel limit) const;
  void AddPending(int j);
  void RemovePending(int j);
  int Head(int q, double now) const;
  void FreeNode(int node);       // committed release of one node (to the index if ready)
  void MarkShortStandby(int j);  // after a running job used or lost a standby node

  // schedule.cc
  CycleResult Schedule(double now, int max_admissions);
  const std::vector<Pool>& Pools(Tier t) const;
  bool QuotaFits(const JobState& j, int64_t demand) const;
  std::string QuotaReason(const JobState& j, int64_t demand) const;
  std::string CapacityReason(const JobState& j) const;
  struct Plan {
    int slice = -1;
    int domain = -1;
    Pool pool = Pool::kOnDemand;
  };
  bool FindPlacement(const JobState& j, Plan* plan) const;
  bool Fits(const JobState& j) const;
  void Admit(int j, const Plan& plan, double now, const std::string& extra, Admission* out);
  bool FindVictims(int j, std::vector<int>* victims);
  void IndexRelease(int v);    // simulate: victim's ready nodes free, usage reduced
  void IndexReacquire(int v);  // undo IndexRelease
  void Evict(int v, int by, double now, Preemption* out);  // after IndexRelease
  void FinishRelease(int v);  // committed part of a release after IndexRelease
  void ReleaseJob(int j);     // committed: nodes back, usage reduced, running set
  void FillPlacementInfo(Admission* a) const;
  void Restock(CycleResult* r);  // standby refill at the end of a cycle

  // failure.cc
  NodeFailureDecision OnNodeFailure(int node, double now);
  double Backoff(const JobState& j) const;
};

using ::bulwark::Fmt;  // common/str_format.h

// Requeue delay after the `requeues`-th failure (>= 1):
//   min(cap, base * 2^(requeues-1)) * (0.75 + 0.25 u),
// u in [0, 1) from SplitMix64(seed ^ FNV-1a(job_id) ^ (requeues << 32)).
double RequeueBackoff(const SchedulerConfig& c, const std::string& job_id, int requeues);

}  // namespace bulwark::sched
