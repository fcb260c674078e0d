// The controller's reader of agent -> controller messages (docs/protocol.md §1) and of
// client requests (chaos_request, status_request, update_request): a real
// bulwark::Controller (controller/controller.h) of a 2-node x 2-rank job on a FakeClock
// with a fake backend, its two agents played by this harness over loopback TCP, as
// controller_generations_test.cc does. Input: byte 0 picks the connection (bits 0-1:
// 0 = a new client connection, 1 = node-0's agent, 2/3 = node-1's agent), the rest is
// bytes on it (newline-delimited JSON). One controller serves many inputs; it is
// replaced when its job ends (a run of `exited` reports, a give-up) and every kRecycle
// inputs, so state stays bounded.
// Contracts checked beyond "no crash": RunOnce keeps answering, everything the
// controller sends an agent is a JSON object with a string `type`, and a client gets
// at most one `reply`, with a boolean `ok` and a message when not ok.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/clock.h"
#include "common/net.h"
#include "controller/controller.h"
#include "fuzz/fuzz_util.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace {

using bulwark::Fd;
using bulwark::Json;
using bulwark::JsonLineConn;
using bulwark::fuzz::Check;
using bulwark::fuzz::ScratchDir;

class FakeBackend : public bulwark::Backend {
 public:
  const char* Name() const override { return "fuzz"; }
  bulwark::Status StartNode(const bulwark::NodeRequest&) override { return bulwark::Status::Ok(); }
  bulwark::Status KillNode(const std::string&) override { return bulwark::Status::Ok(); }
  bulwark::Status ReleaseNode(const std::string&, double) override { return bulwark::Status::Ok(); }
  std::vector<bulwark::NodeLoss> Poll() override { return {}; }
  bulwark::Status Teardown(double) override { return bulwark::Status::Ok(); }
};

class Fixture {
 public:
  static constexpr int kRecycle = 500;

  Fixture() {
    signal(SIGPIPE, SIG_IGN);
    dir_ = ScratchDir("bw_fuzz_ctl");
  }

  void Get() {
    if (ctl_ && ++served_ > kRecycle) Stop();
    if (!ctl_) Begin();
  }

  void Send(int node, const std::string& bytes) {
    if (node < 0) {
      const std::string addr = ctl_->Address();
      auto fd = bulwark::TcpConnect("127.0.0.1", std::stoi(addr.substr(addr.rfind(':') + 1)), 5);
      Check(fd.ok(), "client connect");
      client_.emplace(std::move(*fd));
      WriteAll(client_->fd(), bytes);
    } else {
      WriteAll(agents_[node].fd(), bytes);
    }
  }

  bool Turn() {
    if (!ctl_) return false;
    const bool running = ctl_->RunOnce();
    for (JsonLineConn& a : agents_) {
      std::vector<std::string> bad;
      for (const Json& m : a.Read(&bad)) {
        Check(m.is_object() && m.contains("type") && m["type"].is_string(),
              "controller sent an agent a message without a type", m.dump());
      }
      Check(bad.empty(), "controller sent an agent a malformed line",
            bad.empty() ? "" : bad.front());
    }
    if (client_) {
      std::vector<std::string> bad;
      for (const Json& m : client_->Read(&bad)) {
        if (m["type"] != "reply") continue;
        ++replies_;
        Check(m.contains("ok") && m["ok"].is_boolean(), "reply without a boolean ok", m.dump());
        if (!m["ok"].get<bool>()) {
          Check(m.contains("message") && m["message"].is_string() &&
                    !m["message"].get<std::string>().empty(),
                "refusal without a message", m.dump());
        }
      }
      Check(bad.empty(), "controller sent a client a malformed line",
            bad.empty() ? "" : bad.front());
      Check(replies_ <= 1, "more than one reply to one request");
    }
    if (!running) Stop();
    return running;
  }

  void EndInput() {
    client_.reset();
    replies_ = 0;
  }

 private:
  void WriteAll(int fd, const std::string& bytes) {
    size_t off = 0;
    for (int i = 0; off < bytes.size() && i < 10000; ++i) {
      ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        return;
      } else if (!Turn()) {
        return;
      }
    }
  }

  void Begin() {
    served_ = 0;
    ++generation_;
    const std::string run = dir_ + "/" + std::to_string(generation_);
    const std::string spec_text =
        "name: fuzz\nnodes: 2\nprocsPerNode: 2\ncommand: [\"/usr/bin/python3\", \"t.py\"]\n"
        "checkpoint: {intervalSteps: 10, memorySlots: 4}\n"
        "faultPolicy: {restartBudget: 1000, heartbeat: {intervalSeconds: 1000, misses: 3}}\n";
    auto spec = bulwark::ParseJobSpec(spec_text, "fuzz.yaml", run);
    Check(spec.ok(), "harness spec", spec.status().ToString());
    auto store = bulwark::Store::Open(run + ".db");
    Check(store.ok(), "store", store.status().ToString());
    store_ = std::move(*store);
    clock_ = std::make_unique<bulwark::FakeClock>(1000);
    bulwark::ControllerOptions o;
    o.run_dir = run + "/run";
    o.echo_events = false;
    ctl_ = std::make_unique<bulwark::Controller>(*spec, o, &backend_, store_.get(), clock_.get());
    bulwark::Status st = ctl_->Start();
    Check(st.ok(), "controller start", st.ToString());
    const std::string addr = ctl_->Address();
    const int port = std::stoi(addr.substr(addr.rfind(':') + 1));
    for (int i = 0; i < 2; ++i) {
      auto fd = bulwark::TcpConnect("127.0.0.1", port, 5);
      Check(fd.ok(), "agent connect");
      agents_.emplace_back(std::move(*fd));
      Json hello = {{"type", "hello"},       {"node", "node-" + std::to_string(i)},
                    {"pid", 100 + i},        {"peer_host", "127.0.0.1"},
                    {"peer_port", 7000 + i}, {"free_port", 0}};
      bulwark::IgnoreError(agents_.back().Send(hello), "a lost hello: the controller waits");
      bulwark::IgnoreError(agents_.back().Flush(1), "a lost hello: the controller waits");
    }
    for (int i = 0; i < 10 && ctl_; ++i) Turn();
  }

  void Stop() {
    EndInput();
    agents_.clear();
    ctl_.reset();
    store_.reset();
    clock_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_ + "/" + std::to_string(generation_), ec);
    std::filesystem::remove(dir_ + "/" + std::to_string(generation_) + ".db", ec);
  }

  std::string dir_;
  FakeBackend backend_;
  std::unique_ptr<bulwark::FakeClock> clock_;
  std::unique_ptr<bulwark::Store> store_;
  std::unique_ptr<bulwark::Controller> ctl_;
  std::vector<JsonLineConn> agents_;
  std::optional<JsonLineConn> client_;
  int replies_ = 0;
  int served_ = 0;
  int generation_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bulwark::fuzz::Silence quiet(/*out=*/true, /*err=*/true);  // the controller's complaints
  static auto* fixture = new Fixture();
  if (size == 0) return 0;
  fixture->Get();
  const int sel = data[0] & 3;
  const int node = sel == 0 ? -1 : sel == 1 ? 0 : 1;
  fixture->Send(node, std::string(reinterpret_cast<const char*>(data) + 1, size - 1) + "\n");
  for (int i = 0; i < 4 && fixture->Turn(); ++i) {
  }
  fixture->EndInput();
  return 0;
}
