// The node agent: launches this node's ranks on the controller's orders, forwards SDK
// reports, detects faults (crash, fatal log line, NaN loss, hang) and reports them.
//
// One Agent per process; Run() is a single-threaded poll loop (<= 50 ms per turn) over
// the controller connection, the adopt listener, the SDK datagram socket, every rank's
// output pipe and timers. Fault decisions are delegated to FaultDetector (pure,
// clock-driven). Time and processes come through the injected Clock and Processes, so
// the whole loop runs in unit tests on a FakeClock with fake processes (Start, then
// RunOnce). The agent never leaves a process behind: every exit path stops and reaps
// its ranks, its warm ranks and its store server.
//
// In-process recovery (docs/agent.md, "Generations"): a `stop` with `park` asks the
// ranks that run their training function in generations to leave the current one
// (datagram `abort`) and kills only the culprits; survivors stay alive, parked, and the
// next `start` sends them `generation` instead of spawning them again. Missing ranks
// come from the warm pool: Python processes that already imported torch and the SDK
// and wait on stdin for their rank's argv and environment.
#pragma once

#include <atomic>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/ckpt_ops.h"
#include "agent/fault_detector.h"
#include "agent/rank_env.h"
#include "agent/stack_capture.h"
#include "ckpt/object_tier.h"
#include "ckpt/peer.h"
#include "ckpt/persister.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/proc.h"
#include "common/shm_dir.h"
#include "common/timers.h"
#include "gpu/nvml.h"
#include "metrics/exposition.h"
#include "metrics/http_endpoint.h"

namespace bulwark {

struct AgentOptions {
  std::string controller_host = "127.0.0.1";
  int controller_port = 0;
  std::string node = "node-0";
  std::string run_dir;  // sockets live in <run_dir>/<node>/
  double heartbeat_interval_s = 1;
  double connect_timeout_s = 30;  // keep retrying the controller this long
  std::string python_dir;         // prefixed to the ranks' PYTHONPATH ("" = untouched)
  std::string lib_path;           // BULWARK_LIB ("" = unset)
  StackCaptureOptions stacks;
  // Peer replication: this agent's PeerServer binds here; peers reach it at this
  // address (the node's address on the training network). Port 0 = ephemeral.
  std::string peer_host = "127.0.0.1";
  int peer_port = 0;
  int replica_slots = 3;  // replicas kept per rank of other nodes
  // Controller loss. When the controller's connection closes, the ranks keep running
  // this long while a controller (restarted `bulwark run`, a new operator leader) may
  // adopt this agent by dialling its adopt port (peer_host:adopt_port; 0 = ephemeral,
  // reported in hello); after that they are stopped and Run() returns
  // kAgentExitControllerLost. 0 = stop them at once. docs/protocol.md, "Adoption".
  double orphan_timeout_s = 60;
  int adopt_port = 0;
  // How ranks are spawned, signalled and reaped (not owned); null = Processes::Real().
  Processes* procs = nullptr;
  // Prometheus /metrics (docs/monitoring.md) on HOST:PORT ("" = none; port 0 = a free
  // one, reported in hello as metrics_port).
  std::string metrics_addr;
  // NVML, loaded at run time for GPU health ("" = do not look for a GPU).
  std::string nvml_library = "libnvidia-ml.so.1";
  // The matmul check's CUDA runtime and cuBLAS ("auto": the usual names; "": the CPU
  // only; diag::CheckSpec).
  std::string cuda_runtime = "auto";
  std::string cublas = "auto";
  // How this agent runs `bulwark-agent diagnose` (diag::RunOptions::agent_command);
  // empty = SelfCommand() (common/install_paths.h).
  std::vector<std::string> self_command;
};

// Exit codes of Run().
inline constexpr int kAgentExitOk = 0;              // shutdown order, SIGTERM or SIGINT
inline constexpr int kAgentExitSetupFailed = 2;     // bad paths, no controller
inline constexpr int kAgentExitControllerLost = 3;  // controller connection closed

class Agent {
 public:
  // Step reports of a rank reach the controller at most this often; faster ones are
  // merged into the next (ForwardStep).
  static constexpr double kMaxStepForwardHz = 200;

  Agent(AgentOptions opts, const Clock* clock);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Connects, says hello, and serves until shutdown, a termination signal or loss of
  // the controller. Returns one of the kAgentExit* codes; all ranks are dead and reaped.
  int Run();
  // The same in steps, for tests on a FakeClock: Start() connects and says hello;
  // RunOnce() is one turn of the loop and returns an exit code once the agent is done
  // (-1 while it runs). Run() == Start(), then RunOnce() until it returns >= 0.
  Status Start();
  int RunOnce();
  // Async-signal-safe: asks Run() to stop all ranks and return kAgentExitOk.
  static void RequestTermination(int sig);

 private:
  struct Rank {
    int rank = -1;
    int local_rank = -1;
    pid_t pid = -1;
    pid_t pgid = -1;
    bool alive = false;
    Fd out;
    std::string partial;           // output after the last newline
    std::deque<std::string> tail;  // last kTailLines lines
    std::FILE* log = nullptr;
    std::string stack_file;
    bool in_process = false;  // its SDK runs the training function in generations
    bool parked = false;      // left its generation alive; waits for the next one
    // Asked to park while its socket's queue was full: `abort` goes again every loop
    // turn until it is sent, the rank parks or the park times out (AdvancePark).
    bool abort_unsent = false;
    // Step reports faster than kMaxStepForwardHz are merged here (ForwardStep).
    Json step_pending;
    double step_forwarded_at = -1;  // mono time of the last step forwarded
    bool retired = false;           // killed: the new attempt has no place for it
    std::string how;                // this attempt: "spawned", "warm" (from the pool) or "kept"
    double launched_mono = 0;       // when it joined the current attempt
    bool exit_pending = false;      // exited 0; `exited` waits for its last persists
    double exit_deadline = 0;
    std::string version;  // the code version it runs (StartSpec::version)
  };
  // A warm rank: a Python process that imported torch and the SDK and waits on stdin
  // for its assignment ({"argv", "env", "cwd"}, docs/agent.md).
  struct WarmRank {
    pid_t pid = -1;
    pid_t pgid = -1;
    Fd out;
    Fd in;
    std::string partial;
    bool ready = false;  // said warm_ready (imports done)
  };
  // What warm ranks are made for: the rank command and environment of the job.
  struct WarmSpec {
    StartSpec spec;  // command, env, workdir, log_dir, version (ranks, ports: unused)
    int size = 0;
  };

  Status Setup();
  // hello: who this agent is and, for an adopting controller, what it is running.
  void SendHello();
  // The controller's connection closed: orphaned (ranks keep running) or, without an
  // orphan timeout, false (the caller stops everything).
  bool OnControllerLost();
  // Adopt port: while orphaned, an `adopt` naming this agent's job, run and node makes
  // its connection the controller's (a newer adopter replaces an older controller);
  // anything else is refused and closed.
  void AcceptAdopters();
  void HandleController(const Json& msg);
  void HandleStart(const Json& msg);
  void HandleStop(const Json& msg);
  void HandleChaos(const Json& msg);
  // `diagnose` (agent_diagnose.cc, docs/protocol.md): runs the node's checks on
  // diag_thread_, one request at a time; the `diagnosis` reply goes through outbox_.
  void HandleDiagnose(const Json& msg);
  // `link_peers`: the ring of the link check of the `diagnose` in progress.
  void HandleLinkPeers(const Json& msg);
  // Another node reported a hang: capture this node's stacks now and send `stacks`.
  void HandleCaptureStacks(const Json& msg);
  // `cadence`: the controller's new disk interval for the running attempt.
  void HandleCadence(const Json& msg);
  // Captures every live rank's stack; fills `stopped` with ranks in state 'T'.
  Json CaptureAllStacks(std::vector<int>* stopped);
  void HandleDatagram(const std::string& payload);
  // Forwards a rank's step report to the controller, merging reports that come faster
  // than kMaxStepForwardHz into the next (counted as dropped, reason "flood");
  // FlushPendingSteps sends a merged one once the gap has passed (every loop turn).
  void ForwardStep(Rank& r, Json out);
  // Sends rank r's step report held back by the rate limit, now (before its exit or
  // an incident).
  void FlushStep(Rank& r);
  void FlushPendingSteps();
  // At the end of a stop (its ranks dead or parked, `stopping_` still set): what they
  // sent before is in the socket's queue; their steps, and those the rate limit held
  // back, go to the controller before the stop's report.
  void TakeLastReports();
  // Forwards a rank's declared model FLOPs per token (`model`, or a hello carrying it).
  void ForwardModel(const Json& m, const Rank& r);
  // Warn, at most once a minute per kind of message (bad values a trainer repeats).
  void WarnLimited(const std::string& msg);
  // agent_metrics.cc: NVML and the /metrics port (Start), GPU polls and events,
  // re-rendering the metrics text (every heartbeat).
  void StartMetrics();
  void PollGpus();
  void RefreshMetrics();
  std::vector<std::string> GpuNames() const;
  int metrics_port() const;
  void Launch(const StartSpec& spec);
  // A process for local rank `local` of `spec`: the parked process of that rank (sent
  // `generation`), else a warm rank (assigned), else a new one. False if none started
  // (*why says why).
  bool StartRank(const StartSpec& spec, int local, const std::map<std::string, std::string>& base,
                 Rank* r, std::string* why);
  bool SendGeneration(const StartSpec& spec, int local, Rank& r);
  // `prepare`: the job's rank command, for the warm pool of an agent with no ranks yet.
  void HandlePrepare(const Json& msg);
  // Generations: a park in progress (BeginPark from a `stop` with `park`), a rank's
  // `parked` datagram, the end of the park.
  void BeginPark(long reply_attempt, const std::vector<int>& kill, double timeout_s);
  void AdvancePark();
  // Sends r `abort` {attempt}; false (and r is killed) when it cannot be told. A full
  // socket queue is not that: r.abort_unsent is set and AdvancePark sends it again.
  bool SendAbort(Rank& r, long attempt);
  // Stacks of the ranks that did not park by the deadline (bounded, 1 s), written to
  // <log_dir>/park-attempt-N-<node>-stacks.txt before they are killed; its path or "".
  std::string SaveLateParkerStacks();
  void FinishPark();
  void OnParked(const Json& m, Rank& r);
  // The warm pool (agent_warm.cc).
  void SetWarmSpec(const StartSpec& spec, int size);
  // The fork server (python/bulwark/zygote.py) warm ranks are forked from: usable for
  // the warm spec (a Python rank command, warm ranks wanted, this agent a subreaper).
  bool ZygoteUsable() const;
  // A warm rank forked from the ready zygote; nullopt if it is not ready or the fork
  // failed (ZygoteFailed).
  std::optional<WarmRank> ForkWarm();
  void EnsureZygote();
  void KillZygote();
  // SIGKILLs the group of a helper process (warm rank, zygote, store) and reaps it,
  // waiting at most kHelperKillWaitS.
  void KillHelper(pid_t pid, pid_t pgid);
  // The zygote failed (died and was `reaped`, or a fork request failed: killed now):
  // back off, or give up on it.
  void ZygoteFailed(const std::string& why, bool reaped);
  // Whether `spec`'s launch should wait for the zygote's imports: it needs more new
  // processes than the pool holds and the zygote is importing (started now if
  // absent), for at most kZygoteWaitS. Then the launch is kept in zygote_wait_.
  bool WaitForZygote(const StartSpec& spec);
  // Launches zygote_wait_ once the zygote is ready, failed, or the wait expired.
  void MaybeLaunchAfterZygote();
  void MaybeFillPool();
  std::optional<WarmRank> TakeWarm();
  Status AssignWarm(WarmRank& w, const StartSpec& spec,
                    const std::map<std::string, std::string>& env);
  void PumpWarm();
  void KillWarm();
  // Tells the controller how many warm ranks of which code version are ready, when it
  // changed since the last report.
  void ReportWarm();
  // The long-lived store server (slot 0's agent): wanted once a rank of slot 0 runs
  // generations that form process groups, started when no rank of this node is
  // starting (its torch import would slow theirs; generation 0 does not need it).
  void MaybeStartStore();
  // Whether a rank of this node is still starting: it has not reported a step and has
  // run less than kRankStartupS (a script without the SDK never reports one).
  bool NodeRanksStarting() const;
  void EnsureStore(const StartSpec& spec);
  void PumpStore();
  void KillStore();
  // pids of live helper processes (warm ranks, store), which ReapRanks leaves to their
  // owners; reaps those that exited.
  void ReapHelpers(std::set<pid_t>* tracked);
  void BeginStop(double grace_s, long reply_attempt);
  void AdvanceStop();
  void FinishStop();
  // Launches the start that waited for a stop or park to end, if any.
  void LaunchPendingStart();
  void StopAllBlocking();
  void PumpOutput(Rank& r, bool final);
  void EmitLine(Rank& r, const std::string& line);
  void ReapRanks();
  void OnRankExit(Rank& r, const ExitInfo& e);
  // Sends `exited` for ranks that exited 0 once the persister is idle (or after
  // kFinalPersistTimeoutS).
  void ReportExits();
  void CheckHangs();
  void SendIncident(const DetectedFault& f, const Json& stacks);
  void MaybeHeartbeat(bool force = false);
  void Send(const Json& msg);
  Rank* FindRank(int global_rank);
  int RanksAlive() const;
  void CloseRanks();
  std::string LogTail(const Rank& r) const;
  // Memory tier: (re)creates the persister for `spec`'s checkpoint settings.
  void EnsurePersister(const StartSpec& spec);
  void OnStaged(const Json& m, int rank);
  // Sealed steps per rank of this node, for the `stopped` report: `steps` (rank -> sealed
  // steps) and `portable` (rank -> step -> digest, ckpt::PortableDigest: the steps
  // another rank may restore from).
  struct MemInventory {
    Json steps = Json::object();
    Json portable = Json::object();
  };
  MemInventory MemoryInventory(const StartSpec& spec);
  void DrainOutbox();
  // Launches spec's ranks, first fetching spec.fetch from peers (on a background
  // thread, BeginFetch; FinishFetchIfDone launches when it ends).
  void FetchThenLaunch(const StartSpec& spec);
  void BeginFetch(const StartSpec& spec);
  void FinishFetchIfDone();
  Json ReplicaInventory();
  // A TCP port free on this host right now, for the ranks' rendezvous when this node
  // serves slot 0 (`free_port` in hello and stopped); 0 if none could be bound. Racy
  // by nature: the port is released before a rank binds it (docs/protocol.md).
  static int FreePort();
  // `stopped` for `attempt` with this node's memory inventory `mem` (empty when no
  // ranks ran), its replicas and a fresh free_port; `parked` lists the ranks kept alive
  // for the next generation ([{rank, pid}]).
  void SendStopped(long attempt, MemInventory mem, Json parked = Json::array());

  AgentOptions opts_;
  const Clock* clock_;
  Processes* procs_;
  AgentPaths paths_;
  ShmDirLease staging_lease_;  // paths_.staging_dir on /dev/shm, locked while we live
  std::optional<JsonLineConn> conn_;
  // Adoption (docs/protocol.md): identity learnt from `welcome`/`start`, the listener,
  // connections that have not said `adopt` yet, and what to tell the next controller.
  std::string job_, run_id_;
  int slot_ = -1;  // the slot of the running attempt (-1: a standby, or none)
  Fd adopt_listen_;
  int adopt_port_ = 0;
  std::vector<std::unique_ptr<JsonLineConn>> adopters_;
  double orphaned_at_ = -1;   // mono time the controller was lost; -1 = connected
  std::deque<Json> backlog_;  // reports made while orphaned, for the adopter
  // The running attempt's outcome reports (`incident`, `exited`) sent while a controller
  // was connected: a controller lost before it acted on one (a NaN held for attribution,
  // an exit it had not counted) would otherwise leave the adopter without it, so they
  // are sent again, before the backlog. Emptied when an attempt starts or a stop ends.
  std::vector<Json> outcomes_;
  Fd dgram_;
  FaultDetector detector_;
  std::optional<StartSpec> spec_;  // the running (or stopping) attempt
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  bool stop_killed_ = false;
  double stop_deadline_ = 0;
  long stop_reply_attempt_ = -1;  // `stopped` attempt to send when the stop ends; -1 none
  std::optional<StartSpec> pending_start_;
  bool parking_ = false;      // the stop in progress parks survivors (BeginPark)
  bool park_killed_ = false;  // the park deadline passed and stragglers were killed
  Timers timers_;             // "park", "park_kill", "warm_retry", "zygote_retry", "zygote_wait"
  WarmSpec warm_spec_;
  std::vector<WarmRank> warm_;
  int warm_failures_ = 0;      // consecutive warm ranks that died before assignment
  std::string warm_reported_;  // "<version>/<ready>" last sent in `warm`
  bool warm_disabled_ = false;
  struct StoreServer {
    pid_t pid = -1;
    pid_t pgid = -1;
    Fd out;
    std::string partial;
    int port = 0;  // once it said it listens
  } store_;
  bool store_wanted_ = false;
  struct ZygoteServer {
    pid_t pid = -1;
    pid_t pgid = -1;
    Fd out;
    Fd control;  // the agent's end of the fork channel
    std::string partial;
    bool ready = false;  // said zygote_ready: its imports are done
    double started_mono = 0;
  } zygote_;
  int zygote_failures_ = 0;  // consecutive failures (deaths, failed forks)
  bool zygote_disabled_ = false;
  std::optional<StartSpec> zygote_wait_;  // a launch waiting for the zygote's imports
  bool subreaper_ = false;                // forked ranks are reparented to this agent
  bool shutdown_requested_ = false;
  double next_heartbeat_ = 0;
  std::unique_ptr<ckpt::Persister> persister_;
  std::string persister_key_;  // the settings persister_ was made for
  std::mutex outbox_mu_;
  std::vector<Json> outbox_;   // messages from the persister thread
  double next_peer_warn_ = 0;  // rate limit of peer push warnings
  std::unique_ptr<ckpt::PeerServer> peer_;
  std::string object_url_;  // what object_ was opened for
  std::unique_ptr<ckpt::ObjectTier> object_;
  // In-flight fetch of peer snapshots for `fetching_` (a start waiting for it).
  std::optional<StartSpec> fetching_;
  bool fetch_cancelled_ = false;  // a stop arrived for fetching_'s attempt
  std::thread fetch_thread_;
  std::atomic<bool> fetch_done_{false};
  std::vector<Json> fetch_results_;  // written by the fetch thread before fetch_done_
  // Checkpoint catalog requests of a controller without the checkpoint file system;
  // replies go through outbox_. Created on the first request.
  std::unique_ptr<CatalogWorker> catalog_;
  // Diagnostics in progress (HandleDiagnose); joined by the next request or ~Agent,
  // bounded by the checks' budgets.
  std::thread diag_thread_;
  std::atomic<bool> diag_busy_{false};
  std::atomic<bool> diag_cancel_{false};  // ~Agent: start no further check
  // Chaos `sdc`: this node's compute is silently wrong from now on; its compute check
  // fails as such a machine's would (docs/chaos.md).
  bool sdc_injected_ = false;
  // The link check of the `diagnose` in progress: its listening socket (bound when the
  // request came) and, once `link_peers` came, the ring ("host:port,..."); guarded by
  // link_mu_, which the diag thread polls for link_peers_ (bounded by its budget).
  std::mutex link_mu_;
  int link_id_ = -1;
  std::string link_peers_;  // "-": the ring was called off
  int link_index_ = 0;
  // Chaos `slow_link`: this node's link sockets send at this many MiB/s from now on (a
  // bad NIC's transmit side), and its ranks are slowed like slow_rank's. 0 = healthy.
  double link_throttle_mib_s_ = 0;
  static constexpr double kSlowLinkMiBps = 2;
  std::map<std::string, double> warned_at_;  // WarnLimited: message kind -> mono time
  // Metrics (agent_metrics.cc). The HTTP threads read only metrics_text_.
  std::mutex metrics_mu_;
  std::string metrics_text_;  // guarded by metrics_mu_
  long long reports_total_ = 0;
  std::map<std::string, long long> reports_dropped_;  // by reason
  std::map<std::string, long long> faults_detected_;  // by kind
  metrics::Histogram step_hist_ = metrics::Histogram::Exponential(0.001, 2, 17);
  std::unique_ptr<gpu::Nvml> nvml_;
  std::vector<gpu::GpuSample> gpus_;
  std::map<int, unsigned long long> last_xid_;
  double gpu_polled_at_ = -1;
  // Last: destroyed (its threads joined) before what they read.
  std::unique_ptr<metrics::HttpEndpoint> http_;
};

}  // namespace bulwark
