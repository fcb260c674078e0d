// A recorded incident's replay bundle (docs/diagnosis.md, "Replay and classification")
// read back for a re-run: by `bulwark replay` on this machine or a Slurm allocation, and
// by the operator for a TrainJob with spec.replayOf. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "controller/controller.h"
#include "store/store.h"

namespace bulwark {

struct ReplayBundle {
  ControllerOptions::Replay replay;  // what the re-run's controller checks; resume -1: scratch
  long fault_step = -1;
  long checkpoint_step = -1;  // the checkpoint the re-run resumes from; -1 = from scratch
  std::string checkpoint_dir;
  std::string spec_yaml;  // the job as written (a spec, or a TrainJob's manifest)
  std::string spec_path;  // where it was read from ("" = not from a file)
  Json code;              // {"dir", "digest", "files"} of the job's working directory
  int world = 0;          // ranks at the fault; 0 = not recorded
  int procs_per_node = 0;
  std::vector<std::string> nodes;  // the nodes it ran on, by slot
};

// "nan (nan) on rank 0": an incident's kind, subtype and rank, for messages.
std::string DescribeIncident(const Json& incident);

// The incidents of `job` as `bulwark describe` numbers them (from 1): the report's rows
// when the job finished, else the store's records less the secondary ones. Records that
// are not JSON objects are skipped.
std::vector<Json> RecordedIncidents(Store* store, const JobRecord& job);

// "incident 1 of 'gpt' (nan (nan) on rank 0 at step 37)".
std::string IncidentTitle(const Json& incident, int number, const std::string& job);

// A replay outcome's verdict, the "  fault:" and "  cause:" lines of `bulwark replay`'s
// report, from the outcome's fields (fault_came_back, passed, fault_step, evidence,
// cause, and ended_by when known).
std::string ReplayVerdictLines(const Json& outcome);
// The exit rule of `bulwark replay`: at least one loss compared, every one equal.
bool ReplayAllEqual(const Json& outcome);

// The bundle of a recorded incident (its JSON in the store), or an error prefixed with
// `what` (e.g. "incident 1 of 'gpt' (nan on rank 0 at step 37)") naming what is
// missing: no bundle (recorded before bundles existed), no checkpoint before the fault
// and not all losses since step 1, a malformed field.
Result<ReplayBundle> ReadReplayBundle(const Json& incident, const std::string& what);

}  // namespace bulwark
