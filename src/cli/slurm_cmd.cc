#include "cli/slurm_cmd.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>

#include "backend/slurm_env.h"
#include "common/install_paths.h"
#include "common/run.h"
#include "trainjob/manifest_input.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

bool Loopback(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1";
}

std::string Plural(int n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// 'text' for a POSIX shell.
std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The value of `key` in one line of `scontrol --oneliner show ...`, or "".
std::string Field(const std::string& line, const std::string& key) {
  const std::string padded = " " + line;
  const size_t at = padded.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 2;
  const size_t end = padded.find(' ', from);
  return padded.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// An executable `name` in `dir`, or on PATH when dir is empty; "" when there is none.
std::string FindProgram(const std::string& name, const std::string& dir) {
  if (!dir.empty()) {
    const std::string p = dir + "/" + name;
    return ::access(p.c_str(), X_OK) == 0 ? p : "";
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::string p = (d.empty() ? "." : d) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Checks one flag's value against the characters Slurm allows there.
Status CheckFlag(const std::string& flag, const std::string& value) {
  const std::string problem = SlurmValueProblem(flag, value);
  if (problem.empty()) return Status::Ok();
  return InvalidArgument("--" + flag + " \"" + value + "\": not " + problem);
}
Status CheckFlag(const std::string& flag, const std::string& value, const std::regex& re,
                 const std::string& expect) {
  if (value.empty() || std::regex_match(value, re)) return Status::Ok();
  return InvalidArgument("--" + flag + " \"" + value + "\": not " + expect);
}

}  // namespace

bool UseSlurm(const std::string& flag, const std::map<std::string, std::string>& env) {
  if (flag == "slurm") return true;
  if (flag != "auto") return false;
  auto it = env.find("SLURM_JOB_ID");
  if (it == env.end()) it = env.find("SLURM_JOBID");
  return it != env.end() && !it->second.empty();
}

Result<SlurmRun> PrepareSlurmRun(const JobSpec& spec, const AgentCommand& agent,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& advertise_host,
                                 const std::vector<std::string>& only_hosts) {
  auto alloc = slurm::AllocationFromEnv(env);
  if (!alloc.ok()) {
    if (alloc.status().code() == Code::kNotFound) {
      return InvalidArgument(
          "--backend slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset); run it in "
          "one: `salloc --no-kill --nodes=" +
          std::to_string(spec.nodes + spec.fault_policy.spare_nodes) +
          " bulwark run SPEC`, or `bulwark slurm script SPEC > job.sbatch; sbatch job.sbatch`; "
          "or run on this machine with --backend local");
    }
    return InvalidArgument("the Slurm allocation in the environment: " + alloc.status().message());
  }
  const int spares = spec.fault_policy.spare_nodes;
  const int need = spec.nodes + spares;
  const int have = static_cast<int>(only_hosts.empty() ? alloc->nodes.size() : only_hosts.size());
  auto list = env.find("SLURM_JOB_NODELIST");
  if (list == env.end()) list = env.find("SLURM_NODELIST");
  // Growing may add the standbys, not the nodes the job starts on.
  const int grow = only_hosts.empty() ? spec.slurm.grow_nodes : 0;
  if (need > have && (have < spec.nodes || need - have > grow)) {
    return InvalidArgument("job '" + spec.name + "' needs " + std::to_string(need) +
                           " Slurm nodes (nodes: " + std::to_string(spec.nodes) +
                           " + faultPolicy.spareNodes: " + std::to_string(spares) +
                           ") but Slurm job " + alloc->job_id + " has " + std::to_string(have) +
                           (list == env.end() ? std::string() : " (" + list->second + ")") +
                           "; allocate " + std::to_string(need) +
                           " (salloc/sbatch --nodes=" + std::to_string(need) +
                           " --no-kill), or lower nodes or faultPolicy.spareNodes" +
                           (have >= spec.nodes ? ", or let it ask Slurm for the standbys "
                                                 "(slurm.growNodes: " +
                                                     std::to_string(need - have) + ")"
                                               : std::string()));
  }
  SlurmBackendOptions o;
  o.agent = agent;
  o.job_id = alloc->job_id;
  o.env = env;
  o.hosts = only_hosts;
  o.grow_nodes = grow;
  SlurmRun run;
  BW_ASSIGN_OR_RETURN(run.backend, SlurmBackend::Create(std::move(o)));
  bool loopback = true;
  std::string hosts;
  for (const SlurmHost& h : run.backend->hosts()) {
    loopback = loopback && Loopback(h.addr);
    hosts += (hosts.empty() ? "" : " ") + h.name;
  }
  if (loopback && advertise_host.empty()) {
    run.bind_host = "127.0.0.1";
  } else {
    run.bind_host = "0.0.0.0";
    run.advertise_host = advertise_host;
    if (run.advertise_host.empty()) {
      char name[256] = {};
      if (::gethostname(name, sizeof name - 1) != 0) return ErrnoStatus("gethostname", errno);
      run.advertise_host = name;
    }
  }
  run.summary = "Slurm job " + alloc->job_id + ": " + Plural(have, "host", "hosts") + " (" + hosts +
                ") for " + Plural(spec.nodes, "node", "nodes") + " and " +
                Plural(spares, "warm standby", "warm standbys");
  return run;
}

Status CheckCheckpointOnHosts(const std::string& job_id, const std::vector<std::string>& hosts,
                              const std::string& bulwark, const std::string& dir, long step,
                              const std::map<std::string, std::string>& env, double timeout_s) {
  // srun from the run's PATH (that of `env`, else this process's), as the backend runs it.
  std::string srun;
  if (auto path = env.find("PATH"); path != env.end()) {
    std::istringstream dirs(path->second);
    for (std::string d; srun.empty() && std::getline(dirs, d, ':');) {
      srun = FindProgram("srun", d.empty() ? "." : d);
    }
  }
  if (srun.empty()) srun = FindProgram("srun", "");
  if (srun.empty()) {
    return FailedPrecondition("Slurm is not installed here: srun is not on PATH");
  }
  for (const std::string& host : hosts) {
    SpawnOptions so;
    so.argv = {srun,
               "--jobid=" + job_id,
               "--overlap",
               "--nodes=1",
               "--ntasks=1",
               "--nodelist=" + host,
               "--input=none",
               "--job-name=bulwark:replay-check",
               bulwark,
               "ckpt",
               "verify",
               dir,
               std::to_string(step)};
    so.env = env;
    auto run = RunToEnd(so, timeout_s);
    if (!run.ok()) return Unavailable("srun on " + host + ": " + run.status().message());
    if (run->timed_out) {
      return Unavailable("checking the checkpoint on " + host + " took over " +
                         std::to_string(static_cast<int>(timeout_s)) +
                         " s (srun killed): " + Trim(run->output));
    }
    if (!run->exit.ok()) {
      std::string said = Trim(run->output);
      if (said.size() > 600) said = said.substr(0, 600) + " …";
      return FailedPrecondition(
          "host " + host + " cannot read the replay's checkpoint, step " + std::to_string(step) +
          " in " + dir + " (`bulwark ckpt verify` there: " + said +
          "); the checkpoint is where this host wrote it: put the job's run directory "
          "(--run-dir) on a file system every host mounts, or replay on hosts that have it");
    }
  }
  return Status::Ok();
}

SlurmJobComment::SlurmJobComment(std::string job_id, std::map<std::string, std::string> env,
                                 std::function<std::string()> status, double interval_s)
    : job_id_(std::move(job_id)),
      env_(std::move(env)),
      status_(std::move(status)),
      interval_s_(interval_s) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::duration<double>(interval_s_), [this] { return stop_; })) {
      const std::string text = status_();
      l.unlock();
      if (!text.empty()) Set(text);
      l.lock();
    }
  });
}

SlurmJobComment::~SlurmJobComment() { Stop(); }

void SlurmJobComment::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlurmJobComment::Finish(const std::string& last) {
  Stop();
  Set(last);
}

void SlurmJobComment::Set(const std::string& text) {
  if (text == last_) return;
  SpawnOptions so;
  so.argv = {"scontrol", "update", "jobid=" + job_id_, "comment=" + text};
  so.env = env_;
  auto r = RunToEnd(so, 10);
  if (r.ok() && !r->timed_out && r->exit.ok()) {
    last_ = text;
    return;
  }
  if (!warned_) {
    warned_ = true;
    std::fprintf(stderr,
                 "[bulwark] slurm: cannot set the comment of job %s (%s); not trying again\n",
                 job_id_.c_str(), r.ok() ? Trim(r->output).c_str() : r.status().message().c_str());
  }
  last_ = text;  // one warning, and no retry of the same text
}

Status CheckSlurmRequest(const JobSpec& spec, const SlurmRequest& req, const std::string& bin_dir,
                         std::ostream& err) {
  // What Slurm accepts in each flag (and nothing a shell would read).
  for (const Status& st : {CheckFlag("partition", req.partition), CheckFlag("account", req.account),
                           CheckFlag("qos", req.qos), CheckFlag("time", req.time),
                           CheckFlag("constraint", req.constraint)}) {
    BW_RETURN_IF_ERROR(st);
  }
  const int spares = spec.fault_policy.spare_nodes;
  const int need = spec.nodes + spares;
  // The partition, checked against the cluster when scontrol is here.
  const std::string scontrol = FindProgram("scontrol", bin_dir);
  if (scontrol.empty()) {
    err << "note: Slurm's scontrol is not on PATH here: the partition and its size are not "
           "checked\n";
    return Status::Ok();
  }
  SpawnOptions so;
  so.argv = {scontrol, "--oneliner", "show", "partition"};
  so.env = CurrentEnv();
  auto r = RunToEnd(so, 10);
  if (!r.ok() || r->timed_out || !r->exit.ok()) {
    err << "note: could not list the cluster's partitions (scontrol show partition: "
        << (r.ok() ? Trim(r->output) : r.status().message())
        << "): the partition and its size are not checked\n";
    return Status::Ok();
  }
  std::string names, chosen;
  int total = -1;
  std::istringstream lines(r->output);
  for (std::string l; std::getline(lines, l);) {
    const std::string name = Field(l, "PartitionName");
    if (name.empty()) continue;
    names += (names.empty() ? "" : ", ") + name;
    const bool pick = req.partition.empty() ? Field(l, "Default") == "YES" : name == req.partition;
    if (pick) {
      chosen = name;
      const std::string n = Field(l, "TotalNodes");
      total = n.empty() ? -1 : std::stoi(n);
    }
  }
  if (!req.partition.empty() && chosen.empty()) {
    const bool from_spec = req.partition == spec.slurm.partition;
    return InvalidArgument((from_spec ? "the spec's slurm.partition " : "--partition ") +
                           req.partition + ": no such partition on this cluster (it has: " + names +
                           "); pick one of them (sinfo --summarize lists them)");
  }
  if (total >= 0 && total < need) {
    return InvalidArgument(
        "partition " + chosen + " has " + std::to_string(total) + " nodes but job '" + spec.name +
        "' needs " + std::to_string(need) + " (nodes: " + std::to_string(spec.nodes) +
        " + faultPolicy.spareNodes: " + std::to_string(spares) +
        "); lower nodes or faultPolicy.spareNodes, or pick a larger partition (--partition)");
  }
  return Status::Ok();
}

SlurmRequest WithSpecDefaults(const JobSpec& spec, SlurmRequest flags) {
  const SlurmSpec& s = spec.slurm;
  for (auto [flag, value] : {std::pair{&flags.partition, &s.partition},
                             {&flags.account, &s.account},
                             {&flags.qos, &s.qos},
                             {&flags.time, &s.time},
                             {&flags.constraint, &s.constraint}}) {
    if (flag->empty()) *flag = *value;
  }
  return flags;
}

std::vector<std::string> AllocationOptions(const JobSpec& spec, const SlurmRequest& req) {
  std::vector<std::string> o = {
      "--job-name=" + spec.name,
      "--nodes=" + std::to_string(spec.nodes + spec.fault_policy.spare_nodes),
      "--ntasks-per-node=1", "--exclusive", "--no-kill"};
  if (!req.partition.empty()) o.push_back("--partition=" + req.partition);
  if (!req.account.empty()) o.push_back("--account=" + req.account);
  if (!req.qos.empty()) o.push_back("--qos=" + req.qos);
  if (!req.time.empty()) o.push_back("--time=" + req.time);
  if (!req.constraint.empty()) o.push_back("--constraint=" + req.constraint);
  return o;
}

int SlurmScript(const SlurmScriptFlags& f, std::ostream& out, std::ostream& err) {
  auto fail = [&err](const Status& st) {
    err << "bulwark slurm script: " << st.message() << "\n";
    return st.code() == Code::kInvalidArgument ? 2 : 1;
  };
  if (f.spec.empty()) return fail(InvalidArgument("give a job spec: bulwark slurm script SPEC"));
  auto in = trainjob::ReadManifestInput(f.spec);
  if (!in.ok()) {
    return fail(in.status().code() == Code::kNotFound ? InvalidArgument(in.status().message())
                                                      : in.status());
  }
  auto ms = trainjob::ParseManifestInput(*in, trainjob::Target::kLocal);
  if (!ms.ok()) return fail(ms.status());
  if (ms->size() != 1) {
    return fail(InvalidArgument(f.spec + " holds " + std::to_string(ms->size()) +
                                " manifests; a script runs one job: give it one document"));
  }
  const JobSpec& spec = (*ms)[0].job.job;
  if (Status st =
          CheckFlag("output", f.output, std::regex("[A-Za-z0-9_./%+=-]+"),
                    "a file name pattern without spaces or quotes (e.g. bulwark-%x-%j.out)");
      !st.ok()) {
    return fail(st);
  }
  if (f.output.empty()) return fail(InvalidArgument("--output: must not be empty"));
  const SlurmRequest req = WithSpecDefaults(spec, f.request);
  if (Status st = CheckSlurmRequest(spec, req, f.bin_dir, err); !st.ok()) return fail(st);
  std::error_code ec;
  const std::string spec_path = fs::absolute(f.spec, ec).lexically_normal().string();
  const std::string bulwark = f.bulwark.empty() ? ExeDir() + "/bulwark" : f.bulwark;
  out << "#!/bin/bash\n"
      << "# Bulwark job " << spec.name << ": " << spec.nodes << " nodes x " << spec.procs_per_node
      << " ranks and "
      << Plural(spec.fault_policy.spare_nodes, "warm standby node", "warm standby nodes") << ",\n"
      << "# from " << spec_path << ". Written by `bulwark slurm script`; submit: sbatch FILE\n"
      << "# One bulwark-agent per node runs as a job step (srun); --no-kill keeps the\n"
      << "# allocation when a node fails (Bulwark replaces it with a standby) and --exclusive\n"
      << "# gives each agent's ranks the whole node.\n";
  for (const std::string& o : AllocationOptions(spec, req)) out << "#SBATCH " << o << "\n";
  out << "#SBATCH --output=" << f.output << "\n";
  out << "\nexec " << ShellQuote(bulwark) << " run " << ShellQuote(spec_path) << " --backend slurm";
  for (const std::string& a : f.run_args) out << " " << ShellQuote(a);
  out << "\n";
  return 0;
}

Status ExecUnderSalloc(const JobSpec& spec, const SlurmRequest& flags,
                       const std::vector<std::string>& command) {
  const SlurmRequest req = WithSpecDefaults(spec, flags);
  BW_RETURN_IF_ERROR(CheckSlurmRequest(spec, req, "", std::cerr));
  const std::string salloc = FindProgram("salloc", "");
  if (salloc.empty()) {
    return FailedPrecondition(
        "Slurm is not installed here: salloc is not on PATH; install Slurm's client commands "
        "(Debian: apt-get install slurm-client), put them on PATH, or run without --allocate");
  }
  std::vector<std::string> argv = {salloc};
  for (std::string& o : AllocationOptions(spec, req)) argv.push_back(std::move(o));
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  std::string shown;
  for (const std::string& a : argv) shown += (shown.empty() ? "" : " ") + a;
  std::fprintf(stderr, "[bulwark] requesting the allocation: %s\n", shown.c_str());
  std::fflush(stderr);
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::execv(salloc.c_str(), cargv.data());
  return ErrnoStatus("exec " + salloc, errno);
}

CLI::App* AddSlurmCommand(CLI::App& app, int* exit_code, std::ostream& out, std::ostream& err,
                          const CommandFilter& filter) {
  auto flags = std::make_shared<SlurmScriptFlags>();
  auto* slurm = app.add_subcommand("slurm", "Bulwark on Slurm (docs/slurm.md)");
  if (!filter.Full("slurm")) return slurm;
  slurm->require_subcommand(1);
  auto* script = slurm->add_subcommand(
      "script", "print an sbatch script that allocates a job's nodes and standbys and runs it");
  script->add_option("spec", flags->spec, "the job spec (YAML; - reads standard input)");
  script->add_option("--partition", flags->request.partition,
                     "#SBATCH --partition (checked if Slurm is here)");
  script->add_option("--account", flags->request.account, "#SBATCH --account");
  script->add_option("--qos", flags->request.qos, "#SBATCH --qos");
  script->add_option("--time", flags->request.time, "#SBATCH --time, e.g. 1-00:00:00");
  script->add_option("--constraint", flags->request.constraint, "#SBATCH --constraint, e.g. a100");
  script->add_option("--output", flags->output, "#SBATCH --output (%x job name, %j job id)");
  script->add_option("run_args", flags->run_args,
                     "after --: more flags for `bulwark run` (e.g. -- --report report.json)");
  script->add_option("--bulwark", flags->bulwark,
                     "the bulwark executable the script runs (default: this one)");
  script->footer(
      "Example:\n  bulwark slurm script examples/pytorch-ddp/job.yaml --time 2:00:00 > job.sbatch\n"
      "  sbatch job.sbatch");
  script->callback([=, &out, &err] { *exit_code = SlurmScript(*flags, out, err); });
  return slurm;
}

}  // namespace bulwark::cli
