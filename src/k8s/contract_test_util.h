// Helpers for the contract suite (client_contract_test.cc, informer_contract_test.cc,
// leader_contract_test.cc): a started FakeApiServer, object builders and bounded
// polling. Test-only; not thread-safe unless stated.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "k8s/client.h"
#include "k8s/testing/fake_apiserver.h"

namespace bulwark::k8s::contract {

// Calls `cond` every 2 ms until it is true or `timeout_s` passes; returns its last value.
inline bool PollUntil(const std::function<bool()>& cond, double timeout_s = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline Json MakePod(const std::string& name, const std::string& ns = "default",
                    Json labels = Json::object(), const std::string& node = "") {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"labels", std::move(labels)}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

// Numeric resourceVersion (the fake server's are integers).
inline uint64_t Rv(const std::string& rv) { return rv.empty() ? 0 : std::stoull(rv); }

// A server per test plus a client with fast retries.
class ContractTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({}); }

  void StartServer(testing::FakeApiServerOptions opts) {
    client_.reset();
    server_.reset();
    auto s = testing::FakeApiServer::Start(std::move(opts));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
    // Namespaces the suites use besides "default" (the API refuses objects in a
    // namespace that does not exist).
    for (const char* ns : {"ml", "other", "busy", "quiet", "bulwark-system"}) {
      auto r = server_->Create(
          {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }

  ClientConfig FastConfig() const {
    ClientConfig cfg = server_->client_config();
    cfg.backoff_initial_s = 0.02;
    cfg.backoff_max_s = 2;
    cfg.timeout_s = 10;
    return cfg;
  }

  std::unique_ptr<Client> NewClient() const { return NewClient(FastConfig()); }
  static std::unique_ptr<Client> NewClient(ClientConfig cfg) {
    auto c = Client::Create(std::move(cfg));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Requests the server recorded with this method whose path equals `path`.
  int CountRequests(const std::string& method, const std::string& path) const {
    int n = 0;
    for (const auto& r : server_->Requests()) n += r.method == method && r.path == path;
    return n;
  }

  // CountRequests once it reaches `want` (or after 5 s): the server records a request
  // after answering it, so the last one may land just after the client returns.
  int SettledCount(const std::string& method, const std::string& path, int want) const {
    PollUntil([&] { return CountRequests(method, path) >= want; }, 5);
    return CountRequests(method, path);
  }

  std::unique_ptr<testing::FakeApiServer> server_;
  std::unique_ptr<Client> client_;
};

}  // namespace bulwark::k8s::contract
