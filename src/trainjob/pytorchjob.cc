// Kubeflow PyTorchJob (kubeflow.org/v1) -> TrainJob: what `bulwark run` and
// `bulwark render` do with a PyTorchJob manifest (docs/trainjob.md, Migration).
// Every converted or dropped part is reported as a note; what cannot be converted
// is an error naming the PyTorchJob field, its line and the fix.
#include <optional>
#include <set>

#include "spec/job_spec_schema.h"
#include "spec/spec_reader.h"
#include "trainjob/launcher.h"
#include "trainjob/trainjob_internal.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob::internal {
namespace {

using spec_internal::SpecReader;

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// n[key] when n is a mapping that holds key, else an undefined node. Never throws
// (yaml-cpp throws when a missing key's node is inspected).
YAML::Node At(const YAML::Node& n, const char* key) {
  if (!n.IsDefined() || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node v = n[key];
  return v.IsDefined() ? v : YAML::Node(YAML::NodeType::Undefined);
}

class Converter {
 public:
  Converter(const ParseContext& ctx, std::vector<std::string>* notes)
      : ctx_(ctx), r_(ctx.source), notes_(notes) {}

  Result<Json> Run(const YAML::Node& root) {
    const YAML::Node meta = At(root, "metadata");
    const YAML::Node spec = At(root, "spec");
    if (!IsA(At(root, "apiVersion"), "kubeflow.org/v1")) {
      Err(At(root, "apiVersion"), root, "apiVersion", "must be kubeflow.org/v1",
          "convert the manifest with Kubeflow's tools to kubeflow.org/v1 first");
    }
    if (!meta.IsMap() || !At(meta, "name").IsScalar()) {
      Err(meta, root, "metadata.name", "required field is missing",
          "give the PyTorchJob a metadata.name");
    }
    if (!spec.IsMap()) {
      Err(spec, root, "spec", "must be a mapping", "give the PyTorchJob a spec");
      return Finish();
    }
    out_ = {{"apiVersion", "bulwark.dev/v1alpha1"}, {"kind", "TrainJob"}};
    out_["metadata"] = Json::object();
    if (meta.IsMap()) ConvertMetadata(meta);
    out_["spec"] = {
        {"faultPolicy", Json::object()}, {"scheduling", Json::object()}, {"pod", Json::object()}};
    if (std::optional<YAML::Node> ts = ConvertReplicas(spec)) ConvertPodSpec(*ts);
    ConvertRunPolicy(At(spec, "runPolicy"));
    ConvertElastic(At(spec, "elasticPolicy"));
    ChooseProcsPerNode(spec);
    Json& s = out_["spec"];
    for (const char* k : {"faultPolicy", "scheduling", "pod"}) {
      if (s[k].empty() && std::string(k) != "pod") s.erase(k);
    }
    return Finish();
  }

 private:
  Result<Json> Finish() {
    if (r_.has_errors()) {
      std::string msg;
      for (const std::string& e : r_.SortedErrors()) msg += (msg.empty() ? "" : "\n") + e;
      return InvalidArgument(msg);
    }
    return out_;
  }

  static bool IsA(const YAML::Node& n, const char* v) { return n.IsScalar() && n.Scalar() == v; }

  void Note(const std::string& s) {
    if (notes_ != nullptr) notes_->push_back(ctx_.source + ": " + s);
  }

  void Err(const YAML::Node& at, const YAML::Node& parent, const std::string& path,
           const std::string& problem, const std::string& fix) {
    const int line = SpecReader::LineOf(at, SpecReader::LineOf(parent, 1));
    r_.Error(line, path, problem, at.IsDefined() ? SpecReader::Describe(at) : "nothing", fix);
  }

  void ConvertMetadata(const YAML::Node& meta) {
    Json& m = out_["metadata"];
    if (At(meta, "name").IsScalar()) m["name"] = At(meta, "name").Scalar();
    if (At(meta, "namespace").IsScalar()) m["namespace"] = At(meta, "namespace").Scalar();
    Json labels = YamlToJson(At(meta, "labels"));
    if (labels.is_object()) {
      if (labels.contains("kueue.x-k8s.io/queue-name") &&
          labels["kueue.x-k8s.io/queue-name"].is_string()) {
        kueue_queue_ = labels["kueue.x-k8s.io/queue-name"];
        labels.erase("kueue.x-k8s.io/queue-name");
      }
      if (!labels.empty()) m["labels"] = labels;
    }
    Json ann = YamlToJson(At(meta, "annotations"));
    if (ann.is_object() && !ann.empty()) m["annotations"] = ann;
  }

  // Sums Master and Worker replicas into nodes; returns the pod template's spec
  // (Master's if present, else Worker's).
  std::optional<YAML::Node> ConvertReplicas(const YAML::Node& spec) {
    const YAML::Node specs = At(spec, "pytorchReplicaSpecs");
    if (!specs.IsMap() || specs.size() == 0) {
      Err(specs, spec, "spec.pytorchReplicaSpecs", "required: a mapping of Master and/or Worker",
          "give at least a Worker replica spec with a pod template");
      return std::nullopt;
    }
    int nodes = 0;
    std::vector<std::string> parts;
    std::optional<YAML::Node> chosen;
    std::string chosen_type;
    for (const char* type : {"Master", "Worker"}) {
      const YAML::Node rs = At(specs, type);
      if (!rs.IsDefined()) continue;
      const std::string path = std::string("spec.pytorchReplicaSpecs.") + type;
      if (!rs.IsMap()) {
        Err(rs, specs, path, "must be a mapping", "give replicas and template");
        continue;
      }
      long replicas = 1;
      if (At(rs, "replicas").IsDefined()) {
        Json v = YamlToJson(At(rs, "replicas"));
        if (!v.is_number_integer() || v.get<long>() < 0 ||
            v.get<long>() > spec_internal::kMaxNodes) {
          Err(At(rs, "replicas"), rs, path + ".replicas", "must be an integer from 0 to 1024",
              "set the number of pods of this replica type");
          continue;
        }
        replicas = v.get<long>();
      }
      nodes += static_cast<int>(replicas);
      parts.push_back(std::string(type) + ".replicas " + std::to_string(replicas));
      if (At(rs, "restartPolicy").IsScalar()) {
        Note(path + ".restartPolicy " + At(rs, "restartPolicy").Scalar() +
             " dropped: Bulwark restarts the job itself (spec.faultPolicy)");
      }
      const YAML::Node ts = At(At(rs, "template"), "spec");
      if (!ts.IsMap()) {
        Err(At(rs, "template"), rs, path + ".template.spec", "required field is missing",
            "give the replica a pod template with containers");
        continue;
      }
      if (!chosen) {
        chosen.emplace(ts);
        chosen_type = type;
      } else {
        Note(path + ".template: ignored; every Bulwark node runs " + chosen_type +
             "'s container (the agent assigns ranks, not replica types)");
      }
    }
    for (const auto& kv : specs) {
      const std::string type = kv.first.as<std::string>("");
      if (type != "Master" && type != "Worker") {
        Err(kv.first, specs, "spec.pytorchReplicaSpecs." + type, "unknown replica type",
            "a PyTorchJob has only Master and Worker replicas");
      }
    }
    if (nodes == 0 && !r_.has_errors()) {
      Err(specs, spec, "spec.pytorchReplicaSpecs", "has no replicas (got 0 pods)",
          "set Worker.replicas to the number of nodes");
    }
    out_["spec"]["nodes"] = nodes;
    Note("nodes: " + std::to_string(nodes) + " = " + JoinComma(parts) + " (one pod per node)");
    template_path_ = "spec.pytorchReplicaSpecs." + chosen_type + ".template.spec";
    return chosen;
  }

  void ConvertPodSpec(const YAML::Node& ts) {
    Json& pod = out_["spec"]["pod"];
    const YAML::Node containers = At(ts, "containers");
    if (!containers.IsSequence() || containers.size() == 0) {
      Err(containers, ts, template_path_ + ".containers", "required: a list of containers",
          "give the pod template the training container");
      return;
    }
    size_t pick = 0;
    for (size_t i = 0; i < containers.size(); ++i) {
      if (IsA(At(containers[i], "name"), "pytorch")) pick = i;
    }
    for (size_t i = 0; i < containers.size(); ++i) {
      if (i != pick) {
        Note(template_path_ + ".containers[" + std::to_string(i) + "] (" +
             At(containers[i], "name").as<std::string>("unnamed") +
             ") dropped: a Bulwark pod runs one container, the agent and its ranks");
      }
    }
    ConvertContainer(containers[pick], template_path_ + ".containers[" + std::to_string(pick) + "]",
                     ts);
    for (const char* key : {"nodeSelector", "tolerations"}) {
      Json v = YamlToJson(At(ts, key));
      if (!v.is_null()) pod[key] = v;
    }
    if (At(ts, "serviceAccountName").IsScalar()) {
      pod["serviceAccountName"] = At(ts, "serviceAccountName").Scalar();
    }
    if (At(ts, "priorityClassName").IsScalar()) {
      pod["priorityClassName"] = At(ts, "priorityClassName").Scalar();
    }
    if (const YAML::Node ps = At(ts, "imagePullSecrets"); ps.IsSequence()) {
      for (const YAML::Node& s : ps) {
        if (At(s, "name").IsScalar()) pod["imagePullSecrets"].push_back(At(s, "name").Scalar());
      }
    }
    if (IsA(At(ts, "schedulerName"), "volcano")) {
      out_["spec"]["scheduling"]["gang"] = "volcano";
      Note(template_path_ +
           ".schedulerName volcano -> scheduling.gang: volcano (a PodGroup with "
           "minMember = nodes)");
    }
    static const std::set<std::string> kHandled = {
        "containers",  "nodeSelector",      "tolerations",     "serviceAccountName",
        "volumes",     "priorityClassName", "schedulerName",   "restartPolicy",
        "hostNetwork", "dnsPolicy",         "imagePullSecrets"};
    std::vector<std::string> dropped;
    for (const auto& kv : ts) {
      const std::string key = kv.first.as<std::string>("");
      if (!kHandled.contains(key)) dropped.push_back(key);
    }
    if (!dropped.empty()) {
      Note(template_path_ + ": " + JoinComma(dropped) +
           " dropped: not part of a TrainJob's pod (docs/trainjob.md lists what is)");
    }
  }

  void ConvertContainer(const YAML::Node& c, const std::string& path, const YAML::Node& ts) {
    Json& s = out_["spec"];
    Json& pod = s["pod"];
    if (At(c, "image").IsScalar()) {
      pod["image"] = At(c, "image").Scalar();
      Note("pod.image: " + At(c, "image").Scalar() +
           " (as it is: each pod's init container installs bulwark-agent into it from the "
           "operator's image, pod.injectAgent)");
    } else {
      Err(At(c, "image"), c, path + ".image", "required field is missing",
          "give the container image");
    }
    if (At(c, "imagePullPolicy").IsScalar())
      pod["imagePullPolicy"] = At(c, "imagePullPolicy").Scalar();
    ConvertCommand(c, path);
    ConvertEnv(At(c, "env"), path + ".env");
    ConvertResources(At(c, "resources"), path + ".resources");
    ConvertVolumes(At(c, "volumeMounts"), At(ts, "volumes"), path);
    if (At(c, "workingDir").IsScalar()) {
      if (ctx_.target == Target::kLocal) {
        Note(path + ".workingDir " + At(c, "workingDir").Scalar() +
             " dropped: it is a path in the image; the local backend runs in the manifest's "
             "directory");
      } else {
        s["workdir"] = At(c, "workingDir").Scalar();
      }
    }
    static const std::set<std::string> kHandled = {"name",      "image",        "imagePullPolicy",
                                                   "command",   "args",         "env",
                                                   "resources", "volumeMounts", "workingDir"};
    std::vector<std::string> dropped;
    for (const auto& kv : c) {
      const std::string key = kv.first.as<std::string>("");
      if (!kHandled.contains(key)) dropped.push_back(key);
    }
    if (!dropped.empty()) {
      Note(path + ": " + JoinComma(dropped) +
           " dropped: Bulwark builds the container (hostNetwork, the agent as entrypoint, "
           "SYS_PTRACE)");
    }
  }

  void ConvertCommand(const YAML::Node& c, const std::string& path) {
    std::vector<std::string> argv[2];
    int i = 0;
    for (const char* key : {"command", "args"}) {
      const YAML::Node n = At(c, key);
      std::vector<std::string>& out = argv[i++];
      if (!n.IsDefined() || n.IsNull()) continue;
      if (!n.IsSequence()) {
        Err(n, c, path + "." + key, "must be a list of strings", "write it as a YAML list");
        return;
      }
      for (const YAML::Node& a : n) out.push_back(a.IsScalar() ? a.Scalar() : "");
    }
    if (!At(c, "command").IsSequence() || At(c, "command").size() == 0) {
      // Kubernetes runs the image's ENTRYPOINT + CMD (args replace CMD); so does Bulwark,
      // with the command read from the image's config when the job starts
      // (ApplyImageConfig), since the pod's entrypoint is bulwark-agent.
      if (!argv[1].empty()) out_["spec"]["args"] = argv[1];
      Note(path + ".command: not set: the command will be the image's ENTRYPOINT + " +
           (argv[1].empty() ? std::string("CMD") : "args (which replace CMD)") +
           ", read from its registry when the job starts");
      return;
    }
    Result<Launch> l = StripLauncher(argv[0], argv[1]);
    if (!l.ok()) {
      Err(At(c, "command"), c, path + ".command", l.status().message(),
          "call the training script directly; the agent sets the torchrun environment");
      return;
    }
    Json& s = out_["spec"];
    const size_t split = l->program_args;
    s["command"] = std::vector<std::string>(l->argv.begin(), l->argv.begin() + split);
    std::vector<std::string> args(l->argv.begin() + split, l->argv.end());
    if (!args.empty()) s["args"] = args;
    if (!l->launcher.empty()) {
      Note("command: " + l->launcher + " and its flags (" +
           (l->dropped_flags.empty() ? std::string("none") : JoinComma(l->dropped_flags)) +
           ") removed: the agent starts procsPerNode ranks with the torchrun environment");
    }
    launcher_nproc_ = l->nproc_per_node;
  }

  void ConvertEnv(const YAML::Node& env, const std::string& path) {
    if (!env.IsSequence()) return;
    Json vars = Json::object();
    for (const YAML::Node& e : env) {
      const std::string name = At(e, "name").IsScalar() ? At(e, "name").Scalar() : "";
      if (At(e, "valueFrom").IsDefined()) {
        Note(path + "." + name +
             " dropped: valueFrom (secrets, fields) is not supported in a TrainJob's env; bake "
             "it into the image or read it from a mounted file");
      } else if (!spec_internal::IsEnvName(name)) {
        Note(path + ": entry \"" + name + "\" dropped: not a valid variable name");
      } else if (spec_internal::IsReservedEnv(name)) {
        Note(path + "." + name + " dropped: the agent sets it for every rank");
      } else {
        vars[name] = At(e, "value").IsScalar() ? At(e, "value").Scalar() : "";
      }
    }
    if (!vars.empty()) out_["spec"]["env"] = vars;
  }

  void ConvertResources(const YAML::Node& res, const std::string& path) {
    if (!res.IsMap()) return;
    Json limits = YamlToJson(res["limits"]);
    Json requests = YamlToJson(res["requests"]);
    Json& pod = out_["spec"]["pod"];
    auto quantity = [](const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    std::vector<std::string> dropped;
    for (const Json* m : {&requests, &limits}) {  // limits win
      if (!m->is_object()) continue;
      for (auto it = m->begin(); it != m->end(); ++it) {
        const std::string& k = it.key();
        if (k == "cpu" || k == "memory") {
          pod[k] = quantity(it.value());
        } else if (k.size() > 4 && k.ends_with("/gpu")) {
          pod["gpuResource"] = k;
          if (it.value().is_number_integer()) {
            pod["gpusPerNode"] = it.value().get<int>();
          } else if (it.value().is_string()) {
            pod["gpusPerNode"] = std::atoi(it.value().get<std::string>().c_str());
          }
          gpus_ = pod["gpusPerNode"];
        } else if (m == &limits) {
          dropped.push_back(k);
        }
      }
    }
    if (!dropped.empty()) {
      Note(path + ".limits: " + JoinComma(dropped) +
           " dropped: a TrainJob requests cpu, memory and one GPU resource");
    }
  }

  void ConvertVolumes(const YAML::Node& mounts, const YAML::Node& volumes,
                      const std::string& path) {
    if (!mounts.IsSequence()) return;
    std::map<std::string, Json> by_name;
    if (volumes.IsSequence()) {
      for (const YAML::Node& v : volumes) {
        Json j = YamlToJson(v);
        if (j.is_object() && j.contains("name") && j["name"].is_string()) {
          by_name[j["name"]] = j;
        }
      }
    }
    Json& pod = out_["spec"]["pod"];
    std::vector<std::pair<std::string, Json>> data;  // (mountPath, VolumeSource)
    for (const YAML::Node& m : mounts) {
      const std::string name = At(m, "name").IsScalar() ? At(m, "name").Scalar() : "";
      const std::string at = At(m, "mountPath").IsScalar() ? At(m, "mountPath").Scalar() : "";
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        Note(path + ".volumeMounts: " + name + " at " + at + " dropped: no volume of that name");
        continue;
      }
      Json source = it->second;
      source.erase("name");
      const bool ckpt = Contains(at, "checkpoint") || Contains(at, "ckpt");
      if (at == "/dev/shm") {
        if (source.contains("emptyDir") && source["emptyDir"].is_object() &&
            source["emptyDir"].contains("sizeLimit")) {
          const Json& size = source["emptyDir"]["sizeLimit"];
          pod["shmSize"] = size.is_string() ? size.get<std::string>() : size.dump();
        }
        Note("volume " + name +
             " at /dev/shm -> pod.shmSize (every Bulwark pod mounts a Memory emptyDir there; the "
             "memory checkpoint tier lives in it)");
      } else if (source.contains("configMap") && source["configMap"].contains("name")) {
        pod["configMap"] = source["configMap"]["name"];
        Note("volume " + name + " (configMap) -> pod.configMap, mounted at /bulwark/config (was " +
             at + "): update paths that point into it");
      } else if (ckpt && source.contains("persistentVolumeClaim") &&
                 source["persistentVolumeClaim"].contains("claimName")) {
        pod["sharedCheckpointClaim"] = source["persistentVolumeClaim"]["claimName"];
        Note("volume " + name + " at " + at +
             " -> pod.sharedCheckpointClaim: Bulwark writes checkpoints under /bulwark/shared; "
             "the trainer loads them through the SDK");
      } else if (ckpt && source.contains("hostPath") && source["hostPath"].contains("path")) {
        pod["localCheckpointPath"] = source["hostPath"]["path"];
        Note("volume " + name + " at " + at + " -> pod.localCheckpointPath (/bulwark/local)");
      } else {
        data.emplace_back(at, source);
        data_names_.push_back(name);
      }
    }
    int pick = -1;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i].first == "/data") pick = static_cast<int>(i);
    }
    if (pick < 0 && data.size() == 1) pick = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      if (static_cast<int>(i) == pick) {
        pod["dataVolume"] = data[i].second;
        Note("volume " + data_names_[i] + " -> pod.dataVolume, mounted read-only at /data" +
             (data[i].first == "/data" ? std::string()
                                       : " (was " + data[i].first + "): update paths in args"));
      } else {
        Note("volume " + data_names_[i] + " at " + data[i].first +
             " dropped: a TrainJob mounts one data volume at /data; choose it with "
             "pod.dataVolume");
      }
    }
  }

  void ConvertRunPolicy(const YAML::Node& rp) {
    if (!rp.IsMap()) return;
    Json& s = out_["spec"];
    Json backoff = YamlToJson(At(rp, "backoffLimit"));
    if (backoff.is_number_integer()) {
      s["faultPolicy"]["restartBudget"] = backoff;
      Note("runPolicy.backoffLimit " + backoff.dump() + " -> faultPolicy.restartBudget");
    }
    for (const char* key : {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds"}) {
      if (At(rp, key).IsDefined()) {
        Note(std::string("runPolicy.") + key +
             " dropped: the operator deletes a finished job's pods and keeps the TrainJob");
      }
    }
    if (IsA(At(rp, "suspend"), "true")) s["suspend"] = true;
    const YAML::Node sp = At(rp, "schedulingPolicy");
    if (sp.IsMap()) {
      if (At(sp, "queue").IsScalar()) {
        s["scheduling"]["queue"] = At(sp, "queue").Scalar();
        Note("runPolicy.schedulingPolicy.queue -> scheduling.queue " + At(sp, "queue").Scalar());
      }
      if (At(sp, "priorityClass").IsScalar()) {
        s["pod"]["priorityClassName"] = At(sp, "priorityClass").Scalar();
        Note("runPolicy.schedulingPolicy.priorityClass -> pod.priorityClassName");
      }
      if (At(sp, "minAvailable").IsDefined()) {
        Note("runPolicy.schedulingPolicy.minAvailable dropped: the gang is always every node");
      }
    }
    if (!kueue_queue_.empty()) {
      s["scheduling"]["gang"] = "kueue";
      s["scheduling"]["kueueQueue"] = kueue_queue_;
      Note("label kueue.x-k8s.io/queue-name -> scheduling.gang: kueue, kueueQueue " + kueue_queue_);
    }
  }

  void ConvertElastic(const YAML::Node& ep) {
    if (!ep.IsMap()) return;
    Json& s = out_["spec"];
    Json restarts = YamlToJson(At(ep, "maxRestarts"));
    if (restarts.is_number_integer() && !s["faultPolicy"].contains("restartBudget")) {
      s["faultPolicy"]["restartBudget"] = restarts;
      Note("elasticPolicy.maxRestarts " + restarts.dump() + " -> faultPolicy.restartBudget");
    }
    Json nproc = YamlToJson(At(ep, "nProcPerNode"));
    if (nproc.is_number_integer()) elastic_nproc_ = nproc.get<int>();
    std::vector<std::string> dropped;
    for (const auto& kv : ep) {
      const std::string key = kv.first.as<std::string>("");
      if (key != "maxRestarts" && key != "nProcPerNode") dropped.push_back(key);
    }
    if (!dropped.empty()) {
      Note("elasticPolicy: " + JoinComma(dropped) +
           " dropped: the node count is fixed and the agent does the rendezvous; Bulwark "
           "replaces lost nodes from warm standbys instead of shrinking the job");
    }
  }

  void ChooseProcsPerNode(const YAML::Node& spec) {
    int ppn = 0;
    std::string from;
    Json top = YamlToJson(At(spec, "nprocPerNode"));
    int top_int = 0;
    if (top.is_number_integer()) {
      top_int = top.get<int>();
    } else if (top.is_string() && !top.get<std::string>().empty() &&
               top.get<std::string>().find_first_not_of("0123456789") == std::string::npos) {
      top_int = std::atoi(top.get<std::string>().c_str());
    }
    if (top_int > 0) {
      ppn = top_int;
      from = "from spec.nprocPerNode";
    } else if (elastic_nproc_ > 0) {
      ppn = elastic_nproc_;
      from = "from elasticPolicy.nProcPerNode";
    } else if (launcher_nproc_ > 0) {
      ppn = launcher_nproc_;
      from = "from the launcher's --nproc_per_node";
    } else if (gpus_.is_number_integer() && gpus_.get<int>() > 0) {
      ppn = gpus_.get<int>();
      from = "from the container's GPU limit";
    } else {
      ppn = 1;
      from = "the default: no nprocPerNode, launcher flag or GPU limit given";
    }
    out_["spec"]["procsPerNode"] = ppn;
    Note("procsPerNode: " + std::to_string(ppn) + " (" + from + ")");
  }

  const ParseContext& ctx_;
  SpecReader r_;
  std::vector<std::string>* notes_;
  Json out_;
  std::string template_path_;
  std::string kueue_queue_;
  std::vector<std::string> data_names_;
  Json gpus_;
  int elastic_nproc_ = 0;
  int launcher_nproc_ = 0;
};

}  // namespace

Result<Json> ConvertPyTorchJob(const YAML::Node& root, const ParseContext& ctx,
                               std::vector<std::string>* notes) {
  try {
    return Converter(ctx, notes).Run(root);
  } catch (const std::exception& e) {
    return InvalidArgument(ctx.source + ":1: (top level): could not convert the PyTorchJob (got " +
                           std::string(e.what()) + "); check it against Kubeflow's v1 API");
  }
}

}  // namespace bulwark::trainjob::internal
