// `bulwark replay JOB INCIDENT` (docs/diagnosis.md, "Replay"): re-runs the steps before
// a recorded incident from the checkpoint its replay bundle names, on the local backend,
// and reports step by step whether every rank's loss matches the record bit for bit and
// whether the fault comes back.
//
// PlanReplay checks the bundle and prepares the run (a scratch directory under the
// job's run directory holding hard links to the checkpoint, so the job's own checkpoints
// are never written); the caller runs the planned job with a controller whose
// ControllerOptions::replay is plan.replay; FormatReplay prints the report's `replay`.
// Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "controller/controller.h"
#include "spec/job_spec.h"

namespace bulwark::cli {

struct ReplayFlags {
  std::string job;
  int incident = 0;   // 1-based, as `bulwark describe` numbers them
  std::string store;  // "" = the known stores (stores.h)
  bool allow_code_change = false;
  std::string output;  // "" (text) or "json"
  // Slurm hosts to re-run on, one per node of the incident, in slot order (inside an
  // allocation; empty = the allocation's first hosts, or this machine outside one).
  std::vector<std::string> nodes;
};

struct ReplayPlan {
  JobSpec spec;                      // the job to run: the recorded one, redirected
  ControllerOptions::Replay replay;  // what the controller checks
  std::string run_dir;               // scratch: logs, checkpoint links, store
  std::string store_path;            // the replay run's own store
  std::string job;                   // the recorded job's name
  int incident = 0;
  Json fault;                               // the incident as recorded
  std::string code_note;                    // how the code compares with the recorded digest
  std::vector<std::string> recorded_nodes;  // the nodes it ran on then (bundle "nodes")
  std::vector<std::string> hosts;           // ReplayFlags::nodes, checked
  std::string checkpoint_links;             // the checkpoint the re-run resumes from
};

// Everything the replay needs, or an error naming what is missing and the fix: an
// unknown job or incident number, an incident without a bundle (recorded before replay
// bundles existed) or without a checkpoint before the fault, a checkpoint retention
// removed, a spec that no longer parses, code that changed since (unless
// allow_code_change), --nodes naming another number of hosts than the incident had
// nodes, or a host twice.
Result<ReplayPlan> PlanReplay(const ReplayFlags& f);

// The text report of a replay run's `replay` section (report["replay"]).
std::string FormatReplay(const ReplayPlan& plan, const Json& outcome);

// 0: every compared loss was equal bit for bit (at least one was compared); 1 otherwise.
int ReplayExitCode(const Json& outcome);

}  // namespace bulwark::cli
