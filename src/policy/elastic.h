// When an elastic job resizes (docs/job-spec.md, "Elastic jobs"). Pure.
//
// Shrink: a slot whose node has waited for capacity for `wait_seconds` is dropped, while
// the job has more than `min_nodes` (the earliest-waiting first, then the lowest slot).
// Grow: a job below its full size grows by one node when a connected standby is there
// beyond the spares it keeps, and no other planned restart is under way.
// The controller calls both from its loop; the simulator can call them the same way.
// Thread-compatible: no state.
#pragma once

#include <vector>

namespace bulwark {

struct SlotCapacity {
  bool waiting = false;  // its node waits for capacity (StartNode answered UNAVAILABLE)
  double since = 0;      // when that wait began (the controller's wall clock)
};

// The slots to drop now, ascending; empty = keep the size. `slots[s]` is slot s of
// the current size (slots.size() nodes).
std::vector<int> PlanShrink(const std::vector<SlotCapacity>& slots, int min_nodes,
                            double wait_seconds, double now);

struct GrowInput {
  int nodes = 0;           // current size
  int max_nodes = 0;       // the size the job grows back to (spec `nodes`)
  int standbys_ready = 0;  // connected nodes without a slot
  int spare_nodes = 0;     // standbys the job keeps (faultPolicy.spareNodes)
  bool busy = false;       // another planned restart (an update) is under way
};

bool ShouldGrow(const GrowInput& in);

}  // namespace bulwark
