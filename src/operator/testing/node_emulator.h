// NodeEmulator: the kubelets of a small cluster, for end-to-end tests against a real
// kube-apiserver (docs/kubernetes.md, "What runs for real in the tests"). It talks to
// the API server only through the API, with its own client, as a kubelet does.
//
// It registers Node objects (Ready, with the GPU resource and labels given), watches
// pods with an informer, and runs every pod bound to one of its nodes (spec.nodeName) as
// a local process, the way a kubelet runs a container: command + args with $(VAR)
// expanded from the container's env (literal values and the downward API fields
// metadata.name, metadata.namespace, spec.nodeName, status.podIP, status.hostIP), the
// image's paths mapped to host paths (`binaries`), and volume mount paths in the command
// line mapped to host directories backing the volumes (emptyDir per pod, hostPath per
// node, PVC per claim, configMap per name, all under `root`). The pod's init containers
// run first, the same way, one at a time to a zero exit (a failing one fails the pod). A
// pod whose spec.nodeSelector the node's labels do not match is rejected as the kubelet
// rejects it (Failed, NodeAffinity). It reports pod status through the status
// subresource (Running -> Succeeded or Failed with the exit code) and, for a pod with
// deletionTimestamp, stops the process (SIGTERM, grace, SIGKILL), reports its terminal
// phase and then completes the graceful deletion as the kubelet does (DELETE with
// gracePeriodSeconds 0; a finalizer still holds the object until its owner removes it).
//
// What it does NOT emulate: containers, images, cgroups and resource limits, the
// pod's file system view (only the command line's paths are mapped: paths the job
// itself names, such as checkpoint.dir, must be real paths on this machine), probes,
// restartPolicy (Bulwark uses Never), and a real network (every pod's IP is
// 127.0.0.1, as with hostNetwork on one host).
//
// SetNodeReady(node, false) is a node failure: the Ready condition turns Unknown
// (reason NodeStatusUnknown) with the unreachable NoSchedule/NoExecute taints, as the
// node lifecycle controller writes them, and every process of the node's pods is killed
// at once; their pods keep their last status (nobody reports for a dead kubelet). When
// the node is Ready again, a pod of it deleted meanwhile is reported Failed (exit 137,
// ContainerStatusUnknown) before its deletion is completed, as a returning kubelet
// does. The node lifecycle controller does not run in the test control plane; the
// emulator does its taint part (also removing the not-ready taint that admission puts
// on a new Node once it reports Ready).
//
// Thread-safe; one internal thread syncs the informer's pods every 20 ms. The
// destructor kills and reaps every process it started.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/proc.h"
#include "k8s/client.h"
#include "k8s/informer.h"

namespace bulwark::op::testing {

struct EmulatedNode {
  std::string name;
  std::map<std::string, std::string> labels;
  int gpus = 8;  // allocatable nvidia.com/gpu
};

struct NodeEmulatorOptions {
  k8s::Client* client = nullptr;  // not owned; must outlive the emulator
  std::vector<EmulatedNode> nodes;
  std::map<std::string, std::string> binaries;  // path in any image -> path here
  // image -> (path in that image -> path here): files only that image has.
  std::map<std::string, std::map<std::string, std::string>> image_binaries;
  std::string root;                              // backing directories and pod logs
  std::map<std::string, std::string> extra_env;  // added to every pod's environment
};

class NodeEmulator {
 public:
  static Result<std::unique_ptr<NodeEmulator>> Start(NodeEmulatorOptions opts);
  ~NodeEmulator();

  // Node failure (ready=false: Ready False + the node's pods killed) or recovery.
  Status SetNodeReady(const std::string& node, bool ready);
  int RunningPods() const;
  // The pod's combined output so far ("" if unknown).
  std::string PodLog(const std::string& pod) const;
  // Every pod it started, with its node and how it ended ("running", "exit 0", ...).
  std::vector<std::string> Summary() const;

 private:
  struct Proc {
    Child child;
    std::string node;
    std::string ns;
    bool terminating = false;
    double term_at = 0;
    double grace_s = 5;
    std::string log_path;
    std::string uid;
  };
  explicit NodeEmulator(NodeEmulatorOptions opts) : opts_(std::move(opts)) {}
  void Loop();
  void SyncPod(const Json& pod);
  Status StartPod(const Json& pod);
  void SetPhase(const Json& pod, const std::string& phase, int exit_code, const std::string& why);
  void Drain(Proc& p);
  void FinishDeletion(const Json& pod);
  Status SyncLifecycleTaints(const std::string& node, bool ready);

  NodeEmulatorOptions opts_;
  std::unique_ptr<k8s::Informer> pods_;
  mutable std::mutex mu_;
  std::map<std::string, Proc> procs_;         // by "ns/name"
  std::map<std::string, std::string> ended_;  // "ns/name" -> how it ended
  std::map<std::string, bool> ready_;         // by node
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace bulwark::op::testing
