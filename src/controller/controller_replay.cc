// Controller: replay bundles and the classification of faults by replay
// (docs/diagnosis.md, "Replay and classification"; policy/replay_check.h).
//
// Every incident carries a replay bundle: what `bulwark replay` needs to re-run the
// steps before it — the spec, the code's digest, the environment, the nodes, the data
// position (the skip range in effect), the newest disk checkpoint before the fault
// (pinned against retention: the newest kReplayPinnedCheckpoints bundles' checkpoints are kept) and
// every rank's losses from that checkpoint up to the fault.
//
// A fault whose re-run can tell its cause (a NaN, a crash of the program's own) is also
// checked in the job itself: the recovery resumes from a checkpoint before it, so the
// next attempt re-runs its steps. Each re-run loss is compared bit for bit with the
// record; the check ends when the fault's step completes (the fault did not come back:
// hardware when its rank ran elsewhere, else transient) or when the same fault comes
// back (data, or code once its batches were skipped or for a crash). The verdict goes
// into the incident's `classification`; a NaN the node made gets the node quarantined;
// a fault of the program gives up (RecoveryPolicy reads Incident::cause).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "common/code_digest.h"
#include "common/json_util.h"
#include "controller/controller_impl.h"
#include "controller/incident_json.h"

namespace bulwark {
namespace {

constexpr long kMaxBundleSteps = 512;     // steps of losses kept in one bundle
constexpr long kMaxBundleLosses = 16384;  // and losses in all (a large job: fewer steps)

// {"step": {"rank": {"rng": HEX, "data": HEX, "sums": "ordered"|"unordered"}}}, each
// left out when not reported.
Json DigestsJson(const DigestTable& t) {
  Json out = Json::object();
  for (const auto& [step, ranks] : t) {
    Json row = Json::object();
    for (const auto& [rank, d] : ranks) {
      Json cell = Json::object();
      if (d.rng != 0) cell["rng"] = DigestHex(d.rng);
      if (d.data != 0) cell["data"] = DigestHex(d.data);
      if (d.sums != SumOrder::kUnknown) cell["sums"] = SumOrderName(d.sums);
      row[std::to_string(rank)] = std::move(cell);
    }
    out[std::to_string(step)] = std::move(row);
  }
  return out;
}

Json LossesJson(const LossTable& t) {
  Json out = Json::object();
  for (const auto& [step, ranks] : t) {
    Json row = Json::object();
    for (const auto& [rank, loss] : ranks) row[std::to_string(rank)] = loss;
    out[std::to_string(step)] = std::move(row);
  }
  return out;
}

}  // namespace

Json ReplayOutcome(const ReplayCheck& c, const Classification& k, const Incident* again) {
  Json steps = Json::array();
  for (const auto& [step, r] : c.steps()) {
    steps.push_back({{"step", step}, {"compared", r.compared}, {"equal", r.equal}});
  }
  Json out = {{"fault", IncidentToJson(c.fault())},
              {"fault_step", FaultStep(c.fault())},
              {"passed", c.passed()},
              {"fault_came_back", again != nullptr && SameFaultAgain(c.fault(), *again)},
              {"cause", FaultCauseName(k.cause)},
              {"evidence", k.evidence},
              {"summary", c.Summary()},
              {"compared", c.compared()},
              {"equal", c.equal()},
              {"data_skipped", c.data_skipped()},
              {"steps", steps}};
  if (c.first_diff().step >= 0) {
    out["first_difference"] = {{"step", c.first_diff().step},
                               {"rank", c.first_diff().rank},
                               {"recorded", c.first_diff().recorded},
                               {"replayed", c.first_diff().replayed}};
  }
  for (const auto& [key, n] : {std::pair{"rng", c.rng()}, std::pair{"data", c.data()}}) {
    if (n.compared == 0) continue;
    out[key] = {{"compared", n.compared}, {"equal", n.equal}};
    if (n.first_diff_step >= 0) {
      out[key]["first_difference"] = {{"step", n.first_diff_step}, {"rank", n.first_diff_rank}};
    }
  }
  if (again != nullptr) out["ended_by"] = IncidentToJson(*again);
  return out;
}

void ControllerImpl::BeginReplayRun() {
  if (!opts_.replay) return;
  const ControllerOptions::Replay& r = *opts_.replay;
  const long fs = FaultStep(r.fault);
  replay_.emplace(r.fault, r.expected, r.skip_from >= 0 && r.skip_to > fs, r.moved_ranks,
                  r.expected_digests);
  replay_passed_at_ = -1;
  replay_incident_ = -1;
  decision_.resume_step_max = r.resume;
  decision_.resume_from_scratch = r.resume < 0;
  decision_.skip_batches_from = r.skip_from;
  decision_.skip_batches_to = r.skip_to;
}

Json ControllerImpl::ReplayReport() const {
  if (!replay_outcome_.is_null()) return replay_outcome_;
  if (!replay_ || !opts_.replay) return Json();
  Classification none;
  none.evidence = "the run ended before the fault's step (" +
                  std::to_string(FaultStep(replay_->fault())) + ") completed";
  return ReplayOutcome(*replay_, none, nullptr);
}

void ControllerImpl::DigestCodeOnce() {
  if (!code_digest_.empty() || spec_.workdir.empty()) return;
  std::vector<std::string> exclude = {spec_.checkpoint.dir, opts_.run_dir};
  if (!spec_.checkpoint.shared_dir.empty()) exclude.push_back(spec_.checkpoint.shared_dir);
  Result<CodeDigest> d = DigestCode(spec_.workdir, exclude);
  code_digest_ = d.ok() ? d->hash : "unknown (" + d.status().message() + ")";
  code_files_ = d.ok() ? d->files : 0;
}

void ControllerImpl::RecordLoss(long step, int rank, double loss, StepDigests digests) {
  if (std::isfinite(loss) || !digests.empty()) losses_.Record(step, rank, loss, digests);
}

void ControllerImpl::OnReplayLoss(long step, int rank, double loss, StepDigests digests) {
  RecordLoss(step, rank, loss, digests);
  if (!replay_ || !replay_->OnLoss(step, rank, loss, digests)) return;
  if (!replay_->Complete()) {
    // The fault rank passed; the other ranks' last losses come through their own
    // agents' connections, a loop turn (or a rate-limit gap) later.
    if (replay_passed_at_ < 0) replay_passed_at_ = clock_->NowMono();
    return;
  }
  replay_passed_at_ = -1;
  ConcludeReplay(Classify(*replay_, nullptr), nullptr);
}

void ControllerImpl::ConcludeReplayWhenDue() {
  if (!replay_ || replay_passed_at_ < 0) return;
  // Bounded: a rank that stopped reporting must not hold the verdict back.
  const double late = std::max(1.0, 2 * spec_.fault_policy.heartbeat_interval_seconds);
  if (clock_->NowMono() - replay_passed_at_ < late) return;
  replay_passed_at_ = -1;
  ConcludeReplay(Classify(*replay_, nullptr), nullptr);
}

long ControllerImpl::BundleFrom(long checkpoint_step, long fault_step) const {
  const long steps = std::min<long>(
      kMaxBundleSteps, std::max<long>(1, kMaxBundleLosses / std::max(1, spec_.world_size())));
  return std::max(checkpoint_step, fault_step - steps);
}

void ControllerImpl::RefreshReplayBundle(Json* inc) const {
  if (!inc->contains("replay") || !(*inc)["replay"].is_object()) return;
  Json& b = (*inc)["replay"];
  const long fs = b.value("fault_step", -1L);
  const long from = BundleFrom(b.value("checkpoint_step", -1L), fs);
  b["losses"] = LossesJson(losses_.Range(from, fs));
  b["digests"] = DigestsJson(losses_.DigestRange(from, fs));
}

Json ControllerImpl::ReplayBundle(const Incident& inc) {
  DigestCodeOnce();
  const long fault_step = FaultStep(inc);
  long ckpt = -1;
  for (long s : committed_) {
    if (s < fault_step) ckpt = s;
  }
  if (ckpt >= 0 && std::find(pinned_.begin(), pinned_.end(), ckpt) == pinned_.end()) {
    pinned_.push_back(ckpt);
    while (pinned_.size() > kReplayPinnedCheckpoints) pinned_.erase(pinned_.begin());
    catalog_->SetPinned(pinned_);
  }
  const long from = BundleFrom(ckpt, fault_step);
  // With no checkpoint at all the job ran from scratch up to the fault, so a replay can
  // too, if the bundle holds the losses from step 1.
  const bool from_scratch = ckpt < 0 && committed_.empty() && from < 1;
  Json nodes = Json::array();
  for (const std::string& id : slots_) nodes.push_back(id);
  Json code = {{"dir", spec_.workdir}, {"digest", code_digest_}, {"files", code_files_}};
  if (!opts_.image.empty()) code["image"] = opts_.image;
  return Json{{"fault_step", fault_step},
              {"checkpoint_step", ckpt},
              {"from_scratch", from_scratch},
              {"checkpoint_dir", spec_.checkpoint.dir},
              {"losses", LossesJson(losses_.Range(from, fault_step))},
              {"digests", DigestsJson(losses_.DigestRange(from, fault_step))},
              {"spec_yaml", rec_.spec_yaml},
              {"spec_path", rec_.spec_path},
              {"code", code},
              {"env", spec_.env},
              {"command", spec_.command},
              {"args", spec_.args},
              {"nodes", nodes},
              {"world", spec_.world_size()},
              {"procs_per_node", spec_.procs_per_node},
              {"skip", {{"from", decision_.skip_batches_from}, {"to", decision_.skip_batches_to}}},
              {"attempt", attempt_}};
}

void ControllerImpl::ConcludeReplayWith(Incident* inc) {
  if (!replay_) return;
  const Classification k = Classify(*replay_, inc);
  if (k.cause == FaultCause::kData || k.cause == FaultCause::kCode) {
    inc->cause = k.cause;
    inc->cause_evidence = k.evidence;
  }
  ConcludeReplay(k, inc);
}

void ControllerImpl::ConcludeReplay(const Classification& k, const Incident* again) {
  if (opts_.replay) {
    // `bulwark replay`: the outcome is the run's result; a fault that came back ends the
    // run by the policy (no restart budget), a step that passed ends it here.
    replay_outcome_ = ReplayOutcome(*replay_, k, again);
    replay_.reset();
    if (again == nullptr && stage_ == Stage::kRunning) {
      finish_after_stop_ = true;
      final_phase_ = JobPhase::kSucceeded;
      final_message_ = "replay: step " + std::to_string(replay_outcome_["fault_step"].get<long>()) +
                       " completed; " + replay_outcome_["summary"].get<std::string>();
      StopAll();
    }
    return;
  }
  const int idx = replay_incident_;
  const Incident fault = replay_->fault();
  const std::string node_id = replay_node_id_;
  replay_.reset();
  replay_incident_ = -1;
  if (idx < 0 || idx >= static_cast<int>(incidents_.size())) return;
  Json c = {{"cause", FaultCauseName(k.cause)},
            {"evidence", k.cause == FaultCause::kUnknown && again != nullptr && k.evidence.empty()
                             ? std::string("the re-run was interrupted by another fault (") +
                                   FaultKindName(again->kind) + ") before the fault's step"
                             : k.evidence},
            {"node_id", node_id}};
  std::string action;
  switch (k.cause) {
    case FaultCause::kData:
      action = "the data batches are skipped";
      break;
    case FaultCause::kCode:
      action = "gave up: restarting cannot help";
      break;
    case FaultCause::kHardware:
      action = QuarantineForReplay(node_id, k.evidence);
      break;
    case FaultCause::kTransient:
      action = "none: training went on";
      break;
    case FaultCause::kUnknown:
      action = "none";
      break;
  }
  c["action"] = action;
  incidents_[idx]["classification"] = c;
  RewriteIncident(idx);
  Event("FaultClassified", std::string(FaultKindName(fault.kind)) + " of incident " +
                               std::to_string(idx + 1) + ": " + FaultCauseName(k.cause) + " (" +
                               c["evidence"].get<std::string>() + "); " + action);
}

std::string ControllerImpl::QuarantineForReplay(const std::string& node_id,
                                                const std::string& evidence) {
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return "its node " + node_id + " is unknown";
  Node& n = *it->second;
  if (n.quarantined || (n.lost && n.slot == -2)) return n.id + " is out of the job already";
  if (n.slot >= 0) return n.id + " still serves slot " + std::to_string(n.slot) + ": kept";
  if (n.diagnosing) {
    n.diagnosing = false;  // its verdict, when it comes, answers no request
    if (n.diagnose_incident >= 0 && n.diagnose_incident < static_cast<int>(incidents_.size())) {
      incidents_[n.diagnose_incident]["diagnosis"]["state"] = "superseded by the replay";
      RewriteIncident(n.diagnose_incident);
    }
  }
  return QuarantineAndRelease(n, "bulwark: a replay found the node computed wrong: " + evidence,
                              "computed wrong, a replay found: " + evidence);
}

void ControllerImpl::BeginReplayCheck(const Incident& inc, const Decision& d, int index) {
  if (opts_.replay || !Replayable(inc) || d.action == Action::kGiveUp) return;
  const long fs = FaultStep(inc);
  std::set<int> moved;
  if (d.action == Action::kReplaceNode && d.replace_node >= 0) {
    for (int l = 0; l < spec_.procs_per_node; ++l) {
      moved.insert(d.replace_node * spec_.procs_per_node + l);
    }
  }
  const bool skipped = d.skip_batches_from >= 0 && d.skip_batches_to > fs;
  replay_.emplace(inc, losses_.Range(fs - kMaxBundleSteps, fs), skipped, std::move(moved),
                  losses_.DigestRange(fs - kMaxBundleSteps, fs));
  replay_passed_at_ = -1;
  replay_incident_ = index;
  replay_node_id_ = inc.node >= 0 && inc.node < static_cast<int>(slots_.size()) ? slots_[inc.node]
                                                                                : std::string();
}

}  // namespace bulwark
