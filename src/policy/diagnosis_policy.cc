#include "policy/diagnosis_policy.h"

#include "policy/regroup.h"

namespace bulwark {
namespace {

// A signal that a program error raises and a failing machine raises too.
bool HardwareSignal(const std::string& subtype) {
  for (const char* s : {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"}) {
    if (subtype == s) return true;
  }
  return false;
}

}  // namespace

DiagnosisDecision ShouldDiagnose(const Incident& inc, int earlier_on_node,
                                 const Decision& decision) {
  DiagnosisDecision d;
  d.node = inc.node;
  if (decision.action == Action::kGiveUp || inc.node < 0) return d;
  switch (inc.kind) {
    case FaultKind::kNodeLost:
      d.reason = "the node is gone: nothing is left to test";
      return d;
    case FaultKind::kNan:
      if (decision.action != Action::kReplaceNode) {
        d.reason = "a NaN is recovered by rolling back; the node is not suspect by itself";
        return d;
      }
      // The replay runs on a standby (RecoveryPolicy): the node is out of the job anyway.
      d.reason = "a NaN whose steps are replayed on a standby: the node is tested meanwhile";
      break;
    case FaultKind::kSdc:
      d.reason =
          "its parameters diverged without a crash: silent data corruption is a "
          "machine fault until its compute check passes";
      break;
    case FaultKind::kHang:
      d.reason = "a hang has no certain cause: the compute and the disks are tested";
      break;
    case FaultKind::kFatalLog:
      if (inc.subtype == "oom") {
        d.reason = "out of memory is the program's, not the machine's";
        if (earlier_on_node == 0) return d;
      } else if (inc.subtype == "disk_full") {
        d.reason = "a checkpoint write found no space: the node's disks are tested";
      } else {
        d.reason = "a " + (inc.subtype.empty() ? std::string("fatal") : inc.subtype) +
                   " error can be the GPU's or the link's";
      }
      break;
    case FaultKind::kCrash:
      if (inc.subtype == kCollectiveErrorSubtype) {
        d.reason = "a collective failed with no other fault: the links are suspect";
      } else if (HardwareSignal(inc.subtype)) {
        d.reason = inc.subtype + " is raised by bad memory as well as by bad code";
      } else {
        d.reason = "the exit (" + (inc.subtype.empty() ? std::string("unknown") : inc.subtype) +
                   ") has a software cause or an outside one";
        if (earlier_on_node == 0) return d;
      }
      break;
  }
  if (earlier_on_node > 0) {
    d.reason = "the machine had " + std::to_string(earlier_on_node) + " earlier fault" +
               (earlier_on_node == 1 ? "" : "s") + "; " + d.reason;
  }
  d.run = true;
  return d;
}

}  // namespace bulwark
