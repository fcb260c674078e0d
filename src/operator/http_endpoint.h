// HttpEndpoint: the operator's plain-HTTP health and metrics port (the Deployment's
// probes and Prometheus scrape it): GET /healthz, GET /readyz, GET /metrics.
//
// Deliberately small: HTTP/1.0-style (one request per connection, Connection: close),
// GET only, request line and headers capped at 8 KiB, every socket wait bounded
// (a slow client is dropped after 2 s). Each connection is served on its own thread,
// at most 16 at once (more are answered 503 at once), so a slow client never delays a
// probe. Bodies come from callbacks that must be thread-safe. Stop() (or the
// destructor) joins every thread within ~2 s.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::op {

struct HttpEndpointHandlers {
  std::function<bool()> healthy;         // /healthz: 200 "ok" or 503
  std::function<bool()> ready;           // /readyz: 200 "ready" or 503
  std::function<std::string()> metrics;  // /metrics: Prometheus text exposition 0.0.4
};

class HttpEndpoint {
 public:
  // addr: "HOST:PORT" or ":PORT" (all interfaces); port 0 picks a free one.
  static Result<std::unique_ptr<HttpEndpoint>> Start(const std::string& addr,
                                                     HttpEndpointHandlers handlers);
  ~HttpEndpoint();
  int port() const { return port_; }
  void Stop();

 private:
  HttpEndpoint() = default;
  void Loop();
  void Serve(Fd conn);

  HttpEndpointHandlers handlers_;
  Fd listen_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::list<std::thread> workers_;
  std::atomic<int> active_{0};
};

}  // namespace bulwark::op
