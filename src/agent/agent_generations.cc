// Agent: in-process recovery. Parking the survivors of a fault and handing them the
// next generation.
//
// PROTOCOL (docs/protocol.md sections 1 and 2; docs/agent.md, "Generations")
//   1. The controller sends `stop` {attempt, park: true, kill: [ranks], park_timeout_s}.
//      The agent kills the ranks in `kill` (the culprits: a hung rank, a rank that
//      logged a fatal error) and every rank that did not declare in-process recovery
//      (SDK hello `in_process`), and sends every other live rank the datagram `abort`
//      {attempt}. The detector is disarmed: exits and silences are expected now.
//   2. A rank leaves its generation at a safe point, or at once when a collective
//      fails because a peer died; it destroys its process group and sends `parked`
//      {rank, pid, attempt, error}. A rank may also park on its own before any abort
//      (a collective failed): then `parked` is forwarded to the controller.
//   3. The park ends when every rank is parked or dead. Ranks still running
//      `park_timeout_s` after the stop are killed (their peers' collectives are then
//      released too) and waited for at most kKillWaitS. The agent answers `stopped`
//      {attempt, mem, parked: [{rank, pid}]}; parked ranks stay in ranks_, alive.
//   4. The next `start` gives each parked rank of the new attempt the datagram
//      `generation` {attempt, env}: the variables that changed (BuildRankEnv with an
//      empty base), which the SDK applies before it re-forms the process group on the
//      job's store under a new prefix. Ranks without a parked process come from the
//      warm pool or are spawned. A parked rank the new attempt has no place for is
//      killed. A stop without `park` kills parked ranks like any other.
// Every step is bounded: the park by park_timeout_s + kKillWaitS (an `abort` that finds
// the rank's socket queue full is sent again each loop turn within it), a generation
// send by one non-blocking datagram (a rank that cannot be told is replaced).
#include <signal.h>

#include <algorithm>
#include <fstream>

#include "agent/agent.h"
#include "agent/agent_internal.h"
#include "agent/stack_capture.h"
#include "common/json_util.h"

namespace bulwark {
namespace {

using agent_internal::Warn;

constexpr double kParkKillWaitS = 5;

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

}  // namespace

void Agent::BeginPark(long reply_attempt, const std::vector<int>& kill, double timeout_s) {
  for (Rank& r : ranks_) FlushStep(r);  // the steps before the stop, for the loss record
  detector_.Disarm();
  if (persister_) persister_->PausePushes(true);  // the replicas the stop reports stay
  stopping_ = true;
  parking_ = true;
  park_killed_ = false;
  stop_killed_ = false;
  stop_reply_attempt_ = reply_attempt;
  std::vector<int> killed, aborted;
  for (Rank& r : ranks_) {
    r.abort_unsent = false;
    if (!r.alive) continue;
    // A culprit is killed even if it already parked on its own: a rank that hung, was
    // resumed (a stack capture's detach continues a stopped process), saw its collective
    // fail and parked must not be kept and handed a later generation.
    const bool culprit = std::find(kill.begin(), kill.end(), r.rank) != kill.end();
    if (r.parked && !culprit) continue;
    if (culprit || !r.in_process) {
      IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL), "the process may be gone already");
      IgnoreError(procs_->SignalGroup(r.pgid, SIGCONT), "the process may be gone already");
      killed.push_back(r.rank);
      continue;
    }
    if (!SendAbort(r, reply_attempt)) {
      killed.push_back(r.rank);
      continue;
    }
    aborted.push_back(r.rank);
  }
  timers_.Arm("park", timeout_s);
  Warn("attempt " + std::to_string(reply_attempt) + ": parking rank(s) [" + RankList(aborted) +
       "] for the next generation" +
       (killed.empty() ? std::string() : "; killed [" + RankList(killed) + "]"));
  AdvancePark();
}

void Agent::OnParked(const Json& m, Rank& r) {
  auto error = JStrOr(m, "error", "");
  const std::string why = error.ok() ? *error : "";
  r.parked = true;
  if (parking_) return;  // AdvancePark notices
  // On its own, before any abort: a collective failed (a peer died, or the network).
  // The controller decides; the rank waits for a generation (or a stop).
  Warn("rank " + std::to_string(r.rank) + " left its generation on its own: " + why);
  Send({{"type", "parked"},
        {"attempt", spec_ ? spec_->attempt : -1},
        {"rank", r.rank},
        {"pid", r.pid},
        {"error", why}});
}

bool Agent::SendAbort(Rank& r, long attempt) {
  Status st = UnixDgramSend(dgram_.get(), RankSockPath(paths_, r.rank),
                            Json{{"type", "abort"}, {"attempt", attempt}}.dump());
  if (st.code() == Code::kResourceExhausted) {
    // Its queue is full (it reads every 50 ms; chaos or a report storm filled it).
    if (!r.abort_unsent) {
      Warn("rank " + std::to_string(r.rank) + "'s socket queue is full; asking it to park " +
           "again until it reads");
    }
    r.abort_unsent = true;
    return true;
  }
  r.abort_unsent = false;
  if (st.ok()) return true;
  // It cannot hear us: it cannot park either.
  Warn("rank " + std::to_string(r.rank) + " cannot be asked to park (" + st.ToString() +
       "); stopping it");
  IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL), "the process may be gone already");
  IgnoreError(procs_->SignalGroup(r.pgid, SIGCONT), "the process may be gone already");
  return false;
}

void Agent::AdvancePark() {
  if (!park_killed_) {
    for (Rank& r : ranks_) {
      if (r.alive && !r.parked && r.abort_unsent) SendAbort(r, stop_reply_attempt_);
    }
  }
  bool done = true;
  for (const Rank& r : ranks_) done = done && (!r.alive || r.parked);
  if (done) {
    FinishPark();
    return;
  }
  if (!park_killed_ && timers_.TakeIfExpired("park")) {
    const std::string where = SaveLateParkerStacks();
    std::vector<int> late;
    for (Rank& r : ranks_) {
      if (!r.alive || r.parked) continue;
      IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL), "the process may be gone already");
      IgnoreError(procs_->SignalGroup(r.pgid, SIGCONT), "the process may be gone already");
      late.push_back(r.rank);
    }
    Warn("rank(s) [" + RankList(late) + "] did not park in time; killed (they are replaced)" +
         (where.empty() ? "" : "; their stacks are in " + where));
    park_killed_ = true;
    timers_.Arm("park_kill", kParkKillWaitS);
    return;
  }
  if (park_killed_ && timers_.TakeIfExpired("park_kill")) {
    Warn("rank processes survived SIGKILL for " + std::to_string(kParkKillWaitS) +
         " s; giving up on them");
    FinishPark();
  }
}

std::string Agent::SaveLateParkerStacks() {
  if (!spec_) return "";
  std::vector<StackTarget> targets;
  for (const Rank& r : ranks_) {
    if (r.alive && !r.parked) targets.push_back({r.rank, r.pid, r.stack_file});
  }
  if (targets.empty()) return "";
  StackCaptureOptions o = opts_.stacks;
  o.budget_s = std::min(o.budget_s, 1.0);  // the park is already late
  const auto stacks = CaptureStacks(targets, o, clock_, [this] { MaybeHeartbeat(); });
  const std::string path = spec_->log_dir + "/park-attempt-" + std::to_string(spec_->attempt) +
                           "-" + opts_.node + "-stacks.txt";
  std::ofstream f(path, std::ios::trunc);
  for (const auto& [rank, st] : stacks) f << "===== rank " << rank << " =====\n" << st.text << "\n";
  return f ? path : "";
}

void Agent::FinishPark() {
  TakeLastReports();
  timers_.Disarm("park");
  timers_.Disarm("park_kill");
  Json parked = Json::array();
  std::vector<Rank> keep;
  for (Rank& r : ranks_) {
    if (r.alive && r.parked) {
      parked.push_back({{"rank", r.rank}, {"pid", r.pid}});
      keep.push_back(std::move(r));
      continue;
    }
    IgnoreError(procs_->SignalGroup(r.pgid, SIGKILL),
                "the process may be gone already");  // stragglers in a dead rank's group
    PumpOutput(r, true);
    if (r.log) std::fclose(r.log);
    r.log = nullptr;
  }
  ranks_ = std::move(keep);
  stopping_ = false;
  parking_ = false;
  const long reply = stop_reply_attempt_;
  stop_reply_attempt_ = -1;
  MemInventory mem = spec_ ? MemoryInventory(*spec_) : MemInventory();
  DrainOutbox();
  spec_.reset();
  outcomes_.clear();
  if (reply >= 0) SendStopped(reply, std::move(mem), std::move(parked));
  LaunchPendingStart();
}

bool Agent::SendGeneration(const StartSpec& spec, int local, Rank& r) {
  if (!r.in_process) return false;
  Json env = BuildRankEnv(spec, local, paths_, {});
  env.erase("PYTHONPATH");  // the running interpreter's path is set; it must not shrink
  const std::string msg =
      Json{{"type", "generation"}, {"attempt", spec.attempt}, {"env", env}}.dump(
          -1, ' ', false, Json::error_handler_t::replace);
  Status st = UnixDgramSend(dgram_.get(), RankSockPath(paths_, r.rank), msg);
  if (!st.ok()) Warn("generation for rank " + std::to_string(r.rank) + ": " + st.ToString());
  return st.ok();
}

void Agent::HandlePrepare(const Json& msg) {
  // The job's rank command for an agent that has no start yet (a warm standby), so its
  // pool is warm when it is promoted.
  StartSpec s;
  auto command = JStrList(msg, "command");
  auto env = JStrMap(msg, "env");
  auto workdir = JStrOr(msg, "workdir", "");
  auto size = JIntOr(msg, "warm_ranks", 0);
  auto version = JStrOr(msg, "version", "");
  // The node's rank count: the warm processes' environment depends on it (one OpenMP
  // thread each when several share the node); absent from an older controller: 1.
  auto nproc = JIntOr(msg, "nproc_per_node", 1);
  Status bad = !command.ok()   ? command.status()
               : !env.ok()     ? env.status()
               : !workdir.ok() ? workdir.status()
               : !version.ok() ? version.status()
               : !nproc.ok()   ? nproc.status()
                               : size.status();
  if (bad.ok() && (*size < 0 || *size > 64)) {
    bad = InvalidArgument("message 'prepare': field 'warm_ranks' must be in [0, 64]");
  }
  if (bad.ok() && (*nproc < 1 || *nproc > 4096)) {
    bad = InvalidArgument("message 'prepare': field 'nproc_per_node' must be in [1, 4096]");
  }
  if (bad.ok() && command->empty()) {
    bad = InvalidArgument("message 'prepare': field 'command' is empty");
  }
  if (!bad.ok()) {
    Warn("controller: dropped prepare: " + bad.message());
    return;
  }
  s.command = *command;
  s.env = *env;
  s.workdir = *workdir;
  s.version = *version;
  s.nproc_per_node = static_cast<int>(*nproc);
  s.log_dir = opts_.run_dir + "/logs";
  SetWarmSpec(s, static_cast<int>(*size));
  ReportWarm();
}

}  // namespace bulwark
