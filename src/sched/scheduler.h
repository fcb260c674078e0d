// Scheduler: who trains where. A pure, single-threaded library: no I/O, no threads,
// no global state; time comes in as `now` arguments and randomness from the seed in
// SchedulerConfig, so equal call sequences give equal decisions. The live controller
// and the simulator (src/sim) drive the very same class.
//
// Model (docs/scheduler.md has the rules with worked examples):
//   * Nodes carry a GPU type and count, a pool (on-demand, spot, reserved), topology
//     labels zone -> block -> rack, a health state and a price per GPU-hour. A job
//     takes whole nodes, one pod per node, exclusively (gang: all or nothing).
//   * Queues have a nominal quota per GPU type (in GPUs). Queues in one cohort lend
//     unused nominal quota to each other, bounded by the lender's lending limit and
//     the borrower's borrowing limit (absent = unlimited).
//   * Order: queues are visited by dominant resource fairness (the queue with the
//     smallest weighted dominant share of the cluster's GPUs goes first); inside a
//     queue, higher priority first, then earlier submission (FIFO).
//   * Placement: the smallest topology domain that fits the whole gang (a rack, else a
//     block, else a zone, else anywhere unless the job requires a level), best fit
//     (the fitting domain with the fewest free nodes) to limit fragmentation. Warm
//     standby nodes are placed in the same domain when possible.
//   * Tier routing: production jobs try the pools in production_pools, research jobs
//     those in research_pools, in order (fallback to the next pool when one is full).
//   * Preemption (gang-atomic: whole jobs only): a job that does not fit may evict
//     lower-priority jobs of its own queue, and a queue within its nominal quota may
//     reclaim from other cohort queues that are borrowing (any priority).
//   * Node failure of a running job: a reserved standby, else a free node in the same
//     domain (rack, block, zone), else preempt a lower-priority job for a node, else
//     requeue the job with exponential backoff.
//   * Standby restock: after each cycle's admissions, a running job that used or lost
//     standby nodes gets free nodes back (same pool, closest to its gang), higher
//     priority first, within its queue's quota.
//
// Tie-breaks (exact; bench/sched/naive_scheduler.cc follows them and sched_diff_test
// checks both agree): equal shares -> lower queue index in Create(); inside a queue
// strict FIFO: only the head (highest priority, then submission order; preempted or
// requeued jobs keep their place) is tried, and a head that cannot be admitted stops
// its queue for the rest of the cycle; equal best fits -> the domain whose name appears
// first in the node vector; nodes inside a domain: children by (free desc, first
// appearance), lowest node index in a rack; victims by (priority asc, most recently
// admitted first), at most 256 candidates, minimised by trying to drop the most
// recently chosen first. Jobs preempted in a cycle are not reconsidered in that cycle.
// docs/scheduler.md has the full order of evaluation.
//
// Every pending job carries a reason a person can read, e.g.
//   "waiting: queue research over quota for h100 by 16 GPUs; cohort has 8 to lend".
//
// Thread-compatible: callers serialise access.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::sched {

enum class Pool : uint8_t { kOnDemand, kSpot, kReserved };
const char* PoolName(Pool p);  // "on-demand", "spot", "reserved"
Result<Pool> ParsePool(const std::string& s);

enum class NodeHealth : uint8_t { kReady, kCordoned, kQuarantined, kDraining };
const char* NodeHealthName(NodeHealth h);  // "ready", "cordoned", "quarantined", "draining"

// Topology levels from the narrowest domain to none.
enum class TopologyLevel : uint8_t { kRack, kBlock, kZone, kAny };
const char* TopologyLevelName(TopologyLevel l);  // "rack", "block", "zone", "any"

enum class Tier : uint8_t { kProduction, kResearch };
const char* TierName(Tier t);  // "production", "research"

struct NodeSpec {
  std::string name;
  std::string gpu_type = "h100";
  int gpus = 8;
  Pool pool = Pool::kOnDemand;
  std::string zone, block, rack;  // block names are unique per zone, racks per block
  NodeHealth health = NodeHealth::kReady;
  double price_per_gpu_hour = 0;
};

struct QueueSpec {
  std::string name;
  std::string cohort;                          // "" = no cohort (no borrowing/lending)
  std::map<std::string, int> nominal_gpus;     // per GPU type
  std::map<std::string, int> borrowing_limit;  // GPUs above nominal; absent = unlimited
  std::map<std::string, int> lending_limit;    // GPUs lendable; absent = all unused nominal
  double weight = 1;                           // fair-share weight (> 0)
};

struct SchedulerConfig {
  std::vector<Pool> production_pools = {Pool::kReserved, Pool::kOnDemand};
  std::vector<Pool> research_pools = {Pool::kSpot, Pool::kOnDemand};
  bool preemption = true;              // evict lower priority / reclaim borrowed quota
  double requeue_backoff_base_s = 30;  // requeue after failure: base * 2^(n-1), capped
  double requeue_backoff_cap_s = 1800;
  uint64_t seed = 1;  // jitter of requeue backoff
  // Refill running jobs' standby from free nodes at the end of every cycle.
  bool restock_standby = true;
};

struct JobRequest {
  std::string id;     // unique among live jobs
  std::string queue;  // must exist
  int priority = 0;   // higher preempts lower
  int nodes = 1;      // gang size, >= 1
  std::string gpu_type = "h100";
  Tier tier = Tier::kProduction;
  TopologyLevel required_level = TopologyLevel::kAny;  // the gang must fit in one such domain
  int standby = 0;  // warm standby nodes reserved with the gang (quota-charged)
};

enum class JobPhase : uint8_t { kPending, kRunning, kFinished };

// One admitted gang. Node indices refer to the vector given to Create().
struct Admission {
  std::string job_id;
  std::vector<int> nodes;    // gang members, one pod each
  std::vector<int> standby;  // warm standby nodes held for this job
  Pool pool = Pool::kOnDemand;
  TopologyLevel level = TopologyLevel::kAny;  // the narrowest domain holding every node
  std::string domain;                         // e.g. "zone-a/block-3/rack-12", "" for any
  bool borrowed = false;                      // uses quota lent by the cohort
  std::string reason;                         // e.g. "admitted: rack zone-a/b1/r3 (best fit)"
};

struct Preemption {
  std::string victim;
  std::string preemptor;
  std::string reason;  // e.g. "preempted by job X (priority 10 > 0)" or "reclaim by queue Y"
};

// A running job got a free node as a warm standby, in place of one it used or lost.
struct StandbyRestock {
  std::string job_id;
  int node = -1;
  std::string reason;  // e.g. "standby restocked: node z0-b1-r2-n5 for job X (2 of 2, rack ...)"
};

struct CycleResult {
  std::vector<Admission> admitted;
  std::vector<Preemption> preempted;      // victims are back in their queues, pending
  std::vector<StandbyRestock> restocked;  // after the admissions, by (priority desc, admit order)
  int considered = 0;                     // pending jobs examined this cycle
};

enum class FailureAction : uint8_t {
  kNone,            // the node ran nothing (idle, or a standby: the job lost a standby)
  kUseStandby,      // replacement = one of the job's standby nodes
  kUseFreeNode,     // replacement = a free node, as close in topology as found
  kPreemptForNode,  // replacement freed by preempting `preempted`
  kRequeue,         // no replacement: the job is pending again after requeue_after_s
};
const char* FailureActionName(FailureAction a);

struct NodeFailureDecision {
  FailureAction action = FailureAction::kNone;
  std::string job_id;  // job that held the node ("" when none)
  int failed_node = -1;
  int replacement = -1;  // node index for kUseStandby / kUseFreeNode / kPreemptForNode
  std::vector<std::string> preempted;
  double requeue_after_s = 0;
  std::string reason;
};

struct QueueUsage {
  std::map<std::string, int> used_gpus;      // admitted (incl. standby) per GPU type
  std::map<std::string, int> borrowed_gpus;  // above nominal
  int pending = 0;
  int running = 0;
  double dominant_share = 0;  // weighted
};

class Scheduler {
 public:
  // Validates every node and queue (names unique, gpus > 0, one GPU count per
  // gpu_type, quotas >= 0, weight > 0, topology labels non-empty); errors name the
  // node/queue and field.
  static Result<std::unique_ptr<Scheduler>> Create(SchedulerConfig config,
                                                   std::vector<NodeSpec> nodes,
                                                   std::vector<QueueSpec> queues);
  ~Scheduler();

  // Adds a pending job. InvalidArgument for an unknown queue, duplicate id, nodes < 1,
  // standby < 0, or a gang larger than the cluster has nodes of its GPU type.
  Status Submit(const JobRequest& job, double now);
  // Releases a running job's nodes and standby (or drops a pending job).
  Status Finish(const std::string& job_id, double now);
  // Records a gang that is already running on `nodes` (+ `standby`), e.g. after the
  // controller restarted or the scheduler was rebuilt for a changed cluster: the job
  // is admitted there as is, quota charged without a quota check. The job is
  // validated as by Submit; every node must exist, have the job's GPU type, be held
  // by no other job and appear once; gang and standby must be in one pool;
  // nodes.size() must equal job.nodes. A node that is not ready stays with the job.
  // Standby below job.standby is restocked by later cycles.
  Status Adopt(const JobRequest& job, const std::vector<int>& nodes,
               const std::vector<int>& standby, double now);

  // One scheduling cycle: admits pending jobs in fair-share order until none fits or
  // `max_admissions` were admitted, preempting where the rules allow. Jobs whose
  // requeue backoff has not expired at `now` are skipped. Then, with
  // restock_standby, refills running jobs' standby from the free nodes left.
  CycleResult Schedule(double now, int max_admissions = 1 << 30);

  // A node failed (or was reclaimed, for spot). Marks it quarantined (out of service
  // until SetNodeHealth(kReady)) and, if a running job held it, decides the
  // replacement by the rules above and applies it.
  NodeFailureDecision OnNodeFailure(int node, double now);

  // Cordon/drain/quarantine/return a node. A node that leaves kReady while idle stops
  // being placeable; one in use stays with its job until released.
  Status SetNodeHealth(int node, NodeHealth health);

  // Queries. Reasons are "" for unknown jobs; Phase() of an unknown job is kFinished.
  JobPhase Phase(const std::string& job_id) const;
  std::string Reason(const std::string& job_id) const;          // pending: why it waits
  const Admission* Placement(const std::string& job_id) const;  // running jobs, else null
  QueueUsage Usage(const std::string& queue) const;
  int FreeNodes(const std::string& gpu_type) const;
  int PendingJobs() const;
  int RunningJobs() const;
  int NodeCount() const;
  const NodeSpec& Node(int index) const;
  int NodeIndex(const std::string& name) const;  // -1 when no node has that name

 private:
  Scheduler();
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Warm standby sized from failure statistics: the smallest k such that
// P(X <= k) >= quantile, X ~ Binomial(nodes, p), p = 1 - exp(-rate * lead_time_s / 86400)
// the probability that one node fails within the replacement lead time, given
// `failures_per_node_day`. Returns 0 for rate <= 0 or lead time <= 0.
int StandbyNodes(int nodes, double failures_per_node_day, double lead_time_s,
                 double quantile = 0.99);

}  // namespace bulwark::sched
