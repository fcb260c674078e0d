#include "cli/kube_cmd.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "common/clock.h"
#include "common/json_util.h"
#include "controller/replay_bundle.h"
#include "k8s/client.h"
#include "metrics/http_endpoint.h"
#include "operator/dashboard.h"
#include "operator/operator.h"
#include "trainjob/manifest_input.h"
#include "trainjob/trainjob.h"

namespace bulwark::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop.store(true); }

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// In-cluster when no kubeconfig is named and the service account is mounted; else the
// kubeconfig (flag, $KUBECONFIG, ~/.kube/config).
Result<k8s::ClientConfig> ClusterConfig(const KubeFlags& f) {
  if (f.kubeconfig.empty() && !Env("KUBERNETES_SERVICE_HOST").empty()) {
    return k8s::InClusterConfig();
  }
  std::string path = f.kubeconfig;
  std::error_code ec;
  if (!path.empty() && !std::filesystem::exists(path, ec)) {
    return InvalidArgument("--kubeconfig: " + path +
                           " does not exist; name the cluster's kubeconfig file (kubectl "
                           "config view --raw > FILE writes the current one)");
  }
  if (path.empty()) path = Env("KUBECONFIG");
  if (path.empty() && !Env("HOME").empty()) path = Env("HOME") + "/.kube/config";
  if (path.empty() || !std::filesystem::exists(path, ec)) {
    return InvalidArgument(
        "no cluster configured: pass --kubeconfig FILE, set KUBECONFIG, or run "
        "inside a pod with a service account");
  }
  return k8s::LoadKubeConfig(path, f.context);
}

// The cluster's client, or nullptr after printing why ("bulwark <cmd>: ...");
// *context_ns (if given) gets the kubeconfig context's (or service account's) namespace.
std::unique_ptr<k8s::Client> Connect(const KubeFlags& f, const char* cmd, std::ostream& err,
                                     std::string* context_ns = nullptr) {
  auto cfg = ClusterConfig(f);
  if (!cfg.ok()) {
    err << "bulwark " << cmd << ": " << cfg.status().message() << "\n";
    return nullptr;
  }
  if (context_ns) *context_ns = cfg->namespace_;
  auto client = k8s::Client::Create(*cfg);
  if (!client.ok()) {
    err << "bulwark " << cmd << ": " << client.status().message() << "\n";
    return nullptr;
  }
  return std::move(*client);
}

}  // namespace

int OperatorRun(const OperatorFlags& f, std::ostream& out, std::ostream& err) {
  std::unique_ptr<k8s::Client> client = Connect(f.kube, "operator", err);
  if (!client) return 2;
  op::OperatorOptions o;
  o.watch_namespace = f.watch_namespace;
  o.gpu_resource = f.gpu_resource;
  if (!f.queues.empty()) {
    Status st = op::LoadSchedulerConfig(f.queues, &o.scheduler, &o.queues);
    if (!st.ok()) {
      err << st.message() << "\n";
      return 2;
    }
  }
  o.leader_election = !f.no_leader_election;
  o.leader.lease_namespace = !f.lease_namespace.empty()      ? f.lease_namespace
                             : !Env("POD_NAMESPACE").empty() ? Env("POD_NAMESPACE")
                                                             : "bulwark-system";
  std::string id = f.identity;
  if (id.empty()) {
    char host[256] = {};
    (void)gethostname(host, sizeof host - 1);
    id = (!Env("POD_NAME").empty() ? Env("POD_NAME") : std::string(host)) + "-" +
         std::to_string(getpid());
  }
  o.leader.identity = id;
  o.render.agent_path = f.agent_path;
  o.render.agent_image = f.agent_image;
  o.runner.state_dir = f.state_dir;
  o.runner.bind_host = f.bind;
  o.runner.advertise_host = !f.advertise.empty()     ? f.advertise
                            : !Env("POD_IP").empty() ? Env("POD_IP")
                                                     : "127.0.0.1";
  op::Operator oper(client.get(), o);
  std::unique_ptr<metrics::HttpEndpoint> http;
  if (!f.metrics_addr.empty()) {
    metrics::HttpEndpointHandlers handlers;
    handlers.healthy = [] { return true; };
    handlers.ready = [&oper] { return oper.leading(); };
    handlers.metrics = [&oper] { return op::FormatMetrics(oper.Stats(), oper.leading()); };
    // The web dashboard of every TrainJob: /jobs/ (read-only; docs/monitoring.md).
    handlers.route = [&oper](const std::string& path, const std::string& query) {
      return op::DashboardRoute({[&oper] { return oper.JobKeys(); },
                                 [&oper](const std::string& key) { return oper.JobStatus(key); }},
                                path, query, SystemClock::Get()->NowWall());
    };
    auto h = metrics::HttpEndpoint::Start(f.metrics_addr, handlers);
    if (!h.ok()) {
      err << "bulwark operator: " << h.status().message() << "\n";
      return 2;
    }
    http = std::move(*h);
  }
  signal(SIGTERM, OnStopSignal);
  signal(SIGINT, OnStopSignal);
  out << "bulwark operator " << id << ": " << client->config().server << ", watching "
      << (f.watch_namespace.empty() ? std::string("all namespaces") : f.watch_namespace)
      << (o.leader_election
              ? ", leader lease " + o.leader.lease_namespace + "/" + o.leader.lease_name
              : std::string(", no leader election"))
      << (http ? ", metrics on port " + std::to_string(http->port()) : std::string()) << "\n";
  out.flush();
  Status st = oper.Run(&g_stop);
  if (!st.ok()) {
    err << "bulwark operator: " << st.ToString() << "\n";
    return 1;
  }
  return 0;
}

// Creates the TrainJob of one manifest.
int SubmitOne(const trainjob::LoadedManifest& m, k8s::Client* client, const std::string& context_ns,
              const KubeFlags& f, std::ostream& out, std::ostream& err) {
  for (const std::string& n : m.notes) out << "note: " << n << "\n";
  trainjob::TrainJob tj = m.job;
  // kubectl's rule: --namespace, else the manifest's, else the kubeconfig context's.
  if (!f.ns.empty() && tj.ns_given && f.ns != tj.ns) {
    err << "bulwark submit: the manifest's namespace " << tj.ns << " does not match --namespace "
        << f.ns << "; drop one of them\n";
    return 2;
  }
  const std::string ns = !f.ns.empty() ? f.ns
                         : tj.ns_given ? tj.ns
                                       : (context_ns.empty() ? "default" : context_ns);
  if (ns != tj.ns) {
    // The default checkpoint directories are per namespace (/bulwark/{local,shared}/NS/NAME).
    for (const char* root : {"/bulwark/local/", "/bulwark/shared/"}) {
      if (tj.job.checkpoint.dir == root + tj.ns + "/" + tj.name) {
        tj.job.checkpoint.dir = root + ns + "/" + tj.name;
      }
    }
    tj.ns = ns;
  }
  auto created = client->Create(k8s::TrainJobs(), tj.ns, trainjob::ToObject(tj));
  if (!created.ok()) {
    err << "bulwark submit: " << created.status().message() << "\n";
    return k8s::IsAlreadyExists(created.status()) ||
                   created.status().code() == Code::kInvalidArgument
               ? 2
               : 1;
  }
  out << "trainjob.bulwark.dev/" << tj.name << " created in namespace " << tj.ns << "\n";
  return 0;
}

int SubmitRun(const std::string& spec, const KubeFlags& f, std::ostream& out, std::ostream& err) {
  auto in = trainjob::ReadManifestInput(spec);
  auto ms = in.ok() ? trainjob::ParseManifestInput(*in, trainjob::Target::kKubernetes)
                    : Result<std::vector<trainjob::LoadedManifest>>(in.status());
  if (!ms.ok()) {
    err << ms.status().message() << "\n";
    return ms.status().code() == Code::kInvalidArgument || ms.status().code() == Code::kNotFound
               ? 2
               : 1;
  }
  std::string context_ns;
  std::unique_ptr<k8s::Client> client = Connect(f, "submit", err, &context_ns);
  if (!client) return 2;
  int rc = 0;  // every manifest is tried, as kubectl create -f does
  for (const trainjob::LoadedManifest& m : *ms) {
    rc = std::max(rc, SubmitOne(m, client.get(), context_ns, f, out, err));
  }
  return rc;
}

int ReplayOnCluster(const ClusterReplayFlags& f, std::ostream& out, std::ostream& err) {
  std::string context_ns;
  std::unique_ptr<k8s::Client> client = Connect(f.kube, "replay", err, &context_ns);
  if (!client) return 2;
  const std::string ns = !f.kube.ns.empty()    ? f.kube.ns
                         : !context_ns.empty() ? context_ns
                                               : "default";
  auto orig = client->Get(k8s::TrainJobs(), ns, f.job);
  if (!orig.ok()) {
    err << "bulwark replay: TrainJob " << ns << "/" << f.job << ": " << orig.status().message()
        << "\n";
    return k8s::IsNotFound(orig.status()) ? 2 : 1;
  }
  if (!orig->contains("spec") || !(*orig)["spec"].is_object()) {
    err << "bulwark replay: TrainJob " << ns << "/" << f.job << " has no spec\n";
    return 1;
  }
  Json spec = (*orig)["spec"];
  spec.erase("suspend");
  spec.erase("replayOf");
  spec["replayOf"] = {{"trainJob", f.job}, {"incident", f.incident}};
  if (f.allow_code_change) spec["replayOf"]["allowCodeChange"] = true;
  if (!f.nodes.empty()) spec["replayOf"]["nodes"] = f.nodes;
  // JOB-replay-N, or -2, -3, ... beside earlier replays of it (a name is at most 63).
  const std::string stem = f.job.substr(0, 40) + "-replay-" + std::to_string(f.incident);
  std::string name;
  for (int k = 1; k <= 100 && name.empty(); ++k) {
    const std::string candidate = k == 1 ? stem : stem + "-" + std::to_string(k);
    Json obj = {{"apiVersion", "bulwark.dev/v1alpha1"},
                {"kind", "TrainJob"},
                {"metadata",
                 {{"name", candidate},
                  {"namespace", ns},
                  {"labels", {{"bulwark.dev/replay-of", f.job.substr(0, 63)}}}}},
                {"spec", spec}};
    auto created = client->Create(k8s::TrainJobs(), ns, obj);
    if (created.ok()) {
      name = candidate;
    } else if (!k8s::IsAlreadyExists(created.status())) {
      err << "bulwark replay: create TrainJob " << ns << "/" << candidate << ": "
          << created.status().message() << "\n";
      return 1;
    }
  }
  if (name.empty()) {
    err << "bulwark replay: TrainJobs " << stem << " to " << stem
        << "-100 exist already: delete old replays (kubectl delete trainjob -l "
           "bulwark.dev/replay-of="
        << f.job << ")\n";
    return 1;
  }
  if (f.output.empty()) {
    err << "[bulwark] trainjob.bulwark.dev/" << name << " created in namespace " << ns
        << ": replaying incident " << f.incident << " of " << f.job << " on the cluster\n";
  }
  // Polls the TrainJob until it ends (bounded by timeout_s).
  const Clock* clock = SystemClock::Get();
  const double deadline = clock->NowMono() + f.timeout_s;
  Json status;
  while (true) {
    auto now = client->Get(k8s::TrainJobs(), ns, name);
    if (now.ok() && now->contains("status") && (*now)["status"].is_object()) {
      status = (*now)["status"];
      const std::string phase = status.value("phase", std::string());
      if (phase == "Succeeded" || phase == "Failed") break;
    }
    if (clock->NowMono() >= deadline) {
      err << "bulwark replay: " << ns << "/" << name << " did not end within " << f.timeout_s
          << " s (kubectl describe trainjob " << name << ")\n";
      return 1;
    }
    clock->SleepFor(1);
  }
  const Json r = status.value("replay", Json());
  if (!r.is_object()) {
    err << "bulwark replay: " << ns << "/" << name << " " << status.value("phase", std::string())
        << " without a replay outcome: " << status.value("message", std::string()) << "\n";
    return 1;
  }
  if (f.output == "json") {
    Json o = r;
    o["name"] = name;
    o["namespace"] = ns;
    out << DumpText(o, 2) << "\n";
  } else {
    const long resume = r.value("resumeStep", -1L);
    out << "replay of incident " << f.incident << " of " << f.job << " (TrainJob " << name
        << ")\n  re-run from "
        << (resume < 0 ? std::string("scratch") : "checkpoint step " + std::to_string(resume))
        << " up to step " << r.value("faultStep", -1L) << "; code "
        << r.value("code", std::string("-"))
        << "\n  losses: " << r.value("summary", std::string("-")) << "\n";
    out << ReplayVerdictLines({{"fault_came_back", r.value("faultCameBack", false)},
                               {"passed", r.value("passed", false)},
                               {"fault_step", r.value("faultStep", -1L)},
                               {"evidence", r.value("evidence", std::string())},
                               {"cause", r.value("cause", std::string("unknown"))}});
  }
  return ReplayAllEqual(r) ? 0 : 1;
}

std::vector<CLI::App*> AddKubeCommands(CLI::App& app, int* exit_code, std::ostream& out,
                                       std::ostream& err, const CommandFilter& filter) {
  auto flags = std::make_shared<OperatorFlags>();
  auto* o = app.add_subcommand("operator", "run the Kubernetes operator (TrainJob controller)");
  if (filter.Full("operator")) {
    o->add_option("--kubeconfig", flags->kube.kubeconfig, "kubeconfig file (default: in-cluster)");
    o->add_option("--context", flags->kube.context, "kubeconfig context");
    o->add_option("--namespace", flags->watch_namespace, "watch TrainJobs only in this namespace");
    o->add_option("--queues", flags->queues, "YAML with scheduler: and queues: sections");
    o->add_option("--state-dir", flags->state_dir, "per-job stores and scratch");
    o->add_option("--bind", flags->bind, "address the job controllers listen on");
    o->add_option("--advertise", flags->advertise, "address agents dial (default $POD_IP)");
    o->add_option("--identity", flags->identity, "leader-election identity");
    o->add_option("--lease-namespace", flags->lease_namespace, "namespace of the leader Lease");
    o->add_option("--metrics-addr", flags->metrics_addr, "health and metrics address ('' = off)");
    o->add_option("--gpu-resource", flags->gpu_resource, "extended resource counted as GPUs");
    o->add_option("--agent-path", flags->agent_path,
                  "bulwark-agent's path inside --agent-image, and inside job images that carry it "
                  "(pod.injectAgent: false)")
        ->capture_default_str();
    o->add_option("--agent-image", flags->agent_image,
                  "image an init container copies bulwark-agent from into every pod of a job with "
                  "pod.injectAgent (the default); '' = job images must carry it")
        ->capture_default_str();
    o->add_flag("--no-leader-election", flags->no_leader_election, "single replica only");
    o->footer(
        "Example (outside a cluster, as the quick start in deploy/README.md does):\n"
        "  bulwark operator --kubeconfig ~/.kube/config --queues queues.yaml\n"
        "In a cluster: kubectl apply -k deploy/ (docs/kubernetes.md).");
    o->callback([flags, exit_code, &out, &err] { *exit_code = OperatorRun(*flags, out, err); });
  }

  auto sflags = std::make_shared<KubeFlags>();
  auto spec = std::make_shared<std::string>();
  auto* s = app.add_subcommand("submit", "create the TrainJob for a spec on a cluster");
  if (!filter.Full("submit")) return {o, s};
  s->add_option("spec,-f,--filename", *spec,
                "job spec, TrainJob or PyTorchJob manifest (every document; - reads standard "
                "input)")
      ->required();
  s->add_option("--kubeconfig", sflags->kubeconfig, "kubeconfig file");
  s->add_option("--context", sflags->context, "kubeconfig context");
  s->add_option("--namespace,-n", sflags->ns,
                "namespace (default: the manifest's, else the kubeconfig context's)");
  s->footer(
      "Examples:\n  bulwark submit deploy/sample-trainjob.yaml --kubeconfig ~/.kube/config\n"
      "  bulwark render job.yaml --trainjob --image repo/trainer:1 | bulwark submit -");
  s->callback(
      [sflags, spec, exit_code, &out, &err] { *exit_code = SubmitRun(*spec, *sflags, out, err); });
  return {o, s};
}

}  // namespace bulwark::cli
