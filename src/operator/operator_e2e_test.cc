// End to end against the fake API server: the operator (in this process) runs a real
// TrainJob whose agents and ranks are real processes started by the fake kubelet. A
// node turns NotReady mid-run; the node is quarantined, the warm standby takes its
// place, and the job succeeds — with the conditions and Events a user would read in
// `kubectl describe`, and every object Bulwark wrote valid against the official
// Kubernetes schema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/proc.h"
#include "k8s/testing/fake_apiserver.h"
#include "k8s/testing/fake_apiserver_test_util.h"
#include "operator/operator.h"
#include "operator/testing/fake_kubelet.h"
#include "trainjob/render.h"
#include "trainjob/testing/schema_check.h"

namespace bulwark::op {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Polls `cond` every 20 ms until it holds or timeout_s passes.
bool WaitFor(const std::function<bool()>& cond, double timeout_s) {
  const double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (SystemClock::Get()->NowMono() < deadline) {
    if (cond()) return true;
    PollReadable({}, 0.02);
  }
  return cond();
}

std::string Str(const Json& j, std::initializer_list<const char*> path) {
  const Json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->contains(k)) return "";
    cur = &(*cur)[k];
  }
  return cur->is_string() ? cur->get<std::string>() : cur->is_null() ? "" : cur->dump();
}

class OperatorE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = BW_TEST_SOURCE_DIR;
    build_ = BW_TEST_BUILD_DIR;
    tag_ = "op-e2e-" + std::to_string(getpid());
    dir_ = "/tmp/bw-" + tag_;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    k8s::testing::FakeApiServerOptions so;
    so.token = "e2e-token";
    so.bookmark_interval_s = 1;
    auto s = k8s::testing::FakeApiServer::Start(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    auto c = k8s::Client::Create(server_->client_config());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
    ASSERT_TRUE(server_->Create(trainjob::TrainJobCrd()).ok());
    testing::FakeKubeletOptions ko;
    ko.server = server_.get();
    // gpu-0..3: h100 in racks r1 (0, 1) and r2 (2, 3); gpu-4, gpu-5: a100 in rack r3.
    for (int i = 0; i < 6; ++i) {
      ko.nodes.push_back({"gpu-" + std::to_string(i),
                          {{"bulwark.dev/gpu-type", i < 4 ? "h100" : "a100"},
                           {"topology.kubernetes.io/zone", "z1"},
                           {"bulwark.dev/block", "b1"},
                           {"bulwark.dev/rack", i < 2   ? "r1"
                                                : i < 4 ? "r2"
                                                        : "r3"}},
                          8});
    }
    ko.binaries["/usr/local/bin/bulwark-agent"] = build_ + "/bin/bulwark-agent";
    ko.root = dir_ + "/cluster";
    auto k = testing::FakeKubelet::Start(ko);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kubelet_ = std::move(*k);
  }

  void TearDown() override {
    StopOperator();
    kubelet_.reset();
    if (HasFailure()) {
      std::printf("kept %s for inspection\n", dir_.c_str());
    } else {
      fs::remove_all(dir_);
    }
  }

  void StartOperator(const std::string& identity = "a") {
    OperatorOptions oo;
    oo.leader_election = true;
    oo.leader.lease_namespace = "default";
    oo.leader.identity = "operator-" + identity + "-" + tag_;
    oo.leader.lease_duration_s = 5;
    oo.leader.renew_deadline_s = 4;
    oo.leader.retry_period_s = 0.5;
    oo.runner.state_dir = dir_ + "/state";
    oo.runner.bind_host = "127.0.0.1";
    oo.runner.advertise_host = "127.0.0.1";
    oo.runner.agent_connect_timeout_s = 60;
    oo.runner.capacity_wait_s = 120;
    oo.status_progress_interval_s = 0.5;
    oo.scheduler.requeue_backoff_base_s = 1;  // requeued jobs retry within seconds here
    oo.scheduler.requeue_backoff_cap_s = 4;
    op_ = std::make_unique<Operator>(client_.get(), oo);
    op_thread_ = std::thread([this] { op_status_ = op_->Run(&stop_); });
  }

  // GET `path` as `kubectl get` asks for it (a meta.k8s.io Table, JSON as fallback);
  // prints the table as kubectl would and returns it (null on failure).
  Json KubectlGetTable(const std::string& path) {
    k8s::testing::Curl curl(*server_);
    k8s::testing::HttpResult r =
        curl.Do("GET", path, "", "",
                {"Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json"});
    EXPECT_EQ(r.code, 200) << r.body;
    Json t = r.json();
    if (!t.is_object() || t.value("kind", "") != "Table") {
      ADD_FAILURE() << "not a Table: " << r.body;
      return nullptr;
    }
    std::ostringstream out;
    for (const Json& c : t["columnDefinitions"]) out << c.value("name", "") << "\t";
    out << "\n";
    for (const Json& row : t["rows"]) {
      for (const Json& cell : row["cells"]) {
        out << (cell.is_null()     ? "<none>"
                : cell.is_string() ? cell.get<std::string>()
                                   : cell.dump())
            << "\t";
      }
      out << "\n";
    }
    std::printf("$ kubectl get trainjobs\n%s", out.str().c_str());
    return t;
  }

  void StopOperator() {
    stop_.store(true);
    if (op_thread_.joinable()) op_thread_.join();
    stop_.store(false);
  }

  Json TrainJob(const std::string& name, int nodes, int steps, const std::string& spare,
                const std::string& gpu_type = "h100") {
    const std::string preload = BW_TEST_PRELOAD;
    std::ostringstream y;
    y << R"({"apiVersion": "bulwark.dev/v1alpha1", "kind": "TrainJob",
      "metadata": {"name": ")"
      << name << R"(", "namespace": "default"},
      "spec": {"nodes": )"
      << nodes << R"(, "procsPerNode": 1,
        "command": ["/usr/bin/python3", ")"
      << src_ << R"(/tests/trainers/tiny_trainer.py"],
        "args": ["--steps", ")"
      << steps << R"("],
        "env": {"BW_E2E_TAG": ")"
      << tag_ << R"(", "TINY_STEP_TIME": "0.05")"
      << (preload.empty() ? std::string()
                          : ", \"LD_PRELOAD\": \"" + preload +
                                "\", \"ASAN_OPTIONS\": \"detect_leaks=0:verify_asan_link_order=0\"")
      << R"(},
        "checkpoint": {"dir": ")"
      << dir_ << R"(/ckpt", "intervalSteps": 10, "keep": 3, "memorySlots": 4},
        "faultPolicy": {"restartBudget": 5, "spareNodes": )"
      << spare << R"(, "backoff": {"baseSeconds": 0.1, "capSeconds": 1},
                        "heartbeat": {"intervalSeconds": 0.5, "misses": 4},
                        "stopGraceSeconds": 2},
        "scheduling": {"gpuType": ")"
      << gpu_type << R"("},
        "pod": {"image": "ghcr.io/acme/train:1.0", "gpusPerNode": 8}}})";
    return Json::parse(y.str());
  }

  Json Get(const std::string& name) {
    auto r = server_->Get(k8s::TrainJobs(), "default", name);
    return r.ok() ? *r : Json();
  }

  // The events about one object, oldest first (by creation, as kubectl sorts them).
  std::vector<Json> EventsFor(const std::string& kind, const std::string& name) {
    std::vector<Json> out;
    for (const Json& e : server_->List(k8s::Events())) {
      if (Str(e, {"involvedObject", "kind"}) == kind &&
          Str(e, {"involvedObject", "name"}) == name) {
        out.push_back(e);
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const Json& a, const Json& b) {
      return std::stol(Str(a, {"metadata", "resourceVersion"})) <
             std::stol(Str(b, {"metadata", "resourceVersion"}));
    });
    return out;
  }

  // What `kubectl describe trainjob NAME` would show: status, conditions and events.
  std::string Describe(const std::string& name) {
    const Json tj = Get(name);
    std::ostringstream o;
    o << "Name: " << name << "\nPhase: " << Str(tj, {"status", "phase"})
      << "\nRestarts: " << Str(tj, {"status", "restarts"})
      << "\nCurrent step: " << Str(tj, {"status", "currentStep"})
      << "\nLast checkpoint: " << Str(tj, {"status", "lastCheckpoint", "step"})
      << "\nETTR: " << Str(tj, {"status", "ettr", "ratio"}) << "\nConditions:\n";
    if (tj.contains("status") && tj["status"].contains("conditions")) {
      for (const Json& c : tj["status"]["conditions"]) {
        o << "  " << Str(c, {"type"}) << "=" << Str(c, {"status"}) << " " << Str(c, {"reason"})
          << ": " << Str(c, {"message"}) << "\n";
      }
    }
    o << "Events:\n";
    for (const Json& e : EventsFor("TrainJob", name)) {
      o << "  " << Str(e, {"type"}) << " " << Str(e, {"reason"}) << ": " << Str(e, {"message"})
        << "\n";
    }
    return o.str();
  }

  bool HasEvent(const std::string& kind, const std::string& name, const std::string& reason,
                const std::string& text = "") {
    for (const Json& e : EventsFor(kind, name)) {
      if (Str(e, {"reason"}) == reason && Str(e, {"message"}).find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  std::string Phase(const std::string& name) { return Str(Get(name), {"status", "phase"}); }

  long Step(const std::string& name) {
    const std::string s = Str(Get(name), {"status", "currentStep"});
    return s.empty() ? -1 : std::stol(s);
  }

  bool Finished(const std::string& name) {
    return Phase(name) == "Succeeded" || Phase(name) == "Failed";
  }

  std::string src_, build_, tag_, dir_;
  std::unique_ptr<k8s::testing::FakeApiServer> server_;
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<testing::FakeKubelet> kubelet_;
  std::unique_ptr<Operator> op_;
  std::thread op_thread_;
  std::atomic<bool> stop_{false};
  Status op_status_;
};

TEST_F(OperatorE2E, NodeLossIsQuarantinedAndTheStandbyTakesOver) {
  StartOperator();
  auto created = client_->Create(k8s::TrainJobs(), "default", TrainJob("gpt", 2, 300, "1"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();

  // Admitted as a gang: two workers and one warm standby, each pod bound to a node.
  ASSERT_TRUE(WaitFor(
      [&] {
        return Str(Get("gpt"), {"status", "phase"}) == "Running";
      },
      90))
      << Describe("gpt") << "\nkubelet:\n"
      << ::testing::PrintToString(kubelet_->Summary());
  std::vector<Json> pods = server_->List(k8s::Pods(), "default");
  ASSERT_EQ(pods.size(), 3u) << Describe("gpt");
  std::string victim_node;
  for (const Json& p : pods) {
    EXPECT_EQ(Str(p, {"spec", "hostNetwork"}), "true");
    EXPECT_EQ(Str(p, {"spec", "dnsPolicy"}), "ClusterFirstWithHostNet");
    EXPECT_FALSE(Str(p, {"spec", "nodeName"}).empty());
    EXPECT_EQ(Str(p, {"metadata", "ownerReferences"}).find(Str(Get("gpt"), {"metadata", "uid"})) !=
                  std::string::npos,
              true);
    if (Str(p, {"metadata", "labels", "bulwark.dev/role"}) == "worker" && victim_node.empty()) {
      victim_node = Str(p, {"spec", "nodeName"});
    }
  }
  ASSERT_FALSE(victim_node.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string s = Str(Get("gpt"), {"status", "currentStep"});
        return !s.empty() && std::stol(s) >= 60;
      },
      60))
      << Describe("gpt");

  // The node dies.
  ASSERT_TRUE(kubelet_->SetNodeReady(victim_node, false).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        auto n = server_->Get(k8s::Nodes(), "", victim_node);
        return n.ok() &&
               Str(*n, {"spec", "taints"}).find("bulwark.dev/quarantined") != std::string::npos;
      },
      30))
      << Describe("gpt");
  EXPECT_TRUE(WaitFor([&] { return HasEvent("Node", victim_node, "Quarantined"); }, 10));
  ASSERT_TRUE(WaitFor([&] { return HasEvent("TrainJob", "gpt", "StandbyPromoted"); }, 30))
      << Describe("gpt");
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string p = Str(Get("gpt"), {"status", "phase"});
        return p == "Succeeded" || p == "Failed";
      },
      180))
      << Describe("gpt");
  const Json done = Get("gpt");
  EXPECT_EQ(Str(done, {"status", "phase"}), "Succeeded") << Describe("gpt");
  EXPECT_GE(std::stoi(Str(done, {"status", "restarts"})), 1) << Describe("gpt");
  EXPECT_TRUE(HasEvent("TrainJob", "gpt", "NodeFailed")) << Describe("gpt");
  EXPECT_TRUE(HasEvent("TrainJob", "gpt", "Admitted")) << Describe("gpt");
  // The conditions a user reads.
  std::map<std::string, std::string> conds;
  for (const Json& c : done["status"]["conditions"]) conds[Str(c, {"type"})] = Str(c, {"status"});
  EXPECT_EQ(conds["Admitted"], "True");
  EXPECT_EQ(conds["Succeeded"], "True");
  EXPECT_EQ(conds["Failed"], "False");
  EXPECT_EQ(conds["Running"], "False");
  EXPECT_FALSE(Str(done, {"status", "lastCheckpoint", "step"}).empty()) << Describe("gpt");
  std::printf("%s", Describe("gpt").c_str());
  // What `kubectl get trainjobs` prints: the CRD's printer columns, each filled.
  const Json table = KubectlGetTable("/apis/bulwark.dev/v1alpha1/namespaces/default/trainjobs");
  std::vector<std::string> columns;
  for (const Json& c : table["columnDefinitions"]) columns.push_back(c.value("name", ""));
  EXPECT_EQ(columns, (std::vector<std::string>{"Name", "Phase", "Nodes", "Step", "Restarts", "ETTR",
                                               "Checkpoint", "Age"}));
  ASSERT_EQ(table["rows"].size(), 1u) << table.dump();
  const Json& cells = table["rows"][0]["cells"];
  ASSERT_EQ(cells.size(), columns.size()) << table.dump();
  EXPECT_EQ(cells[0], "gpt");
  EXPECT_EQ(cells[1], "Succeeded");
  EXPECT_EQ(cells[2], 2);
  EXPECT_TRUE(cells[3].is_number_integer() && cells[3].get<int64_t>() >= 60) << cells.dump();
  EXPECT_TRUE(cells[4].is_number_integer() && cells[4].get<int64_t>() >= 1) << cells.dump();
  EXPECT_TRUE(cells[5].is_number() && cells[5].get<double>() > 0 && cells[5].get<double>() <= 1)
      << cells.dump();
  EXPECT_TRUE(cells[6].is_number_integer() && cells[6].get<int64_t>() > 0) << cells.dump();
  EXPECT_TRUE(cells[7].is_string() && !cells[7].get<std::string>().empty()) << cells.dump();

  // No pod of the job remains, and every object Bulwark wrote is valid.
  ASSERT_TRUE(WaitFor([&] { return server_->List(k8s::Pods(), "default").empty(); }, 30))
      << ::testing::PrintToString(server_->List(k8s::Pods(), "default").size());
  EXPECT_TRUE(server_->Get(k8s::Services(), "default", "gpt").ok());  // headless rendezvous
  std::vector<Json> objects;
  for (const k8s::Resource* r :
       {&k8s::Events(), &k8s::Leases(), &k8s::Nodes(), &k8s::TrainJobs(), &k8s::Services()}) {
    for (Json& o : server_->List(*r)) {
      if (!o.contains("apiVersion")) o["apiVersion"] = r->ApiVersion();
      if (!o.contains("kind")) o["kind"] = r->kind;
      objects.push_back(std::move(o));
    }
  }
  // Pods as Bulwark created them (their status is the fake kubelet's, not ours).
  for (Json& p : pods) {
    p.erase("status");
    objects.push_back(std::move(p));
  }
  Status valid = trainjob::testing::ValidateK8sObjects(objects);
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  StopOperator();
  EXPECT_TRUE(op_status_.ok()) << op_status_.ToString();
}

// Volcano's PodGroup CRD as far as the fake API server needs it (its schema is
// Volcano's business: the fields are preserved, not checked).
Json VolcanoPodGroupCrd() {
  return k8s::testing::CrdJson("scheduling.volcano.sh", "podgroups", "PodGroup", "v1beta1",
                               k8s::testing::OpenSpecStatusSchema(),
                               {{"subresources", {{"status", Json::object()}}}});
}

// The test's stand-in for the Volcano scheduler (a test double at the edge: no
// Volcano runs here). Each call: a PodGroup whose phase is not Running yet is
// admitted all at once when minMember of its pods wait unbound (each bound to a free
// Ready node, then the group's phase set to Running); afterwards its later pods (the
// standby, replacements) are bound one by one. Returns "pod@node" for each binding.
std::vector<std::string> PlayVolcano(k8s::testing::FakeApiServer& server) {
  std::vector<std::string> bound;
  std::set<std::string> busy;
  std::vector<Json> pods = server.List(k8s::Pods(), "default");
  for (const Json& p : pods) {
    if (!Str(p, {"spec", "nodeName"}).empty()) busy.insert(Str(p, {"spec", "nodeName"}));
  }
  std::vector<std::string> free;
  for (const Json& n : server.List(k8s::Nodes())) {
    const std::string name = Str(n, {"metadata", "name"});
    bool ready = false;
    for (const Json& c : n["status"]["conditions"]) {
      ready |= Str(c, {"type"}) == "Ready" && Str(c, {"status"}) == "True";
    }
    if (ready && busy.count(name) == 0 && Str(n, {"spec", "taints"}).empty()) {
      free.push_back(name);
    }
  }
  for (Json pg : server.List(k8s::PodGroups(), "default")) {
    const std::string group = Str(pg, {"metadata", "name"});
    std::vector<Json> waiting;
    for (const Json& p : pods) {
      if (Str(p, {"spec", "schedulerName"}) == "volcano" &&
          Str(p, {"metadata", "annotations", "scheduling.k8s.io/group-name"}) == group &&
          Str(p, {"spec", "nodeName"}).empty() &&
          Str(p, {"metadata", "deletionTimestamp"}).empty()) {
        waiting.push_back(p);
      }
    }
    const bool running = Str(pg, {"status", "phase"}) == "Running";
    const size_t min_member = pg["spec"].value("minMember", 1);
    if (waiting.empty() ||
        (!running && (waiting.size() < min_member || free.size() < min_member))) {
      continue;
    }
    for (Json& p : waiting) {
      if (free.empty()) break;
      p["spec"]["nodeName"] = free.back();
      if (server.Update(p).ok()) bound.push_back(Str(p, {"metadata", "name"}) + "@" + free.back());
      free.pop_back();
    }
    if (!running) {
      pg["status"] = {{"phase", "Running"}};
      EXPECT_TRUE(server.UpdateStatus(pg).ok());
    }
  }
  return bound;
}

// gang: volcano — the operator creates the PodGroup and the pods, unbound, for the
// volcano scheduler, and does not place them itself; once "Volcano" binds them the
// job runs, loses a node and finishes on the standby as with Bulwark's placement.
TEST_F(OperatorE2E, VolcanoGangSchedulingIsDelegated) {
  ASSERT_TRUE(server_->Create(VolcanoPodGroupCrd()).ok());
  StartOperator();
  Json tj = TrainJob("vc", 2, 200, "1");
  tj["spec"]["scheduling"]["gang"] = "volcano";
  tj["spec"]["scheduling"]["queue"] = "research";
  ASSERT_TRUE(client_->Create(k8s::TrainJobs(), "default", tj).ok());

  // The PodGroup and three unbound pods (two workers' worth and the standby): the
  // operator waits for the scheduler it delegated to.
  ASSERT_TRUE(WaitFor([&] { return server_->List(k8s::Pods(), "default").size() == 3; }, 30))
      << Describe("vc");
  auto pg = server_->Get(k8s::PodGroups(), "default", "vc");
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  EXPECT_EQ((*pg)["spec"]["minMember"], 2);
  EXPECT_EQ((*pg)["spec"]["queue"], "research");
  EXPECT_EQ((*pg)["spec"]["minResources"]["nvidia.com/gpu"], "16");
  for (const Json& p : server_->List(k8s::Pods(), "default")) {
    EXPECT_EQ(Str(p, {"spec", "schedulerName"}), "volcano");
    EXPECT_EQ(Str(p, {"spec", "nodeName"}), "") << "the operator must not bind: " << p.dump();
  }

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::string> bindings;
  std::thread volcano([&] {
    while (!stop.load()) {
      std::vector<std::string> b = PlayVolcano(*server_);
      std::lock_guard<std::mutex> l(mu);
      bindings.insert(bindings.end(), b.begin(), b.end());
      PollReadable({}, 0.02);
    }
  });
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string s = Str(Get("vc"), {"status", "currentStep"});
        return !s.empty() && std::stol(s) >= 40;
      },
      90))
      << Describe("vc") << "\nkubelet:\n"
      << ::testing::PrintToString(kubelet_->Summary());
  std::string victim;
  for (const Json& p : server_->List(k8s::Pods(), "default")) {
    if (Str(p, {"metadata", "labels", "bulwark.dev/role"}) == "worker") {
      victim = Str(p, {"spec", "nodeName"});
      break;
    }
  }
  ASSERT_FALSE(victim.empty()) << Describe("vc");
  ASSERT_TRUE(kubelet_->SetNodeReady(victim, false).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string p = Str(Get("vc"), {"status", "phase"});
        return p == "Succeeded" || p == "Failed";
      },
      180))
      << Describe("vc");
  stop.store(true);
  volcano.join();
  const Json done = Get("vc");
  EXPECT_EQ(Str(done, {"status", "phase"}), "Succeeded") << Describe("vc");
  EXPECT_GE(std::stoi(Str(done, {"status", "restarts"})), 1) << Describe("vc");
  std::string admitted;
  for (const Json& c : done["status"]["conditions"]) {
    if (Str(c, {"type"}) == "Admitted") admitted = Str(c, {"status"}) + ": " + Str(c, {"message"});
  }
  EXPECT_EQ(admitted, "True: admitted (gang scheduling delegated)") << Describe("vc");
  std::lock_guard<std::mutex> l(mu);
  EXPECT_GE(bindings.size(), 3u) << ::testing::PrintToString(bindings);
  std::printf("volcano bound: %s\n", ::testing::PrintToString(bindings).c_str());
}

TEST_F(OperatorE2E, NoReplacementRequeuesThenResumesFromTheCheckpoint) {
  StartOperator();
  // Two a100 nodes, no standby: losing one leaves no replacement in the cluster.
  ASSERT_TRUE(
      client_->Create(k8s::TrainJobs(), "default", TrainJob("small", 2, 300, "0", "a100")).ok());
  ASSERT_TRUE(WaitFor([&] { return Step("small") >= 60; }, 90)) << Describe("small");
  ASSERT_TRUE(kubelet_->SetNodeReady("gpu-4", false).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEvent("TrainJob", "small", "Requeued"); }, 30))
      << Describe("small");
  ASSERT_TRUE(WaitFor([&] { return Phase("small") == "Pending"; }, 30)) << Describe("small");
  const Json pending = Get("small");
  EXPECT_THAT(Str(pending, {"status", "message"}), HasSubstr("waiting"));
  // The node is repaired: an administrator marks it Ready and removes the taint.
  ASSERT_TRUE(kubelet_->SetNodeReady("gpu-4", true).ok());
  auto node = client_->UpdateWithRetry(k8s::Nodes(), "", "gpu-4", [](Json& n) {
    n["spec"].erase("taints");
    return Status::Ok();
  });
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return Finished("small"); }, 180)) << Describe("small");
  EXPECT_EQ(Phase("small"), "Succeeded") << Describe("small");
  // The second admission resumed from the committed checkpoint, not from scratch.
  EXPECT_TRUE(HasEvent("TrainJob", "small", "AttemptStarted", "resuming after step"))
      << Describe("small");
  EXPECT_GE(std::stoi(Str(Get("small"), {"status", "restarts"})), 0);
}

TEST_F(OperatorE2E, InvalidSpecFailsWithTheFieldAndDeletionCleansUp) {
  StartOperator();
  Json bad = TrainJob("bad", 1, 10, "0");
  bad["spec"]["env"]["RANK"] = "3";  // the agent sets RANK: the parser refuses it
  ASSERT_TRUE(client_->Create(k8s::TrainJobs(), "default", bad).ok());
  ASSERT_TRUE(WaitFor([&] { return Phase("bad") == "Failed"; }, 30)) << Describe("bad");
  EXPECT_THAT(Str(Get("bad"), {"status", "message"}), HasSubstr("spec.env"));
  EXPECT_TRUE(WaitFor([&] { return HasEvent("TrainJob", "bad", "InvalidSpec"); }, 10));

  ASSERT_TRUE(client_->Create(k8s::TrainJobs(), "default", TrainJob("long", 2, 100000, "1")).ok());
  ASSERT_TRUE(WaitFor([&] { return Step("long") >= 20; }, 90)) << Describe("long");
  ASSERT_EQ(server_->List(k8s::Pods(), "default").size(), 3u);
  // Suspended: stopped, its pods deleted, Pending until resumed.
  auto set_suspend = [&](bool v) {
    return client_->UpdateWithRetry(k8s::TrainJobs(), "default", "long", [v](Json& o) {
      o["spec"]["suspend"] = v;
      return Status::Ok();
    });
  };
  ASSERT_TRUE(set_suspend(true).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return Phase("long") == "Pending" && server_->List(k8s::Pods(), "default").empty() &&
               Str(Get("long"), {"status", "message"}).find("suspend") != std::string::npos;
      },
      60))
      << Describe("long");
  ASSERT_TRUE(set_suspend(false).ok());
  ASSERT_TRUE(WaitFor([&] { return Phase("long") == "Running"; }, 60)) << Describe("long");
  ASSERT_TRUE(WaitFor([&] { return server_->List(k8s::Pods(), "default").size() == 3u; }, 60));
  ASSERT_TRUE(client_->Delete(k8s::TrainJobs(), "default", "long").ok());
  ASSERT_TRUE(WaitFor([&] { return server_->List(k8s::Pods(), "default").empty(); }, 60))
      << ::testing::PrintToString(kubelet_->Summary());
  ASSERT_TRUE(WaitFor([&] { return kubelet_->RunningPods() == 0; }, 30))
      << ::testing::PrintToString(kubelet_->Summary());
}

TEST_F(OperatorE2E, ANewLeaderCarriesOnFromTheCheckpoint) {
  StartOperator("a");
  ASSERT_TRUE(client_->Create(k8s::TrainJobs(), "default", TrainJob("gpt", 2, 300, "0")).ok());
  ASSERT_TRUE(WaitFor([&] { return Step("gpt") >= 60; }, 90)) << Describe("gpt");
  StopOperator();  // hands the lease over: its controllers stop, the status stays Running
  EXPECT_EQ(Phase("gpt"), "Running");
  StartOperator("b");
  ASSERT_TRUE(WaitFor([&] { return Finished("gpt"); }, 180)) << Describe("gpt");
  EXPECT_EQ(Phase("gpt"), "Succeeded") << Describe("gpt");
  EXPECT_TRUE(HasEvent("TrainJob", "gpt", "AttemptStarted", "resuming after step"))
      << Describe("gpt");
  auto lease = server_->Get(k8s::Leases(), "default", "bulwark-operator");
  ASSERT_TRUE(lease.ok());
  EXPECT_THAT(Str(*lease, {"spec", "holderIdentity"}), HasSubstr("operator-b-"));
}

TEST_F(OperatorE2E, TheSameTrainJobRunsUnchangedOnTheLocalBackend) {
  // One spec, two backends: the manifest the operator runs, given to `bulwark run`.
  const std::string path = dir_ + "/trainjob.yaml";
  std::ofstream(path) << TrainJob("local-twin", 2, 60, "1").dump(2);
  SpawnOptions so;
  so.argv = {build_ + "/bin/bulwark", "run", path, "--run-dir", dir_ + "/run", "--store",
             dir_ + "/local.db"};
  so.env = CurrentEnv();
  auto child = Spawn(so);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  std::string out;
  bool eof = false;
  const double deadline = SystemClock::Get()->NowMono() + 240;
  while (!eof && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({child->output.get()}, 0.2);
    out += ReadAvailable(child->output.get(), &eof);
  }
  auto exit = WaitExit(child->pid, 10);
  if (!exit) TerminateGroup(child->pid, child->pgid, 1);
  ASSERT_TRUE(exit.has_value()) << out;
  EXPECT_EQ(exit->code, 0) << out;
  EXPECT_THAT(out, HasSubstr("Succeeded")) << out;
  EXPECT_THAT(out, HasSubstr("the local backend ignores them")) << out;  // a note, not an error
}

}  // namespace
}  // namespace bulwark::op
