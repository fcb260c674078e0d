// Which processes a recovery replaces: the in-process recovery plan. Pure.
//
// After RecoveryPolicy::Decide has chosen what to do about an incident, PlanRegroup
// decides how: whether the surviving ranks keep their processes and re-form their
// process group for the next generation (in process), or every rank is stopped and
// started again (the warm pool still shortens that). The culprits always get new
// processes: the crashed rank, the hung rank and any rank found stopped, the rank that
// logged a fatal error (its CUDA context may be poisoned), the ranks of a lost or
// replaced node. A NaN replaces nobody: every rank re-enters and restores the step
// before it. The controller calls it for every decision.
// Thread-compatible: no state.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "policy/recovery_policy.h"

namespace bulwark {

struct RegroupInput {
  bool enabled = true;  // faultPolicy.inProcessRestart
  int world_size = 1;
  int procs_per_node = 1;
  // Ranks whose SDK runs the training function in generations (bulwark.run) and that
  // said so in the current attempt.
  std::set<int> capable;
  // Ranks known dead already (exited, or on a node that is gone).
  std::set<int> dead;
  // Hang: ranks found stopped (state T) when the stacks were captured.
  std::set<int> stopped;
};

struct RegroupPlan {
  bool in_process = false;
  std::vector<int> replace;  // ranks that get a new process (those alive are killed)
  std::vector<int> keep;     // ranks that keep their process (in process only)
  std::string reason;        // one sentence, for the Decision event and the report
};

// Subtypes of incidents that no rank caused: a collective failed on every survivor
// (the peer that left is reported on its own) — nobody is replaced for it.
inline constexpr const char* kCollectiveErrorSubtype = "collective_error";

RegroupPlan PlanRegroup(const Incident& incident, const Decision& decision, const RegroupInput& in);

}  // namespace bulwark
