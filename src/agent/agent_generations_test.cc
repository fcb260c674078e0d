// The agent's generation protocol (agent_generations.cc, agent_warm.cc) on a FakeClock
// with fake processes: the test plays the controller (a TCP connection on loopback)
// and the ranks' SDK (datagrams), and steps the agent's loop with RunOnce. No real
// process runs and no real time passes, so every deadline is exact.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "agent/agent.h"
#include "agent/python_command.h"
#include "common/json_util.h"
#include "common/testing/fake_processes.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using testing::FakeProcesses;

class AgentGenerationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/bw_agent_gen.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto l = TcpListen("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    listen_ = std::move(*l);
    AgentOptions o;
    o.controller_port = *LocalPort(listen_.get());
    o.node = "node-0";
    o.run_dir = dir_ + "/run";
    o.orphan_timeout_s = 0;
    o.heartbeat_interval_s = 1000;  // no heartbeats in the way
    o.procs = &procs_;
    o.stacks.gdb_path = "";
    o.nvml_library = nvml_library_;
    agent_ = std::make_unique<Agent>(o, &clock_);
    ASSERT_TRUE(agent_->Start().ok());
    for (int i = 0; i < 100 && !ctl_; ++i) {
      Fd c = TcpAcceptNonBlocking(listen_.get());
      if (c.valid()) ctl_.emplace(std::move(c));
      PollReadable({listen_.get()}, 0.05);
    }
    ASSERT_TRUE(ctl_);
    ASSERT_EQ(Expect("hello")["node"], "node-0");
  }

  void TearDown() override {
    agent_.reset();
    fs::remove_all(dir_);
  }

  // Runs the agent's loop until `pred` holds (at most `turns` turns; each advances the
  // fake clock by at most 50 ms when nothing is readable).
  bool RunUntil(const std::function<bool()>& pred, int turns = 200) {
    for (int i = 0; i < turns; ++i) {
      if (pred()) return true;
      EXPECT_EQ(agent_->RunOnce(), -1);
    }
    return pred();
  }

  // The next controller message of `type` (others are kept for later).
  Json Expect(const std::string& type, int turns = 200) {
    Json found;
    RunUntil(
        [&] {
          for (const Json& m : ctl_->Read()) inbox_.push_back(m);
          for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
            if ((*it)["type"] == type) {
              found = *it;
              inbox_.erase(it);
              return true;
            }
          }
          return false;
        },
        turns);
    EXPECT_FALSE(found.is_null()) << "no '" << type << "' from the agent";
    return found;
  }

  void Send(const Json& m) {
    ASSERT_TRUE(ctl_->Send(m).ok());
    ASSERT_TRUE(ctl_->Flush(1).ok());
  }

  std::string NodeDir() const { return dir_ + "/run/node-0"; }

  // A rank's SDK: its datagram socket (what the agent sends it) and its reports.
  struct Sdk {
    Fd sock;
    std::string path;
  };
  Sdk BindRank(int rank) {
    Sdk s;
    s.path = NodeDir() + "/rank-" + std::to_string(rank) + ".sock";
    auto fd = UnixDgramBind(s.path);
    EXPECT_TRUE(fd.ok());
    s.sock = std::move(*fd);
    return s;
  }
  void FromRank(const Json& m) {
    auto fd = UnixDgramSocket();
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(UnixDgramSend(fd->get(), NodeDir() + "/agent.sock", m.dump()).ok());
  }
  // The next datagram the agent sent `s`.
  Json ToRank(Sdk& s) {
    Json got;
    RunUntil([&] {
      auto d = UnixDgramRecvAll(s.sock.get());
      if (d.empty()) return false;
      got = Json::parse(d.front());
      return true;
    });
    return got;
  }

  Json Start(int attempt, int warm_ranks = 0) {
    return {{"type", "start"},
            {"attempt", attempt},
            {"run_id", "job-1"},
            {"job", "job"},
            {"command", {"/usr/bin/python3", "train.py", "--steps", "9"}},
            {"env", Json::object()},
            {"workdir", dir_},
            {"log_dir", dir_ + "/logs"},
            {"master_addr", "127.0.0.1"},
            {"master_port", 29500 + attempt},
            {"nnodes", 1},
            {"group_rank", 0},
            {"nproc_per_node", 2},
            {"world_size", 2},
            {"resume_step", attempt == 0 ? -1 : 7},
            {"hang_floor_s", 30},
            {"startup_timeout_s", 300},
            {"warm_ranks", warm_ranks}};
  }

  // pid of `rank` in a `started` message, and how it got its process.
  static std::pair<pid_t, std::string> Of(const Json& started, int rank) {
    for (const Json& r : started["ranks"]) {
      if (r["rank"] == rank) return {r["pid"].get<pid_t>(), r["how"].get<std::string>()};
    }
    return {-1, ""};
  }

  // Starts attempt 0 with two ranks that declare in-process recovery (`group`: with
  // generations that form process groups, which want the store).
  void StartTwoRanks(int warm_ranks = 0, bool group = false) {
    for (int r : {0, 1}) {
      if (!sdk_.count(r)) sdk_[r] = BindRank(r);
    }
    Send(Start(0, warm_ranks));
    started0_ = Expect("started");
    for (int r : {0, 1}) {
      FromRank({{"type", "hello"},
                {"rank", r},
                {"pid", Of(started0_, r).first},
                {"in_process", true},
                {"process_group", group}});
      EXPECT_EQ(Expect("rank_info")["rank"], r);
    }
  }

  std::string nvml_library_;  // "" = no GPU look-up
  std::string dir_;
  FakeClock clock_{100};
  FakeProcesses procs_;
  Fd listen_;
  std::optional<JsonLineConn> ctl_;
  std::vector<Json> inbox_;
  std::unique_ptr<Agent> agent_;
  Json started0_;
  std::map<int, Sdk> sdk_;  // the ranks' sockets (an agent that cannot reach a rank kills it)
};

// Steps a rank reports faster than the agent forwards them (kMaxStepForwardHz) merge
// into one the agent holds back; the rank's exit must not overtake it (the job would
// end short of its last step, a replay bundle short of its losses).
TEST_F(AgentGenerationsTest, AHeldBackStepGoesBeforeTheRanksExit) {
  StartTwoRanks();
  for (long s = 1; s <= 5; ++s) {
    FromRank({{"type", "step"}, {"rank", 0}, {"step", s}, {"loss", 1.0 / s}, {"t", 1.0}});
  }
  RunUntil([] { return false; }, 1);  // read at once: 1 forwarded, 2-5 held
  ASSERT_TRUE(procs_.Exit(Of(started0_, 0).first, 0));
  std::vector<Json> got;
  ASSERT_TRUE(RunUntil([&] {
    for (const Json& m : ctl_->Read()) got.push_back(m);
    return std::any_of(got.begin(), got.end(), [](const Json& m) { return m["type"] == "exited"; });
  }));
  long last = -1;
  Json earlier;
  for (const Json& m : got) {
    if (m["type"] == "exited") break;
    if (m["type"] == "step" && m["rank"] == 0) {
      last = m["step"].get<long>();
      earlier = m.value("earlier", Json());
    }
  }
  EXPECT_EQ(last, 5) << "the exit overtook the held-back step";
  // The steps merged into it keep their losses, for the controller's loss record.
  ASSERT_EQ(earlier.size(), 3u) << earlier.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(earlier[i]["step"], i + 2);
    EXPECT_EQ(earlier[i]["loss"], 1.0 / (i + 2));
  }
}

TEST_F(AgentGenerationsTest, ACrashReplacesOnlyTheCrashedRankTheSurvivorJoinsTheNextGeneration) {
  StartTwoRanks(0, /*group=*/true);
  Sdk& r0 = sdk_[0];
  const pid_t p0 = Of(started0_, 0).first, p1 = Of(started0_, 1).first;
  // A rank with process-group generations made slot 0's agent want the store; it
  // starts once the node's ranks have stepped (their start-up has the cores first).
  RunUntil([] { return false; }, 10);
  EXPECT_EQ(procs_.Spawned().size(), 2u);
  for (int r : {0, 1}) {
    FromRank({{"type", "step"}, {"rank", r}, {"step", 1}, {"loss", 1.0}, {"t", 1.0}});
  }
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 3u; }));
  const auto spawned = procs_.Spawned();
  ASSERT_EQ(spawned.size(), 3u);
  EXPECT_EQ(procs_.Options(spawned[2]).argv,
            (std::vector<std::string>{"/usr/bin/python3", "-m", "bulwark.store_server"}));
  ASSERT_TRUE(procs_.Print(spawned[2], "bulwark-store: listening on port 41234\n"));
  EXPECT_EQ(Expect("store")["port"], 41234);

  ASSERT_TRUE(procs_.Signal(p1, SIGKILL).ok());  // rank 1 crashes
  Json inc = Expect("incident");
  EXPECT_EQ(inc["rank"], 1);
  EXPECT_EQ(inc["subtype"], "SIGKILL");

  Send({{"type", "stop"}, {"attempt", 0}, {"park", true}, {"kill", {1}}, {"park_timeout_s", 5}});
  Json abort = ToRank(r0);
  EXPECT_EQ(abort, (Json{{"type", "abort"}, {"attempt", 0}}));
  EXPECT_TRUE(procs_.Alive(p0));
  FromRank({{"type", "parked"}, {"rank", 0}, {"pid", p0}, {"attempt", 0}, {"error", ""}});
  Json stopped = Expect("stopped");
  EXPECT_EQ(stopped["parked"], (Json::array({{{"rank", 0}, {"pid", p0}}})));

  Json start1 = Start(1);
  start1["store_host"] = "127.0.0.1";
  start1["store_port"] = 41234;
  Send(start1);
  Json started1 = Expect("started");
  EXPECT_EQ(Of(started1, 0), std::make_pair(p0, std::string("kept")));  // same process
  const auto [new1, how1] = Of(started1, 1);
  EXPECT_EQ(how1, "spawned");
  EXPECT_NE(new1, p1);
  Json gen = ToRank(r0);
  EXPECT_EQ(gen["type"], "generation");
  EXPECT_EQ(gen["attempt"], 1);
  EXPECT_EQ(gen["env"]["BULWARK_ATTEMPT"], "1");
  EXPECT_EQ(gen["env"]["BULWARK_RESUME_STEP"], "7");
  EXPECT_EQ(gen["env"]["MASTER_PORT"], "29501");
  EXPECT_EQ(gen["env"]["BULWARK_STORE_PORT"], "41234");
  EXPECT_FALSE(gen["env"].contains("PYTHONPATH"));
  EXPECT_EQ(procs_.Options(new1).env.at("BULWARK_STORE_ADDR"), "127.0.0.1");
  EXPECT_EQ(procs_.Spawned().size(), 4u);  // only the crashed rank got a new process
}

// A trainer that reports faster than the agent forwards (a flood, or sub-millisecond
// steps): the reports in between are merged, so the controller gets at most 200 a
// second per rank and still every second of step time, every token and the newest step.
// Found by fuzz/fuzz_sdk_datagram: a `model` report without flops_per_token made the
// agent read a missing key of a const JSON object (undefined behaviour; a heap overflow
// under ASan). It is dropped with a warning, and the next valid one is forwarded.
TEST_F(AgentGenerationsTest, AModelReportWithoutFlopsIsDropped) {
  StartTwoRanks();
  FromRank({{"type", "model"}, {"rank", 0}});
  FromRank({{"type", "model"}, {"rank", 0}, {"flops_per_token", 6e9}});
  Json m = Expect("model");
  EXPECT_EQ(m["rank"], 0);
  EXPECT_EQ(m["flops_per_token"], 6e9);
}

// A stop (another node's fault) arrives while a step is held back, and a rank's step
// report (sent before it saw the SIGTERM) after it: both reach the controller before the
// stop's report, for the loss record a replay bundle is cut from.
TEST_F(AgentGenerationsTest, StepsBeforeAStopAreForwardedNotDropped) {
  StartTwoRanks();
  for (long s = 1; s <= 3; ++s) {
    FromRank({{"type", "step"}, {"rank", 0}, {"step", s}, {"loss", 1.0 / s}, {"t", 1.0}});
  }
  RunUntil([] { return false; }, 1);  // read at once: 1 forwarded, 2-3 held
  Send({{"type", "stop"}, {"attempt", 0}, {"grace_s", 1}});
  FromRank({{"type", "step"}, {"rank", 1}, {"step", 3}, {"loss", 0.25}, {"t", 1.0}});
  for (long s = 4; s <= 5; ++s) {  // faster than the agent forwards: held back, then sent
    FromRank({{"type", "step"}, {"rank", 0}, {"step", s}, {"loss", 1.0 / s}, {"t", 1.0}});
  }
  std::vector<Json> got;
  ASSERT_TRUE(RunUntil([&] {
    for (const Json& m : ctl_->Read()) got.push_back(m);
    return std::any_of(got.begin(), got.end(),
                       [](const Json& m) { return m["type"] == "stopped"; });
  }));
  std::map<long, long> last;  // rank -> its newest step reported before "stopped"
  for (const Json& m : got) {
    if (m["type"] == "stopped") break;
    if (m["type"] == "step") last[m["rank"].get<long>()] = m["step"].get<long>();
  }
  EXPECT_EQ(last[0], 5) << "a held-back step was lost in the stop";
  EXPECT_EQ(last[1], 3) << "a step reported during the stop was dropped";
}

TEST_F(AgentGenerationsTest, AFloodOfStepReportsIsMergedNotLost) {
  StartTwoRanks();
  const double t0 = clock_.NowMono();
  for (int s = 1; s <= 50; ++s) {  // in batches the socket queue holds, read at once
    FromRank({{"type", "step"},
              {"rank", 0},
              {"step", s},
              {"loss", 1.0 / s},
              {"tokens", 10},
              {"step_time", 0.001},
              {"t", 1.0}});
    if (s % 5 == 0) {
      EXPECT_EQ(agent_->RunOnce(), -1);
    }
  }
  ASSERT_LT(clock_.NowMono() - t0, 1.0 / Agent::kMaxStepForwardHz);
  Json first = Expect("step");
  EXPECT_EQ(first["step"], 1);   // the first goes out at once
  Json merged = Expect("step");  // the other 49, once the gap has passed
  EXPECT_EQ(merged["step"], 50);
  EXPECT_EQ(merged["coalesced"], 49);
  EXPECT_DOUBLE_EQ(merged["tokens"].get<double>(), 490);
  EXPECT_NEAR(merged["step_time"].get<double>(), 0.049, 1e-9);
  EXPECT_DOUBLE_EQ(merged["loss"].get<double>(), 1.0 / 50);
}

// GPU health through NVML, here the scripted fake libnvidia-ml (src/gpu/testing): an XID
// event on a device is an incident of the node, and the agent's /metrics shows the
// device under DCGM's names with the job and node.
class AgentGpuTest : public AgentGenerationsTest {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_agent_gpu.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    gpu_dir_ = tmpl;
    state_ = gpu_dir_ + "/nvml.json";
    WriteState({{"devices",
                 {{{"name", "NVIDIA H100 80GB HBM3"},
                   {"uuid", "GPU-aaaa"},
                   {"util", 97},
                   {"mem_used", 1 << 30},
                   {"mem_total", 80LL << 30},
                   {"temp", 61},
                   {"power_mw", 650000},
                   {"sm_clock", 1980},
                   {"throttle", 0},
                   {"ecc_sbe", 0},
                   {"ecc_dbe", 0}}}}});
    ::setenv("BULWARK_FAKE_NVML_STATE", state_.c_str(), 1);
    nvml_library_ = BW_FAKE_NVML;
    AgentGenerationsTest::SetUp();
  }
  void TearDown() override {
    AgentGenerationsTest::TearDown();
    ::unsetenv("BULWARK_FAKE_NVML_STATE");
    fs::remove_all(gpu_dir_);
  }
  void WriteState(const Json& j) { std::ofstream(state_) << j.dump(); }
  std::string gpu_dir_, state_;
};

TEST_F(AgentGpuTest, AnXidEventIsAnIncidentOfTheNode) {
  StartTwoRanks();
  Json state = Json::parse(std::ifstream(state_));
  state["pending_events"] = {{{"device", 0}, {"type", "xid"}, {"data", 79}}};
  WriteState(state);
  Json inc = Expect("incident", 400);  // the next poll (every 5 s of the fake clock)
  EXPECT_EQ(inc["kind"], "fatal_log");
  EXPECT_EQ(inc["subtype"], "xid");
  EXPECT_EQ(inc["rank"], -1);
  EXPECT_NE(inc["detail"].get<std::string>().find("XID 79 on GPU 0 (GPU-aaaa) of node-0"),
            std::string::npos)
      << inc.dump();
  EXPECT_EQ(Json::parse(std::ifstream(state_))["pending_events"].size(), 0u);  // delivered
}

TEST_F(AgentGenerationsTest, AResizedWorldRenumbersTheKeptRanks) {
  // This node was slot 1 of 2 (ranks 2, 3); the job shrank to it alone: its parked
  // processes (matched by local rank) become ranks 0 and 1 of a world of 2.
  Sdk s2 = BindRank(2), s3 = BindRank(3);
  Json start0 = Start(0);
  start0["nnodes"] = 2;
  start0["group_rank"] = 1;
  start0["world_size"] = 4;
  Send(start0);
  Json started = Expect("started");
  const pid_t p2 = Of(started, 2).first, p3 = Of(started, 3).first;
  ASSERT_GT(p2, 0);
  for (int r : {2, 3}) {
    FromRank({{"type", "hello"}, {"rank", r}, {"pid", Of(started, r).first}, {"in_process", true}});
    Expect("rank_info");
  }
  Send({{"type", "stop"},
        {"attempt", 0},
        {"park", true},
        {"kill", Json::array()},
        {"park_timeout_s", 5}});
  ToRank(s2);
  ToRank(s3);
  FromRank({{"type", "parked"}, {"rank", 2}, {"pid", p2}, {"attempt", 0}, {"error", ""}});
  FromRank({{"type", "parked"}, {"rank", 3}, {"pid", p3}, {"attempt", 0}, {"error", ""}});
  Expect("stopped");
  Json start1 = Start(1);
  start1["max_world_size"] = 4;
  Send(start1);
  Json started1 = Expect("started");
  EXPECT_EQ(Of(started1, 0), std::make_pair(p2, std::string("kept")));
  EXPECT_EQ(Of(started1, 1), std::make_pair(p3, std::string("kept")));
  // The generation goes to the socket the process listens on; it names the new one.
  Json gen = ToRank(s2);
  EXPECT_EQ(gen["type"], "generation");
  EXPECT_EQ(gen["env"]["RANK"], "0");
  EXPECT_EQ(gen["env"]["LOCAL_RANK"], "0");
  EXPECT_EQ(gen["env"]["WORLD_SIZE"], "2");
  EXPECT_EQ(gen["env"]["BULWARK_MAX_WORLD_SIZE"], "4");
  EXPECT_EQ(gen["env"]["BULWARK_RANK_SOCK"], NodeDir() + "/rank-0.sock");
  EXPECT_EQ(ToRank(s3)["env"]["RANK"], "1");
  // The kept process reports under its new number.
  FromRank({{"type", "step"}, {"rank", 1}, {"step", 8}, {"loss", 1.0}, {"t", 2.0}});
  Json step = Expect("step");
  EXPECT_EQ(step["rank"], 1);
  EXPECT_EQ(step["attempt"], 1);
  EXPECT_EQ(procs_.Spawned().size(), 2u);  // no new process
}

TEST_F(AgentGenerationsTest, ARankThatDoesNotParkInTimeIsKilledAndReplaced) {
  StartTwoRanks();
  const pid_t p0 = Of(started0_, 0).first, p1 = Of(started0_, 1).first;
  procs_.IgnoreTerm(p1);
  Send({{"type", "stop"},
        {"attempt", 0},
        {"park", true},
        {"kill", Json::array()},
        {"park_timeout_s", 2}});
  FromRank({{"type", "parked"}, {"rank", 0}, {"pid", p0}, {"attempt", 0}, {"error", ""}});
  const double t0 = clock_.NowMono();
  Json stopped = Expect("stopped");
  // Rank 1 never parked: killed at the deadline, not before.
  EXPECT_GE(clock_.NowMono() - t0, 2.0);
  EXPECT_LT(clock_.NowMono() - t0, 2.5);
  EXPECT_EQ(procs_.Signals(p1).front(), SIGKILL);
  EXPECT_EQ(stopped["parked"], (Json::array({{{"rank", 0}, {"pid", p0}}})));
  // Where the late rank was stuck is kept for the post-mortem (only it: rank 0 parked).
  std::ifstream stacks(dir_ + "/logs/park-attempt-0-node-0-stacks.txt");
  std::stringstream text;
  text << stacks.rdbuf();
  EXPECT_NE(text.str().find("===== rank 1 ====="), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("===== rank 0 ====="), std::string::npos) << text.str();
  Send(Start(1));
  Json started1 = Expect("started");
  EXPECT_EQ(Of(started1, 0).second, "kept");
  EXPECT_EQ(Of(started1, 1).second, "spawned");
}

// A rank whose socket queue is full when the park begins (it reads every 50 ms; a storm
// of datagrams filled it) is asked again until it reads, not killed and replaced.
TEST_F(AgentGenerationsTest, ARankWhoseQueueIsFullIsAskedAgainNotKilled) {
  StartTwoRanks();
  const pid_t p0 = Of(started0_, 0).first, p1 = Of(started0_, 1).first;
  auto filler = UnixDgramSocket();
  ASSERT_TRUE(filler.ok());
  int queued = 0;
  while (queued < 100000 &&
         UnixDgramSend(filler->get(), sdk_[0].path, R"({"type":"noise"})").ok()) {
    ++queued;
  }
  ASSERT_LT(queued, 100000) << "the queue never filled";
  Send({{"type", "stop"},
        {"attempt", 0},
        {"park", true},
        {"kill", Json::array()},
        {"park_timeout_s", 5}});
  RunUntil([] { return false; }, 10);  // the agent tries while the queue stays full
  EXPECT_TRUE(procs_.Alive(p0));
  // The rank reads its queue: the abort follows the noise.
  auto abort_of = [&](int rank) {
    Json abort;
    RunUntil([&] {
      for (const std::string& d : UnixDgramRecvAll(sdk_[rank].sock.get())) {
        Json m = Json::parse(d);
        if (m["type"] == "abort") abort = m;
      }
      return !abort.is_null();
    });
    return abort;
  };
  EXPECT_EQ(abort_of(0), (Json{{"type", "abort"}, {"attempt", 0}}));
  EXPECT_EQ(abort_of(1), (Json{{"type", "abort"}, {"attempt", 0}}));
  for (int r : {0, 1}) {
    const pid_t p = r == 0 ? p0 : p1;
    FromRank({{"type", "parked"}, {"rank", r}, {"pid", p}, {"attempt", 0}, {"error", ""}});
  }
  Json stopped = Expect("stopped");
  EXPECT_EQ(stopped["parked"],
            (Json::array({{{"rank", 0}, {"pid", p0}}, {{"rank", 1}, {"pid", p1}}})));
  EXPECT_TRUE(procs_.Alive(p0));
  EXPECT_TRUE(procs_.Signals(p0).empty());
}

TEST_F(AgentGenerationsTest, CulpritsAndRanksWithoutInProcessRecoveryAreKilledNotAsked) {
  Send(Start(0));
  Json started = Expect("started");
  const pid_t p0 = Of(started, 0).first, p1 = Of(started, 1).first;
  // Only rank 0 runs under bulwark.run; rank 1 is a plain script.
  FromRank({{"type", "hello"}, {"rank", 0}, {"pid", p0}, {"in_process", true}});
  Expect("rank_info");
  ASSERT_TRUE(procs_.Signal(p0, SIGSTOP).ok());  // rank 0 hangs: the controller's culprit
  Send({{"type", "stop"}, {"attempt", 0}, {"park", true}, {"kill", {0}}, {"park_timeout_s", 5}});
  Json stopped = Expect("stopped");
  EXPECT_TRUE(stopped["parked"].empty());
  EXPECT_FALSE(procs_.Alive(p0));
  EXPECT_FALSE(procs_.Alive(p1));
  EXPECT_EQ(procs_.Signals(p0), (std::vector<int>{SIGSTOP, SIGKILL}));
}

// A hung rank whose stack capture resumed it, so that it saw its collective fail and
// parked on its own before the controller's stop named it the culprit: still killed,
// never kept for the next generation.
TEST_F(AgentGenerationsTest, ACulpritThatParkedOnItsOwnIsKilledNotKept) {
  StartTwoRanks();
  const pid_t p0 = Of(started0_, 0).first, p1 = Of(started0_, 1).first;
  FromRank({{"type", "parked"},
            {"rank", 1},
            {"pid", p1},
            {"attempt", 0},
            {"error", "RuntimeError: Connection closed by peer"}});
  Expect("parked");
  Send({{"type", "stop"}, {"attempt", 0}, {"park", true}, {"kill", {1}}, {"park_timeout_s", 5}});
  FromRank({{"type", "parked"}, {"rank", 0}, {"pid", p0}, {"attempt", 0}, {"aborted", true}});
  Json stopped = Expect("stopped");
  EXPECT_EQ(stopped["parked"], (Json::array({{{"rank", 0}, {"pid", p0}}}))) << stopped.dump();
  EXPECT_FALSE(procs_.Alive(p1));
  EXPECT_TRUE(procs_.Alive(p0));
}

TEST_F(AgentGenerationsTest, ARankThatParksOnItsOwnIsReportedAndAPlainStopEndsParkedRanks) {
  StartTwoRanks();
  const pid_t p1 = Of(started0_, 1).first;
  FromRank({{"type", "parked"},
            {"rank", 1},
            {"pid", p1},
            {"attempt", 0},
            {"error", "RuntimeError: Connection closed by peer"}});
  Json parked = Expect("parked");
  EXPECT_EQ(parked["rank"], 1);
  EXPECT_EQ(parked["error"], "RuntimeError: Connection closed by peer");
  Send({{"type", "stop"}, {"attempt", 0}, {"park", true}, {"park_timeout_s", 5}});
  Json abort_wait = Expect("stopped");  // rank 0 does not park: killed at the deadline
  EXPECT_EQ(abort_wait["parked"], (Json::array({{{"rank", 1}, {"pid", p1}}})));
  // The controller gives up instead: a plain stop takes the parked rank too.
  Send({{"type", "stop"}, {"attempt", 0}});
  Expect("stopped");
  EXPECT_FALSE(procs_.Alive(p1));
}

TEST_F(AgentGenerationsTest, TheFirstLaunchWaitsForTheZygoteAndWarmRanksAreItsForks) {
  for (int r : {0, 1}) sdk_[r] = BindRank(r);
  Send(Start(0, /*warm_ranks=*/1));
  // One import for the node: the launch waits for the zygote instead of spawning two
  // interpreters that would each import torch.
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 1u; }));
  const pid_t zygote = procs_.Spawned()[0];
  const SpawnOptions zo = procs_.Options(zygote);
  EXPECT_EQ(zo.argv, (std::vector<std::string>{"/usr/bin/python3", "-m", "bulwark.zygote"}));
  EXPECT_GE(zo.control_fd, 0);
  EXPECT_EQ(zo.env.at("BULWARK_WARM_TARGET"), "train.py");
  EXPECT_EQ(zo.env.at("BULWARK_STACK_FILE"), "");
  RunUntil([] { return false; }, 10);
  for (const Json& m : ctl_->Read()) inbox_.push_back(m);
  for (const Json& m : inbox_) EXPECT_NE(m["type"], "started") << "launched before the zygote";
  EXPECT_EQ(procs_.Spawned().size(), 1u);

  FromRank({{"type", "zygote_ready"}, {"pid", zygote}});
  started0_ = Expect("started");
  const pid_t p0 = Of(started0_, 0).first, p1 = Of(started0_, 1).first;
  for (int r : {0, 1}) {
    const pid_t p = Of(started0_, r).first;
    EXPECT_EQ(Of(started0_, r).second, "warm");
    EXPECT_EQ(procs_.Options(p).argv,
              (std::vector<std::string>{"fork-of", std::to_string(zygote)}));
    const Json job = Json::parse(procs_.ReadStdin(p));
    EXPECT_EQ(job["env"]["RANK"], std::to_string(r));
    EXPECT_EQ(job["argv"], (Json{"/usr/bin/python3", "train.py", "--steps", "9"}));
    EXPECT_EQ(job["cwd"], dir_);
    FromRank({{"type", "hello"}, {"rank", r}, {"pid", p}, {"in_process", true}});
    EXPECT_EQ(Expect("rank_info")["rank"], r);
  }
  // A fork costs no import: the pool refills at once, while the ranks still start.
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 4u; }));
  const pid_t warm = procs_.Spawned().back();
  EXPECT_EQ(procs_.Options(warm).argv[0], "fork-of");
  FromRank({{"type", "warm_ready"}, {"pid", warm}});
  RunUntil([] { return false; }, 5);
  EXPECT_EQ(procs_.Spawned().size(), 4u);  // the pool holds one

  ASSERT_TRUE(procs_.Signal(p1, SIGKILL).ok());
  Expect("incident");
  Send({{"type", "stop"}, {"attempt", 0}, {"park", true}, {"kill", {1}}, {"park_timeout_s", 5}});
  FromRank({{"type", "parked"}, {"rank", 0}, {"pid", p0}, {"attempt", 0}, {"error", ""}});
  Expect("stopped");
  Send(Start(1, 1));
  Json started1 = Expect("started");
  EXPECT_EQ(Of(started1, 0), std::make_pair(p0, std::string("kept")));
  EXPECT_EQ(Of(started1, 1), std::make_pair(warm, std::string("warm")));
  const Json job = Json::parse(procs_.ReadStdin(warm));
  EXPECT_EQ(job["env"]["RANK"], "1");
  EXPECT_EQ(job["env"]["BULWARK_ATTEMPT"], "1");
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 5u; }));
  EXPECT_EQ(procs_.Options(procs_.Spawned().back()).argv[0], "fork-of");

  // New code (a hot update's `prepare`): the zygote and its forks imported the old.
  Json prep = {{"type", "prepare"},     {"command", {"/usr/bin/python3", "train2.py"}},
               {"env", Json::object()}, {"workdir", dir_},
               {"warm_ranks", 1},       {"nproc_per_node", 2},
               {"version", "v2"}};
  Send(prep);
  ASSERT_TRUE(RunUntil([&] { return !procs_.Alive(zygote); }));
  EXPECT_FALSE(procs_.Alive(procs_.Spawned()[4]));
  for (int r : {0, 1}) {
    FromRank({{"type", "step"}, {"rank", r}, {"step", 8}, {"loss", 1.0}, {"t", 2.0}});
  }
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 6u; }));
  EXPECT_EQ(procs_.Options(procs_.Spawned()[5]).env.at("BULWARK_WARM_TARGET"), "train2.py");
  // Two ranks share the node: the zygote loads BLAS with one OpenMP thread (as torchrun).
  EXPECT_EQ(procs_.Options(procs_.Spawned()[5]).env.at("OMP_NUM_THREADS"), "1");
}

TEST_F(AgentGenerationsTest, TheStoreServerIsAForkOfTheZygote) {
  for (int r : {0, 1}) sdk_[r] = BindRank(r);
  Send(Start(0, /*warm_ranks=*/1));
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 1u; }));
  const pid_t zygote = procs_.Spawned()[0];
  FromRank({{"type", "zygote_ready"}, {"pid", zygote}});
  started0_ = Expect("started");
  for (int r : {0, 1}) {
    FromRank({{"type", "hello"},
              {"rank", r},
              {"pid", Of(started0_, r).first},
              {"in_process", true},
              {"process_group", true}});
    Expect("rank_info");
    FromRank({{"type", "step"}, {"rank", r}, {"step", 1}, {"loss", 1.0}, {"t", 1.0}});
  }
  // Ranks 0 and 1, the pool's one, then the store: all forks, no second import.
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 5u; }));
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(procs_.Options(procs_.Spawned()[i]).argv[0], "fork-of");
  const pid_t store = procs_.Spawned()[4];
  const Json job = Json::parse(procs_.ReadStdin(store));
  EXPECT_EQ(job["argv"], (Json{"/usr/bin/python3", "-m", "bulwark.store_server"}));
  EXPECT_EQ(job["env"]["BULWARK_STACK_FILE"], "");
  ASSERT_TRUE(procs_.Print(store, "bulwark-store: listening on port 41234\n"));
  EXPECT_EQ(Expect("store")["port"], 41234);
}

TEST_F(AgentGenerationsTest, ALaunchWaitsForTheZygoteThirtySecondsAtMostThenSpawns) {
  const double t0 = clock_.NowMono();
  Send(Start(0, 1));
  Json started = Expect("started", /*turns=*/1000);
  ASSERT_FALSE(started.is_null());
  EXPECT_GE(clock_.NowMono() - t0, 30.0);
  EXPECT_LT(clock_.NowMono() - t0, 30.5);
  for (int r : {0, 1}) {
    const pid_t p = Of(started, r).first;
    EXPECT_EQ(Of(started, r).second, "spawned");
    EXPECT_EQ(procs_.Options(p).argv,
              (std::vector<std::string>{"/usr/bin/python3", "train.py", "--steps", "9"}));
  }
  // Once ready, the slow zygote still fills the pool.
  FromRank({{"type", "zygote_ready"}, {"pid", procs_.Spawned()[0]}});
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 4u; }));
  EXPECT_EQ(procs_.Options(procs_.Spawned()[3]).argv[0], "fork-of");
}

TEST_F(AgentGenerationsTest, AZygoteThatDiesLetsTheLaunchSpawnAndStartsAgainAfterRankStartUp) {
  // A script without the SDK reports no steps: its start-up counts for 5 s.
  const double t0 = clock_.NowMono();
  Send(Start(0, 1));
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 1u; }));
  ASSERT_TRUE(procs_.Exit(procs_.Spawned()[0], 1));  // e.g. a broken interpreter option
  Json started = Expect("started");
  EXPECT_LT(clock_.NowMono() - t0, 1.0);
  EXPECT_EQ(Of(started, 0).second, "spawned");
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 4u; }, 400));
  EXPECT_EQ(procs_.Options(procs_.Spawned()[3]).argv,
            (std::vector<std::string>{"/usr/bin/python3", "-m", "bulwark.zygote"}));
  EXPECT_GE(clock_.NowMono() - t0, 5.0);
  EXPECT_LT(clock_.NowMono() - t0, 5.5);
}

TEST_F(AgentGenerationsTest, ZygotesThatKeepFailingGiveWayToWarmProcessesOfTheirOwn) {
  Json s = Start(0, 1);
  s["nproc_per_node"] = 1;
  s["world_size"] = 1;
  Send(s);
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 1u; }));
  const pid_t z1 = procs_.Spawned()[0];
  procs_.FailForks(z1);  // its channel is broken: ready, but no fork succeeds
  FromRank({{"type", "zygote_ready"}, {"pid", z1}});
  Json started = Expect("started");
  EXPECT_EQ(Of(started, 0).second, "spawned");
  EXPECT_FALSE(procs_.Alive(z1));
  FromRank({{"type", "step"}, {"rank", 0}, {"step", 1}, {"loss", 1.0}, {"t", 1.0}});
  for (int failure = 2; failure <= 3; ++failure) {
    const size_t before = procs_.Spawned().size();
    ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == before + 1; }, 400))
        << "failure " << failure;
    const pid_t z = procs_.Spawned().back();
    EXPECT_EQ(procs_.Options(z).argv.back(), "bulwark.zygote");
    ASSERT_TRUE(procs_.Exit(z, 1));
  }
  const size_t before = procs_.Spawned().size();
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == before + 1; }, 400));
  const pid_t warm = procs_.Spawned().back();
  const SpawnOptions wo = procs_.Options(warm);
  EXPECT_EQ(wo.argv, (std::vector<std::string>{"/usr/bin/python3", "-m", "bulwark.warm"}));
  EXPECT_TRUE(wo.stdin_pipe);
  EXPECT_EQ(wo.control_fd, -1);
  EXPECT_EQ(wo.env.at("BULWARK_WARM_TARGET"), "train.py");
}

TEST_F(AgentGenerationsTest, WarmRanksThatKeepDyingTurnThePoolOff) {
  Json s = Start(0, 1);
  s["nproc_per_node"] = 1;
  s["world_size"] = 1;
  Send(s);
  ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 1u; }));
  FromRank({{"type", "zygote_ready"}, {"pid", procs_.Spawned()[0]}});
  Json started = Expect("started");
  FromRank({{"type", "step"}, {"rank", 0}, {"step", 1}, {"loss", 1.0}, {"t", 1.0}});
  for (int round = 0; round < 3; ++round) {  // the zygote, the rank, then warm ranks
    ASSERT_TRUE(RunUntil([&] { return procs_.Spawned().size() == 3u + round; }, 2000))
        << "round " << round;
    EXPECT_EQ(procs_.Options(procs_.Spawned().back()).argv[0], "fork-of");
    ASSERT_TRUE(procs_.Exit(procs_.Spawned().back(), 1));  // e.g. a broken reparenting
  }
  const size_t spawned = procs_.Spawned().size();
  RunUntil([] { return false; }, 2000);  // 100 s of fake time: no further attempt
  EXPECT_EQ(procs_.Spawned().size(), spawned);
}

TEST(PythonCommand, RecognisesPythonScriptsAndModules) {
  auto c = ParsePythonCommand({"/usr/bin/python3", "-u", "-X", "dev", "train.py", "--a", "1"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->interpreter, "/usr/bin/python3");
  EXPECT_EQ(c->options, (std::vector<std::string>{"-u", "-X", "dev"}));
  EXPECT_EQ(c->script, "train.py");
  EXPECT_EQ(c->args, (std::vector<std::string>{"--a", "1"}));
  EXPECT_EQ(
      PythonModuleArgv(*c, "bulwark.warm"),
      (std::vector<std::string>{"/usr/bin/python3", "-u", "-X", "dev", "-m", "bulwark.warm"}));
  c = ParsePythonCommand({"python3.11", "-m", "pkg.train", "x"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->module, "pkg.train");
  EXPECT_EQ(c->args, std::vector<std::string>{"x"});
  EXPECT_TRUE(ParsePythonCommand({"python", "t.py"}));
  EXPECT_FALSE(ParsePythonCommand({"torchrun", "t.py"}));
  EXPECT_FALSE(ParsePythonCommand({"python3", "-c", "print(1)"}));
  EXPECT_FALSE(ParsePythonCommand({"python3", "-m"}));
  EXPECT_FALSE(ParsePythonCommand({"python3"}));
  EXPECT_FALSE(ParsePythonCommand({"/opt/bin/pythonic", "t.py"}));
  EXPECT_FALSE(ParsePythonCommand({}));
}

}  // namespace
}  // namespace bulwark
