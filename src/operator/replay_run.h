// A TrainJob with spec.replayOf (docs/diagnosis.md, "On Kubernetes"): the operator's
// counterpart of `bulwark replay`. The TrainJob named there ran under this operator, so
// its store (<state_dir>/<namespace>/<name>/bulwark.db) holds the incident's replay
// bundle; its checkpoint is on the job's shared volume, which the replay's pods mount
// too (the replay TrainJob is a copy of the original's spec).
//
// PrepareReplayRun reads the bundle and turns the TrainJob into the re-run: the
// recorded job's checkpoint directory, read and never written (no checkpoint is due
// before the fault's step; no object or shared tier), no chaos (injected faults are
// outside events, not the program's), no restart budget, standbys or diagnostics (a
// fault ends the replay: it came back or it did not). It returns what the controller
// checks (ControllerOptions::replay). Pure but for reading the store; thread-compatible.
#pragma once

#include <string>

#include "common/status.h"
#include "controller/controller.h"
#include "trainjob/trainjob.h"

namespace bulwark::op {

struct ReplayRun {
  ControllerOptions::Replay replay;
  std::string what;  // "incident 1 of 'gpt' (nan (nan) on rank 0 at step 37)"
  std::string code;  // how the image compares with the incident's
};

// Errors name the field and the fix: spec.replayOf.trainJob (no such job ran under
// this operator), spec.replayOf.incident (out of range; no bundle; no checkpoint before
// the fault), spec.nodes (another world size than the incident's), spec.pod.image
// (another image than the incident's, unless replayOf.allowCodeChange).
Result<ReplayRun> PrepareReplayRun(const std::string& state_dir, trainjob::TrainJob* tj);

}  // namespace bulwark::op
