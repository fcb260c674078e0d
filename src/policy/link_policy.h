// Stop-diagnose and the link check (docs/diagnosis.md): which diagnoses test the links
// among the nodes, and what a persistent straggler sets off.
//
// A straggler (the metric verdict: one rank slower than 0.75 x the fastest for several
// evaluations) is not restarted on a hunch. In synchronous training it costs the whole
// job (1 - score) of its throughput while it lasts; a swap for a standby costs the
// rework since the last checkpoint plus a relaunch, and does not help when the cause is
// the data, the program or a co-located job, which follow the job to any node. So the
// straggler's node is tested in place while the job goes on -- its links against a
// reference peer (a ready warm standby, else another node of the job), its compute and
// its checkpoint disks -- and swapped for a standby only when a check fails (the node
// is quarantined and the job resumes from its newest checkpoint without it).
//
// Pure and clock-free, so the simulator can share it; it does not model stragglers or
// diagnosis yet, and only the controller calls it. Thread-compatible.
#pragma once

#include <string>

#include "policy/recovery_policy.h"

namespace bulwark {

// Whether a diagnosis for `inc` includes the link check among the involved nodes: a
// hang, a collective that failed (collective_error) and an NCCL timeout involve every
// node of the collective, so the suspect's links are tested against the other nodes
// when there are any.
bool WantsLinkCheck(const Incident& inc);

struct StragglerFacts {
  int rank = -1;
  int node = -1;                  // its node slot
  double score = 1;               // its speed relative to the fastest rank
  bool diagnose_enabled = true;   // faultPolicy.diagnoseSuspectNodes
  int reference_peers = 0;        // ready standbys + other connected nodes of the job
  bool node_testable = true;      // its agent is connected and not being tested already
  bool link_session_free = true;  // no other link check runs
};

struct StragglerDecision {
  bool test = false;   // test the node in place, with the link check
  std::string reason;  // why, or why not
};

StragglerDecision DecideStraggler(const StragglerFacts& f);

}  // namespace bulwark
