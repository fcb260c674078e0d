// Resuming from memory: the newest step every rank can restore from the memory tier,
// and where each rank's copy comes from. Pure (no I/O, no clock): the controller
// builds the inputs from its agents' reports and turns the answer into `fetch` lists.
//
// A rank restores a step from
//   own      its node's ring (the rank's own snapshot, still on the node it runs on);
//   replica  a peer node's replica of its snapshot (peer push), preferring its own node's
//            replica store;
//   donor    another rank's own snapshot of that step, when the step is portable: every
//            rank that holds it holds a snapshot whose tensors are all replicated and
//            whose non-tensor state (the objects blob) has the same digest on every
//            one of them, so any copy is every rank's (a data-parallel state). This is
//            how a replaced rank resumes from the step its survivors were at when they
//            parked (they snapshot it on the way out), rather than from its own older
//            snapshot.
// The step chosen is the newest (at most max_step when max_step >= 0) that every rank
// can restore one of these ways; -1 when none.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace bulwark {

// What the memory tier holds for one rank (index = global rank).
struct RankMemory {
  std::string node;                     // the node that will run it (its slot's)
  std::set<long> own;                   // sealed on that node, its own snapshots
  std::map<long, std::string> replica;  // step -> the node holding a replica (best first)
  // Of `own`, the snapshots another rank may take: step -> digest of its non-tensor
  // state (ckpt::PortableDigest).
  std::map<long, uint64_t> portable;
};

struct MemorySource {
  enum class Kind { kOwn, kReplica, kDonor };
  Kind kind = Kind::kOwn;
  std::string node;     // where to fetch from (kReplica: the replica's node; kDonor: the
                        // donor's ring's node); the rank's own node for kOwn
  int donor_rank = -1;  // kDonor
};

struct MemoryResume {
  long step = -1;
  std::vector<MemorySource> sources;  // per rank, when step >= 0
  int donated = 0;                    // ranks that take a donor's copy
};

// The decision (see the file comment). Donors only when `allow_donors`. Among donors a
// rank prefers one whose ring is on its own node (no network), then the lowest rank.
MemoryResume ChooseMemoryResume(const std::vector<RankMemory>& ranks, long max_step,
                                bool allow_donors = true);

}  // namespace bulwark
