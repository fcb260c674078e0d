// `bulwark sim`: a discrete-event simulator of a GPU cluster running training jobs
// through faults. It drives the very same decision code as the live controller:
// sched::Scheduler (admission, placement, preemption, node-failure replacement),
// RecoveryPolicy (restart / replace / rollback / give up, backoff, hang timeout) and
// the cadence optimiser (ChooseCadence, EstimateFailureRate) -- docs/simulator.md.
//
// Model in one paragraph: nodes fail by per-node renewal processes (exponential or
// Weibull) with a fault type drawn from the failure model's shares; a running job
// alternates `interval` seconds of compute and blocking checkpoint writes of `w`
// seconds, with progress computed in closed form between events (no event per step
// or per checkpoint); a fault costs the job the work since its last completed
// checkpoint (or, with in-memory per-step checkpoints, the current step), then
// detection + policy backoff + (replacement lead time) + restart + checkpoint load.
// Every second of a started job's wall time lands in exactly one bucket: productive
// or one of the lost-time causes in LostTime.
//
// Pure and deterministic: no I/O except the writers, no threads, no clocks; equal
// configs (incl. seed) give byte-identical JSON/CSV. Thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "policy/recovery_policy.h"
#include "sched/scheduler.h"
#include "spec/job_spec.h"

namespace bulwark::sim {

enum class FaultType : uint8_t { kCrash, kHang, kNan, kHardware, kSpotReclaim };
inline constexpr int kFaultTypes = 5;
const char* FaultTypeName(FaultType t);  // "crash", "hang", "nan", "hardware", "spot_reclaim"

// How a job recovers: timings and mechanisms (YAML `strategies.<name>`).
struct Strategy {
  std::string name;
  // Fault -> detected, per FaultType. hang_auto: RecoveryPolicy::HangTimeout(policy,
  // {step}) instead of detect_s[kHang].
  std::array<double, kFaultTypes> detect_s = {30, 600, 30, 60, 30};
  bool hang_auto = false;
  double restart_s = 120;         // stop + relaunch + re-initialise every rank of the gang
  double ckpt_load_s = 60;        // read the checkpoint back (0 when resuming in memory)
  double ckpt_write_s = 30;       // w: training blocked per persisted checkpoint
  double persist_s = 0;           // background persist time (cadence lower bound)
  double interval_s = 1800;       // compute seconds between persisted checkpoints
  bool interval_auto = false;     // ChooseCadence(nodes, EstimateFailureRate(...), w, ...)
  double prior_node_days = 1000;  // weight of the failure model's rate in the estimate
  // Warm standby nodes reserved with the gang: explicit count, or sized by
  // sched::StandbyNodes(nodes, hardware+spot rate, replacement_lead_s, quantile).
  int standby = 0;
  bool standby_auto = false;
  double standby_quantile = 0.99;
  // In-memory per-step snapshots: non-hardware faults lose only the current step; each
  // step pays snapshot_stall_s (training advances at step/(step+stall) of full speed).
  bool in_memory = false;
  double snapshot_stall_s = 0;
  // Peer replication of the in-memory snapshot: a hardware fault also loses only the
  // current step when a standby or replacement node takes over.
  bool peer_replication = false;
  double replacement_lead_s = 600;  // a new (non-standby) node becomes usable
  FaultPolicySpec policy;           // handed to RecoveryPolicy
};

struct Job {
  std::string id;
  std::string queue;
  double submit_s = 0;
  int nodes = 1;
  std::string gpu_type = "h100";
  int priority = 0;
  sched::Tier tier = sched::Tier::kProduction;
  sched::TopologyLevel required_level = sched::TopologyLevel::kAny;
  double work_s = 3600;  // compute seconds at full speed to finish
  double step_s = 10;
  int strategy = 0;  // index into SimConfig::strategies
};

// Draws jobs at RunSimulation time (so --seed changes them).
struct Generator {
  int count = 0;
  double arrivals_per_hour = 1;  // Poisson arrivals from start_s
  double start_s = 0;
  std::vector<std::pair<int, double>> sizes;                        // (nodes, weight)
  double work_median_h = 24, work_sigma = 1, work_max_h = 24 * 30;  // lognormal, truncated
  std::vector<std::pair<std::string, double>> queues;               // (queue, weight)
  double production_share = 0.5;                                    // rest: research tier
  std::vector<std::pair<int, double>> priorities = {{0, 1}};
  std::string gpu_type = "h100";
  double step_s = 10;
  int strategy = 0;
};

struct FailureModel {
  std::string preset = "none";  // "none", "meta-rsc1", "meta-rsc2", "llama3", "custom"
  std::array<double, kFaultTypes> per_node_day = {0, 0, 0, 0, 0};  // spot: spot nodes only
  bool weibull = false;
  double weibull_shape = 1;
  double repair_s = 3 * 86400.0;  // hardware fault -> node back in service
  double spot_return_s = 3600;    // reclaimed spot node -> back
};

// An explicitly injected fault (YAML `faults:`), in addition to the random model.
struct InjectedFault {
  double at_s = 0;
  int node = 0;  // index into SimConfig::nodes
  FaultType type = FaultType::kCrash;
};

struct SimConfig {
  std::vector<sched::NodeSpec> nodes;
  std::vector<sched::QueueSpec> queues;
  sched::SchedulerConfig scheduler;
  std::vector<Strategy> strategies;
  std::vector<Job> jobs;
  std::optional<Generator> generator;
  FailureModel failures;
  std::vector<InjectedFault> faults;
  double duration_s = 30 * 86400.0;
  uint64_t seed = 1;
  double sample_s = 3600;  // time-series interval (0: no time series)
  std::string source;      // file name, for reports
};

// Parses and validates the YAML text. Errors: InvalidArgument with one line per
// problem, "<source>:<line>: <field.path>: <problem> (got <value>); <fix>". Never throws.
Result<SimConfig> ParseSimConfig(const std::string& text, const std::string& source_name);
Result<SimConfig> LoadSimConfig(const std::string& path);  // reads then ParseSimConfig
// (The `scheduler` and `queues` sections alone, e.g. for the operator, are
// sched::ParseSchedulingConfig in sched/config.h: the same parser, the same errors.)

// Seconds of a job's wall time (or GPU-seconds, when summed over the cluster) that
// did not advance training, by cause.
struct LostTime {
  double detection = 0;     // fault -> detected
  double backoff = 0;       // RecoveryPolicy backoff before the restart
  double replacement = 0;   // waiting for a non-standby replacement node
  double restart = 0;       // relaunch + re-initialise + checkpoint load
  double rework = 0;        // compute done and then lost (since the last checkpoint)
  double ckpt_stall = 0;    // blocking checkpoint writes + per-step snapshot stalls
  double requeue_wait = 0;  // pending again after a requeue or a preemption
  double Total() const {
    return detection + backoff + replacement + restart + rework + ckpt_stall + requeue_wait;
  }
};

struct JobResult {
  std::string id, queue, strategy;
  int nodes = 0, gpus = 0, standby = 0;
  std::string state;  // "finished", "running", "pending", "failed" (policy gave up)
  double submit_s = 0;
  double first_start_s = -1;  // -1: never started
  double end_s = -1;          // finish / give-up time, or the sim end
  double queue_wait_s = 0;    // submit -> first start (or -> sim end if never started)
  double wall_s = 0;          // first start -> end (0 if never started)
  double productive_s = 0;    // work kept, in compute seconds at full speed
  double ettr = 0;            // productive_s / wall_s (0 if wall_s == 0)
  double interval_s = 0;      // checkpoint interval of the last attempt
  LostTime lost;              // wall_s == productive_s + lost.Total()
  std::array<int, kFaultTypes> faults = {0, 0, 0, 0, 0};
  int restarts = 0, requeues = 0, preemptions = 0, replacements = 0;
  int restocks = 0;    // standby nodes the scheduler gave back after use or loss
  std::string reason;  // give-up diagnosis
};

struct Sample {
  double t_s = 0;
  int running = 0, pending = 0, busy_gpus = 0, standby_gpus = 0, failed_nodes = 0;
  double productive_gpu_h = 0;  // cumulative work kept so far (dips when work is lost)
  double allocated_gpu_h = 0;   // cumulative GPU-hours held by jobs (incl. standby)
};

struct PoolCost {
  double gpus = 0;                                     // GPUs in the pool
  double provisioned_gpu_h = 0, provisioned_cost = 0;  // every node for the whole run
  double allocated_gpu_h = 0, allocated_cost = 0;      // held by jobs (incl. standby)
};

struct SimResult {
  std::string source;
  uint64_t seed = 0;
  double duration_s = 0;
  int nodes = 0, gpus = 0;
  std::vector<JobResult> jobs;
  std::vector<Sample> samples;
  double total_gpu_h = 0;       // cluster GPUs x duration
  double allocated_gpu_h = 0;   // held by jobs, incl. standby
  double standby_gpu_h = 0;     // held as warm standby (idle by definition)
  double productive_gpu_h = 0;  // sum over jobs of productive_s x gpus
  double cluster_ettr = 0;      // productive / allocated
  double goodput = 0;           // productive / total
  double utilization = 0;       // allocated / total
  double queue_wait_mean_s = 0, queue_wait_p50_s = 0, queue_wait_p99_s = 0;  // started jobs
  LostTime lost_gpu_h;           // summed over jobs, x gpus, in GPU-hours
  std::array<PoolCost, 3> cost;  // indexed by sched::Pool
  std::array<int, kFaultTypes> faults_total = {0, 0, 0, 0, 0};    // every fault drawn
  std::array<int, kFaultTypes> faults_hit_job = {0, 0, 0, 0, 0};  // that hit a job's node
  int jobs_finished = 0, jobs_failed = 0, jobs_running = 0, jobs_pending = 0;
  int64_t events = 0;           // events processed
  int64_t schedule_calls = 0;   // Scheduler::Schedule() calls (one per timestamp at most)
  int64_t step_equivalent = 0;  // steps trained; what a per-step engine would process
};

// Runs the simulation. InvalidArgument when the scheduler rejects the cluster, a
// queue or a job; never throws.
Result<SimResult> RunSimulation(const SimConfig& config);

void WriteJson(const SimResult& r, std::ostream& out);  // one JSON object, 2-space indent
void WriteCsv(const SimResult& r, std::ostream& out);   // the time series, header first
std::string FormatSummary(const SimResult& r);          // the human table

}  // namespace bulwark::sim
