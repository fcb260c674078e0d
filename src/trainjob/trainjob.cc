// ToObject and the small helpers of trainjob.h; the parser is in trainjob_parse.cc.
#include "trainjob/trainjob.h"

namespace bulwark::trainjob {
namespace {

// The job fields of a JobSpec as a TrainJob's spec (the inverse of ParseJobFields).
Json JobFields(const JobSpec& j) {
  Json s = Json::object();
  s["nodes"] = j.nodes;
  s["procsPerNode"] = j.procs_per_node;
  if (!j.command.empty()) s["command"] = j.command;  // else from the image
  if (!j.args.empty()) s["args"] = j.args;
  if (!j.env.empty()) s["env"] = j.env;
  if (!j.workdir.empty()) s["workdir"] = j.workdir;

  const CheckpointSpec& c = j.checkpoint;
  Json ck = {{"dir", c.dir},
             {"intervalSeconds", c.interval_seconds},
             {"keep", c.keep},
             {"memorySlots", c.memory_slots},
             {"goldenEvery", c.golden_every},
             {"objectIntervalSteps", c.object_interval_steps},
             {"peerReplication", c.peer_replication},
             {"peerPushShare", c.peer_push_share}};
  ck["intervalSteps"] = c.interval_auto ? Json("auto") : Json(c.interval_steps);
  if (!c.shared_dir.empty()) ck["sharedDir"] = c.shared_dir;
  if (!c.object_store.empty()) ck["objectStore"] = c.object_store;
  s["checkpoint"] = std::move(ck);

  const FaultPolicySpec& p = j.fault_policy;
  s["faultPolicy"] = {
      {"restartBudget", p.restart_budget},
      {"backoff", {{"baseSeconds", p.backoff_base_seconds}, {"capSeconds", p.backoff_cap_seconds}}},
      {"hangTimeout",
       {{"floorSeconds", p.hang_timeout_floor_seconds},
        {"multiplier", p.hang_timeout_multiplier},
        {"startupSeconds", p.startup_timeout_seconds}}},
      {"spareNodes", p.spare_nodes_auto ? Json("auto") : Json(p.spare_nodes)},
      {"failureRatePerNodeDay", p.failures_per_node_day},
      {"replacementLeadSeconds", p.replacement_lead_seconds},
      {"heartbeat",
       {{"intervalSeconds", p.heartbeat_interval_seconds}, {"misses", p.heartbeat_misses}}},
      {"stopGraceSeconds", p.stop_grace_seconds},
      {"maxSameFaultWithoutProgress", p.max_same_fault_without_progress}};

  if (!j.chaos.empty()) {
    Json chaos = Json::array();
    for (const ChaosFault& f : j.chaos) {
      Json c = {{"kind", ChaosKindName(f.kind)}};
      if (f.at_seconds >= 0) c["atSeconds"] = f.at_seconds;
      if (f.at_step >= 0) c["atStep"] = f.at_step;
      if (f.kind == ChaosKind::kKillAgent) {
        c["node"] = f.node;
      } else {
        c["rank"] = f.rank;
      }
      chaos.push_back(std::move(c));
    }
    s["chaos"] = std::move(chaos);
  }
  return s;
}

Json PodFields(const PodOptions& p) {
  Json o = {{"imagePullPolicy", p.image_pull_policy},
            {"gpusPerNode", p.gpus_per_node},
            {"gpuResource", p.gpu_resource}};
  auto opt = [&o](const char* key, const std::string& v) {
    if (!v.empty()) o[key] = v;
  };
  opt("image", p.image);
  opt("cpu", p.cpu);
  opt("memory", p.memory);
  opt("shmSize", p.shm_size);
  opt("serviceAccountName", p.service_account_name);
  opt("priorityClassName", p.priority_class_name);
  opt("localCheckpointPath", p.local_checkpoint_path);
  opt("sharedCheckpointClaim", p.shared_checkpoint_claim);
  opt("configMap", p.config_map);
  if (!p.node_selector.empty()) o["nodeSelector"] = p.node_selector;
  if (p.tolerations.is_array() && !p.tolerations.empty()) o["tolerations"] = p.tolerations;
  if (p.data_volume.is_object()) o["dataVolume"] = p.data_volume;
  if (!p.image_pull_secrets.empty()) o["imagePullSecrets"] = p.image_pull_secrets;
  if (!p.inject_agent) o["injectAgent"] = false;
  return o;
}

}  // namespace

const char* GangModeName(GangMode g) {
  switch (g) {
    case GangMode::kBulwark:
      return "bulwark";
    case GangMode::kVolcano:
      return "volcano";
    case GangMode::kKueue:
      return "kueue";
  }
  return "bulwark";
}

const char* ManifestKindName(ManifestKind k) {
  switch (k) {
    case ManifestKind::kJobSpec:
      return "job spec";
    case ManifestKind::kTrainJob:
      return "TrainJob";
    case ManifestKind::kPyTorchJob:
      return "PyTorchJob";
  }
  return "job spec";
}

Json ToObject(const TrainJob& t) {
  Json meta = {{"name", t.name}, {"namespace", t.ns}};
  if (!t.uid.empty()) meta["uid"] = t.uid;
  if (t.generation > 0) meta["generation"] = t.generation;
  if (!t.resource_version.empty()) meta["resourceVersion"] = t.resource_version;
  if (!t.labels.empty()) meta["labels"] = t.labels;
  if (!t.annotations.empty()) meta["annotations"] = t.annotations;

  Json spec = JobFields(t.job);
  const SchedulingSpec& s = t.scheduling;
  spec["scheduling"] = {{"queue", s.queue},
                        {"priority", s.priority},
                        {"tier", sched::TierName(s.tier)},
                        {"topology", sched::TopologyLevelName(s.topology)},
                        {"gpuType", s.gpu_type},
                        {"gang", GangModeName(s.gang)}};
  if (!s.kueue_queue.empty()) spec["scheduling"]["kueueQueue"] = s.kueue_queue;
  spec["suspend"] = t.suspend;
  spec["pod"] = PodFields(t.pod);
  return {{"apiVersion", kApiVersion}, {"kind", kKind}, {"metadata", meta}, {"spec", spec}};
}

sched::JobRequest SchedRequest(const TrainJob& t, int standby) {
  sched::JobRequest r;
  r.id = t.ns + "/" + t.name;
  r.queue = t.scheduling.queue;
  r.priority = t.scheduling.priority;
  r.nodes = t.job.nodes;
  r.gpu_type = t.scheduling.gpu_type;
  r.tier = t.scheduling.tier;
  r.required_level = t.scheduling.topology;
  r.standby = standby;
  return r;
}

int StandbyCount(const JobSpec& job) {
  const FaultPolicySpec& p = job.fault_policy;
  if (!p.spare_nodes_auto) return p.spare_nodes;
  return sched::StandbyNodes(job.nodes, p.failures_per_node_day, p.replacement_lead_seconds);
}

}  // namespace bulwark::trainjob
