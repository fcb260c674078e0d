#include "policy/recovery_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>

#include "common/str_format.h"

namespace bulwark {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool IsHardwareFault(const Incident& in) {
  return in.kind == FaultKind::kFatalLog && (in.subtype == "xid" || in.subtype == "ecc");
}

// "rank 3", "node 1" or "the job".
std::string Who(const Incident& in) {
  if (in.rank >= 0) return Fmt("rank %d", in.rank);
  if (in.node >= 0) return Fmt("node %d", in.node);
  return "the job";
}

std::string AtStep(long step) {
  return step >= 0 ? Fmt(" at step %ld", step) : std::string(" before completing a step");
}

std::string Paren(const std::string& s) { return s.empty() ? std::string() : " (" + s + ")"; }

// One clause describing the fault, e.g. "rank 3 crashed (SIGKILL) at step 120".
std::string Describe(const Incident& in) {
  const std::string who = Who(in);
  switch (in.kind) {
    case FaultKind::kCrash:
      return who + " crashed" + Paren(in.subtype) + AtStep(in.step);
    case FaultKind::kHang:
      return who + " stopped making progress" + Paren(in.subtype) + AtStep(in.step) + " (hang)";
    case FaultKind::kNan:
      return who + " reported a NaN/Inf loss" + AtStep(in.step);
    case FaultKind::kFatalLog:
      return who + " logged a fatal error" + Paren(in.subtype) + AtStep(in.step);
    case FaultKind::kNodeLost:
      return (in.node >= 0 ? Fmt("node %d", in.node) : who) + " was lost" +
             Paren(in.subtype.empty() ? "missed heartbeats" : in.subtype) + AtStep(in.step);
    case FaultKind::kSdc:
      return who + "'s parameters differ bit for bit from the other ranks'" + AtStep(in.step) +
             " (silent data corruption)";
  }
  return who + " failed";
}

// What the user should look at next for this kind of fault.
std::string Hint(const Incident& in) {
  const std::string who = Who(in);
  switch (in.kind) {
    case FaultKind::kCrash:
      return "look at " + who + "'s log for the error printed before it exited";
    case FaultKind::kHang:
      return "look at the ranks' stack dumps (SIGUSR1) for the collective or data loader they "
             "are blocked in";
    case FaultKind::kNan:
      return Fmt(
          "look at the data batches and the learning-rate schedule around step %ld; "
          "lower the learning rate or enable gradient clipping",
          in.step);
    case FaultKind::kFatalLog:
      if (in.subtype == "oom") {
        return "the job runs out of memory: reduce the batch size or enable activation "
               "checkpointing";
      }
      if (IsHardwareFault(in)) {
        return (in.node >= 0 ? Fmt("node %d", in.node) : who) +
               " has a GPU hardware fault: drain it and check it with `nvidia-smi -q` "
               "(set fault_policy.spare_nodes to replace such nodes automatically)";
      }
      if (in.subtype == "nccl_timeout") {
        return "look at the network between the nodes and the NCCL logs (NCCL_DEBUG=INFO)";
      }
      return "look at " + who + "'s log for the fatal line and what preceded it";
    case FaultKind::kNodeLost:
      return "look at the node's agent log and the host's health (network, power, kernel log)";
    case FaultKind::kSdc:
      return (in.node >= 0 ? Fmt("node %d", in.node) : who) +
             " computes wrong results without failing: keep it out of training until its "
             "diagnostics pass (docs/diagnosis.md)";
  }
  return "look at the job's logs";
}

std::string ResumeNewest(const JobHistory& h) {
  if (h.memory_tier) {
    // The launch takes the newest step every rank holds in memory when it is newer.
    if (h.committed_steps.empty()) {
      return "from the newest step in memory (no committed checkpoint on disk)";
    }
    return Fmt("from the newest step in memory (on disk: step %ld)", h.committed_steps.back());
  }
  if (h.committed_steps.empty()) return "from scratch (no committed checkpoint)";
  return Fmt("from step %ld", h.committed_steps.back());
}

long ProgressAt(const JobHistory& h, size_t i) {
  return i < h.progress_at_incident.size() ? h.progress_at_incident[i] : h.high_water_step;
}

// "5 crash, 2 hang" over earlier incidents plus the current one.
std::string KindCounts(const JobHistory& h, const Incident& current) {
  std::map<FaultKind, int> n;
  for (const Incident& in : h.incidents) ++n[in.kind];
  ++n[current.kind];
  std::string out;
  for (const auto& [kind, count] : n) {
    if (!out.empty()) out += ", ";
    out += Fmt("%d %s", count, FaultKindName(kind));
  }
  return out;
}

std::string HighWater(long hw) {
  return hw >= 0 ? Fmt("training reached step %ld", hw) : "no step has completed yet";
}

}  // namespace

const char* FaultKindName(FaultKind k) {
  switch (k) {
    case FaultKind::kCrash:
      return "crash";
    case FaultKind::kHang:
      return "hang";
    case FaultKind::kNan:
      return "nan";
    case FaultKind::kFatalLog:
      return "fatal_log";
    case FaultKind::kNodeLost:
      return "node_lost";
    case FaultKind::kSdc:
      return "sdc";
  }
  return "unknown";
}

const char* ActionName(Action a) {
  switch (a) {
    case Action::kRestartInPlace:
      return "restart_in_place";
    case Action::kReplaceNode:
      return "replace_node";
    case Action::kRollback:
      return "rollback";
    case Action::kGiveUp:
      return "give_up";
  }
  return "unknown";
}

bool SameFault(const Incident& a, const Incident& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == FaultKind::kNan) {
    if (a.step < 0 || b.step < 0) return a.step < 0 && b.step < 0;
    return std::labs(a.step - b.step) <= kNanRecurWindowSteps;
  }
  if (a.rank >= 0 && b.rank >= 0) return a.rank == b.rank;
  if (a.node >= 0 && b.node >= 0) return a.node == b.node;
  return true;
}

double RecoveryPolicy::Backoff(int n) const {
  if (!(spec_.backoff_base_seconds > 0) || n <= 1) return 0;
  const double raw = std::ldexp(spec_.backoff_base_seconds, std::min(n - 2, 60));
  const double capped =
      spec_.backoff_cap_seconds > 0 ? std::min(raw, spec_.backoff_cap_seconds) : raw;
  const uint64_t h = SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(n)));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  return capped * (0.5 + 0.5 * u);
}

double RecoveryPolicy::HangTimeout(const FaultPolicySpec& spec,
                                   const std::vector<double>& step_secs) {
  std::vector<double> d;
  d.reserve(step_secs.size());
  for (double x : step_secs) {
    if (std::isfinite(x) && x >= 0) d.push_back(x);
  }
  if (d.empty()) return spec.hang_timeout_floor_seconds;
  std::sort(d.begin(), d.end());
  const size_t rank = (99 * d.size() + 99) / 100;  // ceil(0.99 * n), exact in integers
  const double p99 = d[std::clamp<size_t>(rank, 1, d.size()) - 1];
  return std::max(spec.hang_timeout_floor_seconds, spec.hang_timeout_multiplier * p99);
}

Decision RecoveryPolicy::Decide(const Incident& incident, const JobHistory& history,
                                double now) const {
  (void)now;
  Decision d;
  const std::string what = Describe(incident);

  // Same fault, again and again, with no new step in between: restarting cannot help.
  int same = 1;  // the current incident
  for (size_t i = 0; i < history.incidents.size(); ++i) {
    if (ProgressAt(history, i) >= history.high_water_step &&
        SameFault(history.incidents[i], incident)) {
      ++same;
    }
  }
  if (spec_.max_same_fault_without_progress > 0 && same >= spec_.max_same_fault_without_progress) {
    d.action = Action::kGiveUp;
    d.reason =
        Fmt("giving up: %s, the same fault %d times with no new progress in between "
            "(%s); restarting again would repeat it. Next: %s.",
            what.c_str(), same, HighWater(history.high_water_step).c_str(), Hint(incident).c_str());
    return d;
  }
  if (history.restarts_used >= spec_.restart_budget) {
    d.action = Action::kGiveUp;
    d.reason =
        Fmt("giving up: the restart budget is exhausted (%d of %d restarts used). "
            "Last fault: %s. Faults so far: %s; %s. Next: %s, or raise "
            "fault_policy.restart_budget if the faults are unrelated.",
            history.restarts_used, spec_.restart_budget, what.c_str(),
            KindCounts(history, incident).c_str(), HighWater(history.high_water_step).c_str(),
            Hint(incident).c_str());
    return d;
  }

  if (incident.cause == FaultCause::kCode) {
    d.action = Action::kGiveUp;
    d.reason =
        Fmt("giving up: %s, and a replay shows it is the program: %s; restarting "
            "would repeat it. Next: %s.",
            what.c_str(), incident.cause_evidence.c_str(), Hint(incident).c_str());
    return d;
  }

  d.backoff_seconds = Backoff(history.consecutive_failures + 1);
  const std::string tail =
      Fmt(" (restart %d of %d)", history.restarts_used + 1, spec_.restart_budget) +
      (d.backoff_seconds > 0 ? Fmt(" after %.1f s backoff", d.backoff_seconds) : std::string());

  if (incident.kind == FaultKind::kNan) {
    const long nan_step = incident.step >= 0 ? incident.step : history.high_water_step + 1;
    int repeats = 0;  // earlier NaNs at (about) this step: each rolls back one more checkpoint
    for (const Incident& in : history.incidents) {
      if (SameFault(in, incident)) ++repeats;
    }
    std::vector<long> below;
    for (long s : history.committed_steps) {
      if (s < nan_step) below.push_back(s);
    }
    d.action = Action::kRollback;
    std::string target;
    if (repeats == 0 && history.memory_tier && nan_step > 0) {
      // The snapshot of the step before the NaN was taken before the poisoned update;
      // the launch takes the newest step <= this on any tier (memory first).
      d.resume_step_max = nan_step - 1;
      target =
          Fmt("to step %ld (the step before the NaN), or the newest snapshot before "
              "it (memory tier, else the newest committed step)",
              d.resume_step_max);
    } else if (below.empty()) {
      d.resume_step_max = -1;
      d.resume_from_scratch = true;
      target = "from scratch (no committed checkpoint before the NaN)";
    } else {
      const long idx = std::max<long>(0, static_cast<long>(below.size()) - 1 - repeats);
      d.resume_step_max = below[idx];
      target = Fmt("to step %ld", d.resume_step_max);
    }
    if (repeats == 0 && incident.node >= 0 && history.spares_available > 0) {
      // The re-run of the steps before the NaN goes to other hardware: if the NaN does
      // not come back there, it was the node's (policy/replay_check.h).
      d.action = Action::kReplaceNode;
      d.replace_node = incident.node;
      d.reason =
          Fmt("%s; rolling back %s with a standby in place of node %d, so the replay "
              "of the steps tells the data from the node%s",
              what.c_str(), target.c_str(), incident.node, tail.c_str());
    } else if (repeats == 0) {
      d.reason = what + "; rolling back " + target + tail;
    } else {
      d.skip_batches_from = d.resume_step_max + 1;
      d.skip_batches_to = nan_step + 1;
      d.reason =
          Fmt("%s, again after %d earlier rollback%s; rolling back further %s and "
              "skipping the data batches of steps [%ld, %ld)%s",
              what.c_str(), repeats, repeats == 1 ? "" : "s", target.c_str(), d.skip_batches_from,
              d.skip_batches_to, tail.c_str());
      if (incident.cause == FaultCause::kData) {
        d.reason += "; a replay shows it is the data: " + incident.cause_evidence;
      }
    }
    return d;
  }

  // Silent corruption: every step after the last verified one may carry it, on every
  // tier, so the resume goes back to that step at most.
  std::string resume = ResumeNewest(history);
  if (incident.kind == FaultKind::kSdc) {
    d.resume_step_max = incident.good_step;
    d.resume_from_scratch = incident.good_step < 0;
    resume = incident.good_step >= 0
                 ? Fmt("from step %ld (the last whose parameters were verified) or the newest "
                       "checkpoint before it",
                       incident.good_step)
                 : std::string("from scratch (no step was verified before the corruption)");
  }
  const bool follows_node = incident.kind == FaultKind::kNodeLost ||
                            incident.kind == FaultKind::kSdc || IsHardwareFault(incident);
  if (follows_node && incident.node >= 0 && history.spares_available > 0) {
    d.action = Action::kReplaceNode;
    d.replace_node = incident.node;
    d.reason = Fmt("%s; replacing node %d with a standby and restarting %s%s", what.c_str(),
                   incident.node, resume.c_str(), tail.c_str());
    return d;
  }
  d.action = Action::kRestartInPlace;
  if (follows_node && history.spares_available > 0) {
    d.reason = what + "; the node slot is unknown, so restarting in place " + resume + tail;
  } else if (follows_node) {
    d.reason = what + "; no spare node is available, so restarting in place (the backend " +
               "re-provisions the node) " + resume + tail;
  } else {
    d.reason = what + "; restarting in place " + resume + tail;
  }
  return d;
}

}  // namespace bulwark
