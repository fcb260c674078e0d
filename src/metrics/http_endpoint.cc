#include "metrics/http_endpoint.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/clock.h"

namespace bulwark::metrics {
namespace {

void WriteAll(int fd, const std::string& s, double deadline) {
  size_t off = 0;
  while (off < s.size() && SystemClock::Get()->NowMono() < deadline) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      PollReadable({}, 0.01);
    } else {
      return;
    }
  }
}

const char* ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::string Response(int code, const char* text, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + text + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& addr,
                                                          HttpEndpointHandlers handlers) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("metrics address '" + addr + "': want HOST:PORT or :PORT");
  }
  const std::string host = colon == 0 ? "0.0.0.0" : addr.substr(0, colon);
  int port = -1;
  try {
    port = std::stoi(addr.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    return InvalidArgument("metrics address '" + addr + "': port must be 0..65535");
  }
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->handlers_ = std::move(handlers);
  BW_ASSIGN_OR_RETURN(e->listen_, TcpListen(host, port));
  BW_ASSIGN_OR_RETURN(e->port_, LocalPort(e->listen_.get()));
  e->thread_ = std::thread([p = e.get()] { p->Loop(); });
  return e;
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

void HttpEndpoint::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void HttpEndpoint::Loop() {
  constexpr int kMaxActive = 16;
  while (!stop_.load()) {
    PollReadable({listen_.get()}, 0.1);
    while (true) {
      Fd c = TcpAcceptNonBlocking(listen_.get());
      if (!c.valid()) break;
      if (active_.load() >= kMaxActive) {
        WriteAll(c.get(), Response(503, "Service Unavailable", "text/plain", "busy\n"),
                 SystemClock::Get()->NowMono() + 0.2);
        continue;
      }
      ++active_;
      std::lock_guard<std::mutex> l(mu_);
      workers_.emplace_back([this, fd = std::make_shared<Fd>(std::move(c))]() mutable {
        Serve(std::move(*fd));
        --active_;
      });
    }
    // Join finished workers (each is bounded by its 2 s budget).
    std::lock_guard<std::mutex> l(mu_);
    if (active_.load() == 0) {
      for (std::thread& t : workers_) t.join();
      workers_.clear();
    }
  }
}

void HttpEndpoint::Serve(Fd conn) {
  const double deadline = SystemClock::Get()->NowMono() + 2;
  std::string req;
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192 &&
         SystemClock::Get()->NowMono() < deadline) {
    PollReadable({conn.get()}, 0.05);
    bool eof = false;
    char buf[2048];
    const ssize_t n = ::recv(conn.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      req.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      eof = true;
    }
    if (eof) break;
  }
  const size_t sp1 = req.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    WriteAll(conn.get(), Response(400, "Bad Request", "text/plain", "bad request\n"), deadline);
    return;
  }
  const std::string method = req.substr(0, sp1);
  std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
  const size_t q = path.find('?');
  const std::string query = q == std::string::npos ? "" : path.substr(q + 1);
  path = path.substr(0, q);
  std::string out;
  if (method != "GET") {
    out = Response(405, "Method Not Allowed", "text/plain", "GET only\n");
  } else if (path == "/healthz") {
    const bool ok = !handlers_.healthy || handlers_.healthy();
    out = ok ? Response(200, "OK", "text/plain", "ok\n")
             : Response(503, "Service Unavailable", "text/plain", "unhealthy\n");
  } else if (path == "/readyz") {
    const bool ok = !handlers_.ready || handlers_.ready();
    out = ok ? Response(200, "OK", "text/plain", "ready\n")
             : Response(503, "Service Unavailable", "text/plain", "not ready\n");
  } else if (path == "/metrics") {
    out = Response(200, "OK", "text/plain; version=0.0.4",
                   handlers_.metrics ? handlers_.metrics() : "");
  } else if (auto r =
                 handlers_.route ? handlers_.route(path, query) : std::optional<HttpResponse>()) {
    out = Response(r->code, ReasonPhrase(r->code), r->content_type, r->body);
  } else {
    out = Response(404, "Not Found", "text/plain", "try /healthz, /readyz or /metrics\n");
  }
  WriteAll(conn.get(), out, deadline);
}

}  // namespace bulwark::metrics
