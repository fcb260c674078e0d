// The Kubernetes objects Bulwark generates, as pure functions of a TrainJob: the
// TrainJob CRD, one pod per node, the headless rendezvous Service, the Volcano
// PodGroup, Events and the quarantine taint (docs/trainjob.md). No I/O; thread-safe;
// every object validates against the Kubernetes v1.36 OpenAPI schema
// (k8s_schema_test).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/net.h"
#include "trainjob/trainjob.h"

namespace bulwark::trainjob {

// Labels, annotations and names shared with the operator.
inline constexpr char kJobLabel[] = "bulwark.dev/job";          // the TrainJob's name
inline constexpr char kNodeIdLabel[] = "bulwark.dev/node-id";   // "node-3"
inline constexpr char kRoleLabel[] = "bulwark.dev/role";        // "worker" | "standby"
inline constexpr char kSlotAnnotation[] = "bulwark.dev/slot";   // worker's node slot, "3"
inline constexpr char kAgentFinalizer[] = "bulwark.dev/agent";  // removed once the agent is done
// "host:port" where the pod's agent accepts an adopting controller (set by the operator
// once the agent said hello; docs/protocol.md, "Adoption").
inline constexpr char kAgentEndpointAnnotation[] = "bulwark.dev/agent-endpoint";
inline constexpr char kQuarantineTaint[] = "bulwark.dev/quarantined";
inline constexpr char kGpuTypeNodeLabel[] = "bulwark.dev/gpu-type";
inline constexpr char kAgentContainer[] = "agent";
inline constexpr char kInstallAgentContainer[] = "install-agent";  // the init container
// Mount points inside every pod.
inline constexpr char kRunDir[] = "/bulwark/run";
inline constexpr char kLocalCkptDir[] = "/bulwark/local";
inline constexpr char kSharedCkptDir[] = "/bulwark/shared";
inline constexpr char kConfigDir[] = "/bulwark/config";
inline constexpr char kAgentBundleDir[] = "/bulwark/agent";  // an injected agent's bundle
inline constexpr char kDataDir[] = "/data";

// The apiextensions.k8s.io/v1 CustomResourceDefinition of trainjobs.bulwark.dev. Its
// openAPIV3Schema is generated from the parser's field tables (types, required,
// enums, limits, int-or-string `auto`, descriptions from the fix hints) and carries
// the cross-field rules as x-kubernetes-validations (CEL). deploy/crd.yaml is this,
// as `bulwark render --crd` prints it.
Json TrainJobCrd();

// "ghcr.io/bulwark-dev/bulwark:<this version>": the operator image (deploy/operator.yaml),
// which carries bulwark-agent at /usr/local/bin; the default of `bulwark operator
// --agent-image` and `bulwark render --agent-image`.
std::string DefaultAgentImage();

struct RenderOptions {
  std::string controller_addr = "OPERATOR_POD_IP:PORT";  // HOST:PORT; the operator sets it per job
  std::string agent_path = "/usr/local/bin/bulwark-agent";  // inside the image
  // The image whose bulwark-agent (at agent_path) an init container installs into the
  // pods of jobs with pod.injectAgent (agent/install.h); "" = none: every job's image
  // must carry the agent at agent_path.
  std::string agent_image;
  double heartbeat_interval_s = 0;  // 0 = the job's faultPolicy.heartbeat.intervalSeconds
  std::string python_dir;           // agent --python-dir; "" = the agent's built-in default
  std::string lib_path;             // agent --lib; "" = the agent's built-in default
  std::map<std::string, std::string> labels;       // added to every object
  std::map<std::string, std::string> annotations;  // added to every object
  int grace_margin_s = 30;  // terminationGracePeriodSeconds = stopGraceSeconds + margin
  // gang kueue: the workers' pod group (and so its Workload's) name; "" = the job's
  // name. The operator names one per runner (KueuePodGroupName): Kueue matches a group
  // to the Workload of that name even when it has finished, so the pods of a resumed or
  // requeued job must form a new group.
  std::string kueue_pod_group;
};

// "<job>-<run_id>": a Kueue pod group name of at most 63 characters (a label value and
// a Workload name); a longer job name is cut and a hash of it added.
std::string KueuePodGroupName(const std::string& job, const std::string& run_id);

// One node's pod: name "<job>-<node_id>", labels bulwark.dev/{job,node-id,role}, owner
// reference to the TrainJob (controller, blockOwnerDeletion; t.uid must be set for the
// API to accept it), finalizer bulwark.dev/agent, hostNetwork with
// ClusterFirstWithHostNet, restartPolicy Never, spec.nodeName when `node_name` is given,
// the GPU limit, the job's tolerations (never the quarantine taint), the volumes
// (/bulwark/run, /dev/shm, /data, /bulwark/local, /bulwark/shared, /bulwark/config), the
// downward-API env (POD_NAME, POD_NAMESPACE, POD_IP, NODE_NAME), bulwark-agent as the
// entrypoint, SYS_PTRACE, and the gang scheduler's labels/annotations. With
// pod.injectAgent and o.agent_image, an init container of o.agent_image runs
// `bulwark-agent install /bulwark/agent` into an emptyDir and the entrypoint is that
// bundle (AgentBundleCommand), so pod.image needs no Bulwark files; otherwise the
// entrypoint is o.agent_path in pod.image. `slot` >= 0: the worker of that node slot;
// -1: a warm standby.
Json RenderPod(const TrainJob& t, const std::string& node_id, int slot,
               const std::string& node_name, const RenderOptions& o);

// The headless Service "<job>" (clusterIP None, publishNotReadyAddresses, selector
// bulwark.dev/job): the pods resolve as <node-id>.<job>.<ns>.svc for rendezvous.
Json RenderHeadlessService(const TrainJob& t, const RenderOptions& o = {});

// The Volcano PodGroup "<job>" (scheduling.volcano.sh/v1beta1, minMember = nodes,
// the queue, priority class and GPU minResources).
Json RenderPodGroup(const TrainJob& t, const RenderOptions& o = {});

// A core/v1 Event about `involved_object` (any object with apiVersion, kind and
// metadata), as `kubectl describe` shows it. `type` is "Normal" or "Warning";
// `reason` is CamelCase; `now` is seconds since the epoch. The name is
// "<object>.<16 hex digits>" derived from `now`, reason and message; the namespace
// is the object's ("default" for cluster-scoped objects such as Nodes).
Json RenderEvent(const Json& involved_object, const std::string& type, const std::string& reason,
                 const std::string& message, double now,
                 const std::string& component = "bulwark-operator");

// {key: bulwark.dev/quarantined, value: <reason as a label value>, effect: NoSchedule}.
Json RenderQuarantineTaint(const std::string& reason);

// Everything the operator creates for the job: the Service, the PodGroup (gang
// volcano), then the worker pods node-0..node-(nodes-1) and the warm standby pods
// node-nodes.. (StandbyCount of them, more when node_names holds more names).
// node_names[i] binds the i-th pod (workers first) with spec.nodeName; missing or
// "" names, and every name under gang volcano or kueue, leave binding to the
// scheduler.
std::vector<Json> RenderJobObjects(const TrainJob& t, const std::vector<std::string>& node_names,
                                   const RenderOptions& o);

}  // namespace bulwark::trainjob
