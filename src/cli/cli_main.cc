// `bulwark`: the command-line entry point. Subcommands:
//   run SPEC        run a job with the embedded controller, on the local backend or,
//                   inside a Slurm allocation, on Slurm (slurm_cmd.h)
//                   (SPEC: a job spec, a TrainJob or a Kubeflow PyTorchJob)
//   validate SPEC   parse and validate a job spec, TrainJob or PyTorchJob
//   render SPEC     the Kubernetes objects the operator would create (render_cmd.h)
//   chaos ACTION    inject a fault into a running job (talks to its controller)
//   update SPEC     apply a changed command, args, env or workdir to a running job in
//                   place (talks to its controller)
//   get / describe / logs / cancel   the local jobs of the stores (jobs_cmd.h)
//   ckpt ls|inspect|verify|gc   inspect and maintain a checkpoint dir (ckpt_cmd.h)
//   operator        run the Kubernetes operator; submit SPEC: create its TrainJob on a
//                   cluster (kube_cmd.h, docs/kubernetes.md)
//   slurm script SPEC   an sbatch script that runs SPEC on Slurm (slurm_cmd.h)
//   sim CONFIG      simulate a cluster through faults with the real scheduler and
//                   recovery policy (sim_cmd.h, docs/simulator.md)
#include "cli/cli_main.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "backend/local_backend.h"
#include "ckpt/checkpoint.h"
#include "cli/adhoc.h"
#include "cli/ckpt_cmd.h"
#include "cli/command_filter.h"
#include "cli/diagnose_cmd.h"
#include "cli/jobs_cmd.h"
#include "cli/kube_cmd.h"
#include "cli/progress.h"
#include "cli/render_cmd.h"
#include "cli/replay_cmd.h"
#include "cli/sim_cmd.h"
#include "cli/slurm_cmd.h"
#include "cli/stores.h"
#include "common/flag_checks.h"
#include "common/install_paths.h"
#include "common/proc.h"
#include "controller/controller.h"
#include "controller/dashboard_api.h"
#include "metrics/http_endpoint.h"
#include "registry/registry.h"
#include "spec/job_spec.h"
#include "spec/spec_reader.h"
#include "store/store.h"
#include "trainjob/manifest_input.h"
#include "trainjob/trainjob.h"
#include "ui/assets.h"

#ifndef BULWARK_SOURCE_DIR
#define BULWARK_SOURCE_DIR ""
#endif
#ifndef BULWARK_VERSION
#define BULWARK_VERSION "unknown"
#endif

namespace bulwark {
namespace {

namespace fs = std::filesystem;

std::string EnvOr(const char* k, const std::string& def) {
  const char* v = getenv(k);
  return v && *v ? v : def;
}

void OnSignal(int) { Controller::RequestCancel(); }

int Fail(const Status& st) {
  std::fprintf(stderr, "bulwark: %s\n", st.message().c_str());
  return st.code() == Code::kInvalidArgument ? 2 : 1;
}

// A manifest argument that names no file is a usage error (exit 2), as a bad flag is.
Status InputError(const Status& st) {
  return st.code() == Code::kNotFound ? InvalidArgument(st.message()) : st;
}

struct RunFlags {
  std::string spec;             // positional: a spec file, "-" (stdin) or a script (ad hoc)
  std::string filename;         // -f: a spec file or "-"
  cli::AdhocFlags adhoc;        // torchrun-style flags; adhoc.args holds the words after --
  bool torchrun_flags = false;  // --nnodes, --nproc-per-node or -m given
  std::string report;
  std::string run_dir;
  std::string store;
  bool fresh = false;
  bool quiet = false;
  uint64_t seed = 1;
  int machines = 0;
  double repair_s = 0;
  std::string metrics_addr;  // "" = no /metrics
  bool ui = false;           // serve the web dashboard on the metrics port
  std::string tensorboard;   // event files' directory ("" = <run dir>/tensorboard)
  double progress_s = 30;    // not a TTY: a progress line this often (0 = none)
  bool no_tensorboard = false;
  std::string metrics_sd_file;  // Prometheus file_sd target list
  double metrics_linger_s = 0;  // after the end, wait this long for a last scrape
  // auto (Slurm inside an allocation), local or slurm
  std::string backend = "auto";
  // slurm: the address agents dial ("" = chosen by PrepareSlurmRun)
  std::string advertise_host;
  // --allocate: outside an allocation, run this command again under salloc
  bool allocate = false;
  cli::SlurmRequest slurm_request;  // --partition, --account, --qos, --time, --constraint
  std::vector<std::string> argv;    // this process's command line, for --allocate
};

// `bulwark run`'s progress (docs/monitoring.md, "Terminal"): on a TTY a status line on
// stderr redrawn twice a second; otherwise a plain line every `interval_s`. Stop()
// (or the destructor) ends it; `c` must outlive it.
class ProgressPrinter {
 public:
  ProgressPrinter(const Controller* c, long total, double interval_s)
      : c_(c), total_(total), tty_(isatty(STDERR_FILENO) == 1), interval_s_(interval_s) {
    if (!tty_ && interval_s_ <= 0) return;
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressPrinter() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::duration<double>(tty_ ? 0.5 : interval_s_),
                         [this] { return stop_; })) {
      const ControllerStatus s = c_->Status();
      if (s.stage.empty() || s.stage == "Done") continue;
      cli::Progress p;
      p.phase = s.stage == "Running" ? JobPhaseName(s.phase) : s.stage;
      p.step = s.current_step;
      p.total = total_;
      p.loss = s.metrics.loss;
      p.tokens_per_s = s.metrics.tokens_per_s;
      p.mfu = s.metrics.mfu;
      p.ettr = s.ledger.ettr();
      p.restarts = s.restarts;
      p.cost = s.metrics.cost_total;
      p.ckpt_step = s.last_committed_step;
      p.ckpt_tier = s.last_committed_tier;
      const double now = SystemClock::Get()->NowWall();
      if (s.last_committed_time > 0) p.ckpt_age_s = now - s.last_committed_time;
      const auto& pts = s.metrics.series;
      for (size_t i = pts.size(); i-- > 0;) {  // the rate over the last ~30 s
        if (pts.empty() || pts.back().t - pts[i].t < 30) continue;
        if (pts.back().step > pts[i].step) {
          p.steps_per_s =
              static_cast<double>(pts.back().step - pts[i].step) / (pts.back().t - pts[i].t);
        }
        break;
      }
      if (tty_) {
        std::fprintf(stderr, "\r\033[K%s", cli::FormatProgress(p, TerminalWidth() - 1).c_str());
        drawn_ = true;
      } else {
        std::fprintf(stderr, "[bulwark] %s\n", cli::FormatProgress(p).c_str());
      }
      std::fflush(stderr);
    }
  }
  static int TerminalWidth() {
    winsize w{};
    return ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20 ? w.ws_col : 120;
  }

  const Controller* c_;
  const long total_;
  const bool tty_;
  const double interval_s_;
  bool drawn_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: joined before the members it reads go
};

// The controller's /metrics while `bulwark run` runs (docs/monitoring.md). Counts the
// scrapes that saw the job finished, so the run can wait for one (--metrics-linger).
class RunMetricsPort {
 public:
  static Result<std::unique_ptr<RunMetricsPort>> Start(const std::string& addr, const JobSpec& spec,
                                                       bool ui) {
    std::unique_ptr<RunMetricsPort> p(new RunMetricsPort());
    p->ui_ = ui;
    metrics::HttpEndpointHandlers h;
    h.healthy = [] { return true; };
    RunMetricsPort* self = p.get();
    h.ready = [self] { return self->controller_.load() != nullptr; };
    h.route = [self, name = spec.name, target = spec.monitoring.ettr_target](
                  const std::string& path,
                  const std::string& query) -> std::optional<metrics::HttpResponse> {
      if (!self->ui_) return std::nullopt;
      if (path.rfind("/api/", 0) == 0) {
        const Controller* c = self->controller_.load();
        if (c == nullptr) return metrics::HttpResponse{503, "text/plain", "starting\n"};
        return DashboardApi(c->Status(), name, target, path, query, SystemClock::Get()->NowWall());
      }
      return ui::ServeAsset(path);
    };
    h.metrics = [self, name = spec.name, target = spec.monitoring.ettr_target] {
      const Controller* c = self->controller_.load();
      if (c == nullptr) return std::string();
      const ControllerStatus s = c->Status();
      const bool done = s.stage == "Done";
      std::string text =
          RenderJobMetrics(name, s.metrics, s.settled, !done && s.stage != "", target);
      if (done) self->final_scrapes_.fetch_add(1);
      return text;
    };
    BW_ASSIGN_OR_RETURN(p->http_, metrics::HttpEndpoint::Start(addr, h));
    return p;
  }
  int port() const { return http_->port(); }
  int final_scrapes() const { return final_scrapes_.load(); }
  // The controller whose status is served (not owned; outlives this port's use).
  void Serve(const Controller* c) { controller_.store(c); }

 private:
  RunMetricsPort() = default;
  std::atomic<const Controller*> controller_{nullptr};
  bool ui_ = false;
  std::atomic<int> final_scrapes_{0};
  std::unique_ptr<metrics::HttpEndpoint> http_;  // last: stopped before the counter goes
};

void PrintNotes(const std::vector<std::string>& notes) {
  for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
}

// Whether `python` runs and finds torch (without importing it: ~30 ms), within 10 s.
bool PythonHasTorch(const std::string& python) {
  SpawnOptions so;
  so.argv = {python, "-c",
             "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"};
  so.env = CurrentEnv();
  auto child = Spawn(so);
  if (!child.ok()) return false;
  auto exit = WaitExit(child->pid, 10);
  if (!exit) return TerminateGroup(child->pid, child->pgid, 0).ok() && false;
  return exit->ok();
}

// The interpreter of an ad-hoc script: --python, else $BULWARK_PYTHON, else the first of
// python3 on PATH and /usr/bin/python3 that has torch (torchrun uses its own, and the
// first python3 on PATH is often a pyenv or venv without torch), else python3.
std::string AdhocPython(const std::string& flag) {
  if (!flag.empty()) return flag;
  const std::string env = EnvOr("BULWARK_PYTHON", "");
  if (!env.empty()) return env;
  for (const char* p : {"python3", "/usr/bin/python3"}) {
    if (PythonHasTorch(p)) return p;
  }
  return "python3";
}

// The job `run` was given: a spec file or "-" (one document), or a script with
// torchrun-style flags (adhoc.h).
Result<trainjob::LoadedManifest> RunManifest(const RunFlags& f) {
  if (!f.spec.empty() && !f.filename.empty()) {
    return InvalidArgument("give the job once: a SPEC argument or -f FILE, not both");
  }
  const std::string path = f.filename.empty() ? f.spec : f.filename;
  if (path.empty()) {
    return InvalidArgument(
        "give a job spec (bulwark run job.yaml, or -f - for standard input) "
        "or a script (bulwark run --nnodes 2 --nproc-per-node 2 train.py -- "
        "ARGS)");
  }
  if (f.filename.empty() && cli::IsAdhocRun(path, f.torchrun_flags)) {
    cli::AdhocFlags a = f.adhoc;
    a.script = path;
    a.python = AdhocPython(f.adhoc.python);
    std::error_code ec;
    if (!a.module && !fs::exists(path, ec)) {
      return InvalidArgument("script " + path + ": no such file (relative to " +
                             fs::current_path(ec).string() + "; with -m it is a module name)");
    }
    return cli::AdhocManifest(a, fs::current_path(ec).string());
  }
  if (!f.adhoc.args.empty()) {
    return InvalidArgument(
        "the words after -- are a script's arguments (bulwark run train.py -- "
        "ARGS); for a job spec put them in its args: field");
  }
  auto read = trainjob::ReadManifestInput(path);
  if (!read.ok()) return InputError(read.status());
  const trainjob::ManifestInput& in = *read;
  BW_ASSIGN_OR_RETURN(std::vector<trainjob::LoadedManifest> ms,
                      trainjob::ParseManifestInput(in, trainjob::Target::kLocal));
  if (ms.size() > 1) {
    return InvalidArgument(in.name + " holds " + std::to_string(ms.size()) +
                           " manifests; `bulwark run` runs one job: give it one document "
                           "(`bulwark validate` and `render` take several)");
  }
  return std::move(ms[0]);
}

// The local backend's agents for `spec`: this installation's binaries, overridable by
// BULWARK_AGENT, BULWARK_LIB and BULWARK_PYTHON_DIR.
LocalBackendOptions LocalAgents(const JobSpec& spec) {
  LocalBackendOptions bo;
  bo.agent_binary = EnvOr("BULWARK_AGENT", ExeDir() + "/bulwark-agent");
  bo.sdk_lib = EnvOr("BULWARK_LIB", DefaultSdkLib(ExeDir() + "/../lib/libbulwark.so"));
  bo.python_dir =
      EnvOr("BULWARK_PYTHON_DIR", DefaultPythonDir(std::string(BULWARK_SOURCE_DIR) + "/python"));
  bo.heartbeat_interval_s = spec.fault_policy.heartbeat_interval_seconds;
  return bo;
}

int CmdRun(const RunFlags& f) {
  auto manifest = RunManifest(f);
  if (!manifest.ok()) return Fail(manifest.status());
  PrintNotes(manifest->notes);
  if (manifest->job.job.command.empty()) {  // the image's ENTRYPOINT + CMD (docs/trainjob.md)
    registry::Client images;
    auto creds = registry::LocalDockerCredentials(manifest->job.pod.image);
    if (!creds.ok()) return Fail(creds.status());
    auto cfg = images.Resolve(manifest->job.pod.image, *creds);
    if (!cfg.ok()) return Fail(cfg.status());
    auto line = trainjob::ApplyImageConfig(*cfg, trainjob::Target::kLocal, &manifest->job);
    if (!line.ok()) return Fail(line.status());
    PrintNotes({*line});
  }
  JobSpec* spec = &manifest->job.job;
  const bool in_allocation = cli::UseSlurm("auto", CurrentEnv());
  const cli::SlurmRequest& req = f.slurm_request;
  if (!f.allocate && !req.empty()) {
    return Fail(InvalidArgument(
        "--partition, --account, --qos, --time and --constraint describe the allocation "
        "--allocate requests: add --allocate (or give them to salloc/sbatch yourself)"));
  }
  if (f.allocate && f.backend == "local") {
    return Fail(InvalidArgument("--allocate asks Slurm for nodes; drop --backend local"));
  }
  if (f.allocate && !in_allocation) return Fail(cli::ExecUnderSalloc(*spec, req, f.argv));
  std::string root = EnvOr("BULWARK_HOME", spec->workdir + "/.bulwark");
  std::string run_dir = f.run_dir.empty() ? root + "/" + spec->name : f.run_dir;
  std::string store_path = f.store.empty() ? root + "/bulwark.db" : f.store;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  fs::create_directories(fs::path(store_path).parent_path(), ec);
  auto store = Store::Open(store_path);
  if (!store.ok()) return Fail(store.status());
  if (Status st = cli::RememberStore(cli::StoreRegistryPath(), store_path); !st.ok()) {
    std::fprintf(stderr,
                 "note: `bulwark get` will not find this job from other "
                 "directories: %s\n",
                 st.message().c_str());
  }
  auto existing = (*store)->GetJob(spec->name);
  if (!existing.ok()) return Fail(existing.status());
  bool resuming = existing->has_value() && !IsTerminal((*existing)->phase);
  if (f.fresh) {
    fs::remove_all(spec->checkpoint.dir, ec);
    fs::remove_all(run_dir + "/logs", ec);
    resuming = false;
    if (existing->has_value()) {
      JobRecord r = **existing;
      r.phase = JobPhase::kCancelled;
      if (Status st = (*store)->PutJob(r); !st.ok()) return Fail(st);
    }
  } else if (!resuming) {
    auto committed = ckpt::ListCommitted(ckpt::Env::Default(), spec->checkpoint.dir);
    if (committed.ok() && !committed->empty()) {
      std::fprintf(
          stderr,
          "bulwark: checkpoint dir %s already holds committed checkpoints (newest step %ld) "
          "from an earlier, finished run of job '%s'; pass --fresh to delete them and start "
          "over, or set checkpoint.dir to a new directory\n",
          spec->checkpoint.dir.c_str(), committed->back(), spec->name.c_str());
      return 2;
    }
  }
  // Orphans of the job are ours to reap; without it (not Linux >= 3.4) init reaps them.
  IgnoreError(BecomeSubreaper(), "init reaps the orphans instead");
  LocalBackendOptions bo = LocalAgents(*spec);
  bo.machines = f.machines;
  bo.repair_s = f.repair_s;
  bo.agent_metrics = !f.metrics_addr.empty();
  if (access(bo.agent_binary.c_str(), X_OK) != 0) {
    std::fprintf(
        stderr,
        "bulwark: agent binary %s not found; build it (cmake --build build) or set BULWARK_AGENT\n",
        bo.agent_binary.c_str());
    return 1;
  }
  ControllerOptions co;
  std::unique_ptr<Backend> backend;
  std::string slurm_job;  // the allocation the job runs in ("" = not on Slurm)
  if (cli::UseSlurm(f.allocate ? "slurm" : f.backend, CurrentEnv())) {
    if (f.machines > 0) {
      return Fail(InvalidArgument(
          "--machines models local machines; on Slurm the allocation's hosts are the "
          "machines (drop --machines, or use --backend local)"));
    }
    auto slurm = cli::PrepareSlurmRun(*spec, bo.Agent(), CurrentEnv(), f.advertise_host);
    if (!slurm.ok()) return Fail(slurm.status());
    std::fprintf(stderr, "[bulwark] %s\n", slurm->summary.c_str());
    co.bind_host = slurm->bind_host;
    co.advertise_host = slurm->advertise_host;
    // The ranks of a node run on its host: their rendezvous is on the slot-0 agent's.
    co.rendezvous_on_agent = true;
    slurm_job = slurm->backend->job_id();
    backend = std::move(slurm->backend);
  } else {
    backend = std::make_unique<LocalBackend>(bo);
  }
  co.run_dir = run_dir;
  co.seed = f.seed;
  co.echo_events = !f.quiet;
  if (!f.no_tensorboard) {
    co.tensorboard_dir = f.tensorboard.empty() ? run_dir + "/tensorboard" : f.tensorboard;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  // The port opens before the controller exists so its address can go into the
  // target list; it serves the controller's status from then on.
  std::unique_ptr<RunMetricsPort> port;
  if (f.metrics_addr.empty() && (!f.metrics_sd_file.empty() || f.metrics_linger_s > 0)) {
    std::fprintf(stderr,
                 "bulwark run: --metrics-sd-file and --metrics-linger need "
                 "--metrics-addr (e.g. --metrics-addr 127.0.0.1:0)\n");
    return 2;
  }
  if (!f.metrics_addr.empty() || f.ui) {
    const std::string addr = f.metrics_addr.empty() ? "127.0.0.1:0" : f.metrics_addr;
    auto mp = RunMetricsPort::Start(addr, *spec, f.ui);
    if (!mp.ok()) return Fail(InvalidArgument("--metrics-addr: " + mp.status().message()));
    port = std::move(*mp);
    const std::string host = addr.substr(0, addr.rfind(':'));
    co.metrics_self = (host.empty() || host == "0.0.0.0" ? std::string("127.0.0.1") : host) + ":" +
                      std::to_string(port->port());
    co.metrics_sd_file = f.metrics_sd_file;
    std::fprintf(stderr, "[bulwark] metrics: http://%s/metrics\n", co.metrics_self.c_str());
    if (f.ui) std::fprintf(stderr, "[bulwark] dashboard: http://%s/\n", co.metrics_self.c_str());
  }
  co.total_steps = spec->monitoring.total_steps;
  if (co.total_steps <= 0) {
    std::vector<std::string> argv = spec->command;
    argv.insert(argv.end(), spec->args.begin(), spec->args.end());
    co.total_steps = cli::TotalStepsFromArgs(argv);
  }
  Controller c(*spec, co, backend.get(), store->get(), SystemClock::Get());
  if (port) port->Serve(&c);
  auto progress = std::make_unique<ProgressPrinter>(&c, co.total_steps, f.progress_s);
  // On Slurm, the job's progress in its Comment (squeue -o %k): every 30 s, and at the end.
  std::unique_ptr<cli::SlurmJobComment> comment;
  if (!slurm_job.empty()) {
    const long total = co.total_steps;
    comment = std::make_unique<cli::SlurmJobComment>(
        slurm_job, CurrentEnv(),
        [&c, total] {
          const ControllerStatus s = c.Status();
          if (s.stage.empty() || s.stage == "Done") return std::string();
          cli::Progress p;
          p.phase = s.stage == "Running" ? JobPhaseName(s.phase) : s.stage;
          p.step = s.current_step;
          p.total = total;
          p.ettr = s.ledger.ettr();
          p.restarts = s.restarts;
          return "bulwark: " + cli::FormatProgress(p);
        },
        30);
  }
  auto r = c.Run();
  progress.reset();
  if (comment) {
    char last[160] = "bulwark: failed to run";
    if (r.ok()) {
      std::snprintf(last, sizeof last, "bulwark: %s  step %ld  ETTR %.3f  restarts %d",
                    JobPhaseName(r->phase), r->report.value("last_step", -1L),
                    r->report.value("ettr", 0.0), r->report.value("restarts", 0));
    }
    comment->Finish(last);
    comment.reset();
  }
  if (port && f.metrics_linger_s > 0) {  // let Prometheus read the final values
    const double until = SystemClock::Get()->NowMono() + f.metrics_linger_s;
    while (port->final_scrapes() == 0 && SystemClock::Get()->NowMono() < until) {
      SystemClock::Get()->SleepFor(0.05);
    }
  }
  port.reset();  // its threads read `c`: stopped before `c` goes
  IgnoreError(
      backend->Teardown(2),
      "the end of the job: Teardown kills and reaps what it can, and nothing is left to tell");
  int leftovers = KillAndReapAllChildren();
  if (leftovers > 0) std::fprintf(stderr, "[bulwark] reaped %d leftover processes\n", leftovers);
  if (!r.ok()) return Fail(r.status());
  std::cout << FormatReport(r->report) << std::flush;
  std::cout << "logs: " << run_dir << "/logs   store: " << store_path << "\n";
  if (!co.tensorboard_dir.empty() && fs::exists(co.tensorboard_dir)) {
    std::cout << "tensorboard: tensorboard --logdir " << co.tensorboard_dir << "\n";
  }
  if (!f.report.empty()) {
    std::ofstream out(f.report);
    out << r->report.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "bulwark: could not write report to %s\n", f.report.c_str());
      return 1;
    }
  }
  switch (r->phase) {
    case JobPhase::kSucceeded:
      return 0;
    case JobPhase::kCancelled:
      return 130;
    default:
      return 1;
  }
}

// `replay`: the steps before an incident again (replay_cmd.h): inside a Slurm allocation
// on its hosts (--nodes: which), else on the local backend.
int CmdReplay(const cli::ReplayFlags& f) {
  const bool on_slurm = cli::UseSlurm("auto", CurrentEnv());
  if (!f.nodes.empty() && !on_slurm) {
    return Fail(InvalidArgument(
        "--nodes names hosts of a Slurm allocation, and this is not inside one (SLURM_JOB_ID "
        "is unset); run it in one: `salloc --nodes=" +
        std::to_string(f.nodes.size()) + " --nodelist=" +
        [&] {
          std::string l;
          for (const std::string& n : f.nodes) l += (l.empty() ? "" : ",") + n;
          return l;
        }() +
        " bulwark replay " + f.job + " " + std::to_string(f.incident) +
        " --nodes ...`; without --nodes it re-runs on this machine"));
  }
  auto plan = cli::PlanReplay(f);
  if (!plan.ok()) return Fail(plan.status());
  std::error_code ec;
  fs::create_directories(plan->run_dir + "/logs", ec);
  auto store = Store::Open(plan->store_path);
  if (!store.ok()) return Fail(store.status());
  IgnoreError(BecomeSubreaper(), "init reaps the orphans instead");
  LocalBackendOptions bo = LocalAgents(plan->spec);
  ControllerOptions co;
  std::unique_ptr<Backend> backend;
  std::string where = "this machine";
  if (on_slurm) {
    auto slurm = cli::PrepareSlurmRun(plan->spec, bo.Agent(), CurrentEnv(), "", plan->hosts);
    if (!slurm.ok()) return Fail(slurm.status());
    std::vector<std::string> hosts;
    for (const SlurmHost& h : slurm->backend->hosts()) {
      if (static_cast<int>(hosts.size()) < plan->spec.nodes) hosts.push_back(h.name);
    }
    // Every host must read the checkpoint the re-run resumes from (hard links on this
    // host's file system).
    if (plan->replay.resume >= 0) {
      Status st =
          cli::CheckCheckpointOnHosts(slurm->backend->job_id(), hosts, ExeDir() + "/bulwark",
                                      plan->checkpoint_links, plan->replay.resume, CurrentEnv());
      if (!st.ok()) return Fail(st);
    }
    co.bind_host = slurm->bind_host;
    co.advertise_host = slurm->advertise_host;
    co.rendezvous_on_agent = true;
    where.clear();
    for (const std::string& h : hosts) where += (where.empty() ? "" : ", ") + h;
    where = "Slurm job " + slurm->backend->job_id() + " on " + where;
    backend = std::move(slurm->backend);
  } else {
    backend = std::make_unique<LocalBackend>(bo);
  }
  co.run_dir = plan->run_dir;
  co.echo_events = false;
  co.replay = plan->replay;
  if (f.output.empty()) {
    std::fprintf(stderr, "[bulwark] replaying incident %d of %s from %s in %s (%s)\n", f.incident,
                 f.job.c_str(),
                 plan->replay.resume < 0
                     ? "scratch"
                     : ("checkpoint step " + std::to_string(plan->replay.resume)).c_str(),
                 plan->run_dir.c_str(), where.c_str());
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  Controller c(plan->spec, co, backend.get(), store->get(), SystemClock::Get());
  auto r = c.Run();
  IgnoreError(backend->Teardown(2), "the end of the replay: Teardown kills and reaps what it can");
  KillAndReapAllChildren();
  if (!r.ok()) return Fail(r.status());
  Json outcome = r->report.value("replay", Json());
  if (outcome.is_null()) {
    return Fail(Internal("the replay run ended (" + std::string(JobPhaseName(r->phase)) + ": " +
                         r->message + ") without a replay outcome; logs in " + plan->run_dir +
                         "/logs"));
  }
  std::ofstream(plan->run_dir + "/replay.json") << outcome.dump(2) << "\n";
  if (f.output == "json") {
    outcome["job"] = f.job;
    outcome["incident"] = f.incident;
    outcome["run_dir"] = plan->run_dir;
    outcome["code"] = plan->code_note;
    outcome["resume_step"] = plan->replay.resume;
    outcome["where"] = where;
    std::cout << outcome.dump(2) << "\n";
  } else {
    std::cout << cli::FormatReplay(*plan, outcome);
  }
  return cli::ReplayExitCode(outcome);
}

// `validate`: a job spec is checked for the local backend; a TrainJob or PyTorchJob
// for Kubernetes too unless --target local (the local check runs first either way).
// Every document of every input is checked; one line each, exit 2 if any failed.
int CmdValidate(const std::vector<std::string>& paths, const std::string& target) {
  if (paths.empty()) {
    std::fprintf(stderr, "bulwark validate: give a spec file (or -f FILE, - for stdin)\n");
    return 2;
  }
  int rc = 0;
  for (const std::string& path : paths) {
    auto in = trainjob::ReadManifestInput(path);
    if (!in.ok()) {
      rc = std::max(rc, Fail(InputError(in.status())));
      continue;
    }
    const trainjob::LoadedManifestInput loaded(*in);
    auto local = loaded.Parse(trainjob::Target::kLocal);
    if (!local.ok()) {
      rc = std::max(rc, Fail(local.status()));
      continue;
    }
    const bool any_k8s = std::any_of(local->begin(), local->end(), [](const auto& m) {
      return m.kind != trainjob::ManifestKind::kJobSpec;
    });
    auto ms = local;
    if (target == "kubernetes" || (target == "auto" && any_k8s)) {
      ms = loaded.Parse(trainjob::Target::kKubernetes);
      if (!ms.ok()) {
        rc = std::max(rc, Fail(ms.status()));
        continue;
      }
    }
    for (size_t i = 0; i < ms->size(); ++i) {
      const trainjob::LoadedManifest& m = (*ms)[i];
      const bool k8s = target == "kubernetes" ||
                       (target == "auto" && m.kind != trainjob::ManifestKind::kJobSpec);
      const trainjob::LoadedManifest& shown = k8s ? m : (*local)[i];
      PrintNotes(shown.notes);
      const trainjob::TrainJob& t = shown.job;
      const JobSpec& s = t.job;
      const std::string where =
          in->name + (ms->size() > 1 ? " (document " + std::to_string(i + 1) + ")" : "");
      if (m.kind == trainjob::ManifestKind::kJobSpec && !k8s) {
        std::printf("%s: OK (%s: %d nodes x %d ranks, %zu chaos faults)\n", where.c_str(),
                    s.name.c_str(), s.nodes, s.procs_per_node, s.chaos.size());
        continue;
      }
      if (k8s && t.pod.image.empty()) {  // what render and submit refuse, refused here too
        std::fprintf(stderr,
                     "bulwark: %s: pod.image: required on Kubernetes (the pods run the agent "
                     "and the trainer in it); write it as a TrainJob with spec.pod.image "
                     "(`bulwark render %s --trainjob --image IMAGE` prints one to start from)\n",
                     where.c_str(), in->name.c_str());
        rc = 2;
        continue;
      }
      std::printf(
          "%s: OK (%s %s/%s for %s: %d nodes x %d ranks, %zu chaos faults; gang %s, queue "
          "%s)\n",
          where.c_str(), trainjob::ManifestKindName(m.kind), t.ns.c_str(), t.name.c_str(),
          k8s ? "Kubernetes" : "the local backend", s.nodes, s.procs_per_node, s.chaos.size(),
          trainjob::GangModeName(t.scheduling.gang), t.scheduling.queue.c_str());
    }
  }
  return rc;
}

// The controller address of a running local job: `addr_in`, else its run directory's
// controller.addr. "" (after printing why) when there is none.
std::string ControllerAddress(const std::string& addr_in, const std::string& job,
                              const std::string& run_root) {
  if (!addr_in.empty()) return addr_in;
  std::string addr;
  const std::string path = run_root + "/" + job + "/controller.addr";
  std::ifstream f(path);
  if (!(f >> addr)) {
    std::fprintf(stderr,
                 "bulwark: no running controller found for job '%s' (%s missing); pass "
                 "--controller HOST:PORT or --run-root\n",
                 job.c_str(), path.c_str());
    return "";
  }
  return addr;
}

// `top`: watches a running job through its controller (status_request): the progress
// line, where the time went and the latest incidents; redrawn every `interval_s` on a
// terminal, once with --once.
int CmdTop(const std::string& addr, bool once, double interval_s) {
  const bool tty = isatty(STDOUT_FILENO) == 1;
  while (true) {
    auto r = SendStatusRequest(addr, 5);
    if (!r.ok()) {
      std::fprintf(stderr, "bulwark top: %s (has the job ended?)\n", r.status().message().c_str());
      return 1;
    }
    std::ostringstream o;
    o << r->value("job", "?") << "  "
      << cli::FormatProgress(cli::ProgressFromReport(*r, SystemClock::Get()->NowWall())) << "\n";
    if ((*r)["seconds"].is_object()) {
      o << "time:";
      for (const auto& [k, v] : (*r)["seconds"].items()) {
        if (v.is_number() && v.get<double>() > 0) {
          char buf[64];
          std::snprintf(buf, sizeof buf, " %s %.1fs", k.c_str(), v.get<double>());
          o << buf;
        }
      }
      o << "\n";
    }
    const Json& inc = (*r)["incidents"];
    if (inc.is_array()) {
      for (size_t i = inc.size() > 5 ? inc.size() - 5 : 0; i < inc.size(); ++i) {
        o << "  " << inc[i].value("kind", "?") << " rank " << inc[i].value("rank", -1) << " step "
          << inc[i].value("step", -1L) << ": "
          << (inc[i].contains("decision") ? inc[i]["decision"].value("action", "") : "") << "\n";
      }
    }
    std::printf("%s%s", tty && !once ? "\033[H\033[2J" : "", o.str().c_str());
    std::fflush(stdout);
    if (once) return 0;
    SystemClock::Get()->SleepFor(interval_s);
  }
}

int CmdChaos(const std::string& addr_in, const std::string& job, const std::string& run_root,
             const std::string& action, int rank, int node) {
  const std::string addr = ControllerAddress(addr_in, job, run_root);
  if (addr.empty()) return 2;
  auto r = SendChaosRequest(addr, action, rank, node, 5);
  if (!r.ok()) return Fail(r.status());
  std::printf("%s\n", r->c_str());
  return 0;
}

// `update`: the spec file (a job spec) holds the running job's new command, args, env or
// workdir; its controller validates and applies it (controller_update.cc).
int CmdUpdate(const std::string& spec_path, const std::string& addr_in,
              const std::string& run_dir_in, int verify_steps) {
  auto manifest = trainjob::LoadManifest(spec_path, trainjob::Target::kLocal);
  if (!manifest.ok()) return Fail(manifest.status());
  if (manifest->kind != trainjob::ManifestKind::kJobSpec) {
    std::fprintf(stderr,
                 "bulwark update: %s is a %s; update a job of `bulwark run` with its job spec, "
                 "and a TrainJob on Kubernetes by editing it (kubectl edit/apply: the operator "
                 "applies command, args and env changes in place)\n",
                 spec_path.c_str(), trainjob::ManifestKindName(manifest->kind));
    return 2;
  }
  const JobSpec& spec = manifest->job.job;
  std::string addr = addr_in;
  if (addr.empty()) {
    const std::string run_dir =
        run_dir_in.empty() ? EnvOr("BULWARK_HOME", spec.workdir + "/.bulwark") + "/" + spec.name
                           : run_dir_in;
    std::ifstream f(run_dir + "/controller.addr");
    if (!(f >> addr)) {
      std::fprintf(stderr,
                   "bulwark update: job '%s' is not running (%s/controller.addr missing); start "
                   "it with `bulwark run`, or pass --run-dir or --controller HOST:PORT\n",
                   spec.name.c_str(), run_dir.c_str());
      return 2;
    }
  }
  std::ifstream in(spec_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string base = fs::absolute(spec_path).parent_path().string();
  auto r = SendUpdateRequest(addr, text.str(), base, verify_steps, 10);
  if (!r.ok()) {
    std::fprintf(stderr, "bulwark update: %s\n", r.status().message().c_str());
    return r.status().code() == Code::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s\n", r->c_str());
  return 0;
}

// A command-line error: CLI11's message (or, for an unknown command, the closest one)
// and exit status 2, whatever CLI11's own code for the error (105, 106, 109 ...);
// --help and --version exit 0.
int UsageError(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      const std::string near = spec_internal::SuggestKey(word, names);
      std::fprintf(stderr, "bulwark: unknown command '%s'%s; 'bulwark --help' lists the commands\n",
                   word.c_str(), near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str());
      return 2;
    }
  }
  (void)app.exit(e);  // prints the error and where to find help
  return 2;
}

}  // namespace
}  // namespace bulwark

namespace bulwark::cli {

int Main(int argc, char** argv) {
  return MainWithFilter(argc, argv, CommandFilter::FromArgv(argc, argv));
}

int MainWithFilter(int argc, char** argv, const CommandFilter& filter) {
  CLI::App app{"Bulwark: keeps distributed training jobs training through faults"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("bulwark ") + BULWARK_VERSION);
  app.footer(
      "Exit status: 0 success, 1 failure, 2 usage error (a bad flag, argument or "
      "spec).\nRun 'bulwark COMMAND --help' for a command's flags and defaults.");
  app.option_defaults()->always_capture_default();  // --help shows every default
  RunFlags rf;
  auto* run = app.add_subcommand(
      "run",
      "run a job spec, or a script with torchrun's flags, on the local backend (or on "
      "Slurm inside an allocation) and print its ETTR report");
  if (filter.Full("run")) {
    run->add_option("spec", rf.spec,
                    "job spec, TrainJob or Kubeflow PyTorchJob (YAML; - reads standard input), "
                    "or a script: train.py (or a module with -m)");
    run->add_option("args", rf.adhoc.args, "after --: the script's arguments");
    run->add_option("-f,--filename", rf.filename, "the job spec file (- reads standard input)");
    auto* nnodes = run->add_option("--nnodes", rf.adhoc.nnodes,
                                   "script: nodes, N or MIN:MAX (elastic between them)");
    auto* nproc = run->add_option("--nproc-per-node,--nproc_per_node", rf.adhoc.nproc_per_node,
                                  "script: ranks per node")
                      ->check(flags::InRange(1, 4096));
    auto* module = run->add_flag("-m,--module", rf.adhoc.module,
                                 "script: the argument is a Python module (python3 -m NAME)");
    run->add_option("--name", rf.adhoc.name, "script: job name (default: from the script)");
    run->add_option("--max-restarts,--max_restarts", rf.adhoc.max_restarts,
                    "script: restarts before the job fails (-1: the spec default, 10)")
        ->check(flags::InRange(-1, 100000));
    run->add_option("--standby", rf.adhoc.standby, "script: warm standby nodes")
        ->check(flags::InRange(0, 1024));
    run->add_option("--checkpoint-dir", rf.adhoc.checkpoint_dir,
                    "script: checkpoint directory (default <cwd>/checkpoints/<name>)");
    rf.adhoc.python.clear();  // "": chosen by AdhocPython
    run->add_option("--python", rf.adhoc.python,
                    "script: the interpreter (default $BULWARK_PYTHON, else the first of python3 "
                    "on PATH and /usr/bin/python3 that has torch)");
    run->add_option("--checkpoint-every", rf.adhoc.checkpoint_every,
                    "script: a checkpoint every N steps (the SDK's should_checkpoint; 0: none)")
        ->check(flags::InRange(0, 1 << 30));
    run->callback([&rf, nnodes, nproc, module] {
      rf.torchrun_flags = nnodes->count() > 0 || nproc->count() > 0 || module->count() > 0;
    });
    run->footer(
        "Examples:\n"
        "  bulwark run examples/pytorch-ddp/job.yaml --fresh --report report.json\n"
        "  bulwark run --nnodes 2 --nproc-per-node 2 train.py -- --steps 100\n"
        "  bulwark render job.yaml --trainjob | bulwark run -f -\n"
        "A script runs as a job spec with these values would (docs/job-spec.md): each rank "
        "gets torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...).");
    run->add_option("--report", rf.report, "also write the report as JSON to this file");
    run->add_option("--run-dir", rf.run_dir,
                    "scratch dir for logs and sockets (default <workdir>/.bulwark/<job>)");
    run->add_option("--store", rf.store, "SQLite store (default <workdir>/.bulwark/bulwark.db)");
    run->add_flag("--fresh", rf.fresh, "delete the job's checkpoints and start from step 0");
    run->add_flag("--quiet", rf.quiet, "do not print controller events");
    run->add_option("--seed", rf.seed, "seed for backoff jitter");
    run->add_option("--machines", rf.machines,
                    "model a fixed set of local machines (0 = unlimited): a node without a free "
                    "one waits for capacity, an elastic job shrinks")
        ->check(flags::AtLeast(0));
    run->add_option("--metrics-addr", rf.metrics_addr,
                    "serve Prometheus /metrics on HOST:PORT (:0 = a free port, printed); the "
                    "agents then serve theirs too");
    run->add_option("--tensorboard", rf.tensorboard,
                    "write TensorBoard event files here (default <run dir>/tensorboard)");
    run->add_flag("--no-tensorboard", rf.no_tensorboard, "write no TensorBoard event files");
    run->add_option("--progress-interval", rf.progress_s,
                    "when stderr is not a terminal, print a progress line this often (seconds; 0 = "
                    "never); on a terminal a status line is kept up to date")
        ->check(flags::InRange(0.0, 86400.0));
    run->add_flag("--ui", rf.ui,
                  "serve the web dashboard (read-only) on the metrics port (127.0.0.1:0 without "
                  "--metrics-addr; the address is printed)");
    run->add_option("--metrics-sd-file", rf.metrics_sd_file,
                    "keep a Prometheus file_sd_configs target list of the controller and its "
                    "agents in this file (needs --metrics-addr)");
    run->add_option("--metrics-linger", rf.metrics_linger_s,
                    "after the job ends, keep /metrics (and the --ui dashboard) up until /metrics "
                    "is scraped once more, at most this many seconds")
        ->check(flags::InRange(0.0, 3600.0));
    run->add_option("--backend", rf.backend,
                    "auto: Slurm inside an allocation (SLURM_JOB_ID set), else local; local: "
                    "agents on this machine; slurm: one agent per allocated node via srun "
                    "(docs/slurm.md)")
        ->check(CLI::IsMember({"auto", "local", "slurm"}));
    run->add_option("--advertise-host", rf.advertise_host,
                    "slurm: the address of this machine the agents dial (default: 127.0.0.1 "
                    "when every allocated node's NodeAddr is loopback, else the host name)");
    run->add_flag("--allocate", rf.allocate,
                  "outside a Slurm allocation: request one (salloc --no-kill --exclusive, nodes + "
                  "spare nodes) and run the job in it");
    run->add_option("--partition", rf.slurm_request.partition, "--allocate: the Slurm partition");
    run->add_option("--account", rf.slurm_request.account, "--allocate: the Slurm account");
    run->add_option("--qos", rf.slurm_request.qos, "--allocate: the Slurm quality of service");
    run->add_option("--time", rf.slurm_request.time, "--allocate: the time limit, e.g. 2:00:00");
    run->add_option("--constraint", rf.slurm_request.constraint,
                    "--allocate: node features, e.g. a100");
    run->add_option("--repair-seconds", rf.repair_s,
                    "with --machines: how long a node lost to chaos keeps its machine down")
        ->check(flags::AtLeast(0));
  }

  std::vector<std::string> vspecs, vfiles;
  std::string vtarget = "auto";
  auto* validate = app.add_subcommand(
      "validate", "check job specs, TrainJobs or PyTorchJobs (every document of every file)");
  if (filter.Full("validate")) {
    validate->add_option("spec", vspecs,
                         "job spec, TrainJob or Kubeflow PyTorchJob files (YAML; - reads "
                         "standard input)");
    validate->add_option("-f,--filename", vfiles, "a file to check, as SPEC (repeatable)");
    validate
        ->add_option("--target", vtarget,
                     "auto (Kubernetes for TrainJob/PyTorchJob), local or kubernetes")
        ->check(CLI::IsMember({"auto", "local", "kubernetes"}));
    validate->footer(
        "Examples:\n  bulwark validate examples/pytorch-ddp/job.yaml\n"
        "  bulwark validate -f deploy/sample-trainjob.yaml --target kubernetes\n"
        "  cat a.yaml b.yaml | bulwark validate -");
  }

  std::string addr, job, run_root = EnvOr("BULWARK_HOME", ".bulwark"), action;
  int rank = 0, node = 0;
  auto* chaos = app.add_subcommand("chaos", "inject a fault into a running job");
  if (filter.Full("chaos")) {
    chaos
        ->add_option("action", action,
                     "kill_rank | hang_rank | nan_loss | kill_agent | sdc | slow_rank | slow_link "
                     "(the slow ones by a factor of 3, as the spec's default)")
        ->required()
        ->check(CLI::IsMember(
            {"kill_rank", "hang_rank", "nan_loss", "kill_agent", "sdc", "slow_rank", "slow_link"}));
    chaos->add_option("--job", job, "job name (finds its controller under --run-root)");
    chaos->add_option("--run-root", run_root,
                      "the jobs' run root (default $BULWARK_HOME or ./.bulwark)");
    chaos->add_option("--controller", addr, "controller HOST:PORT (instead of --job)");
    chaos
        ->add_option("--rank", rank,
                     "global rank (kill_rank, hang_rank, nan_loss, sdc, slow_rank, slow_link)")
        ->check(flags::AtLeast(0));
    chaos->add_option("--node", node, "node slot (kill_agent)")->check(flags::AtLeast(0));
    chaos->footer(
        "Examples:\n  bulwark chaos kill_rank --rank 1 --job gpt-char\n"
        "  bulwark chaos kill_agent --node 1 --controller 127.0.0.1:40123\n"
        "Faults at given steps belong in the spec's chaos: list (docs/job-spec.md).");
  }

  std::string tjob, taddr, trun_root = EnvOr("BULWARK_HOME", ".bulwark");
  bool tonce = false;
  double tinterval = 1;
  auto* top = app.add_subcommand("top", "watch a running job: progress, lost time, incidents");
  if (filter.Full("top")) {
    top->add_option("job", tjob, "job name (finds its controller under --run-root)");
    top->add_option("--run-root", trun_root,
                    "the jobs' run root (default $BULWARK_HOME or ./.bulwark)");
    top->add_option("--controller", taddr, "controller HOST:PORT (instead of a job name)");
    top->add_flag("--once", tonce, "print once and exit");
    top->footer(
        "Examples:\n  bulwark top gpt-char\n  bulwark top --controller 127.0.0.1:40123 --once");
    top->add_option("--interval", tinterval, "seconds between refreshes")
        ->check(flags::InRange(0.1, 3600.0));
  }

  std::string uspec, ucontroller, urun_dir;
  int uverify = 20;
  auto* update = app.add_subcommand(
      "update", "apply a changed command, args, env or workdir to a running job in place");
  if (filter.Full("update")) {
    update->add_option("spec", uspec, "the job spec with the new command, args, env or workdir")
        ->required()
        ->check(CLI::ExistingFile);
    update->add_option("--controller", ucontroller,
                       "controller HOST:PORT (default: from the run dir)");
    update->add_option("--run-dir", urun_dir,
                       "the job's run dir (default <workdir>/.bulwark/<job>)");
    update
        ->add_option("--verify-steps", uverify,
                     "new steps the new code must make before it is kept; a fault before that "
                     "rolls it back")
        ->check(flags::Positive());
    update->footer(
        "Example: edit the running job's spec (command, args, env or workdir), then\n"
        "  bulwark update examples/pytorch-ddp/job.yaml --verify-steps 50");
  }

  int jobs_rc = 2;
  const std::vector<CLI::App*> job_cmds =
      cli::AddJobCommands(app, &jobs_rc, std::cout, std::cerr, filter);
  int ckpt_rc = 2;
  auto* ckpt_cmd = cli::AddCkptCommands(app, &ckpt_rc, std::cout, std::cerr, filter);
  int sim_rc = 2;
  auto* sim_cmd = cli::AddSimCommand(app, &sim_rc, std::cout, std::cerr, filter);
  int render_rc = 2;
  auto* render_cmd = cli::AddRenderCommand(app, &render_rc, std::cout, std::cerr, filter);
  int kube_rc = 2;
  const std::vector<CLI::App*> kube_cmds =
      cli::AddKubeCommands(app, &kube_rc, std::cout, std::cerr, filter);
  int diagnose_rc = 2;
  auto* diagnose_cmd = cli::AddDiagnoseCommand(app, &diagnose_rc, std::cout, std::cerr, filter);
  int slurm_rc = 2;
  auto* slurm_cmd = cli::AddSlurmCommand(app, &slurm_rc, std::cout, std::cerr, filter);
  cli::ReplayFlags replay_flags;
  auto* replay = app.add_subcommand(
      "replay",
      "re-run the steps before an incident from its checkpoint and compare every rank's "
      "loss bit for bit with the record (docs/diagnosis.md)");
  cli::ClusterReplayFlags kube_replay;
  if (filter.Full("replay")) {
    replay->add_option("job", replay_flags.job, "the job's name")->required();
    replay
        ->add_option("incident", replay_flags.incident,
                     "the incident's number, as `bulwark describe JOB` lists them (from 1)")
        ->required();
    replay->add_option("--store", replay_flags.store,
                       "the job's store (default: ./.bulwark/bulwark.db and the stores runs "
                       "remembered)");
    replay->add_flag("--allow-code-change", replay_flags.allow_code_change,
                     "re-run even if the code in the working directory changed since");
    replay->add_option("-o,--output", replay_flags.output, "json: the outcome as JSON")
        ->check(CLI::IsMember({"json"}));
    replay
        ->add_option("--nodes", replay_flags.nodes,
                     "inside a Slurm allocation: the hosts to re-run on, one per node of the "
                     "incident, in slot order (HOST,HOST,...); default: the allocation's first "
                     "hosts, or this machine outside one. With --kubeconfig: Kubernetes nodes "
                     "(default: the operator's scheduler places it)")
        ->delimiter(',');
    replay->add_option("--kubeconfig", kube_replay.kube.kubeconfig,
                       "on a Kubernetes cluster: the job is a TrainJob the operator ran; a "
                       "TrainJob JOB-replay-N re-runs it there (docs/diagnosis.md)");
    replay->add_option("--context", kube_replay.kube.context, "kubeconfig context");
    replay->add_option("--namespace,-n", kube_replay.kube.ns,
                       "the TrainJob's namespace (default: the kubeconfig context's)");
    replay
        ->add_option("--timeout", kube_replay.timeout_s,
                     "on a cluster: seconds to wait for the replay TrainJob to end")
        ->capture_default_str()
        ->check(flags::Positive());
    replay->footer(
        "Examples:\n  bulwark replay gpt-char 3\n  salloc -N2 bulwark replay gpt-char 3 --nodes "
        "gpu07,gpu12   # on other machines\n  bulwark replay gpt-char 3 --kubeconfig "
        "~/.kube/config -n ml   # on the cluster that ran it\nExit status: 0 every compared "
        "loss was equal bit for bit, 1 a loss differed or nothing could be compared, 2 usage.");
  }

  rf.argv.assign(argv, argv + argc);
  if (!rf.argv.empty()) {  // salloc runs it from the same directory, maybe not on PATH
    rf.argv[0] = ExeDir() + "/" + fs::path(rf.argv[0]).filename().string();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return UsageError(app, e, argc, argv);
  }
  if (*ckpt_cmd) return ckpt_rc;
  if (*sim_cmd) return sim_rc;
  if (*render_cmd) return render_rc;
  if (*diagnose_cmd) return diagnose_rc;
  if (*slurm_cmd) return slurm_rc;
  for (CLI::App* c : kube_cmds) {
    if (*c) return kube_rc;
  }
  for (CLI::App* c : job_cmds) {
    if (*c) return jobs_rc;
  }
  if (*run) return CmdRun(rf);
  if (*replay && (!kube_replay.kube.kubeconfig.empty() || !kube_replay.kube.context.empty() ||
                  !kube_replay.kube.ns.empty())) {
    if (!replay_flags.store.empty()) {
      std::fprintf(stderr,
                   "bulwark replay: --store is for a job run on this machine or Slurm; on "
                   "Kubernetes the operator's store has the bundle\n");
      return 2;
    }
    if (replay_flags.incident < 1) {
      std::fprintf(stderr, "bulwark replay: INCIDENT: incidents are numbered from 1\n");
      return 2;
    }
    kube_replay.job = replay_flags.job;
    kube_replay.incident = replay_flags.incident;
    kube_replay.allow_code_change = replay_flags.allow_code_change;
    kube_replay.output = replay_flags.output;
    kube_replay.nodes = replay_flags.nodes;
    return cli::ReplayOnCluster(kube_replay, std::cout, std::cerr);
  }
  if (*replay) return CmdReplay(replay_flags);
  if (*validate) {
    vspecs.insert(vspecs.end(), vfiles.begin(), vfiles.end());
    return CmdValidate(vspecs, vtarget);
  }
  if (*chaos) {
    if (addr.empty() && job.empty()) {
      std::fprintf(stderr, "bulwark chaos: give --job NAME or --controller HOST:PORT\n");
      return 2;
    }
    return CmdChaos(addr, job, run_root, action, rank, node);
  }
  if (*update) return CmdUpdate(uspec, ucontroller, urun_dir, uverify);
  if (*top) {
    if (taddr.empty() && tjob.empty()) {
      std::fprintf(stderr, "bulwark top: give a job name or --controller HOST:PORT\n");
      return 2;
    }
    const std::string a = ControllerAddress(taddr, tjob, trun_root);
    return a.empty() ? 2 : CmdTop(a, tonce, tinterval);
  }
  return 2;
}

}  // namespace bulwark::cli
