// Replay: a fault checked against a re-run of the steps before it, and the cause that
// follows (docs/diagnosis.md, "Replay and classification").
//
// After a fault at step S the job resumes from a checkpoint C < S and runs the steps
// (C, S] again on the same data. A ReplayCheck holds every rank's losses of those steps
// as first recorded and compares the re-run's bit for bit; Classify turns the outcome
// into a cause:
//   data       a NaN (or loss spike) that happens again at the same step on the same
//              rank, the losses before it equal: the batch (the policy skips it);
//   code       the same once those batches were skipped, or a crash of the program's
//              own (an exit status: an exception; or SIGSEGV, SIGBUS, SIGILL, SIGFPE,
//              SIGABRT) that happens again, the same way, at the same step on the same
//              rank: the program; restarting cannot help;
//   hardware   a NaN that did not happen again once its rank ran on other hardware, the
//              other losses equal; or a re-run loss that differs bit for bit from the
//              record (one of the two computations was wrong) while every rank drew the
//              same random numbers and read the same data: the ranks reported digests of
//              their generators' state (and of their data) with their losses, and the
//              re-run's equal the record's. A loss that differs without that evidence
//              (no digests: the trainer did not ask for determinism; or a digest that
//              differs) gets no verdict: a trainer that is not deterministic cannot be
//              told from a machine that computed wrong;
//   transient  a fault that did not happen again on the same hardware.
// Which faults are checked: NaNs, loss spikes and the program's own crashes (not a
// SIGKILL, SIGTERM or other signal sent from outside — an OOM kill, an operator, a
// preemption —, hangs, lost nodes, sdc: their re-run says nothing of their cause).
//
// Pure and clock-free; shared by the controller and `bulwark replay`. Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "policy/recovery_policy.h"

namespace bulwark {

using LossTable = std::map<long, std::map<int, double>>;  // step -> rank -> loss

// How a rank's gradients were summed with the other ranks' in a step: in a fixed order
// (bulwark.ordered_allreduce_hook), or in one that depends on how DDP laid out its
// buckets, which a resumed process lays out anew (DDP's own ring all-reduce): the last
// bits of its losses then differ from the first run's with no machine computing wrong.
enum class SumOrder : uint8_t { kUnknown = 0, kOrdered = 1, kUnordered = 2 };

// What a rank reported of a step besides its loss, for replay: digests of its random
// generators' state after the step and of the data it trained on (0 = not reported),
// and how its gradient sums were ordered.
struct StepDigests {
  uint64_t rng = 0;
  uint64_t data = 0;
  SumOrder sums = SumOrder::kUnknown;
  bool empty() const { return rng == 0 && data == 0 && sums == SumOrder::kUnknown; }
  bool operator==(const StepDigests&) const = default;
};
// "ordered" / "unordered" on the wire and in bundles; kUnknown for anything else.
SumOrder ParseSumOrder(const std::string& s);
const char* SumOrderName(SumOrder o);                            // "" for kUnknown
using DigestTable = std::map<long, std::map<int, StepDigests>>;  // step -> rank -> digests

// The losses (and digests) the ranks reported for their most recent steps: at most
// `max_steps` steps and `max_losses` losses in all (about 64 bytes each: a job of 1,000
// ranks keeps its last 262 steps), the oldest steps dropped first.
class LossWindow {
 public:
  explicit LossWindow(size_t max_steps = 4096, size_t max_losses = size_t{1} << 18)
      : max_steps_(max_steps), max_losses_(max_losses) {}
  // A rank's loss for a step; a later report of the same (step, rank) replaces it. A loss
  // that is not finite (the NaN of a fault) is kept for its digests only.
  void Record(long step, int rank, double loss, StepDigests digests = {});
  // The finite losses of steps in (after, upto].
  LossTable Range(long after, long upto) const;
  // The digests reported for steps in (after, upto] (ranks that reported none left out).
  DigestTable DigestRange(long after, long upto) const;
  // Forgets the steps after `step` (a resume from `step` makes them history that did not
  // happen; the re-run records them again).
  void DropAfter(long step);

 private:
  size_t max_steps_, max_losses_;
  size_t losses_ = 0;  // entries of t_
  struct Entry {
    double loss;
    StepDigests digests;
  };
  std::map<long, std::map<int, Entry>> t_;
};

// Whether a re-run can tell the cause of `inc`: NaNs, loss spikes, the program's own
// crashes (an exit status, or SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT).
bool Replayable(const Incident& inc);

// The step a re-run must complete for the fault not to have happened again: a NaN's own
// step; for a crash, the step after the last one reported.
long FaultStep(const Incident& inc);

class ReplayCheck {
 public:
  // `expected`: the losses recorded before the fault (steps <= FaultStep(fault)).
  // `data_skipped`: the re-run skips the data batches up to the fault step.
  // `moved_ranks`: ranks the re-run places on another node than at the fault.
  // `expected_digests`: the digests recorded with those losses (empty: none reported).
  ReplayCheck(Incident fault, LossTable expected, bool data_skipped, std::set<int> moved_ranks,
              DigestTable expected_digests = {});

  // A loss of the re-run, with the digests the rank reported with it. Returns true once
  // the check has concluded: the fault's rank (any rank when unknown) completed the
  // fault step with a finite loss.
  bool OnLoss(long step, int rank, double loss, StepDigests digests = {});
  bool passed() const { return passed_; }
  // Passed, and every recorded loss from the re-run's first compared step up to the
  // fault's step (the fault rank's own at that step excepted) has been compared: the
  // other ranks' reports, which may come later than the fault rank's (another node's
  // agent), are in. A caller waits a bounded time for it before it concludes.
  bool Complete() const;
  const Incident& fault() const { return fault_; }
  bool data_skipped() const { return data_skipped_; }
  const std::set<int>& moved_ranks() const { return moved_; }
  int compared() const { return compared_; }
  int equal() const { return equal_; }
  long last_step() const { return last_step_; }
  // The first loss that differed bit for bit (step -1: none).
  struct Diff {
    long step = -1;
    int rank = -1;
    double recorded = 0, replayed = 0;
  };
  const Diff& first_diff() const { return diff_; }
  // The digests compared (both the record and the re-run had one) and how many were
  // equal; the first that differed (step -1: none).
  struct DigestCount {
    int compared = 0, equal = 0;
    long first_diff_step = -1;
    int first_diff_rank = -1;
  };
  const DigestCount& rng() const { return rng_; }
  const DigestCount& data() const { return data_; }
  // The record holds RNG digests: the trainer asked for determinism (bulwark.deterministic).
  bool rng_recorded() const { return rng_recorded_; }
  // A rank summed its gradients in an order that is not fixed, in the record or the
  // re-run (SumOrder::kUnordered): bit-level differences then say nothing.
  bool unordered_sums() const { return unordered_sums_; }
  struct StepResult {
    int compared = 0, equal = 0;
  };
  // Step by step: how many losses were compared and how many were equal.
  const std::map<long, StepResult>& steps() const { return steps_; }
  // "steps 141-155: 60 of 60 losses of 4 ranks equal bit for bit" (or the first
  // difference), then what the digests showed.
  std::string Summary() const;

 private:
  Incident fault_;
  LossTable expected_;
  bool data_skipped_;
  std::set<int> moved_;
  int compared_ = 0, equal_ = 0;
  long first_step_ = -1, last_step_ = -1;
  std::set<int> ranks_;
  Diff diff_;
  DigestTable expected_digests_;
  DigestCount rng_, data_;
  bool rng_recorded_ = false;
  bool unordered_sums_ = false;
  std::map<long, StepResult> steps_;
  std::set<std::pair<long, int>> seen_;  // (step, rank) reports taken, up to the fault
  bool passed_ = false;
};

// True when `again` is the replayed fault happening again: the same kind and rank (when
// known), at the same step (a crash: the same exit status or signal).
bool SameFaultAgain(const Incident& fault, const Incident& again);

struct Classification {
  FaultCause cause = FaultCause::kUnknown;
  std::string evidence;  // what the re-run showed, one paragraph
};
// The cause from a check: `again` is the incident that ended the re-run, or null when
// the re-run passed the fault step. kUnknown when the re-run says nothing (another
// fault interrupted it before the fault step).
Classification Classify(const ReplayCheck& check, const Incident* again);

}  // namespace bulwark
