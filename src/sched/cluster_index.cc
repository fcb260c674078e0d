#include "sched/cluster_index.h"

#include <algorithm>
#include <map>
#include <utility>

namespace bulwark::sched::internal {
namespace {

int LevelIdx(TopologyLevel l) { return static_cast<int>(l); }

}  // namespace

void ClusterIndex::Build(const std::vector<NodeSpec>& nodes, const std::vector<int>& type_of,
                         int types) {
  slice_of_type_pool_.assign(static_cast<size_t>(types) * 3, -1);
  std::map<std::string, int> order[3];  // global first appearance per level name
  std::map<std::pair<int, std::string>, int> dom_of[3];
  node_rack_.assign(nodes.size(), -1);
  is_free_.assign(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    const int tp = type_of[i] * 3 + static_cast<int>(n.pool);
    int& slice = slice_of_type_pool_[tp];
    if (slice < 0) {
      slice = static_cast<int>(roots_.size());
      Domain root;
      root.slice = slice;
      roots_.push_back(static_cast<int>(doms_.size()));
      doms_.push_back(std::move(root));
      for (int l = 0; l < 3; ++l) by_free_.emplace_back();
    }
    const std::string names[3] = {n.zone + "/" + n.block + "/" + n.rack, n.zone + "/" + n.block,
                                  n.zone};
    int parent = roots_[slice];
    for (int l = 2; l >= 0; --l) {  // zone, block, rack
      auto [oit, onew] = order[l].emplace(names[l], static_cast<int>(order[l].size()));
      (void)onew;
      auto [it, fresh] = dom_of[l].emplace(std::make_pair(slice, names[l]), 0);
      if (fresh) {
        it->second = static_cast<int>(doms_.size());
        Domain d;
        d.level = static_cast<TopologyLevel>(l);
        d.slice = slice;
        d.order = oit->second;
        d.parent = parent;
        d.name = names[l];
        doms_.push_back(std::move(d));
        doms_[parent].children.push_back(it->second);
        by_free_[slice * 3 + l].insert({0, oit->second, it->second});
      }
      parent = it->second;
    }
    node_rack_[i] = parent;
  }
}

int ClusterIndex::Slice(int type, Pool pool) const {
  if (type < 0) return -1;
  const size_t i = static_cast<size_t>(type) * 3 + static_cast<size_t>(pool);
  return i < slice_of_type_pool_.size() ? slice_of_type_pool_[i] : -1;
}

int ClusterIndex::DomainOf(int node, TopologyLevel level) const {
  int d = node_rack_[node];
  for (int l = 0; l < LevelIdx(level); ++l) d = doms_[d].parent;
  return d;
}

void ClusterIndex::Adjust(int d, int delta) {
  Domain& dom = doms_[d];
  if (dom.level != TopologyLevel::kAny) {
    auto& set = by_free_[dom.slice * 3 + LevelIdx(dom.level)];
    set.erase({dom.free, dom.order, d});
    set.insert({dom.free + delta, dom.order, d});
  }
  dom.free += delta;
}

void ClusterIndex::AddFree(int node) {
  is_free_[node] = 1;
  int d = node_rack_[node];
  doms_[d].free_nodes.insert(node);
  for (; d >= 0; d = doms_[d].parent) Adjust(d, +1);
}

void ClusterIndex::RemoveFree(int node) {
  is_free_[node] = 0;
  int d = node_rack_[node];
  doms_[d].free_nodes.erase(node);
  for (; d >= 0; d = doms_[d].parent) Adjust(d, -1);
}

int ClusterIndex::BestFit(int slice, TopologyLevel level, int need) const {
  const auto& set = by_free_[slice * 3 + LevelIdx(level)];
  auto it = set.lower_bound({std::max(need, 1), -1, -1});
  return it == set.end() ? -1 : std::get<2>(*it);
}

int ClusterIndex::Largest(int slice, TopologyLevel level) const {
  const auto& set = by_free_[slice * 3 + LevelIdx(level)];
  if (set.empty()) return -1;
  const int top = std::get<0>(*set.rbegin());
  if (top <= 0) return -1;
  // Lowest order among those with the top count.
  return std::get<2>(*set.lower_bound({top, -1, -1}));
}

void ClusterIndex::Take(int d, int k, std::vector<int>* out) {
  if (k <= 0) return;
  Domain& dom = doms_[d];
  if (dom.level == TopologyLevel::kRack) {
    std::vector<int> picked;
    for (auto it = dom.free_nodes.begin(); it != dom.free_nodes.end() && k > 0; ++it, --k) {
      picked.push_back(*it);
    }
    for (int n : picked) {
      RemoveFree(n);
      out->push_back(n);
    }
    return;
  }
  std::vector<std::pair<int, int>> kids;  // (-free, order) -> visit order
  std::vector<int> ids;
  for (int c : dom.children) {
    if (doms_[c].free > 0) kids.push_back({-doms_[c].free, c});
  }
  std::sort(kids.begin(), kids.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return doms_[a.second].order < doms_[b.second].order;
  });
  for (const auto& [negfree, c] : kids) {
    if (k <= 0) break;
    const int n = std::min(k, -negfree);
    Take(c, n, out);
    k -= n;
  }
}

void ClusterIndex::TakeOutward(int d, int k, std::vector<int>* out) {
  for (; d >= 0 && k > 0; d = doms_[d].parent) {
    const int n = std::min(k, doms_[d].free);
    Take(d, n, out);
    k -= n;
  }
}

int ClusterIndex::LowestFree(int d) const {
  const Domain& dom = doms_[d];
  if (dom.free == 0) return -1;
  if (dom.level == TopologyLevel::kRack) return *dom.free_nodes.begin();
  int best = -1;
  for (int c : dom.children) {
    const int n = LowestFree(c);
    if (n >= 0 && (best < 0 || n < best)) best = n;
  }
  return best;
}

}  // namespace bulwark::sched::internal
