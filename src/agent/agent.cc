#include "agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "agent/agent_internal.h"
#include "agent/step_metrics.h"
#include "common/json_util.h"
#include "common/proc.h"

namespace bulwark {

void agent_internal::Warn(const std::string& msg) {
  std::cerr << "bulwark-agent: " << msg << std::endl;
}

namespace {
using agent_internal::HostName;
using agent_internal::Warn;

constexpr double kPollS = 0.05;

volatile std::sig_atomic_t g_term_signal = 0;

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("cannot create directory " + dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

namespace agent_internal {

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace agent_internal

void Agent::RequestTermination(int sig) { g_term_signal = sig; }

Agent::Agent(AgentOptions opts, const Clock* clock)
    : opts_(std::move(opts)),
      clock_(clock),
      procs_(opts_.procs ? opts_.procs : Processes::Real()),
      detector_(clock),
      timers_(clock) {
  opts_.stacks.procs = procs_;
}

Agent::~Agent() {
  catalog_.reset();  // finishes the catalog request in progress
  StopAllBlocking();
  CloseRanks();
  KillWarm();
  KillStore();
  if (fetch_thread_.joinable()) fetch_thread_.join();  // bounded by the fetch timeouts
  diag_cancel_.store(true);  // the check running finishes (its budget), no other starts
  if (diag_thread_.joinable()) diag_thread_.join();
  persister_.reset();
  peer_.reset();
  if (staging_lease_.lock.valid()) {
    IgnoreError(staging_lease_.Remove(),
                "what is left is swept by the next agent on this machine (common/shm_dir.h)");
  } else if (!paths_.staging_dir.empty()) {
    IgnoreError(ckpt::RemoveTree(ckpt::Env::Default(), paths_.staging_dir),
                "a stale ring left behind is recreated over by the SDK");
  }
}

Status Agent::Setup() {
  if (opts_.run_dir.empty()) return InvalidArgument("--run-dir is required");
  paths_.node = opts_.node;
  paths_.node_dir = opts_.run_dir + "/" + opts_.node;
  paths_.python_dir = opts_.python_dir;
  paths_.lib_path = opts_.lib_path;
  BW_RETURN_IF_ERROR(MakeDirs(paths_.node_dir));
  // The memory tier lives on tmpfs, in a directory the agent locks while it lives
  // (common/shm_dir.h): those of agents that died without removing theirs are swept
  // here, so a killed node's RAM comes back at the next agent's start on the machine.
  struct stat shm;
  if (::stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode)) {
    const int swept = SweepAbandonedShmDirs("/dev/shm", clock_);
    if (swept > 0) {
      Warn("removed " + std::to_string(swept) + " memory-tier director" +
           (swept == 1 ? "y" : "ies") + " of agents gone from this machine from /dev/shm");
    }
    BW_ASSIGN_OR_RETURN(
        staging_lease_,
        AcquireShmDir("/dev/shm", ShmDirName(opts_.run_dir, opts_.node), clock_, 10));
    paths_.staging_dir = staging_lease_.path;
  } else {
    paths_.staging_dir = paths_.node_dir + "/staging";
    BW_RETURN_IF_ERROR(MakeDirs(paths_.staging_dir));
  }
  // The agent's and its ranks' Unix sockets live in node_dir, unless a rank's socket
  // path there would not fit a sockaddr_un (107 bytes: a deep working directory, a long
  // job name); then in the node's tmpfs directory, whose name is short and which is
  // removed with the agent (or swept after it died).
  paths_.sock_dir = paths_.node_dir;
  const auto too_long = [](const std::string& dir) {
    return (dir + "/rank-9999999.sock").size() >= 108;  // the longest socket path
  };
  if (too_long(paths_.sock_dir) && staging_lease_.lock.valid() && !too_long(staging_lease_.path)) {
    paths_.sock_dir = staging_lease_.path;
  }
  if (too_long(paths_.sock_dir)) {
    return InvalidArgument("--run-dir '" + opts_.run_dir + "' is too long: socket paths like " +
                           paths_.sock_dir +
                           "/rank-9999999.sock exceed 107 bytes and there is "
                           "no /dev/shm to put them in instead; use a shorter run directory");
  }
  paths_.agent_sock = paths_.sock_dir + "/agent.sock";
  BW_ASSIGN_OR_RETURN(dgram_, UnixDgramBind(paths_.agent_sock));
  {
    ckpt::PeerServerOptions po;
    po.host = opts_.peer_host;
    po.port = opts_.peer_port;
    po.replica_dir = paths_.staging_dir + "/replicas";
    po.staging_dir = paths_.staging_dir;
    po.slots = opts_.replica_slots;
    po.log = [](const std::string& line) { Warn("peer: " + line); };
    BW_ASSIGN_OR_RETURN(peer_, ckpt::PeerServer::Start(po));
  }
  // Orphaned rank descendants, and ranks forked by the zygote, come back to us.
  subreaper_ = BecomeSubreaper().ok();
  BW_ASSIGN_OR_RETURN(adopt_listen_, TcpListen(opts_.peer_host, opts_.adopt_port));
  BW_ASSIGN_OR_RETURN(adopt_port_, LocalPort(adopt_listen_.get()));
  const double deadline = clock_->NowMono() + opts_.connect_timeout_s;
  Status last;
  while (true) {
    double left = deadline - clock_->NowMono();
    if (left <= 0 || g_term_signal) break;
    auto fd = TcpConnect(opts_.controller_host, opts_.controller_port, std::min(left, 2.0));
    if (fd.ok()) {
      conn_.emplace(std::move(fd).value());
      break;
    }
    last = fd.status();
    clock_->SleepFor(0.1);
  }
  if (!conn_) {
    return Unavailable("cannot reach the controller at " + opts_.controller_host + ":" +
                       std::to_string(opts_.controller_port) + " within " +
                       std::to_string(opts_.connect_timeout_s) + " s: " + last.ToString());
  }
  StartMetrics();
  SendHello();
  return Status::Ok();
}

void Agent::SendHello() {
  Json hello = {{"type", "hello"},
                {"node", opts_.node},
                {"pid", getpid()},
                {"host", HostName()},
                {"peer_host", opts_.peer_host},
                {"peer_port", peer_->port()},
                {"adopt_port", adopt_port_},
                {"free_port", FreePort()},
                {"diag_checks", Json::array({"matmul", "disk", "link", "gpu"})}};
  if (metrics_port() > 0) hello["metrics_port"] = metrics_port();
  if (!gpus_.empty()) hello["gpus"] = GpuNames();
  if (!run_id_.empty()) {  // an adopting controller learns what runs here
    hello["adopted"] = true;
    hello["attempt"] = spec_ ? spec_->attempt : -1;
    hello["slot"] = spec_ ? slot_ : -1;
    hello["ranks_alive"] = RanksAlive();
    hello["state"] = stopping_ ? "stopping" : RanksAlive() > 0 ? "running" : "idle";
    Json ranks = Json::array();
    for (const Rank& r : ranks_) {
      if (r.alive) ranks.push_back({{"rank", r.rank}, {"pid", r.pid}});
    }
    hello["ranks"] = ranks;
  }
  Send(hello);
}

bool Agent::OnControllerLost() {
  conn_.reset();
  if (opts_.orphan_timeout_s <= 0 || run_id_.empty()) return false;
  orphaned_at_ = clock_->NowMono();
  Warn("controller connection closed; " + std::to_string(RanksAlive()) +
       " rank(s) keep running while a controller may adopt this agent at port " +
       std::to_string(adopt_port_) + " (for " + std::to_string(opts_.orphan_timeout_s) + " s)");
  return true;
}

void Agent::AcceptAdopters() {
  while (true) {
    Fd c = TcpAcceptNonBlocking(adopt_listen_.get());
    if (!c.valid()) break;
    if (adopters_.size() >= 8) continue;  // closed at once: nobody adopts that eagerly
    adopters_.push_back(std::make_unique<JsonLineConn>(std::move(c)));
  }
  for (auto it = adopters_.begin(); it != adopters_.end();) {
    std::vector<std::string> bad;
    std::vector<Json> msgs = (*it)->Read(&bad);
    if (msgs.empty()) {
      it = (*it)->closed() || !bad.empty() ? adopters_.erase(it) : std::next(it);
      continue;
    }
    const Json& m = msgs.front();
    auto job = JStrOr(m, "job", "");
    auto run = JStrOr(m, "run_id", "");
    auto node = JStrOr(m, "node", "");
    std::string refusal;
    if (m["type"] != "adopt") {
      refusal = "expected adopt";
    } else if (run_id_.empty()) {
      refusal = "this agent has not served a job yet";
    } else if (!job.ok() || !run.ok() || !node.ok() || *job != job_ || *run != run_id_ ||
               *node != opts_.node) {
      refusal = "this agent is " + opts_.node + " of job " + job_ + " run " + run_id_;
    }
    if (!refusal.empty()) {
      IgnoreError((*it)->Send({{"type", "refused"}, {"message", refusal}}),
                  "a failed send closes the connection; the loop handles the peer's loss");
      IgnoreError((*it)->Flush(0.2),
                  "best effort before the connection goes; an unsent message is the peer's loss");
      it = adopters_.erase(it);
      continue;
    }
    // Adopted: this connection is the controller's from now on; a controller still
    // connected (a deposed leader) is dropped.
    if (conn_) Warn("a newer controller adopted this agent; dropping the old connection");
    conn_.emplace(std::move(**it));
    adopters_.erase(it);
    const double away = orphaned_at_ >= 0 ? clock_->NowMono() - orphaned_at_ : 0;
    orphaned_at_ = -1;
    Warn("adopted by a controller after " + std::to_string(away) + " s; " +
         std::to_string(RanksAlive()) + " rank(s) kept running; resending " +
         std::to_string(outcomes_.size()) + " outcome report(s) of the attempt, forwarding " +
         std::to_string(backlog_.size()) + " report(s) made meanwhile");
    SendHello();
    std::vector<Json> outcomes = std::move(outcomes_);
    outcomes_.clear();
    for (const Json& m : outcomes) Send(m);  // kept again, for a later adopter
    while (!backlog_.empty()) {
      Send(backlog_.front());
      backlog_.pop_front();
    }
    for (size_t i = 1; i < msgs.size(); ++i) HandleController(msgs[i]);
    break;  // adopters_ changed
  }
}

void Agent::SendStopped(long attempt, MemInventory mem, Json parked) {
  Send({{"type", "stopped"},
        {"attempt", attempt},
        {"mem", std::move(mem.steps)},
        {"portable", std::move(mem.portable)},
        {"replicas", ReplicaInventory()},
        {"free_port", FreePort()},
        {"parked", std::move(parked)}});
}

int Agent::FreePort() {
  auto p = PickFreePort("0.0.0.0");
  return p.ok() ? *p : 0;
}

Status Agent::Start() { return Setup(); }

int Agent::Run() {
  Status st = Start();
  if (!st.ok()) {
    Warn(st.ToString());
    return kAgentExitSetupFailed;
  }
  while (true) {
    const int rc = RunOnce();
    if (rc >= 0) return rc;
  }
}

int Agent::RunOnce() {
  if (g_term_signal) {
    Warn("received " + SignalName(g_term_signal) + "; stopping all ranks");
    StopAllBlocking();
    if (conn_) {
      IgnoreError(conn_->Flush(1),
                  "best effort before the connection goes; an unsent message is the peer's loss");
    }
    return kAgentExitOk;
  }
  std::vector<int> fds = {dgram_.get(), adopt_listen_.get()};
  if (conn_) fds.push_back(conn_->fd());
  for (const auto& a : adopters_) fds.push_back(a->fd());
  for (const Rank& r : ranks_) {
    if (r.out.valid()) fds.push_back(r.out.get());
  }
  for (const WarmRank& w : warm_) {
    if (w.out.valid()) fds.push_back(w.out.get());
  }
  if (store_.out.valid()) fds.push_back(store_.out.get());
  if (zygote_.out.valid()) fds.push_back(zygote_.out.get());
  clock_->WaitReadable(fds, timers_.Until(kPollS));
  AcceptAdopters();
  if (conn_) {
    std::vector<std::string> bad;
    for (const Json& m : conn_->Read(&bad)) HandleController(m);
    for (const auto& b : bad) Warn("controller: dropped message: " + b);
    if (conn_->closed() && !OnControllerLost()) {
      Warn("controller connection closed; stopping all ranks and exiting");
      StopAllBlocking();
      return kAgentExitControllerLost;
    }
  }
  if (!conn_ && clock_->NowMono() - orphaned_at_ > opts_.orphan_timeout_s) {
    Warn("no controller adopted this agent within " + std::to_string(opts_.orphan_timeout_s) +
         " s; stopping all ranks and exiting");
    StopAllBlocking();
    return kAgentExitControllerLost;
  }
  for (const auto& d : UnixDgramRecvAll(dgram_.get())) HandleDatagram(d);
  FlushPendingSteps();
  PollGpus();  // every kGpuPollS (agent_metrics.cc)
  for (Rank& r : ranks_) PumpOutput(r, false);
  PumpWarm();
  PumpStore();
  ReapRanks();
  ReportExits();
  AdvanceStop();
  CheckHangs();
  MaybeHeartbeat();
  FinishFetchIfDone();
  MaybeLaunchAfterZygote();
  MaybeFillPool();
  if (warm_spec_.size > 0) ReportWarm();
  MaybeStartStore();
  DrainOutbox();
  if (conn_ && conn_->HasPendingOutput()) {
    IgnoreError(conn_->Flush(0),
                "best effort before the connection goes; an unsent message is the peer's loss");
  }
  if (shutdown_requested_ && ranks_.empty() && !stopping_ && !fetching_) {
    KillWarm();
    KillStore();
    if (conn_) {
      IgnoreError(conn_->Flush(2),
                  "best effort before the connection goes; an unsent message is the peer's loss");
    }
    return kAgentExitOk;
  }
  return -1;
}

void Agent::Send(const Json& msg) {
  if (!conn_ || conn_->closed()) {
    // Orphaned: kept for the adopter (heartbeats are not news; the oldest reports go
    // first when the backlog is full).
    if (orphaned_at_ < 0 || msg.value("type", "") == "heartbeat") return;
    constexpr size_t kMaxBacklog = 100000;
    if (backlog_.size() >= kMaxBacklog) backlog_.pop_front();
    backlog_.push_back(msg);
    return;
  }
  Status st = conn_->Send(msg);
  if (!st.ok()) Warn("send to controller failed: " + st.ToString());
  const std::string type = msg.value("type", "");
  constexpr size_t kMaxOutcomes = 4096;  // a few per rank per attempt; bounded all the same
  if ((type == "incident" || type == "exited") && spec_ && outcomes_.size() < kMaxOutcomes) {
    outcomes_.push_back(msg);
  }
}

void Agent::MaybeHeartbeat(bool force) {
  const double now = clock_->NowMono();
  if (!force && now < next_heartbeat_) return;
  next_heartbeat_ = now + opts_.heartbeat_interval_s;
  RefreshMetrics();
  Send({{"type", "heartbeat"},
        {"node", opts_.node},
        {"t", clock_->NowWall()},
        {"attempt", spec_ ? spec_->attempt : -1},
        {"ranks_alive", RanksAlive()},
        {"replicas", ReplicaInventory()},
        {"store_port", store_.port}});
}

Json Agent::ReplicaInventory() {
  Json out = Json::object();
  if (!peer_) return out;
  for (const auto& [rank, steps] : peer_->ReplicaSteps()) out[std::to_string(rank)] = steps;
  return out;
}

int Agent::RanksAlive() const {
  int n = 0;
  for (const Rank& r : ranks_) n += r.alive ? 1 : 0;
  return n;
}

Agent::Rank* Agent::FindRank(int global_rank) {
  for (Rank& r : ranks_) {
    if (r.rank == global_rank) return &r;
  }
  return nullptr;
}

void Agent::HandleController(const Json& msg) {
  const std::string type = msg["type"].get<std::string>();
  if (type == "start") {
    HandleStart(msg);
  } else if (type == "stop") {
    HandleStop(msg);
  } else if (type == "chaos") {
    HandleChaos(msg);
  } else if (type == "diagnose") {
    HandleDiagnose(msg);
  } else if (type == "link_peers") {
    HandleLinkPeers(msg);
  } else if (type == "capture_stacks") {
    HandleCaptureStacks(msg);
  } else if (type == "cadence") {
    HandleCadence(msg);
  } else if (type == "prepare") {
    HandlePrepare(msg);
  } else if (IsCatalogRequest(type)) {
    if (!catalog_) {
      catalog_ = std::make_unique<CatalogWorker>([this](Json reply) {
        std::lock_guard<std::mutex> l(outbox_mu_);
        outbox_.push_back(std::move(reply));
      });
    }
    Status st = catalog_->Submit(msg);
    if (!st.ok()) Warn("controller: dropped " + type + ": " + st.message());
  } else if (type == "welcome") {  // the controller accepted our hello: who we serve
    auto job = JStrOr(msg, "job", "");
    auto run = JStrOr(msg, "run_id", "");
    if (job.ok() && run.ok() && !job->empty() && !run->empty()) {
      job_ = *job;
      run_id_ = *run;
    } else {
      Warn("controller: dropped welcome without job and run_id");
    }
  } else if (type == "shutdown") {
    shutdown_requested_ = true;
    pending_start_.reset();
    zygote_wait_.reset();
    if (!ranks_.empty() && !stopping_) BeginStop(spec_ ? spec_->stop_grace_s : 5, -1);
  } else {
    Warn("controller: dropped message of unknown type '" + type + "'");
  }
}

void Agent::HandleStart(const Json& msg) {
  auto spec = ParseStartMessage(msg, opts_.run_dir + "/logs");
  if (!spec.ok()) {
    Warn("controller: dropped start: " + spec.status().message());
    return;
  }
  if (shutdown_requested_) return;
  job_ = spec->job;
  run_id_ = spec->run_id;
  slot_ = spec->group_rank;
  if (fetching_) {  // launched once the fetch in flight ends
    pending_start_ = std::move(spec).value();
    fetch_cancelled_ = true;
    return;
  }
  bool all_parked = !stopping_;
  for (const Rank& r : ranks_) all_parked = all_parked && (r.parked || !r.alive);
  if (!ranks_.empty() && !all_parked) {  // a new start first stops the old attempt
    pending_start_ = std::move(spec).value();
    if (!stopping_) BeginStop(spec_ ? spec_->stop_grace_s : 5, spec_ ? spec_->attempt : -1);
    return;
  }
  FetchThenLaunch(*spec);  // parked ranks (if any) join its generation
}

void Agent::HandleCadence(const Json& msg) {
  auto attempt = JInt(msg, "attempt");
  auto steps = JInt(msg, "interval_steps");
  auto from = JInt(msg, "from_step");
  Status bad = !attempt.ok() ? attempt.status() : !steps.ok() ? steps.status() : from.status();
  if (bad.ok() && (*steps < 0 || *from < 0)) bad = InvalidArgument("negative interval or step");
  if (!bad.ok()) {
    Warn("controller: dropped cadence: " + bad.message());
    return;
  }
  // A cadence for another attempt (stale, or one still being fetched) is ignored: the
  // next start message carries the current one.
  if (!spec_ || spec_->attempt != *attempt) return;
  spec_->cadence_steps = *steps;
  spec_->cadence_from_step = *from;
}

void Agent::FetchThenLaunch(const StartSpec& spec) {
  if (spec.fetch.empty()) {
    Launch(spec);
  } else {
    BeginFetch(spec);
  }
}

void Agent::BeginFetch(const StartSpec& spec) {
  fetching_ = spec;
  fetch_cancelled_ = false;
  fetch_done_ = false;
  fetch_results_.clear();
  const std::string staging = paths_.staging_dir;
  const int slots = std::max(2, spec.memory_slots);
  fetch_thread_ = std::thread([this, staging, slots, fetches = spec.fetch] {
    std::vector<Json> results;
    for (const StartSpec::Fetch& f : fetches) {
      const double t0 = SystemClock::Get()->NowMono();
      const int source = f.from_rank >= 0 ? f.from_rank : f.rank;
      Status st = ckpt::FetchSnapshot(f.host, f.port, source, f.step, staging, slots, 60,
                                      ckpt::kPeerDefaultMaxSnapshotBytes, f.rank);
      Json r = {{"type", "fetched"}, {"rank", f.rank},
                {"step", f.step},    {"from", f.from},
                {"ok", st.ok()},     {"seconds", SystemClock::Get()->NowMono() - t0}};
      if (source != f.rank) r["from_rank"] = source;
      if (!st.ok()) r["error"] = st.ToString();
      results.push_back(std::move(r));
    }
    fetch_results_ = std::move(results);
    fetch_done_.store(true, std::memory_order_release);
  });
}

void Agent::FinishFetchIfDone() {
  if (!fetching_ || !fetch_done_.load(std::memory_order_acquire)) return;
  fetch_thread_.join();
  StartSpec spec = std::move(*fetching_);
  fetching_.reset();
  for (Json& r : fetch_results_) {
    r["attempt"] = spec.attempt;
    if (!r["ok"].get<bool>()) Warn("fetch from peer failed: " + r["error"].get<std::string>());
    Send(r);
  }
  fetch_results_.clear();
  if (fetch_cancelled_ || shutdown_requested_) {
    if (pending_start_ && !shutdown_requested_) {
      StartSpec next = std::move(*pending_start_);
      pending_start_.reset();
      FetchThenLaunch(next);
    }
    return;
  }
  Launch(spec);
}

void Agent::HandleStop(const Json& msg) {
  auto attempt = JIntOr(msg, "attempt", -1);
  auto grace = JNumOr(msg, "grace_s", spec_ ? spec_->stop_grace_s : 5);
  if (!attempt.ok() || !grace.ok()) {
    Warn("controller: dropped stop: " +
         (attempt.ok() ? grace.status() : attempt.status()).message());
    return;
  }
  if (pending_start_ && (*attempt < 0 || pending_start_->attempt == *attempt)) {
    pending_start_.reset();
  }
  if (zygote_wait_ && (*attempt < 0 || zygote_wait_->attempt == *attempt)) {
    zygote_wait_.reset();  // its ranks never start; answered below like any unknown attempt
  }
  if (fetching_ && (*attempt < 0 || fetching_->attempt == *attempt)) {
    fetch_cancelled_ = true;  // its ranks never start
    SendStopped(*attempt, MemInventory());
    return;
  }
  const bool park = msg.contains("park") && msg["park"].is_boolean() && msg["park"].get<bool>();
  const bool ours = spec_ && (*attempt < 0 || *attempt == spec_->attempt);
  if (!ours || ranks_.empty()) {
    if (!ranks_.empty() && stopping_ && !parking_) {  // answered when that stop ends
      stop_reply_attempt_ = *attempt;
      return;
    }
    if (!ranks_.empty() && !stopping_ && !park) {  // parked ranks no generation will take
      BeginStop(std::max(0.0, *grace), *attempt);
      return;
    }
    Json parked = Json::array();  // parked earlier and still waiting (a repeated stop)
    for (const Rank& r : ranks_) {
      if (r.parked && r.alive) parked.push_back({{"rank", r.rank}, {"pid", r.pid}});
    }
    SendStopped(*attempt, MemInventory(), parked);
    return;
  }
  if (park && !stopping_) {
    auto kill = JIntListOr(msg, "kill");
    auto timeout = JNumOr(msg, "park_timeout_s", 5);
    if (!kill.ok() || !timeout.ok()) {
      Warn("controller: dropped stop: " + (kill.ok() ? timeout.status() : kill.status()).message());
      return;
    }
    std::vector<int> k;
    for (long x : *kill) k.push_back(static_cast<int>(x));
    BeginPark(spec_->attempt, k, std::max(0.1, *timeout));
    return;
  }
  if (stopping_) {
    stop_reply_attempt_ = spec_->attempt;
    stop_deadline_ = std::min(stop_deadline_, clock_->NowMono() + std::max(0.0, *grace));
    return;
  }
  BeginStop(std::max(0.0, *grace), spec_->attempt);
}

void Agent::HandleChaos(const Json& msg) {
  auto action = JStr(msg, "action");
  auto rank = JInt(msg, "rank");
  if (!action.ok() || !rank.ok()) {
    Warn("controller: dropped chaos: " + (action.ok() ? rank.status() : action.status()).message());
    return;
  }
  Rank* r = FindRank(static_cast<int>(*rank));
  if (!r || !r->alive) {
    Warn("chaos " + *action + ": rank " + std::to_string(*rank) + " is not running on this node");
    return;
  }
  if (*action == "kill_rank") {
    IgnoreError(procs_->Signal(r->pid, SIGKILL), "the process may be gone already");
  } else if (*action == "hang_rank") {
    IgnoreError(procs_->Signal(r->pid, SIGSTOP), "the process may be gone already");
  } else if (*action == "nan_loss" || *action == "slow_rank" || *action == "slow_data" ||
             *action == "loss_spike" || *action == "sdc" || *action == "slow_link") {
    // sdc: the machine computes wrong results from now on, its compute check too.
    if (*action == "sdc") sdc_injected_ = true;
    // slow_link: the node's links are slow from now on (its link check sends at
    // kSlowLinkMiBps), and its rank waits on them as on a slow rank's work.
    if (*action == "slow_link") link_throttle_mib_s_ = kSlowLinkMiBps;
    // SDK-cooperative faults: a datagram on the rank socket (docs/protocol.md §2).
    Json m = {{"type", *action == "nan_loss"    ? std::string("inject_nan")
                       : *action == "slow_link" ? std::string("inject_slow_rank")
                                                : "inject_" + *action}};
    auto factor = JNumOr(msg, "factor", 0);
    auto delay = JNumOr(msg, "delay_s", 0);
    if (factor.ok() && *factor > 0) m["factor"] = *factor;
    if (delay.ok() && *delay > 0) m["delay_s"] = *delay;
    Status st = UnixDgramSend(dgram_.get(), RankSockPath(paths_, r->rank), m.dump());
    if (!st.ok()) Warn("chaos " + *action + ": " + st.ToString() + " (does the rank use the SDK?)");
  } else {
    Warn(
        "controller: dropped chaos: field 'action' must be kill_rank, hang_rank, nan_loss, "
        "slow_rank, slow_data, loss_spike, sdc or slow_link (got "
        "'" +
        *action + "')");
    return;
  }
  Warn("chaos: " + *action + " rank " + std::to_string(r->rank) + " (pid " +
       std::to_string(r->pid) + ")");
}

void Agent::HandleDatagram(const std::string& payload) {
  ++reports_total_;
  auto parsed = ParseJsonObject(payload, "SDK datagram");
  if (!parsed.ok()) {
    ++reports_dropped_["malformed"];
    Warn("sdk: dropped " + parsed.status().message());
    return;
  }
  const Json& m = *parsed;
  const std::string type = m["type"].get<std::string>();
  if (type == "zygote_ready") {
    auto pid = JInt(m, "pid");
    if (pid.ok() && *pid == zygote_.pid) zygote_.ready = true;
    return;
  }
  if (type == "warm_ready") {
    auto pid = JInt(m, "pid");
    for (WarmRank& w : warm_) {
      if (pid.ok() && w.pid == *pid) {
        w.ready = true;
        warm_failures_ = 0;
      }
    }
    ReportWarm();
    return;
  }
  if (type == "hello" || type == "parked") {
    auto rank = JInt(m, "rank");
    Rank* r = rank.ok() ? FindRank(static_cast<int>(*rank)) : nullptr;
    if (!r || !r->alive) {
      Warn("sdk: dropped " + type + ": " +
           (rank.ok() ? "rank " + std::to_string(*rank) + " does not run on " + opts_.node
                      : rank.status().message()));
      return;
    }
    if (type == "parked") {
      OnParked(m, *r);
      return;
    }
    const bool in_process =
        m.contains("in_process") && m["in_process"].is_boolean() && m["in_process"].get<bool>();
    const bool group = m.contains("process_group") && m["process_group"].is_boolean() &&
                       m["process_group"].get<bool>();
    // Generations that form process groups want the job's long-lived store, served by
    // slot 0's agent once a rank asks for it (MaybeStartStore).
    if (in_process && group && spec_ && spec_->group_rank == 0) store_wanted_ = true;
    if (m.contains("flops_per_token")) ForwardModel(m, *r);
    if (in_process && spec_ && !r->in_process) {
      r->in_process = true;
      Send({{"type", "rank_info"},
            {"attempt", spec_->attempt},
            {"rank", r->rank},
            {"pid", r->pid},
            {"in_process", true}});
    }
    return;
  }
  if (type == "finished") {
    auto rank = JInt(m, "rank");
    if (!rank.ok()) {
      Warn("sdk: dropped finished: " + rank.status().message());
      return;
    }
    detector_.OnFinished(static_cast<int>(*rank));
    return;
  }
  if (type == "staged") {
    auto rank = JInt(m, "rank");
    if (!rank.ok()) {
      Warn("sdk: dropped staged: " + rank.status().message());
      return;
    }
    OnStaged(m, static_cast<int>(*rank));
    return;
  }
  if (type == "model") {
    auto rank = JInt(m, "rank");
    Rank* r = rank.ok() ? FindRank(static_cast<int>(*rank)) : nullptr;
    if (r) ForwardModel(m, *r);
    return;
  }
  if (type == "digest") {  // the bitwise alignment check: to the controller, with its rank
    auto rank = JInt(m, "rank");
    auto step = JInt(m, "step");
    auto digest = JStr(m, "digest");
    auto group = JStrOr(m, "group", "");
    Status bad = !rank.ok()     ? rank.status()
                 : !step.ok()   ? step.status()
                 : !digest.ok() ? digest.status()
                                : group.status();
    if (bad.ok() && (*step < 0 || !IsDigestHex(m["digest"]))) {
      bad = InvalidArgument("digest: 'step' must be >= 0 and 'digest' 16 lowercase hex digits");
    }
    if (bad.ok() && group->size() > 64) bad = InvalidArgument("digest: 'group' over 64 bytes");
    Rank* r = bad.ok() ? FindRank(static_cast<int>(*rank)) : nullptr;
    if (!bad.ok() || !r) {
      ++reports_dropped_["malformed"];
      WarnLimited(
          "sdk: dropped digest: " +
          (bad.ok() ? "rank " + std::to_string(*rank) + " is not on this node" : bad.message()));
      return;
    }
    Json out = {{"type", "digest"},
                {"rank", *rank},
                {"step", *step},
                {"digest", *digest},
                {"attempt", spec_ ? spec_->attempt : -1}};
    if (!group->empty()) out["group"] = *group;
    Send(out);
    return;
  }
  if (type != "step" && type != "ckpt") {
    Warn("sdk: dropped datagram of unknown type '" + type + "'");
    return;
  }
  auto rank = JInt(m, "rank");
  auto step = JInt(m, "step");
  auto t = JNumOr(m, "t", clock_->NowWall());
  Json out = {{"type", type}};
  Status bad = !rank.ok() ? rank.status() : !step.ok() ? step.status() : t.status();
  double loss = 0;
  if (bad.ok() && type == "step") {
    auto l = JNum(m, "loss");
    auto tokens = JNumOr(m, "tokens", 0);
    auto step_time = JNumOr(m, "step_time", 0);
    auto stall = JNumOr(m, "ckpt_stall", 0);
    bad = !l.ok()           ? l.status()
          : !tokens.ok()    ? tokens.status()
          : !step_time.ok() ? step_time.status()
                            : stall.status();
    if (bad.ok()) {
      std::vector<std::string> refused;
      CopyStepMetrics(m, &out, &refused);
      for (const std::string& why : refused) WarnLimited("sdk step field " + why);
      if (!refused.empty()) ++reports_dropped_["bad_value"];
      loss = *l;
      out["loss"] = loss;  // NaN/Inf serialise as null
      out["tokens"] = *tokens;
      out["step_time"] = *step_time;
      out["ckpt_stall"] = *stall;
    }
  } else if (bad.ok()) {
    auto bytes = JIntOr(m, "bytes", 0);
    auto write_s = JNumOr(m, "write_s", 0);
    bad = !bytes.ok() ? bytes.status() : write_s.status();
    if (bad.ok()) {
      out["bytes"] = *bytes;
      out["write_s"] = *write_s;
    }
  }
  if (!bad.ok()) {
    Warn("sdk" + (rank.ok() ? " (rank " + std::to_string(*rank) + ")" : std::string()) +
         ": dropped " + bad.message());
    return;
  }
  Rank* r = FindRank(static_cast<int>(*rank));
  // While a stop runs, a rank's last steps (sent before it saw the stop) still count:
  // the controller keeps their losses for the replay bundle.
  if (!spec_ || !r || (stopping_ && type != "step")) {
    ++reports_dropped_["no_rank"];
    Warn("sdk: dropped " + type + " from rank " + std::to_string(*rank) +
         ": no running attempt has this rank on " + opts_.node);
    return;
  }
  out["attempt"] = spec_->attempt;
  out["rank"] = *rank;
  out["step"] = *step;
  out["t"] = *t;
  if (type != "step") {
    Send(out);
    return;
  }
  step_hist_.Observe(out["step_time"].get<double>());
  ForwardStep(*r, std::move(out));
  if (stopping_) return;  // TakeLastReports flushes what the rate limit holds back
  if (auto f = detector_.OnStep(r->rank, *step, loss, *t)) SendIncident(*f, nullptr);
}

namespace {

// Adds step report `b` into `a` (a flood coalesced): the durations and counts add up,
// the newest step, loss and time win, so the controller's ledger still covers every
// second (docs/protocol.md §2).
void MergeStep(Json& a, const Json& b) {
  // The older step's loss and digests ride along in `earlier` (the controller's loss
  // record and replay check want every step's), at most kMaxEarlierSteps of them.
  constexpr size_t kMaxEarlierSteps = 64;
  if (a.contains("step") && (!a.contains("earlier") || a["earlier"].size() < kMaxEarlierSteps)) {
    Json e = {{"step", a["step"]}, {"loss", a.contains("loss") ? a["loss"] : Json()}};
    for (const char* k : {"rng", "data", "sums"}) {
      if (a.contains(k)) e[k] = a[k];
    }
    a["earlier"].push_back(std::move(e));
  }
  for (const char* k : {"step_time", "ckpt_stall", "tokens", "samples", "data_wait", "compute",
                        "optimizer", "busy"}) {
    if (b.contains(k)) a[k] = (a.contains(k) ? a[k].get<double>() : 0.0) + b[k].get<double>();
  }
  for (const char* k : {"step", "loss", "t", "lr", "grad_norm", "attempt", "inferred"}) {
    if (b.contains(k)) a[k] = b[k];
  }
  // The digests belong to the newest step, like its loss; an older step's must not
  // stand for it.
  for (const char* k : {"rng", "data", "sums"}) {
    if (b.contains(k)) {
      a[k] = b[k];
    } else {
      a.erase(k);
    }
  }
  a["coalesced"] = a.value("coalesced", 1) + 1;
}

}  // namespace

void Agent::ForwardStep(Rank& r, Json out) {
  // At most kMaxStepForwardHz reports per rank reach the controller; faster ones are
  // merged into the next (a trainer reporting sub-millisecond steps, or a flood).
  constexpr double kMinGapS = 1.0 / kMaxStepForwardHz;
  const double now = clock_->NowMono();
  if (!r.step_pending.is_null()) {
    MergeStep(r.step_pending, out);
    out = std::move(r.step_pending);
    r.step_pending = Json();
  }
  if (r.step_forwarded_at >= 0 && now - r.step_forwarded_at < kMinGapS) {
    ++reports_dropped_["flood"];
    r.step_pending = std::move(out);
    return;
  }
  r.step_forwarded_at = now;
  Send(out);
}

void Agent::FlushStep(Rank& r) {
  if (r.step_pending.is_null()) return;
  r.step_forwarded_at = clock_->NowMono();
  Send(r.step_pending);
  r.step_pending = Json();
}

void Agent::TakeLastReports() {
  for (const auto& d : UnixDgramRecvAll(dgram_.get())) HandleDatagram(d);
  for (Rank& r : ranks_) FlushStep(r);
}

void Agent::FlushPendingSteps() {
  for (Rank& r : ranks_) {
    if (r.step_pending.is_null()) continue;
    const double since = clock_->NowMono() - r.step_forwarded_at;
    if (r.step_forwarded_at >= 0 && since < 1.0 / kMaxStepForwardHz) continue;
    r.step_forwarded_at = clock_->NowMono();
    Send(r.step_pending);
    r.step_pending = Json();
  }
}

void Agent::ForwardModel(const Json& m, const Rank& r) {
  // (operator[] of a const object must not be given a missing key: undefined behaviour.)
  const Json f = m.contains("flops_per_token") ? m["flops_per_token"] : Json();
  if (!f.is_number() || !std::isfinite(f.get<double>()) || f.get<double>() <= 0 ||
      f.get<double>() > 1e18) {
    WarnLimited("sdk model: flops_per_token must be a number in (0, 1e18] (got " + f.dump() + ")");
    return;
  }
  if (!spec_) return;
  Send({{"type", "model"},
        {"attempt", spec_->attempt},
        {"rank", r.rank},
        {"flops_per_token", f.get<double>()}});
}

void Agent::WarnLimited(const std::string& msg) {
  // One warning per distinct message prefix (up to the first ':' or '(') per minute, so
  // a trainer sending bad values every step costs one line a minute.
  const std::string key = msg.substr(0, msg.find_first_of(":("));
  const double now = clock_->NowMono();
  auto [it, fresh] = warned_at_.emplace(key, now);
  if (!fresh && now - it->second < 60) return;
  it->second = now;
  if (warned_at_.size() > 256) warned_at_.clear();
  Warn(msg + " (dropped; repeats of this warning are silenced for 60 s)");
}

void Agent::EnsurePersister(const StartSpec& spec) {
  if (spec.memory_slots <= 0) {
    persister_.reset();
    return;
  }
  const std::string key =
      spec.ckpt_dir + "|" + spec.shared_dir + "|" + std::to_string(spec.world_size) + "|" +
      spec.object_store + "|" + std::to_string(spec.object_interval_steps) + "|" + spec.peer_host +
      ":" + std::to_string(spec.peer_port) + "|" + std::to_string(spec.peer_push_share);
  if (persister_ && key == persister_key_) return;
  persister_.reset();
  ckpt::PersistConfig pc;
  pc.staging_dir = paths_.staging_dir;
  pc.disk_dir = spec.ckpt_dir;
  pc.shared_dir = spec.shared_dir;
  pc.world = spec.world_size;
  pc.peer_host = spec.peer_host;
  pc.peer_port = spec.peer_host.empty() ? 0 : spec.peer_port;
  pc.peer_push_share = spec.peer_push_share;
  if (!spec.object_store.empty()) {
    if (!object_ || object_url_ != spec.object_store) {
      auto ot = ckpt::ObjectTier::OpenUrl(spec.object_store);
      if (ot.ok()) {
        object_ = std::move(*ot);
        object_url_ = spec.object_store;
      } else {
        object_.reset();
        Warn("object tier " + spec.object_store +
             " unusable, not uploading: " + ot.status().ToString());
      }
    }
    if (object_) {
      ckpt::ObjectTier* ot = object_.get();
      pc.object_upload = [ot](const std::string& root, long step, int rank, int world) {
        return ot->UploadShard(root, step, rank, world);
      };
      pc.object_newest = [ot](long max_step) { return ot->NewestCommitted(max_step); };
      pc.object_interval = spec.object_interval_steps;
    }
  }
  persister_key_ = key;
  persister_ = std::make_unique<ckpt::Persister>(
      pc, ckpt::Env::Default(), [this](const ckpt::PersistEvent& e) {
        if (e.tier == "peer") {  // pushes are best effort: warn, rate-limited
          if (e.status.ok()) return;
          const double now = SystemClock::Get()->NowMono();
          std::lock_guard<std::mutex> l(outbox_mu_);
          if (now < next_peer_warn_) return;
          next_peer_warn_ = now + 30;
          Warn("peer replication of rank " + std::to_string(e.rank) + " step " +
               std::to_string(e.step) + " failed (repeats muted for 30 s): " + e.status.ToString());
          return;
        }
        Json m = {{"type", "ckpt"},     {"rank", e.rank},
                  {"step", e.step},     {"tier", e.tier},
                  {"bytes", e.bytes},   {"write_s", e.seconds},
                  {"hash_s", e.hash_s}, {"t", SystemClock::Get()->NowWall()}};
        if (e.superseded_by >= 0) {
          m["superseded_by"] = e.superseded_by;  // not a failure: no warning, no error
        } else if (!e.status.ok()) {
          m["error"] = e.status.ToString();
        }
        std::lock_guard<std::mutex> l(outbox_mu_);
        outbox_.push_back(std::move(m));
      });
}

void Agent::OnStaged(const Json& m, int rank) {
  auto step = JInt(m, "step");
  auto slot = JInt(m, "slot");
  auto seq = JInt(m, "seq");
  bool persist = m.contains("persist") && m["persist"].is_boolean() && m["persist"].get<bool>();
  Status bad = !step.ok() ? step.status() : !slot.ok() ? slot.status() : seq.status();
  if (!bad.ok()) {
    Warn("sdk (rank " + std::to_string(rank) + "): dropped staged: " + bad.message());
    return;
  }
  if (!spec_ || !FindRank(rank) || !persister_) {
    Warn("sdk: dropped staged from rank " + std::to_string(rank) +
         ": no running attempt with a memory tier has this rank on " + opts_.node);
    return;
  }
  const long every = spec_->cadence_steps;
  if (every > 0 && *step >= spec_->cadence_from_step && *step % every == 0) persist = true;
  auto gen = JIntOr(m, "generation", 0);
  persister_->OnStaged(rank, static_cast<int>(*slot), static_cast<uint64_t>(*seq),
                       gen.ok() ? static_cast<uint64_t>(*gen) : 0, *step, persist);
}

Agent::MemInventory Agent::MemoryInventory(const StartSpec& spec) {
  MemInventory out;
  if (!persister_) return out;
  std::vector<int> ranks;
  for (int i = 0; i < spec.nproc_per_node; ++i) ranks.push_back(spec.GlobalRank(i));
  for (const auto& [rank, steps] : persister_->Inventory(ranks)) {
    out.steps[std::to_string(rank)] = steps;
  }
  for (const auto& [rank, steps] : persister_->Portable(ranks)) {
    Json row = Json::object();
    for (const auto& [step, digest] : steps) row[std::to_string(step)] = DigestHex(digest);
    out.portable[std::to_string(rank)] = std::move(row);
  }
  return out;
}

void Agent::DrainOutbox() {
  std::vector<Json> msgs;
  {
    std::lock_guard<std::mutex> l(outbox_mu_);
    msgs.swap(outbox_);
  }
  for (Json& m : msgs) {
    if (spec_) m["attempt"] = spec_->attempt;
    if (m.contains("error") && m["type"] != "diagnosis") {
      Warn("checkpoint: " + m["error"].get<std::string>());
    }
    Send(m);
  }
}

}  // namespace bulwark
