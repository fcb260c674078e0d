// The TrainJob status the operator writes: phase, conditions, progress, checkpoint and
// ETTR summary (docs/trainjob.md, "Status"). Pure: the observed state and the time come
// in, the status object goes out; lastTransitionTime changes only when a condition's
// status flips, as Kubernetes' condition conventions require.
#pragma once

#include <string>
#include <vector>

#include "common/json_util.h"
#include "ledger/ettr_ledger.h"

namespace bulwark::op {

enum class Phase { kPending, kAdmitted, kRunning, kRestarting, kSucceeded, kFailed };
const char* PhaseName(Phase p);  // "Pending", ...

struct Observed {
  Phase phase = Phase::kPending;
  // Why it is in this phase: a CamelCase reason and a sentence (the scheduler's reason
  // while pending, the incident while restarting, the diagnosis on failure).
  std::string reason;
  std::string message;
  int restarts = 0;
  long current_step = -1;
  long checkpoint_step = -1;  // newest committed
  std::string checkpoint_tier;
  double checkpoint_time = 0;
  std::vector<std::string> nodes, standby;  // admitted placement (node names)
  std::string admission_reason;
  bool has_ledger = false;
  LedgerReport ledger;
  std::string metrics_text;  // the job's Prometheus series (RenderJobMetrics)
  // The newest incident as the controller records it (null: none): status.lastIncident.
  Json last_incident;
  int incidents = 0;  // how many so far (its number)
  // A replay's outcome (spec.replayOf), once it ended: status.replay. Null otherwise.
  Json replay;
  double start_time = 0;       // first admission (0: not yet)
  double completion_time = 0;  // terminal (0: not yet)
};

// The new `status` object from the previous one (may be null) and what is observed now.
Json BuildStatus(const Json& old_status, const Observed& o, long generation, double now);

// Whether two statuses differ in anything but progress counters (currentStep, ettr):
// those changes are written at once, progress only every few seconds.
bool MaterialChange(const Json& a, const Json& b);

// When a status write is due (a pure rule: the operator calls it for every observed
// change). A material change is written at once; a new currentStep (with its ETTR) at
// most every `progress_interval_s`; an ETTR-only change (no new step: the job waits for
// its pods, or is stopped) at most every max(progress, idle) seconds, so hundreds of
// waiting jobs do not rewrite their status many times a second. Never when nothing
// changed. `since_last_write_s` is the time since this job's last status write.
struct StatusWriteIntervals {
  double progress_s = 5;
  double idle_s = 60;
};
bool StatusWriteDue(const Json& old_status, const Json& next_status, double since_last_write_s,
                    const StatusWriteIntervals& intervals);

}  // namespace bulwark::op
