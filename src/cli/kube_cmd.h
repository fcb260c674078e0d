// Commands that talk to a Kubernetes cluster (docs/kubernetes.md):
//
//   bulwark operator [--kubeconfig F] [--context C] [--namespace NS] [--queues FILE] ...
//     runs the operator until SIGTERM/SIGINT (in-cluster config when the service
//     account is mounted, else the kubeconfig); leader election on a Lease.
//   bulwark submit SPEC [--kubeconfig F] [--context C] [--namespace NS]
//     creates the TrainJob for SPEC (a job spec, a TrainJob or a Kubeflow PyTorchJob
//     manifest, converted with its notes printed) and prints its name.
//
//   bulwark replay JOB N --kubeconfig F [--context C] [--namespace NS]
//     (ReplayOnCluster) creates TrainJob JOB-replay-N: JOB's spec with spec.replayOf,
//     which the operator runs from the incident's replay bundle; waits for it and
//     prints status.replay (docs/diagnosis.md, "On Kubernetes").
//
// Exit codes: 0 success; 1 the cluster or the operator failed (the message says what
// the API answered); 2 usage errors (bad flags, unreadable or invalid spec, each
// naming the field and the fix). Stateless; thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command_filter.h"
#include "trainjob/render.h"

namespace bulwark::cli {

struct KubeFlags {
  std::string kubeconfig;  // "" = in-cluster, else $KUBECONFIG, else ~/.kube/config
  std::string context;
  std::string ns;  // submit: the TrainJob's namespace ("" = the manifest's or the context's)
};

struct OperatorFlags {
  KubeFlags kube;
  std::string watch_namespace;  // "" = all namespaces
  std::string queues;           // YAML with `scheduler` and `queues` (docs/simulator.md)
  std::string state_dir = "/var/lib/bulwark";
  std::string bind = "0.0.0.0";
  std::string advertise;        // "" = $POD_IP, else 127.0.0.1
  std::string identity;         // "" = $POD_NAME (or the host name) + pid
  std::string lease_namespace;  // "" = $POD_NAMESPACE, else bulwark-system
  std::string metrics_addr = ":8080";
  std::string gpu_resource = "nvidia.com/gpu";
  std::string agent_path = "/usr/local/bin/bulwark-agent";
  std::string agent_image = trainjob::DefaultAgentImage();  // "" = job images must carry the agent
  bool no_leader_election = false;
};

int OperatorRun(const OperatorFlags& f, std::ostream& out, std::ostream& err);
int SubmitRun(const std::string& spec, const KubeFlags& f, std::ostream& out, std::ostream& err);

// Registers `operator` and `submit` on `app` and returns them; after app.parse, if one
// of them was given, *exit_code holds its exit code.
struct ClusterReplayFlags {
  KubeFlags kube;
  std::string job;
  int incident = 0;
  bool allow_code_change = false;
  std::vector<std::string> nodes;  // spec.replayOf.nodes (empty: the scheduler places it)
  std::string output;              // "" (text) or "json": status.replay
  double timeout_s = 3600;         // for the replay to end
};
// 0: every compared loss equal bit for bit; 1: a difference, nothing compared, the
// replay failed or timed out, or the cluster refused; 2: usage (no such TrainJob).
int ReplayOnCluster(const ClusterReplayFlags& f, std::ostream& out, std::ostream& err);

// Adds operator and submit to `app`, each in full only if `filter` says so (else by name
// and description); the one that runs stores its exit status in *exit_code.
std::vector<CLI::App*> AddKubeCommands(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                                       std::ostream& err = std::cerr,
                                       const CommandFilter& filter = {});

}  // namespace bulwark::cli
