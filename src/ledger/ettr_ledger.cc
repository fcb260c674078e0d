#include "ledger/ettr_ledger.h"

#include <algorithm>
#include <cmath>

namespace bulwark {

static_assert(static_cast<size_t>(TimeCategory::kIdle) + 1 == kTimeCategoryCount,
              "kTimeCategoryCount counts TimeCategory's enumerators");

namespace {

constexpr TimeCategory kAllCategories[] = {
    TimeCategory::kProductive, TimeCategory::kCheckpoint, TimeCategory::kDetection,
    TimeCategory::kRestart,    TimeCategory::kReinit,     TimeCategory::kRework,
    TimeCategory::kDiagnosis,  TimeCategory::kIdle,
};

// Clamps a caller-provided duration into [0, limit]; non-finite -> 0.
double ClampDuration(double d, double limit) {
  if (!std::isfinite(d) || d <= 0) return 0;
  return std::min(d, limit);
}

}  // namespace

const char* TimeCategoryName(TimeCategory c) {
  switch (c) {
    case TimeCategory::kProductive:
      return "productive";
    case TimeCategory::kCheckpoint:
      return "checkpoint";
    case TimeCategory::kDetection:
      return "detection";
    case TimeCategory::kRestart:
      return "restart";
    case TimeCategory::kReinit:
      return "reinit";
    case TimeCategory::kRework:
      return "rework";
    case TimeCategory::kDiagnosis:
      return "diagnosis";
    case TimeCategory::kIdle:
      return "idle";
  }
  return "unknown";
}

EttrLedger::EttrLedger(double t_start)
    : start_(std::isfinite(t_start) ? t_start : 0), cursor_(start_) {
  for (TimeCategory c : kAllCategories) r_.seconds[c] = 0;
}

double EttrLedger::Attribute(double until, TimeCategory c) {
  if (!std::isfinite(until) || until <= cursor_) return 0;
  const double d = until - cursor_;
  r_.seconds[c] += d;
  cursor_ = until;
  return d;
}

void EttrLedger::OnAttemptLaunched(double t, long resume_step) {
  if (ended_) return;
  IncidentRow* row = Row();
  CloseOpen(t);  // a launch before the first step of the last one: kReinit
  diagnosing_ = false;
  if (phase_ == Phase::kRestarting && row) row->resumed_from_step = resume_step;
  phase_ = Phase::kStarting;
  first_step_of_attempt_ = true;
}

void EttrLedger::OnAttemptAdopted(double t, long high_water_step) {
  if (ended_) return;
  CloseOpen(t);
  high_water_ = std::max(high_water_, high_water_step);
  phase_ = Phase::kRunning;
  first_step_of_attempt_ = false;
}

void EttrLedger::OnStep(double t_end, long step, double step_seconds, double ckpt_stall_seconds,
                        double tokens) {
  if (ended_ || phase_ == Phase::kRestarting) return;
  if (!std::isfinite(t_end) || t_end < cursor_) t_end = cursor_;
  const double interval = t_end - cursor_;
  const double dur = ClampDuration(step_seconds, interval);
  const double stall = ClampDuration(ckpt_stall_seconds, dur);
  const double step_start = t_end - dur;
  IncidentRow* row = Row();

  // Leading remainder: startup of the attempt, or a gap between steps.
  if (first_step_of_attempt_) {
    const double d = Attribute(step_start, TimeCategory::kReinit);
    if (row) row->reinit_s += d;
  } else {
    Attribute(step_start, TimeCategory::kIdle);
  }
  // The step itself: compute time first, then the checkpoint stall (order is immaterial
  // to the totals; both lie inside [step_start, t_end]).
  const bool is_new = step > high_water_;
  const double compute_end = t_end - stall;
  if (is_new) {
    Attribute(compute_end, TimeCategory::kProductive);
    if (std::isfinite(tokens) && tokens > 0) r_.tokens += tokens;
    if (first_step_ < 0) first_step_ = step;
    high_water_ = step;
  } else {
    const double d = Attribute(compute_end, TimeCategory::kRework);
    ++r_.steps_reworked;
    if (row) {
      row->rework_s += d;
      ++row->rework_steps;
    }
  }
  Attribute(t_end, TimeCategory::kCheckpoint);
  phase_ = Phase::kRunning;
  first_step_of_attempt_ = false;
}

void EttrLedger::OnFault(const Incident& incident, const std::string& action) {
  if (ended_) return;
  double fault_time = std::isfinite(incident.fault_time) ? incident.fault_time : cursor_;
  fault_time = std::max(fault_time, cursor_);
  double detect_time = std::isfinite(incident.detect_time) ? incident.detect_time : fault_time;
  detect_time = std::max(detect_time, fault_time);

  // Time up to the fault belongs to what was going on; a startup cut short is the
  // previous incident's reinit cost, a step cut short is this fault's rework.
  if (phase_ != Phase::kRunning) CloseOpen(fault_time);  // a running step: rework, below

  IncidentRow row;
  row.incident = incident;
  row.action = action;
  if (phase_ == Phase::kRunning) row.rework_s = Attribute(fault_time, TimeCategory::kRework);
  row.detection_s = Attribute(detect_time, TimeCategory::kDetection);
  r_.incidents.push_back(std::move(row));
  row_ = static_cast<int>(r_.incidents.size()) - 1;
  phase_ = Phase::kRestarting;
  first_step_of_attempt_ = false;
}

bool EttrLedger::RecastLastFault(const Incident& root, const std::string& action) {
  if (row_ < 0 || row_ >= static_cast<int>(r_.incidents.size())) return false;
  r_.incidents[row_].incident = root;
  r_.incidents[row_].action = action;
  return true;
}

void EttrLedger::OnPlannedRestart(double t) {
  if (ended_) return;
  if (!std::isfinite(t)) t = cursor_;
  if (phase_ == Phase::kRunning) {
    Attribute(t, TimeCategory::kRework);
  } else {
    CloseOpen(t);
  }
  row_ = -1;
  phase_ = Phase::kRestarting;
  first_step_of_attempt_ = false;
}

void EttrLedger::CloseOpen(double t) {
  IncidentRow* row = Row();
  switch (phase_) {
    case Phase::kRestarting: {
      if (diagnosing_) {
        const double d = Attribute(t, TimeCategory::kDiagnosis);
        if (row) row->diagnosis_s += d;
        break;
      }
      const double d = Attribute(t, TimeCategory::kRestart);
      if (row) row->restart_s += d;
      break;
    }
    case Phase::kStarting: {
      const double d = Attribute(t, TimeCategory::kReinit);
      if (row) row->reinit_s += d;
      break;
    }
    case Phase::kIdle:
    case Phase::kRunning:
      Attribute(t, TimeCategory::kIdle);
      break;
  }
}

void EttrLedger::OnDiagnosisWait(double t, bool waiting) {
  if (ended_ || waiting == diagnosing_) return;
  if (!std::isfinite(t)) t = cursor_;
  if (phase_ == Phase::kRestarting) CloseOpen(t);
  diagnosing_ = waiting;
}

void EttrLedger::OnEnd(double t) {
  if (ended_) return;
  CloseOpen(t);
  ended_ = true;
}

LedgerReport EttrLedger::Report(double now) const {
  EttrLedger copy = *this;
  if (!copy.ended_) copy.CloseOpen(now);
  LedgerReport out = std::move(copy.r_);
  out.wall_s = copy.cursor_ - start_;
  out.steps_completed = first_step_ >= 0 ? high_water_ - first_step_ + 1 : 0;
  return out;
}

LedgerReport EttrLedger::Settled() const {
  LedgerReport out = r_;
  out.wall_s = cursor_ - start_;
  out.steps_completed = first_step_ >= 0 ? high_water_ - first_step_ + 1 : 0;
  return out;
}

}  // namespace bulwark
