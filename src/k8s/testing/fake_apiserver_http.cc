// HTTP/1.1 over TlsStream for the fake API server: request parsing (Content-Length
// bodies, Expect: 100-continue, keep-alive), responses, chunked streams, and the
// accept loop with one thread per connection.
#include "k8s/testing/fake_apiserver_http.h"

#include <poll.h>

#include <cctype>
#include <chrono>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = 3 * 1024 * 1024;  // kube-apiserver's request limit
constexpr double kWriteTimeoutS = 30;
constexpr double kHandshakeTimeoutS = 10;
constexpr double kIdleTimeoutS = 120;

const char* Reason(int code) {
  switch (code) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Request Entity Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Status";
  }
}

std::string ErrorBody(int code, const std::string& reason, const std::string& message) {
  return StatusJson(ApiError{code, reason, message}).dump();
}

}  // namespace

std::string HttpRequest::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

bool HttpConn::Respond(int code, const std::string& content_type, std::string_view body,
                       const HttpHeaders& extra) {
  std::string head = "HTTP/1.1 " + std::to_string(code) + " " + Reason(code) + "\r\n";
  head += "Cache-Control: no-cache, private\r\n";
  if (!content_type.empty()) head += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
  if (closing_) head += "Connection: close\r\n";
  head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  if (body.size() < 64 * 1024) return s_->Write(head + std::string(body), kWriteTimeoutS);
  return s_->Write(head, kWriteTimeoutS) && s_->Write(body, kWriteTimeoutS);
}

bool HttpConn::StartStream(int code, const std::string& content_type) {
  std::string head = "HTTP/1.1 " + std::to_string(code) + " " + Reason(code) + "\r\n";
  head += "Cache-Control: no-cache, private\r\nContent-Type: " + content_type +
          "\r\nTransfer-Encoding: chunked\r\n\r\n";
  return s_->Write(head, kWriteTimeoutS);
}

bool HttpConn::WriteChunk(std::string_view data) {
  if (data.empty()) return true;
  char size[32];
  snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string chunk = size;
  chunk.append(data);
  chunk += "\r\n";
  return s_->Write(chunk, kWriteTimeoutS);
}

bool HttpConn::EndStream() { return s_->Write("0\r\n\r\n", kWriteTimeoutS); }

void HttpConn::Cut() {
  closing_ = true;
  s_->Abort();
}

int HttpConn::ReadRequest(HttpRequest* req, double idle_timeout_s) {
  auto fail = [&](int code, const std::string& reason, const std::string& msg) {
    closing_ = true;
    Respond(code, "application/json", ErrorBody(code, reason, msg));
    return -1;
  };
  size_t end;
  char buf[16384];
  while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
    if (in_.size() > kMaxHeaderBytes) {
      return fail(431, "RequestHeaderFieldsTooLarge", "request headers exceed 64 KiB");
    }
    int n = s_->Read(buf, sizeof(buf), idle_timeout_s);
    if (n <= 0) return 0;
    in_.append(buf, static_cast<size_t>(n));
  }
  std::string head = in_.substr(0, end);
  in_.erase(0, end + 4);
  size_t line_end = head.find("\r\n");
  std::string line = head.substr(0, line_end);
  size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    return fail(400, "BadRequest", "malformed HTTP request line");
  }
  *req = HttpRequest();
  req->method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t q = target.find('?');
  req->path = target.substr(0, q);
  if (q != std::string::npos) req->query = target.substr(q + 1);
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string::npos) e = head.size();
    std::string h = head.substr(pos, e - pos);
    size_t colon = h.find(':');
    if (colon != std::string::npos) {
      req->headers[Lower(Trim(h.substr(0, colon)))] = Trim(h.substr(colon + 1));
    }
    pos = e + 2;
  }
  if (Lower(req->Header("connection")) == "close") closing_ = true;
  if (!req->Header("transfer-encoding").empty()) {
    return fail(400, "BadRequest",
                "chunked request bodies are not supported by the fake API server; send "
                "Content-Length");
  }
  std::string cl = req->Header("content-length");
  size_t len = 0;
  if (!cl.empty()) {
    char* e = nullptr;
    unsigned long long v = std::strtoull(cl.c_str(), &e, 10);  // NOLINT(runtime/int)
    if (*e != '\0') return fail(400, "BadRequest", "invalid Content-Length " + cl);
    if (v > kMaxBodyBytes) {
      return fail(413, "RequestEntityTooLarge",
                  "Request entity too large: limit is " + std::to_string(kMaxBodyBytes));
    }
    len = static_cast<size_t>(v);
  }
  if (len > in_.size() && Lower(req->Header("expect")) == "100-continue") {
    if (!s_->Write("HTTP/1.1 100 Continue\r\n\r\n", kWriteTimeoutS)) return 0;
  }
  while (in_.size() < len) {
    int n = s_->Read(buf, sizeof(buf), kWriteTimeoutS);
    if (n <= 0) return 0;
    in_.append(buf, static_cast<size_t>(n));
  }
  req->body = in_.substr(0, len);
  in_.erase(0, len);
  return 1;
}

HttpServer::HttpServer(std::shared_ptr<SSL_CTX> ctx, Handler handler, size_t max_conns)
    : ctx_(std::move(ctx)), handler_(std::move(handler)), max_conns_(max_conns) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  BW_ASSIGN_OR_RETURN(listener_, TcpListen("127.0.0.1", 0));
  BW_ASSIGN_OR_RETURN(port_, LocalPort(listener_.get()));
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void HttpServer::ReapDone() {
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t id : done_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      finished.push_back(std::move(it->second));
      threads_.erase(it);
    }
    done_.clear();
  }
  for (std::thread& t : finished) t.join();
}

void HttpServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listener_.get(), POLLIN, 0};
    ::poll(&p, 1, 100);
    ReapDone();
    while (!stop_.load()) {
      Fd fd = TcpAcceptNonBlocking(listener_.get());
      if (!fd.valid()) break;
      std::lock_guard<std::mutex> l(mu_);
      if (threads_.size() >= max_conns_ + 64) continue;  // far over the limit: just close
      bool reject = active_ >= max_conns_;
      ++active_;
      uint64_t id = next_id_++;
      threads_[id] = std::thread([this, id, f = std::move(fd), reject]() mutable {
        Serve(std::move(f), reject);
        std::lock_guard<std::mutex> l2(mu_);
        --active_;
        done_.push_back(id);
      });
    }
  }
}

void HttpServer::Serve(Fd fd, bool reject) {
  TlsStream s(ctx_.get(), std::move(fd), &stop_);
  if (!s.Handshake(kHandshakeTimeoutS)) return;
  HttpConn c(&s, &stop_);
  HttpRequest req;
  while (!stop_.load()) {
    int r = c.ReadRequest(&req, reject ? kHandshakeTimeoutS : kIdleTimeoutS);
    if (r <= 0) break;
    if (reject) {
      c.set_closing();
      c.Respond(429, "application/json",
                ErrorBody(429, "TooManyRequests",
                          "Too many requests, please try again later (connection limit " +
                              std::to_string(max_conns_) + ")"),
                {{"Retry-After", "1"}});
      break;
    }
    handler_(req, c);
    if (c.closing()) break;
  }
  s.Close();
}

void HttpServer::Stop() {
  stop_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  listener_.Reset();
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    threads.swap(threads_);
    done_.clear();
  }
  for (auto& [id, t] : threads) t.join();
}

}  // namespace bulwark::k8s::testing::internal
