// The TrainJob schema beyond the job fields: the key tables of metadata, scheduling,
// pod and tolerations with their types, limits and fix hints. The parser
// (trainjob_parse.cc) and the CRD generator (crd.cc) both read these tables; the job
// fields come from src/spec/job_spec_schema.h. Internal to the trainjob component.
#pragma once

#include <climits>

#include "spec/job_spec_schema.h"
#include "spec/spec_reader.h"

namespace bulwark::trainjob::internal {

using spec_internal::CelRule;
using spec_internal::FieldDef;
using spec_internal::FieldType;

inline constexpr char kQuarantineTaintKey[] = "bulwark.dev/quarantined";
inline constexpr char kGpuTypeLabel[] = "bulwark.dev/gpu-type";
// A Kubernetes quantity (k8s.io/apimachinery resource.Quantity's grammar).
inline constexpr char kQuantityPattern[] =
    "^[+-]?([0-9]+|[0-9]+\\.[0-9]*|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$";

inline constexpr const char* kApiVersions[] = {"bulwark.dev/v1alpha1"};
inline constexpr const char* kKinds[] = {"TrainJob"};
inline constexpr const char* kTiers[] = {"production", "research"};
inline constexpr const char* kTopologies[] = {"any", "rack", "block", "zone"};
inline constexpr const char* kGangs[] = {"bulwark", "volcano", "kueue"};
inline constexpr const char* kPullPolicies[] = {"Always", "IfNotPresent", "Never"};
// The most GPUs a node's pod may request (pod.gpusPerNode, explicit or defaulted).
inline constexpr int kMaxGpusPerNode = 64;
inline constexpr const char* kTolerationOperators[] = {"Exists", "Equal"};
inline constexpr const char* kTaintEffects[] = {"NoSchedule", "PreferNoSchedule", "NoExecute"};

// Every field of a core/v1 ObjectMeta, so an object read from the API is accepted
// and a misspelled key in a file is caught.
inline constexpr FieldDef kMetadataFields[] = {
    {.key = "name",
     .hint = "set metadata.name to a DNS-1035 label: lowercase letters, digits and '-', starting "
             "with a letter, at most 63 characters (e.g. name: gpt-char)",
     .required = true},
    {.key = "namespace",
     .hint = "set metadata.namespace to a DNS-1123 label, or omit it for \"default\""},
    {.key = "uid", .hint = "metadata.uid is set by the API server; omit it"},
    {.key = "generation",
     .hint = "metadata.generation is set by the API server; omit it",
     .type = FieldType::kInt,
     .min = 0},
    {.key = "resourceVersion", .hint = "metadata.resourceVersion is set by the API server"},
    {.key = "labels",
     .hint = "set metadata.labels to a mapping of key: value strings",
     .type = FieldType::kStringMap},
    {.key = "annotations",
     .hint = "set metadata.annotations to a mapping of key: value strings",
     .type = FieldType::kStringMap},
    {.key = "generateName", .hint = "omit metadata.generateName", .type = FieldType::kAny},
    {.key = "selfLink", .hint = "omit metadata.selfLink", .type = FieldType::kAny},
    {.key = "creationTimestamp", .hint = "set by the API server", .type = FieldType::kAny},
    {.key = "deletionTimestamp", .hint = "set by the API server", .type = FieldType::kAny},
    {.key = "deletionGracePeriodSeconds", .hint = "set by the API server", .type = FieldType::kAny},
    {.key = "ownerReferences", .hint = "a list of owner references", .type = FieldType::kAny},
    {.key = "finalizers", .hint = "a list of finalizer names", .type = FieldType::kAny},
    {.key = "managedFields", .hint = "set by the API server", .type = FieldType::kAny},
};

inline constexpr CelRule kSchedulingRules[] = {
    {"!has(self.gang) || self.gang != 'kueue' || (has(self.kueueQueue) && self.kueueQueue != '')",
     "scheduling.kueueQueue is required when gang is kueue: set it to the LocalQueue's name"},
};

inline constexpr FieldDef kSchedulingFields[] = {
    {.key = "queue",
     .hint =
         "set scheduling.queue to the name of a Bulwark queue (default \"default\"); with gang: "
         "volcano it names the Volcano queue"},
    {.key = "priority",
     .hint = "set scheduling.priority to an integer; higher preempts lower (default 0)",
     .type = FieldType::kInt,
     .min = -1000000000,
     .max = 1000000000},
    {.key = "tier",
     .hint = "set scheduling.tier to production (reserved/on-demand nodes) or research "
             "(spot first)",
     .values = kTiers},
    {.key = "topology",
     .hint = "set scheduling.topology to any, rack, block or zone: the narrowest domain that must "
             "hold every node of the job",
     .values = kTopologies},
    {.key = "gpuType",
     .hint = "set scheduling.gpuType to a GPU type the operator reads from the nodes' labels "
             "(nvidia.com/gpu.product, cloud labels, bulwark.dev/gpu-type), e.g. h100"},
    {.key = "gang",
     .hint = "set scheduling.gang to bulwark (Bulwark places the pods), volcano (a Volcano "
             "PodGroup) or kueue (a Kueue pod group)",
     .values = kGangs},
    {.key = "kueueQueue",
     .hint = "set scheduling.kueueQueue to the Kueue LocalQueue that admits the job (required "
             "with gang: kueue)"},
};

inline constexpr CelRule kTolerationRules[] = {
    {"has(self.key) && self.key != '' && self.key != 'bulwark.dev/quarantined'",
     "pod.tolerations: name a taint key, and not bulwark.dev/quarantined: Bulwark quarantines "
     "bad nodes with that taint (an empty key tolerates every taint, the quarantine included)"},
};

inline constexpr FieldDef kTolerationFields[] = {
    {.key = "key", .hint = "set key to the taint key to tolerate, e.g. nvidia.com/gpu"},
    {.key = "operator",
     .hint = "set operator to Equal (match value) or Exists (any value)",
     .values = kTolerationOperators},
    {.key = "value", .hint = "set value to the taint value to match (with operator Equal)"},
    {.key = "effect",
     .hint = "set effect to NoSchedule, PreferNoSchedule or NoExecute, or omit it for all",
     .values = kTaintEffects},
    {.key = "tolerationSeconds",
     .hint = "set tolerationSeconds to how long a NoExecute taint is tolerated, in seconds",
     .type = FieldType::kInt},
};

inline constexpr CelRule kDataVolumeRules[] = {
    {"self.size() == 1",
     "pod.dataVolume must hold exactly one volume source, e.g. {persistentVolumeClaim: "
     "{claimName: datasets}}"},
};

inline constexpr CelRule kAbsolutePathRules[] = {
    {"self.startsWith('/')", "pod.localCheckpointPath must be an absolute path on the node"},
};

inline constexpr FieldDef kPodFields[] = {
    {.key = "image",
     .hint = "set pod.image to the training container's image, e.g. pytorch/pytorch:latest or "
             "ghcr.io/acme/train:1.0",
     .required = true},
    {.key = "injectAgent",
     .hint = "set pod.injectAgent to false only if pod.image has bulwark-agent at "
             "/usr/local/bin/bulwark-agent (Bulwark's trainer image or one built FROM it); true "
             "(the default) copies the agent into each pod from the operator's --agent-image",
     .type = FieldType::kBool},
    {.key = "imagePullPolicy",
     .hint = "set pod.imagePullPolicy to Always, IfNotPresent or Never",
     .values = kPullPolicies},
    {.key = "gpusPerNode",
     .hint = "set pod.gpusPerNode to the GPUs each node's pod requests, 0 to 64 (default: "
             "procsPerNode)",
     .type = FieldType::kInt,
     .min = 0,
     .max = kMaxGpusPerNode},
    {.key = "gpuResource",
     .hint = "set pod.gpuResource to the extended resource name of the GPUs, e.g. nvidia.com/gpu"},
    {.key = "cpu",
     .hint = "set pod.cpu to a Kubernetes quantity such as 32 or \"31500m\"",
     .type = FieldType::kQuantity},
    {.key = "memory",
     .hint = "set pod.memory to a Kubernetes quantity such as 512Gi",
     .type = FieldType::kQuantity},
    {.key = "shmSize",
     .hint = "set pod.shmSize to the size of /dev/shm (the memory checkpoint tier), e.g. 64Gi",
     .type = FieldType::kQuantity},
    {.key = "nodeSelector",
     .hint = "set pod.nodeSelector to a mapping of node label: value",
     .type = FieldType::kStringMap},
    {.key = "tolerations",
     .hint = "set pod.tolerations to a list of Kubernetes tolerations, e.g. [{key: nvidia.com/gpu, "
             "operator: Exists, effect: NoSchedule}]",
     .type = FieldType::kObjectList,
     .children = kTolerationFields,
     .rules = kTolerationRules,
     .max_items = 64},
    {.key = "serviceAccountName",
     .hint = "set pod.serviceAccountName to a ServiceAccount in the job's namespace"},
    {.key = "priorityClassName", .hint = "set pod.priorityClassName to a PriorityClass name"},
    {.key = "dataVolume",
     .hint = "set pod.dataVolume to one Kubernetes volume source, mounted read-only at /data, "
             "e.g. {persistentVolumeClaim: {claimName: datasets}}",
     .type = FieldType::kAnyObject,
     .rules = kDataVolumeRules},
    {.key = "localCheckpointPath",
     .hint = "set pod.localCheckpointPath to an absolute directory on the node (NVMe), mounted "
             "at /bulwark/local",
     .rules = kAbsolutePathRules},
    {.key = "sharedCheckpointClaim",
     .hint = "set pod.sharedCheckpointClaim to a ReadWriteMany PersistentVolumeClaim, mounted at "
             "/bulwark/shared"},
    {.key = "configMap",
     .hint = "set pod.configMap to a ConfigMap in the job's namespace, mounted at /bulwark/config"},
    {.key = "imagePullSecrets",
     .hint = "set pod.imagePullSecrets to a list of kubernetes.io/dockerconfigjson Secret names in "
             "the job's namespace, e.g. [regcred]",
     .type = FieldType::kStringList,
     .max_items = 16},
};

// spec.replayOf (docs/diagnosis.md, "On Kubernetes").
inline constexpr FieldDef kReplayOfFields[] = {
    {.key = "trainJob",
     .hint = "set replayOf.trainJob to the name of the TrainJob, in this namespace, whose "
             "incident to replay",
     .required = true},
    {.key = "incident",
     .hint = "set replayOf.incident to the incident's number, from 1, as `bulwark describe` "
             "lists them",
     .type = FieldType::kInt,
     .min = 1,
     .max = 1000000,
     .required = true},
    {.key = "allowCodeChange",
     .hint = "set replayOf.allowCodeChange to true to replay with another image than the "
             "incident's",
     .type = FieldType::kBool},
    {.key = "nodes",
     .hint = "set replayOf.nodes to the Kubernetes nodes to re-run on, one per node of the "
             "job in slot order (e.g. [gpu-07, gpu-12]); omit it to let the scheduler place "
             "the replay",
     .type = FieldType::kStringList,
     .max_items = 1024},
};

// The keys a TrainJob's spec holds besides the job fields.
inline constexpr FieldDef kSpecExtraFields[] = {
    {.key = "scheduling",
     .hint = "set scheduling to a mapping with any of: queue, priority, tier, topology, gpuType, "
             "gang, kueueQueue",
     .type = FieldType::kObject,
     .children = kSchedulingFields,
     .rules = kSchedulingRules},
    {.key = "suspend",
     .hint = "set suspend to true to hold the job (not admitted) or false to let it run",
     .type = FieldType::kBool},
    {.key = "pod",
     .hint = "set pod to a mapping with at least image (see docs/trainjob.md); the local "
             "backend ignores it",
     .type = FieldType::kObject,
     .required = true,
     .children = kPodFields},
    {.key = "replayOf",
     .hint = "set replayOf to {trainJob: NAME, incident: N} to re-run incident N of TrainJob NAME "
             "from its replay bundle (what `bulwark replay --kubeconfig` writes)",
     .type = FieldType::kObject,
     .children = kReplayOfFields},
};

inline constexpr FieldDef kTopFields[] = {
    {.key = "apiVersion",
     .hint = "set apiVersion: bulwark.dev/v1alpha1",
     .required = true,
     .values = kApiVersions},
    {.key = "kind", .hint = "set kind: TrainJob", .required = true, .values = kKinds},
    {.key = "metadata",
     .hint = "set metadata to a mapping with name (and optionally namespace)",
     .type = FieldType::kObject,
     .required = true,
     .children = kMetadataFields},
    {.key = "spec",
     .hint = "set spec to the job (docs/job-spec.md fields without name) plus scheduling, suspend "
             "and pod",
     .type = FieldType::kObject,
     .required = true},
    {.key = "status", .hint = "status is written by the operator", .type = FieldType::kAny},
};

}  // namespace bulwark::trainjob::internal
