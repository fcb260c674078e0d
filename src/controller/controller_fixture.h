// Test fixture (not product code): a real Controller on a FakeClock with a fake
// backend; the test plays every agent over loopback TCP and steps the controller with
// RunOnce (controller_generations_test.cc, controller_diagnosis_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "controller/controller.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace bulwark::testing {

namespace fs = std::filesystem;

class FakeBackend : public Backend {
 public:
  const char* Name() const override { return "fake"; }
  Status StartNode(const NodeRequest& req) override {
    ++start_calls;
    if (!capacity) return Unavailable("no machine free");
    if (!start_error.ok()) return start_error;
    if (req.slot < 0 && !standby_capacity) return Unavailable("no standby machine free");
    if (req.slot < 0 && !standby_error.ok()) return standby_error;
    if (req.slot >= 0 && !slot_error.ok()) return slot_error;
    started.push_back(req);
    return Status::Ok();
  }
  Status KillNode(const std::string& id) override {
    killed.push_back(id);
    return Status::Ok();
  }
  Status ReleaseNode(const std::string&, double) override { return Status::Ok(); }
  std::vector<NodeLoss> Poll() override {
    std::vector<NodeLoss> out;
    out.swap(losses);
    return out;
  }
  Status QuarantineNode(const std::string& id, const std::string& reason) override {
    quarantined.push_back(id + ": " + reason);
    return Status::Ok();
  }
  Status Teardown(double) override { return Status::Ok(); }
  std::vector<NodeRequest> started;
  std::vector<std::string> killed;
  std::vector<std::string> quarantined;  // "node-1: <reason>"
  std::vector<NodeLoss> losses;          // the next Poll's answer
  bool capacity = true;                  // false: StartNode answers UNAVAILABLE
  Status start_error;                    // not OK: StartNode fails with it
  Status standby_error;                  // not OK: standby starts (slot < 0) fail with it
  Status slot_error;                     // not OK: slot starts (slot >= 0) fail with it
  bool standby_capacity = true;          // false: standby starts answer UNAVAILABLE
  int start_calls = 0;
};

class ControllerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_ctl_gen.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    ctl_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  void Begin(const std::string& spec_text) {
    auto spec = ParseJobSpec(spec_text, "test.yaml", dir_);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto st = Store::Open(dir_ + "/bulwark.db");
    ASSERT_TRUE(st.ok());
    store_ = std::move(*st);
    ControllerOptions o;
    o.run_dir = dir_ + "/run";
    o.echo_events = false;
    ctl_ = std::make_unique<Controller>(*spec, o, &backend_, store_.get(), &clock_);
    ASSERT_TRUE(ctl_->Start().ok());
    const std::string addr = ctl_->Address();
    const int port = std::stoi(addr.substr(addr.rfind(':') + 1));
    for (int i = 0; i < 2; ++i) {
      auto fd = TcpConnect("127.0.0.1", port, 5);
      ASSERT_TRUE(fd.ok());
      agents_.emplace_back(std::move(*fd));
      Send(i, {{"type", "hello"},
               {"node", "node-" + std::to_string(i)},
               {"pid", 100 + i},
               {"peer_host", "127.0.0.1"},
               {"peer_port", 7000 + i},
               {"free_port", 0},
               {"diag_checks", diag_checks_}});
    }
  }

  // The messages of job `job`'s stored events of `reason`, oldest first.
  std::vector<std::string> EventMessages(const std::string& job, const std::string& reason) {
    std::vector<std::string> out;
    auto all = store_->ListEvents(job);
    EXPECT_TRUE(all.ok());
    if (!all.ok()) return out;
    for (const EventRecord& e : *all) {
      if (e.reason == reason) out.push_back(e.message);
    }
    return out;
  }

  // Another agent (a standby the controller started) connects as `node_id`; it is
  // agents_[returned index].
  int Connect(const std::string& node_id, int pid) {
    const std::string addr = ctl_->Address();
    auto fd = TcpConnect("127.0.0.1", std::stoi(addr.substr(addr.rfind(':') + 1)), 5);
    EXPECT_TRUE(fd.ok());
    if (!fd.ok()) return -1;
    agents_.emplace_back(std::move(*fd));
    const int i = static_cast<int>(agents_.size()) - 1;
    Send(i, {{"type", "hello"},
             {"node", node_id},
             {"pid", pid},
             {"peer_host", "127.0.0.1"},
             {"peer_port", 7000 + i},
             {"free_port", 0},
             {"diag_checks", diag_checks_}});
    return i;
  }

  void Send(int node, const Json& m) {
    ASSERT_TRUE(agents_[node].Send(m).ok());
    ASSERT_TRUE(agents_[node].Flush(1).ok());
  }

  // Steps the controller until `node` received a message of `type`; returns it.
  Json Expect(int node, const std::string& type, int turns = 400) {
    for (int i = 0; i < turns; ++i) {
      for (const Json& m : agents_[node].Read()) inbox_[node].push_back(m);
      for (auto it = inbox_[node].begin(); it != inbox_[node].end(); ++it) {
        if ((*it)["type"] == type) {
          Json m = *it;
          inbox_[node].erase(it);
          return m;
        }
      }
      if (!ctl_->RunOnce()) break;
    }
    ADD_FAILURE() << "node " << node << " got no '" << type << "'";
    return Json();
  }

  // Both agents start attempt `attempt`: pids 1000 * (attempt + 1) + rank, or `pids`.
  void Started(int attempt, std::map<int, std::pair<int, std::string>> how = {}) {
    for (int n = 0; n < 2; ++n) {
      Json ranks = Json::array();
      for (int l = 0; l < 2; ++l) {
        const int r = n * 2 + l;
        auto it = how.find(r);
        const int pid = it != how.end() ? it->second.first : 1000 * (attempt + 1) + r;
        const std::string h = it != how.end() ? it->second.second : "spawned";
        ranks.push_back({{"rank", r},
                         {"local_rank", l},
                         {"pid", pid},
                         {"pgid", pid},
                         {"how", h},
                         {"in_process", h == "kept"}});
      }
      Send(n, {{"type", "started"}, {"attempt", attempt}, {"ranks", ranks}});
    }
  }
  // Ranks declare in-process recovery (as their agents report right after they start,
  // long before a fault); the controller reads every report before the test goes on.
  void InProcess(int attempt, std::vector<int> ranks) {
    for (int r : ranks) {
      Send(r / 2, {{"type", "rank_info"},
                   {"attempt", attempt},
                   {"rank", r},
                   {"pid", 0},
                   {"in_process", true}});
    }
    for (int i = 0; i < 5; ++i) ctl_->RunOnce();
  }
  void Step(int attempt, long step) {
    Send(0, {{"type", "step"},
             {"attempt", attempt},
             {"rank", 0},
             {"step", step},
             {"loss", 1.0},
             {"step_time", 0.1},
             {"t", clock_.NowWall()}});
  }
  void Crash(int attempt, int rank) {
    const double t = clock_.NowWall();
    Send(rank / 2, {{"type", "incident"},
                    {"attempt", attempt},
                    {"kind", "crash"},
                    {"subtype", "SIGKILL"},
                    {"rank", rank},
                    {"step", 5},
                    {"fault_time", t},
                    {"detect_time", t},
                    {"detail", "rank crashed"},
                    {"node", "x"}});
  }
  void Stopped(int attempt, std::vector<std::pair<int, int>> parked) {
    for (int n = 0; n < 2; ++n) {
      Json p = Json::array();
      for (auto [rank, pid] : parked) {
        if (rank / 2 == n) p.push_back({{"rank", rank}, {"pid", pid}});
      }
      Send(n, {{"type", "stopped"}, {"attempt", attempt}, {"mem", Json::object()}, {"parked", p}});
    }
  }

  // Stop-diagnose: both slots of `spec` start, rank `rank` reports `kind`/`subtype` at
  // step 5 and every rank stops; returns the `diagnose` its node gets.
  Json FaultThenDiagnose(const std::string& spec, const char* kind, const char* subtype, int rank) {
    Begin(spec);
    Expect(0, "start");
    Expect(1, "start");
    Started(0);
    Step(0, 5);
    const double t = clock_.NowWall();
    Send(rank / 2, {{"type", "incident"},
                    {"attempt", 0},
                    {"kind", kind},
                    {"subtype", subtype},
                    {"rank", rank},
                    {"step", 5},
                    {"fault_time", t},
                    {"detect_time", t},
                    {"detail", std::string(kind) + " " + subtype}});
    Expect(rank / 2, "stop");
    Stopped(0, {});
    return Expect(rank / 2, "diagnose");
  }
  // A job of 2 nodes x 2 ranks named `name` with `spares` standbys, heartbeats that never
  // run out on the fake clock.
  static std::string TwoNodeSpec(const std::string& name, int spares) {
    return "name: " + name +
           "\nnodes: 2\nprocsPerNode: 2\ncommand: [\"/usr/bin/python3\", \"train.py\"]\n"
           "checkpoint: {intervalSteps: 10}\nfaultPolicy:\n  spareNodes: " +
           std::to_string(spares) + "\n  heartbeat: {intervalSeconds: 1000, misses: 3}\n";
  }

  // Cancels the job, lets the agents go and runs the controller to its end: the report.
  Json Finish() {
    ctl_->Cancel();
    for (int i = 0; i < 50; ++i) ctl_->RunOnce();
    agents_.clear();
    while (ctl_->RunOnce()) {
    }
    auto result = ctl_->Run();
    EXPECT_TRUE(result.ok());
    return result.ok() ? result->report : Json();
  }

  // What the agents say they can check in their hello (the link check: ["link"]).
  Json diag_checks_ = Json::array({"matmul", "disk"});
  std::string dir_;
  FakeClock clock_{1000};
  FakeBackend backend_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Controller> ctl_;
  std::vector<JsonLineConn> agents_;
  std::map<int, std::vector<Json>> inbox_;
};

}  // namespace bulwark::testing
