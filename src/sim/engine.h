// The discrete-event engine behind RunSimulation. Internal to src/sim.
//
// Events live in one binary heap ordered by (time, sequence number); the sequence
// number is assigned at push, so ties resolve in push order, deterministically. All
// events of one timestamp are handled before the scheduler runs once for that
// timestamp (batched Schedule()). Stale events (a job restarted, a node repaired) are
// recognised by an epoch stamp and dropped.
//
// Job timeline (closed form, job_model.cc): after an admission or a recovery decision,
// the job works through `plan` (backoff, replacement wait, restart + load segments)
// until t0, then computes from progress w0: cycles of `interval` compute seconds
// followed by a blocking checkpoint of w seconds; progress advances at rate rho (< 1
// with per-step in-memory snapshots). Only the finish time is an event.
#pragma once

#include <cstdint>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "policy/recovery_policy.h"
#include "sched/scheduler.h"
#include "sim/random.h"
#include "sim/sim.h"

namespace bulwark::sim {

enum class EvType : uint8_t {
  kArrival,
  kNodeFail,
  kSpotFail,
  kInjected,
  kRepair,
  kDetect,
  kFinish,
  kWake,
  kEnd
};

struct Event {
  double t = 0;
  uint64_t seq = 0;
  EvType type = EvType::kWake;
  int a = 0;           // job or node index
  int b = 0;           // fault type for kInjected
  uint32_t epoch = 0;  // must match the job's / node's epoch, else stale
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

enum class JobState : uint8_t { kNotArrived, kPending, kRunning, kDown, kDone, kFailed };

struct Segment {
  double a = 0, b = 0;
  double LostTime::*bucket = nullptr;
};

struct SimJob {
  Job cfg;
  const Strategy* st = nullptr;
  int gpus = 0;          // cfg.nodes x GPUs per node
  int standby_want = 0;  // standby nodes requested
  JobState state = JobState::kNotArrived;
  uint32_t epoch = 0;
  bool started = false;
  double first_start = -1, end = -1;
  double pending_since = -1;  // pending again after a start (requeue / preemption)
  // Current attempt.
  std::vector<Segment> plan;  // recovery segments before t0
  double t0 = 0, w0 = 0, interval = 0, rho = 1;
  double work_ckpt = 0;  // progress at the newest persisted checkpoint
  double max_progress = 0;
  double work_total = 0;  // progress made incl. later-lost work (step count)
  // Down (awaiting detection).
  double fault_t = 0, p_fault = 0;
  FaultType fault_type = FaultType::kCrash;
  int fault_slot = -1;
  struct DeadNode {
    int node;
    double t;
    bool spot;
  };
  std::vector<DeadNode> dead;  // lost nodes (hardware / spot reclaim), handled at detection
  // Placement mirror.
  std::vector<int> nodes, standby;
  // Accounting and history.
  LostTime lost;
  std::array<int, kFaultTypes> faults{};
  int restarts = 0, requeues = 0, preemptions = 0, replacements = 0, restocks = 0;
  int consecutive = 0;
  long hw_at_last_incident = -2;
  double node_seconds = 0;  // for the cadence failure-rate estimate
  int job_faults = 0;
  std::vector<Incident> incidents;
  std::vector<long> progress_at_incident;
  std::string reason;
};

struct NodeState {
  int owner = -1;  // job index, -1 idle
  bool standby = false;
  double warm_at = 0;  // a standby is ready to take over from this time
  bool down = false;
  uint32_t epoch = 0;  // bumps when the node goes down (drops its pending failures)
};

class Engine {
 public:
  explicit Engine(const SimConfig& c);
  Result<SimResult> Run();

 private:
  // Event plumbing.
  void Push(double t, EvType type, int a, int b = 0, uint32_t epoch = 0);
  void DrawNodeFailure(int node, double now);
  void DrawSpotFailure(int node, double now);
  // Handlers (engine.cc).
  Status OnArrival(int j, double t);
  Status OnFault(int node, FaultType type, double t);
  Status OnDetect(int j, double t);
  Status OnFinish(int j, double t);
  Status OnRepair(int node, double t);
  Status RunSchedule(double t);
  void Admit(int j, double t);
  void Preempt(int j, double t);
  Status NodeOut(int node, double fault_t, double t, bool spot);
  void Refresh(int j);     // mirror the scheduler's placement of job j
  void Release(int j);     // clear the mirror
  void Advance(double t);  // integrate allocations up to t
  void Sample(double t);
  // Job model (job_model.cc).
  void StartAttempt(SimJob& j, double t, double restart_s, double load_s, double backoff_s,
                    double lead_s);
  double ProgressAt(const SimJob& j, double t) const;  // no side effects
  double ClosePhase(SimJob& j, double t);              // accounts up to t, returns progress
  double FinishTime(const SimJob& j) const;
  double Retained(const SimJob& j, bool hardware, bool memory_survives) const;
  double ChooseInterval(const SimJob& j) const;
  Status Finalize(double t_end);
  int IndexOf(const std::string& id) const;  // job index by id, -1 if unknown

  const SimConfig& c_;
  std::unique_ptr<sched::Scheduler> sched_;
  std::vector<SimJob> jobs_;
  std::vector<NodeState> nodes_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  uint64_t seq_ = 0;
  Rng fail_rng_, work_rng_;
  std::array<double, kFaultTypes> share_{};  // of the non-spot rate
  double node_rate_ = 0, spot_rate_ = 0;     // per second per node
  double weibull_scale_ = 0;
  bool dirty_ = false;
  double last_t_ = 0;
  // Integrals and counters.
  double alloc_gpus_ = 0, standby_gpus_ = 0;
  std::array<double, 3> alloc_pool_gpus_{};
  double alloc_gpu_s_ = 0, standby_gpu_s_ = 0;
  std::array<double, 3> alloc_pool_gpu_s_{};
  int failed_nodes_ = 0;
  double productive_done_gpu_s_ = 0;  // finished / failed jobs
  double next_sample_ = 0;
  SimResult r_;
  std::unordered_map<std::string, int> index_;
};

}  // namespace bulwark::sim
