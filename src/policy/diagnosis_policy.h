// Stop-diagnose (docs/diagnosis.md): which incidents send a node to its diagnostics.
//
// A fault whose cause is certain (a Python exception, an out-of-memory, a NaN, a node
// that is gone) is recovered as it is. One whose cause may be the machine -- a hang, a
// crash by a hardware signal, a collective that failed, a GPU error, silent data
// corruption, a checkpoint write that found its disk full (fatal log disk_full), or
// any fault on a node that already had one -- takes the node out of the
// job to test it: on a warm standby's arrival in parallel with the restart, else before
// the relaunch. The node rejoins when its checks pass and is quarantined when one fails.
// A NaN is tested only when the policy replays its steps on a standby (the node is out
// of the job then anyway; the replay's verdict may still quarantine it).
//
// Pure and clock-free; shared by the controller and the simulator. Thread-compatible.
#pragma once

#include <string>

#include "policy/recovery_policy.h"

namespace bulwark {

struct DiagnosisDecision {
  bool run = false;
  int node = -1;       // the node slot to test
  std::string reason;  // why it is tested, or why not ("" when not relevant)
};

// `earlier_on_node`: incidents before this one (NaNs and node losses excluded) on the
// machine that now serves inc.node. `decision`: the policy's decision for inc.
DiagnosisDecision ShouldDiagnose(const Incident& inc, int earlier_on_node,
                                 const Decision& decision);

}  // namespace bulwark
