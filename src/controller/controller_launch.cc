// Controller: the resume choice, the launch of an attempt, and checkpoint commits
// through the CheckpointCatalog.
#include <algorithm>
#include <cstdio>

#include "controller/controller_impl.h"

namespace bulwark {
namespace {

// Durability order of the committed tiers, for ControllerStatus::last_committed_tier.
int TierRank(const std::string& tier) {
  return tier == "object" ? 3 : tier == "shared" ? 2 : tier == "disk" ? 1 : 0;
}

}  // namespace

bool ControllerImpl::ResumeReady() {
  if (!catalog_->Settled()) return false;
  const int next = attempt_ + 1;
  if (!object_ || decision_.resume_from_scratch || object_checked_attempt_ == next) return true;
  object_checked_attempt_ = next;
  // The object tier is the slowest: used only when it holds a newer step than every
  // other tier (e.g. a new cluster, or lost local disks). It is downloaded into the
  // disk tier, from which the ranks then load.
  const long max_step = decision_.resume_step_max;
  long best = NewestInMemory(max_step);
  for (const char* tier : {"disk", "shared"}) {
    Result<long> s = catalog_->NewestCommitted(tier, max_step);
    if (s.ok()) best = std::max(best, *s);
  }
  Result<long> obj = object_->NewestCommitted(max_step);
  if (!obj.ok()) {
    Event("CheckpointListFailed", "object tier: " + obj.status().ToString());
    return true;
  }
  if (*obj <= best) return true;
  catalog_->Download(*obj);
  DrainCatalog();
  return catalog_->Settled();
}

void ControllerImpl::DrainCatalog() {
  for (const CatalogEvent& ev : catalog_->Poll()) OnCatalogEvent(ev);
}

void ControllerImpl::OnCatalogEvent(const CatalogEvent& ev) {
  const std::string where = ev.node.empty() ? "" : " (on " + ev.node + ")";
  const std::string step = std::to_string(ev.step);
  if (ev.op == CatalogOp::kCommit && ev.status.ok()) {
    const double now = clock_->NowWall();
    if (ev.step > last_committed_step_ ||
        (ev.step == last_committed_step_ && TierRank(ev.tier) > TierRank(last_committed_tier_))) {
      last_committed_step_ = ev.step;
      last_committed_tier_ = ev.tier;
      last_committed_time_ = now;
    }
    metrics_.OnCommit(ev.step, now);
    if (ev.tier == "disk") {
      if (committed_.empty() || committed_.back() < ev.step) committed_.push_back(ev.step);
      StoreWrote(store_->AddCheckpoint(spec_.name, ev.step, now));
    }
  }
  if (auto it = ev.committed.find("disk"); it != ev.committed.end()) {
    committed_ = it->second;
    history_.committed_steps = committed_;
    if (last_committed_step_ < 0 && !committed_.empty()) {  // known from a listing only
      last_committed_step_ = committed_.back();
      last_committed_tier_ = "disk";
    }
  }
  switch (ev.op) {
    case CatalogOp::kList:
      // A listing that found no agent to run it is asked again until one connects:
      // said once (an operator may hold hundreds of jobs waiting for their pods),
      // while a failure of a connected agent is said every time.
      if (ev.status.ok()) {
        list_wait_reported_ = false;
      } else if (!ev.node.empty() || !list_wait_reported_) {
        Event("CheckpointListFailed", ev.status.ToString() + where);
        list_wait_reported_ = ev.node.empty();
      }
      return;
    case CatalogOp::kDownload:
      if (ev.status.ok()) {
        object_restored_ = ev.step;
        Event("CheckpointDownloaded", "step " + step + " from " + object_->Url("") +
                                          " into the disk tier in " +
                                          std::to_string(ev.seconds).substr(0, 5) + " s" + where);
      } else {
        Event("CheckpointDownloadFailed", "step " + step + ": " + ev.status.ToString() + where);
      }
      if (!remote_) {
        // The download held the loop: heartbeats queued meanwhile are not misses.
        for (auto& [id, n] : nodes_) n->last_heartbeat = clock_->NowWall();
      }
      return;
    case CatalogOp::kCommit:
      break;
  }
  if (!ev.status.ok()) {
    Event("CheckpointCommitFailed",
          ev.tier + " step " + step + ": " + ev.status.ToString() + where);
    return;
  }
  if (ev.tier == "object") {
    if (opts_.echo_events) {
      Event("CheckpointUploaded", "step " + step + " committed on " + object_->Url(""));
    }
    if (!ev.retain.ok()) Event("CheckpointRetentionFailed", "object: " + ev.retain.ToString());
    return;
  }
  if (ev.tier == "shared") {
    if (!ev.retain.ok()) Event("CheckpointRetentionFailed", "shared: " + ev.retain.ToString());
    return;
  }
  if (!ev.retain.ok()) Event("CheckpointRetentionFailed", ev.retain.ToString());
  history_.committed_steps = committed_;
  rec_.last_committed_step = ev.step;
  const long every =
      spec_.checkpoint.interval_steps * 10 > 0 ? spec_.checkpoint.interval_steps * 10 : 1;
  if (opts_.echo_events && ev.step % every == 0) {
    Event("CheckpointCommitted", "step " + step + " committed by all " +
                                     std::to_string(spec_.world_size()) + " ranks" + where);
  }
  Persist();
}

void ControllerImpl::OnCheckpointShard(int rank, long step, const std::string& tier) {
  auto key = std::make_pair(tier, step);
  auto& s = shards_[key];
  s.insert(rank);
  if (static_cast<int>(s.size()) != spec_.world_size()) return;
  shards_.erase(key);
  // Older steps still collecting shards on this tier can no longer commit usefully.
  for (auto it = shards_.begin(); it != shards_.end();) {
    it = (it->first.first == tier && it->first.second < step) ? shards_.erase(it) : std::next(it);
  }
  if (tier == "object" && !object_) return;
  catalog_->Commit(tier, step);
  DrainCatalog();
}

Status ControllerImpl::Launch() {
  attempt_++;
  long max_step = decision_.resume_step_max;
  BW_ASSIGN_OR_RETURN(long resume, catalog_->NewestCommitted("disk", max_step));
  std::string resume_tier = resume >= 0 ? "disk" : "";
  if (!spec_.checkpoint.shared_dir.empty()) {
    Result<long> shared = catalog_->NewestCommitted("shared", max_step);
    if (shared.ok() && *shared > resume) {
      resume = *shared;
      resume_tier = "shared";
    }
  }
  // ResumeReady restored this step from the object tier into the disk tier.
  if (resume >= 0 && resume == object_restored_ && resume_tier == "disk") resume_tier = "object";
  object_restored_ = -1;
  // After a resize the memory snapshots are the old world's ranks': resume from files.
  const MemoryResume from_memory = world_changed_ ? MemoryResume() : MemoryResumeFor(max_step);
  const long mem = from_memory.step;
  if (mem > resume) {
    resume = mem;
    resume_tier = "memory";
  } else if (spec_.checkpoint.memory_slots > 0 && attempt_ > 0 &&
             (max_step < 0 || resume < max_step)) {  // memory could have done better
    Event("MemoryTierNotUsed", "no step newer than " + std::to_string(resume) +
                                   " is in memory for every rank: " + MemoryInventoryText());
  }
  if (decision_.resume_from_scratch) resume = -1;
  // Replacement nodes restore from a peer's memory: which ranks fetch from where.
  std::map<int, Json> fetches;  // slot -> fetch list
  std::string fetched_from;
  if (resume_tier == "memory" && resume >= 0) {
    for (int s = 0; s < spec_.nodes; ++s) {
      Json list = Json::array();
      for (int l = 0; l < spec_.procs_per_node; ++l) {
        const int rank = s * spec_.procs_per_node + l;
        const MemorySource& src = from_memory.sources.at(rank);
        if (src.kind == MemorySource::Kind::kOwn) continue;
        auto h = nodes_.find(src.node);
        if (h == nodes_.end()) continue;  // cannot happen: MemoryResumeFor named it
        Json f = {{"rank", rank},
                  {"step", resume},
                  {"host", h->second->peer_host},
                  {"port", h->second->peer_port},
                  {"from", src.node}};
        std::string what = "rank " + std::to_string(rank) + " from " + src.node;
        if (src.kind == MemorySource::Kind::kDonor) {
          f["from_rank"] = src.donor_rank;
          what += " (rank " + std::to_string(src.donor_rank) + "'s copy)";
        }
        list.push_back(std::move(f));
        fetched_from += (fetched_from.empty() ? "" : ", ") + what;
      }
      if (!list.empty()) fetches[s] = std::move(list);
    }
  }
  for (auto& [id, n] : nodes_) n->mem.clear();
  // Rendezvous: on the slot-0 agent's host (ranks on other machines), or here.
  std::string master_addr = master_host_;
  int port = 0;
  std::string rendezvous;
  if (opts_.rendezvous_on_agent) {
    const Node& n0 = *nodes_.at(slots_[0]);
    if (!n0.peer_host.empty() && n0.free_port > 0) {
      master_addr = n0.peer_host;
      port = n0.free_port;
      rendezvous = " on " + n0.id + " (" + master_addr + ":" + std::to_string(port) + ")";
    } else {
      Event("RendezvousFallback", n0.id +
                                      " reported no peer_host/free_port; the ranks rendezvous "
                                      "on the controller's host " +
                                      master_host_);
    }
  }
  if (port == 0) {
    BW_ASSIGN_OR_RETURN(port, PickFreePort(opts_.bind_host));
  }
  exited_ok_.clear();
  shards_.clear();
  // The next generation: its ranks report their processes anew; a launch that follows
  // a recovery fills that incident's kept and replaced processes.
  prev_pids_ = std::move(rank_pids_);
  rank_pids_.clear();
  in_process_ranks_.clear();
  dead_ranks_.clear();
  spontaneous_park_at_ = -1;
  held_nans_.clear();
  nan_ranks_.clear();
  forwarded_step_.clear();
  nan_report_step_.clear();
  regroup_attempt_ = !incidents_.empty() && incidents_.back()["resumed_from"].is_null() &&
                             incidents_.back().contains("processes")
                         ? attempt_
                         : -1;
  // The long-lived store of slot 0's agent, once it serves (until then the ranks
  // rendezvous on master_addr:master_port).
  std::string store_host;
  int store_port = 0;
  {
    const Node& n0 = *nodes_.at(slots_[0]);
    if (n0.store_port > 0 && !n0.peer_host.empty()) {
      store_host = n0.peer_host;
      store_port = n0.store_port;
    }
  }
  const int warm_ranks = spec_.fault_policy.WarmRanks(spec_.procs_per_node);
  for (int s = 0; s < spec_.nodes; ++s) {
    Node& n = *nodes_.at(slots_[s]);
    Json start = {{"type", "start"},
                  {"attempt", attempt_},
                  {"run_id", rec_.run_id},
                  {"job", spec_.name},
                  {"command",
                   [&] {
                     std::vector<std::string> c = spec_.command;
                     c.insert(c.end(), spec_.args.begin(), spec_.args.end());
                     return c;
                   }()},
                  {"env", spec_.env},
                  {"workdir", spec_.workdir},
                  // Remote: the agent's own <run-dir>/logs (this run_dir is not its).
                  {"log_dir", opts_.remote_checkpoint_fs ? "" : opts_.run_dir + "/logs"},
                  {"master_addr", master_addr},
                  {"master_port", port},
                  {"nnodes", spec_.nodes},
                  {"group_rank", s},
                  {"nproc_per_node", spec_.procs_per_node},
                  {"world_size", spec_.world_size()},
                  {"restart_count", rec_.restarts},
                  {"max_restarts", spec_.fault_policy.restart_budget},
                  {"resume_step", resume},
                  {"ckpt_dir", spec_.checkpoint.dir},
                  // auto: the ranks save every step to memory, the agents persist.
                  {"ckpt_interval_steps", cadence_ ? 1 : spec_.checkpoint.interval_steps},
                  {"persist_by_agent", cadence_.has_value()},
                  {"cadence_steps", cadence_ ? cadence_->interval_steps() : 0},
                  {"cadence_from_step", cadence_ ? cadence_->from_step() : 0},
                  {"memory_slots", spec_.checkpoint.memory_slots},
                  {"shared_dir", spec_.checkpoint.shared_dir},
                  {"object_store", object_ ? spec_.checkpoint.object_store : ""},
                  {"object_interval_steps", spec_.checkpoint.object_interval_steps},
                  {"peer_host", PeerOf(s) ? PeerOf(s)->peer_host : ""},
                  {"peer_port", PeerOf(s) ? PeerOf(s)->peer_port : 0},
                  {"peer_push_share", spec_.checkpoint.peer_push_share},
                  {"fetch", fetches.count(s) ? fetches[s] : Json::array()},
                  {"skip_from", decision_.skip_batches_from},
                  {"skip_to", decision_.skip_batches_to},
                  {"hang_floor_s", spec_.fault_policy.hang_timeout_floor_seconds},
                  {"hang_multiplier", spec_.fault_policy.hang_timeout_multiplier},
                  {"startup_timeout_s", spec_.fault_policy.startup_timeout_seconds},
                  {"stop_grace_s", spec_.fault_policy.stop_grace_seconds},
                  {"store_host", store_host},
                  {"store_port", store_port},
                  {"warm_ranks", warm_ranks},
                  {"version", CodeVersion()},
                  {"max_world_size", max_nodes_ * spec_.procs_per_node}};
    BW_RETURN_IF_ERROR(n.conn->Send(start).Annotate("start on " + n.id));
    n.prepared = true;
  }
  double now = clock_->NowWall();
  attempt_launched_at_ = now;
  ledger_.OnAttemptLaunched(now, resume);
  attempt_resume_ = resume;
  digests_.clear();  // the alignment check starts over with this attempt's steps
  aligned_step_ = std::min(aligned_step_, resume);
  if (!incidents_.empty() && incidents_.back()["resumed_from"].is_null()) {
    incidents_.back()["resumed_from"] = resume;
    RefreshReplayBundle(&incidents_.back());  // the stopped ranks reported everything
    RewriteIncident(static_cast<int>(incidents_.size()) - 1);
  }
  stage_ = Stage::kRunning;
  rec_.phase = JobPhase::kRunning;
  Event("AttemptStarted",
        "attempt " + std::to_string(attempt_) + " on " + std::to_string(spec_.nodes) +
            " nodes, rendezvous port " + std::to_string(port) + rendezvous +
            (resume >= 0 ? ", resuming after step " + std::to_string(resume) + " from the " +
                               resume_tier + " tier" +
                               (fetched_from.empty() ? "" : " (peer memory: " + fetched_from + ")")
                         : ", from scratch"));
  decision_ = Decision{};
  world_changed_ = false;
  OnCodeLaunched(resume);
  Persist();
  return Status::Ok();
}

void ControllerImpl::MaybeAnnounceCadence(double now) {
  if (!cadence_) return;
  const double node_days = spec_.nodes * std::max(0.0, now - start_) / 86400.0;
  auto u = cadence_->Evaluate(now, static_cast<int>(incidents_.size()), node_days, last_step_);
  if (!u) return;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (it == nodes_.end() || !it->second->connected()) continue;
    IgnoreError(it->second->conn->Send(Json{{"type", "cadence"},
                                            {"attempt", attempt_},
                                            {"interval_steps", u->interval_steps},
                                            {"from_step", u->from_step}}),
                "a failed send closes the connection; the loop handles the peer's loss");
  }
  cadence_log_.push_back({{"t", now - start_},
                          {"interval_steps", u->interval_steps},
                          {"from_step", u->from_step},
                          {"failures_per_node_day", u->failures_per_node_day},
                          {"reason", u->reason}});
  Event("CheckpointCadence", u->reason);
}

}  // namespace bulwark
