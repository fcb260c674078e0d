// The live progress of a job in the terminal (docs/monitoring.md, "Terminal"):
// `bulwark run`'s status line and `bulwark top`. Pure: the caller supplies the values
// and the time.
#pragma once

#include <string>
#include <vector>

#include "common/json_util.h"

namespace bulwark::cli {

struct Progress {
  std::string phase;  // Running, Restarting, ...
  long step = -1;
  long total = 0;  // 0 = unknown
  double loss = __builtin_nan("");
  double tokens_per_s = 0;
  double mfu = 0;
  double ettr = 0;
  double steps_per_s = 0;  // recent rate, for the ETA (0 = unknown)
  int restarts = 0;
  long ckpt_step = -1;
  std::string ckpt_tier;
  double ckpt_age_s = -1;
  double cost = 0;
};

// One line, e.g. "Running  step 1234/1600 (77%)  loss 2.31  12.3k tok/s  MFU 41.2%
// ETTR 0.953  ETA 3m20s  ckpt 1230 disk 4s ago  restarts 2"; fields without a value
// are left out. At most `width` columns (0 = no limit).
std::string FormatProgress(const Progress& p, int width = 0);

// The run's last step from the trainer's arguments: the value of --steps, --max-steps,
// --max_steps, --total-steps, --total_steps, --train-steps, --num-steps or --iters
// (as "--x N" or "--x=N"); 0 if none.
long TotalStepsFromArgs(const std::vector<std::string>& args);

// From a controller's report (`bulwark top`, status_request): the fields it holds.
Progress ProgressFromReport(const Json& report, double now);

}  // namespace bulwark::cli
