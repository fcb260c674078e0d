// Bulwark SDK, C++ API: what a training rank calls to report progress, save and load
// checkpoints and learn where to resume.
//
// A Client reads its configuration from the rank environment set by the node agent
// (docs/protocol.md section 3). With none of it set it runs standalone: reports go
// nowhere and checkpoints go to BULWARK_CKPT_DIR if set. Reports are single
// non-blocking datagrams to the agent, in the order they were made. The agent's socket
// queues only a few datagrams (net.unix.max_dgram_qlen, 10 by default, for all of a
// node's ranks), so a busy agent leaves it full: a report that finds it full waits in
// the client's outbox (at most kMaxOutbox; beyond, the oldest is dropped and counted)
// with every later one behind it, and goes out at the next call into the client. A
// missing agent (nothing bound at BULWARK_AGENT_SOCK) drops them. No call blocks longer
// than its own file I/O (Save/Load/Commit), except Finished, Park and FlushReports,
// which wait for the outbox to empty, at most kFlushWaitS.
//
// Thread-safety: every method may be called from any thread; calls are serialised
// by an internal mutex.
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/staging.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace bulwark::sdk {

using EnvMap = std::map<std::string, std::string>;

struct Config {
  int rank = 0;                  // RANK
  int world_size = 1;            // WORLD_SIZE
  std::string agent_sock;        // BULWARK_AGENT_SOCK ("" = standalone)
  std::string rank_sock;         // BULWARK_RANK_SOCK ("" = no fault injection channel)
  long resume_step = -1;         // BULWARK_RESUME_STEP
  std::string ckpt_dir;          // BULWARK_CKPT_DIR ("" = saving disabled)
  long ckpt_interval_steps = 0;  // BULWARK_CKPT_INTERVAL_STEPS
  // BULWARK_CKPT_PERSIST=agent (checkpoint.intervalSteps: auto): the agent decides
  // which staged steps go to disk; staged reports never ask for a persist.
  bool persist_by_agent = false;
  long skip_from = -1;      // BULWARK_SKIP_FROM
  long skip_to = -1;        // BULWARK_SKIP_TO
  std::string staging_dir;  // BULWARK_STAGING_DIR ("" = no memory tier: saves write disk)
  long memory_slots = 3;    // BULWARK_MEMORY_SLOTS (staging ring size K)
  std::string shared_dir;   // BULWARK_CKPT_SHARED_DIR (second file tier, "" = none)
  long attempt = -1;        // BULWARK_ATTEMPT: the generation this rank serves (-1 = unknown)
};

// An open checkpoint of one step on one tier, for reading this rank's tensors.
// Not thread-safe.
class LoadSession {
 public:
  virtual ~LoadSession() = default;
  virtual const std::string& tier() const = 0;  // "memory", "disk" or "shared"
  virtual long step() const = 0;
  // The tensors this rank saved (on the file tiers of a step saved by another
  // world size: rank `rank mod saved world`'s), with their global shapes and offsets.
  virtual const std::vector<ckpt::TensorMeta>& tensors() const = 0;
  // Fills dst (want.nbytes() bytes) with the region `want` describes: its dtype,
  // piece shape, global shape and offsets. The file tiers read it from the pieces
  // any world and sharding saved (ckpt::StepReader::Load). The memory tier serves
  // a piece this rank's snapshot holds exactly and reads any other region from the
  // file tiers holding the step, opened on first need (if none does, the error names
  // the tensor and each tier's reason). Every chunk is verified (DATA_LOSS).
  // INVALID_ARGUMENT if the dtype or global shape differs from the saved one.
  virtual Status Load(const ckpt::TensorMeta& want, void* dst) = 0;
};

// Parses the rank environment. Missing variables take the defaults above; a
// malformed value is InvalidArgument naming the variable.
Result<Config> ConfigFromEnv(const EnvMap& env);
// The variables ConfigFromEnv reads, taken from this process's environment.
EnvMap ProcessEnv();

// Optional measurements of one step, sent with its report (docs/monitoring.md). A
// field left NaN was not measured and is not sent; a negative or non-finite one is
// not sent either (the agent drops absurd values with a warning).
struct StepMetrics {
  double samples = kNotMeasured;      // samples (sequences, images) in the step
  double lr = kNotMeasured;           // learning rate
  double grad_norm = kNotMeasured;    // global gradient norm
  double data_wait_s = kNotMeasured;  // time blocked on the input pipeline
  double compute_s = kNotMeasured;    // forward and backward
  double optimizer_s = kNotMeasured;  // optimizer step
  // The rank's own work in the step, without waiting for other ranks (the straggler
  // score compares it across ranks). Not measured: the process's CPU time since the
  // previous report. On a GPU, pass the device time (CUDA events) instead.
  double busy_s = kNotMeasured;
  // The step was inferred by Bulwark's instrumentation of an unmodified script (an
  // optimizer step), not reported by the trainer.
  bool inferred = false;
  // Replay's determinism evidence (docs/diagnosis.md): a digest of this rank's random
  // generators' state after the step, and of the data it trained on (0 = not reported).
  // A re-run of the step compares them with the record, so a loss that differs because
  // the trainer drew other random numbers or read other data is not taken for wrong
  // hardware.
  uint64_t rng_digest = 0;
  uint64_t data_digest = 0;
  // How the step's gradients were summed across ranks: 0 not reported, 1 in a fixed
  // order (bulwark.ordered_allreduce_hook), 2 in an order that may change from run to
  // run (DDP's ring all-reduce). A re-run whose losses differ in their last bits is then
  // not taken for wrong hardware.
  int sum_order = 0;
  static constexpr double kNotMeasured = __builtin_nan("");
};

class Client {
 public:
  // `clock` (not owned, must outlive the Client) measures step_time and ckpt_stall;
  // null means the system clock.
  explicit Client(const Clock* clock = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // (Re)initialises from `env`: binds BULWARK_RANK_SOCK, sends `hello` to the agent
  // and starts the first step timer. Other methods fail with FAILED_PRECONDITION
  // (or return defaults) before a successful Init.
  Status Init(const EnvMap& env);
  Status InitFromEnvironment() { return Init(ProcessEnv()); }
  bool initialized() const;
  // True when an agent socket is configured.
  bool managed() const;
  Config config() const;

  // Sends a `step` report: step_time = time since the previous report (or Init),
  // ckpt_stall = time spent in Save since then. A non-finite loss is sent as JSON
  // null. Never fails because the agent is absent.
  // `m`: optional per-step measurements (above).
  Status ReportStep(long step, double loss, long long tokens, const StepMetrics& m = {});
  // Declares the model's training FLOPs per token (6N + 12·L·H·Q·T, docs/monitoring.md)
  // for MFU: a `model` datagram to the agent. INVALID_ARGUMENT unless finite and > 0.
  Status SetModelFlops(double flops_per_token);
  long ResumeStep() const;
  // The training loop starts its first step now: the next ReportStep's step_time is
  // measured from here, not from Init (so building the model and loading the
  // checkpoint count as the generation's start-up, not as a step).
  void MarkStepStart();
  // interval > 0 && step % interval == 0.
  bool ShouldCheckpoint(long step) const;
  // Saves this rank's state of `step`. With a memory tier (BULWARK_STAGING_DIR)
  // it copies the tensors into the agent's staging ring and returns: the agent
  // seals it and persists it in the background when `step` is due for disk
  // (ShouldCheckpoint). Without one it writes the shard durably itself (in
  // standalone mode with world size 1 also committing it). Sends a `staged` or
  // `ckpt` report. The time spent is reported as ckpt_stall.
  // A full staging ring (every other slot pinned by the agent, which is behind) is
  // not an error: the save waits for a slot at most kRingWaitPersistS when `step` is
  // due for disk (kRingWaitS otherwise), then skips this snapshot with a warning
  // on stderr (at most one per 30 s) and counts it in snapshots_skipped().
  Status SaveTensors(long step, const std::vector<ckpt::TensorView>& tensors);
  static constexpr double kRingWaitS = 0.05;
  static constexpr double kRingWaitPersistS = 2.0;
  long snapshots_skipped() const;
  Status Save(long step, const std::vector<ckpt::Blob>& blobs);
  // Commits `step` for the whole world (all shards must be durable). The agent or
  // controller does this in managed mode; standalone multi-rank trainers call it on
  // one rank after a barrier.
  Status Commit(long step);
  // Loads this rank's blobs of committed `step` (-1 = the resume step). NOT_FOUND if
  // there is nothing to resume from; DATA_LOSS if the step is not committed/valid.
  Result<std::vector<ckpt::OwnedBlob>> Load(long step = -1);
  // Opens `step` (-1 = the resume step) on the fastest tier holding it, starting at
  // tier number `min_tier` (0 memory, 1 disk, 2 shared): callers that hit a
  // corrupt chunk reopen with the failed session's tier + 1. A tier that does not
  // hold the step, or whose copy fails verification, is skipped with its reason
  // appended to `skipped`. NOT_FOUND/DATA_LOSS naming every tier's reason if none.
  Result<std::unique_ptr<LoadSession>> OpenLoad(long step, int min_tier = 0,
                                                std::vector<std::string>* skipped = nullptr);
  static int TierNumber(const std::string& tier);
  // True once per `inject_nan` datagram received on the rank socket.
  bool PollInjectedNan();
  // True once per `inject_sdc` datagram (chaos sdc): the trainer then perturbs this
  // rank's parameters by a small amount, silently (bulwark.check_alignment does).
  bool PollInjectedSdc();
  // The bitwise alignment check (docs/diagnosis.md): a 64-bit digest of the parameters
  // this rank holds after `step`, which every rank of a data-parallel replica set must
  // hold bit for bit alike; `group` names the set ("" = every rank of the job).
  Status ReportDigest(long step, uint64_t digest, const std::string& group = "");
  // Seconds the data iterator should wait more per batch (chaos slow_data; 0 = none).
  double DataDelay();

  // In-process recovery (docs/sdk.md, "Generations"; docs/protocol.md section 2).
  // Declares that this rank runs its training function in generations: on a fault
  // elsewhere in the job it parks and re-enters instead of dying; `process_group`: each
  // generation forms a process group (the agent then starts the job's store). Re-sent
  // with every (re)Init.
  Status DeclareInProcess(bool process_group = true);
  bool in_process() const;
  // True once the agent asked this rank to abandon the current generation (an `abort`
  // for this attempt or a later one). Drains the rank socket: one recv per call.
  bool AbortRequested();
  // Waits up to timeout_s for the agent to ask this rank to abandon its generation (or
  // returns at once if it did): true if it did. Wakes on an `abort` datagram, and on an
  // abort another thread took from the socket (an eventfd), not on a timer; the lock is
  // not held while waiting. For the abort watcher of bulwark.run (any thread).
  bool WaitAbort(double timeout_s);
  // The rank left its generation, after an abort or on its own (`error`, e.g. a
  // collective that failed because a peer died): sends `parked` and forgets the abort.
  Status Park(const std::string& error);
  // The training function returned: sends `finished`, so the agent stops watching this
  // rank for progress while the process exits (an interpreter's exit can take seconds).
  // Waits for the outbox, as FlushReports.
  Status Finished();
  // Waits up to timeout_s for the reports the agent's full queue held back to go out
  // (the C API calls it at exit). True when none is left (or none can be sent: no agent).
  bool FlushReports(double timeout_s = kFlushWaitS);
  // Reports that waited in the outbox and were dropped because it was full.
  long reports_dropped() const;

  static constexpr size_t kMaxOutbox = 4096;
  static constexpr double kFlushWaitS = 2.0;
  // Waits up to timeout_s for the agent's `generation` message and returns it
  // ({"type": "generation", "attempt", "env": {...}}); DEADLINE_EXCEEDED if none came.
  // The caller applies `env` to the process environment and calls Init again.
  Result<Json> WaitGeneration(double timeout_s);
  long SkipFrom() const;
  long SkipTo() const;
  // True if `step`'s data batch falls in the skip range [SkipFrom, SkipTo).
  bool ShouldSkip(long step) const;

 private:
  // Queues `payload` behind the outbox and sends what the agent's queue takes.
  void SendLocked(std::string payload);
  // Sends from the outbox until it is empty (true) or the agent's queue is full (false).
  bool FlushOutboxLocked();
  // A forked child (a data loader's worker) inherits its parent's outbox: those reports
  // are the parent's to send, and the child's own start an outbox of their own.
  void DropInheritedReportsLocked();
  // FlushOutboxLocked until it empties or timeout_s passes, the lock held throughout.
  bool FlushWithinLocked(double timeout_s);
  void ResetLocked();
  // Reads every pending datagram from the agent into the flags below.
  void DrainLocked();
  // Sets abort_pending_ and makes abort_efd_ readable (or not) to match.
  void SetAbortLocked(bool pending);
  void SendHelloLocked();

  const Clock* clock_;
  mutable std::mutex mu_;
  bool initialized_ = false;
  Config cfg_;
  int fd_ = -1;  // owned: bound to rank_sock, or unbound for sending, or -1
  double last_mark_ = 0.0;
  double stall_s_ = 0.0;
  double last_cpu_ = -1;  // process CPU time at the previous report (busy)
  // Chaos injected through the rank socket (docs/protocol.md §2): slow_rank's factor,
  // slow_data's extra wait per batch, loss_spike's factor for the next report.
  double slow_factor_ = 0;
  double data_delay_s_ = 0;
  double loss_spike_factor_ = 0;
  double last_spin_s_ = 0;      // slow_rank's spin after the previous report
  double flops_per_token_ = 0;  // SetModelFlops (0 = not declared), re-sent in hello
  bool nan_pending_ = false;
  bool sdc_pending_ = false;
  bool in_process_ = false;     // DeclareInProcess was called
  bool process_group_ = false;  // ... for generations that form a process group
  bool abort_pending_ = false;  // an abort for this attempt arrived (SetAbortLocked)
  // Readable while abort_pending_ (WaitAbort); this process's own, made at Init.
  int abort_efd_ = -1;
  pid_t abort_efd_pid_ = 0;
  std::optional<Json> next_gen_;          // the newest `generation` not yet taken
  std::unique_ptr<ckpt::Stager> stager_;  // lazily opened memory tier
  long skipped_ = 0;                      // snapshots skipped: ring full
  std::deque<std::string> outbox_;        // reports the agent's full queue held back
  pid_t outbox_pid_ = 0;                  // the process they are from (a fork's are not)
  long outbox_dropped_ = 0;
  double next_skip_warning_ = 0;
};

}  // namespace bulwark::sdk
