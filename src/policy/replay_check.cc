#include "policy/replay_check.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/str_format.h"

namespace bulwark {
namespace {

bool BitEqual(double a, double b) {
  uint64_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

// A crash of the program's own: it ended itself (an exit status: an exception) or
// faulted (a signal the process raises on itself: a bad address, an illegal
// instruction, a division by zero, an abort), not a signal sent from outside.
bool ProgramCrash(const Incident& inc) {
  if (inc.kind != FaultKind::kCrash) return false;
  if (inc.subtype.rfind("exit ", 0) == 0) return true;
  for (const char* sig : {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"}) {
    if (inc.subtype == sig) return true;
  }
  return false;
}

// "at step 14", or "before its first step" for a crash before any step completed.
std::string AtFaultStep(const Incident& inc) {
  return inc.kind != FaultKind::kNan && inc.step < 0 ? std::string("before its first step")
                                                     : Fmt("at step %ld", FaultStep(inc));
}

std::string FaultWho(const Incident& inc) {
  return inc.rank >= 0 ? Fmt("rank %d", inc.rank) : std::string("the job");
}

}  // namespace

void LossWindow::Record(long step, int rank, double loss, StepDigests digests) {
  if (t_[step].insert_or_assign(rank, Entry{loss, digests}).second) ++losses_;
  while (t_.size() > 1 && (t_.size() > max_steps_ || losses_ > max_losses_)) {
    losses_ -= t_.begin()->second.size();
    t_.erase(t_.begin());
  }
}

LossTable LossWindow::Range(long after, long upto) const {
  LossTable out;
  for (auto it = t_.upper_bound(after); it != t_.end() && it->first <= upto; ++it) {
    for (const auto& [rank, e] : it->second) {
      if (std::isfinite(e.loss)) out[it->first].emplace(rank, e.loss);
    }
  }
  return out;
}

DigestTable LossWindow::DigestRange(long after, long upto) const {
  DigestTable out;
  for (auto it = t_.upper_bound(after); it != t_.end() && it->first <= upto; ++it) {
    for (const auto& [rank, e] : it->second) {
      if (!e.digests.empty()) out[it->first].emplace(rank, e.digests);
    }
  }
  return out;
}

void LossWindow::DropAfter(long step) {
  for (auto it = t_.upper_bound(step); it != t_.end();) {
    losses_ -= it->second.size();
    it = t_.erase(it);
  }
}

const char* FaultCauseName(FaultCause c) {
  switch (c) {
    case FaultCause::kData:
      return "data";
    case FaultCause::kCode:
      return "code";
    case FaultCause::kHardware:
      return "hardware";
    case FaultCause::kTransient:
      return "transient";
    case FaultCause::kUnknown:
      break;
  }
  return "unknown";
}

bool Replayable(const Incident& inc) { return inc.kind == FaultKind::kNan || ProgramCrash(inc); }

long FaultStep(const Incident& inc) {
  if (inc.kind == FaultKind::kNan) return inc.step;
  return inc.step >= 0 ? inc.step + 1 : 0;
}

ReplayCheck::ReplayCheck(Incident fault, LossTable expected, bool data_skipped,
                         std::set<int> moved_ranks, DigestTable expected_digests)
    : fault_(std::move(fault)),
      expected_(std::move(expected)),
      data_skipped_(data_skipped),
      moved_(std::move(moved_ranks)),
      expected_digests_(std::move(expected_digests)) {
  for (const auto& [step, ranks] : expected_digests_) {
    for (const auto& [rank, d] : ranks) {
      rng_recorded_ = rng_recorded_ || d.rng != 0;
      unordered_sums_ = unordered_sums_ || d.sums == SumOrder::kUnordered;
    }
  }
}

SumOrder ParseSumOrder(const std::string& s) {
  return s == "ordered"     ? SumOrder::kOrdered
         : s == "unordered" ? SumOrder::kUnordered
                            : SumOrder::kUnknown;
}

const char* SumOrderName(SumOrder o) {
  switch (o) {
    case SumOrder::kOrdered:
      return "ordered";
    case SumOrder::kUnordered:
      return "unordered";
    case SumOrder::kUnknown:
      break;
  }
  return "";
}

bool ReplayCheck::OnLoss(long step, int rank, double loss, StepDigests digests) {
  const long fs = FaultStep(fault_);
  // After it passed, the other ranks' late losses are still compared (Complete()); a
  // step a rank reports twice counts once.
  if (seen_.count({step, rank}) > 0) return passed_;
  const bool fault_rank = fault_.rank < 0 || rank == fault_.rank;
  // Batches skipped up to the fault step: the re-run computes other things, nothing to
  // compare; only whether the fault comes back matters.
  // The fault rank's loss at the fault step is the fault itself, not compared; its
  // digests are (the NaN's step re-ran on the same data, or not).
  if (!data_skipped_ && step <= fs) {
    seen_.insert({step, rank});
    unordered_sums_ = unordered_sums_ || digests.sums == SumOrder::kUnordered;
    auto s = step == fs && fault_rank ? expected_.end() : expected_.find(step);
    if (s != expected_.end()) {
      auto r = s->second.find(rank);
      if (r != s->second.end()) {
        ++compared_;
        ++steps_[step].compared;
        ranks_.insert(rank);
        if (first_step_ < 0 || step < first_step_) first_step_ = step;
        last_step_ = std::max(last_step_, step);
        if (BitEqual(r->second, loss)) {
          ++equal_;
          ++steps_[step].equal;
        } else if (diff_.step < 0) {
          diff_ = {step, rank, r->second, loss};
        }
      }
    }
    const StepDigests* recorded = nullptr;
    if (auto ds = expected_digests_.find(step); ds != expected_digests_.end()) {
      if (auto d = ds->second.find(rank); d != ds->second.end()) recorded = &d->second;
    }
    if (recorded != nullptr) {
      const auto count = [&](uint64_t recorded, uint64_t replayed, DigestCount* n) {
        if (recorded == 0 || replayed == 0) return;
        ++n->compared;
        if (recorded == replayed) {
          ++n->equal;
        } else if (n->first_diff_step < 0 || step < n->first_diff_step) {
          n->first_diff_step = step;
          n->first_diff_rank = rank;
        }
      };
      count(recorded->rng, digests.rng, &rng_);
      count(recorded->data, digests.data, &data_);
    }
  }
  if (step >= fs && fault_rank && std::isfinite(loss)) passed_ = true;
  return passed_;
}

bool ReplayCheck::Complete() const {
  if (!passed_) return false;
  if (data_skipped_ || first_step_ < 0) return true;
  const long fs = FaultStep(fault_);
  for (auto s = expected_.lower_bound(first_step_); s != expected_.end() && s->first <= fs; ++s) {
    for (const auto& [rank, loss] : s->second) {
      if (s->first == fs && (fault_.rank < 0 || rank == fault_.rank)) continue;
      if (seen_.count({s->first, rank}) == 0) return false;
    }
  }
  return true;
}

std::string ReplayCheck::Summary() const {
  if (data_skipped_) return "the re-run skipped the data batches up to the fault step";
  std::string s =
      compared_ == 0
          ? std::string("no loss of the re-run had a recorded counterpart to compare")
          : Fmt("steps %ld-%ld: %d of %d losses of %zu rank%s equal bit for bit", first_step_,
                last_step_, equal_, compared_, ranks_.size(), ranks_.size() == 1 ? "" : "s");
  if (diff_.step >= 0) {
    s += Fmt("; first difference at step %ld on rank %d: recorded %.17g, re-run %.17g", diff_.step,
             diff_.rank, diff_.recorded, diff_.replayed);
  }
  const auto digests = [&](const char* what, const DigestCount& n) {
    if (n.compared == 0) return;
    s += Fmt("; %s %d of %d equal", what, n.equal, n.compared);
    if (n.first_diff_step >= 0) {
      s += Fmt(" (first difference at step %ld on rank %d)", n.first_diff_step, n.first_diff_rank);
    }
  };
  digests("RNG states", rng_);
  digests("data digests", data_);
  return s;
}

bool SameFaultAgain(const Incident& fault, const Incident& again) {
  if (fault.kind != again.kind) return false;
  if (fault.rank >= 0 && again.rank >= 0 && fault.rank != again.rank) return false;
  if (FaultStep(fault) != FaultStep(again)) return false;
  return fault.kind != FaultKind::kCrash || fault.subtype == again.subtype;
}

namespace {

// Why losses that differ from the record say nothing of the hardware; "" when the ranks
// drew the same random numbers and read the same data as recorded (so the computation
// itself gave another result).
std::string NotDeterministic(const ReplayCheck& c) {
  if (c.rng().first_diff_step >= 0) {
    return Fmt(
        "rank %d's random-generator state differs from the record at step %ld: the "
        "trainer drew other random numbers (seed each step with bulwark.seed_step), so "
        "the difference says nothing of the hardware",
        c.rng().first_diff_rank, c.rng().first_diff_step);
  }
  if (c.data().first_diff_step >= 0) {
    return Fmt(
        "rank %d read other data than recorded at step %ld (derive each step's batch "
        "from the step: bulwark.batch_indices), so the difference says nothing of the "
        "hardware",
        c.data().first_diff_rank, c.data().first_diff_step);
  }
  if (!c.rng_recorded() || c.rng().compared == 0) {
    return "the trainer reports no random-generator state with its losses (it did not call "
           "bulwark.deterministic), so a trainer that is not deterministic cannot be told "
           "from a machine that computed wrong";
  }
  return "";
}

}  // namespace

Classification Classify(const ReplayCheck& c, const Incident* again) {
  const Incident& f = c.fault();
  Classification out;
  if (!Replayable(f)) return out;
  const std::string who = FaultWho(f);
  const long fs = FaultStep(f);
  std::string losses = c.Summary();
  bool diverged = c.first_diff().step >= 0;
  const bool moved = f.rank >= 0 && c.moved_ranks().count(f.rank) > 0;
  // A digest that differs says the re-run drew other random numbers or read other data:
  // then neither equal nor different losses, nor the fault's absence, say anything.
  const bool digest_differs = c.rng().first_diff_step >= 0 || c.data().first_diff_step >= 0;
  const std::string undetermined = diverged || digest_differs ? NotDeterministic(c) : "";
  if (!undetermined.empty()) {
    out.evidence = diverged
                       ? Fmt("the re-run's losses differ from the record (%s), but %s: no verdict",
                             losses.c_str(), undetermined.c_str())
                       : Fmt("the re-run did not compute what was recorded (%s): %s: no verdict",
                             losses.c_str(), undetermined.c_str());
    if (again != nullptr && !SameFaultAgain(f, *again)) {
      out.evidence =
          "the re-run was interrupted by another fault before the fault's step; " + out.evidence;
    }
    return out;  // kUnknown
  }
  // The digests are equal: the re-run drew the same random numbers and read the same
  // data. Losses that differ still say nothing when the ranks' gradient sums are not in
  // a fixed order: then only whether the fault came back counts, never the difference.
  if (diverged && c.unordered_sums()) {
    diverged = false;
    losses +=
        "; the ranks summed their gradients in an order that depends on how DDP laid out "
        "its buckets (its ring all-reduce), which a resumed process lays out anew, so the "
        "last bits of the losses may differ from the record with no machine computing "
        "wrong: only whether the fault came back counts (register "
        "bulwark.ordered_allreduce_hook for sums in a fixed order)";
  }
  if (again != nullptr && SameFaultAgain(f, *again)) {
    if (diverged) {
      // It came back, but the computation before it was not the same: no verdict on the
      // data, and one of the two runs computed wrong.
      out.cause = FaultCause::kHardware;
      out.evidence =
          Fmt("the fault came back at step %ld but the re-run's losses before it "
              "differ from the record (%s): the same computation gave two "
              "results, so a machine computed wrong",
              fs, losses.c_str());
      return out;
    }
    if (f.kind == FaultKind::kNan) {
      out.cause = c.data_skipped() ? FaultCause::kCode : FaultCause::kData;
      out.evidence =
          c.data_skipped()
              ? Fmt("the NaN came back at step %ld on %s although the data batches up to it "
                    "were skipped: not the data, the program (or its configuration)",
                    fs, who.c_str())
              : Fmt("the NaN came back at step %ld on %s%s with the same data (%s): the "
                    "data batch",
                    fs, who.c_str(), moved ? " on another node" : "", losses.c_str());
      return out;
    }
    out.cause = FaultCause::kCode;
    out.evidence =
        Fmt("%s failed again (%s) %s after a re-run on the same data (%s): "
            "a deterministic failure of the program",
            who.c_str(), f.subtype.c_str(), AtFaultStep(f).c_str(), losses.c_str());
    return out;
  }
  if (again != nullptr && !c.passed()) return out;  // interrupted by another fault
  if (again == nullptr && !c.passed()) return out;  // not concluded
  if (c.data_skipped()) {
    out.cause = FaultCause::kData;
    out.evidence =
        Fmt("with the data batches up to step %ld skipped, the re-run passed it: "
            "the skipped data",
            fs);
    return out;
  }
  if (diverged) {
    out.cause = FaultCause::kHardware;
    out.evidence =
        Fmt("the re-run passed step %ld but its losses differ from the record "
            "(%s): the same computation gave two results, so a machine computed "
            "wrong",
            fs, losses.c_str());
    return out;
  }
  if (f.kind == FaultKind::kNan && moved) {
    out.cause = FaultCause::kHardware;
    out.evidence =
        Fmt("the NaN of %s at step %ld did not come back with the same data on "
            "another node (%s): the node it came from",
            who.c_str(), fs, losses.c_str());
    return out;
  }
  out.cause = FaultCause::kTransient;
  out.evidence =
      Fmt("the fault of %s at step %ld did not come back on a re-run with the same "
          "data on the same node (%s): a passing fault, of this machine or from outside",
          who.c_str(), fs, losses.c_str());
  return out;
}

}  // namespace bulwark
