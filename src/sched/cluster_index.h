// ClusterIndex: the incremental free-node index behind Scheduler (private header).
//
// Nodes are grouped into slices, one per (GPU type, pool). Inside a slice every rack,
// block and zone that holds a node of the slice is a domain, and the slice itself is
// the root domain (level kAny). Each domain keeps its count of free nodes (ready and
// unassigned); each rack keeps its free nodes in index order; each (slice, level)
// keeps its domains ordered by (free count, first appearance of the domain's name in
// the node vector), so best fit is one lower_bound. Every update is O(log) per level.
//
// Node picking rule (shared with the naive oracle, see docs/scheduler.md):
//   Take(domain, k): a rack gives its k lowest-index free nodes; a wider domain visits
//   its children by (free desc, first appearance asc) and takes min(rest, child free)
//   from each, recursively.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sched/scheduler.h"

namespace bulwark::sched::internal {

inline constexpr int kLevels = 4;  // rack, block, zone, any (slice root)

struct Domain {
  TopologyLevel level = TopologyLevel::kAny;
  int slice = -1;
  int order = 0;              // first appearance of the name among all nodes (tie-break)
  int parent = -1;            // -1 for the slice root
  std::vector<int> children;  // sub-domains in order of first appearance
  std::string name;           // "zone", "zone/block", "zone/block/rack"; "" for the root
  int free = 0;
  std::set<int> free_nodes;  // racks only
};

class ClusterIndex {
 public:
  // `type_of[i]` is the interned GPU type of nodes[i]. All nodes start not free.
  void Build(const std::vector<NodeSpec>& nodes, const std::vector<int>& type_of, int types);

  // Slice of (type, pool), or -1 when the cluster has no such node.
  int Slice(int type, Pool pool) const;
  int Root(int slice) const { return roots_[slice]; }
  int SliceFree(int slice) const { return doms_[roots_[slice]].free; }
  // The node's domain at `level` (kAny = slice root).
  int DomainOf(int node, TopologyLevel level) const;
  const Domain& Dom(int d) const { return doms_[d]; }

  bool IsFree(int node) const { return is_free_[node] != 0; }
  void AddFree(int node);     // requires !IsFree(node)
  void RemoveFree(int node);  // requires IsFree(node)

  // The domain of `level` (rack/block/zone) in `slice` with the fewest free nodes
  // >= need (ties: lowest order), or -1.
  int BestFit(int slice, TopologyLevel level, int need) const;
  // The domain of `level` with the most free nodes (ties: lowest order), or -1.
  int Largest(int slice, TopologyLevel level) const;

  // Removes k free nodes from domain d by the picking rule and appends them to *out.
  // Requires Dom(d).free >= k.
  void Take(int d, int k, std::vector<int>* out);
  // Takes k nodes as close to d as possible: from d, then its parent, ... the root.
  // Requires SliceFree >= k.
  void TakeOutward(int d, int k, std::vector<int>* out);
  // The lowest-index free node in domain d, or -1.
  int LowestFree(int d) const;

 private:
  using Key = std::tuple<int, int, int>;  // (free, order, domain)
  void Adjust(int d, int delta);

  std::vector<Domain> doms_;
  std::vector<int> roots_;               // per slice
  std::vector<int> slice_of_type_pool_;  // type * 3 + pool -> slice or -1
  std::vector<std::set<Key>> by_free_;   // (slice * 3 + level) -> keys, rack..zone
  std::vector<int> node_rack_;           // node -> rack domain
  std::vector<uint8_t> is_free_;
};

}  // namespace bulwark::sched::internal
