// FakeApiServer::Impl, shared by fake_apiserver.cc (lifecycle, direct access, fault
// controls) and fake_apiserver_routes.cc (the HTTP handler and watch streams).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "k8s/testing/fake_apiserver.h"
#include "k8s/testing/fake_apiserver_http.h"
#include "k8s/testing/fake_apiserver_store.h"

namespace bulwark::k8s::testing {

struct FakeApiServer::Impl {
  struct Fault {
    int remaining = 0;
    int status = 500;
    double retry_after_s = 0;
    std::string match;
  };

  FakeApiServerOptions opts;
  internal::TlsIdentity tls;
  std::unique_ptr<internal::Store> store;
  std::unique_ptr<internal::HttpServer> http;
  std::atomic<bool> stopped{false};

  mutable std::mutex mu;  // guards the fields below
  std::string token;
  std::deque<Fault> faults;
  std::deque<RequestRecord> records;

  class Router;  // one request being served (fake_apiserver_routes.cc)
  // Runs one HTTP request (fake_apiserver_routes.cc). Called on connection threads.
  void Handle(const internal::HttpRequest& req, internal::HttpConn& c);
  // The injected fault for this request, if one is due (consumes one count).
  std::optional<internal::ApiError> TakeFault(const std::string& method, const std::string& path,
                                              const std::string& query);
  void Record(RequestRecord r);
};

}  // namespace bulwark::k8s::testing
