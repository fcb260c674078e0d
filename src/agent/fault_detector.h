// FaultDetector: the agent's pure fault-detection state machine for one node.
//
// It is fed events (rank launched, step reported, output line, exit) and asked
// periodically for hangs; it returns faults to report. It does no I/O and takes time
// only from the injected Clock, so it is unit-tested with FakeClock. Each rank yields
// at most one fault per attempt (the first wins); later events for a reported rank are
// ignored. Not thread-safe: the agent's single event loop owns it.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/proc.h"
#include "policy/recovery_policy.h"

namespace bulwark {

struct DetectorConfig {
  double hang_floor_s = 30;              // hang timeout lower bound
  double hang_multiplier = 10;           // k in max(floor, k * p99(step intervals))
  double startup_timeout_s = 300;        // launch -> first step report
  size_t step_history = 200;             // step intervals kept per rank for the p99
  double finished_exit_timeout_s = 120;  // `finished` -> process exit
};

struct DetectedFault {
  FaultKind kind = FaultKind::kCrash;
  std::string subtype;     // "SIGKILL", "exit 1", "cuda_error", "no_progress", "nan", ...
  int rank = -1;           // global rank the fault is attributed to
  long step = -1;          // the rank's last reported step (nan: the NaN step)
  double fault_time = 0;   // wall seconds: best estimate of when the fault began
  double detect_time = 0;  // wall seconds: when it was detected
  std::string detail;
  std::vector<int> stalled_ranks;  // hang only: every rank reported by this fault
  std::vector<int> stopped_ranks;  // hang: ranks found stopped (state T) at capture
};

class FaultDetector {
 public:
  explicit FaultDetector(const Clock* clock) : clock_(clock) {}

  // Starts monitoring `ranks` (global ranks) for `attempt`, launched now. Forgets any
  // previous attempt and arms detection.
  void StartAttempt(int attempt, const DetectorConfig& cfg, const std::vector<int>& ranks);
  // Stops detection until the next StartAttempt (the attempt is being stopped on purpose,
  // so exits are expected).
  void Disarm() { armed_ = false; }
  bool armed() const { return armed_; }
  int attempt() const { return attempt_; }
  bool Monitors(int rank) const { return ranks_.count(rank) > 0; }

  // A step report. Returns a nan fault if `loss` is NaN/Inf. `sdk_time` is the SDK's
  // wall time of the report (<= 0 if unknown).
  std::optional<DetectedFault> OnStep(int rank, long step, double loss, double sdk_time);
  // A rank exited. Non-zero code or a signal is a crash; exit 0 ends its monitoring.
  std::optional<DetectedFault> OnExit(int rank, const ExitInfo& exit);
  // The rank's training function returned (the SDK's `finished`): its progress is no
  // longer watched; it must exit within finished_exit_timeout_s or it is reported hung.
  void OnFinished(int rank);
  // One line of a rank's output; a fatal_log fault if ClassifyLogLine matches.
  std::optional<DetectedFault> OnLogLine(int rank, std::string_view line);
  // All unreported live ranks whose hang deadline has passed, as one hang fault
  // attributed to the least advanced of them (lowest step, then oldest progress).
  std::optional<DetectedFault> CheckHangs();

  // The rank's current hang timeout: startup_timeout_s before its first step, else
  // RecoveryPolicy::HangTimeout over its recent step intervals. -1 if unknown rank.
  double HangTimeoutFor(int rank) const;
  long LastStep(int rank) const;
  // Whether `rank` has reported a step in this attempt.
  bool HasStep(int rank) const;

 private:
  struct RankState {
    bool reported = false;
    bool exited = false;
    long last_step = -1;
    bool has_step = false;
    bool finished = false;          // the training function returned; now exiting
    double last_progress_mono = 0;  // launch or last step report
    std::deque<double> intervals;   // seconds between consecutive step reports
    // HangTimeout over `intervals` (a sort of up to step_history values), kept until the
    // next step report changes them; -1 = not computed. The agent checks every rank on
    // every loop iteration, far more often than steps arrive.
    mutable double hang_timeout_s = -1;
  };
  RankState* Live(int rank);  // nullptr if unknown, reported, exited, or disarmed
  DetectedFault Make(FaultKind kind, std::string subtype, int rank, double fault_time,
                     std::string detail);

  const Clock* clock_;
  DetectorConfig cfg_;
  int attempt_ = -1;
  bool armed_ = false;
  std::map<int, RankState> ranks_;
};

}  // namespace bulwark
