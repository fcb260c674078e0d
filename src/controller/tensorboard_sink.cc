#include "controller/tensorboard_sink.h"

#include <cmath>

namespace bulwark {

TensorBoardSink::TensorBoardSink(std::string dir, std::function<void(const std::string&)> on_error)
    : dir_(std::move(dir)), on_error_(std::move(on_error)) {}

bool TensorBoardSink::Ready(double t) {
  if (!enabled()) return false;
  if (w_) return true;
  auto w = tensorboard::EventWriter::Open(dir_, t);
  if (!w.ok()) {
    failed_ = true;
    if (on_error_) on_error_("TensorBoard event files off: " + w.status().message());
    return false;
  }
  w_ = std::move(*w);
  return true;
}

void TensorBoardSink::Check(const Status& st) {
  if (st.ok() || failed_) return;
  failed_ = true;
  w_.reset();
  if (on_error_) on_error_("TensorBoard event files off: " + st.message());
}

void TensorBoardSink::OnStep(const StepSample& s) {
  if (!Ready(s.t)) return;
  last_step_ = std::max(last_step_, s.step);
  Check(w_->Scalar("train/loss", s.step, s.loss, s.t));
  if (std::isfinite(s.lr) && w_) Check(w_->Scalar("train/learning_rate", s.step, s.lr, s.t));
  if (std::isfinite(s.grad_norm) && w_) {
    Check(w_->Scalar("train/grad_norm", s.step, s.grad_norm, s.t));
  }
}

void TensorBoardSink::OnTick(double t, const JobMetricsSnapshot& m, const LedgerReport& settled,
                             bool force) {
  constexpr double kPeriodS = 2;
  if (last_step_ < 0 || (!force && (last_step_ == last_tick_step_ ||
                                    (last_tick_ >= 0 && t - last_tick_ < kPeriodS)))) {
    return;
  }
  if (!Ready(t)) return;
  last_tick_ = t;
  last_tick_step_ = last_step_;
  Check(w_->Scalar("bulwark/ettr", last_step_, settled.ettr(), t));
  if (w_) Check(w_->Scalar("bulwark/restarts", last_step_, static_cast<double>(m.restarts), t));
  if (w_) Check(w_->Scalar("perf/tokens_per_second", last_step_, m.tokens_per_s, t));
  if (w_ && m.mfu > 0) Check(w_->Scalar("perf/mfu", last_step_, m.mfu, t));
  if (w_) Check(w_->Flush());
}

void TensorBoardSink::OnIncident(long step, double t, const std::string& markdown) {
  if (!Ready(t)) return;
  Check(w_->Text("bulwark/incidents", std::max(0L, step), markdown, t));
  if (w_) Check(w_->Flush());
}

void TensorBoardSink::Flush() {
  if (w_ && !failed_) Check(w_->Flush());
}

}  // namespace bulwark
