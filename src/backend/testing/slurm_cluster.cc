#include "backend/testing/slurm_cluster.h"

#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/net.h"
#include "common/run.h"

namespace bulwark::testing {

namespace {

namespace fs = std::filesystem;

double Now() { return SystemClock::Get()->NowMono(); }

// The last `bytes` of a file (a test daemon's log: small enough to read whole).
std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

// The value of `key` (" Key=") in one line of `scontrol -o show ...`, or "".
std::string Field(const std::string& line, const std::string& key) {
  const std::string needle = " " + key + "=";
  const std::string padded = " " + line;
  const size_t at = padded.find(needle);
  if (at == std::string::npos) return "";
  const size_t from = at + needle.size();
  const size_t end = padded.find_first_of(" \n", from);
  return padded.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

// Every process of this machine as pid -> parent pid, from /proc/<pid>/stat.
std::map<pid_t, pid_t> ParentsOfAll() {
  std::map<pid_t, pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() ||
        !std::all_of(name.begin(), name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      continue;
    }
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid) out[static_cast<pid_t>(std::stol(name))] = ppid;
  }
  return out;
}

// The live processes named `comm` that hold a file open whose path satisfies `match`.
std::vector<pid_t> ProcessesWithOpenFile(const std::string& comm,
                                         const std::function<bool(const std::string&)>& match) {
  std::vector<pid_t> out;
  for (const auto& entry : ParentsOfAll()) {
    const pid_t pid = entry.first;
    const std::string dir = "/proc/" + std::to_string(pid);
    std::ifstream comm_in(dir + "/comm");
    std::string name;
    std::getline(comm_in, name);
    if (name != comm || ProcState(pid) == 'Z') continue;
    std::error_code ec;
    for (const auto& fd : fs::directory_iterator(dir + "/fd", ec)) {
      std::error_code lec;
      const fs::path target = fs::read_symlink(fd.path(), lec);
      if (!lec && match(target.string())) {
        out.push_back(pid);
        break;
      }
    }
  }
  return out;
}

bool Executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

}  // namespace

Result<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(SlurmClusterOptions opts) {
  for (int attempt = 1;; ++attempt) {
    auto c = StartOnce(opts);
    if (c.ok() || attempt == 3 ||
        c.status().message().find("Address already in use") == std::string::npos) {
      return c;
    }
  }
}

Result<std::unique_ptr<SlurmCluster>> SlurmCluster::StartOnce(SlurmClusterOptions opts) {
  for (const std::string& path :
       {opts.sbin_dir + "/slurmctld", opts.sbin_dir + "/slurmd", opts.sbin_dir + "/slurmstepd",
        opts.bin_dir + "/srun", opts.bin_dir + "/sbatch", opts.bin_dir + "/scontrol",
        opts.bin_dir + "/sinfo"}) {
    if (!Executable(path)) {
      return FailedPrecondition(
          "Slurm is not installed: " + path +
          " is missing; run `bash scripts/setup.sh` (it installs Debian 12's Slurm 22.05 "
          "packages slurmctld, slurmd and slurm-client)");
    }
  }
  if (opts.nodes < 1 || opts.cpus_per_node < 1 || opts.slurmd_timeout_s < 1 ||
      opts.message_timeout_s < 1) {
    return InvalidArgument(
        "SlurmClusterOptions: nodes, cpus_per_node, slurmd_timeout_s and "
        "message_timeout_s must be at least 1");
  }
  bool owns = false;
  if (opts.work_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/bw-slurm-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("mkdtemp " + tmpl, errno);
    opts.work_dir = tmpl;
    owns = true;
  }
  std::unique_ptr<SlurmCluster> c(new SlurmCluster(std::move(opts)));
  c->owns_work_dir_ = owns;
  const double t0 = Now();
  const double deadline = t0 + c->opts_.start_timeout_s;
  Status s = c->WriteConfig();
  if (s.ok()) s = c->Launch("slurmctld");
  // A slurmd that cannot register, and a client that cannot connect, retry only after a
  // second: start them once slurmctld accepts connections.
  while (s.ok() && !TcpConnect("127.0.0.1", c->ctld_port_, 0.5).ok()) {
    if (!c->Check().empty() || Now() >= deadline) {
      s = Unavailable("slurmctld did not listen on 127.0.0.1:" + std::to_string(c->ctld_port_) +
                      " within " + std::to_string(c->opts_.start_timeout_s) + " s (" + c->Check() +
                      ")\n--- slurmctld log ---\n" + c->LogTail("slurmctld"));
    }
    if (s.ok()) SystemClock::Get()->SleepFor(0.01);  // poll interval
  }
  for (size_t i = 0; s.ok() && i < c->node_names_.size(); ++i) s = c->Launch(c->node_names_[i]);
  if (s.ok()) s = c->WaitAllIdle(std::max(1.0, deadline - Now()));
  if (!s.ok()) {
    c->Stop();
    return s;
  }
  c->startup_s_ = Now() - t0;
  return c;
}

SlurmCluster::~SlurmCluster() { Stop(); }

Status SlurmCluster::WriteConfig() {
  const std::string& w = opts_.work_dir;
  std::error_code ec;
  for (const char* sub : {"state", "log", "spool"}) {
    fs::create_directories(w + "/" + sub, ec);
    if (ec) return Internal("cannot create " + w + "/" + sub + ": " + ec.message());
  }
  const passwd* pw = ::getpwuid(::geteuid());
  if (pw == nullptr) return Internal("no passwd entry for uid " + std::to_string(::geteuid()));
  const std::string user = pw->pw_name;
  BW_ASSIGN_OR_RETURN(ctld_port_, PickFixturePort("127.0.0.1"));
  std::ostringstream conf;
  conf << "# Written by bulwark::testing::SlurmCluster (src/backend/testing/slurm_cluster.h).\n"
       << "ClusterName=bulwark\n"
       << "SlurmctldHost=localhost(127.0.0.1)\n"
       << "SlurmctldPort=" << ctld_port_ << "\n"
       << "SlurmUser=" << user << "\nSlurmdUser=" << user << "\n"
       << "AuthType=auth/none\nCredType=cred/none\n"
       << "PlugStackConfig=" << w << "/plugstack.conf\n"
       << "StateSaveLocation=" << w << "/state\n"
       << "SlurmdSpoolDir=" << w << "/spool/%n\n"
       << "SlurmctldPidFile=" << w << "/slurmctld.pid\n"
       << "SlurmdPidFile=" << w << "/spool/%n/slurmd.pid\n"
       << "SlurmctldLogFile=" << LogPath("slurmctld") << "\n"
       << "SlurmdLogFile=" << w << "/log/slurmd-%n.log\n"
       << "SlurmctldDebug=info\nSlurmdDebug=info\n"
       // No cgroups, accounting, MPI or mail. A step's processes are tracked by parent
       // pid (proctrack/pgid ends a batch step 3 s after its script: it polls the group
       // with sleeps of 1 s, 2 s, ...).
       << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
       << "JobAcctGatherType=jobacct_gather/none\n"
       << "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
       << "SwitchType=switch/none\nMpiDefault=none\nMailProg=/bin/true\n"
       << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
       << "SchedulerType=sched/builtin\n"
       // Batch jobs are scheduled at submission, not up to 3 s later.
       << "SchedulerParameters=batch_sched_delay=0\n"
       // The configured CPUs and memory count, whatever this machine has.
       << "SlurmdParameters=config_overrides\n"
       << "ReturnToService=2\n"
       << "SlurmdTimeout=" << opts_.slurmd_timeout_s << "\n"
       << "MessageTimeout=" << opts_.message_timeout_s << "\n"
       << "InactiveLimit=0\nKillWait=2\nMinJobAge=300\nPropagateResourceLimits=NONE\n"
       << opts_.extra_config;
  std::string nodes;
  for (int i = 1; i <= opts_.nodes; ++i) {
    const std::string name = opts_.node_prefix + std::to_string(i);
    BW_ASSIGN_OR_RETURN(int port, PickFixturePort("127.0.0.1"));
    node_names_.push_back(name);
    node_ports_[name] = port;
    nodes += (nodes.empty() ? "" : ",") + name;
    fs::create_directories(w + "/spool/" + name, ec);
    if (ec) return Internal("cannot create " + w + "/spool/" + name + ": " + ec.message());
    conf << "NodeName=" << name << " NodeHostname=localhost NodeAddr=127.0.0.1 Port=" << port
         << " CPUs=" << opts_.cpus_per_node << " RealMemory=" << opts_.real_memory_mb
         << " State=UNKNOWN\n";
  }
  conf << "PartitionName=" << opts_.partition << " Nodes=" << nodes
       << " Default=YES MaxTime=INFINITE State=UP\n";
  conf_path_ = w + "/slurm.conf";
  for (const auto& [path, text] :
       std::map<std::string, std::string>{{conf_path_, conf.str()}, {w + "/plugstack.conf", ""}}) {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    out.close();
    if (!out) return Internal("cannot write " + path);
  }
  return Status::Ok();
}

std::string SlurmCluster::LogPath(const std::string& name) const {
  return opts_.work_dir + "/log/" + (name == "slurmctld" ? name : "slurmd-" + name) + ".log";
}

std::map<std::string, std::string> SlurmCluster::ClientEnv() const {
  std::map<std::string, std::string> env = CurrentEnv();
  for (auto it = env.begin(); it != env.end();) {
    bool slurm = false;
    for (const char* prefix : {"SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_"}) {
      slurm = slurm || it->first.rfind(prefix, 0) == 0;
    }
    it = slurm ? env.erase(it) : std::next(it);
  }
  env["SLURM_CONF"] = conf_path_;
  return env;
}

Status SlurmCluster::Launch(const std::string& name) {
  std::vector<std::string> argv;
  if (name == "slurmctld") {
    argv = {opts_.sbin_dir + "/slurmctld", "-D", "-i", "-f", conf_path_};
  } else {
    argv = {opts_.sbin_dir + "/slurmd",    "-D", "-N", name, "-f", conf_path_, "-d",
            opts_.sbin_dir + "/slurmstepd"};
  }
  // The daemon's stdout and stderr (messages before its log file opens) go to a file,
  // so no pipe can fill up.
  const std::string out = opts_.work_dir + "/log/" + name + ".out";
  SpawnOptions so;
  so.argv = {"/bin/sh", "-c", "out=$1; shift; exec \"$@\" >>\"$out\" 2>&1", "sh", out};
  so.argv.insert(so.argv.end(), argv.begin(), argv.end());
  so.env = ClientEnv();
  so.workdir = opts_.work_dir;  // also the slurmstepds' working directory
  so.capture_output = false;
  so.die_with_parent = true;
  BW_ASSIGN_OR_RETURN(Child child, Spawn(so));
  Daemon* old = Find(name);
  if (old != nullptr) {
    old->child = std::move(child);
    old->exit.clear();
    old->killed = false;
  } else {
    daemons_.push_back({name, std::move(child), "", false});
  }
  return Status::Ok();
}

SlurmCluster::Daemon* SlurmCluster::Find(const std::string& name) {
  for (Daemon& d : daemons_) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::string SlurmCluster::Check() {
  std::string out;
  for (Daemon& d : daemons_) {
    if (d.exit.empty()) {
      if (auto e = Reap(d.child.pid)) d.exit = e->Describe();
    }
    if (!d.exit.empty() && !d.killed) {
      out += (out.empty() ? "" : "; ") + (d.name == "slurmctld" ? d.name : "slurmd " + d.name) +
             " exited (" + d.exit + ")";
    }
  }
  return out;
}

std::vector<pid_t> SlurmCluster::DaemonPids() const {
  std::vector<pid_t> out;
  for (const Daemon& d : daemons_) {
    if (d.exit.empty()) out.push_back(d.child.pid);
  }
  return out;
}

std::string SlurmCluster::LogTail(const std::string& daemon, size_t bytes) const {
  std::string out = Tail(LogPath(daemon), bytes);
  const std::string early = Tail(opts_.work_dir + "/log/" + daemon + ".out", bytes);
  if (!early.empty()) out += "--- " + daemon + " stdout/stderr ---\n" + early;
  return out;
}

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env, double timeout_s,
                                 const std::string& workdir) {
  if (argv.empty()) return InvalidArgument("RunCommand: empty command line");
  SpawnOptions so;
  so.argv = argv;
  so.env = env;
  so.workdir = workdir;
  BW_ASSIGN_OR_RETURN(RunOutcome o, RunToEnd(so, timeout_s));
  if (o.timed_out) {
    return DeadlineExceeded(argv[0] + " did not finish within " + std::to_string(timeout_s) +
                            " s; its output: " + o.output);
  }
  return CommandResult{o.exit, std::move(o.output)};
}

Result<CommandResult> SlurmCluster::Run(const std::vector<std::string>& argv, double timeout_s,
                                        const std::string& workdir) const {
  if (argv.empty()) return InvalidArgument("SlurmCluster::Run: empty command line");
  std::vector<std::string> full = argv;
  if (full[0].find('/') == std::string::npos) full[0] = opts_.bin_dir + "/" + full[0];
  return RunCommand(full, ClientEnv(), timeout_s, workdir);
}

Status SlurmCluster::WaitAllIdle(double timeout_s) {
  const double deadline = Now() + timeout_s;
  std::string last;
  while (true) {
    const std::string dead = Check();
    if (!dead.empty()) {
      std::string logs;
      for (const Daemon& d : daemons_) {
        if (!d.exit.empty()) logs += "\n--- " + d.name + " log ---\n" + LogTail(d.name);
      }
      return Unavailable("the Slurm test cluster did not start: " + dead + logs);
    }
    auto r = Run({"sinfo", "--noheader", "--Node", "--format=%N %t"},
                 std::max(1.0, std::min(5.0, deadline - Now())));
    if (r.ok()) {
      last = r->output;
      std::set<std::string> idle;
      std::istringstream lines(r->output);
      for (std::string node, state; lines >> node >> state;) {
        if (state == "idle") idle.insert(node);
      }
      if (r->exit.ok() && idle.size() == node_names_.size()) return Status::Ok();
    } else {
      last = r.status().ToString();
    }
    if (Now() >= deadline) break;
    SystemClock::Get()->SleepFor(0.05);  // poll interval
  }
  return DeadlineExceeded("Slurm nodes not all idle within " + std::to_string(timeout_s) +
                          " s; sinfo: " + last + "\n--- slurmctld log ---\n" +
                          LogTail("slurmctld"));
}

Result<std::string> SlurmCluster::ShowField(const std::string& entity, const std::string& name,
                                            const std::string& key) const {
  BW_ASSIGN_OR_RETURN(CommandResult r, Run({"scontrol", "--oneliner", "show", entity, name}));
  const std::string value = Field(r.output, key);
  if (!r.exit.ok() || value.empty()) {
    return Unavailable("scontrol show " + entity + " " + name + " (" + r.exit.Describe() +
                       "): " + r.output);
  }
  return value;
}

Result<std::string> SlurmCluster::NodeState(const std::string& node) const {
  return ShowField("node", node, "State");
}

Result<std::string> SlurmCluster::JobState(const std::string& job_id) const {
  return ShowField("job", job_id, "JobState");
}

Result<std::string> SlurmCluster::WaitNodeState(const std::string& node,
                                                const std::vector<std::string>& any_of,
                                                double timeout_s) const {
  const double deadline = Now() + timeout_s;
  std::string last;
  while (true) {
    auto state = NodeState(node);
    if (state.ok()) {
      last = *state;
      std::istringstream words(*state);
      for (std::string w; std::getline(words, w, '+');) {
        if (std::find(any_of.begin(), any_of.end(), w) != any_of.end()) return *state;
      }
    } else {
      last = state.status().ToString();
    }
    if (Now() >= deadline) break;
    SystemClock::Get()->SleepFor(0.1);  // poll interval
  }
  std::string want;
  for (const std::string& w : any_of) want += (want.empty() ? "" : " or ") + w;
  return DeadlineExceeded("node " + node + " not " + want + " within " + std::to_string(timeout_s) +
                          " s (last: " + last + ")");
}

Status SlurmCluster::KillSlurmd(const std::string& node) {
  Daemon* d = node == "slurmctld" ? nullptr : Find(node);
  if (d == nullptr) return NotFound("no Slurm node " + node);
  if (!d->exit.empty()) return FailedPrecondition("slurmd " + node + " is not running");
  IgnoreError(SignalGroup(d->child.pgid, SIGKILL), "the wait below sees whether it died");
  const auto e = WaitExit(d->child.pid, 5);
  if (!e) return Internal("slurmd " + node + " survived SIGKILL for 5 s");
  d->exit = e->Describe();
  d->killed = true;
  return Status::Ok();
}

Status SlurmCluster::CrashNode(const std::string& node) {
  BW_RETURN_IF_ERROR(KillSlurmd(node));
  KillSteps(node);
  return Status::Ok();
}

Status SlurmCluster::StartSlurmd(const std::string& node) {
  Daemon* d = node == "slurmctld" ? nullptr : Find(node);
  if (d == nullptr) return NotFound("no Slurm node " + node);
  Check();
  if (d->exit.empty()) return FailedPrecondition("slurmd " + node + " is running");
  BW_RETURN_IF_ERROR(Launch(node));
  const double deadline = Now() + opts_.start_timeout_s;
  std::string last;
  while (true) {
    d = Find(node);
    Check();
    if (!d->exit.empty()) {
      return Unavailable("slurmd " + node + " exited (" + d->exit + ")\n--- its log ---\n" +
                         LogTail(node));
    }
    auto state = NodeState(node);
    last = state.ok() ? *state : state.status().ToString();
    if (state.ok() && state->find("DOWN") == std::string::npos &&
        state->find("NOT_RESPONDING") == std::string::npos) {
      return Status::Ok();
    }
    if (Now() >= deadline) break;
    SystemClock::Get()->SleepFor(0.1);  // poll interval
  }
  return DeadlineExceeded("node " + node + " not back in service within " +
                          std::to_string(opts_.start_timeout_s) + " s (last: " + last +
                          ")\n--- its log ---\n" + LogTail(node));
}

std::vector<pid_t> SlurmCluster::StepDaemonPids(const std::string& node) const {
  // A slurmstepd keeps its node's slurmd log open: that names its node and cluster.
  const std::string all_prefix = opts_.work_dir + "/log/slurmd-";
  const std::string exact = LogPath(node);
  return ProcessesWithOpenFile("slurmstepd", [&](const std::string& target) {
    return node.empty() ? target.rfind(all_prefix, 0) == 0 : target == exact;
  });
}

void SlurmCluster::KillSteps(const std::string& node) {
  const std::vector<pid_t> steps = StepDaemonPids(node);
  if (steps.empty()) return;
  // The step daemons and every process under them, found before any dies (an orphan is
  // reparented and would leave the tree). Each round stops what it found (a stopped
  // process forks no more) and looks again, so a task a step daemon was forking while
  // the tree was read is found too (one such `sh -c` outlived a teardown).
  std::set<pid_t> doomed(steps.begin(), steps.end());
  for (int round = 0; round < 20; ++round) {
    for (pid_t pid : doomed) ::kill(pid, SIGSTOP);
    const std::map<pid_t, pid_t> parents = ParentsOfAll();
    bool found = false;
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [pid, ppid] : parents) {
        if (doomed.count(ppid) != 0 && doomed.insert(pid).second) grew = found = true;
      }
    }
    if (!found) break;
  }
  for (pid_t pid : doomed) ::kill(pid, SIGKILL);  // one already gone needs no kill
  // They are children of init (or of this process, if it is a subreaper: then reaped
  // here); wait until none is alive.
  const double deadline = Now() + 5;
  for (pid_t pid : doomed) {
    while (Now() < deadline) {
      Reap(pid);
      const char st = ProcState(pid);
      if (st == '?' || st == 'Z') break;
      SystemClock::Get()->SleepFor(0.01);
    }
  }
}

void SlurmCluster::Stop() {
  // Job processes first (slurmd leaves its steps running when it stops), then every
  // slurmd, slurmctld last, then any step a slurmd started meanwhile.
  if (!daemons_.empty()) KillSteps("");
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
    if (it->exit.empty()) it->exit = TerminateGroup(it->child.pid, it->child.pgid, 5).Describe();
  }
  if (!daemons_.empty()) KillSteps("");
  if (owns_work_dir_ && std::getenv("BULWARK_KEEP_SLURM_CLUSTER") == nullptr) {
    std::error_code ec;
    fs::remove_all(opts_.work_dir, ec);
    owns_work_dir_ = false;
  }
}

}  // namespace bulwark::testing
