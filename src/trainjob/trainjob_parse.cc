// ParseTrainJob / TrainJobFromObject: the TrainJob document, its metadata, and the
// scheduling and pod sections, read through the tables of trainjob_schema.h; the
// job fields of `spec` are parsed by src/spec (spec_internal::ParseJobFields).
#include <regex>
#include <set>

#include "spec/job_fields.h"
#include "spec/spec_reader.h"
#include "spec/yaml_document.h"
#include "trainjob/trainjob.h"
#include "trainjob/trainjob_internal.h"
#include "trainjob/trainjob_schema.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob {
namespace internal {
namespace {

using spec_internal::Entry;
using spec_internal::SpecReader;

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsAlnumLower(char c) { return IsLower(c) || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsAlnumLower(c) || (c >= 'A' && c <= 'Z'); }

Status JoinErrors(const std::vector<std::string>& errors) {
  std::string msg;
  for (const std::string& e : errors) msg += (msg.empty() ? "" : "\n") + e;
  return InvalidArgument(msg);
}

// Reads fields by their FieldDef type (the generic half of the parser): every
// problem is reported into the SpecReader, and the value comes back as JSON.
class TableReader {
 public:
  explicit TableReader(SpecReader& r) : r_(r) {}

  // The value of `e` (null after a reported problem, or for a null value).
  Json Read(const Entry& e) {
    const FieldDef& d = *e.def;
    switch (d.type) {
      case FieldType::kString:
        return ReadEnumOrString(e);
      case FieldType::kInt: {
        long v = 0;
        return r_.ReadInt(e, &v) ? Json(v) : Json();
      }
      case FieldType::kNumber: {
        double v = 0;
        return r_.ReadNumber(e, &v) ? Json(v) : Json();
      }
      case FieldType::kBool:
        return ReadBool(e);
      case FieldType::kIntOrAuto: {
        if (e.value.IsScalar() && e.value.Scalar() == "auto") return "auto";
        long v = 0;
        return r_.ReadInt(e, &v) ? Json(v) : Json();
      }
      case FieldType::kQuantity:
        return ReadQuantity(e);
      case FieldType::kStringList: {
        std::vector<std::string> v;
        return r_.ReadStringList(e, &v) ? Json(v) : Json();
      }
      case FieldType::kStringMap:
        return ReadStringMap(e);
      case FieldType::kObject:
        return ReadObject(e.value, e.line, e.path, e.hint, d.children);
      case FieldType::kObjectList:
        return ReadObjectList(e);
      case FieldType::kAnyObject:
        if (!e.value.IsMap()) {
          r_.Error(e.line, e.path, "must be a mapping", SpecReader::Describe(e.value), e.hint);
          return nullptr;
        }
        return BoundedJson(e);
      case FieldType::kAny:
        return BoundedJson(e);
    }
    return nullptr;
  }

  // e.value as JSON; a value too large to expand (an alias bomb) is an error there.
  Json BoundedJson(const Entry& e) {
    try {
      return YamlToJson(e.value);
    } catch (const YamlTooLarge& x) {
      r_.Error(e.line, e.path, x.what(), "a value too large to read",
               "write the value out without YAML aliases");
      return nullptr;
    }
  }

  // A mapping read field by field; unknown keys are reported.
  Json ReadObject(const YAML::Node& map, int line, const std::string& path, const std::string& hint,
                  std::span<const FieldDef> fields) {
    Json out = Json::object();
    for (auto& [key, entry] : r_.Fields(map, line, path, hint, fields)) {
      Json v = Read(entry);
      if (!v.is_null()) out[key] = std::move(v);
    }
    return out;
  }

 private:
  Json ReadEnumOrString(const Entry& e) {
    std::string s;
    if (!r_.ReadString(e, &s)) return nullptr;
    const auto& values = e.def->values;
    if (values.empty()) return s;
    std::vector<std::string> names(values.begin(), values.end());
    for (const std::string& v : names) {
      if (v == s) return s;
    }
    r_.Error(e.line, e.path, "must be one of " + JoinComma(names), SpecReader::Describe(e.value),
             e.hint);
    return nullptr;
  }

  Json ReadBool(const Entry& e) {
    const bool quoted = e.value.IsScalar() && (e.value.Tag() == "!");
    if (e.value.IsScalar() && !quoted &&
        (e.value.Scalar() == "true" || e.value.Scalar() == "false")) {
      return e.value.Scalar() == "true";
    }
    r_.Error(e.line, e.path, "must be true or false", SpecReader::Describe(e.value), e.hint);
    return nullptr;
  }

  Json ReadQuantity(const Entry& e) {
    if (e.value.IsScalar() && IsQuantity(e.value.Scalar())) return e.value.Scalar();
    r_.Error(e.line, e.path, "must be a Kubernetes quantity (e.g. 32, 500m, 64Gi)",
             SpecReader::Describe(e.value), e.hint);
    return nullptr;
  }

  Json ReadStringMap(const Entry& e) {
    Json out = Json::object();
    if (e.value.IsNull()) return out;
    if (!e.value.IsMap()) {
      r_.Error(e.line, e.path, "must be a mapping of key: value strings",
               SpecReader::Describe(e.value), e.hint);
      return nullptr;
    }
    for (const auto& kv : e.value) {
      const YAML::Node k = kv.first;
      const YAML::Node v = kv.second;
      const int kl = SpecReader::LineOf(k, e.line);
      if (!k.IsScalar() || !v.IsScalar()) {
        r_.Error(kl, e.path, "keys and values must be strings",
                 SpecReader::Describe(k.IsScalar() ? v : k), e.hint);
        continue;
      }
      out[k.Scalar()] = v.Scalar();
    }
    return out;
  }

  Json ReadObjectList(const Entry& e) {
    Json out = Json::array();
    if (e.value.IsNull()) return out;
    if (!e.value.IsSequence()) {
      r_.Error(e.line, e.path, "must be a list", SpecReader::Describe(e.value), e.hint);
      return nullptr;
    }
    if (e.def->max_items > 0 && e.value.size() > static_cast<size_t>(e.def->max_items)) {
      r_.Error(e.line, e.path, "too many items", std::to_string(e.value.size()),
               "give at most " + std::to_string(e.def->max_items));
      return nullptr;
    }
    int i = 0;
    for (const YAML::Node& item : e.value) {
      const std::string path = e.path + "[" + std::to_string(i++) + "]";
      const int line = SpecReader::LineOf(item, e.line);
      if (!item.IsMap()) {
        r_.Error(line, path, "must be a mapping", SpecReader::Describe(item), e.hint);
        continue;
      }
      out.push_back(ReadObject(item, line, path, e.hint, e.def->children));
    }
    return out;
  }

  SpecReader& r_;
};

class TrainJobParser {
 public:
  TrainJobParser(const ParseContext& ctx) : ctx_(ctx), r_(ctx.source), t_(r_) {
    r_.set_show_lines(ctx.show_lines);
  }

  Result<TrainJob> Parse(const YAML::Node& root, std::vector<std::string>* notes) {
    const int line = SpecReader::LineOf(root, 1);
    auto top = r_.Fields(root, line, "", "", kTopFields);
    for (const FieldDef& d : kTopFields) {
      if (d.required && !top.contains(d.key)) Missing(line, d.key, d.hint);
    }
    for (const char* key : {"apiVersion", "kind"}) {
      if (auto it = top.find(key); it != top.end()) t_.Read(it->second);
    }
    if (auto it = top.find("metadata"); it != top.end()) ParseMetadata(it->second);
    if (auto it = top.find("spec"); it != top.end()) ParseSpec(it->second, notes);
    if (r_.has_errors()) return JoinErrors(r_.SortedErrors());
    return std::move(job_);
  }

 private:
  void Missing(int line, const std::string& path, const std::string& hint) {
    r_.Error(line, path, "required field is missing", "nothing", hint);
  }

  void ParseMetadata(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kMetadataFields);
    if (auto it = f.find("name"); it == f.end()) {
      Missing(e.line, "metadata.name", kMetadataFields[0].hint);
    } else if (r_.ReadString(it->second, &job_.name) && !IsDns1035Label(job_.name)) {
      r_.Error(it->second.line, it->second.path,
               job_.name.size() > 63 ? "must be at most 63 characters"
                                     : "must be a DNS-1035 label (lowercase letters, digits, "
                                       "'-', starting with a letter)",
               SpecReader::Describe(it->second.value), it->second.hint);
      name_ok_ = false;
    }
    if (auto it = f.find("namespace"); it != f.end() && r_.ReadString(it->second, &job_.ns)) {
      job_.ns_given = true;
      if (job_.ns.size() > 63 || !spec_internal::IsDnsLabel(job_.ns)) {
        r_.Error(it->second.line, it->second.path, "must be a DNS-1123 label",
                 SpecReader::Describe(it->second.value), it->second.hint);
      }
    }
    if (auto it = f.find("uid"); it != f.end()) r_.ReadString(it->second, &job_.uid);
    if (auto it = f.find("resourceVersion"); it != f.end()) {
      r_.ReadString(it->second, &job_.resource_version);
    }
    if (auto it = f.find("generation"); it != f.end()) {
      long g = 0;
      if (r_.ReadInt(it->second, &g)) job_.generation = g;
    }
    for (auto [key, out] :
         {std::pair{"labels", &job_.labels}, {"annotations", &job_.annotations}}) {
      if (auto it = f.find(key); it != f.end()) {
        Json m = t_.Read(it->second);
        if (m.is_object()) *out = m.get<std::map<std::string, std::string>>();
      }
    }
  }

  void ParseSpec(const Entry& e, std::vector<std::string>* notes) {
    if (!e.value.IsMap()) {
      r_.Error(e.line, e.path, "must be a mapping of fields", SpecReader::Describe(e.value),
               e.hint);
      return;
    }
    spec_internal::JobFieldsOptions o;
    o.root_path = "spec";
    o.name = !job_.name.empty() && name_ok_ ? job_.name : "invalid-name";
    o.paths = ctx_.target == Target::kLocal ? spec_internal::PathMode::kResolve
                                            : spec_internal::PathMode::kContainer;
    o.base_dir = ctx_.base_dir;
    o.extra_fields = kSpecExtraFields;
    o.command_optional = true;  // then from pod.image (ApplyImageConfig)
    auto f = spec_internal::ParseJobFields(r_, e.value, e.line, o, &job_.job);
    job_.job.name = job_.name;

    std::vector<std::string> k8s_only;
    if (auto it = f.find("scheduling"); it != f.end()) {
      ParseScheduling(t_.Read(it->second), it->second);
      k8s_only.push_back("spec.scheduling");
    }
    if (auto it = f.find("suspend"); it != f.end()) {
      Json v = t_.Read(it->second);
      if (v.is_boolean()) job_.suspend = v.get<bool>();
      k8s_only.push_back("spec.suspend");
    }
    bool gpus_set = false;
    if (auto it = f.find("pod"); it != f.end()) {
      gpus_set = ParsePod(it->second);
      k8s_only.push_back("spec.pod");
    } else if (ctx_.target == Target::kKubernetes) {
      Missing(e.line, "spec.pod", kSpecExtraFields[2].hint);
    }
    if (auto it = f.find("replayOf"); it != f.end()) {
      const Json r = t_.Read(it->second);
      if (ctx_.target == Target::kLocal) {
        r_.Error(it->second.line, "spec.replayOf", "is a replay run by the Kubernetes operator",
                 "a replayOf mapping",
                 "remove spec.replayOf; on this machine `bulwark replay JOB N` re-runs an "
                 "incident of a job run here");
      } else if (r.is_object()) {
        ReplayOf ro;
        ro.train_job = r.contains("trainJob") && r["trainJob"].is_string()
                           ? r["trainJob"].get<std::string>()
                           : "";
        ro.incident = r.contains("incident") && r["incident"].is_number_integer()
                          ? r["incident"].get<int>()
                          : 0;
        ro.allow_code_change = r.contains("allowCodeChange") && r["allowCodeChange"].is_boolean() &&
                               r["allowCodeChange"].get<bool>();
        if (!r.contains("trainJob")) {
          Missing(it->second.line, "spec.replayOf.trainJob", kReplayOfFields[0].hint);
        }
        if (!r.contains("incident")) {
          Missing(it->second.line, "spec.replayOf.incident", kReplayOfFields[1].hint);
        }
        if (r.contains("nodes") && r["nodes"].is_array()) {
          std::set<std::string> seen;
          for (const Json& n : r["nodes"]) {
            if (!n.is_string()) continue;  // reported by the schema check
            const std::string name = n.get<std::string>();
            if (name.empty() || !seen.insert(name).second) {
              r_.Error(it->second.line, "spec.replayOf.nodes",
                       name.empty() ? "names an empty node" : "names a node twice",
                       "\"" + name + "\"", "name each node once, one per node of the job");
            }
            ro.nodes.push_back(name);
          }
          if (!ro.nodes.empty() && static_cast<int>(ro.nodes.size()) != job_.job.nodes) {
            r_.Error(it->second.line, "spec.replayOf.nodes",
                     "names " + std::to_string(ro.nodes.size()) + " node(s) for a job of " +
                         std::to_string(job_.job.nodes),
                     std::to_string(ro.nodes.size()) + " names",
                     "name one node per node of the job (spec.nodes), in slot order");
          }
        }
        if (!ro.train_job.empty() && ro.train_job == job_.name) {
          r_.Error(it->second.line, "spec.replayOf.trainJob", "names this TrainJob itself",
                   "\"" + ro.train_job + "\"",
                   "name the TrainJob whose incident to replay (a replay is a TrainJob of its "
                   "own, e.g. " +
                       ro.train_job + "-replay-1)");
        }
        job_.replay_of = ro;
      }
    }
    if (!gpus_set) {
      job_.pod.gpus_per_node = job_.job.procs_per_node;
      // The default must pass the check an explicit value gets (the operator reads the
      // object back with it written out).
      if (ctx_.target == Target::kKubernetes && job_.pod.gpus_per_node > kMaxGpusPerNode) {
        const auto p = f.find("procsPerNode");
        r_.Error(p != f.end() ? p->second.line : e.line, "spec.pod.gpusPerNode",
                 "is not set, so each node's pod would request procsPerNode GPUs, more than " +
                     std::to_string(kMaxGpusPerNode),
                 std::to_string(job_.job.procs_per_node) + " (procsPerNode)",
                 "set pod.gpusPerNode to the GPUs each node's pod requests (0 for a CPU job)");
      }
    }
    if (job_.job.command.empty() && !f.contains("command")) {
      if (job_.pod.image.empty()) {
        if (ctx_.target == Target::kLocal) {  // kKubernetes: spec.pod.image is reported
          Missing(e.line, "spec.command",
                  "set command (e.g. [python3, train.py]), or pod.image to take the command "
                  "from the image's ENTRYPOINT and CMD");
        }
      } else if (notes != nullptr) {
        notes->push_back(ctx_.source + ": spec.command: not set: the command is the image " +
                         job_.pod.image + "'s ENTRYPOINT + " +
                         (job_.job.args.empty() ? "CMD" : "args (which replace CMD)") +
                         ", read from its registry when the job starts");
      }
    }
    if (ctx_.target == Target::kKubernetes && job_.job.elastic.enabled()) {
      // The operator admits and places fixed gangs (src/sched); it does not resize one.
      r_.Error(e.line, "spec.elastic", "the Kubernetes operator does not resize jobs yet",
               "minNodes " + std::to_string(job_.job.elastic.min_nodes),
               "remove spec.elastic (the job then runs on spec.nodes and waits for a "
               "replacement node); `bulwark run` resizes elastic jobs");
    }
    if (ctx_.target == Target::kKubernetes) {
      const CheckpointSpec& ck = job_.job.checkpoint;
      const bool checkpoints = ck.interval_steps > 0 || ck.interval_auto || ck.interval_seconds > 0;
      const auto under = [&](const char* root) {
        return ck.dir == root || ck.dir.rfind(std::string(root) + "/", 0) == 0;
      };
      const bool claim = !job_.pod.shared_checkpoint_claim.empty();
      if (job_.job.nodes > 1 && checkpoints &&
          ((ck.dir.empty() && !claim) || under("/bulwark/local"))) {
        // Every rank's shard of a step must be in one directory the committing agent
        // sees; node-local disks (hostPath) are not (docs/kubernetes.md).
        r_.Error(e.line, "spec.pod.sharedCheckpointClaim",
                 "a job on " + std::to_string(job_.job.nodes) +
                     " nodes that checkpoints needs a shared volume for its checkpoints",
                 ck.dir.empty() ? "nothing" : "checkpoint.dir " + ck.dir + ", node-local",
                 "set pod.sharedCheckpointClaim to a ReadWriteMany PVC, or checkpoint.dir to a "
                 "path every pod mounts");
      } else if (under("/bulwark/shared") && !claim) {
        r_.Error(e.line, "spec.checkpoint.dir",
                 "is under /bulwark/shared, which only pod.sharedCheckpointClaim mounts", ck.dir,
                 "set pod.sharedCheckpointClaim to a ReadWriteMany PVC, or use another path");
      }
      if (job_.job.checkpoint.dir.empty()) {
        job_.job.checkpoint.dir =
            std::string(job_.pod.shared_checkpoint_claim.empty() ? "/bulwark/local/"
                                                                 : "/bulwark/shared/") +
            job_.ns + "/" + job_.name;
      }
    } else if (!k8s_only.empty() && notes != nullptr) {
      notes->push_back(ctx_.source + ": " + JoinComma(k8s_only) +
                       ": for the Kubernetes backend; the local backend ignores " +
                       (k8s_only.size() == 1 ? "it" : "them"));
    }
  }

  void ParseScheduling(const Json& s, const Entry& e) {
    SchedulingSpec& out = job_.scheduling;
    out.queue = s.value("queue", out.queue);
    out.priority = s.value("priority", out.priority);
    out.gpu_type = s.value("gpuType", out.gpu_type);
    out.kueue_queue = s.value("kueueQueue", out.kueue_queue);
    const std::string tier = s.value("tier", "production");
    out.tier = tier == "research" ? sched::Tier::kResearch : sched::Tier::kProduction;
    const std::string topo = s.value("topology", "any");
    out.topology = topo == "rack"    ? sched::TopologyLevel::kRack
                   : topo == "block" ? sched::TopologyLevel::kBlock
                   : topo == "zone"  ? sched::TopologyLevel::kZone
                                     : sched::TopologyLevel::kAny;
    const std::string gang = s.value("gang", "bulwark");
    out.gang = gang == "volcano" ? GangMode::kVolcano
               : gang == "kueue" ? GangMode::kKueue
                                 : GangMode::kBulwark;
    if (out.queue.empty() || out.queue.size() > 253) {
      r_.Error(e.line, e.path + ".queue", "must be a non-empty name of at most 253 characters",
               "\"" + out.queue + "\"", spec_internal::HintFor(kSchedulingFields, "queue"));
    }
    if (out.gpu_type.empty() || !IsLabelValue(out.gpu_type)) {
      r_.Error(e.line, e.path + ".gpuType", "must be a non-empty Kubernetes label value",
               "\"" + out.gpu_type + "\"", spec_internal::HintFor(kSchedulingFields, "gpuType"));
    }
    if (out.gang == GangMode::kKueue && out.kueue_queue.empty()) {
      r_.Error(e.line, e.path + ".kueueQueue", "required when gang is kueue", "nothing",
               kSchedulingRules[0].message);
    } else if (!out.kueue_queue.empty() && !IsDns1123Subdomain(out.kueue_queue)) {
      r_.Error(e.line, e.path + ".kueueQueue", "must be a Kubernetes object name",
               "\"" + out.kueue_queue + "\"",
               spec_internal::HintFor(kSchedulingFields, "kueueQueue"));
    }
  }

  // Returns true if gpusPerNode was given.
  bool ParsePod(const Entry& e) {
    PodOptions& p = job_.pod;
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kPodFields);
    std::map<std::string, Json> v;
    for (auto& [key, entry] : f) v[key] = t_.Read(entry);
    auto str = [&](const char* key, std::string* out) {
      if (v.contains(key) && v[key].is_string()) *out = v[key].get<std::string>();
    };
    str("image", &p.image);
    str("imagePullPolicy", &p.image_pull_policy);
    str("gpuResource", &p.gpu_resource);
    str("cpu", &p.cpu);
    str("memory", &p.memory);
    str("shmSize", &p.shm_size);
    str("serviceAccountName", &p.service_account_name);
    str("priorityClassName", &p.priority_class_name);
    str("localCheckpointPath", &p.local_checkpoint_path);
    str("sharedCheckpointClaim", &p.shared_checkpoint_claim);
    str("configMap", &p.config_map);
    if (v.contains("injectAgent") && v["injectAgent"].is_boolean()) {
      p.inject_agent = v["injectAgent"].get<bool>();
    }
    if (v.contains("gpusPerNode") && v["gpusPerNode"].is_number()) {
      p.gpus_per_node = v["gpusPerNode"].get<int>();
    }
    if (v.contains("nodeSelector") && v["nodeSelector"].is_object()) {
      p.node_selector = v["nodeSelector"].get<std::map<std::string, std::string>>();
    }
    if (v.contains("tolerations") && v["tolerations"].is_array()) p.tolerations = v["tolerations"];
    if (v.contains("dataVolume") && v["dataVolume"].is_object()) p.data_volume = v["dataVolume"];
    if (v.contains("imagePullSecrets") && v["imagePullSecrets"].is_array()) {
      for (const Json& s : v["imagePullSecrets"]) {
        if (s.is_string()) p.image_pull_secrets.push_back(s.get<std::string>());
      }
    }

    auto bad = [&](const char* key, const std::string& problem, const std::string& got) {
      const Entry& at = f.at(key);
      r_.Error(at.line, at.path, problem, got, at.hint);
    };
    auto quoted = [](const std::string& s) { return "\"" + s + "\""; };
    if (ctx_.target == Target::kKubernetes && p.image.empty()) {
      if (f.contains("image")) {
        bad("image", "must not be empty", "\"\"");
      } else {
        Missing(e.line, e.path + ".image", kPodFields[0].hint);
      }
    }
    if (f.contains("gpuResource") && !IsQualifiedName(p.gpu_resource)) {
      bad("gpuResource", "must be a resource name such as nvidia.com/gpu", quoted(p.gpu_resource));
    }
    for (auto [key, val] : {std::pair{"serviceAccountName", &p.service_account_name},
                            {"priorityClassName", &p.priority_class_name},
                            {"sharedCheckpointClaim", &p.shared_checkpoint_claim},
                            {"configMap", &p.config_map}}) {
      if (f.contains(key) && !IsDns1123Subdomain(*val)) {
        bad(key, "must be a Kubernetes object name (lowercase letters, digits, '-', '.')",
            quoted(*val));
      }
    }
    if (f.contains("localCheckpointPath") &&
        (p.local_checkpoint_path.empty() || p.local_checkpoint_path[0] != '/')) {
      bad("localCheckpointPath", "must be an absolute path", quoted(p.local_checkpoint_path));
    }
    for (const auto& [k, val] : p.node_selector) {
      if (!IsQualifiedName(k) || !IsLabelValue(val)) {
        bad("nodeSelector", "keys must be label keys and values label values",
            quoted(k) + ": " + quoted(val));
      }
    }
    if (f.contains("tolerations")) CheckTolerations(f.at("tolerations"));
    if (f.contains("dataVolume") && p.data_volume.is_object() && p.data_volume.size() != 1) {
      bad("dataVolume", "must hold exactly one volume source",
          std::to_string(p.data_volume.size()) + " keys");
    }
    return v.contains("gpusPerNode") && v["gpusPerNode"].is_number();
  }

  // Each toleration names a key, and none tolerates Bulwark's quarantine taint.
  void CheckTolerations(const Entry& e) {
    int i = 0;
    for (const Json& t : job_.pod.tolerations) {
      const std::string key = t.value("key", "");
      const int line = e.value.IsSequence() && static_cast<size_t>(i) < e.value.size()
                           ? SpecReader::LineOf(e.value[i], e.line)
                           : e.line;
      if (key.empty() || key == kQuarantineTaintKey) {
        r_.Error(line, e.path + "[" + std::to_string(i) + "]",
                 key.empty() ? "tolerates every taint, Bulwark's quarantine included"
                             : "tolerates Bulwark's quarantine taint",
                 key.empty() ? "no key" : "\"" + key + "\"", kTolerationRules[0].message);
      }
      ++i;
    }
  }

  const ParseContext& ctx_;
  SpecReader r_;
  TableReader t_;
  TrainJob job_;
  bool name_ok_ = true;
};

}  // namespace

bool IsDns1035Label(const std::string& s) {
  return spec_internal::IsDnsLabel(s) && IsLower(s.front());
}

bool IsDns1123Subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string label = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!spec_internal::IsDnsLabel(label)) return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool IsLabelValue(const std::string& s) {
  if (s.empty()) return true;
  if (s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool IsQualifiedName(const std::string& s) {
  const size_t slash = s.find('/');
  std::string name = s;
  if (slash != std::string::npos) {
    if (!IsDns1123Subdomain(s.substr(0, slash))) return false;
    name = s.substr(slash + 1);
  }
  return !name.empty() && IsLabelValue(name);
}

bool IsQuantity(const std::string& s) {
  static const std::regex kQuantity(kQuantityPattern);
  return std::regex_match(s, kQuantity);
}

Result<YAML::Node> LoadDocument(const std::string& text, const std::string& source) {
  if (text.size() > spec_internal::kMaxSpecBytes) {
    return InvalidArgument(source + ":1: (top level): the manifest is too large (got " +
                           std::to_string(text.size()) +
                           " bytes); a manifest should be a few KiB of YAML (limit 1 MiB)");
  }
  return spec_internal::LoadSingleDocument(text, source);
}

std::string JoinComma(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Result<TrainJob> ParseTrainJobNode(const YAML::Node& root, const ParseContext& ctx,
                                   std::vector<std::string>* notes) {
  try {
    if (!root.IsMap()) {
      return InvalidArgument(ctx.source + (ctx.show_lines ? ":1" : "") +
                             ": (top level): a TrainJob must be a mapping (got " +
                             SpecReader::Describe(root) +
                             "); start with apiVersion: bulwark.dev/v1alpha1 and kind: TrainJob");
    }
    return TrainJobParser(ctx).Parse(root, notes);
  } catch (const std::exception& e) {
    return InvalidArgument(ctx.source + ": (top level): could not be parsed (got " +
                           std::string(e.what()) + "); check it against docs/trainjob.md");
  }
}

}  // namespace internal

Result<TrainJob> ParseTrainJob(const std::string& text, const std::string& source_name,
                               const std::string& base_dir, Target target) {
  BW_ASSIGN_OR_RETURN(YAML::Node root, internal::LoadDocument(text, source_name));
  return internal::ParseTrainJobNode(root, {source_name, true, base_dir, target}, nullptr);
}

Result<TrainJob> TrainJobFromObject(const Json& obj) {
  std::string ns = "default", name = "?";
  if (obj.is_object() && obj.contains("metadata") && obj["metadata"].is_object()) {
    const Json& m = obj["metadata"];
    if (m.contains("namespace") && m["namespace"].is_string()) ns = m["namespace"];
    if (m.contains("name") && m["name"].is_string()) name = m["name"];
  }
  return internal::ParseTrainJobNode(
      JsonToYaml(obj), {"trainjob " + ns + "/" + name, false, "", Target::kKubernetes}, nullptr);
}

}  // namespace bulwark::trainjob
