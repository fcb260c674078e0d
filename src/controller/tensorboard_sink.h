// TensorBoardSink: a job's metrics as TensorBoard event files (docs/monitoring.md,
// "TensorBoard"), so `tensorboard --logdir DIR` shows a Bulwark run without any change
// to the training script. Tags: train/loss, train/learning_rate, train/grad_norm
// (global rank 0, per step), perf/tokens_per_second, perf/mfu, bulwark/ettr,
// bulwark/restarts (by step, at most every 2 s), bulwark/incidents (text, per incident).
//
// Bad input and I/O never reach the training: the directory is created on the first
// write; an error disables the sink and is reported once through `on_error`.
// Not thread-safe: the controller's thread owns it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "controller/job_metrics.h"
#include "tensorboard/tfevents.h"

namespace bulwark {

class TensorBoardSink {
 public:
  // `dir` "" = off.
  TensorBoardSink(std::string dir, std::function<void(const std::string&)> on_error);
  void OnStep(const StepSample& s);  // global rank 0's steps
  // `force`: write now (the job ended), not only every 2 s.
  void OnTick(double t, const JobMetricsSnapshot& m, const LedgerReport& settled, bool force);
  void OnIncident(long step, double t, const std::string& markdown);
  void Flush();
  bool enabled() const { return !dir_.empty() && !failed_; }
  const std::string& dir() const { return dir_; }

 private:
  bool Ready(double t);
  void Check(const Status& st);

  std::string dir_;
  std::function<void(const std::string&)> on_error_;
  std::unique_ptr<tensorboard::EventWriter> w_;
  bool failed_ = false;
  long last_step_ = -1;
  double last_tick_ = -1;
  long last_tick_step_ = -1;
};

}  // namespace bulwark
