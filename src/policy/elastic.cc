#include "policy/elastic.h"

#include <algorithm>

namespace bulwark {

std::vector<int> PlanShrink(const std::vector<SlotCapacity>& slots, int min_nodes,
                            double wait_seconds, double now) {
  const int nodes = static_cast<int>(slots.size());
  if (min_nodes <= 0 || nodes <= min_nodes) return {};
  std::vector<int> due;
  for (int s = 0; s < nodes; ++s) {
    if (slots[s].waiting && now - slots[s].since >= wait_seconds) due.push_back(s);
  }
  std::stable_sort(due.begin(), due.end(),
                   [&](int a, int b) { return slots[a].since < slots[b].since; });
  due.resize(std::min(due.size(), static_cast<size_t>(nodes - min_nodes)));
  std::sort(due.begin(), due.end());
  return due;
}

bool ShouldGrow(const GrowInput& in) {
  return in.nodes < in.max_nodes && !in.busy && in.standbys_ready > in.spare_nodes;
}

}  // namespace bulwark
