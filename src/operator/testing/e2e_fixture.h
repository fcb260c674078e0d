// The operator's end-to-end fixture against a real Kubernetes control plane (etcd,
// kube-apiserver with RBAC, Pod Security admission and an audit log,
// kube-controller-manager's garbage collector, namespace and service-account
// controllers): the operator authenticates as the ServiceAccount of deploy/rbac.yaml with
// its own token and runs real TrainJobs whose agents and ranks are real processes started
// by the node emulator. Each binary that includes it shares one control plane; each test
// has a namespace, nodes and a Lease of its own. Test-only.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/proc.h"
#include "k8s/testing/cluster.h"
#include "k8s/testing/kueue.h"
#include "operator/operator.h"
#include "operator/testing/node_emulator.h"
#include "trainjob/render.h"
#include "trainjob/testing/schema_check.h"
#include "trainjob/yaml_json.h"

namespace bulwark::op::e2e {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Polls `cond` every 20 ms until it holds or timeout_s passes.
inline bool WaitFor(const std::function<bool()>& cond, double timeout_s) {
  return k8s::testing::PollUntil(cond, timeout_s);
}

inline std::string Str(const Json& j, std::initializer_list<const char*> path) {
  const Json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->contains(k)) return "";
    cur = &(*cur)[k];
  }
  return cur->is_string() ? cur->get<std::string>() : cur->is_null() ? "" : cur->dump();
}

inline constexpr const char* kOperatorNamespace = "bulwark-system";
inline constexpr const char* kOperatorAccount = "bulwark-operator";

// deploy/rbac.yaml applied once per process (its namespace first).
inline Status InstallRbac(k8s::Client* admin) {
  static Status installed = [&] {
    Status s = k8s::testing::ApplyObjects(admin, {{{"apiVersion", "v1"},
                                                   {"kind", "Namespace"},
                                                   {"metadata", {{"name", kOperatorNamespace}}}}});
    if (!s.ok()) return s;
    std::ifstream in(std::string(BW_TEST_SOURCE_DIR) + "/deploy/rbac.yaml");
    std::stringstream text;
    text << in.rdbuf();
    auto docs = trainjob::ParseYamlDocuments(text.str(), "deploy/rbac.yaml");
    if (!docs.ok()) return docs.status();
    return k8s::testing::ApplyObjects(admin, *docs);
  }();
  return installed;
}

class OperatorE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = BW_TEST_SOURCE_DIR;
    build_ = BW_TEST_BUILD_DIR;
    static int seq = 0;
    tag_ = "op-e2e-" + std::to_string(getpid()) + "-" + std::to_string(++seq);
    dir_ = "/tmp/bw-" + tag_;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    k8s::testing::ControlPlaneOptions cpo;
    // Audit: which calls the operator's service account made (RbacIsExactlyWhatIsUsed).
    // OwnerReferencesPermissionEnforcement: pods owned with blockOwnerDeletion need
    // `update trainjobs/finalizers`, as on clusters that enable it.
    cpo.audit = true;
    cpo.apiserver_flags = {"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"};
    cp_ = k8s::testing::SharedControlPlane(cpo);
    ASSERT_NE(cp_, nullptr);
    auto admin = k8s::Client::Create(cp_->AdminConfig());
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    admin_ = std::move(*admin);
    api_ = std::make_unique<k8s::testing::Objects>(admin_.get());
    Status crd = k8s::testing::InstallCrd(admin_.get(), trainjob::TrainJobCrd());
    ASSERT_TRUE(crd.ok()) << crd.ToString();
    Status rbac = InstallRbac(admin_.get());
    ASSERT_TRUE(rbac.ok()) << rbac.ToString();
    // The training pods use hostNetwork: their namespace admits privileged pods
    // (docs/kubernetes.md, "Pod Security").
    auto ns = k8s::testing::UniqueNamespace(admin_.get(), "train",
                                            {{"pod-security.kubernetes.io/enforce", "privileged"}});
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
    // The operator authenticates as deploy/rbac.yaml's ServiceAccount, with a token
    // of its own from the TokenRequest API: every call it makes is checked by RBAC.
    auto sa = cp_->ServiceAccountConfig(kOperatorNamespace, kOperatorAccount);
    ASSERT_TRUE(sa.ok()) << sa.status().ToString();
    auto op_client = k8s::Client::Create(*sa);
    ASSERT_TRUE(op_client.ok()) << op_client.status().ToString();
    client_ = std::move(*op_client);
    op::testing::NodeEmulatorOptions ko;
    ko.client = admin_.get();
    // gpu-0..3: h100 in racks r1 (0, 1) and r2 (2, 3); gpu-4, gpu-5: a100 in rack r3.
    for (int i = 0; i < 6; ++i) {
      ko.nodes.push_back({Node(i),
                          {{"bulwark.dev/gpu-type", i < 4 ? "h100" : "a100"},
                           {"topology.kubernetes.io/zone", "z1"},
                           {"bulwark.dev/block", "b1"},
                           {"bulwark.dev/rack", i < 2   ? "r1"
                                                : i < 4 ? "r2"
                                                        : "r3"}},
                          8});
    }
    // Only the operator's image has the agent: job images get it from an init container.
    ko.image_binaries[trainjob::DefaultAgentImage()]["/usr/local/bin/bulwark-agent"] =
        build_ + "/bin/bulwark-agent";
    ko.root = dir_ + "/cluster";
    auto k = op::testing::NodeEmulator::Start(ko);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kubelet_ = std::move(*k);
  }

  void TearDown() override {
    StopOperator();
    // RBAC for real: no call of the operator's ServiceAccount was refused (the test that
    // refuses one on purpose uses an account of its own).
    if (cp_) {
      for (const Json& e : cp_->AuditEvents(std::string("system:serviceaccount:") +
                                            kOperatorNamespace + ":" + kOperatorAccount)) {
        if (Str(e, {"responseStatus", "code"}) == "403") {
          ADD_FAILURE() << "the operator was refused: " << e.dump();
          break;
        }
      }
    }
    kubelet_.reset();
    // Nodes are cluster-scoped: the next test's operator must not see these.
    if (admin_) {
      for (int i = 0; i < 6; ++i) (void)admin_->Delete(k8s::Nodes(), "", Node(i));
    }
    if (HasFailure()) {
      std::printf("kept %s for inspection\n", dir_.c_str());
    } else {
      fs::remove_all(dir_);
    }
  }

  // The cluster node names of this test ("<tag>-gpu-<i>").
  std::string Node(int i) const { return tag_ + "-gpu-" + std::to_string(i); }

  // Starts an operator that authenticates as ServiceAccount bulwark-system/`account`.
  void StartOperator(const std::string& identity = "a",
                     const std::string& account = kOperatorAccount) {
    if (account != kOperatorAccount) {
      auto sa = cp_->ServiceAccountConfig(kOperatorNamespace, account);
      ASSERT_TRUE(sa.ok()) << sa.status().ToString();
      auto c = k8s::Client::Create(*sa);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      client_ = std::move(*c);
    }
    OperatorOptions oo;
    oo.watch_namespace = ns_;
    oo.leader_election = true;
    oo.leader.lease_namespace = kOperatorNamespace;
    oo.leader.lease_name = "bulwark-operator-" + tag_;
    oo.leader.identity = "operator-" + identity + "-" + tag_;
    oo.leader.lease_duration_s = 5;
    oo.leader.renew_deadline_s = 4;
    oo.leader.retry_period_s = 0.5;
    // As deployed: every pod's agent is installed by an init container of the operator's
    // image (the emulator maps that image's /usr/local/bin/bulwark-agent to the build's).
    oo.render.agent_image = trainjob::DefaultAgentImage();
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

  // `kubectl ARGS` with the admin kubeconfig, printed; "" (and a test failure) on error.
  // With `may_fail`, a failure is printed, not a test failure (an object that may be
  // gone by then, e.g. a Workload the garbage collector deletes).
  std::string Kubectl(const std::vector<std::string>& args, bool may_fail = false) {
    auto out = k8s::testing::Kubectl(*cp_, cp_->admin_kubeconfig(), args);
    std::string cmd = "$ kubectl";
    for (const std::string& a : args) cmd += " " + a;
    if (!out.ok()) {
      if (may_fail) {
        std::printf("%s: %s\n", cmd.c_str(), out.status().ToString().c_str());
      } else {
        ADD_FAILURE() << cmd << ": " << out.status().ToString();
      }
      return "";
    }
    std::printf("%s\n%s", cmd.c_str(), out->c_str());
    return *out;
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
      << name << R"(", "namespace": ")" << ns_ << R"("},
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
    auto r = admin_->Get(k8s::TrainJobs(), ns_, name);
    return r.ok() ? *r : Json();
  }

  std::vector<Json> Pods() { return api_->List(k8s::Pods(), ns_); }

  // The events about one object, oldest first (by creation, as kubectl sorts them).
  std::vector<Json> EventsFor(const std::string& kind, const std::string& name) {
    std::vector<Json> out;
    for (const Json& e : api_->List(k8s::Events())) {
      // This test's objects only: earlier tests' jobs may have had the same names.
      const std::string ns = Str(e, {"involvedObject", "namespace"});
      if (Str(e, {"involvedObject", "kind"}) == kind &&
          Str(e, {"involvedObject", "name"}) == name && (kind == "Node" || ns == ns_)) {
        out.push_back(e);
      }
    }
    std::stable_sort(out.begin(), out.end(), [](const Json& a, const Json& b) {
      return Str(a, {"metadata", "creationTimestamp"}) < Str(b, {"metadata", "creationTimestamp"});
    });
    return out;
  }

  // Status, conditions and events, as the assertions' context.
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

  std::string src_, build_, tag_, dir_, ns_;
  k8s::testing::ControlPlane* cp_ = nullptr;
  std::unique_ptr<k8s::Client> admin_;   // cluster-admin: the test's own view
  std::unique_ptr<k8s::Client> client_;  // the operator's service account
  std::unique_ptr<k8s::testing::Objects> api_;
  std::unique_ptr<op::testing::NodeEmulator> kubelet_;
  std::unique_ptr<Operator> op_;
  std::thread op_thread_;
  std::atomic<bool> stop_{false};
  Status op_status_;
};

}  // namespace bulwark::op::e2e
