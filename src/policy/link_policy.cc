#include "policy/link_policy.h"

#include <cstdio>

#include "policy/regroup.h"

namespace bulwark {

bool WantsLinkCheck(const Incident& inc) {
  return inc.kind == FaultKind::kHang ||
         (inc.kind == FaultKind::kCrash && inc.subtype == kCollectiveErrorSubtype) ||
         (inc.kind == FaultKind::kFatalLog && inc.subtype == "nccl_timeout");
}

StragglerDecision DecideStraggler(const StragglerFacts& f) {
  StragglerDecision d;
  char pace[96];
  std::snprintf(pace, sizeof pace, "the job runs at %.0f%% of its pace while it lasts",
                100 * f.score);
  const std::string cost = std::string(pace) +
                           "; a swap on a hunch would cost the rework since the last checkpoint "
                           "and not help if the cause is the data or the program";
  if (f.node < 0) {
    d.reason = "the straggler's node is not known";
  } else if (!f.diagnose_enabled) {
    d.reason = cost + "; not tested: faultPolicy.diagnoseSuspectNodes is false";
  } else if (f.reference_peers <= 0) {
    d.reason = cost + "; not tested: no warm standby or other node to test its links against";
  } else if (!f.node_testable) {
    d.reason = cost + "; not tested: its agent is not connected or is being tested already";
  } else if (!f.link_session_free) {
    d.reason = cost + "; not tested now: another link check is running";
  } else {
    d.test = true;
    d.reason = cost +
               ": its node is tested in place while the job goes on (links against a "
               "reference peer, compute, checkpoint disks) and swapped for a standby only if "
               "a check fails";
  }
  return d;
}

}  // namespace bulwark
