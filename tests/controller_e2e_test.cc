// End-to-end, in process: Controllers run as the Kubernetes operator runs them — on
// threads of one process, with the options a cluster needs — over real agent
// processes (local backend, possibly wrapped) and the tiny SDK trainer:
//  * remote checkpoint file system + rendezvous on the slot-0 agent + advertise/bind
//    hosts, through a crash and a node loss, with an Env that fails every call given
//    to the controller (it must never touch the checkpoint directory);
//  * the object tier with the remote catalog: agents commit on S3 and restore from it;
//  * a backend that has no capacity for a while (UNAVAILABLE), then has;
//  * two controllers at once, one cancelled, with Status() read from another thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "backend/local_backend.h"
#include "ckpt/object_tier.h"
#include "controller/controller.h"
#include "e2e_util.h"
#include "objstore/s3_test_server.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using e2e::E2EBase;
using e2e::kFastPolicy;
using e2e::Now;

// Fails every call: given to a controller that must not touch checkpoint files.
class ForbiddenEnv : public ckpt::Env {
 public:
  std::atomic<int> calls{0};
  Result<std::unique_ptr<ckpt::WritableFile>> NewWritableFile(const std::string& p) override {
    return Refuse(p);
  }
  Result<std::unique_ptr<ckpt::ReadableFile>> OpenReadable(const std::string& p) override {
    return Refuse(p);
  }
  Status Rename(const std::string& a, const std::string&) override { return Refuse(a); }
  Status RemoveFile(const std::string& p) override { return Refuse(p); }
  Status RemoveDir(const std::string& p) override { return Refuse(p); }
  Status MkdirAll(const std::string& p) override { return Refuse(p); }
  Status SyncDir(const std::string& p) override { return Refuse(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return Refuse(p); }
  Result<uint64_t> FileSize(const std::string& p) override { return Refuse(p); }
  bool IsDir(const std::string& p) override { return !Refuse(p).ok(); }

 private:
  Status Refuse(const std::string& path) {
    calls++;
    return PermissionDenied("the controller touched " + path);
  }
};

// The local backend, with the Kubernetes backend's extra answers scripted: which
// standby to promote, and "no capacity yet" for the first StartNode calls of a node.
class ScriptedBackend : public Backend {
 public:
  explicit ScriptedBackend(LocalBackendOptions o) : local_(std::move(o)) {}
  const char* Name() const override { return "scripted-local"; }
  Status StartNode(const NodeRequest& req) override {
    std::lock_guard<std::mutex> l(mu);
    // On the controller's clock (the tests give it SystemClock): its retry spacing.
    start_calls.push_back({req.node_id, req.slot, SystemClock::Get()->NowMono()});
    if (unavailable_left > 0 && req.slot == 0) {
      --unavailable_left;
      return Unavailable(unavailable_left > 2
                             ? "0/3 nodes are available: insufficient nvidia.com/gpu"
                             : "pod node-0 is ContainerCreating");
    }
    return local_.StartNode(req);
  }
  Status KillNode(const std::string& id) override { return local_.KillNode(id); }
  Status ReleaseNode(const std::string& id, double grace_s) override {
    return local_.ReleaseNode(id, grace_s);
  }
  std::vector<NodeLoss> Poll() override { return local_.Poll(); }
  Status Teardown(double grace_s) override { return local_.Teardown(grace_s); }
  std::string PreferredSpare(int slot, const std::vector<std::string>& ready) override {
    std::lock_guard<std::mutex> l(mu);
    preferred.push_back({slot, ready});
    return ready.back();  // not the controller's default (the first)
  }
  void OnSlotAssigned(const std::string& id, int slot) override {
    std::lock_guard<std::mutex> l(mu);
    assigned.push_back({id, slot});
  }

  struct Call {
    std::string node;
    int slot;
    double t;
  };
  std::mutex mu;
  int unavailable_left = 0;
  std::vector<Call> start_calls;
  std::vector<std::pair<int, std::vector<std::string>>> preferred;
  std::vector<std::pair<std::string, int>> assigned;

 private:
  LocalBackend local_;
};

struct EventRecord {
  std::string reason, message;
  bool warning = false;
};

// Events a controller reported through on_event; thread-safe.
class EventLog {
 public:
  std::function<void(const std::string&, const std::string&, bool)> Sink() {
    return [this](const std::string& r, const std::string& m, bool w) {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back({r, m, w});
    };
  }
  std::vector<EventRecord> Of(const std::string& reason) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<EventRecord> out;
    for (const auto& e : events_) {
      if (e.reason == reason) out.push_back(e);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<EventRecord> events_;
};

// One job run by its own Controller on its own thread, as the operator runs them.
struct ThreadedJob {
  explicit ThreadedJob(LocalBackendOptions o) : backend(std::move(o)) {}
  ~ThreadedJob() {
    if (thread.joinable()) thread.join();
  }
  const Result<RunResult>& Join() {
    thread.join();
    return result;
  }
  LocalBackend backend;
  std::unique_ptr<Store> store;
  EventLog log;
  std::unique_ptr<Controller> controller;
  Result<RunResult> result = Internal("not run");
  std::thread thread;
};

class ControllerE2E : public E2EBase {
 protected:
  LocalBackendOptions AgentOptions(double heartbeat_s = 0.5) const {
    LocalBackendOptions o;
    o.agent_binary = build_ + "/bin/bulwark-agent";
    o.python_dir = src_ + "/python";
    o.sdk_lib = build_ + "/lib/libbulwark.so";
    o.heartbeat_interval_s = heartbeat_s;
    return o;
  }
  JobSpec Spec(const std::string& name, int nodes, int steps, const std::string& extra,
               const std::string& env_extra = "") {
    auto spec = LoadJobSpec(WriteSpec(name, nodes, 1, steps, extra, "", env_extra));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return spec.ok() ? *spec : JobSpec{};
  }
  std::unique_ptr<Store> OpenStore(const std::string& name) {
    auto s = Store::Open(dir_ + "/" + name + ".db");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // Starts `spec` on a thread, with checkpoints, store and run dir named by `key`.
  std::unique_ptr<ThreadedJob> RunOnThread(JobSpec spec, const std::string& key) {
    spec.checkpoint.dir = dir_ + "/ckpt-" + key;
    auto j = std::make_unique<ThreadedJob>(AgentOptions());
    j->store = OpenStore(key);
    j->controller = std::make_unique<Controller>(spec, Options("run-" + key, &j->log), &j->backend,
                                                 j->store.get(), SystemClock::Get());
    ThreadedJob* raw = j.get();
    j->thread = std::thread([raw] { raw->result = raw->controller->Run(); });
    return j;
  }
  ControllerOptions Options(const std::string& run, EventLog* log) const {
    ControllerOptions o;
    o.run_dir = dir_ + "/" + run;
    o.agent_connect_timeout_s = 60;
    o.on_event = log->Sink();
    return o;
  }
};

TEST_F(ControllerE2E, RemoteCheckpointsAgentRendezvousCrashAndNodeLoss) {
  JobSpec spec = Spec("remote", 2, 120,
                      "faultPolicy: {restartBudget: 5, backoff: {baseSeconds: 0.1, capSeconds: 1}, "
                      "heartbeat: {intervalSeconds: 0.5, misses: 3}, stopGraceSeconds: 1, "
                      "spareNodes: 2}\n"
                      "chaos: [{kind: kill_rank, atStep: 35, rank: 1}, "
                      "{kind: kill_agent, atStep: 70, node: 1}]\n");
  ScriptedBackend backend(AgentOptions());
  auto store = OpenStore("remote");
  ForbiddenEnv forbidden;
  EventLog log;
  ControllerOptions o = Options("run", &log);
  o.bind_host = "0.0.0.0";
  o.advertise_host = "127.0.0.1";
  o.remote_checkpoint_fs = true;
  o.rendezvous_on_agent = true;
  o.ckpt_env = &forbidden;
  Controller c(spec, o, &backend, store.get(), SystemClock::Get());
  ASSERT_TRUE(c.Start().ok());
  EXPECT_EQ(c.Address().rfind("127.0.0.1:", 0), 0u) << c.Address();
  auto r = c.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->phase, JobPhase::kSucceeded) << r->message << "\n" << r->report.dump(2);
  EXPECT_EQ(r->report["last_step"], 120);
  EXPECT_EQ(forbidden.calls.load(), 0) << "the controller touched the checkpoint files";

  // The agents committed (the controller only ordered it): COMMIT files on disk, and
  // the controller learnt the committed steps from the replies.
  const Json& committed = r->report["checkpoints"]["committed"];
  ASSERT_FALSE(committed.empty()) << r->report.dump(2);
  EXPECT_EQ(committed.back(), 120);
  // keep: 3, applied by the agent, which also keeps the checkpoint of each incident's
  // replay bundle (the "pinned" steps of its request).
  std::set<long> kept = {committed.back().get<long>()};
  for (const Json& inc : r->report["incidents"]) {
    if (inc["replay"]["checkpoint_step"].get<long>() >= 0)
      kept.insert(inc["replay"]["checkpoint_step"].get<long>());
  }
  EXPECT_LE(committed.size(), 3u + kept.size() - 1) << committed.dump();
  for (long pinned : kept) {
    EXPECT_NE(std::find(committed.begin(), committed.end(), pinned), committed.end())
        << "retention removed step " << pinned << ", which a replay bundle needs";
  }
  for (const auto& s : committed) {
    char name[64];
    std::snprintf(name, sizeof name, "/ckpt/step-%012ld/COMMIT", s.get<long>());
    EXPECT_TRUE(fs::exists(dir_ + name)) << name;
  }
  const ControllerStatus st = c.Status();
  EXPECT_EQ(st.stage, "Done");
  EXPECT_EQ(st.phase, JobPhase::kSucceeded);
  EXPECT_EQ(st.last_committed_step, 120);
  EXPECT_EQ(st.last_committed_tier, "disk");
  EXPECT_GT(st.end_time, st.start_time);
  EXPECT_EQ(st.restarts, 2);

  const Json* crash = FirstIncident(r->report, "crash");
  ASSERT_NE(crash, nullptr) << r->report.dump(2);
  EXPECT_EQ((*crash)["action"], "restart_in_place");
  const Json* lost = FirstIncident(r->report, "node_lost");
  ASSERT_NE(lost, nullptr) << r->report.dump(2);
  EXPECT_EQ((*lost)["action"], "replace_node");
  EXPECT_GE((*lost)["resumed_from_step"].get<long>(), 30);

  // The standby the backend preferred (the last ready one) took the slot.
  {
    std::lock_guard<std::mutex> l(backend.mu);
    ASSERT_EQ(backend.preferred.size(), 1u);
    EXPECT_EQ(backend.preferred[0].first, 1);
    EXPECT_EQ(backend.preferred[0].second, (std::vector<std::string>{"node-2", "node-3"}));
    ASSERT_EQ(backend.assigned.size(), 1u);
    EXPECT_EQ(backend.assigned[0], (std::pair<std::string, int>{"node-3", 1}));
    for (const auto& call : backend.start_calls) {
      EXPECT_EQ(call.slot, call.node == "node-0" ? 0 : call.node == "node-1" ? 1 : -1);
    }
  }
  auto promoted = log.Of("StandbyPromoted");
  ASSERT_EQ(promoted.size(), 1u);
  EXPECT_EQ(promoted[0].message.rfind("node-3 takes slot 1", 0), 0u) << promoted[0].message;
  EXPECT_FALSE(promoted[0].warning);
  auto node_lost = log.Of("NodeLost");
  ASSERT_EQ(node_lost.size(), 1u);
  EXPECT_TRUE(node_lost[0].warning);
  EXPECT_NE(node_lost[0].message.find("node-1 (slot 1): "), std::string::npos);
  EXPECT_FALSE(log.Of("FaultDetected").empty());
  EXPECT_TRUE(log.Of("FaultDetected")[0].warning);

  // Rendezvous on the slot-0 agent's host and the port it found free there; the ranks
  // saw it. Logs went to the agents' own <run-dir>/logs (log_dir was sent empty).
  auto attempts = log.Of("AttemptStarted");
  ASSERT_EQ(attempts.size(), 3u);
  const std::string& a0 = attempts[0].message;
  const std::string on = " on node-0 (";
  const size_t at = a0.find(on + "127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << a0;
  const size_t from = at + on.size();
  const std::string hostport = a0.substr(from, a0.find(')', from) - from);
  EXPECT_TRUE(e2e::WaitForFileText(dir_ + "/run/logs/rank-1.log", "master " + hostport, 5))
      << hostport;
  ExpectNoLeftovers();
}

TEST_F(ControllerE2E, RemoteCatalogCommitsOnTheObjectTierAndRestoresFromIt) {
  objstore::S3TestServerOptions so;
  so.source_dir = src_;
  auto server = objstore::S3TestServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  // The controller (this process) and the agents (its children) both need them.
  ::setenv("AWS_ACCESS_KEY_ID", objstore::S3TestServer::kAccessKey, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", objstore::S3TestServer::kSecretKey, 1);
  const std::string url = "s3://bw-remote/job?endpoint=" + (*server)->endpoint();
  auto run = [&](int steps, EventLog* log) {
    auto spec = LoadJobSpec(WriteSpec("objremote", 1, 2, steps, kFastPolicy,
                                      ", objectStore: \"" + url + "\", goldenEvery: 20"));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    ForbiddenEnv forbidden;
    LocalBackend backend(AgentOptions());
    auto store = OpenStore("objremote-" + std::to_string(steps));
    ControllerOptions o = Options("run", log);
    o.remote_checkpoint_fs = true;
    o.ckpt_env = &forbidden;
    Controller c(*spec, o, &backend, store.get(), SystemClock::Get());
    auto r = c.Run();
    EXPECT_EQ(forbidden.calls.load(), 0) << "the controller touched the checkpoint files";
    return r;
  };
  EventLog first;
  auto r1 = run(70, &first);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_EQ(r1->phase, JobPhase::kSucceeded) << r1->message;
  auto tier = ckpt::ObjectTier::OpenUrl(url);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  auto steps = (*tier)->ListCommitted();
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  // The agent applied the retention: the newest 3 and golden steps (every 20th) only.
  // (Which steps reach S3 at all depends on the disk's speed: a persist falling behind
  // the cadence skips steps, e.g. under ASan.)
  ASSERT_FALSE(steps->empty());
  EXPECT_EQ(steps->back(), 70);
  for (size_t i = 0; i + 3 < steps->size(); ++i) {
    EXPECT_EQ((*steps)[i] % 20, 0) << "step " << (*steps)[i] << " should have been removed";
  }

  // The disks are gone: the agent downloads step 70 into the disk tier on the
  // controller's order, and the ranks resume from it.
  fs::remove_all(dir_ + "/ckpt");
  EventLog second;
  auto r2 = run(90, &second);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ASSERT_EQ(r2->phase, JobPhase::kSucceeded) << r2->message;
  auto downloaded = second.Of("CheckpointDownloaded");
  ASSERT_EQ(downloaded.size(), 1u);
  EXPECT_EQ(downloaded[0].message.rfind("step 70 from ", 0), 0u) << downloaded[0].message;
  EXPECT_NE(downloaded[0].message.find("(on node-0)"), std::string::npos);
  auto started = second.Of("AttemptStarted");
  ASSERT_FALSE(started.empty());
  EXPECT_NE(started[0].message.find("resuming after step 70 from the object tier"),
            std::string::npos)
      << started[0].message;
  EXPECT_EQ(r2->report["last_step"], 90);
  ExpectNoLeftovers();
}

TEST_F(ControllerE2E, WaitsForCapacityThenRuns) {
  JobSpec spec = Spec("capacity", 1, 20, kFastPolicy);
  spec.fault_policy.spare_nodes = 0;
  ScriptedBackend backend(AgentOptions());
  backend.unavailable_left = 4;  // one answer of one message, then three of another
  auto store = OpenStore("capacity");
  EventLog log;
  ControllerOptions o = Options("run", &log);
  o.capacity_wait_s = 60;
  Controller c(spec, o, &backend, store.get(), SystemClock::Get());
  std::atomic<bool> saw_waiting{false};
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      ControllerStatus s = c.Status();
      if (s.stage == "Provisioning" && s.phase == JobPhase::kPending && s.attempt == -1 &&
          s.slot_nodes == std::vector<std::string>{"node-0"}) {
        saw_waiting = true;
      }
      PollReadable({}, 0.02);
    }
  });
  auto r = c.Run();
  done = true;
  watcher.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->phase, JobPhase::kSucceeded) << r->message;
  EXPECT_TRUE(saw_waiting.load());
  auto waiting = log.Of("WaitingForCapacity");
  ASSERT_EQ(waiting.size(), 2u);  // once per distinct message
  EXPECT_EQ(
      waiting[0].message,
      "waiting for capacity for slot 0: 0/3 nodes are available: insufficient nvidia.com/gpu");
  EXPECT_EQ(waiting[1].message, "waiting for capacity for slot 0: pod node-0 is ContainerCreating");
  EXPECT_FALSE(waiting[0].warning);
  ASSERT_EQ(log.Of("CapacityAvailable").size(), 1u);
  std::lock_guard<std::mutex> l(backend.mu);
  ASSERT_EQ(backend.start_calls.size(), 5u);
  for (size_t i = 0; i < backend.start_calls.size(); ++i) {
    EXPECT_EQ(backend.start_calls[i].node, "node-0");  // the same node, asked again
    if (i > 0) {  // a lower bound on the controller's own clock: load only makes it larger
      EXPECT_GE(backend.start_calls[i].t - backend.start_calls[i - 1].t, 0.95)
          << "StartNode retried more than once per second";
    }
  }
  ExpectNoLeftovers();
}

TEST_F(ControllerE2E, CapacityThatNeverComesFailsTheJobAfterTheWait) {
  JobSpec spec = Spec("nocapacity", 1, 20, kFastPolicy);
  ScriptedBackend backend(AgentOptions());
  backend.unavailable_left = 1000;
  auto store = OpenStore("nocapacity");
  EventLog log;
  ControllerOptions o = Options("run", &log);
  o.capacity_wait_s = 1.5;
  Controller c(spec, o, &backend, store.get(), SystemClock::Get());
  auto r = c.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->phase, JobPhase::kFailed);
  EXPECT_EQ(r->message.rfind("no capacity for slot 0 within 1.5 s: ", 0), 0u) << r->message;
  ExpectNoLeftovers();
}

TEST_F(ControllerE2E, TwoControllersInOneProcessOneCancelled) {
  // Job A runs long and is cancelled with Cancel(); job B, meanwhile, has a crash,
  // restarts and succeeds. Status() is read from this thread while both run.
  auto a = RunOnThread(Spec("job-a", 1, 100000, kFastPolicy), "a");
  auto b = RunOnThread(
      Spec("job-b", 2, 150,
           std::string(kFastPolicy) + "chaos: [{kind: kill_rank, atStep: 40, rank: 0}]\n"),
      "b");
  Controller& ca = *a->controller;
  Controller& cb = *b->controller;

  // B: running, its step advancing, a restart after the crash, then done.
  long first_step = -1, later_step = -1;
  bool b_restarted = false, b_running = false;
  const double deadline = Now() + 120;
  while (Now() < deadline) {
    ControllerStatus s = cb.Status();
    if (s.phase == JobPhase::kRunning && s.current_step > 0) {
      b_running = true;
      if (first_step < 0) first_step = s.current_step;
      if (s.current_step > first_step) later_step = s.current_step;
    }
    if (s.restarts >= 1) b_restarted = true;
    if (s.restarts >= 1 && s.stage == "Running") {
      EXPECT_GE(s.attempt, 1);
    }
    if (s.stage == "Done") break;
    PollReadable({}, 0.02);
  }
  const Result<RunResult>& rb = b->Join();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(rb->phase, JobPhase::kSucceeded) << rb->message;
  EXPECT_TRUE(b_running);
  EXPECT_GT(later_step, first_step);
  EXPECT_TRUE(b_restarted);
  EXPECT_EQ(cb.Status().ledger.incidents.size(), 1u);

  // A is still running (B finishing did not stop it); then it is cancelled.
  ControllerStatus sa_now = ca.Status();
  EXPECT_EQ(sa_now.stage, "Running");
  EXPECT_GT(sa_now.current_step, 0);
  EXPECT_GT(sa_now.ledger.wall_s, 0);
  ca.Cancel();
  const Result<RunResult>& ra = a->Join();
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  EXPECT_EQ(ra->phase, JobPhase::kCancelled) << ra->message;
  EXPECT_EQ(ca.Status().phase, JobPhase::kCancelled);
  EXPECT_EQ(a->log.Of("Cancelled").size(), 1u);
  EXPECT_TRUE(b->log.Of("Cancelled").empty());
  ExpectNoLeftovers();
}

TEST_F(ControllerE2E, RequestCancelStopsEveryControllerInTheProcess) {
  auto a = RunOnThread(Spec("all-a", 1, 100000, kFastPolicy), "a");
  auto b = RunOnThread(Spec("all-b", 1, 100000, kFastPolicy), "b");
  Controller& ca = *a->controller;
  Controller& cb = *b->controller;
  const double deadline = Now() + 60;
  while (Now() < deadline && (ca.Status().current_step < 1 || cb.Status().current_step < 1)) {
    PollReadable({}, 0.02);
  }
  // Both were running (a cancel of jobs that never started would prove less).
  EXPECT_GE(ca.Status().current_step, 1);
  EXPECT_GE(cb.Status().current_step, 1);
  Controller::RequestCancel();
  const Result<RunResult>& ra = a->Join();
  const Result<RunResult>& rb = b->Join();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->phase, JobPhase::kCancelled) << ra->message;
  EXPECT_EQ(rb->phase, JobPhase::kCancelled) << rb->message;
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
