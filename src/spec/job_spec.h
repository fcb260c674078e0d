// JobSpec: the validated, typed form of a job's YAML spec (docs/job-spec.md).
//
// ParseJobSpec() never throws and never crashes on bad input: every unknown field,
// wrong type or impossible value yields InvalidArgument naming the field path, the
// YAML line, and the fix, e.g.
//   "job.yaml:12: checkpoint.keep: must be >= 1 (got 0); set keep to how many
//    committed checkpoints to retain".
// All errors found are reported together, one per line.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark {

enum class ChaosKind {
  kKillRank,   // SIGKILL one rank (crash)
  kHangRank,   // SIGSTOP one rank (hang)
  kNanLoss,    // the rank's next reported loss becomes NaN (SDK-cooperative)
  kKillAgent,  // SIGKILL a node's agent (node loss)
  kSlowRank,   // the rank works `factor` times as long per step from then on (a straggler)
  kSlowData,   // the rank's data loader waits `delaySeconds` more per batch (starvation)
  kLossSpike,  // the rank's next reported loss is `factor` times as large (a loss spike)
  // Silent data corruption: the rank's parameters are perturbed slightly, once, with no
  // crash and no NaN, and its node's compute self-test fails from then on (bad hardware).
  kSdc,
  // A slow link: the node's link traffic is throttled (its link check sends at 2 MiB/s,
  // as through a bad NIC or cable) and the rank waits on it like a slow rank (`factor`).
  kSlowLink,
};
// "kill_rank", "hang_rank", "nan_loss", "kill_agent", "slow_rank", "slow_data",
// "loss_spike", "sdc", "slow_link"
const char* ChaosKindName(ChaosKind k);

// One fault to inject. Exactly one of at_seconds / at_step is set (>= 0).
struct ChaosFault {
  ChaosKind kind = ChaosKind::kKillRank;
  double at_seconds = -1;    // seconds since the job started
  long at_step = -1;         // when global rank 0 first reports this step
  int rank = 0;              // global rank (kill_rank, hang_rank, nan_loss)
  int node = 0;              // node index (kill_agent)
  double factor = 0;         // slow_rank, slow_link (default 3), loss_spike (default 20)
  double delay_seconds = 0;  // slow_data (default 0.2)
  bool operator==(const ChaosFault&) const = default;
};

struct CheckpointSpec {
  std::string dir;          // where shards and commits go; default "<workdir>/checkpoints/<name>"
  long interval_steps = 0;  // save every N steps (0 = off unless interval_seconds)
  // intervalSteps: auto — the controller sets the disk interval from measured checkpoint
  // cost, step time and failure rate (policy/cadence.h); needs the memory tier.
  bool interval_auto = false;
  double interval_seconds = 0;     // or every T seconds
  int keep = 3;                    // committed checkpoints retained per file tier
  int memory_slots = 4;            // memory tier: staging ring of K snapshots per rank (0 = off)
  std::string shared_dir;          // optional shared tier (the NFS/Lustre role); "" = none
  long golden_every = 0;           // steps divisible by this are never collected (0 = none)
  std::string object_store;        // "s3://bucket/prefix?endpoint=..." object tier; "" = none
  long object_interval_steps = 0;  // upload steps divisible by this (0 = every persisted one)
  bool peer_replication = true;    // memory snapshots copied to a peer node's memory
  // Share of wall time an agent may spend pushing snapshots to its peer (0 < s <= 1; 1 =
  // every sealed snapshot): after a round of pushes of one step that took t seconds, the
  // next starts no sooner than t / s later.
  double peer_push_share = 0.02;
  bool operator==(const CheckpointSpec&) const = default;
};

struct FaultPolicySpec {
  int restart_budget = 10;                 // max restarts before the job fails
  double backoff_base_seconds = 1;         // first backoff; doubles per consecutive failure
  double backoff_cap_seconds = 30;         // backoff ceiling
  double hang_timeout_floor_seconds = 30;  // hang = no step for max(floor, k * p99)
  double hang_timeout_multiplier = 10;     // k
  double startup_timeout_seconds = 300;    // launch -> first step, else a hang
  int spare_nodes = 0;                     // warm standby agents
  // spareNodes: auto — sized by sched::StandbyNodes from the failure rate and the
  // replacement lead time (binomial P99 of node failures within the lead time).
  bool spare_nodes_auto = false;
  // Prior node failure rate (per node-day) for standby sizing and the checkpoint
  // cadence; the controller blends it with the job's observed failures. Default:
  // Llama 3's 419 unexpected interruptions in 54 days on 2,048 8-GPU nodes.
  double failures_per_node_day = 419.0 / (54.0 * 2048.0);
  double replacement_lead_seconds = 600;    // time to get a new node without a standby
  double heartbeat_interval_seconds = 1;    // agent -> controller
  int heartbeat_misses = 3;                 // node lost after this many missed beats
  double stop_grace_seconds = 5;            // SIGTERM -> SIGKILL
  int max_same_fault_without_progress = 3;  // give up when the same fault recurs this often
  // In-process recovery (docs/recovery-policy.md, "Which processes restart"): ranks that
  // run under bulwark.run survive a fault elsewhere and re-form their process group;
  // only the culprits get new processes. false = every fault restarts every rank.
  bool in_process_restart = true;
  // Stop-diagnose (docs/diagnosis.md): a node whose fault may be the machine's leaves
  // the job for its checks (a standby takes its slot, else the relaunch waits) and is
  // quarantined when one fails. false = every node stays where it is.
  bool diagnose_suspect_nodes = true;
  // How long survivors may take to leave their generation before they are killed and
  // replaced too.
  double park_timeout_seconds = 5;
  // Warm rank processes (torch and the SDK imported, waiting) each agent keeps for
  // replacements; -1 = auto (procsPerNode), 0 = none.
  int warm_ranks = -1;
  int WarmRanks(int procs_per_node) const { return warm_ranks < 0 ? procs_per_node : warm_ranks; }
  bool operator==(const FaultPolicySpec&) const = default;
};

// Elastic resize (docs/job-spec.md, "Elastic jobs"): a job of `nodes` nodes that loses
// one and gets no replacement within wait_seconds continues on fewer, down to
// min_nodes, and grows back when capacity returns.
struct ElasticSpec {
  int min_nodes = 0;        // 0: not elastic (the job always runs on `nodes`)
  double wait_seconds = 0;  // how long a lost node's replacement is waited for first
  bool enabled() const { return min_nodes > 0; }
  bool operator==(const ElasticSpec&) const = default;
};

// What the job's metrics are judged against (docs/monitoring.md): MFU's peak, cost,
// and the thresholds of the faults found from metrics.
struct MonitoringSpec {
  double peak_flops = 0;              // per device; 0 = from the GPU's name and dtype (table)
  std::string dtype = "bf16";         // bf16, fp16, fp8, tf32, fp32: the table's column
  double price_per_gpu_hour = 0;      // dollars; 0 = no cost metrics
  double ettr_target = 0.9;           // the EttrBelowTarget alert's threshold
  double straggler_threshold = 0.75;  // a rank slower than this × the fastest's speed
  double data_wait_threshold = 0.3;   // data wait above this share of step time
  double loss_spike_factor = 10;      // loss ≥ factor × the running reference
  bool loss_spike_rollback = false;   // a loss spike rolls back and skips (else observed)
  long total_steps = 0;  // the run's last step, for progress and ETA (0 = from args, if any)
  bool operator==(const MonitoringSpec&) const = default;
};

// Where the job runs on Slurm (docs/slurm.md, "The slurm section"): what the allocation
// of `bulwark run --allocate` and `bulwark slurm script` asks for (their flags of the
// same names override these), and how many nodes a job that has used up its allocation's
// spare hosts may ask Slurm for beyond it.
struct SlurmSpec {
  std::string partition;   // --partition ("" = the cluster's default)
  std::string account;     // --account
  std::string qos;         // --qos
  std::string time;        // --time, e.g. "2:00:00"
  std::string constraint;  // --constraint (node features), e.g. "a100&ib"
  // Nodes requested beyond the allocation (each a one-node allocation of the same
  // partition, account, QOS, features and time limit), at most this many over the run;
  // 0 = never (a lost node's replacement waits for a host of the allocation).
  int grow_nodes = 0;
  bool operator==(const SlurmSpec&) const = default;
};

// What Slurm accepts as the value of `key` (partition, account, qos, time, constraint):
// "" when `value` is empty or such a value, else the form it must have ("a partition name
// (letters, digits, _.+-)"). The characters allowed exclude everything a shell reads, so
// the value may stand in a script. Shared by the spec's slurm section and the CLI's flags.
// Pure.
std::string SlurmValueProblem(const std::string& key, const std::string& value);

struct JobSpec {
  std::string name;  // DNS-1123 label
  int nodes = 1;     // with elastic: the most nodes (the size it grows back to)
  int procs_per_node = 1;
  std::vector<std::string> command;  // argv[0] and fixed args
  std::vector<std::string> args;     // appended to command
  std::map<std::string, std::string> env;
  // ParseJobSpec: absolute (relative -> the spec file's dir). A TrainJob parsed for
  // Kubernetes (src/trainjob) leaves it "" when unset, meaning the container image's
  // working directory; a relative one is relative to that.
  std::string workdir;
  CheckpointSpec checkpoint;
  FaultPolicySpec fault_policy;
  ElasticSpec elastic;
  MonitoringSpec monitoring;
  SlurmSpec slurm;  // job specs only (a TrainJob has no slurm section)
  std::vector<ChaosFault> chaos;
  std::string source_path;  // file it was parsed from ("" for strings)

  int world_size() const { return nodes * procs_per_node; }
};

// Parses and validates YAML text. `source_name` prefixes error lines; `base_dir`
// resolves relative workdir/checkpoint.dir ("" = the current directory; a relative
// base_dir is made absolute against it). On success workdir and checkpoint.dir are
// absolute and lexically normalized (no trailing '/'), source_path is "". Paths are
// not checked for existence. On failure returns InvalidArgument whose message holds
// one line per problem: "<source>:<line>: <field.path>: <problem> (got <value>); <fix>"
// (line 1-based; YAML syntax errors use the path "(yaml syntax)", document-level
// problems "(top level)"). Inputs over 1 MiB are rejected. Never throws.
// Thread-safe: no shared state.
Result<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& source_name,
                             const std::string& base_dir);
// Reads the file then ParseJobSpec with source_name = `path` and base_dir = the
// file's directory; sets source_path to the absolute path. An unreadable file gives
// the errno-derived Status (NotFound for a missing file). Never throws.
Result<JobSpec> LoadJobSpec(const std::string& path);

}  // namespace bulwark
