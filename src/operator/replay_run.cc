#include "operator/replay_run.h"

#include <filesystem>
#include <memory>
#include <optional>

#include "controller/replay_bundle.h"
#include "store/store.h"

namespace bulwark::op {

Result<ReplayRun> PrepareReplayRun(const std::string& state_dir, trainjob::TrainJob* tj) {
  if (!tj->replay_of) return InvalidArgument("spec.replayOf: not set");
  const trainjob::ReplayOf& of = *tj->replay_of;
  const std::string path = state_dir + "/" + tj->ns + "/" + of.train_job + "/bulwark.db";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFound("spec.replayOf.trainJob: this operator ran no TrainJob '" + of.train_job +
                    "' in namespace " + tj->ns + " (no record at " + path +
                    "); name a TrainJob of this namespace that had an incident");
  }
  BW_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::OpenReadOnly(path));
  BW_ASSIGN_OR_RETURN(std::optional<JobRecord> job, store->GetJob(of.train_job));
  if (!job) {
    return NotFound("spec.replayOf.trainJob: the record of TrainJob '" + of.train_job + "' (" +
                    path + ") holds no job of that name");
  }
  const std::vector<Json> incidents = RecordedIncidents(store.get(), *job);
  if (of.incident < 1 || of.incident > static_cast<int>(incidents.size())) {
    return NotFound("spec.replayOf.incident: TrainJob '" + of.train_job + "' has " +
                    std::to_string(incidents.size()) + " incident(s)" +
                    (incidents.empty() ? std::string(": nothing to replay")
                                       : ", numbered 1 to " + std::to_string(incidents.size())) +
                    "; `kubectl describe trainjob " + of.train_job + "` shows the newest");
  }
  ReplayRun out;
  out.what = IncidentTitle(incidents[of.incident - 1], of.incident, of.train_job);
  Result<ReplayBundle> bundle = ReadReplayBundle(incidents[of.incident - 1], out.what);
  if (!bundle.ok()) return bundle.status().Annotate("spec.replayOf.incident");
  JobSpec& s = tj->job;
  if (bundle->world > 0 && bundle->world != s.world_size()) {
    return InvalidArgument("spec.nodes: " + out.what + " ran " + std::to_string(bundle->world) +
                           " ranks (" + std::to_string(bundle->world / bundle->procs_per_node) +
                           " nodes x " + std::to_string(bundle->procs_per_node) +
                           "); this replay has " + std::to_string(s.world_size()) +
                           ": set spec.nodes and spec.procsPerNode as the incident's job had them");
  }
  const std::string then = bundle->code.is_object() && bundle->code.contains("image") &&
                                   bundle->code["image"].is_string()
                               ? bundle->code["image"].get<std::string>()
                               : "";
  if (then.empty()) {
    out.code = "not recorded (the incident's job recorded no image)";
  } else if (then == tj->pod.image) {
    out.code = "unchanged (image " + then + ")";
  } else if (!of.allow_code_change) {
    return FailedPrecondition("spec.pod.image: " + tj->pod.image + " is not the image " + out.what +
                              " ran (" + then +
                              "): a re-run of other code says nothing of the fault. Set "
                              "spec.pod.image to " +
                              then + ", or spec.replayOf.allowCodeChange to true to re-run anyway");
  } else {
    out.code = "CHANGED since the incident (image " + then + " then, " + tj->pod.image +
               " now; replayOf.allowCodeChange)";
  }
  if (bundle->checkpoint_step >= 0) s.checkpoint.dir = bundle->checkpoint_dir;
  // Nothing is written to the recorded job's checkpoints: no step before the fault's is
  // due for disk, and the other tiers are off.
  s.checkpoint.interval_auto = false;
  s.checkpoint.interval_seconds = 0;
  s.checkpoint.interval_steps = bundle->fault_step + 1;
  s.checkpoint.shared_dir.clear();
  s.checkpoint.object_store.clear();
  s.chaos.clear();
  s.fault_policy.restart_budget = 0;
  s.fault_policy.spare_nodes = 0;
  s.fault_policy.spare_nodes_auto = false;
  s.fault_policy.diagnose_suspect_nodes = false;
  out.replay = std::move(bundle->replay);
  return out;
}

}  // namespace bulwark::op
