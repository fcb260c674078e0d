// Which changes to a running job are applied in place (`bulwark update`, a TrainJob
// edited while it runs). Pure.
//
// In place: the rank command (`command`, `args`), its environment (`env`) and its
// working directory (`workdir`) — the code and its version. The ranks finish their
// step, snapshot, and the next generation runs the new code from the same step
// (docs/job-spec.md, "Updating a running job"). Everything else describes the job's
// shape or where its state lives and is refused with the field and the reason.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "spec/job_spec.h"

namespace bulwark {

struct JobUpdate {
  std::vector<std::string> fields;  // what changes: "command", "args", "env", "workdir"
  std::string Describe() const;     // "args, env"
};

// The update from `running` to `next`. InvalidArgument, one line per refused field
// ("nodes: 2 -> 3 cannot change in place: ...; start a new job"), when anything but
// the in-place fields differs; FailedPrecondition when nothing changes.
Result<JobUpdate> PlanJobUpdate(const JobSpec& running, const JobSpec& next);

}  // namespace bulwark
