// HttpEndpoint: a plain-HTTP health, metrics and read-only UI port: GET /healthz,
// GET /readyz, GET /metrics (Prometheus scrapes it), and any other GET path a `route`
// callback answers (the web dashboard). The operator, `bulwark run` and each agent
// serve one.
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
#include <optional>
#include <string>
#include <thread>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::metrics {

struct HttpResponse {
  int code = 200;
  std::string content_type = "text/plain";
  std::string body;
};

struct HttpEndpointHandlers {
  std::function<bool()> healthy;         // /healthz: 200 "ok" or 503
  std::function<bool()> ready;           // /readyz: 200 "ready" or 503
  std::function<std::string()> metrics;  // /metrics: Prometheus text exposition 0.0.4
  // Any other path (without its query string; the query is `query`): a response, or
  // nullopt for 404.
  std::function<std::optional<HttpResponse>(const std::string& path, const std::string& query)>
      route = nullptr;
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

}  // namespace bulwark::metrics
