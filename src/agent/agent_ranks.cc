// Agent: rank lifecycle (launch, output, exits, stop) and incident reporting.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "agent/agent.h"
#include "agent/agent_internal.h"
#include "common/json_util.h"
#include "common/proc.h"

namespace bulwark {
namespace {
constexpr double kFinalPersistTimeoutS = 120;
}  // namespace

namespace {

constexpr size_t kTailLines = 30;
constexpr size_t kMaxLineBytes = 64 * 1024;  // longer output without '\n' is split
constexpr double kKillWaitS = 5;

using agent_internal::Warn;

std::string WallStamp(double wall) {
  time_t secs = static_cast<time_t>(wall);
  char buf[64];
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

void Agent::Launch(const StartSpec& spec) {
  SetWarmSpec(spec, spec.warm_ranks);
  if (WaitForZygote(spec)) return;  // MaybeLaunchAfterZygote launches it
  spec_ = spec;
  outcomes_.clear();
  EnsurePersister(spec);
  if (persister_) persister_->PausePushes(false);  // paused since the last stop
  stopping_ = false;
  stop_killed_ = false;
  std::error_code ec;
  std::filesystem::create_directories(spec.log_dir + "/stacks", ec);
  if (ec) Warn("cannot create " + spec.log_dir + "/stacks: " + ec.message());
  const auto base_env = CurrentEnv();
  Json started = Json::array();
  std::vector<int> monitored;
  std::vector<std::pair<int, std::string>> failures;
  std::vector<Rank> next;
  for (int i = 0; i < spec.nproc_per_node; ++i) {
    Rank r;
    std::string why;
    if (!StartRank(spec, i, base_env, &r, &why)) {
      failures.emplace_back(spec.GlobalRank(i), why);
      if (r.log) std::fprintf(r.log, "bulwark: spawn failed: %s\n", why.c_str());
      if (r.log) std::fclose(r.log);
      continue;
    }
    r.launched_mono = clock_->NowMono();
    started.push_back({{"rank", r.rank},
                       {"local_rank", i},
                       {"pid", r.pid},
                       {"pgid", r.pgid},
                       {"how", r.how},
                       {"in_process", r.in_process}});
    monitored.push_back(r.rank);
    next.push_back(std::move(r));
  }
  // Parked ranks this attempt has no place for (the world changed shape): killed.
  for (Rank& old : ranks_) {
    if (!old.alive) continue;
    Warn("rank " + std::to_string(old.rank) + " (pid " + std::to_string(old.pid) +
         ") has no place in attempt " + std::to_string(spec.attempt) + "; stopping it");
    IgnoreError(procs_->SignalGroup(old.pgid, SIGKILL), "the process may be gone already");
    old.retired = true;
    old.parked = false;
    next.push_back(std::move(old));
  }
  ranks_ = std::move(next);
  DetectorConfig cfg;
  cfg.hang_floor_s = spec.hang_floor_s;
  cfg.hang_multiplier = spec.hang_multiplier;
  cfg.startup_timeout_s = spec.startup_timeout_s;
  detector_.StartAttempt(spec.attempt, cfg, monitored);
  Send({{"type", "started"}, {"attempt", spec.attempt}, {"ranks", started}});
  for (const auto& [rank, why] : failures) {
    const double now = clock_->NowWall();
    Send({{"type", "incident"},
          {"attempt", spec.attempt},
          {"kind", "crash"},
          {"subtype", "spawn_failed"},
          {"rank", rank},
          {"step", -1},
          {"fault_time", now},
          {"detect_time", now},
          {"detail", "rank " + std::to_string(rank) + " could not start: " + why},
          {"log_tail", ""},
          {"node", opts_.node}});
  }
}

bool Agent::StartRank(const StartSpec& spec, int local,
                      const std::map<std::string, std::string>& base, Rank* r, std::string* why) {
  const int rank = spec.GlobalRank(local);
  // The parked process of this local rank joins the new generation. Matched by local
  // rank (its device binding): after an elastic resize its global rank may change.
  for (auto it = ranks_.begin(); it != ranks_.end(); ++it) {
    if (it->local_rank != local || !it->alive || !it->parked || it->retired) continue;
    Rank kept = std::move(*it);
    ranks_.erase(it);
    if (kept.version != spec.version) {  // it runs the code before an update: replaced
      IgnoreError(procs_->SignalGroup(kept.pgid, SIGKILL), "the process may be gone already");
      kept.retired = true;
      ranks_.push_back(std::move(kept));
      break;
    }
    kept.local_rank = local;
    kept.stack_file = StackFilePath(spec, rank);
    if (SendGeneration(spec, local, kept)) {
      kept.parked = false;
      kept.how = "kept";
      const int was = kept.rank;
      kept.rank = rank;   // its socket moves with it once it re-initialises
      if (was != rank) {  // the world resized: the log follows the rank number
        if (kept.log) std::fclose(kept.log);
        kept.log = std::fopen(RankLogPath(spec, rank).c_str(), "a");
      }
      if (kept.log) {
        std::fprintf(kept.log,
                     "===== bulwark attempt %d, rank %d on %s: same process (pid %d%s), %s =====\n",
                     spec.attempt, rank, opts_.node.c_str(), kept.pid,
                     was == rank ? "" : (", was rank " + std::to_string(was)).c_str(),
                     WallStamp(clock_->NowWall()).c_str());
        std::fflush(kept.log);
      }
      *r = std::move(kept);
      return true;
    }
    Warn("rank " + std::to_string(rank) + " (pid " + std::to_string(kept.pid) +
         ") could not be told its generation; replacing it");
    IgnoreError(procs_->SignalGroup(kept.pgid, SIGKILL), "the process may be gone already");
    kept.retired = true;
    ranks_.push_back(std::move(kept));  // reaped by the loop
    break;
  }
  r->rank = rank;
  r->local_rank = local;
  r->version = spec.version;
  r->stack_file = StackFilePath(spec, rank);
  r->log = std::fopen(RankLogPath(spec, rank).c_str(), "a");
  if (!r->log) Warn("cannot open " + RankLogPath(spec, rank) + ": " + std::strerror(errno));
  const auto env = BuildRankEnv(spec, local, paths_, base);
  if (std::optional<WarmRank> w = TakeWarm()) {
    const pid_t pid = w->pid;
    Status st = AssignWarm(*w, spec, env);
    if (st.ok()) {
      r->pid = w->pid;
      r->pgid = w->pgid;
      r->out = std::move(w->out);
      r->partial = std::move(w->partial);
      r->alive = true;
      r->how = "warm";
    } else {
      Warn("warm rank (pid " + std::to_string(pid) + ") could not take rank " +
           std::to_string(rank) + ": " + st.ToString() + "; spawning a new process");
      KillHelper(w->pid, w->pgid);
    }
  }
  if (!r->alive) {
    SpawnOptions so;
    so.argv = spec.command;
    so.env = env;
    so.workdir = spec.workdir;
    auto child = procs_->Spawn(so);
    if (!child.ok()) {
      *why = child.status().message();
      return false;
    }
    r->pid = child->pid;
    r->pgid = child->pgid;
    r->out = std::move(child->output);
    r->alive = true;
    r->how = "spawned";
  }
  if (r->log) {
    std::fprintf(r->log, "===== bulwark attempt %d, rank %d on %s, started %s (%s, pid %d) =====\n",
                 spec.attempt, rank, opts_.node.c_str(), WallStamp(clock_->NowWall()).c_str(),
                 r->how.c_str(), r->pid);
    std::fflush(r->log);
  }
  return true;
}

void Agent::PumpOutput(Rank& r, bool final) {
  if (!r.out.valid()) return;
  bool eof = false;
  std::string data = ReadAvailable(r.out.get(), &eof);
  if (!data.empty()) {
    r.partial += data;
    size_t pos = 0;
    while (true) {
      size_t nl = r.partial.find('\n', pos);
      if (nl == std::string::npos) break;
      EmitLine(r, r.partial.substr(pos, nl - pos));
      pos = nl + 1;
    }
    r.partial.erase(0, pos);
    if (r.partial.size() > kMaxLineBytes) {
      EmitLine(r, r.partial);
      r.partial.clear();
    }
    if (r.log) std::fflush(r.log);
    std::fflush(stdout);
  }
  if (eof || final) {
    if (!r.partial.empty()) EmitLine(r, r.partial);
    r.partial.clear();
    if (eof) r.out.Reset();
    if (r.log) std::fflush(r.log);
    std::fflush(stdout);
  }
}

void Agent::EmitLine(Rank& r, const std::string& raw) {
  std::string line = raw;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (r.log) std::fprintf(r.log, "%s\n", line.c_str());
  std::fprintf(stdout, "[%s/%d] %s\n", opts_.node.c_str(), r.rank, line.c_str());
  r.tail.push_back(line);
  while (r.tail.size() > kTailLines) r.tail.pop_front();
  if (auto f = detector_.OnLogLine(r.rank, line)) SendIncident(*f, nullptr);
}

std::string Agent::LogTail(const Rank& r) const {
  std::string s;
  for (const auto& l : r.tail) s += l + "\n";
  return s;
}

void Agent::ReapRanks() {
  std::set<pid_t> tracked;
  ReapHelpers(&tracked);
  for (Rank& r : ranks_) {
    if (!r.alive) continue;
    if (auto e = procs_->Reap(r.pid)) {
      OnRankExit(r, *e);
    } else {
      tracked.insert(r.pid);
    }
  }
  // Orphaned descendants reparented to us (we are a subreaper): reap them too, never
  // a tracked rank (its owner reads its exit status).
  procs_->ReapOrphans(tracked);
}

void Agent::OnRankExit(Rank& r, const ExitInfo& e) {
  r.alive = false;
  PumpOutput(r, true);  // the last lines (a traceback) belong in the log tail
  if (r.log) {
    std::fprintf(r.log, "===== bulwark: rank %d exited: %s =====\n", r.rank, e.Describe().c_str());
    std::fflush(r.log);
  }
  if (r.retired || stopping_ || !spec_) return;
  Warn("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) +
       ") exited: " + e.Describe());
  if (auto f = detector_.OnExit(r.rank, e)) {
    SendIncident(*f, nullptr);
  } else if (e.ok()) {
    // The rank's last checkpoints must be durable (and reported) before the
    // controller can call the job done; its last `staged` report may still be queued.
    // `exited` goes out once the persister is idle (ReportExits), while the loop keeps
    // heartbeating: a final persist may take long, and blocking here once cost the
    // node its heartbeats.
    for (const auto& d : UnixDgramRecvAll(dgram_.get())) HandleDatagram(d);
    r.exit_pending = true;
    r.exit_deadline = clock_->NowMono() + kFinalPersistTimeoutS;
  }
}

void Agent::ReportExits() {
  if (!spec_) return;
  bool idle = true;
  bool asked = false;
  for (Rank& r : ranks_) {
    if (!r.exit_pending) continue;
    if (!asked) {
      idle = !persister_ || persister_->Drain(0);
      asked = true;
    }
    const bool late = clock_->NowMono() >= r.exit_deadline;
    if (!idle && !late) continue;
    if (!idle) {
      Warn("checkpoint persist still running " + std::to_string(kFinalPersistTimeoutS) +
           " s after rank " + std::to_string(r.rank) +
           " exited; its last checkpoint may not commit");
    }
    DrainOutbox();
    r.exit_pending = false;
    FlushStep(r);  // its last step, held back by the rate limit, goes first
    Send({{"type", "exited"}, {"attempt", spec_->attempt}, {"rank", r.rank}, {"code", 0}});
  }
}

void Agent::CheckHangs() {
  if (stopping_ || !spec_) return;
  auto f = detector_.CheckHangs();
  if (!f) return;
  std::vector<int> stopped;
  Json js = CaptureAllStacks(&stopped);
  // Which rank is the culprit is decided job-wide by the controller
  // (controller/hang_localiser.h) from every agent's stacks and stopped ranks.
  f->stopped_ranks = stopped;
  if (!stopped.empty()) f->detail += "; stopped (SIGSTOP) rank(s):";
  for (int r : stopped) f->detail += " " + std::to_string(r);
  Warn("hang detected: " + f->detail);
  SendIncident(*f, js);
}

Json Agent::CaptureAllStacks(std::vector<int>* stopped) {
  std::vector<StackTarget> targets;
  for (const Rank& r : ranks_) {
    if (r.alive) targets.push_back({r.rank, r.pid, r.stack_file});
  }
  auto stacks = CaptureStacks(targets, opts_.stacks, clock_, [this] {
    MaybeHeartbeat();
    if (conn_ && conn_->HasPendingOutput()) {
      IgnoreError(conn_->Flush(0),
                  "best effort before the connection goes; an unsent message is the peer's loss");
    }
  });
  Json js = Json::object();
  for (const auto& [rank, st] : stacks) {
    js[std::to_string(rank)] = st.text;
    if (st.state == 'T') stopped->push_back(rank);
  }
  return js;
}

void Agent::HandleCaptureStacks(const Json& msg) {
  auto attempt = JInt(msg, "attempt");
  if (!attempt.ok()) {
    Warn("controller: dropped capture_stacks: " + attempt.status().message());
    return;
  }
  if (!spec_ || stopping_ || *attempt != spec_->attempt) {
    Send({{"type", "stacks"},
          {"attempt", *attempt},
          {"stacks", Json::object()},
          {"stopped", Json::array()}});
    return;
  }
  std::vector<int> stopped;
  Json js = CaptureAllStacks(&stopped);
  Send({{"type", "stacks"},
        {"attempt", *attempt},
        {"stacks", js},
        {"stopped", stopped},
        {"node", opts_.node}});
}

void Agent::SendIncident(const DetectedFault& f, const Json& stacks) {
  if (!spec_) return;
  // The steps before the fault first: the controller's record of them (the replay
  // bundle's losses) must not miss the ones the rate limit held back.
  for (Rank& r : ranks_) FlushStep(r);
  if (f.subtype != "xid" && f.subtype != "ecc_dbe") ++faults_detected_[FaultKindName(f.kind)];
  Rank* r = FindRank(f.rank);
  Json m = {{"type", "incident"},
            {"attempt", spec_->attempt},
            {"kind", FaultKindName(f.kind)},
            {"subtype", f.subtype},
            {"rank", f.rank},
            {"step", f.step},
            {"fault_time", f.fault_time},
            {"detect_time", f.detect_time},
            {"detail", f.detail},
            {"log_tail", r ? LogTail(*r) : ""},
            {"node", opts_.node}};
  if (stacks.is_object()) m["stacks"] = stacks;
  if (!f.stalled_ranks.empty()) m["ranks"] = f.stalled_ranks;
  if (f.kind == FaultKind::kHang) m["stopped"] = f.stopped_ranks;
  Send(m);
}

void Agent::BeginStop(double grace_s, long reply_attempt) {
  for (Rank& r : ranks_) FlushStep(r);  // the steps before the stop, for the loss record
  detector_.Disarm();
  if (persister_) persister_->PausePushes(true);  // the replicas the stop reports stay
  stopping_ = true;
  stop_killed_ = false;
  stop_reply_attempt_ = reply_attempt;
  for (Rank& r : ranks_) {
    IgnoreError(procs_->SignalGroup(r.pgid, SIGTERM), "the process may be gone already");
    IgnoreError(procs_->SignalGroup(r.pgid, SIGCONT),
                "the process may be gone already");  // a stopped rank must run to see SIGTERM
  }
  stop_deadline_ = clock_->NowMono() + grace_s;
}

void Agent::AdvanceStop() {
  if (!stopping_) return;
  if (parking_) {
    AdvancePark();
    return;
  }
  const double now = clock_->NowMono();
  if (RanksAlive() == 0 && !stop_killed_) {  // every leader is gone: no grace for stragglers
    for (Rank& r : ranks_) {
      IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL), "the process may be gone already");
    }
    stop_killed_ = true;
    stop_deadline_ = now + kKillWaitS;
  }
  bool groups_alive = false;
  for (const Rank& r : ranks_) groups_alive = groups_alive || procs_->GroupAlive(r.pgid);
  if (RanksAlive() > 0 || groups_alive) {
    if (!stop_killed_ && now >= stop_deadline_) {
      for (Rank& r : ranks_) {
        IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL), "the process may be gone already");
      }
      stop_killed_ = true;
      stop_deadline_ = now + kKillWaitS;
      return;
    }
    if (!(stop_killed_ && now >= stop_deadline_)) return;  // reaping continues in the loop
    Warn("rank processes survived SIGKILL for " + std::to_string(kKillWaitS) +
         " s; giving up on them");
  }
  FinishStop();
}

void Agent::FinishStop() {
  TakeLastReports();
  for (Rank& r : ranks_) {
    IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL),
                "the process may be gone already");  // stragglers in the groups
  }
  CloseRanks();
  stopping_ = false;
  const long reply = stop_reply_attempt_;
  stop_reply_attempt_ = -1;
  MemInventory mem = spec_ ? MemoryInventory(*spec_) : MemInventory();
  DrainOutbox();
  spec_.reset();
  outcomes_.clear();
  if (reply >= 0) {
    SendStopped(reply, std::move(mem));
  }
  timers_.Disarm("park");  // a park turned into a stop (shutdown) leaves none armed
  timers_.Disarm("park_kill");
  LaunchPendingStart();
}

void Agent::LaunchPendingStart() {
  if (!pending_start_ || shutdown_requested_) return;
  StartSpec next = std::move(*pending_start_);
  pending_start_.reset();
  FetchThenLaunch(next);
}

void Agent::StopAllBlocking() {
  KillWarm();
  if (ranks_.empty()) return;
  pending_start_.reset();
  if (parking_) {  // everything goes now, parked or not
    parking_ = false;
    stopping_ = false;
  }
  if (!stopping_) BeginStop(spec_ ? spec_->stop_grace_s : 5, spec_ ? spec_->attempt : -1);
  while (stopping_) {
    std::vector<int> fds;
    for (const Rank& r : ranks_) {
      if (r.out.valid()) fds.push_back(r.out.get());
    }
    clock_->WaitReadable(fds, 0.02);
    for (Rank& r : ranks_) PumpOutput(r, false);
    ReapRanks();
    AdvanceStop();
  }
  if (conn_ && !conn_->closed()) {
    IgnoreError(conn_->Flush(1),
                "best effort before the connection goes; an unsent message is the peer's loss");
  }
}

void Agent::CloseRanks() {
  for (Rank& r : ranks_) {
    PumpOutput(r, true);
    if (r.alive) {  // only reachable if SIGKILL did not take: never block forever
      if (auto e = procs_->Reap(r.pid)) r.alive = false;
    }
    if (r.log) std::fclose(r.log);
    r.log = nullptr;
  }
  ranks_.clear();
}

}  // namespace bulwark
