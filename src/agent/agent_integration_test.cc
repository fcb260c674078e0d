// Runs the real bulwark-agent binary against a fake controller in this test.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/proc.h"

#ifndef BULWARK_AGENT_BIN
#define BULWARK_AGENT_BIN "bulwark-agent"
#endif

namespace bulwark {
namespace {

constexpr double kWait = 20;  // generous per-step deadline; tests never sleep fixed times

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class FakeController {
 public:
  explicit FakeController(const std::string& node, std::vector<std::string> extra_args = {})
      : node_(node) {
    char tmpl[] = "/tmp/bwat-XXXXXX";
    dir_ = mkdtemp(tmpl);
    auto l = TcpListen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listen_ = std::move(l).value();
    port_ = LocalPort(listen_.get()).value();
    SpawnOptions o;
    o.argv = {BULWARK_AGENT_BIN,
              "--controller",
              "127.0.0.1:" + std::to_string(port_),
              "--node",
              node,
              "--run-dir",
              dir_ + "/run",
              "--heartbeat-interval",
              "0.2"};
    o.argv.insert(o.argv.end(), extra_args.begin(), extra_args.end());
    o.env = CurrentEnv();
    auto c = Spawn(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    agent_ = std::move(c).value();
    double deadline = SystemClock::Get()->NowMono() + kWait;
    while (!conn_ && SystemClock::Get()->NowMono() < deadline) {
      PollReadable({listen_.get(), agent_.output.get()}, 0.05);
      Drain();
      Fd fd = TcpAcceptNonBlocking(listen_.get());
      if (fd.valid()) conn_.emplace(std::move(fd));
    }
    EXPECT_TRUE(conn_.has_value()) << "agent never connected; output:\n" << agent_out_;
  }
  ~FakeController() {
    if (agent_.pid > 0 && !exited_) {
      kill(agent_.pid, SIGKILL);
      WaitExit(agent_.pid, 10);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& dir() const { return dir_; }
  const std::string& agent_output() const { return agent_out_; }
  void Send(const Json& m) { ASSERT_TRUE(conn_->Send(m).ok()); }
  void CloseConnection() { conn_.reset(); }
  // Reads the agent's output for up to timeout_s.
  void PumpOutput(double timeout_s) {
    PollReadable({agent_.output.get()}, timeout_s);
    Drain();
  }
  // Dials the agent's adopt port (as a restarted controller does) and says `adopt`;
  // the new connection replaces the old one for Send/WaitFor.
  void Adopt(int port, const Json& adopt) {
    auto fd = TcpConnect("127.0.0.1", port, 5);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    conn_.emplace(std::move(fd).value());
    inbox_.clear();
    Send(adopt);
  }

  // Waits for the next message of `type` satisfying `pred`; consumed messages are kept.
  std::optional<Json> WaitFor(const std::string& type,
                              const std::function<bool(const Json&)>& pred = nullptr,
                              double timeout = kWait) {
    double deadline = SystemClock::Get()->NowMono() + timeout;
    while (true) {
      for (size_t i = 0; i < inbox_.size(); ++i) {
        if (inbox_[i]["type"] == type && (!pred || pred(inbox_[i]))) {
          Json m = inbox_[i];
          inbox_.erase(inbox_.begin() + static_cast<long>(i));
          return m;
        }
      }
      if (SystemClock::Get()->NowMono() >= deadline) return std::nullopt;
      PollReadable({conn_->fd(), agent_.output.get()}, 0.05);
      Drain();
      for (auto& m : conn_->Read()) inbox_.push_back(std::move(m));
    }
  }

  // Waits for the agent process to exit; returns its exit info.
  std::optional<ExitInfo> WaitAgentExit(double timeout = kWait) {
    double deadline = SystemClock::Get()->NowMono() + timeout;
    while (SystemClock::Get()->NowMono() < deadline) {
      PollReadable({agent_.output.get()}, 0.05);
      Drain();
      if (auto e = Reap(agent_.pid)) {
        exited_ = true;
        Drain();
        return e;
      }
    }
    return std::nullopt;
  }

  Json StartMsg(int attempt, const std::vector<std::string>& cmd, int nproc) {
    return Json{{"type", "start"},
                {"attempt", attempt},
                {"run_id", "run-xyz"},
                {"job", "demo"},
                {"command", cmd},
                {"env", {{"DEMO_VAR", "42"}}},
                {"workdir", dir_},
                {"log_dir", dir_ + "/logs"},
                {"master_addr", "127.0.0.1"},
                {"master_port", 29555},
                {"nnodes", 2},
                {"group_rank", 1},
                {"nproc_per_node", nproc},
                {"world_size", 2 * nproc},
                {"restart_count", 1},
                {"max_restarts", 7},
                {"resume_step", -1},
                {"ckpt_dir", dir_ + "/ck"},
                {"ckpt_interval_steps", 0},
                {"skip_from", -1},
                {"skip_to", -1},
                {"hang_floor_s", 1.0},
                {"hang_multiplier", 2.0},
                {"startup_timeout_s", 30.0},
                {"stop_grace_s", 2.0}};
  }

 private:
  void Drain() {
    bool eof = false;
    if (agent_.output.valid()) agent_out_ += ReadAvailable(agent_.output.get(), &eof);
  }

  std::string node_;
  std::string dir_;
  Fd listen_;
  int port_ = 0;
  Child agent_;
  bool exited_ = false;
  std::string agent_out_;
  std::optional<JsonLineConn> conn_;
  std::vector<Json> inbox_;
};

// Polls the agent's own output until it contains `text` (the agent logs rank exits).
bool PollUntilOutput(FakeController& fc, const std::string& text, double timeout_s) {
  const double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (fc.agent_output().find(text) == std::string::npos) {
    if (SystemClock::Get()->NowMono() >= deadline) return false;
    fc.PumpOutput(0.05);
  }
  return true;
}

std::vector<pid_t> Pgids(const Json& started) {
  std::vector<pid_t> out;
  for (const auto& r : started["ranks"]) out.push_back(r["pgid"].get<pid_t>());
  return out;
}

bool AnyGroupAlive(const std::vector<pid_t>& pgids) {
  for (pid_t g : pgids) {
    if (GroupAlive(g)) return true;
  }
  return false;
}

TEST(AgentIntegration, StartEnvCrashStopShutdown) {
  FakeController fc("node-1");
  auto hello = fc.WaitFor("hello");
  ASSERT_TRUE(hello) << fc.agent_output();
  EXPECT_EQ((*hello)["node"], "node-1");
  ASSERT_TRUE(fc.WaitFor("heartbeat", [](const Json& m) { return m["attempt"] == -1; }));

  const std::string script =
      "echo \"ENV RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
      "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK ROLE_RANK=$ROLE_RANK "
      "ROLE_NAME=$ROLE_NAME MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT "
      "RESTARTS=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS "
      "RUN_ID=$TORCHELASTIC_RUN_ID DEMO_VAR=$DEMO_VAR ATTEMPT=$BULWARK_ATTEMPT "
      "STACK=$BULWARK_STACK_FILE\"; exec sleep 300";
  fc.Send(fc.StartMsg(4, {"/bin/sh", "-c", script}, 2));
  auto started = fc.WaitFor("started");
  ASSERT_TRUE(started) << fc.agent_output();
  EXPECT_EQ((*started)["attempt"], 4);
  ASSERT_EQ((*started)["ranks"].size(), 2u);
  EXPECT_EQ((*started)["ranks"][0]["rank"], 2);
  EXPECT_EQ((*started)["ranks"][1]["rank"], 3);
  EXPECT_EQ((*started)["ranks"][1]["local_rank"], 1);
  auto pgids = Pgids(*started);

  const std::string log3 = fc.dir() + "/logs/rank-3.log";
  double deadline = SystemClock::Get()->NowMono() + kWait;
  while (ReadFile(log3).find("ENV ") == std::string::npos &&
         SystemClock::Get()->NowMono() < deadline) {
    fc.WaitFor("none", nullptr, 0.05);  // keeps draining the agent while polling
  }
  std::string log = ReadFile(log3);
  EXPECT_NE(log.find("===== bulwark attempt 4, rank 3"), std::string::npos) << log;
  EXPECT_NE(log.find("ENV RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 "
                     "ROLE_RANK=3 ROLE_NAME=default MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 "
                     "RESTARTS=1/7 RUN_ID=run-xyz DEMO_VAR=42 ATTEMPT=4 STACK=" +
                     fc.dir() + "/logs/stacks/attempt-4-rank-3.txt"),
            std::string::npos)
      << log;
  ASSERT_TRUE(fc.WaitFor("heartbeat",
                         [](const Json& m) { return m["attempt"] == 4 && m["ranks_alive"] == 2; }));
  EXPECT_NE(fc.agent_output().find("[node-1/3] ENV RANK=3"), std::string::npos);

  fc.Send({{"type", "chaos"}, {"action", "kill_rank"}, {"rank", 2}});
  auto inc = fc.WaitFor("incident");
  ASSERT_TRUE(inc) << fc.agent_output();
  EXPECT_EQ((*inc)["attempt"], 4);
  EXPECT_EQ((*inc)["kind"], "crash");
  EXPECT_EQ((*inc)["subtype"], "SIGKILL");
  EXPECT_EQ((*inc)["rank"], 2);
  EXPECT_GE((*inc)["detect_time"].get<double>(), (*inc)["fault_time"].get<double>());
  EXPECT_NE((*inc)["log_tail"].get<std::string>().find("ENV RANK=2"), std::string::npos);

  fc.Send({{"type", "stop"}, {"attempt", 4}, {"grace_s", 2.0}});
  auto stopped = fc.WaitFor("stopped");
  ASSERT_TRUE(stopped) << fc.agent_output();
  EXPECT_EQ((*stopped)["attempt"], 4);
  EXPECT_FALSE(AnyGroupAlive(pgids));
  EXPECT_FALSE(fc.WaitFor("incident", nullptr, 0.3)) << "a requested stop is not a fault";

  fc.Send({{"type", "shutdown"}});
  auto e = fc.WaitAgentExit();
  ASSERT_TRUE(e) << fc.agent_output();
  EXPECT_TRUE(e->ok()) << e->Describe();
}

const char* kPyRank = R"PY(
import faulthandler, json, os, signal, socket, time
stack = open(os.environ["BULWARK_STACK_FILE"], "a")
faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
rank = int(os.environ["RANK"])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
def report(msg):
    sock.sendto(json.dumps(msg).encode(), os.environ["BULWARK_AGENT_SOCK"])
if rank == 1:
    report({"type": "step", "rank": rank, "loss": 1.0})  # malformed: no "step"
def train_step(i):
    time.sleep(0.05)
for i in range(100000):
    train_step(i)
    loss = None if (rank == 1 and i == 3) else 1.0 / (i + 1)
    report({"type": "step", "rank": rank, "step": i, "loss": loss, "tokens": 64,
            "step_time": 0.05, "ckpt_stall": 0.0, "t": time.time()})
    print("step", i, flush=True)
)PY";

TEST(AgentIntegration, NanAndHangWithStacks) {
  FakeController fc("node-0");
  ASSERT_TRUE(fc.WaitFor("hello")) << fc.agent_output();
  Json start = fc.StartMsg(0, {"/usr/bin/python3", "-c", kPyRank}, 2);
  start["group_rank"] = 0;
  fc.Send(start);
  auto started = fc.WaitFor("started");
  ASSERT_TRUE(started) << fc.agent_output();
  auto pgids = Pgids(*started);

  auto nan = fc.WaitFor("incident", [](const Json& m) { return m["kind"] == "nan"; });
  ASSERT_TRUE(nan) << fc.agent_output();
  EXPECT_EQ((*nan)["rank"], 1);
  EXPECT_EQ((*nan)["step"], 3);
  EXPECT_NE(fc.agent_output().find("field 'step' is missing"), std::string::npos)
      << fc.agent_output();
  auto fwd = fc.WaitFor("step", [](const Json& m) { return m["rank"] == 0 && m["step"] == 5; });
  ASSERT_TRUE(fwd) << fc.agent_output();
  EXPECT_EQ((*fwd)["attempt"], 0);
  EXPECT_EQ((*fwd)["tokens"], 64);

  // Another node's hang: capture this node's stacks on request, ranks keep running.
  fc.Send({{"type", "capture_stacks"}, {"attempt", 7}});  // stale attempt: nothing captured
  auto stale = fc.WaitFor("stacks");
  ASSERT_TRUE(stale) << fc.agent_output();
  EXPECT_TRUE((*stale)["stacks"].empty());
  fc.Send({{"type", "capture_stacks"}, {"attempt", 0}});
  auto cap = fc.WaitFor("stacks");
  ASSERT_TRUE(cap) << fc.agent_output();
  EXPECT_EQ((*cap)["attempt"], 0);
  EXPECT_TRUE((*cap)["stopped"].empty());
  ASSERT_TRUE((*cap)["stacks"].contains("0")) << cap->dump();
  // The rank is caught wherever it is: almost always asleep in train_step, but under load
  // it can be inside report(); either way the capture holds its Python stack.
  const std::string cap0 = (*cap)["stacks"]["0"].get<std::string>();
  EXPECT_NE(cap0.find("--- Python stacks (faulthandler) ---"), std::string::npos) << cap0;
  EXPECT_TRUE(cap0.find("in train_step") != std::string::npos ||
              cap0.find("in report") != std::string::npos)
      << cap0;
  EXPECT_NE(cap0.find("in <module>"), std::string::npos) << cap0;
  EXPECT_TRUE(AnyGroupAlive(pgids));

  fc.Send({{"type", "chaos"}, {"action", "hang_rank"}, {"rank", 0}});
  auto hang = fc.WaitFor("incident", [](const Json& m) { return m["kind"] == "hang"; });
  ASSERT_TRUE(hang) << fc.agent_output();
  EXPECT_EQ((*hang)["rank"], 0);
  EXPECT_EQ((*hang)["subtype"], "no_progress");
  EXPECT_GT((*hang)["detect_time"].get<double>(), (*hang)["fault_time"].get<double>());
  EXPECT_NE((*hang)["detail"].get<std::string>().find("stopped (SIGSTOP) rank(s): 0"),
            std::string::npos)
      << (*hang)["detail"];
  ASSERT_TRUE((*hang)["stacks"].contains("0")) << hang->dump();
  const std::string st0 = (*hang)["stacks"]["0"].get<std::string>();
  EXPECT_NE(st0.find("resumed to dump its stack"), std::string::npos) << st0;
  EXPECT_TRUE(st0.find("in train_step") != std::string::npos ||
              st0.find("in report") != std::string::npos)
      << st0;  // stopped wherever it was (see the capture above)
  EXPECT_NE(st0.find("--- Python stacks (faulthandler) ---"), std::string::npos) << st0;

  fc.Send({{"type", "stop"}, {"attempt", 0}, {"grace_s", 1.0}});
  ASSERT_TRUE(fc.WaitFor("stopped")) << fc.agent_output();
  EXPECT_FALSE(AnyGroupAlive(pgids));
}

TEST(AgentIntegration, CleanExitAndStartupHangOfNonPythonRank) {
  FakeController fc("node-0");
  ASSERT_TRUE(fc.WaitFor("hello")) << fc.agent_output();
  Json start = fc.StartMsg(
      2, {"/bin/sh", "-c", "if [ \"$LOCAL_RANK\" = 0 ]; then exit 0; fi; exec sleep 300"}, 2);
  start["group_rank"] = 0;
  start["startup_timeout_s"] = 1.0;
  fc.Send(start);
  auto started = fc.WaitFor("started");
  ASSERT_TRUE(started) << fc.agent_output();
  auto pgids = Pgids(*started);
  auto exited = fc.WaitFor("exited");
  ASSERT_TRUE(exited) << fc.agent_output();
  EXPECT_EQ((*exited)["rank"], 0);
  EXPECT_EQ((*exited)["code"], 0);
  auto hang = fc.WaitFor("incident");
  ASSERT_TRUE(hang) << fc.agent_output();
  EXPECT_EQ((*hang)["kind"], "hang");
  EXPECT_EQ((*hang)["subtype"], "startup_timeout");
  EXPECT_EQ((*hang)["rank"], 1);
  ASSERT_TRUE((*hang)["stacks"].contains("1")) << hang->dump();
  EXPECT_NE((*hang)["stacks"]["1"].get<std::string>().find("does not handle SIGUSR1"),
            std::string::npos)
      << hang->dump();
  // SIGUSR1 would have killed `sleep`: the agent must not have sent it.
  EXPECT_FALSE(fc.WaitFor("incident", nullptr, 0.3)) << fc.agent_output();
  EXPECT_TRUE(GroupAlive(pgids[1]));
  fc.Send({{"type", "stop"}, {"attempt", 2}, {"grace_s", 1.0}});
  ASSERT_TRUE(fc.WaitFor("stopped")) << fc.agent_output();
  EXPECT_FALSE(AnyGroupAlive(pgids));
}

TEST(AgentIntegration, ControllerLossStopsRanksAndExits) {
  FakeController fc("node-0", {"--orphan-timeout", "0.5"});
  ASSERT_TRUE(fc.WaitFor("hello")) << fc.agent_output();
  Json start = fc.StartMsg(1, {"/bin/sh", "-c", "sleep 300 & wait"}, 2);
  start["group_rank"] = 0;
  fc.Send(start);
  auto started = fc.WaitFor("started");
  ASSERT_TRUE(started) << fc.agent_output();
  auto pgids = Pgids(*started);
  EXPECT_TRUE(AnyGroupAlive(pgids));
  fc.CloseConnection();
  auto e = fc.WaitAgentExit();
  ASSERT_TRUE(e) << fc.agent_output();
  EXPECT_EQ(e->code, 3) << fc.agent_output();
  EXPECT_FALSE(AnyGroupAlive(pgids)) << "the agent left ranks behind";
}

// A controller lost mid-attempt: the ranks keep running; an `adopt` with the wrong
// run is refused, the right one gets a hello saying what runs (no rank restarted) and
// the connection serves as the controller's from then on.
TEST(AgentIntegration, ControllerLossKeepsRanksRunningUntilAdopted) {
  FakeController fc("node-0", {"--orphan-timeout", "60"});
  auto hello = fc.WaitFor("hello");
  ASSERT_TRUE(hello) << fc.agent_output();
  const int adopt_port = (*hello)["adopt_port"].get<int>();
  ASSERT_GT(adopt_port, 0);
  EXPECT_FALSE(hello->contains("adopted"));  // a fresh agent has nothing to report
  Json start = fc.StartMsg(3, {"/bin/sh", "-c", "sleep 300 & wait"}, 2);
  start["group_rank"] = 0;
  fc.Send(start);
  auto started = fc.WaitFor("started");
  ASSERT_TRUE(started) << fc.agent_output();
  const std::vector<pid_t> pgids = Pgids(*started);
  fc.CloseConnection();

  fc.Adopt(adopt_port,
           {{"type", "adopt"}, {"job", "demo"}, {"run_id", "another-run"}, {"node", "node-0"}});
  auto refused = fc.WaitFor("refused");
  ASSERT_TRUE(refused) << fc.agent_output();
  EXPECT_NE((*refused)["message"].get<std::string>().find("run-xyz"), std::string::npos);

  fc.Adopt(adopt_port,
           {{"type", "adopt"}, {"job", "demo"}, {"run_id", "run-xyz"}, {"node", "node-0"}});
  auto adopted = fc.WaitFor("hello");
  ASSERT_TRUE(adopted) << fc.agent_output();
  EXPECT_EQ((*adopted)["adopted"], true);
  EXPECT_EQ((*adopted)["attempt"], 3);
  EXPECT_EQ((*adopted)["slot"], 0);
  EXPECT_EQ((*adopted)["ranks_alive"], 2);
  EXPECT_EQ((*adopted)["state"], "running");
  for (pid_t g : pgids) EXPECT_TRUE(GroupAlive(g)) << "a rank did not survive the controller";
  EXPECT_TRUE(fc.WaitFor("heartbeat"));  // the adopter is the controller now
  fc.Send({{"type", "stop"}, {"attempt", 3}, {"grace_s", 1.0}});
  ASSERT_TRUE(fc.WaitFor("stopped")) << fc.agent_output();
  EXPECT_FALSE(AnyGroupAlive(pgids));
}

// Reports made while no controller was there reach the adopter after its hello.
TEST(AgentIntegration, ReportsWhileOrphanedReachTheAdopter) {
  FakeController fc("node-0", {"--orphan-timeout", "60"});
  auto hello = fc.WaitFor("hello");
  ASSERT_TRUE(hello) << fc.agent_output();
  const int adopt_port = (*hello)["adopt_port"].get<int>();
  fc.Send({{"type", "welcome"}, {"job", "demo"}, {"run_id", "run-xyz"}});
  Json start = fc.StartMsg(1, {"/bin/sh", "-c", "sleep 0.3"}, 1);
  start["group_rank"] = 0;
  fc.Send(start);
  ASSERT_TRUE(fc.WaitFor("started")) << fc.agent_output();
  fc.CloseConnection();
  // The rank exits while the agent is orphaned.
  ASSERT_TRUE(PollUntilOutput(fc, "exited", 10)) << fc.agent_output();
  fc.Adopt(adopt_port,
           {{"type", "adopt"}, {"job", "demo"}, {"run_id", "run-xyz"}, {"node", "node-0"}});
  auto adopted = fc.WaitFor("hello");
  ASSERT_TRUE(adopted) << fc.agent_output();
  EXPECT_EQ((*adopted)["state"], "idle");
  EXPECT_EQ((*adopted)["ranks_alive"], 0);
  auto exited = fc.WaitFor("exited");
  ASSERT_TRUE(exited) << fc.agent_output();
  EXPECT_EQ((*exited)["attempt"], 1);
  EXPECT_EQ((*exited)["code"], 0);
}

// A controller lost after an outcome reached it but before it acted on it (a NaN held
// for attribution, an exit it had not counted) leaves the adopter without it unless the
// agent says it again: the attempt's incidents and exits go again after the hello.
TEST(AgentIntegration, TheAttemptsOutcomesReachTheAdopterAgain) {
  FakeController fc("node-0", {"--orphan-timeout", "60"});
  auto hello = fc.WaitFor("hello");
  ASSERT_TRUE(hello) << fc.agent_output();
  const int adopt_port = (*hello)["adopt_port"].get<int>();
  const char* py = R"PY(
import json, os, socket, sys, time
rank = int(os.environ["RANK"])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(4):
    loss = None if (rank == 1 and i == 2) else 1.0
    sock.sendto(json.dumps({"type": "step", "rank": rank, "step": i, "loss": loss,
                            "t": time.time()}).encode(), os.environ["BULWARK_AGENT_SOCK"])
    time.sleep(0.05)
if rank == 0:
    sys.exit(0)
time.sleep(300)
)PY";
  Json start = fc.StartMsg(2, {"/usr/bin/python3", "-c", py}, 2);
  start["group_rank"] = 0;
  fc.Send(start);
  auto started = fc.WaitFor("started");
  ASSERT_TRUE(started) << fc.agent_output();
  const std::vector<pid_t> pgids = Pgids(*started);
  auto is_nan = [](const Json& m) { return m["kind"] == "nan"; };
  auto nan = fc.WaitFor("incident", is_nan);
  ASSERT_TRUE(nan) << fc.agent_output();
  EXPECT_EQ((*nan)["rank"], 1);
  EXPECT_EQ((*nan)["step"], 2);
  ASSERT_TRUE(fc.WaitFor("exited")) << fc.agent_output();
  fc.CloseConnection();  // the controller dies before acting on either

  fc.Adopt(adopt_port,
           {{"type", "adopt"}, {"job", "demo"}, {"run_id", "run-xyz"}, {"node", "node-0"}});
  auto adopted = fc.WaitFor("hello");
  ASSERT_TRUE(adopted) << fc.agent_output();
  EXPECT_EQ((*adopted)["attempt"], 2);
  EXPECT_EQ((*adopted)["ranks_alive"], 1);
  auto again = fc.WaitFor("incident", is_nan);
  ASSERT_TRUE(again) << fc.agent_output();
  EXPECT_EQ((*again)["attempt"], 2);
  EXPECT_EQ((*again)["rank"], 1);
  EXPECT_EQ((*again)["step"], 2);
  auto exited = fc.WaitFor("exited");
  ASSERT_TRUE(exited) << fc.agent_output();
  EXPECT_EQ((*exited)["attempt"], 2);
  EXPECT_EQ((*exited)["rank"], 0);

  // A stop ends the attempt: the next adopter hears nothing of it again.
  fc.Send({{"type", "stop"}, {"attempt", 2}, {"grace_s", 1.0}});
  ASSERT_TRUE(fc.WaitFor("stopped")) << fc.agent_output();
  EXPECT_FALSE(AnyGroupAlive(pgids));
  fc.CloseConnection();
  fc.Adopt(adopt_port,
           {{"type", "adopt"}, {"job", "demo"}, {"run_id", "run-xyz"}, {"node", "node-0"}});
  auto idle = fc.WaitFor("hello");
  ASSERT_TRUE(idle) << fc.agent_output();
  EXPECT_EQ((*idle)["state"], "idle");
  ASSERT_TRUE(fc.WaitFor("heartbeat")) << fc.agent_output();
  EXPECT_FALSE(fc.WaitFor("incident", nullptr, 0.3)) << fc.agent_output();
  EXPECT_FALSE(fc.WaitFor("exited", nullptr, 0)) << fc.agent_output();
}

TEST(AgentIntegration, BadStartIsDroppedWithFieldName) {
  FakeController fc("node-0");
  ASSERT_TRUE(fc.WaitFor("hello")) << fc.agent_output();
  Json start = fc.StartMsg(1, {"/bin/true"}, 1);
  start["nproc_per_node"] = "many";
  fc.Send(start);
  fc.Send({{"type", "stop"}, {"attempt", 1}, {"grace_s", 1.0}});
  ASSERT_TRUE(fc.WaitFor("stopped")) << fc.agent_output();
  EXPECT_FALSE(fc.WaitFor("started", nullptr, 0.2));
  EXPECT_NE(fc.agent_output().find("nproc_per_node"), std::string::npos) << fc.agent_output();
}

TEST(AgentIntegration, EmptyWorkdirAndLogDirMeanTheAgentsOwn) {
  // A controller without this node's file system (Kubernetes) sends "" for both: the
  // ranks run in the agent's working directory and log under <run-dir>/logs.
  FakeController fc("node-1");
  auto hello = fc.WaitFor("hello");
  ASSERT_TRUE(hello) << fc.agent_output();
  ASSERT_TRUE((*hello)["free_port"].is_number_integer()) << hello->dump();
  EXPECT_GT((*hello)["free_port"].get<int>(), 0);
  Json start = fc.StartMsg(0, {"/bin/sh", "-c", "echo \"CWD=$(pwd)\""}, 1);
  start["workdir"] = "";
  start["log_dir"] = "";
  fc.Send(start);
  ASSERT_TRUE(fc.WaitFor("exited")) << fc.agent_output();
  const std::string log = ReadFile(fc.dir() + "/run/logs/rank-1.log");
  EXPECT_NE(log.find("CWD=" + std::filesystem::current_path().string() + "\n"), std::string::npos)
      << log;
  fc.Send({{"type", "stop"}, {"attempt", 0}, {"grace_s", 1.0}});
  auto stopped = fc.WaitFor("stopped");
  ASSERT_TRUE(stopped) << fc.agent_output();
  EXPECT_GT((*stopped)["free_port"].get<int>(), 0) << stopped->dump();
}

TEST(AgentIntegration, CheckpointCatalogRequestsAreAnsweredOverTheConnection) {
  FakeController fc("node-0");
  ASSERT_TRUE(fc.WaitFor("hello")) << fc.agent_output();
  const std::string disk = fc.dir() + "/ck";
  std::vector<uint8_t> bytes(256, 7);
  ckpt::TensorView t;
  t.meta.name = "w";
  t.meta.shape = {256};
  t.data = bytes.data();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(ckpt::WriteShard(ckpt::Env::Default(), disk, 5, r, 2, {t}, {}).ok());
  }
  fc.Send({{"type", "ckpt_commit"}});  // no id: dropped with a warning, the agent carries on
  fc.Send({{"type", "ckpt_list"}, {"id", 1}, {"dirs", {{"disk", disk}}}});
  fc.Send({{"type", "ckpt_commit"},
           {"id", 2},
           {"tier", "disk"},
           {"step", 5},
           {"world", 2},
           {"dir", disk},
           {"keep", 3}});
  auto listed = fc.WaitFor("ckpt_result", [](const Json& m) { return m["id"] == 1; });
  ASSERT_TRUE(listed) << fc.agent_output();
  EXPECT_EQ((*listed)["committed"]["disk"], Json::array());
  auto committed = fc.WaitFor("ckpt_result", [](const Json& m) { return m["id"] == 2; });
  ASSERT_TRUE(committed) << fc.agent_output();
  EXPECT_EQ((*committed)["ok"], true) << committed->dump();
  EXPECT_EQ((*committed)["committed"]["disk"], Json::array({5}));
  EXPECT_TRUE(std::filesystem::exists(ckpt::StepDir(disk, 5) + "/COMMIT"));
  EXPECT_NE(fc.agent_output().find("dropped ckpt_commit"), std::string::npos) << fc.agent_output();
}

}  // namespace
}  // namespace bulwark

namespace bulwark {
namespace {

// A rank that reports digests of its "parameters" (the alignment check), one malformed.
const char* kPyDigestRank = R"PY(
import json, os, socket, time
rank = int(os.environ["RANK"])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
def report(msg):
    sock.sendto(json.dumps(msg).encode(), os.environ["BULWARK_AGENT_SOCK"])
report({"type": "digest", "rank": rank, "step": 10, "digest": "XYZ"})  # malformed
report({"type": "digest", "rank": 9, "step": 10, "digest": "00000000000000aa"})  # not here
report({"type": "digest", "rank": rank, "step": 10, "digest": "00000000000000aa",
        "group": "dp0"})
for i in range(100000):
    time.sleep(0.05)
)PY";

TEST(AgentIntegration, DigestsReachTheControllerAndDiagnoseRunsTheChecks) {
  FakeController fc("node-0");
  ASSERT_TRUE(fc.WaitFor("hello")) << fc.agent_output();
  Json start = fc.StartMsg(0, {"/usr/bin/python3", "-c", kPyDigestRank}, 1);
  start["group_rank"] = 0;
  fc.Send(start);
  ASSERT_TRUE(fc.WaitFor("started")) << fc.agent_output();
  auto digest = fc.WaitFor("digest");
  ASSERT_TRUE(digest) << fc.agent_output();
  EXPECT_EQ((*digest)["rank"], 0);
  EXPECT_EQ((*digest)["step"], 10);
  EXPECT_EQ((*digest)["digest"], "00000000000000aa");
  EXPECT_EQ((*digest)["group"], "dp0");
  EXPECT_NE(fc.agent_output().find("sdk: dropped digest: digest: 'step' must be >= 0 and "
                                   "'digest' 16 lowercase hex digits"),
            std::string::npos)
      << fc.agent_output();
  EXPECT_FALSE(fc.WaitFor("digest", nullptr, 0.3)) << "rank 9 is not on this node";
  // Chaos sdc: this machine computes wrong results from now on.
  fc.Send({{"type", "chaos"}, {"action", "sdc"}, {"rank", 0}});
  fc.Send({{"type", "stop"}, {"attempt", 0}, {"grace_s", 1.0}});
  ASSERT_TRUE(fc.WaitFor("stopped")) << fc.agent_output();
  // Bad requests are answered with the field at fault.
  fc.Send({{"type", "diagnose"}, {"id", 1}, {"checks", Json::array({"fpga"})}});
  auto bad = fc.WaitFor("diagnosis");
  ASSERT_TRUE(bad) << fc.agent_output();
  EXPECT_EQ((*bad)["id"], 1);
  EXPECT_EQ((*bad)["error"], "check 'fpga' is unknown; the checks are matmul, disk, link and gpu");
  fc.Send({{"type", "diagnose"}, {"id", 2}, {"checks", Json::array({"matmul"})}, {"budget_s", 0}});
  auto zero = fc.WaitFor("diagnosis");
  ASSERT_TRUE(zero) << fc.agent_output();
  EXPECT_NE((*zero)["error"].get<std::string>().find("budget_s"), std::string::npos);
  // The checks themselves, each in its own `bulwark-agent diagnose` process (four disk
  // checks: long enough that the request right behind finds them running).
  fc.Send({{"type", "diagnose"},
           {"id", 3},
           {"checks", Json::array({"matmul", "disk"})},
           {"dirs", Json::array({fc.dir(), fc.dir(), fc.dir(), fc.dir()})},
           {"budget_s", 60}});
  fc.Send({{"type", "diagnose"}, {"id", 4}, {"checks", Json::array({"matmul"})}});
  auto busy = fc.WaitFor("diagnosis");
  ASSERT_TRUE(busy) << fc.agent_output();
  EXPECT_EQ((*busy)["id"], 4);
  EXPECT_EQ((*busy)["error"], "diagnostics are already running on this node");
  auto done = fc.WaitFor("diagnosis", nullptr, 60);
  ASSERT_TRUE(done) << fc.agent_output();
  EXPECT_EQ((*done)["id"], 3);
  ASSERT_EQ((*done)["results"].size(), 5u) << done->dump();
  const Json& matmul = (*done)["results"][0];
  EXPECT_EQ(matmul["name"], "matmul");
  EXPECT_EQ(matmul["ok"], false) << matmul.dump();  // chaos sdc: the machine is bad
  const Json& disk = (*done)["results"][1];
  EXPECT_EQ(disk["name"], "disk:" + fc.dir());
  EXPECT_EQ(disk["ok"], true) << disk.dump();
  // The link check: a listener at once, then the ring (here called off: no peers).
  fc.Send({{"type", "diagnose"}, {"id", 5}, {"checks", Json::array({"link"})}, {"link", 7}});
  auto no_link = fc.WaitFor("diagnosis");
  ASSERT_TRUE(no_link) << fc.agent_output();
  EXPECT_EQ((*no_link)["error"], "field 'link' must be {\"session\": K} with K >= 0");
  fc.Send({{"type", "diagnose"},
           {"id", 6},
           {"checks", Json::array({"link"})},
           {"link", {{"session", 7}}},
           {"budget_s", 30}});
  auto listening = fc.WaitFor("link_listening");
  ASSERT_TRUE(listening) << fc.agent_output();
  EXPECT_EQ((*listening)["id"], 6);
  EXPECT_GT((*listening)["port"].get<int>(), 0);
  fc.Send({{"type", "link_peers"}, {"id", 6}, {"index", 5}, {"peers", {"127.0.0.1:1", "x"}}});
  fc.Send({{"type", "link_peers"}, {"id", 6}, {"peers", Json::array()}});
  auto off = fc.WaitFor("diagnosis", nullptr, 10);
  ASSERT_TRUE(off) << fc.agent_output();
  EXPECT_EQ((*off)["id"], 6);
  ASSERT_EQ((*off)["results"].size(), 1u) << off->dump();
  EXPECT_EQ((*off)["results"][0]["evidence"], "not run: the controller called the ring off");
  EXPECT_NE(fc.agent_output().find("dropped link_peers: field 'peers' must be an array of "
                                   "\"host:port\" strings: peer 'x' must be HOST:PORT"),
            std::string::npos)
      << fc.agent_output();
  fc.Send({{"type", "shutdown"}});
  ASSERT_TRUE(fc.WaitAgentExit()) << fc.agent_output();
}

}  // namespace
}  // namespace bulwark
