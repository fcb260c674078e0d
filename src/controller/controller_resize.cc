// Controller: elastic resize (docs/job-spec.md, "Elastic jobs").
//
// A job with `elastic: {minNodes: M}` runs on `nodes` (N) nodes while it can:
//   * shrink: when a slot's node waits for capacity (StartNode answered UNAVAILABLE:
//     no standby, no free machine) for `elastic.waitSeconds`, and the job has more than M
//     nodes, that slot is dropped. The remaining nodes keep their order and are
//     renumbered (slots 0..k-1, so the ranks after the dropped slot shift down); the node
//     that waits for capacity stays requested as a standby. The next generation runs on
//     k nodes: the survivors keep their processes (a kept rank learns its new RANK and
//     WORLD_SIZE from its `generation`), the step resumes from the committed disk tier
//     (memory snapshots belong to the old world's ranks), re-sharded by the reader.
//   * grow: while the job runs on fewer than N nodes, a connected standby beyond the
//     configured `spareNodes` (the node that waited for capacity, once it came) joins at
//     the next slot at a step boundary: every rank parks, the next generation runs on
//     k+1 nodes; existing ranks keep their numbers.
// Each resize is a planned restart for the ledger (no incident) and is listed in the
// report's `resizes`.
#include <algorithm>

#include "controller/controller_impl.h"
#include "policy/elastic.h"

namespace bulwark {

void ControllerImpl::SetSize(std::vector<std::string> slots, double now, const std::string& why) {
  const int from = spec_.nodes;
  slots_ = std::move(slots);
  spec_.nodes = static_cast<int>(slots_.size());
  catalog_->SetWorld(spec_.world_size());
  world_changed_ = true;
  resizes_.push_back({{"at_s", now - start_},
                      {"from_nodes", from},
                      {"to_nodes", spec_.nodes},
                      {"at_step", high_water_},
                      {"why", why}});
}

bool ControllerImpl::MaybeShrink(double now) {
  if (!spec_.elastic.enabled()) return false;
  std::vector<SlotCapacity> cap(spec_.nodes);
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (it == nodes_.end()) continue;
    cap[s] = {it->second->awaiting_capacity, it->second->capacity_since};
  }
  const std::vector<int> drop =
      PlanShrink(cap, spec_.elastic.min_nodes, spec_.elastic.wait_seconds, now);
  if (drop.empty()) return false;
  std::vector<std::string> slots;
  std::string waiting;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (it == nodes_.end() || it->second->lost || it->second->slot < 0) {
      slots.push_back(slots_[s]);  // gone: EnsureSlotsFilled fills its new position
      continue;
    }
    Node& n = *it->second;
    if (std::find(drop.begin(), drop.end(), s) != drop.end()) {
      n.slot = -1;  // still requested: a standby once capacity comes
      waiting += (waiting.empty() ? "" : ", ") + n.id + " (slot " + std::to_string(s) + "; " +
                 n.capacity_message + ")";
      continue;
    }
    if (n.slot != static_cast<int>(slots.size())) {
      n.slot = static_cast<int>(slots.size());
      backend_->OnSlotAssigned(n.id, n.slot);
      RecordAgent(n);
    }
    slots.push_back(n.id);
  }
  SetSize(std::move(slots), now, "waiting for capacity: " + waiting);
  Event("Resized", "continuing on " + std::to_string(spec_.nodes) + " of " +
                       std::to_string(max_nodes_) + " nodes (world size " +
                       std::to_string(spec_.world_size()) + "); waiting for capacity: " + waiting +
                       "; the job grows back when it comes");
  return true;
}

void ControllerImpl::MaybeGrow(double now) {
  if (!spec_.elastic.enabled() ||
      !ShouldGrow({.nodes = spec_.nodes,
                   .max_nodes = max_nodes_,
                   .standbys_ready = SparesReady(),
                   .spare_nodes = spec_.fault_policy.spare_nodes,
                   .busy = update_.phase != UpdateState::Phase::kNone})) {
    return;
  }
  std::vector<std::string> ready;
  for (const auto& [id, n] : nodes_) {
    if (n->slot == -1 && n->connected()) ready.push_back(id);
  }
  const int s = spec_.nodes;
  std::string pick = backend_->PreferredSpare(s, ready);
  if (std::find(ready.begin(), ready.end(), pick) == ready.end()) pick = ready.front();
  Node& n = *nodes_.at(pick);
  n.slot = s;
  backend_->OnSlotAssigned(pick, s);
  RecordAgent(n);
  const int from = spec_.nodes;
  std::vector<std::string> slots = slots_;
  slots.push_back(pick);
  SetSize(std::move(slots), now, pick + " is available");
  Event("Resized", "growing back to " + std::to_string(spec_.nodes) + " of " +
                       std::to_string(max_nodes_) + " nodes: " + pick + " joins at slot " +
                       std::to_string(s) + " at the next step boundary");
  // Every rank leaves at its step boundary; the next generation has the new world.
  ledger_.OnPlannedRestart(now);
  regroup_ = RegroupPlan{};
  bool all_capable = true;
  for (int r = 0; r < from * spec_.procs_per_node; ++r) {
    all_capable = all_capable && in_process_ranks_.count(r);
  }
  regroup_.in_process = all_capable;
  backoff_until_ = now;
  decision_ = Decision{};
  StopAll(regroup_.in_process);
}

}  // namespace bulwark
