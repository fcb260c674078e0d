// Agent: the warm rank pool and the job's long-lived store server.
//
// Warm ranks (docs/agent.md, "Warm ranks"): for a rank command that starts Python
// (python_command.h), the agent keeps up to `warm_ranks` processes that have imported
// torch, the SDK and the script's top-level imports, said `warm_ready` on the agent
// socket, and block on stdin. A rank that needs a new process takes one: the agent
// writes {"argv", "env", "cwd"} as one line and closes stdin; the process becomes that
// rank (docs/protocol.md section 2).
//
// Warm ranks are forked from the node's zygote (`python -m bulwark.zygote`, which
// states the fork protocol): it imports once, so a node pays one import instead of one
// per rank, and a warm rank costs a fork. The zygote starts with the first launch that
// needs new processes, which waits for its imports (at most kZygoteWaitS, then spawns),
// or, on an agent without ranks (a standby), when the pool is first wanted; otherwise
// only while no rank of this node is starting (its imports would compete with theirs).
// A zygote that dies or fails a fork is restarted after a backoff; three failures in
// a row turn it off, and warm ranks are then started as processes of their own
// (`python -m bulwark.warm`), one at a time and only while no rank of this node is
// starting. A warm rank that dies before use is replaced after a backoff; three in a
// row turn the pool off with a warning.
//
// The store server (slot 0's agent): `python -m bulwark.store_server`, a TCPStore on an
// ephemeral port that outlives every generation, so kept ranks re-form their process
// group under a new prefix instead of a new port. Started once a rank of slot 0
// declares generations that form process groups and no rank of the node is starting
// (until it serves, generations rendezvous on the attempt's master port); its port goes
// to the controller in `store` and in heartbeats.
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "agent/agent.h"
#include "agent/agent_internal.h"
#include "agent/python_command.h"

namespace bulwark {
namespace {

using agent_internal::Warn;

constexpr int kMaxWarmFailures = 3;
constexpr int kMaxZygoteFailures = 3;
constexpr double kRankStartupS = 5;
constexpr double kHelperKillWaitS = 2;
constexpr double kZygoteWaitS = 30;  // longest a launch waits for the zygote's imports
constexpr double kZygoteForkS = 5;   // longest a fork request may take

// Splits complete lines off `partial` after appending `data`.
std::vector<std::string> TakeLines(std::string* partial, const std::string& data) {
  *partial += data;
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t nl; (nl = partial->find('\n', pos)) != std::string::npos; pos = nl + 1) {
    lines.push_back(partial->substr(pos, nl - pos));
  }
  partial->erase(0, pos);
  return lines;
}

}  // namespace

void Agent::SetWarmSpec(const StartSpec& spec, int size) {
  const StartSpec& old = warm_spec_.spec;
  if (!warm_.empty() && (old.command != spec.command || old.env != spec.env ||
                         old.workdir != spec.workdir || old.version != spec.version)) {
    KillWarm();  // made for other code (a hot update): not usable any more
  }
  warm_spec_.spec = spec;
  warm_spec_.size = size;
  if (size <= 0) KillZygote();
  while (static_cast<int>(warm_.size()) > std::max(0, size)) {
    WarmRank& w = warm_.back();
    KillHelper(w.pid, w.pgid);
    warm_.pop_back();
  }
}

void Agent::MaybeFillPool() {
  // The retry backoffs first: an expired timer left armed would keep the loop from
  // sleeping (Timers::Until would be 0). EnsureZygote waits while zygote_retry is armed.
  (void)timers_.TakeIfExpired("zygote_retry");
  if (timers_.Armed("warm_retry") && !timers_.TakeIfExpired("warm_retry")) return;
  if (warm_disabled_ || warm_spec_.size <= 0 || shutdown_requested_ || stopping_ || fetching_) {
    return;
  }
  if (static_cast<int>(warm_.size()) >= warm_spec_.size) return;
  if (ZygoteUsable()) {
    if (zygote_.pid <= 0) {
      if (!NodeRanksStarting()) EnsureZygote();
      return;
    }
    while (zygote_.ready && static_cast<int>(warm_.size()) < warm_spec_.size) {
      std::optional<WarmRank> w = ForkWarm();
      if (!w) return;
      warm_.push_back(std::move(*w));
    }
    return;
  }
  for (const WarmRank& w : warm_) {
    if (!w.ready) return;  // one at a time
  }
  if (NodeRanksStarting()) return;
  const std::optional<PythonCommand> cmd = ParsePythonCommand(warm_spec_.spec.command);
  if (!cmd) {
    warm_disabled_ = true;
    Warn("warm ranks off: the rank command is not `python [options] SCRIPT|-m MODULE ...`");
    return;
  }
  SpawnOptions so;
  so.argv = PythonModuleArgv(*cmd, "bulwark.warm");
  so.env = BuildRankEnv(warm_spec_.spec, 0, paths_, CurrentEnv());
  so.env["BULWARK_STACK_FILE"] = "";  // not a rank yet: no stack dumps
  so.env["BULWARK_WARM_TARGET"] = cmd->module.empty() ? cmd->script : "-m " + cmd->module;
  so.workdir = warm_spec_.spec.workdir;
  so.stdin_pipe = true;
  auto child = procs_->Spawn(so);
  if (!child.ok()) {
    ++warm_failures_;
    Warn("warm rank could not start: " + child.status().ToString());
    timers_.Arm("warm_retry", 1 << std::min(warm_failures_, 6));
    return;
  }
  WarmRank w;
  w.pid = child->pid;
  w.pgid = child->pgid;
  w.out = std::move(child->output);
  w.in = std::move(child->input);
  warm_.push_back(std::move(w));
}

std::optional<Agent::WarmRank> Agent::TakeWarm() {
  if (warm_.empty()) return ForkWarm();  // none waiting: a fork, if the zygote is ready
  auto it = std::find_if(warm_.begin(), warm_.end(), [](const WarmRank& w) { return w.ready; });
  if (it == warm_.end()) it = warm_.begin();  // still importing: sooner than a new process
  WarmRank w = std::move(*it);
  warm_.erase(it);
  return w;
}

Status Agent::AssignWarm(WarmRank& w, const StartSpec& spec,
                         const std::map<std::string, std::string>& env) {
  std::string cwd = spec.workdir;
  if (cwd.empty()) {
    char buf[4096];
    if (::getcwd(buf, sizeof buf)) cwd = buf;
  }
  const std::string line = Json{{"argv", spec.command}, {"env", env}, {"cwd", cwd}}.dump(
                               -1, ' ', false, Json::error_handler_t::replace) +
                           "\n";
  size_t off = 0;
  for (int tries = 0; off < line.size() && tries < 400; ++tries) {
    const ssize_t n = ::write(w.in.get(), line.data() + off, line.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return ErrnoStatus("write to the warm rank's stdin", errno);
    } else {
      clock_->SleepFor(0.005);  // the pipe is full until it reads
    }
  }
  if (off < line.size()) return DeadlineExceeded("the warm rank did not read its assignment");
  w.in.Reset();  // EOF: the assignment is complete
  return Status::Ok();
}

void Agent::PumpWarm() {
  for (WarmRank& w : warm_) {
    if (!w.out.valid()) continue;
    bool eof = false;
    for (const std::string& l : TakeLines(&w.partial, ReadAvailable(w.out.get(), &eof))) {
      std::cout << "[" << opts_.node << "/warm " << w.pid << "] " << l << "\n";
    }
    if (eof) w.out.Reset();
  }
  if (zygote_.out.valid()) {
    bool eof = false;
    for (const std::string& l :
         TakeLines(&zygote_.partial, ReadAvailable(zygote_.out.get(), &eof))) {
      std::cout << "[" << opts_.node << "/zygote] " << l << "\n";
    }
    if (eof) zygote_.out.Reset();
  }
  std::cout.flush();
}

void Agent::ReportWarm() {
  int ready = 0;
  for (const WarmRank& w : warm_) ready += w.ready ? 1 : 0;
  const std::string now = warm_spec_.spec.version + "/" + std::to_string(ready);
  if (now == warm_reported_) return;
  warm_reported_ = now;
  Send({{"type", "warm"}, {"version", warm_spec_.spec.version}, {"ready", ready}});
}

void Agent::KillWarm() {
  zygote_wait_.reset();
  KillZygote();
  for (WarmRank& w : warm_) {
    IgnoreError(procs_->SignalGroup(w.pgid, SIGKILL), "the process may be gone already");
  }
  const double until = clock_->NowMono() + kHelperKillWaitS;
  for (WarmRank& w : warm_) {
    while (!procs_->Reap(w.pid) && clock_->NowMono() < until) clock_->SleepFor(0.01);
  }
  warm_.clear();
}

void Agent::ReapHelpers(std::set<pid_t>* tracked) {
  for (auto it = warm_.begin(); it != warm_.end();) {
    auto e = procs_->Reap(it->pid);
    if (!e) {
      tracked->insert(it->pid);
      ++it;
      continue;
    }
    PumpWarm();
    ++warm_failures_;
    if (warm_failures_ >= kMaxWarmFailures) {
      warm_disabled_ = true;
      Warn("warm rank (pid " + std::to_string(it->pid) + ") exited before use (" + e->Describe() +
           "), " + std::to_string(warm_failures_) +
           " in a row: warm ranks off; replacement ranks start as new processes");
    } else {
      Warn("warm rank (pid " + std::to_string(it->pid) + ") exited before use (" + e->Describe() +
           "); another in " + std::to_string(1 << warm_failures_) + " s");
      timers_.Arm("warm_retry", 1 << warm_failures_);
    }
    it = warm_.erase(it);
  }
  if (zygote_.pid > 0) {
    if (auto e = procs_->Reap(zygote_.pid)) {
      PumpWarm();
      ZygoteFailed("it exited (" + e->Describe() + ")", /*reaped=*/true);
    } else {
      tracked->insert(zygote_.pid);
    }
  }
  if (store_.pid > 0) {
    if (auto e = procs_->Reap(store_.pid)) {
      PumpStore();
      Warn("store server (pid " + std::to_string(store_.pid) + ") exited: " + e->Describe() +
           "; generations rendezvous on the attempt's master port until it is restarted");
      store_ = StoreServer{};
      Send({{"type", "store"}, {"port", 0}, {"host", opts_.peer_host}});
    } else {
      tracked->insert(store_.pid);
    }
  }
}

std::optional<Agent::WarmRank> Agent::ForkWarm() {
  if (!ZygoteUsable() || !zygote_.ready) return std::nullopt;
  auto child = procs_->ForkFrom(zygote_.pid, zygote_.control.get(), kZygoteForkS);
  if (!child.ok()) {
    ZygoteFailed("a fork request failed: " + child.status().ToString(), /*reaped=*/false);
    return std::nullopt;
  }
  zygote_failures_ = 0;
  WarmRank w;
  w.pid = child->pid;
  w.pgid = child->pgid;
  w.out = std::move(child->output);
  w.in = std::move(child->input);
  return w;
}

bool Agent::ZygoteUsable() const {
  return subreaper_ && !zygote_disabled_ && warm_spec_.size > 0 &&
         ParsePythonCommand(warm_spec_.spec.command).has_value();
}

void Agent::EnsureZygote() {
  if (zygote_.pid > 0 || !ZygoteUsable() || shutdown_requested_) return;
  if (timers_.Armed("zygote_retry")) return;  // backing off (MaybeFillPool disarms it)
  const std::optional<PythonCommand> cmd = ParsePythonCommand(warm_spec_.spec.command);
  auto pair = UnixStreamPair();
  if (!pair.ok()) {
    ZygoteFailed("no channel: " + pair.status().ToString(), /*reaped=*/false);
    return;
  }
  SpawnOptions so;
  so.argv = PythonModuleArgv(*cmd, "bulwark.zygote");
  so.env = BuildRankEnv(warm_spec_.spec, 0, paths_, CurrentEnv());
  so.env["BULWARK_STACK_FILE"] = "";  // not a rank: no stack dumps
  so.env["BULWARK_WARM_TARGET"] = cmd->module.empty() ? cmd->script : "-m " + cmd->module;
  so.workdir = warm_spec_.spec.workdir;
  so.control_fd = pair->second.get();
  auto child = procs_->Spawn(so);
  if (!child.ok()) {
    ZygoteFailed("it could not start: " + child.status().ToString(), /*reaped=*/false);
    return;
  }
  zygote_ = ZygoteServer{};
  zygote_.pid = child->pid;
  zygote_.pgid = child->pgid;
  zygote_.out = std::move(child->output);
  zygote_.control = std::move(pair->first);
  zygote_.started_mono = clock_->NowMono();
}

void Agent::KillHelper(pid_t pid, pid_t pgid) {
  IgnoreError(procs_->SignalGroup(pgid, SIGKILL), "the process may be gone already");
  const double until = clock_->NowMono() + kHelperKillWaitS;
  while (!procs_->Reap(pid) && clock_->NowMono() < until) clock_->SleepFor(0.01);
}

void Agent::KillZygote() {
  if (zygote_.pid <= 0) return;
  KillHelper(zygote_.pid, zygote_.pgid);
  zygote_ = ZygoteServer{};
}

void Agent::ZygoteFailed(const std::string& why, bool reaped) {
  const pid_t pid = zygote_.pid;
  if (reaped) {
    zygote_ = ZygoteServer{};
  } else {
    KillZygote();
  }
  ++zygote_failures_;
  const std::string who = pid > 0 ? "zygote (pid " + std::to_string(pid) + ")" : "zygote";
  if (zygote_failures_ >= kMaxZygoteFailures) {
    zygote_disabled_ = true;
    Warn(who + " failed: " + why + "; " + std::to_string(zygote_failures_) +
         " in a row: warm ranks start as processes of their own");
  } else {
    const int backoff = 1 << zygote_failures_;
    Warn(who + " failed: " + why + "; another in " + std::to_string(backoff) + " s");
    timers_.Arm("zygote_retry", backoff);
  }
}

bool Agent::WaitForZygote(const StartSpec& spec) {
  if (!ZygoteUsable() || zygote_.ready) return false;
  int need = spec.nproc_per_node;
  for (const Rank& r : ranks_) need -= (r.alive && r.parked) ? 1 : 0;
  if (need <= static_cast<int>(warm_.size())) return false;
  EnsureZygote();  // no rank of this node is starting: the launch is waiting for it
  if (zygote_.pid <= 0) return false;
  const double left = zygote_.started_mono + kZygoteWaitS - clock_->NowMono();
  if (left <= 0) return false;
  zygote_wait_ = spec;
  timers_.Arm("zygote_wait", left);
  return true;
}

void Agent::MaybeLaunchAfterZygote() {
  if (!zygote_wait_) return;
  const bool expired = timers_.TakeIfExpired("zygote_wait");
  if (!expired && zygote_.pid > 0 && !zygote_.ready && ZygoteUsable()) return;
  if (!expired) timers_.Disarm("zygote_wait");
  StartSpec spec = std::move(*zygote_wait_);
  zygote_wait_.reset();
  if (expired && !zygote_.ready) {
    Warn("zygote (pid " + std::to_string(zygote_.pid) + ") still importing after " +
         std::to_string(static_cast<int>(kZygoteWaitS)) + " s; starting ranks as new processes");
  }
  Launch(spec);
}

bool Agent::NodeRanksStarting() const {
  const double now = clock_->NowMono();
  for (const Rank& r : ranks_) {
    if (r.alive && !r.parked && !r.retired && spec_ && !detector_.HasStep(r.rank) &&
        now - r.launched_mono < kRankStartupS) {
      return true;
    }
  }
  return false;
}

void Agent::MaybeStartStore() {
  if (!store_wanted_ || store_.pid > 0 || !spec_ || stopping_ || NodeRanksStarting()) return;
  store_wanted_ = false;
  EnsureStore(*spec_);
}

void Agent::EnsureStore(const StartSpec& spec) {
  if (store_.pid > 0) return;
  const std::optional<PythonCommand> cmd = ParsePythonCommand(spec.command);
  if (!cmd) return;  // not Python: no generations to serve
  SpawnOptions so;
  so.argv = PythonModuleArgv(*cmd, "bulwark.store_server");
  so.env = BuildRankEnv(spec, 0, paths_, CurrentEnv());
  so.env["BULWARK_STACK_FILE"] = "";
  so.workdir = spec.workdir;
  // A fork of the zygote has torch imported already: no import beside the ranks.
  if (std::optional<WarmRank> w = ForkWarm()) {
    StartSpec as_store = spec;
    as_store.command = so.argv;
    Status st = AssignWarm(*w, as_store, so.env);
    if (st.ok()) {
      store_ = StoreServer{};
      store_.pid = w->pid;
      store_.pgid = w->pgid;
      store_.out = std::move(w->out);
      return;
    }
    Warn("store server: a fork of the zygote could not take it (" + st.ToString() +
         "); starting it as a process of its own");
    KillHelper(w->pid, w->pgid);
  }
  auto child = procs_->Spawn(so);
  if (!child.ok()) {
    Warn("store server could not start: " + child.status().ToString() +
         "; generations rendezvous on the attempt's master port");
    return;
  }
  store_.pid = child->pid;
  store_.pgid = child->pgid;
  store_.out = std::move(child->output);
  store_.partial.clear();
  store_.port = 0;
}

void Agent::PumpStore() {
  if (!store_.out.valid()) return;
  bool eof = false;
  static const std::string kListening = "bulwark-store: listening on port ";
  for (const std::string& l : TakeLines(&store_.partial, ReadAvailable(store_.out.get(), &eof))) {
    if (l.rfind(kListening, 0) == 0 && store_.port == 0) {
      const int port = std::atoi(l.c_str() + kListening.size());
      if (port > 0 && port < 65536) {
        store_.port = port;
        Send({{"type", "store"}, {"port", port}, {"host", opts_.peer_host}});
        continue;
      }
    }
    std::cout << "[" << opts_.node << "/store] " << l << "\n";
  }
  std::cout.flush();
  if (eof) store_.out.Reset();
}

void Agent::KillStore() {
  if (store_.pid <= 0) return;
  KillHelper(store_.pid, store_.pgid);
  store_ = StoreServer{};
}

}  // namespace bulwark
