#include "agent/agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "common/json_util.h"
#include "common/proc.h"

namespace bulwark {
namespace {

constexpr double kPollS = 0.05;

volatile std::sig_atomic_t g_term_signal = 0;

void Warn(const std::string& msg) { std::cerr << "bulwark-agent: " << msg << std::endl; }

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("cannot create directory " + dir + ": " + ec.message());
  return Status::Ok();
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

void Agent::RequestTermination(int sig) { g_term_signal = sig; }

Agent::Agent(AgentOptions opts, const Clock* clock)
    : opts_(std::move(opts)), clock_(clock), detector_(clock) {}

Agent::~Agent() {
  StopAllBlocking();
  CloseRanks();
  persister_.reset();
  if (!paths_.staging_dir.empty()) (void)ckpt::RemoveTree(ckpt::Env::Default(), paths_.staging_dir);
}

Status Agent::Setup() {
  if (opts_.run_dir.empty()) return InvalidArgument("--run-dir is required");
  paths_.node = opts_.node;
  paths_.node_dir = opts_.run_dir + "/" + opts_.node;
  paths_.agent_sock = paths_.node_dir + "/agent.sock";
  paths_.python_dir = opts_.python_dir;
  paths_.lib_path = opts_.lib_path;
  BW_RETURN_IF_ERROR(MakeDirs(paths_.node_dir));
  // The memory tier lives on tmpfs; the agent owns the directory and removes it.
  struct stat shm;
  if (::stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode)) {
    paths_.staging_dir = "/dev/shm/bulwark-" +
                         std::to_string(std::hash<std::string>()(opts_.run_dir) % 1000000007) +
                         "-" + opts_.node;
  } else {
    paths_.staging_dir = paths_.node_dir + "/staging";
  }
  BW_RETURN_IF_ERROR(MakeDirs(paths_.staging_dir));
  // Rank sockets are the longest paths under node_dir: check the worst case up front.
  std::string longest = paths_.node_dir + "/rank-9999999.sock";
  if (longest.size() >= 108) {
    return InvalidArgument("--run-dir '" + opts_.run_dir + "' is too long: socket paths like " +
                           longest + " exceed 107 bytes; use a shorter run directory");
  }
  BW_ASSIGN_OR_RETURN(dgram_, UnixDgramBind(paths_.agent_sock));
  (void)BecomeSubreaper();  // orphaned rank descendants come back to us for reaping
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
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!conn_) {
    return Unavailable("cannot reach the controller at " + opts_.controller_host + ":" +
                       std::to_string(opts_.controller_port) + " within " +
                       std::to_string(opts_.connect_timeout_s) + " s: " + last.ToString());
  }
  Send({{"type", "hello"}, {"node", opts_.node}, {"pid", getpid()}, {"host", HostName()}});
  return Status::Ok();
}

int Agent::Run() {
  Status st = Setup();
  if (!st.ok()) {
    Warn(st.ToString());
    return kAgentExitSetupFailed;
  }
  while (true) {
    if (g_term_signal) {
      Warn("received " + SignalName(g_term_signal) + "; stopping all ranks");
      StopAllBlocking();
      (void)conn_->Flush(1);
      return kAgentExitOk;
    }
    std::vector<int> fds = {conn_->fd(), dgram_.get()};
    for (const Rank& r : ranks_) {
      if (r.out.valid()) fds.push_back(r.out.get());
    }
    PollReadable(fds, kPollS);
    std::vector<std::string> bad;
    for (const Json& m : conn_->Read(&bad)) HandleController(m);
    for (const auto& b : bad) Warn("controller: dropped message: " + b);
    if (conn_->closed()) {
      Warn("controller connection closed; stopping all ranks and exiting");
      StopAllBlocking();
      return kAgentExitControllerLost;
    }
    for (const auto& d : UnixDgramRecvAll(dgram_.get())) HandleDatagram(d);
    for (Rank& r : ranks_) PumpOutput(r, false);
    ReapRanks();
    AdvanceStop();
    CheckHangs();
    MaybeHeartbeat();
    DrainOutbox();
    if (conn_->HasPendingOutput()) (void)conn_->Flush(0);
    if (shutdown_requested_ && ranks_.empty() && !stopping_) {
      (void)conn_->Flush(2);
      return kAgentExitOk;
    }
  }
}

void Agent::Send(const Json& msg) {
  if (!conn_ || conn_->closed()) return;
  Status st = conn_->Send(msg);
  if (!st.ok()) Warn("send to controller failed: " + st.ToString());
}

void Agent::MaybeHeartbeat(bool force) {
  const double now = clock_->NowMono();
  if (!force && now < next_heartbeat_) return;
  next_heartbeat_ = now + opts_.heartbeat_interval_s;
  Send({{"type", "heartbeat"},
        {"node", opts_.node},
        {"t", clock_->NowWall()},
        {"attempt", spec_ ? spec_->attempt : -1},
        {"ranks_alive", RanksAlive()}});
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
  } else if (type == "capture_stacks") {
    HandleCaptureStacks(msg);
  } else if (type == "shutdown") {
    shutdown_requested_ = true;
    pending_start_.reset();
    if (!ranks_.empty() && !stopping_) BeginStop(spec_ ? spec_->stop_grace_s : 5, -1);
  } else {
    Warn("controller: dropped message of unknown type '" + type + "'");
  }
}

void Agent::HandleStart(const Json& msg) {
  auto spec = ParseStartMessage(msg);
  if (!spec.ok()) {
    Warn("controller: dropped start: " + spec.status().message());
    return;
  }
  if (shutdown_requested_) return;
  if (!ranks_.empty()) {  // a new start first stops the old attempt
    pending_start_ = std::move(spec).value();
    if (!stopping_) BeginStop(spec_->stop_grace_s, spec_->attempt);
    return;
  }
  Launch(*spec);
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
  const bool ours = spec_ && (*attempt < 0 || *attempt == spec_->attempt);
  if (!ours || ranks_.empty()) {
    Send({{"type", "stopped"}, {"attempt", *attempt}});
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
    ::kill(r->pid, SIGKILL);
  } else if (*action == "hang_rank") {
    ::kill(r->pid, SIGSTOP);
  } else if (*action == "nan_loss") {
    Status st = UnixDgramSend(dgram_.get(), RankSockPath(paths_, r->rank),
                              Json{{"type", "inject_nan"}}.dump());
    if (!st.ok()) Warn("chaos nan_loss: " + st.ToString() + " (does the rank use the SDK?)");
  } else {
    Warn(
        "controller: dropped chaos: field 'action' must be kill_rank, hang_rank or nan_loss (got "
        "'" +
        *action + "')");
    return;
  }
  Warn("chaos: " + *action + " rank " + std::to_string(r->rank) + " (pid " +
       std::to_string(r->pid) + ")");
}

void Agent::HandleDatagram(const std::string& payload) {
  auto parsed = ParseJsonObject(payload, "SDK datagram");
  if (!parsed.ok()) {
    Warn("sdk: dropped " + parsed.status().message());
    return;
  }
  const Json& m = *parsed;
  const std::string type = m["type"].get<std::string>();
  if (type == "hello") return;  // the SDK is attached; nothing to do yet
  if (type == "staged") {
    auto rank = JInt(m, "rank");
    if (!rank.ok()) {
      Warn("sdk: dropped staged: " + rank.status().message());
      return;
    }
    OnStaged(m, static_cast<int>(*rank));
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
  if (!spec_ || !r || stopping_) {
    Warn("sdk: dropped " + type + " from rank " + std::to_string(*rank) +
         ": no running attempt has this rank on " + opts_.node);
    return;
  }
  out["attempt"] = spec_->attempt;
  out["rank"] = *rank;
  out["step"] = *step;
  out["t"] = *t;
  Send(out);
  if (type == "step") {
    if (auto f = detector_.OnStep(r->rank, *step, loss, *t)) SendIncident(*f, nullptr);
  }
}

void Agent::EnsurePersister(const StartSpec& spec) {
  if (spec.memory_slots <= 0) {
    persister_.reset();
    return;
  }
  const std::string key = spec.ckpt_dir + "|" + spec.shared_dir + "|" + std::to_string(spec.world_size);
  if (persister_ && key == persister_key_) return;
  persister_.reset();
  ckpt::PersistConfig pc;
  pc.staging_dir = paths_.staging_dir;
  pc.disk_dir = spec.ckpt_dir;
  pc.shared_dir = spec.shared_dir;
  pc.world = spec.world_size;
  persister_key_ = key;
  persister_ = std::make_unique<ckpt::Persister>(pc, ckpt::Env::Default(),
                                                 [this](const ckpt::PersistEvent& e) {
    Json m = {{"type", "ckpt"},   {"rank", e.rank},       {"step", e.step},
              {"tier", e.tier},   {"bytes", e.bytes},     {"write_s", e.seconds},
              {"hash_s", e.hash_s}, {"t", SystemClock::Get()->NowWall()}};
    if (!e.status.ok()) m["error"] = e.status.ToString();
    std::lock_guard<std::mutex> l(outbox_mu_);
    outbox_.push_back(std::move(m));
  });
}

void Agent::OnStaged(const Json& m, int rank) {
  auto step = JInt(m, "step");
  auto slot = JInt(m, "slot");
  auto seq = JInt(m, "seq");
  auto persist = m.contains("persist") && m["persist"].is_boolean() && m["persist"].get<bool>();
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
  auto gen = JIntOr(m, "generation", 0);
  persister_->OnStaged(rank, static_cast<int>(*slot), static_cast<uint64_t>(*seq),
                       gen.ok() ? static_cast<uint64_t>(*gen) : 0, *step, persist);
}

Json Agent::MemoryInventory(const StartSpec& spec) {
  Json out = Json::object();
  if (!persister_) return out;
  std::vector<int> ranks;
  for (int i = 0; i < spec.nproc_per_node; ++i) ranks.push_back(spec.GlobalRank(i));
  for (const auto& [rank, steps] : persister_->Inventory(ranks)) out[std::to_string(rank)] = steps;
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
    if (m.contains("error")) Warn("checkpoint: " + m["error"].get<std::string>());
    Send(m);
  }
}

}  // namespace bulwark
