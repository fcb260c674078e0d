#include "agent/fault_detector.h"

#include <cmath>
#include <sstream>

#include "agent/log_classifier.h"

namespace bulwark {

void FaultDetector::StartAttempt(int attempt, const DetectorConfig& cfg,
                                 const std::vector<int>& ranks) {
  attempt_ = attempt;
  cfg_ = cfg;
  armed_ = true;
  ranks_.clear();
  const double now = clock_->NowMono();
  for (int r : ranks) ranks_[r].last_progress_mono = now;
}

FaultDetector::RankState* FaultDetector::Live(int rank) {
  if (!armed_) return nullptr;
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || it->second.reported || it->second.exited) return nullptr;
  return &it->second;
}

DetectedFault FaultDetector::Make(FaultKind kind, std::string subtype, int rank, double fault_time,
                                  std::string detail) {
  DetectedFault f;
  f.kind = kind;
  f.subtype = std::move(subtype);
  f.rank = rank;
  f.step = LastStep(rank);
  f.detect_time = clock_->NowWall();
  f.fault_time = fault_time > 0 ? std::min(fault_time, f.detect_time) : f.detect_time;
  f.detail = std::move(detail);
  ranks_[rank].reported = true;
  return f;
}

std::optional<DetectedFault> FaultDetector::OnStep(int rank, long step, double loss,
                                                   double sdk_time) {
  RankState* s = Live(rank);
  if (!s) return std::nullopt;
  const double now = clock_->NowMono();
  if (s->has_step) {
    s->intervals.push_back(now - s->last_progress_mono);
    while (s->intervals.size() > cfg_.step_history) s->intervals.pop_front();
    s->hang_timeout_s = -1;  // recomputed from the new intervals on the next check
  }
  s->has_step = true;
  s->last_step = step;
  s->last_progress_mono = now;
  if (std::isfinite(loss)) return std::nullopt;
  std::ostringstream d;
  d << "rank " << rank << " reported a non-finite loss (" << loss << ") at step " << step;
  auto f = Make(FaultKind::kNan, "nan", rank, sdk_time, d.str());
  f.step = step;
  return f;
}

std::optional<DetectedFault> FaultDetector::OnExit(int rank, const ExitInfo& exit) {
  RankState* s = Live(rank);
  if (!s) {
    auto it = ranks_.find(rank);
    if (it != ranks_.end()) it->second.exited = true;
    return std::nullopt;
  }
  s->exited = true;
  if (exit.ok()) return std::nullopt;
  std::string what = exit.Describe();
  return Make(FaultKind::kCrash, what, rank, 0, "rank " + std::to_string(rank) + " died: " + what);
}

void FaultDetector::OnFinished(int rank) {
  RankState* s = Live(rank);
  if (!s) return;
  s->finished = true;
  s->last_progress_mono = clock_->NowMono();
}

std::optional<DetectedFault> FaultDetector::OnLogLine(int rank, std::string_view line) {
  if (!Live(rank)) return std::nullopt;
  auto subtype = ClassifyLogLine(line);
  if (!subtype) return std::nullopt;
  std::string shown(line.substr(0, 300));
  return Make(FaultKind::kFatalLog, *subtype, rank, 0,
              "rank " + std::to_string(rank) + " logged a fatal error: " + shown);
}

double FaultDetector::HangTimeoutFor(int rank) const {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return -1;
  const RankState& s = it->second;
  if (s.finished) return cfg_.finished_exit_timeout_s;
  if (!s.has_step) return cfg_.startup_timeout_s;
  if (s.hang_timeout_s < 0) {
    FaultPolicySpec spec;
    spec.hang_timeout_floor_seconds = cfg_.hang_floor_s;
    spec.hang_timeout_multiplier = cfg_.hang_multiplier;
    s.hang_timeout_s = RecoveryPolicy::HangTimeout(spec, {s.intervals.begin(), s.intervals.end()});
  }
  return s.hang_timeout_s;
}

long FaultDetector::LastStep(int rank) const {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? -1 : it->second.last_step;
}

bool FaultDetector::HasStep(int rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second.has_step;
}

std::optional<DetectedFault> FaultDetector::CheckHangs() {
  if (!armed_) return std::nullopt;
  const double now = clock_->NowMono();
  std::vector<int> stalled;
  std::ostringstream d;
  for (auto& [rank, s] : ranks_) {
    if (s.reported || s.exited) continue;
    const double timeout = HangTimeoutFor(rank);
    const double idle = now - s.last_progress_mono;
    if (idle < timeout) continue;
    stalled.push_back(rank);
    d << (stalled.size() > 1 ? "; " : "") << "rank " << rank;
    if (s.finished) {
      d << " finished training but has not exited for " << idle << " s (timeout " << timeout
        << " s)";
      continue;
    }
    d << " made no progress for " << idle << " s (timeout " << timeout << " s, "
      << (s.has_step ? "last step " + std::to_string(s.last_step) : std::string("no step yet"))
      << ")";
  }
  if (stalled.empty()) return std::nullopt;
  int culprit = stalled.front();
  for (int r : stalled) {
    const RankState& a = ranks_[r];
    const RankState& b = ranks_[culprit];
    if (a.last_step < b.last_step ||
        (a.last_step == b.last_step && a.last_progress_mono < b.last_progress_mono)) {
      culprit = r;
    }
  }
  const double fault_time = clock_->NowWall() - (now - ranks_[culprit].last_progress_mono);
  const bool startup = !ranks_[culprit].has_step;
  auto f = Make(FaultKind::kHang, startup ? "startup_timeout" : "no_progress", culprit, fault_time,
                d.str());
  for (int r : stalled) ranks_[r].reported = true;
  f.stalled_ranks = std::move(stalled);
  return f;
}

}  // namespace bulwark
