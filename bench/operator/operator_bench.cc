// operator_bench: the operator's memory and CPU with 5,000 nodes and 500 TrainJobs of
// watched objects (bench/operator/run.py drives it and writes docs/benchmarks.md).
//
// One run of one mode:
//   --mode operator    `bulwark operator` (a child process) against the fake API server
//                      in this process, holding N Ready 8-GPU nodes and J TrainJobs of
//                      K nodes each. Phase 1 (sync + admission) ends when every TrainJob
//                      has a status and every admitted job has created its K pods; no
//                      kubelet runs, so pods stay Pending and every job's controller
//                      waits for its agents, as on a cluster pulling images. Phase 2
//                      (steady) lasts --steady-s with node status churn: every node's
//                      status is rewritten once a minute (its heartbeat).
//   --mode watch-only  the baseline: a child process that only keeps the same three
//                      informers (TrainJobs, Bulwark's pods, Nodes) with bw_k8s, the
//                      floor any operator pays to watch these objects.
// The child's CPU (utime + stime) and memory (VmRSS, VmHWM) are read from /proc every
// 250 ms. Prints one JSON object.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/proc.h"
#include "k8s/client.h"
#include "k8s/informer.h"
#include "k8s/testing/fake_apiserver.h"
#include "trainjob/render.h"

namespace {

using bulwark::Json;
namespace k8s = bulwark::k8s;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct ProcSample {
  double cpu_s = 0;
  double rss_mb = 0;
  double hwm_mb = 0;
  int threads = 0;
};

ProcSample Sample(pid_t pid) {
  ProcSample s;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(st, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string f;
    std::vector<std::string> v;
    while (rest >> f) v.push_back(f);
    // Fields after the command: state(0) ... utime(11) stime(12).
    if (v.size() > 12) {
      s.cpu_s = (std::stod(v[11]) + std::stod(v[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    auto kb = [&](const char* key) { return std::stod(line.substr(std::strlen(key))) / 1024.0; };
    if (line.rfind("VmRSS:", 0) == 0) s.rss_mb = kb("VmRSS:");
    if (line.rfind("VmHWM:", 0) == 0) s.hwm_mb = kb("VmHWM:");
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
  }
  return s;
}

Json Node(int i, int nodes) {
  const int racks = std::max(1, nodes / 32);
  const int rack = i % racks;
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", "node-" + std::to_string(i)},
            {"labels",
             {{"bulwark.dev/gpu-type", "h100"},
              {"topology.kubernetes.io/zone", "zone-" + std::to_string(rack % 4)},
              {"bulwark.dev/block", "block-" + std::to_string(rack / 8)},
              {"bulwark.dev/rack", "rack-" + std::to_string(rack)},
              {"kubernetes.io/hostname", "node-" + std::to_string(i)}}}}},
          {"spec", Json::object()}};
}

Json NodeStatus(double t) {
  char when[32];
  const std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return {{"capacity", {{"nvidia.com/gpu", "8"}, {"cpu", "192"}, {"memory", "2Ti"}}},
          {"allocatable", {{"nvidia.com/gpu", "8"}, {"cpu", "190"}, {"memory", "1900Gi"}}},
          {"conditions",
           {{{"type", "Ready"},
             {"status", "True"},
             {"reason", "KubeletReady"},
             {"message", "kubelet is posting ready status"},
             {"lastHeartbeatTime", when},
             {"lastTransitionTime", "2026-11-01T00:00:00Z"}}}}};
}

Json TrainJob(int i, int nodes_per_job) {
  return {{"apiVersion", "bulwark.dev/v1alpha1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", "job-" + std::to_string(i)}, {"namespace", "default"}}},
          {"spec",
           {{"nodes", nodes_per_job},
            {"procsPerNode", 8},
            {"command", {"python3", "train.py"}},
            {"checkpoint", {{"dir", "/bulwark/shared/ckpt"}, {"intervalSteps", 100}}},
            {"scheduling", {{"gpuType", "h100"}}},
            {"pod", {{"image", "ghcr.io/acme/train:1.0"}, {"gpusPerNode", 8}}}}}};
}

// The baseline child: three informers, then idle until SIGTERM.
std::atomic<bool> g_stop{false};
int WatchOnly(const std::string& kubeconfig) {
  signal(SIGTERM, [](int) { g_stop.store(true); });
  auto cfg = k8s::LoadKubeConfig(kubeconfig);
  if (!cfg.ok()) return 2;
  auto client = k8s::Client::Create(*cfg);
  if (!client.ok()) return 2;
  std::vector<std::unique_ptr<k8s::Informer>> infs;
  for (int r = 0; r < 3; ++r) {
    k8s::InformerOptions o;
    o.resource = r == 0 ? k8s::TrainJobs() : r == 1 ? k8s::Pods() : k8s::Nodes();
    if (r == 1) o.label_selector = "bulwark.dev/job";
    infs.push_back(std::make_unique<k8s::Informer>(client->get(), o, k8s::InformerHandlers{}));
    infs.back()->Start();
  }
  for (auto& i : infs) i->WaitForSync(300);
  std::printf("synced\n");
  std::fflush(stdout);
  while (!g_stop.load()) bulwark::PollReadable({}, 0.1);
  for (auto& i : infs) i->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"operator_bench"};
  std::string mode = "operator", bulwark_bin, watch_child, out_path;
  int nodes = 5000, jobs = 500, per_job = 8;
  double steady_s = 60;
  app.add_option("--mode", mode)->check(CLI::IsMember({"operator", "watch-only"}));
  app.add_option("--bulwark", bulwark_bin, "path of the bulwark binary (operator mode)");
  app.add_option("--watch-only-child", watch_child, "internal: run the baseline child");
  app.add_option("--nodes", nodes);
  app.add_option("--jobs", jobs);
  app.add_option("--nodes-per-job", per_job);
  app.add_option("--steady-s", steady_s);
  CLI11_PARSE(app, argc, argv);
  if (!watch_child.empty()) return WatchOnly(watch_child);

  auto server = k8s::testing::FakeApiServer::Start({});
  if (!server.ok()) {
    std::cerr << server.status().ToString() << "\n";
    return 1;
  }
  auto& srv = **server;
  const double t_load = Now();
  if (!srv.Create(bulwark::trainjob::TrainJobCrd()).ok()) return 1;
  for (int i = 0; i < nodes; ++i) {
    auto n = srv.Create(Node(i, nodes));
    if (!n.ok()) return 1;
    (*n)["status"] = NodeStatus(std::time(nullptr));
    if (!srv.UpdateStatus(*n).ok()) return 1;
  }
  for (int i = 0; i < jobs; ++i) {
    if (!srv.Create(TrainJob(i, per_job)).ok()) return 1;
  }
  const double load_s = Now() - t_load;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("bw-opbench-" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string kubeconfig = dir + "/kubeconfig";
  if (!srv.WriteKubeconfig(kubeconfig).ok()) return 1;

  bulwark::SpawnOptions so;
  if (mode == "operator") {
    so.argv = {bulwark_bin,   "operator",       "--kubeconfig", kubeconfig,  "--no-leader-election",
               "--state-dir", dir + "/state",   "--bind",       "127.0.0.1", "--advertise",
               "127.0.0.1",   "--metrics-addr", "127.0.0.1:0"};
  } else {
    so.argv = {argv[0], "--watch-only-child", kubeconfig};
  }
  so.env = bulwark::CurrentEnv();
  auto child = bulwark::Spawn(so);
  if (!child.ok()) {
    std::cerr << child.status().ToString() << "\n";
    return 1;
  }
  const pid_t pid = child->pid;
  ProcSample peak;
  auto sample = [&] {
    ProcSample s = Sample(pid);
    peak.rss_mb = std::max(peak.rss_mb, s.rss_mb);
    peak.hwm_mb = std::max(peak.hwm_mb, s.hwm_mb);
    peak.threads = std::max(peak.threads, s.threads);
    return s;
  };
  // Phase 1: sync (and, for the operator, admission and pod creation).
  const double t0 = Now();
  std::string out;
  bool eof = false, synced = false;
  int statused = 0;
  size_t pods = 0;
  while (!synced && Now() - t0 < 600) {
    bulwark::PollReadable({child->output.get()}, 0.25);
    out += bulwark::ReadAvailable(child->output.get(), &eof);
    sample();
    if (mode == "watch-only") {
      synced = out.find("synced") != std::string::npos;
    } else {
      statused = 0;
      for (const Json& j : srv.List(k8s::TrainJobs())) {
        statused += j.contains("status") && j["status"].contains("phase");
      }
      pods = srv.List(k8s::Pods()).size();
      synced = statused == jobs && pods >= static_cast<size_t>(std::min(jobs, nodes / per_job)) *
                                               static_cast<size_t>(per_job);
    }
    if (eof) break;
  }
  const double sync_s = Now() - t0;
  const ProcSample p1 = sample();
  // Phase 2: steady state with node heartbeats (every node once a minute).
  const double t1 = Now();
  int updates = 0;
  double next = t1;
  while (synced && Now() - t1 < steady_s) {
    const int due = static_cast<int>((Now() - t1) * nodes / 60.0);
    while (updates < due) {
      auto n = srv.Get(k8s::Nodes(), "", "node-" + std::to_string(updates % nodes));
      if (n.ok()) {
        (*n)["status"] = NodeStatus(std::time(nullptr) + updates);
        (void)srv.UpdateStatus(*n);
      }
      ++updates;
    }
    next += 0.25;
    bulwark::PollReadable({child->output.get()}, std::max(0.0, next - Now()));
    out += bulwark::ReadAvailable(child->output.get(), &eof);
    sample();
  }
  const ProcSample p2 = sample();
  kill(pid, SIGTERM);
  auto exit = bulwark::WaitExit(pid, 120);
  if (!exit) bulwark::TerminateGroup(pid, child->pgid, 1);
  Json r = {{"mode", mode},
            {"nodes", nodes},
            {"jobs", jobs},
            {"nodes_per_job", per_job},
            {"load_s", load_s},
            {"synced", synced},
            {"sync_s", sync_s},
            {"trainjobs_with_status", statused},
            {"pods", pods},
            {"sync_cpu_s", p1.cpu_s},
            {"sync_rss_mb", p1.rss_mb},
            {"steady_s", steady_s},
            {"steady_node_updates", updates},
            {"steady_cpu_s", p2.cpu_s - p1.cpu_s},
            {"steady_cpu_per_s", (p2.cpu_s - p1.cpu_s) / std::max(1e-9, steady_s)},
            {"steady_rss_mb", p2.rss_mb},
            {"peak_rss_mb", std::max(peak.hwm_mb, peak.rss_mb)},
            {"threads", peak.threads},
            {"exit", exit ? exit->Describe() : "killed"},
            {"tail", out.size() > 2000 ? out.substr(out.size() - 2000) : out}};
  std::cout << r.dump(2) << "\n";
  std::filesystem::remove_all(dir);
  return synced ? 0 : 1;
}
