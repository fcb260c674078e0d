#include "policy/regroup.h"

#include <algorithm>

namespace bulwark {
namespace {

std::string List(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

void AddNode(int node, int procs_per_node, int world, std::set<int>* out) {
  if (node < 0) return;
  for (int l = 0; l < procs_per_node; ++l) {
    const int r = node * procs_per_node + l;
    if (r < world) out->insert(r);
  }
}

}  // namespace

RegroupPlan PlanRegroup(const Incident& inc, const Decision& d, const RegroupInput& in) {
  RegroupPlan p;
  auto everyone = [&] {
    p.replace.clear();
    p.keep.clear();
    for (int r = 0; r < in.world_size; ++r) p.replace.push_back(r);
  };
  if (d.action == Action::kGiveUp) {
    everyone();
    p.reason = "the job stops";
    return p;
  }
  // The culprits: who must get a new process whatever else happens.
  std::set<int> culprits(in.dead.begin(), in.dead.end());
  bool located = true;
  switch (inc.kind) {
    case FaultKind::kCrash:
      if (inc.subtype == kCollectiveErrorSubtype) break;
      if (inc.rank >= 0) culprits.insert(inc.rank);
      located = inc.rank >= 0;
      break;
    case FaultKind::kHang:
      if (inc.rank >= 0) culprits.insert(inc.rank);
      culprits.insert(in.stopped.begin(), in.stopped.end());
      located = inc.rank >= 0 || !in.stopped.empty();
      break;
    case FaultKind::kFatalLog:
      if (inc.rank >= 0) culprits.insert(inc.rank);
      AddNode(inc.rank < 0 ? inc.node : -1, in.procs_per_node, in.world_size, &culprits);
      located = inc.rank >= 0 || inc.node >= 0;
      break;
    case FaultKind::kNodeLost:
      AddNode(inc.node, in.procs_per_node, in.world_size, &culprits);
      located = inc.node >= 0;
      break;
    case FaultKind::kNan:
      break;               // nobody is broken: every rank restores the step before the NaN
    case FaultKind::kSdc:  // the node computes wrong results; every rank restores
      AddNode(inc.node, in.procs_per_node, in.world_size, &culprits);
      if (inc.rank >= 0) culprits.insert(inc.rank);
      located = inc.rank >= 0 || inc.node >= 0;
      break;
  }
  if (d.action == Action::kReplaceNode) {
    AddNode(d.replace_node, in.procs_per_node, in.world_size, &culprits);
  }
  std::vector<int> keep, not_capable;
  for (int r = 0; r < in.world_size; ++r) {
    if (culprits.count(r)) continue;
    keep.push_back(r);
    if (!in.capable.count(r)) not_capable.push_back(r);
  }
  if (!in.enabled) {
    everyone();
    p.reason = "every rank restarts (faultPolicy.inProcessRestart is false)";
  } else if (!located) {
    everyone();
    p.reason = "every rank restarts: the fault is not tied to a rank or node";
  } else if (keep.empty()) {
    everyone();
    p.reason = "every rank restarts: no rank survived the fault";
  } else if (!not_capable.empty()) {
    everyone();
    p.reason = "every rank restarts: rank(s) " + List(not_capable) +
               " do not run under bulwark.run, so they cannot recover in process";
  } else {
    p.in_process = true;
    p.keep = keep;
    p.replace.assign(culprits.begin(), culprits.end());
    p.reason = "rank(s) " + List(keep) + " keep their processes and re-form the process group";
    p.reason += p.replace.empty() ? "; no process is replaced"
                                  : "; rank(s) " + List(p.replace) + " get new processes";
  }
  return p;
}

}  // namespace bulwark
