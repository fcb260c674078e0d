// The node agent under fuzzing: a real bulwark::Agent (agent/agent.h) on a FakeClock
// with fake processes (no process runs, no time passes), connected to this harness,
// which plays the controller (a TCP connection on loopback) and the ranks' SDK
// (datagrams to the agent's socket), as agent_generations_test.cc does. One agent
// serves many inputs (a fresh one costs sockets and a connect); it is replaced when
// it exits (a `shutdown`, a closed connection) and every kRecycle inputs, so state
// stays bounded. Paths a `start` or `prepare` names (workdir, log_dir, ckpt_dir) are
// pointed into the harness's scratch directory before the agent sees them: the agent
// creates them, and the fuzzer must not write elsewhere on the machine. Catalog
// requests (`ckpt_*`, which read, commit and delete checkpoint steps named by the
// message) are left out for the same reason.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/testing/fake_processes.h"
#include "fuzz/fuzz_util.h"

namespace bulwark::fuzz {

class AgentFixture {
 public:
  static constexpr int kRecycle = 500;

  AgentFixture() {
    signal(SIGPIPE, SIG_IGN);
    dir_ = ScratchDir("bw_fuzz_agent");
    auto l = TcpListen("127.0.0.1", 0);
    Check(l.ok(), "listen");
    listen_ = std::move(*l);
  }
  ~AgentFixture() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The agent, started and greeted (a fresh one when the last exited or served
  // kRecycle inputs). With `ranks`, it runs attempt 0 with two local ranks (0 and 1).
  Agent& Get(bool ranks) {
    if (agent_ && ++served_ > kRecycle) Stop();
    if (!agent_) Begin(ranks);
    return *agent_;
  }

  // Raw bytes on the controller's connection.
  void SendRaw(const std::string& bytes) {
    size_t off = 0;
    for (int i = 0; off < bytes.size() && i < 10000; ++i) {
      ssize_t n = ::send(ctl_->fd(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (!Turn()) {
        return;
      }
    }
  }
  // One datagram from a rank's SDK.
  void SendDatagram(const std::string& payload) {
    // A full socket drops the datagram, as the SDK's own sends do.
    IgnoreError(UnixDgramSend(sdk_.get(), dir_ + "/run/node-0/agent.sock", payload),
                "the SDK drops a datagram the agent cannot take");
  }

  // One turn of the agent's loop; reads (and checks) what it sent the controller.
  // False once the agent exited (it is then replaced on the next Get).
  bool Turn() {
    if (!agent_) return false;
    const int rc = agent_->RunOnce();
    Check(rc == -1 || rc == kAgentExitOk || rc == kAgentExitControllerLost, "agent exit code",
          std::to_string(rc));
    std::vector<std::string> bad;
    for (const Json& m : ctl_->Read(&bad)) {
      Check(m.is_object() && m.contains("type") && m["type"].is_string(),
            "agent sent a message without a type", m.dump());
    }
    Check(bad.empty(), "agent sent a malformed line", bad.empty() ? "" : bad.front());
    if (rc != -1) Stop();
    return rc == -1;
  }

  // A controller message with the paths it names moved into the scratch directory,
  // or "" when the harness does not pass it on (see above).
  std::string Sanitise(const std::string& line) const {
    Json m = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (m.is_discarded() || !m.is_object()) return line;
    if (m.contains("type") && m["type"].is_string() &&
        m["type"].get<std::string>().rfind("ckpt_", 0) == 0) {
      return "";
    }
    bool changed = false;
    for (const char* key : {"workdir", "log_dir", "ckpt_dir"}) {
      if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
        m[key] = dir_ + "/w/" + key;
        changed = true;
      }
    }
    return changed ? m.dump() : line;
  }

  const std::string& dir() const { return dir_; }

 private:
  void Begin(bool ranks) {
    served_ = 0;
    clock_ = std::make_unique<FakeClock>(100);
    procs_ = std::make_unique<testing::FakeProcesses>();
    AgentOptions o;
    o.controller_port = *LocalPort(listen_.get());
    o.node = "node-0";
    o.run_dir = dir_ + "/run";
    o.orphan_timeout_s = 0;
    o.heartbeat_interval_s = 5;
    o.procs = procs_.get();
    o.stacks.gdb_path = "";
    o.nvml_library = "";
    // `diagnose` inputs: the check processes exit at once (this binary is a fuzzer).
    o.self_command = {"/bin/false"};
    o.python_dir = dir_ + "/python";
    agent_ = std::make_unique<Agent>(o, clock_.get());
    Status st = agent_->Start();
    Check(st.ok(), "agent start", st.ToString());
    // Start() connected already: the first accept takes it (a wait after it would cost
    // every fresh agent 50 ms).
    for (int i = 0; i < 200 && !ctl_; ++i) {
      Fd c = TcpAcceptNonBlocking(listen_.get());
      if (c.valid()) {
        ctl_.emplace(std::move(c));
      } else {
        PollReadable({listen_.get()}, 0.05);
      }
    }
    Check(ctl_.has_value(), "agent did not connect");
    auto s = UnixDgramSocket();
    Check(s.ok(), "datagram socket");
    sdk_ = std::move(*s);
    Turn();
    if (ranks) {
      Json start = {{"type", "start"},
                    {"attempt", 0},
                    {"run_id", "job-1"},
                    {"job", "job"},
                    {"command", {"/usr/bin/python3", "train.py"}},
                    {"env", Json::object()},
                    {"workdir", dir_ + "/w/workdir"},
                    {"log_dir", dir_ + "/w/log_dir"},
                    {"ckpt_dir", dir_ + "/w/ckpt_dir"},
                    {"ckpt_interval_steps", 10},
                    {"persist_by_agent", true},
                    {"master_addr", "127.0.0.1"},
                    {"master_port", 29500},
                    {"nnodes", 1},
                    {"group_rank", 0},
                    {"nproc_per_node", 2},
                    {"world_size", 2},
                    {"resume_step", -1},
                    {"hang_floor_s", 30},
                    {"startup_timeout_s", 300},
                    {"warm_ranks", 0}};
      SendRaw(start.dump() + "\n");
      for (int i = 0; i < 5 && agent_; ++i) Turn();
    }
  }

  void Stop() {
    agent_.reset();
    ctl_.reset();
    sdk_.Reset();
    procs_.reset();
    clock_.reset();
  }

  std::string dir_;
  Fd listen_;
  std::unique_ptr<FakeClock> clock_;
  std::unique_ptr<testing::FakeProcesses> procs_;
  std::unique_ptr<Agent> agent_;
  std::optional<JsonLineConn> ctl_;
  Fd sdk_;
  int served_ = 0;
};

}  // namespace bulwark::fuzz
