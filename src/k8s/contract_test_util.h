// Helpers for the contract suite (client_contract_test.cc, informer_contract_test.cc,
// leader_contract_test.cc), which runs against a real kube-apiserver: the binary's
// shared control plane (k8s/testing/cluster.h), a FaultProxy per test in front of it
// for the faults a real server cannot be made to produce on demand, object builders
// and timing helpers. Test-only; not thread-safe unless stated.
//
// Every test works in namespaces of its own (the fixture's ns_, NewNamespace) and
// cluster-scoped names of its own: the tests of the binary share one server.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <memory>
#include <string>

#include "k8s/client.h"
#include "k8s/testing/cluster.h"
#include "k8s/testing/control_plane.h"
#include "k8s/testing/fault_proxy.h"

namespace bulwark::k8s::contract {

using testing::PollUntil;

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline const Resource& ConfigMaps() {
  static const Resource r{"", "v1", "configmaps", "ConfigMap", true};
  return r;
}

inline Json MakePod(const std::string& name, const std::string& ns, Json labels = Json::object(),
                    const std::string& node = "") {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"labels", std::move(labels)}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

inline Json MakeConfigMap(const std::string& name, const std::string& ns,
                          Json labels = Json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", std::move(labels)}}},
          {"data", {{"k", "v"}}}};
}

// A resourceVersion as a number. The API calls them opaque; the real server's are etcd
// revisions (increasing integers), which the informer relies on to drop replays.
inline uint64_t Rv(const std::string& rv) { return rv.empty() ? 0 : std::stoull(rv); }

// The binary's control plane (configmaps without a watch cache, so that a watch or an
// exact list of configmaps from a compacted revision reaches etcd and gets 410), an
// admin client straight to it (for setup and checks), a FaultProxy of this test and a
// client with fast retries through that proxy, and a namespace of this test.
class ContractTest : public ::testing::Test {
 protected:
  static testing::ControlPlaneOptions Options() {
    testing::ControlPlaneOptions o;
    o.apiserver_flags = {"--watch-cache-sizes=configmaps#0"};
    return o;
  }

  void SetUp() override {
    cp_ = testing::SharedControlPlane(Options());
    ASSERT_NE(cp_, nullptr);
    admin_ = NewClient(cp_->AdminConfig());
    ASSERT_NE(admin_, nullptr);
    auto proxy = testing::FaultProxy::Start(cp_->AdminConfig());
    ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
    proxy_ = std::move(proxy).value();
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
    ns_ = NewNamespace(TestSlug());
    ASSERT_FALSE(ns_.empty());
  }

  void TearDown() override {
    client_.reset();
    if (proxy_) proxy_->Stop();
  }

  // Changes pod ns/name (a label "touch" counting the calls) so the server's pod
  // resourceVersion moves on: a watch started from an older version gets a bookmark
  // only after such a change (informer_contract_test.cc).
  Status TouchPod(const std::string& ns, const std::string& name) {
    auto got = admin_->Get(Pods(), ns, name);
    if (!got.ok()) return got.status();
    (*got)["metadata"]["labels"]["touch"] = std::to_string(++touches_);
    return admin_->Update(Pods(), ns, *got).status();
  }

  // A fresh namespace "<prefix>-<n>" ("" after a test failure).
  std::string NewNamespace(const std::string& prefix) {
    auto ns = testing::UniqueNamespace(admin_.get(), prefix);
    EXPECT_TRUE(ns.ok()) << ns.status().ToString();
    return ns.ok() ? *ns : "";
  }

  // The admin identity through the proxy, with fast retries.
  // Its retry waits are retry_clock_'s sleeps: no real time passes, and a test reads
  // how long the client waited from the clock.
  ClientConfig FastConfig() const {
    ClientConfig cfg = proxy_->Through(cp_->AdminConfig());
    cfg.backoff_initial_s = 0.02;
    cfg.backoff_max_s = 2;
    cfg.timeout_s = 10;
    cfg.clock = &retry_clock_;
    return cfg;
  }

  std::unique_ptr<Client> NewClient() const { return NewClient(FastConfig()); }
  static std::unique_ptr<Client> NewClient(ClientConfig cfg) {
    auto c = Client::Create(std::move(cfg));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Compacts etcd's history up to its newest revision: a watch, or an exact list, of
  // configmaps (no watch cache) from an older resourceVersion then gets 410. A watch
  // from resourceVersion r starts at r + 1: make at least two writes after r first.
  void CompactEtcdNow() {
    auto rev = cp_->EtcdRevision();
    ASSERT_TRUE(rev.ok()) << rev.status().ToString();
    Status s = cp_->CompactEtcd(*rev);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Requests through this test's proxy with this method whose path equals `path`
  // (injected answers included).
  int CountRequests(const std::string& method, const std::string& path) const {
    int n = 0;
    for (const auto& r : proxy_->Requests()) n += r.method == method && r.path == path;
    return n;
  }

  // CountRequests once it reaches `want` (or after 5 s): the proxy records a request
  // after answering it, so the last one may land just after the client returns.
  int SettledCount(const std::string& method, const std::string& path, int want) const {
    PollUntil([&] { return CountRequests(method, path) >= want; }, 5);
    return CountRequests(method, path);
  }

  // The current test's name as a DNS label prefix ("crudoncoreresources").
  static std::string TestSlug() {
    std::string s;
    for (const char* p = ::testing::UnitTest::GetInstance()->current_test_info()->name();
         *p != '\0' && s.size() < 40; ++p) {
      if (std::isalnum(static_cast<unsigned char>(*p))) {
        s += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
      }
    }
    return s.empty() ? "contract" : s;
  }

  testing::ControlPlane* cp_ = nullptr;
  std::unique_ptr<Client> admin_;
  std::unique_ptr<testing::FaultProxy> proxy_;
  mutable FakeClock retry_clock_;  // the retry waits of FastConfig's clients
  std::unique_ptr<Client> client_;
  std::string ns_;
  int touches_ = 0;  // TouchPod calls
};

}  // namespace bulwark::k8s::contract
