// The job spec schema: limits, the known fields of every YAML mapping with their
// fix hints, and value predicates. Internal to the spec component; the reference
// for users is docs/job-spec.md (keep the two in sync).
#pragma once

#include <cctype>
#include <climits>
#include <cstddef>
#include <filesystem>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spec/job_spec.h"
#include "spec/spec_reader.h"

namespace bulwark::spec_internal {

inline constexpr int kMaxNodes = 1024;
inline constexpr int kMaxProcsPerNode = 256;
inline constexpr double kMaxSeconds = 1e9;  // keeps every duration representable in int64 ns
inline constexpr size_t kMaxNameLen = 63;
inline constexpr size_t kMaxSpecBytes = 1 << 20;
inline constexpr int kMaxChaosFaults = 1000;

inline constexpr CelRule kMemorySlotsRules[] = {
    {"self != 1", "checkpoint.memorySlots must be 0 (off) or 2 to 62"},
};

inline constexpr CelRule kObjectStoreRules[] = {
    {"self.startsWith('s3://') && size(self) > 5 && !self.startsWith('s3:///') && "
     "!self.startsWith('s3://?')",
     "checkpoint.objectStore must be an S3 URL, s3://bucket/prefix[?endpoint=URL&region=R]"},
};

inline constexpr FieldDef kBackoffFields[] = {
    {.key = "baseSeconds",
     .hint = "set faultPolicy.backoff.baseSeconds to the first backoff in seconds, > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
    {.key = "capSeconds",
     .hint = "set faultPolicy.backoff.capSeconds to the backoff ceiling in seconds, >= baseSeconds",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
};

inline constexpr FieldDef kHangFields[] = {
    {.key = "floorSeconds",
     .hint = "set faultPolicy.hangTimeout.floorSeconds to the minimum hang timeout in seconds, > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
    {.key = "multiplier",
     .hint = "set faultPolicy.hangTimeout.multiplier to k in max(floor, k * p99 step time), >= 1",
     .type = FieldType::kNumber,
     .min = 1,
     .max = 1e6},
    {.key = "startupSeconds",
     .hint = "set faultPolicy.hangTimeout.startupSeconds to the launch-to-first-step limit, > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
};

inline constexpr FieldDef kHeartbeatFields[] = {
    {.key = "intervalSeconds",
     .hint = "set faultPolicy.heartbeat.intervalSeconds to a number of seconds > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
    {.key = "misses",
     .hint = "set faultPolicy.heartbeat.misses to an integer >= 1",
     .type = FieldType::kInt,
     .min = 1,
     .max = INT_MAX},
};

inline constexpr CelRule kBackoffRules[] = {
    {"(has(self.capSeconds) ? self.capSeconds : 30.0) >= "
     "(has(self.baseSeconds) ? self.baseSeconds : 1.0)",
     "faultPolicy.backoff.capSeconds must be >= baseSeconds (defaults 30 and 1); raise "
     "capSeconds or lower baseSeconds"},
};

inline constexpr FieldDef kCheckpointFields[] = {
    {.key = "dir",
     .hint = "set checkpoint.dir to a directory path (relative paths resolve against workdir)",
     .type = FieldType::kString},
    {.key = "intervalSteps",
     .hint = "set checkpoint.intervalSteps to an integer >= 0 (0 = no step trigger) or auto (the "
             "controller picks it from checkpoint cost and failure rate)",
     .type = FieldType::kIntOrAuto,
     .min = 0},
    {.key = "intervalSeconds",
     .hint = "set checkpoint.intervalSeconds to a number of seconds >= 0 (0 = no time trigger)",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds},
    {.key = "keep",
     .hint = "set checkpoint.keep to how many committed checkpoints to retain (an integer >= 1)",
     .type = FieldType::kInt,
     .min = 1,
     .max = INT_MAX},
    {.key = "memorySlots",
     .hint = "set checkpoint.memorySlots to the staging ring size per rank, 0 (off) or 2 to 62",
     .type = FieldType::kInt,
     .min = 0,
     .max = 62,
     .rules = kMemorySlotsRules},
    {.key = "sharedDir",
     .hint = "set checkpoint.sharedDir to a directory path for the shared tier",
     .type = FieldType::kString},
    {.key = "goldenEvery",
     .hint =
         "set checkpoint.goldenEvery to an integer >= 0: steps divisible by it are kept forever",
     .type = FieldType::kInt,
     .min = 0},
    {.key = "objectStore",
     .hint = "set checkpoint.objectStore to an S3 URL, s3://bucket/prefix[?endpoint=URL&region=R]",
     .type = FieldType::kString,
     .rules = kObjectStoreRules},
    {.key = "objectIntervalSteps",
     .hint = "set checkpoint.objectIntervalSteps to an integer >= 0: upload every N-th step "
             "(0 = every persisted step)",
     .type = FieldType::kInt,
     .min = 0},
    {.key = "peerReplication",
     .hint = "set checkpoint.peerReplication to true or false (copy memory snapshots to a peer "
             "node)",
     .type = FieldType::kBool},
    {.key = "peerPushShare",
     .hint = "set checkpoint.peerPushShare to the share of wall time an agent may spend pushing "
             "snapshots to its peer, a number in (0, 1] (1 = push every snapshot)",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 1,
     .min_exclusive = true},
};

inline constexpr CelRule kCheckpointRules[] = {
    {"!has(self.intervalSteps) || type(self.intervalSteps) != string || "
     "!has(self.memorySlots) || self.memorySlots != 0",
     "checkpoint.intervalSteps: auto needs the memory tier; set memorySlots to 2 or more, or give "
     "intervalSteps a number"},
};

inline constexpr FieldDef kFaultFields[] = {
    {.key = "restartBudget",
     .hint = "set faultPolicy.restartBudget to the maximum restarts, an integer >= 0",
     .type = FieldType::kInt,
     .min = 0,
     .max = INT_MAX},
    {.key = "backoff",
     .hint = "set faultPolicy.backoff to a mapping {baseSeconds: 1, capSeconds: 30}",
     .type = FieldType::kObject,
     .children = kBackoffFields,
     .rules = kBackoffRules},
    {.key = "hangTimeout",
     .hint = "set faultPolicy.hangTimeout to a mapping {floorSeconds: 30, multiplier: 10, "
             "startupSeconds: 300}",
     .type = FieldType::kObject,
     .children = kHangFields},
    {.key = "spareNodes",
     .hint = "set faultPolicy.spareNodes to the number of warm standby nodes, 0 to 1024, or auto "
             "(the P99 of node failures within replacementLeadSeconds)",
     .type = FieldType::kIntOrAuto,
     .min = 0,
     .max = kMaxNodes},
    {.key = "failureRatePerNodeDay",
     .hint = "set faultPolicy.failureRatePerNodeDay to the expected node failures per node-day, "
             ">= 0 (default 0.0038, Llama 3's rate)",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 1000},
    {.key = "replacementLeadSeconds",
     .hint =
         "set faultPolicy.replacementLeadSeconds to the seconds it takes to get a new node, > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
    {.key = "heartbeat",
     .hint = "set faultPolicy.heartbeat to a mapping {intervalSeconds: 1, misses: 3}",
     .type = FieldType::kObject,
     .children = kHeartbeatFields},
    {.key = "stopGraceSeconds",
     .hint = "set faultPolicy.stopGraceSeconds to the seconds between SIGTERM and SIGKILL, >= 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds},
    {.key = "maxSameFaultWithoutProgress",
     .hint = "set faultPolicy.maxSameFaultWithoutProgress to an integer >= 1",
     .type = FieldType::kInt,
     .min = 1,
     .max = INT_MAX},
    {.key = "inProcessRestart",
     .hint = "set faultPolicy.inProcessRestart to true (ranks under bulwark.run survive a fault "
             "elsewhere; only the culprits restart) or false (every fault restarts every rank)",
     .type = FieldType::kBool},
    {.key = "diagnoseSuspectNodes",
     .hint = "set faultPolicy.diagnoseSuspectNodes to true (a node whose fault may be the "
             "machine's is tested and quarantined if it fails; docs/diagnosis.md) or false",
     .type = FieldType::kBool},
    {.key = "parkTimeoutSeconds",
     .hint = "set faultPolicy.parkTimeoutSeconds to the seconds surviving ranks get to leave "
             "their generation before they are replaced too, > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds,
     .min_exclusive = true},
    {.key = "warmRanks",
     .hint = "set faultPolicy.warmRanks to the warm rank processes each agent keeps ready, 0 to "
             "64, or auto (procsPerNode)",
     .type = FieldType::kIntOrAuto,
     .min = 0,
     .max = 64},
};

inline constexpr FieldDef kElasticFields[] = {
    {.key = "minNodes",
     .hint = "set elastic.minNodes to the fewest nodes the job may continue on, 1 to nodes",
     .type = FieldType::kInt,
     .min = 1,
     .max = kMaxNodes,
     .required = true},
    {.key = "waitSeconds",
     .hint = "set elastic.waitSeconds to how long a lost node's replacement is waited for before "
             "the job continues on fewer nodes, >= 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds},
};

inline constexpr const char* kDtypeNames[] = {"bf16", "fp16", "fp8", "tf32", "fp32"};

inline constexpr FieldDef kMonitoringFields[] = {
    {.key = "peakFlops",
     .hint = "set monitoring.peakFlops to one device's dense peak FLOPS for the training dtype, "
             "e.g. 989e12 for an H100 SXM in bf16 (on CPU: what your cores reach)",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 1e18,
     .min_exclusive = true},
    {.key = "dtype",
     .hint = "set monitoring.dtype to the training dtype: bf16, fp16, fp8, tf32 or fp32",
     .type = FieldType::kString,
     .values = kDtypeNames},
    {.key = "pricePerGpuHour",
     .hint = "set monitoring.pricePerGpuHour to what one GPU (one rank's device) costs per hour, "
             "in dollars, >= 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 10000},
    {.key = "ettrTarget",
     .hint = "set monitoring.ettrTarget to the ETTR below which the alert fires, 0 to 1",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 1},
    {.key = "stragglerThreshold",
     .hint = "set monitoring.stragglerThreshold to the relative speed (vs the fastest rank) "
             "below which a rank is a straggler, in (0, 1], e.g. 0.75",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 1,
     .min_exclusive = true},
    {.key = "dataWaitThreshold",
     .hint = "set monitoring.dataWaitThreshold to the share of step time spent waiting for "
             "data above which the input pipeline starves the job, in (0, 1], e.g. 0.3",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 1,
     .min_exclusive = true},
    {.key = "totalSteps",
     .hint = "set monitoring.totalSteps to the run's last step (progress and ETA), >= 1; "
             "without it a --steps/--max-steps/--total-steps argument is used",
     .type = FieldType::kInt,
     .min = 1},
    {.key = "lossSpikeRollback",
     .hint = "set monitoring.lossSpikeRollback to true (a loss spike rolls the job back to the "
             "checkpoint before it and skips the batches, as PaLM did) or false (it is recorded "
             "and alerted only)",
     .type = FieldType::kBool},
    {.key = "lossSpikeFactor",
     .hint = "set monitoring.lossSpikeFactor to how many times the running loss a spike is, "
             "> 1, e.g. 10",
     .type = FieldType::kNumber,
     .min = 1,
     .max = 1e6,
     .min_exclusive = true},
};

// Every ChaosKind's name (ChaosKindName), the CRD's enum: a TrainJob may inject what a
// job spec may.
inline constexpr const char* kChaosKindNames[] = {"kill_rank",  "hang_rank", "nan_loss",
                                                  "kill_agent", "slow_rank", "slow_data",
                                                  "loss_spike", "sdc",       "slow_link"};

inline constexpr CelRule kChaosRules[] = {
    {"has(self.atSeconds) != has(self.atStep)",
     "chaos: set exactly one trigger, atSeconds or atStep"},
    {"self.kind == 'kill_agent' ? (has(self.node) && !has(self.rank)) : "
     "(has(self.rank) && !has(self.node))",
     "chaos: kill_agent needs node (and no rank); the rank kinds need rank "
     "(and no node)"},
};

inline constexpr FieldDef kChaosFields[] = {
    {.key = "kind",
     .hint = "set kind to one of: kill_rank, hang_rank, nan_loss, kill_agent, slow_rank, "
             "slow_data, loss_spike, sdc, slow_link",
     .type = FieldType::kString,
     .required = true,
     .values = kChaosKindNames},
    {.key = "atSeconds",
     .hint = "set atSeconds to seconds since job start (>= 0), or use atStep instead",
     .type = FieldType::kNumber,
     .min = 0,
     .max = kMaxSeconds},
    {.key = "atStep",
     .hint = "set atStep to a training step (an integer >= 0), or use atSeconds instead",
     .type = FieldType::kInt,
     .min = 0},
    {.key = "rank",
     .hint = "set rank to a global rank from 0 to world size - 1",
     .type = FieldType::kInt,
     .min = 0,
     .max = kMaxNodes * kMaxProcsPerNode - 1},
    {.key = "node",
     .hint = "set node to a node index from 0 to nodes - 1",
     .type = FieldType::kInt,
     .min = 0,
     .max = kMaxNodes - 1},
    {.key = "factor",
     .hint = "set factor (slow_rank, slow_link: how many times as long the rank's steps take, "
             "default 3; "
             "loss_spike: how many times the loss, default 20) to a number > 1",
     .type = FieldType::kNumber,
     .min = 1,
     .max = 1e6,
     .min_exclusive = true},
    {.key = "delaySeconds",
     .hint = "set delaySeconds (slow_data: the extra wait per batch, default 0.2) to a number > 0",
     .type = FieldType::kNumber,
     .min = 0,
     .max = 3600,
     .min_exclusive = true},
};

inline constexpr CelRule kCommandRules[] = {
    {"size(self) > 0 && self[0] != ''",
     "command must be a non-empty list whose first item, the program, is not empty"},
};

// Cross-field rules on the mapping that holds the job fields (a TrainJob's spec).
inline constexpr CelRule kJobRules[] = {
    {"!has(self.chaos) || self.chaos.all(f, !has(f.rank) || f.rank < "
     "(has(self.nodes) ? self.nodes : 1) * (has(self.procsPerNode) ? self.procsPerNode : 1))",
     "chaos[].rank must be below the world size, nodes x procsPerNode"},
    {"!has(self.chaos) || self.chaos.all(f, !has(f.node) || f.node < "
     "(has(self.nodes) ? self.nodes : 1))",
     "chaos[].node must be below nodes"},
    {"!has(self.elastic) || self.elastic.minNodes <= (has(self.nodes) ? self.nodes : 1)",
     "elastic.minNodes must be at most nodes (the size the job grows back to)"},
};

// The job fields of a spec except `name` (a TrainJob takes its name from metadata).
inline constexpr FieldDef kJobFields[] = {
    {.key = "nodes",
     .hint = "set nodes to the number of machines, an integer from 1 to 1024",
     .type = FieldType::kInt,
     .min = 1,
     .max = kMaxNodes},
    {.key = "procsPerNode",
     .hint = "set procsPerNode to the number of ranks per node, an integer from 1 to 256",
     .type = FieldType::kInt,
     .min = 1,
     .max = kMaxProcsPerNode},
    {.key = "command",
     .hint = "set command to a non-empty list of strings, e.g. command: [\"/usr/bin/python3\", "
             "\"train.py\"]",
     .type = FieldType::kStringList,
     .required = true,
     .rules = kCommandRules},
    {.key = "args",
     .hint = "set args to a list of strings, e.g. args: [\"--steps\", \"600\"]",
     .type = FieldType::kStringList},
    {.key = "env",
     .hint = "set env to a mapping of NAME: value, e.g. env: {OMP_NUM_THREADS: \"1\"}",
     .type = FieldType::kStringMap},
    {.key = "workdir",
     .hint = "set workdir to a directory path (relative paths resolve against the spec file's "
             "directory) or omit it",
     .type = FieldType::kString},
    {.key = "checkpoint",
     .hint = "set checkpoint to a mapping with any of: dir, intervalSteps, intervalSeconds, keep, "
             "memorySlots, sharedDir, goldenEvery, objectStore, objectIntervalSteps, "
             "peerReplication, peerPushShare",
     .type = FieldType::kObject,
     .children = kCheckpointFields,
     .rules = kCheckpointRules},
    {.key = "faultPolicy",
     .hint = "set faultPolicy to a mapping with any of: restartBudget, backoff, hangTimeout, "
             "spareNodes, failureRatePerNodeDay, replacementLeadSeconds, heartbeat, "
             "stopGraceSeconds, maxSameFaultWithoutProgress, inProcessRestart, "
             "diagnoseSuspectNodes, parkTimeoutSeconds, warmRanks",
     .type = FieldType::kObject,
     .children = kFaultFields},
    {.key = "elastic",
     .hint = "set elastic to a mapping {minNodes: 2, waitSeconds: 0}: the job continues on "
             "fewer nodes, down to minNodes, when a lost node is not replaced",
     .type = FieldType::kObject,
     .children = kElasticFields},
    {.key = "monitoring",
     .hint = "set monitoring to a mapping with any of: peakFlops, dtype, pricePerGpuHour, "
             "ettrTarget, stragglerThreshold, dataWaitThreshold, lossSpikeFactor, "
             "lossSpikeRollback, "
             "totalSteps",
     .type = FieldType::kObject,
     .children = kMonitoringFields},
    {.key = "chaos",
     .hint = "set chaos to a list of faults, e.g. chaos: [{kind: kill_rank, atSeconds: 30, rank: "
             "1}]",
     .type = FieldType::kObjectList,
     .children = kChaosFields,
     .rules = kChaosRules,
     .max_items = kMaxChaosFaults},
};

inline constexpr FieldDef kSlurmFields[] = {
    {.key = "partition",
     .hint = "set slurm.partition to a partition of the cluster (sinfo --summarize lists them)",
     .type = FieldType::kString},
    {.key = "account",
     .hint = "set slurm.account to the Slurm account to charge (sacctmgr show assoc user=$USER)",
     .type = FieldType::kString},
    {.key = "qos",
     .hint = "set slurm.qos to a quality of service of the account (sacctmgr show qos)",
     .type = FieldType::kString},
    {.key = "time",
     .hint = "set slurm.time to the allocation's time limit as a quoted string: MINUTES, "
             "HH:MM:SS or D-HH:MM:SS (e.g. time: \"2:00:00\")",
     .type = FieldType::kString},
    {.key = "constraint",
     .hint = "set slurm.constraint to node features joined by & | , without spaces (e.g. a100&ib)",
     .type = FieldType::kString},
    {.key = "growNodes",
     .hint = "set slurm.growNodes to how many nodes the job may ask Slurm for beyond its "
             "allocation when its spare hosts are used up, 0 (never) to 1024",
     .type = FieldType::kInt,
     .min = 0,
     .max = kMaxNodes},
};

// `slurm`: a job spec's own (a TrainJob runs on Kubernetes and has none).
inline constexpr FieldDef kSlurmField = {
    .key = "slurm",
    .hint =
        "set slurm to a mapping with any of: partition, account, qos, time, constraint, "
        "growNodes (docs/slurm.md)",
    .type = FieldType::kObject,
    .children = kSlurmFields};

inline constexpr FieldDef kNameField = {
    .key = "name",
    .hint =
        "set name to a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
        "with a letter or digit, at most 63 characters (e.g. name: gpt-char)",
    .type = FieldType::kString,
    .required = true};

// The keys of a job spec's top level: `name`, then the job fields, then `slurm`.
inline std::span<const FieldDef> TopFields() {
  static const std::vector<FieldDef> fields = [] {
    std::vector<FieldDef> v{kNameField};
    v.insert(v.end(), std::begin(kJobFields), std::end(kJobFields));
    v.push_back(kSlurmField);
    return v;
  }();
  return fields;
}

inline constexpr ChaosKind kAllKinds[] = {
    ChaosKind::kKillRank,  ChaosKind::kHangRank, ChaosKind::kNanLoss,
    ChaosKind::kKillAgent, ChaosKind::kSlowRank, ChaosKind::kSlowData,
    ChaosKind::kLossSpike, ChaosKind::kSdc,      ChaosKind::kSlowLink};
static_assert(std::size(kAllKinds) == std::size(kChaosKindNames),
              "kChaosKindNames names every ChaosKind (JobSpecTest.ChaosKindNamesAreTheCrdEnum)");

// Set by the agent for every rank (docs/protocol.md section 3); a spec may not
// override them.
inline constexpr const char* kReservedEnv[] = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
};

// The fix hint of `key` in `fields` ("" if absent).
inline const char* HintFor(std::span<const FieldDef> fields, std::string_view key) {
  for (const FieldDef& f : fields) {
    if (key == f.key) return f.hint;
  }
  return "";
}

inline bool IsReservedEnv(const std::string& s) {
  if (s.rfind("BULWARK_", 0) == 0) return true;
  for (const char* r : kReservedEnv) {
    if (s == r) return true;
  }
  return false;
}

inline bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > kMaxNameLen) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : s) {
    if (!alnum(c) && c != '-') return false;
  }
  return alnum(s.front()) && alnum(s.back());
}

inline bool IsEnvName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    bool ok = c == '_' || (c < 0x80 && std::isalpha(c)) || (i > 0 && c < 0x80 && std::isdigit(c));
    if (!ok) return false;
  }
  return true;
}

// Lexically normalizes and drops a trailing separator ("/a/b/" -> "/a/b").
inline std::string CleanPath(const std::filesystem::path& p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace bulwark::spec_internal
