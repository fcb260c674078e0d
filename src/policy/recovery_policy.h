// Recovery policy: a pure function from (incident, job history, clock) to a decision.
//
// No I/O, no threads, no global state: the controller and the simulator call the same
// code. Randomness (backoff jitter) comes from the caller-provided seed so decisions
// are reproducible. Thread-compatible (const methods only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/job_spec.h"

namespace bulwark {

enum class FaultKind {
  kCrash,     // rank exited non-zero or by signal
  kHang,      // no step progress past the hang timeout
  kNan,       // NaN/Inf loss reported
  kFatalLog,  // a known fatal log line (CUDA error, NCCL timeout, OOM, ECC/Xid)
  kNodeLost,  // agent missed heartbeats
  // Silent data corruption: a rank's parameters differ bit for bit from those of the
  // ranks that should hold the same ones (the bitwise alignment check), with no crash
  // and no NaN.
  kSdc,
};
// "crash", "hang", "nan", "fatal_log", "node_lost", "sdc"
const char* FaultKindName(FaultKind k);

// What a replay of the steps before a fault showed its cause to be (policy/replay_check.h).
enum class FaultCause { kUnknown, kData, kCode, kHardware, kTransient };
const char* FaultCauseName(FaultCause c);  // "unknown", "data", "code", "hardware", "transient"

struct Incident {
  FaultKind kind = FaultKind::kCrash;
  std::string subtype;     // e.g. "SIGKILL", "exit 1", "cuda_error", "nccl_timeout", "oom", "xid"
  int rank = -1;           // global rank, -1 if node-level
  int node = -1;           // node slot index (0..nodes-1), -1 if unknown
  long step = -1;          // last step reported by the job (NaN: the step with the NaN loss)
  double fault_time = 0;   // wall time the fault began (best estimate)
  double detect_time = 0;  // wall time it was detected
  std::string detail;      // human-readable
  // kSdc: the newest step whose parameters were verified aligned on every rank (the
  // corruption came after it); -1 = none verified.
  long good_step = -1;
  // Set when a replay showed this fault to be one that came before (ReplayCheck):
  // kCode gives up, kData skips the data (NaN). kUnknown otherwise.
  FaultCause cause = FaultCause::kUnknown;
  std::string cause_evidence;  // what the replay showed
};

// True when `a` and `b` are "the same fault" for the recurrence rule: same kind, and
//   kNan: NaN steps within kNanRecurWindowSteps of each other (or both unknown);
//   others: same rank if both ranks are known, else same node if both nodes are known,
//           else (location unknown) same kind suffices.
inline constexpr long kNanRecurWindowSteps = 5;
bool SameFault(const Incident& a, const Incident& b);

// What happened before, as the controller's store knows it.
struct JobHistory {
  int restarts_used = 0;
  long high_water_step = -1;               // highest step ever completed
  std::vector<long> committed_steps;       // ascending
  std::vector<Incident> incidents;         // earlier incidents, oldest first (not incl. current)
  std::vector<long> progress_at_incident;  // high_water_step at each earlier incident
                                           // (same length as incidents; missing = no progress)
  int spares_available = 0;                // idle standby nodes right now
  // Every step is snapshotted to the memory tier (checkpoint.memorySlots > 0): a first
  // NaN rolls back to the step just before it, not to the last disk checkpoint.
  bool memory_tier = false;
  // Earlier incidents since the last >= 1 new step of progress, NOT counting the current
  // one: the current incident is failure number consecutive_failures + 1 and gets
  // Backoff(consecutive_failures + 1).
  int consecutive_failures = 0;
};

enum class Action {
  kRestartInPlace,  // stop all ranks, start a new attempt on the same nodes
  kReplaceNode,     // as restart, but swap `node` for a standby first
  kRollback,        // restart from a checkpoint older than resume_step_max (NaN)
  kGiveUp,          // mark Failed with `reason` as the diagnosis
};
const char* ActionName(Action a);  // "restart_in_place", "replace_node", "rollback", "give_up"

struct Decision {
  Action action = Action::kRestartInPlace;
  double backoff_seconds = 0;  // wait this long before starting the next attempt
  // Resume from the newest committed step <= this. -1 means "the newest committed step"
  // for every action except kRollback, where -1 (with resume_from_scratch == true) means
  // no committed step is old enough: start from scratch.
  long resume_step_max = -1;
  bool resume_from_scratch = false;  // kRollback only: discard all checkpoints, start fresh
  long skip_batches_from = -1;       // rollback: tell the trainer to skip data in [from, to)
  long skip_batches_to = -1;
  int replace_node = -1;  // kReplaceNode: the node slot to swap
  std::string reason;     // user-readable explanation; for kGiveUp, the diagnosis
};

class RecoveryPolicy {
 public:
  RecoveryPolicy(const FaultPolicySpec& spec, uint64_t seed) : spec_(spec), seed_(seed) {}
  // The decision for `incident` (docs/recovery-policy.md has the table). `now` is the
  // caller's clock reading; the decision does not depend on it today (reserved for
  // time-windowed rules), so equal inputs give equal outputs.
  Decision Decide(const Incident& incident, const JobHistory& history, double now) const;

  // Backoff before the restart after the n-th consecutive failure (failures with no new
  // step between them). The first (n <= 1) restarts at once: one failure after progress
  // is no crash loop, and waiting would only add to every fault's cost. From n = 2 it is
  // exponential with jitter: min(cap, base * 2^(n-2)) scaled by a factor in [0.5, 1.0]
  // drawn from (seed, n) with splitmix64 (deterministic); base <= 0 gives 0.
  double Backoff(int n) const;

  // Hang timeout given recent step durations: max(floor, multiplier * p99(durations)),
  // p99 by nearest rank (the ceil(0.99 * n)-th smallest); non-finite and negative
  // durations are ignored; no usable durations -> floor.
  static double HangTimeout(const FaultPolicySpec& spec, const std::vector<double>& step_secs);

 private:
  FaultPolicySpec spec_;
  uint64_t seed_;
};

}  // namespace bulwark
