#include "backend/slurm_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/run.h"

namespace bulwark {
namespace {

double Now() { return SystemClock::Get()->NowMono(); }

constexpr size_t kSrunLinesKept = 4;
constexpr double kTermWaitS = 5;  // SIGTERMed srun: then SIGKILL + scancel

// The value of `key` in one line of `scontrol --oneliner show ...`, or "". Reason is
// the last field and may hold spaces: it runs to the end of the line.
std::string Field(const std::string& line, const std::string& key) {
  const std::string needle = " " + key + "=";
  const std::string padded = " " + line;
  const size_t at = padded.find(needle);
  if (at == std::string::npos) return "";
  const size_t from = at + needle.size();
  if (key == "Reason") return padded.substr(from);
  const size_t end = padded.find(' ', from);
  return padded.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Whether `prog` (a path, or a name looked up in `path_var`) is executable.
bool Executable(const std::string& prog, const std::string& path_var) {
  if (prog.find('/') != std::string::npos) return ::access(prog.c_str(), X_OK) == 0;
  std::istringstream dirs(path_var);
  for (std::string d; std::getline(dirs, d, ':');) {
    if (!d.empty() && ::access((d + "/" + prog).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// A line srun --verbose adds (the options table, the allocation, the launch), as
// opposed to its warnings and errors.
bool SrunVerbose(const std::string& line) {
  static const char* kChatter[] = {
      "srun: defined options", "srun: ---",    "srun: end of defined", "srun: jobid ",
      "srun: launch",          "srun: route/", "srun: debug",          "srun: Received task exit"};
  for (const char* c : kChatter) {
    if (line.rfind(c, 0) == 0) return true;
  }
  // The options table: "srun: nodelist            : node2".
  const size_t colon = line.find(" : ");
  return colon != std::string::npos && line.find_first_not_of(' ', 6) < colon &&
         line.find(':', 6) == colon + 1;
}

}  // namespace

bool SlurmStateUnusable(const std::string& state) {
  static const char* kBad[] = {"DOWN",          "DRAIN",      "DRAINED",        "DRAINING",
                               "FAIL",          "FAILING",    "NOT_RESPONDING", "POWERED_DOWN",
                               "POWERING_DOWN", "POWER_DOWN", "REBOOT_ISSUED",  "FUTURE"};
  std::istringstream words(state);
  for (std::string w; std::getline(words, w, '+');) {
    for (const char* b : kBad) {
      if (w == b) return true;
    }
  }
  return false;
}

std::string SlurmBackend::Bin(const std::string& name) const {
  return opts_.bin_dir.empty() ? name : opts_.bin_dir + "/" + name;
}

Result<std::unique_ptr<SlurmBackend>> SlurmBackend::Create(SlurmBackendOptions opts) {
  if (opts.env.empty()) opts.env = CurrentEnv();
  if (opts.job_id.empty()) {
    return InvalidArgument("SlurmBackend: no Slurm job id (run inside salloc or sbatch)");
  }
  std::unique_ptr<SlurmBackend> b(new SlurmBackend(std::move(opts)));
  const auto path = b->opts_.env.find("PATH");
  std::vector<const char*> progs = {"srun", "scontrol", "scancel"};
  if (b->opts_.grow_nodes > 0) progs.push_back("salloc");
  for (const char* prog : progs) {
    const std::string p = b->Bin(prog);
    if (!Executable(p, path == b->opts_.env.end() ? "" : path->second)) {
      return FailedPrecondition(
          "Slurm is not installed here: " + p +
          (p.find('/') == std::string::npos ? " is not on PATH" : " does not exist") +
          "; install Slurm's client commands (Debian: apt-get install slurm-client), put "
          "them on PATH, or run with --backend local");
    }
  }
  // The first probe, synchronously: the job must run and its hosts be known before the
  // first StartNode.
  const double started = Now();
  SpawnOptions job;
  job.argv = {b->Bin("scontrol"), "--oneliner", "show", "job", b->opts_.job_id};
  job.env = b->opts_.env;
  BW_ASSIGN_OR_RETURN(RunOutcome jo, RunToEnd(job, b->opts_.command_timeout_s));
  std::string job_line;
  for (const std::string& l : Lines(jo.output)) {
    if (l.rfind("JobId=", 0) == 0) job_line = l;
  }
  RunOutcome o = jo;
  if (!jo.timed_out && !job_line.empty()) {
    auto hosts = slurm::ExpandHostlist(Field(job_line, "NodeList"));
    if (!hosts.ok()) {
      return Unavailable("Slurm job " + b->opts_.job_id +
                         ": NodeList: " + hosts.status().message());
    }
    std::vector<std::string> use = *hosts;
    if (!b->opts_.hosts.empty()) {
      for (const std::string& h : b->opts_.hosts) {
        if (std::find(hosts->begin(), hosts->end(), h) == hosts->end()) {
          std::string all;
          for (const std::string& n : *hosts) all += (all.empty() ? "" : ", ") + n;
          return InvalidArgument("host " + h + " is not in Slurm job " + b->opts_.job_id +
                                 " (its hosts: " + all +
                                 "); name hosts of the allocation, or "
                                 "allocate one with them (salloc --nodelist=" +
                                 h + ")");
        }
      }
      use = b->opts_.hosts;
    }
    for (const std::string& n : use) b->hosts_.push_back({n, "", "", "", true, b->opts_.job_id});
    b->SetGrowArgs(job_line);
    BW_ASSIGN_OR_RETURN(o, RunToEnd(b->ProbeCommand(), b->opts_.command_timeout_s));
  }
  if (o.timed_out) {
    return Unavailable("scontrol did not answer within " +
                       std::to_string(static_cast<int>(b->opts_.command_timeout_s)) +
                       " s: is slurmctld up? (" + Trim(o.output) + ")");
  }
  std::string error;
  if (!b->ApplyProbe(o.output, started, &error)) {
    if (error.find("Invalid job id") != std::string::npos) {
      return FailedPrecondition("Slurm job " + b->opts_.job_id +
                                " does not exist (it ended, or SLURM_JOB_ID is stale): " + error);
    }
    return Unavailable("cannot read Slurm job " + b->opts_.job_id + ": " + error);
  }
  if (b->job_state_ != "RUNNING") {
    return FailedPrecondition("Slurm job " + b->opts_.job_id + " is " + b->job_state_ +
                              ", not RUNNING: run inside a running allocation");
  }
  b->next_probe_ = Now() + b->opts_.poll_interval_s;
  return b;
}

SlurmBackend::~SlurmBackend() {
  IgnoreError(Teardown(1),
              "the end of the job: Teardown ends and reaps what it can, and nothing is left to "
              "tell");
}

std::string SlurmBackend::HostOf(const std::string& node_id) const {
  auto it = steps_.find(node_id);
  return it == steps_.end() ? "" : it->second.host;
}

std::string SlurmBackend::CapacityMessage() const {
  std::string uses;
  for (const SlurmHost& h : hosts_) {
    std::string use;
    for (const auto& [id, s] : steps_) {
      if (s.host == h.name) use = "runs " + id;
    }
    if (use.empty()) {
      if (!h.in_job) {
        use = "left the job";
      } else if (auto d = drained_.find(h.name); d != drained_.end()) {
        use = "is drained (" + d->second + ")";
      } else if (SlurmStateUnusable(h.state)) {
        use = "is " + h.state;
      } else if (auto sus = suspect_.find(h.name); sus != suspect_.end()) {
        use = "does not answer srun (" + sus->second.first + ")";
      } else if (auto b = blocked_.find(h.name); b != blocked_.end()) {
        use = b->second.first;
      } else {
        use = "is free";
      }
    }
    uses += (uses.empty() ? "" : ", ") + h.name + " " + use;
  }
  std::string grow;
  if (opts_.grow_nodes <= 0) {
    grow =
        "; a lost node's replacement waits for a host (let the job ask Slurm for more: the "
        "spec's slurm.growNodes; or allocate more spare nodes)";
  } else {
    grow = "; " + (grow_note_.empty() ? std::string("growing the allocation") : grow_note_);
  }
  return "no capacity: every host of Slurm job " + opts_.job_id + " is in use or lost (" + uses +
         ")" + grow;
}

Status SlurmBackend::StartNode(const NodeRequest& req) {
  if (steps_.count(req.node_id)) return InvalidArgument("node " + req.node_id + " already exists");
  if (job_state_ != "RUNNING") {
    return FailedPrecondition("Slurm job " + opts_.job_id + " is " + job_state_);
  }
  // A host whose slurmd does not answer srun is suspect: the next one is tried.
  while (true) {
    const SlurmHost* host = nullptr;
    for (const SlurmHost& h : hosts_) {
      // A grown host has no state until the probe after its grant.
      bool busy = !h.in_job || blocked_.count(h.name) || drained_.count(h.name) ||
                  suspect_.count(h.name) || h.state.empty() || SlurmStateUnusable(h.state);
      for (const auto& [id, s] : steps_) busy = busy || s.host == h.name;
      if (!busy) {
        host = &h;
        break;
      }
    }
    if (host == nullptr) {
      if (job_name_.empty()) job_name_ = req.job;
      last_wanted_ = Now();
      MaybeGrow();
      return Unavailable(CapacityMessage());
    }
    Status st = LaunchOn(*host, req);
    if (st.code() != Code::kUnavailable) return st;
  }
}

Status SlurmBackend::LaunchOn(const SlurmHost& host, const NodeRequest& req) {
  AgentCommand cmd = opts_.agent;
  cmd.peer_host = host.addr.empty() ? host.name : host.addr;
  Step s;
  s.node_id = req.node_id;
  s.host = host.name;
  s.name = "bulwark:" + req.job + ":" + req.node_id;
  SpawnOptions so;
  const std::string& job = host.job.empty() ? opts_.job_id : host.job;
  so.argv = {Bin("srun"),           "--verbose",  "--jobid=" + job,          "--overlap",
             "--nodes=1",           "--ntasks=1", "--nodelist=" + host.name, "--input=none",
             "--job-name=" + s.name};
  for (std::string& a : AgentArgv(cmd, req)) so.argv.push_back(std::move(a));
  so.env = opts_.env;
  so.capture_output = true;
  so.new_process_group = true;
  // srun holds the step: if `bulwark run` dies, srun dies and Slurm ends the step.
  so.die_with_parent = true;
  BW_ASSIGN_OR_RETURN(s.srun, Spawn(so));
  // A large pipe: the controller reads it between its other work.
  (void)::fcntl(s.srun.output.get(), F_SETPIPE_SZ, 1 << 20);
  // srun says when the step's task started; if it exits first, it refused.
  const double deadline = Now() + opts_.command_timeout_s;
  while (!s.started && Now() < deadline) {
    if (Finished(s)) {
      const std::string tail = SrunTail(s);
      if (MarkIfUnreachable(s)) return Unavailable(tail);  // the caller tries another host
      return FailedPrecondition("srun could not start " + req.node_id + " on Slurm node " + s.host +
                                " of job " + opts_.job_id + " (" + s.exit->Describe() + ")" +
                                (tail.empty() ? "" : ": " + tail));
    }
    PollReadable({s.srun.output.get()}, 0.05);
  }
  // Not started in time (a step pending for resources): srun keeps trying; Poll reports
  // it if it gives up.
  std::fprintf(stderr, "[bulwark] slurm: %s on %s (step %s, srun pid %d)%s\n", req.node_id.c_str(),
               s.host.c_str(), s.step_id.empty() ? "pending" : s.step_id.c_str(),
               static_cast<int>(s.srun.pid), s.started ? "" : ": the step has not started yet");
  placed_[req.node_id] = s.host;
  steps_.emplace(req.node_id, std::move(s));
  return Status::Ok();
}

Status SlurmBackend::QuarantineNode(const std::string& node_id, const std::string& reason) {
  auto it = placed_.find(node_id);
  if (it == placed_.end()) return NotFound("node " + node_id + " is not one of this backend's");
  return DrainNode(it->second, reason);
}

bool SlurmBackend::MarkIfUnreachable(const Step& s) {
  // What srun says when the host's slurmd does not answer (22.05).
  static const char* kMarkers[] = {"Communication connection failure", "Node failure",
                                   "Timed out waiting for job step to complete",
                                   "Zero Bytes were transmitted", "Connection refused"};
  for (const std::string& l : s.srun_lines) {
    for (const char* m : kMarkers) {
      if (l.find(m) != std::string::npos) {
        if (!suspect_.count(s.host)) {
          std::fprintf(stderr,
                       "[bulwark] slurm: %s does not answer srun (%s); no node is placed there "
                       "until Slurm has marked it down and back up\n",
                       s.host.c_str(), l.c_str());
        }
        suspect_[s.host] = {l, false};
        return true;
      }
    }
  }
  return false;
}

void SlurmBackend::Drain(Step& s, bool flush) {
  if (!s.eof && s.srun.output.get() >= 0) {
    s.partial += ReadAvailable(s.srun.output.get(), &s.eof);
  }
  size_t start = 0;
  while (true) {
    const size_t nl = s.partial.find('\n', start);
    const bool last = nl == std::string::npos;
    if (last && !(flush || s.eof)) break;
    const std::string line = s.partial.substr(start, last ? std::string::npos : nl - start);
    if (!line.empty()) {
      const bool from_srun = line.rfind("srun: ", 0) == 0;
      if (from_srun && line.find("launching StepId=") != std::string::npos) {
        const size_t at = line.find("StepId=") + 7;
        s.step_id = line.substr(at, line.find(' ', at) - at);
      }
      if (from_srun && line.find(" tasks started") != std::string::npos) s.started = true;
      if (from_srun && SrunVerbose(line)) {
        // --verbose's chatter: read for the step id and the start, not shown.
      } else if (from_srun || line.rfind("slurmstepd", 0) == 0) {
        std::fprintf(stderr, "[%s] %s\n", s.node_id.c_str(), line.c_str());
        s.srun_lines.push_back(line);
        if (s.srun_lines.size() > kSrunLinesKept) s.srun_lines.erase(s.srun_lines.begin());
      } else {
        std::fprintf(stdout, "%s\n", line.c_str());
      }
    }
    if (last) {
      start = s.partial.size();
      break;
    }
    start = nl + 1;
  }
  s.partial.erase(0, start);
  std::fflush(stdout);
}

bool SlurmBackend::Finished(Step& s) {
  Drain(s, false);
  if (!s.exit) s.exit = Reap(s.srun.pid);
  if (!s.exit) return false;
  // srun has exited: what it wrote is in the pipe unless a process it left holds the
  // pipe open; read what is there.
  for (int i = 0; i < 10 && !s.eof; ++i) {
    PollReadable({s.srun.output.get()}, 0.01);
    Drain(s, false);
  }
  Drain(s, true);
  return true;
}

std::string SlurmBackend::SrunTail(const Step& s) const {
  std::string out;
  for (const std::string& l : s.srun_lines) out += (out.empty() ? "" : " / ") + l;
  return out;
}

SpawnOptions SlurmBackend::ProbeCommand() const {
  std::string list;
  for (const SlurmHost& h : hosts_) list += (list.empty() ? "" : ",") + h.name;
  std::string grown;
  for (const auto& g : grows_) {
    if (!g->job_id.empty()) grown += (grown.empty() ? "" : " ") + g->job_id;
  }
  SpawnOptions so;
  // A grown job that ended long ago is unknown to scontrol: its error is ignored.
  so.argv = {"/bin/sh",
             "-c",
             "\"$1\" --oneliner show job \"$2\" && "
             "for j in $4; do \"$1\" --oneliner show job \"$j\" || true; done && "
             "\"$1\" --oneliner show node \"$3\"",
             "sh",
             Bin("scontrol"),
             opts_.job_id,
             list,
             grown};
  so.env = opts_.env;
  so.capture_output = true;
  return so;
}

Status SlurmBackend::StartProbe() {
  BW_ASSIGN_OR_RETURN(Child c, Spawn(ProbeCommand()));
  probe_ = std::make_unique<Probe>();
  probe_->child = std::move(c);
  probe_->started = Now();
  probe_->deadline = probe_->started + opts_.command_timeout_s;
  return Status::Ok();
}

bool SlurmBackend::ApplyProbe(const std::string& output, double started, std::string* error) {
  std::string job_line;
  std::map<std::string, std::string> grown_lines;  // by job id
  std::map<std::string, SlurmHost> nodes;
  for (const std::string& l : Lines(output)) {
    if (l.rfind("JobId=", 0) == 0) {
      const std::string id = Field(l, "JobId");
      if (id == opts_.job_id) {
        job_line = l;
      } else {
        grown_lines[id] = l;
      }
    } else if (l.rfind("NodeName=", 0) == 0) {
      SlurmHost h;
      h.name = Field(l, "NodeName");
      h.addr = Field(l, "NodeAddr");
      h.state = Field(l, "State");
      h.reason = Field(l, "Reason");
      nodes[h.name] = h;
    }
  }
  if (job_line.empty()) {
    *error = Trim(output);
    return false;
  }
  job_state_ = Field(job_line, "JobState");
  auto in_job = slurm::ExpandHostlist(Field(job_line, "NodeList"));
  std::vector<std::string> now_in = in_job.ok() ? *in_job : std::vector<std::string>{};
  if (hosts_.empty()) {
    for (const std::string& n : now_in) hosts_.push_back({n, "", "", "", true, opts_.job_id});
  }
  // Each grown job's hosts: added when first seen; in it while it runs.
  std::map<std::string, std::vector<std::string>> grown_in;
  for (const auto& [id, line] : grown_lines) {
    auto list = slurm::ExpandHostlist(Field(line, "NodeList"));
    std::vector<std::string>& in = grown_in[id];
    if (Field(line, "JobState") == "RUNNING" && list.ok()) in = *list;
    for (const std::string& n : in) {
      if (std::none_of(hosts_.begin(), hosts_.end(),
                       [&](const SlurmHost& h) { return h.name == n && h.job == id; })) {
        hosts_.push_back({n, "", "", "", true, id});
        std::fprintf(stderr, "[bulwark] slurm: grown allocation %s runs on %s\n", id.c_str(),
                     n.c_str());
      }
    }
  }
  for (SlurmHost& h : hosts_) {
    if (h.job.empty() || h.job == opts_.job_id) {
      h.in_job = std::find(now_in.begin(), now_in.end(), h.name) != now_in.end();
    } else if (auto g = grown_in.find(h.job); g != grown_in.end()) {
      h.in_job = std::find(g->second.begin(), g->second.end(), h.name) != g->second.end();
    }
    if (auto it = nodes.find(h.name); it != nodes.end()) {
      h.addr = it->second.addr;
      h.state = it->second.state;
      h.reason = it->second.reason;
    }
    // A suspect host is free again once Slurm has shown it down and then healthy.
    if (auto sus = suspect_.find(h.name); sus != suspect_.end() && !nodes.empty()) {
      if (SlurmStateUnusable(h.state)) {
        sus->second.second = true;
      } else if (sus->second.second && h.in_job) {
        suspect_.erase(sus);
      }
    }
    // A host blocked before this probe started is free again once it looks healthy.
    auto b = blocked_.find(h.name);
    if (b != blocked_.end() && b->second.second < started && h.in_job &&
        !SlurmStateUnusable(h.state) && !nodes.empty()) {
      blocked_.erase(b);
    }
  }
  return true;
}

std::vector<NodeLoss> SlurmBackend::Poll() {
  std::vector<NodeLoss> lost;
  const double now = Now();
  // Steps whose srun ended.
  for (auto it = steps_.begin(); it != steps_.end();) {
    Step& s = it->second;
    if (!Finished(s)) {
      ++it;
      continue;
    }
    std::string why =
        "srun of " + s.node_id + " on Slurm node " + s.host + " ended (" + s.exit->Describe() + ")";
    const std::string tail = SrunTail(s);
    if (!tail.empty()) why += ": " + tail;
    if (!s.reported) lost.push_back({s.node_id, why});
    blocked_[s.host] = {"waits for Slurm to show it healthy (its step ended)", now};
    MarkIfUnreachable(s);
    it = steps_.erase(it);
  }
  // The probe: read, finish, or start one.
  if (probe_) {
    probe_->output += ReadAvailable(probe_->child.output.get(), &probe_->eof);
    auto exit = Reap(probe_->child.pid);
    if (!exit && now >= probe_->deadline) {
      TerminateGroup(probe_->child.pid, probe_->child.pgid, 0);
      const std::string msg = "scontrol did not answer within " +
                              std::to_string(static_cast<int>(opts_.command_timeout_s)) +
                              " s; node states are not being watched until it does";
      if (msg != probe_error_) std::fprintf(stderr, "[bulwark] slurm: %s\n", msg.c_str());
      probe_error_ = msg;
      probe_.reset();
      next_probe_ = now + opts_.poll_interval_s;
    } else if (exit) {
      if (!probe_->eof) probe_->output += ReadAvailable(probe_->child.output.get(), &probe_->eof);
      std::string error;
      if (!ApplyProbe(probe_->output, probe_->started, &error)) {
        const std::string msg = "scontrol failed (" + exit->Describe() + "): " + error;
        if (msg != probe_error_) std::fprintf(stderr, "[bulwark] slurm: %s\n", msg.c_str());
        probe_error_ = msg;
      } else {
        probe_error_.clear();
        for (auto& [id, s] : steps_) {
          if (s.reported) continue;
          std::string why;
          if (job_state_ != "RUNNING") {
            why = "Slurm job " + opts_.job_id + " is " + job_state_;
          }
          for (const SlurmHost& h : hosts_) {
            if (h.name != s.host || !why.empty()) continue;
            if (!h.in_job) {
              why = "Slurm node " + h.name + " left job " + opts_.job_id + " (state " + h.state +
                    (h.reason.empty() ? "" : ", reason: " + h.reason) + ")";
            } else if (SlurmStateUnusable(h.state)) {
              why = "Slurm node " + h.name + " is " + h.state +
                    (h.reason.empty() ? "" : " (reason: " + h.reason + ")");
            }
          }
          if (why.empty()) continue;
          s.reported = true;
          lost.push_back({id, why});
          blocked_[s.host] = {"waits for Slurm to show it healthy (a node was lost there)", now};
        }
      }
      probe_.reset();
      next_probe_ = now + opts_.poll_interval_s;
    }
  }
  PollGrows(now);
  if (!probe_ && now >= next_probe_) {
    Status st = StartProbe();
    if (!st.ok()) {
      std::fprintf(stderr, "[bulwark] slurm: %s\n", st.message().c_str());
      next_probe_ = now + opts_.poll_interval_s;
    }
  }
  // Reported steps leave for the ending list: the controller kills them next.
  for (auto it = steps_.begin(); it != steps_.end();) {
    if (it->second.reported) {
      if (it->second.term_at < 0) {
        ::kill(it->second.srun.pid, SIGTERM);  // srun kills the step
        it->second.term_at = Now();
      }
      ending_.push_back(std::move(it->second));
      it = steps_.erase(it);
    } else {
      ++it;
    }
  }
  // scancel children: reaped when done, killed when late.
  for (auto it = helpers_.begin(); it != helpers_.end();) {
    bool eof = false;
    (void)ReadAvailable(it->output.get(), &eof);
    if (Reap(it->pid)) {
      it = helpers_.erase(it);
    } else {
      ++it;
    }
  }
  // Steps being ended: reap, escalate.
  for (auto it = ending_.begin(); it != ending_.end();) {
    if (Finished(*it)) {
      MarkIfUnreachable(*it);
      it = ending_.erase(it);
      continue;
    }
    if (it->term_at < 0) {
      ::kill(it->srun.pid, SIGTERM);  // gone already: nothing to do
      it->term_at = now;
    } else if (now - it->term_at > kTermWaitS && !it->killed) {
      // srun did not end the step (its host does not answer): kill srun; Slurm cancels
      // the step when it can.
      IgnoreError(SignalGroup(it->srun.pgid, SIGKILL), "srun may be gone already");
      it->killed = true;
      if (!it->step_id.empty()) {
        SpawnOptions so;
        so.argv = {Bin("scancel"), "--signal=KILL", it->step_id};
        so.env = opts_.env;
        if (auto c = Spawn(so); c.ok()) helpers_.push_back(std::move(*c));
      }
    }
    ++it;
  }
  return lost;
}

void SlurmBackend::SetGrowArgs(const std::string& job_line) {
  grow_args_.clear();
  auto set = [](const std::string& v) { return !v.empty() && v != "(null)"; };
  if (const std::string v = Field(job_line, "Partition"); set(v)) {
    grow_args_.push_back("--partition=" + v);
  }
  if (const std::string v = Field(job_line, "Account"); set(v)) {
    grow_args_.push_back("--account=" + v);
  }
  if (const std::string v = Field(job_line, "QOS"); set(v)) grow_args_.push_back("--qos=" + v);
  if (const std::string v = Field(job_line, "Features"); set(v)) {
    grow_args_.push_back("--constraint=" + v);
  }
  if (const std::string v = Field(job_line, "TimeLimit");
      set(v) && v != "UNLIMITED" && v != "Partition_Limit") {
    grow_args_.push_back("--time=" + v);
  }
}

std::vector<std::string> SlurmBackend::grown_jobs() const {
  std::vector<std::string> out;
  for (const auto& g : grows_) {
    if (!g->job_id.empty() && !g->withdrawn && !g->exit) out.push_back(g->job_id);
  }
  return out;
}

void SlurmBackend::MaybeGrow() {
  if (opts_.grow_nodes <= 0) return;
  for (const auto& g : grows_) {
    if (g->withdrawn || g->exit) continue;
    if (g->job_id.empty()) return;  // a request is pending
    const bool placeable = std::any_of(hosts_.begin(), hosts_.end(), [&](const SlurmHost& h) {
      return h.job == g->job_id && !h.state.empty();
    });
    if (!placeable) return;  // granted; its host is not probed yet
  }
  const double now = Now();
  if (grow_used_ >= opts_.grow_nodes) {
    grow_note_ = "the job may not ask Slurm for more nodes (slurm.growNodes: " +
                 std::to_string(opts_.grow_nodes) + ", all used); raise it, or allocate more " +
                 "spare nodes";
    return;
  }
  if (now < next_grow_) return;
  // A new machine: none this job has (in use, lost, drained or suspect).
  std::string exclude;
  std::set<std::string> seen;
  for (const SlurmHost& h : hosts_) {
    if (seen.insert(h.name).second) exclude += (exclude.empty() ? "" : ",") + h.name;
  }
  SpawnOptions so;
  so.argv = {
      Bin("salloc"),
      "--no-kill",
      "--nodes=1",
      "--ntasks-per-node=1",
      "--exclusive",
      "--job-name=bulwark:" + (job_name_.empty() ? std::string("job") : job_name_) + ":grow"};
  so.argv.insert(so.argv.end(), grow_args_.begin(), grow_args_.end());
  if (!exclude.empty()) so.argv.push_back("--exclude=" + exclude);
  // The held command: the allocation lives while this process does.
  for (std::string a :
       {std::string("--"), std::string("/bin/sh"), std::string("-c"),
        std::string("tail --pid=\"$1\" -f /dev/null; exec \"$2\" \"$SLURM_JOB_ID\""),
        std::string("sh"), std::to_string(::getpid()), Bin("scancel")}) {
    so.argv.push_back(std::move(a));
  }
  // Not the job's own allocation variables: salloc makes a new one.
  for (const auto& [k, v] : opts_.env) {
    if (k.rfind("SLURM_", 0) != 0 || k == "SLURM_CONF") so.env[k] = v;
  }
  so.capture_output = true;
  so.new_process_group = true;
  auto c = Spawn(so);
  if (!c.ok()) {
    grow_note_ = "cannot ask Slurm for a node: " + c.status().message();
    next_grow_ = now + opts_.grow_retry_s;
    return;
  }
  auto g = std::make_unique<Grow>();
  g->salloc = std::move(*c);
  grows_.push_back(std::move(g));
  ++grow_used_;
  std::string shown;
  for (size_t i = 0; i < so.argv.size() && so.argv[i] != "--"; ++i) {
    shown += (shown.empty() ? "" : " ") + so.argv[i];
  }
  grow_note_ = "asked Slurm for one more node (" + shown + "), pending";
  std::fprintf(stderr, "[bulwark] slurm: no free host: %s\n", grow_note_.c_str());
}

void SlurmBackend::EndGrow(Grow& g, double now) {
  if (g.withdrawn) return;
  g.withdrawn = true;
  g.hup_at = now;
  ::kill(g.salloc.pid, SIGHUP);  // not yet reaped: the pid is still salloc's
}

void SlurmBackend::PollGrows(double now) {
  static const std::regex kGranted("Granted job allocation ([0-9]+)");
  for (auto it = grows_.begin(); it != grows_.end();) {
    Grow& g = **it;
    if (!g.eof) g.output += ReadAvailable(g.salloc.output.get(), &g.eof);
    std::smatch m;
    if (g.job_id.empty() && std::regex_search(g.output, m, kGranted)) {
      g.job_id = m[1];
      g.idle_since = now;
      grow_note_ = "Slurm granted one more node (job " + g.job_id + ")";
      std::fprintf(stderr, "[bulwark] slurm: %s\n", grow_note_.c_str());
      if (!probe_) next_probe_ = now;
    }
    if (!g.exit) g.exit = Reap(g.salloc.pid);
    if (g.exit) {
      if (!g.eof) g.output += ReadAvailable(g.salloc.output.get(), &g.eof);
      if (g.job_id.empty() && !g.withdrawn) {
        // Refused: salloc's own words.
        std::string said;
        for (const std::string& l : Lines(g.output)) {
          if (l.find("error") != std::string::npos || said.empty()) said = l;
        }
        grow_note_ = "Slurm refused one more node (" + g.exit->Describe() + ": " + Trim(said) +
                     "); asking again in " + std::to_string(static_cast<int>(opts_.grow_retry_s)) +
                     " s";
        std::fprintf(stderr, "[bulwark] slurm: %s\n", grow_note_.c_str());
        next_grow_ = now + opts_.grow_retry_s;
        --grow_used_;
      }
      // Its hosts go: given back, withdrawn, or ended by Slurm (a step there is then lost
      // by the probe, which sees the job end first).
      if (!g.job_id.empty()) {
        const bool running_here = std::any_of(steps_.begin(), steps_.end(), [&](const auto& kv) {
          for (const SlurmHost& h : hosts_) {
            if (h.job == g.job_id && h.name == kv.second.host) return true;
          }
          return false;
        });
        if (running_here) {
          for (SlurmHost& h : hosts_) {
            if (h.job == g.job_id) h.in_job = false;
          }
          ++it;
          continue;  // kept until the probe reports the step lost
        }
        std::erase_if(hosts_, [&](const SlurmHost& h) { return h.job == g.job_id; });
      }
      it = grows_.erase(it);
      continue;
    }
    if (g.job_id.empty() && !g.withdrawn && now - last_wanted_ > opts_.grow_unwanted_s) {
      std::fprintf(stderr,
                   "[bulwark] slurm: withdrawing the request for one more node: no node has "
                   "waited for a host for %.0f s\n",
                   now - last_wanted_);
      EndGrow(g, now);
      --grow_used_;
      grow_note_.clear();
    } else if (!g.job_id.empty() && !g.withdrawn) {
      bool used = false;
      for (const auto& [id, st] : steps_) {
        for (const SlurmHost& h : hosts_) used = used || (h.job == g.job_id && h.name == st.host);
      }
      if (used) {
        g.idle_since = now;
      } else if (now - g.idle_since > opts_.grow_idle_s) {
        std::fprintf(stderr,
                     "[bulwark] slurm: giving back grown allocation %s: no node ran there for "
                     "%.0f s\n",
                     g.job_id.c_str(), now - g.idle_since);
        EndGrow(g, now);
      }
    } else if (g.withdrawn && !g.killed && now - g.hup_at > kTermWaitS) {
      IgnoreError(SignalGroup(g.salloc.pgid, SIGKILL), "salloc may have ended already");
      g.killed = true;
      if (!g.job_id.empty()) {
        SpawnOptions so;
        so.argv = {Bin("scancel"), g.job_id};
        so.env = opts_.env;
        if (auto c = Spawn(so); c.ok()) helpers_.push_back(std::move(*c));
      }
    }
    ++it;
  }
}

Status SlurmBackend::KillNode(const std::string& node_id) {
  auto it = steps_.find(node_id);
  if (it == steps_.end()) {
    for (Step& s : ending_) {
      if (s.node_id == node_id && s.term_at < 0) {
        ::kill(s.srun.pid, SIGTERM);  // gone already: nothing to do
        s.term_at = Now();
      }
    }
    return Status::Ok();
  }
  // SIGTERM makes srun kill the step at once ("forcing job termination": SIGKILL to
  // every process of the step); srun then exits and Poll reports the loss.
  if (::kill(it->second.srun.pid, SIGTERM) != 0 && errno != ESRCH) {
    return ErrnoStatus("signal srun of " + node_id, errno);
  }
  if (it->second.term_at < 0) it->second.term_at = Now();
  return Status::Ok();
}

void SlurmBackend::EndSteps(std::vector<Step*> steps, double grace_s) {
  auto all_done = [&] {
    bool done = true;
    for (Step* s : steps) done = Finished(*s) && done;
    return done;
  };
  // 1. The agents, told to stop, end their steps.
  double deadline = Now() + grace_s;
  while (!all_done() && Now() < deadline) {
    std::vector<int> fds;
    for (Step* s : steps) {
      if (!s->eof) fds.push_back(s->srun.output.get());
    }
    PollReadable(fds, 0.05);
  }
  // 2. srun kills the step (SIGTERM).
  for (Step* s : steps) {
    if (!s->exit && s->term_at < 0) {
      ::kill(s->srun.pid, SIGTERM);  // gone already: nothing to do
      s->term_at = Now();
    }
  }
  deadline = Now() + kTermWaitS;
  while (!all_done() && Now() < deadline) PollReadable({}, 0.05);
  // 3. srun does not answer: kill it, and have Slurm kill the step.
  for (Step* s : steps) {
    if (s->exit) continue;
    IgnoreError(SignalGroup(s->srun.pgid, SIGKILL), "srun may be gone already");
    if (!s->step_id.empty()) {
      SpawnOptions so;
      so.argv = {Bin("scancel"), "--signal=KILL", s->step_id};
      so.env = opts_.env;
      auto r = RunToEnd(so, opts_.command_timeout_s);
      if (!r.ok() || !r->exit.ok()) {
        std::fprintf(stderr, "[bulwark] slurm: scancel --signal=KILL %s: %s\n", s->step_id.c_str(),
                     r.ok() ? Trim(r->output).c_str() : r.status().message().c_str());
      }
    } else {
      std::fprintf(stderr,
                   "[bulwark] slurm: srun of %s did not end and its step id is unknown; "
                   "the agent on %s ends itself when it loses the controller\n",
                   s->node_id.c_str(), s->host.c_str());
    }
    if (!s->exit) s->exit = WaitExit(s->srun.pid, 5);
    Drain(*s, true);
  }
}

Status SlurmBackend::ReleaseNode(const std::string& node_id, double grace_s) {
  auto it = steps_.find(node_id);
  if (it == steps_.end()) return Status::Ok();
  EndSteps({&it->second}, grace_s);
  steps_.erase(it);
  return Status::Ok();
}

Status SlurmBackend::Teardown(double grace_s) {
  std::vector<Step*> all;
  for (auto& [id, s] : steps_) all.push_back(&s);
  for (Step& s : ending_) all.push_back(&s);
  if (!all.empty()) EndSteps(all, grace_s);
  steps_.clear();
  ending_.clear();
  if (probe_) {
    TerminateGroup(probe_->child.pid, probe_->child.pgid, 0);
    probe_.reset();
  }
  // Grown allocations: given back (salloc relinquishes on SIGHUP), else cancelled.
  const double now = Now();
  for (auto& g : grows_) {
    if (!g->exit) EndGrow(*g, now);
  }
  for (auto& g : grows_) {
    if (!g->exit) g->exit = WaitExit(g->salloc.pid, kTermWaitS);
    if (g->exit) continue;
    TerminateGroup(g->salloc.pid, g->salloc.pgid, 0);
    if (!g->job_id.empty()) {
      SpawnOptions so;
      so.argv = {Bin("scancel"), g->job_id};
      so.env = opts_.env;
      auto r = RunToEnd(so, opts_.command_timeout_s);
      if (!r.ok() || !r->exit.ok()) {
        std::fprintf(stderr, "[bulwark] slurm: scancel %s: %s\n", g->job_id.c_str(),
                     r.ok() ? Trim(r->output).c_str() : r.status().message().c_str());
      }
    }
  }
  grows_.clear();
  for (Child& c : helpers_) {
    if (!WaitExit(c.pid, opts_.command_timeout_s)) TerminateGroup(c.pid, c.pgid, 0);
  }
  helpers_.clear();
  return Status::Ok();
}

Status SlurmBackend::DrainNode(const std::string& host, const std::string& reason) {
  if (std::none_of(hosts_.begin(), hosts_.end(),
                   [&](const SlurmHost& h) { return h.name == host; })) {
    return NotFound("no host " + host + " in Slurm job " + opts_.job_id);
  }
  drained_[host] = reason;  // excluded here whatever Slurm says
  SpawnOptions so;
  so.argv = {Bin("scontrol"), "update", "nodename=" + host, "state=drain", "reason=" + reason};
  so.env = opts_.env;
  BW_ASSIGN_OR_RETURN(RunOutcome o, RunToEnd(so, opts_.command_timeout_s));
  const std::string out = Trim(o.output);
  if (o.timed_out) {
    return DeadlineExceeded("scontrol update nodename=" + host + " state=drain did not finish in " +
                            std::to_string(static_cast<int>(opts_.command_timeout_s)) + " s");
  }
  if (o.exit.ok()) return Status::Ok();
  if (out.find("Invalid user id") != std::string::npos ||
      out.find("ermission denied") != std::string::npos ||
      out.find("Access/permission") != std::string::npos) {
    return PermissionDenied("cannot drain Slurm node " + host + ": " + out +
                            "; draining needs Slurm operator or administrator rights "
                            "(sacctmgr AdminLevel); the node is excluded from this job instead");
  }
  return Unavailable("scontrol update nodename=" + host + " state=drain failed (" +
                     o.exit.Describe() + "): " + out);
}

}  // namespace bulwark
