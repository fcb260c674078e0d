// ETTR ledger: splits a job's wall-clock time into exclusive categories whose sum is the
// wall-clock time exactly (definitions in docs/ettr.md).
//
// Pure and clock-free: every event carries its own timestamp (seconds, any epoch, but
// one epoch per ledger). Events must arrive in non-decreasing time order except where
// documented; out-of-order timestamps are clamped to the cursor, never producing
// negative time. Thread-compatible.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "policy/recovery_policy.h"

namespace bulwark {

enum class TimeCategory {
  kProductive,  // new steps (step > high water), minus checkpoint stall
  kCheckpoint,  // time a trainer spent blocked in checkpoint save
  kDetection,   // fault began -> fault detected
  kRestart,     // detected -> new ranks launched (stop, backoff, replace)
  kReinit,      // ranks launched -> first step begins (startup, rendezvous, load)
  kRework,      // repeated steps (<= high water) and the partial step lost at a fault
  kDiagnosis,   // restarting, held until a suspect node's diagnostics end (stop-diagnose)
  kIdle,        // anything else (waiting, after the last step, before the first launch)
};
inline constexpr size_t kTimeCategoryCount = 8;  // the enumerators above, 0..7
const char* TimeCategoryName(TimeCategory c);    // "productive", "checkpoint", ...

struct IncidentRow {
  Incident incident;
  std::string action;  // decision taken
  double detection_s = 0;
  double restart_s = 0;
  double reinit_s = 0;
  double rework_s = 0;
  double diagnosis_s = 0;  // the relaunch waited for diagnostics this long
  long rework_steps = 0;
  long resumed_from_step = -1;  // step the next attempt resumed from (-1 = from scratch)
  double total_s() const { return detection_s + restart_s + reinit_s + rework_s + diagnosis_s; }
};

struct LedgerReport {
  double wall_s = 0;
  std::map<TimeCategory, double> seconds;  // every category present, sum == wall_s
  std::vector<IncidentRow> incidents;
  long steps_completed = 0;  // distinct steps (high water + 1 - first step)
  long steps_reworked = 0;
  double tokens = 0;  // tokens from productive steps
  double ettr() const { return wall_s > 0 ? seconds.at(TimeCategory::kProductive) / wall_s : 0; }
};

class EttrLedger {
 public:
  // Job starts (submitted/admitted) at t. Time before the first launch is kIdle.
  explicit EttrLedger(double t_start);

  // A new attempt's ranks were launched at t, resuming after `resume_step`
  // (the first step it will run is resume_step + 1; -1 = from scratch).
  // [cursor, t] -> kRestart after a fault (and the latest incident row's restart_s),
  // kReinit if a previous launch never reached a step, else kIdle.
  void OnAttemptLaunched(double t, long resume_step);
  // An attempt that was already running when this ledger's controller took it over
  // (adoption after a controller restart) at t: [cursor, t] -> kIdle; steps after
  // `high_water_step` count as new; no reinit is charged (its ranks never restarted).
  void OnAttemptAdopted(double t, long high_water_step);
  // Global rank 0 finished `step` at t_end; it took step_seconds (measured by the
  // trainer from the previous step's end, or from its start for the first step of an
  // attempt), of which ckpt_stall_seconds were spent blocked in checkpoint save.
  // [cursor, t_end]: the trailing min(step_seconds, interval) is the step (stall part ->
  // kCheckpoint, rest -> kProductive if step > high water else kRework); the leading
  // remainder is kReinit for an attempt's first step, else kIdle. Steps reported while
  // restarting (stale reports from a dead attempt) or after OnEnd are ignored.
  void OnStep(double t_end, long step, double step_seconds, double ckpt_stall_seconds,
              double tokens);
  // A fault began at incident.fault_time and was detected at incident.detect_time.
  // [cursor, fault_time] -> kRework if running (the partial step is lost), else the
  // phase's category; [fault_time, detect_time] -> kDetection. Appends an IncidentRow
  // that collects this fault's costs until the next fault.
  void OnFault(const Incident& incident, const std::string& action);
  // The last fault turned out to be a consequence of `root` (a node lost just after
  // a peer's crash): its row names `root` and `action` from now on. The time already
  // attributed stays where it is (the detection was the consequence's); false when
  // there is no row to recast (no fault yet, or a planned restart since).
  bool RecastLastFault(const Incident& root, const std::string& action);
  // A restart nobody's fault caused (a code update applied between generations) at t:
  // [cursor, t] is closed as OnFault would (a running step cut short is rework), then
  // the job is restarting, with no incident row: the restart and reinit that follow
  // are charged to their categories, not to the last incident.
  void OnPlannedRestart(double t);
  // While restarting, from t on the relaunch waits (`waiting`) or no longer waits for a
  // node's diagnostics: that time is kDiagnosis (and the incident row's diagnosis_s)
  // instead of kRestart. Diagnostics that run beside a relaunch cost the job nothing
  // and are not reported here.
  void OnDiagnosisWait(double t, bool waiting);
  // The job reached a terminal state at t: closes [cursor, t] (running -> kIdle,
  // restarting -> kRestart, starting -> kReinit). Later events are ignored.
  void OnEnd(double t);

  // Snapshot; may be called at any time (open intervals are closed at `now` as OnEnd
  // would; an in-progress step therefore shows as kIdle until its OnStep arrives).
  LedgerReport Report(double now) const;
  // The time attributed so far, up to the last event (open intervals left open): each
  // category only grows from one call to the next, so it can be exported as counters
  // (Report's provisional kIdle of a step in progress turns kProductive later).
  LedgerReport Settled() const;

 private:
  // Moves the cursor to max(until, cursor) (non-finite -> cursor), adds the interval to
  // category c and returns its length (>= 0).
  double Attribute(double until, TimeCategory c);
  // Closes [cursor, t] into the current phase's category and its incident row.
  void CloseOpen(double t);
  IncidentRow* Row() { return row_ >= 0 ? &r_.incidents[row_] : nullptr; }

  enum class Phase { kIdle, kRunning, kRestarting, kStarting };
  double start_;
  double cursor_;
  Phase phase_ = Phase::kIdle;
  long high_water_ = -1;
  long first_step_ = -1;
  bool first_step_of_attempt_ = false;
  bool ended_ = false;
  bool diagnosing_ = false;
  int row_ = -1;  // index of the most recent incident row (attribution target), -1: none
  LedgerReport r_;
};

}  // namespace bulwark
