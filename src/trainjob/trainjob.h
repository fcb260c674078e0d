// TrainJob: the Kubernetes resource (bulwark.dev/v1alpha1, kind TrainJob) that runs
// a Bulwark job, its parser, and the manifests Bulwark accepts (docs/trainjob.md).
//
// A TrainJob's `spec` holds the job fields of a job spec (docs/job-spec.md, parsed by
// src/spec with the same limits and messages) plus `scheduling`, `suspend` and `pod`.
// Everything here is pure (no I/O except LoadManifest reading its file), never
// throws, and is thread-safe (no shared mutable state).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "registry/image_config.h"
#include "sched/scheduler.h"
#include "spec/job_spec.h"

namespace bulwark::trainjob {

inline constexpr char kGroup[] = "bulwark.dev";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kApiVersion[] = "bulwark.dev/v1alpha1";
inline constexpr char kKind[] = "TrainJob";
inline constexpr char kPlural[] = "trainjobs";

// Who gang-schedules the job's pods.
enum class GangMode : uint8_t {
  kBulwark,  // Bulwark's scheduler (src/sched) picks the nodes; pods get spec.nodeName
  kVolcano,  // a Volcano PodGroup (minMember = nodes) and schedulerName: volcano
  kKueue,    // Kueue's plain-pod group labels; the LocalQueue admits the gang
};
const char* GangModeName(GangMode g);  // "bulwark", "volcano", "kueue"

// spec.scheduling: the fields of sched::JobRequest.
struct SchedulingSpec {
  std::string queue = "default";
  int priority = 0;
  sched::Tier tier = sched::Tier::kProduction;
  sched::TopologyLevel topology = sched::TopologyLevel::kAny;  // required_level
  std::string gpu_type = "h100";  // nodes are matched by label bulwark.dev/gpu-type
  GangMode gang = GangMode::kBulwark;
  std::string kueue_queue;  // the LocalQueue; required when gang is kKueue
  bool operator==(const SchedulingSpec&) const = default;
};

// spec.pod: how each node's pod is built (Kubernetes backend only). Strings are ""
// when unset.
struct PodOptions {
  std::string image;  // the training container's image
  // true: an init container copies bulwark-agent into the pod from
  // RenderOptions::agent_image (agent/install.h); false: the image has it at
  // RenderOptions::agent_path.
  bool inject_agent = true;
  std::string image_pull_policy = "IfNotPresent";
  int gpus_per_node = 0;  // limits[gpu_resource]; defaults to procsPerNode
  std::string gpu_resource = "nvidia.com/gpu";
  std::string cpu, memory;  // Kubernetes quantities; requests = limits
  std::string shm_size;     // sizeLimit of the /dev/shm emptyDir (medium Memory)
  std::map<std::string, std::string> node_selector;
  Json tolerations = Json::array();  // core/v1 Toleration objects
  std::string service_account_name;
  std::string priority_class_name;
  Json data_volume;  // a core/v1 VolumeSource mounted read-only at /data; null = none
  std::string local_checkpoint_path;    // hostPath (DirectoryOrCreate) at /bulwark/local
  std::string shared_checkpoint_claim;  // PVC (ReadWriteMany) at /bulwark/shared
  std::string config_map;               // at /bulwark/config, read-only
  // Secrets (kubernetes.io/dockerconfigjson) in the job's namespace: the pods'
  // imagePullSecrets, and the credentials the operator reads the image's config with
  // when the spec sets no command.
  std::vector<std::string> image_pull_secrets;
  bool operator==(const PodOptions&) const = default;
};

// spec.replayOf: this TrainJob re-runs an incident of another one from its replay
// bundle (docs/diagnosis.md, "On Kubernetes"); the operator runs it.
struct ReplayOf {
  std::string train_job;  // in the same namespace
  int incident = 0;       // 1-based
  bool allow_code_change = false;
  // Kubernetes nodes to re-run on, by slot (spec.nodes of them); empty = the scheduler's.
  std::vector<std::string> nodes;
};

struct TrainJob {
  std::string name;  // metadata.name (also job.name)
  std::string ns = "default";
  bool ns_given = false;   // metadata.namespace was in the manifest (else "default" is assumed)
  std::string uid;         // metadata.uid ("" until the API server assigns one)
  int64_t generation = 0;  // metadata.generation
  std::string resource_version;
  std::map<std::string, std::string> labels, annotations;
  JobSpec job;  // spec minus scheduling/pod/suspend; job.name == name
  SchedulingSpec scheduling;
  PodOptions pod;
  bool suspend = false;  // true: not admitted until set to false (Kueue's contract)
  std::optional<ReplayOf> replay_of;
};

// Where the parsed job runs, which decides how paths and defaults resolve.
enum class Target : uint8_t {
  // The local backend (`bulwark run`): workdir and checkpoint paths resolve against
  // the manifest's directory exactly as for a job spec; pod.image is optional.
  kLocal,
  // In pods: job.workdir stays "" unless set ("" = the image's working directory; a
  // relative workdir is relative to it); an unset checkpoint.dir becomes
  // /bulwark/shared/<ns>/<name> when pod.sharedCheckpointClaim is set, else
  // /bulwark/local/<ns>/<name>; pod.image is required.
  kKubernetes,
};

// A TrainJob (or converted PyTorchJob) may leave spec.command out: it then runs its
// image's ENTRYPOINT + CMD (args, when given, replace CMD), as Kubernetes runs a
// container without a command. The caller reads the image's config (src/registry:
// the operator before it starts the job, `bulwark run` before it runs it) and applies
// it here: job.command and job.args from the image (a torchrun launcher and its flags
// removed, as for a PyTorchJob's command); for kKubernetes also an unset workdir from
// WorkingDir and the image's Env for the variables the spec does not set (reserved ones
// skipped); kLocal ignores both (paths and variables of the image, not of this machine).
// Returns the line for the job's Event: "command from image IMAGE (sha256:...): [argv]".
// A job that has a command is left alone ("" returned). FailedPrecondition when the
// image has neither ENTRYPOINT nor CMD; InvalidArgument for a launcher it cannot remove.
Result<std::string> ApplyImageConfig(const registry::ImageConfig& image, Target target,
                                     TrainJob* t);

// Parses a TrainJob from YAML (or JSON) text. `source_name` prefixes errors;
// `base_dir` resolves relative paths for kLocal ("" = the current directory). Errors:
// InvalidArgument with one line per problem, all reported together, each
// "<source>:<line>: spec.scheduling.tier: must be one of production, research (got
// prod); set ...". Inputs over 1 MiB are rejected.
Result<TrainJob> ParseTrainJob(const std::string& text, const std::string& source_name,
                               const std::string& base_dir, Target target);

// The same for an object read from the API (target kKubernetes); errors carry no
// line numbers: "trainjob ml/gpt-char: spec.nodes: must be >= 1 (got 0); set ...".
Result<TrainJob> TrainJobFromObject(const Json& obj);

// The custom resource as the API would store it (apiVersion, kind, metadata, spec;
// no status). Round-trips: TrainJobFromObject(ToObject(t)) yields t for a TrainJob
// parsed for kKubernetes. Unset optional strings, lists and maps are omitted.
Json ToObject(const TrainJob& t);

// The scheduler's view of the job: id "<ns>/<name>", the job's nodes, scheduling
// fields, and `standby` warm standby nodes.
sched::JobRequest SchedRequest(const TrainJob& t, int standby);

// The number of warm standby pods: faultPolicy.spareNodes, or with `auto` the
// binomial P99 sched::StandbyNodes gives.
int StandbyCount(const JobSpec& job);

enum class ManifestKind : uint8_t { kJobSpec, kTrainJob, kPyTorchJob };
const char* ManifestKindName(ManifestKind k);  // "job spec", "TrainJob", "PyTorchJob"

struct LoadedManifest {
  ManifestKind kind = ManifestKind::kJobSpec;
  TrainJob job;
  // What the reader should know: for a PyTorchJob what was converted and what was
  // dropped and why; for kLocal that scheduling/pod/suspend are ignored (one line).
  std::vector<std::string> notes;
};

// Reads a plain job spec (no apiVersion), a TrainJob, or a Kubeflow PyTorchJob
// (kubeflow.org/v1) and returns it as a TrainJob. A job spec becomes a TrainJob in
// namespace "default" with default scheduling and no pod options. job.source_path is
// the absolute file path. A missing file gives NotFound; anything unreadable or
// invalid an error naming the file, line, field and fix.
Result<LoadedManifest> LoadManifest(const std::string& path, Target target);
// The same from text (`source_name` prefixes errors; `base_dir` as ParseTrainJob).
Result<LoadedManifest> ParseManifest(const std::string& text, const std::string& source_name,
                                     const std::string& base_dir, Target target);

}  // namespace bulwark::trainjob
