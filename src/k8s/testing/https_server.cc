// HTTP/1.1 over TlsStream: request parsing (Content-Length bodies, Expect:
// 100-continue, keep-alive), responses, chunked streams, and the accept loop with one
// thread per connection.
#include "k8s/testing/https_server.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>

#include "common/clock.h"
#include "common/json_util.h"
#include "k8s/testing/pki.h"

namespace bulwark::k8s::testing::https {

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

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
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
    Respond(code, "application/json", StatusBody(code, reason, msg));
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
    return fail(400, "BadRequest", "chunked request bodies are not supported; send Content-Length");
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
                StatusBody(429, "TooManyRequests",
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

TlsStream::TlsStream(SSL_CTX* ctx, Fd fd, const std::atomic<bool>* stop)
    : fd_(std::move(fd)), stop_(stop) {
  ssl_ = SSL_new(ctx);
  rbio_ = BIO_new(BIO_s_mem());
  wbio_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(rbio_, -1);  // an empty read BIO means "retry", not EOF
  SSL_set_bio(ssl_, rbio_, wbio_);
  SSL_set_accept_state(ssl_);
}

TlsStream::~TlsStream() {
  SSL_free(ssl_);
  ERR_clear_error();
}

bool TlsStream::Flush(double deadline) {
  char buf[16384];
  while (BIO_ctrl_pending(wbio_) > 0) {
    int n = BIO_read(wbio_, buf, sizeof(buf));
    if (n <= 0) return false;
    int off = 0;
    while (off < n) {
      ssize_t w = ::send(fd_.get(), buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
      if (w > 0) {
        off += static_cast<int>(w);
        continue;
      }
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      double left = deadline - SystemClock::Get()->NowMono();
      if (left <= 0 || Stopping()) return false;
      pollfd p{fd_.get(), POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
    }
  }
  return true;
}

int TlsStream::Fill(double deadline) {
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      BIO_write(rbio_, buf, static_cast<int>(n));
      return 1;
    }
    if (n == 0) return 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    double left = deadline - SystemClock::Get()->NowMono();
    if (left <= 0 || Stopping()) return -1;
    pollfd p{fd_.get(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min(left, 0.1) * 1000) + 1);
  }
}

bool TlsStream::Handshake(double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (true) {
    int r = SSL_do_handshake(ssl_);
    if (!Flush(deadline)) return false;
    if (r == 1) return true;
    int err = SSL_get_error(ssl_, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      ERR_clear_error();
      return false;
    }
    if (err == SSL_ERROR_WANT_READ && Fill(deadline) <= 0) return false;
  }
}

int TlsStream::Read(char* buf, int n, double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (true) {
    int r = SSL_read(ssl_, buf, n);
    if (r > 0) return r;
    int err = SSL_get_error(ssl_, r);
    if (err == SSL_ERROR_ZERO_RETURN) return 0;
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      ERR_clear_error();
      return -1;
    }
    if (!Flush(deadline)) return -1;
    if (err == SSL_ERROR_WANT_READ) {
      int f = Fill(deadline);
      if (f <= 0) return f;
    }
  }
}

bool TlsStream::Write(std::string_view data, double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  size_t off = 0;
  while (off < data.size()) {
    int len = static_cast<int>(std::min<size_t>(data.size() - off, 64 * 1024));
    int r = SSL_write(ssl_, data.data() + off, len);
    if (r <= 0) {
      ERR_clear_error();
      return false;
    }
    off += static_cast<size_t>(r);
    if (!Flush(deadline)) return false;
  }
  return Flush(deadline);
}

bool TlsStream::PeerClosed() {
  pollfd p{fd_.get(), POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  int f = Fill(SystemClock::Get()->NowMono());
  if (f == 0) return true;
  if (f < 0) return false;
  char scratch[512];
  int r = SSL_read(ssl_, scratch, sizeof(scratch));  // bytes sent mid-watch are dropped
  if (r > 0) return false;
  int err = SSL_get_error(ssl_, r);
  ERR_clear_error();
  return err == SSL_ERROR_ZERO_RETURN || err == SSL_ERROR_SSL || err == SSL_ERROR_SYSCALL;
}

void TlsStream::Close() {
  if (!fd_.valid()) return;
  SSL_shutdown(ssl_);
  Flush(SystemClock::Get()->NowMono() + 0.2);
  ERR_clear_error();
  fd_.Reset();
}

void TlsStream::Abort() {
  if (!fd_.valid()) return;
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.Reset();
}

Result<TlsIdentity> MakeTlsIdentity() {
  BW_ASSIGN_OR_RETURN(KeyPair ca, MakeCa("bulwark-test-proxy-ca"));
  BW_ASSIGN_OR_RETURN(
      KeyPair leaf,
      IssueCert(ca, {"bulwark-test-proxy", {}, {"localhost"}, {"127.0.0.1"}, true, false}));
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!ctx) return Internal("SSL_CTX_new failed");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
  BioPtr cb(BIO_new_mem_buf(leaf.cert_pem.data(), static_cast<int>(leaf.cert_pem.size())),
            BIO_free);
  BioPtr kb(BIO_new_mem_buf(leaf.key_pem.data(), static_cast<int>(leaf.key_pem.size())), BIO_free);
  X509* cert = PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr);
  const bool ok =
      cert != nullptr && key != nullptr && SSL_CTX_use_certificate(ctx.get(), cert) == 1 &&
      SSL_CTX_use_PrivateKey(ctx.get(), key) == 1 && SSL_CTX_check_private_key(ctx.get()) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  ERR_clear_error();
  if (!ok) return Internal("loading the proxy's server certificate failed");
  return TlsIdentity{ctx, ca.cert_pem};
}

std::string StatusBody(int code, const std::string& reason, const std::string& message,
                       double retry_after_s) {
  Json s = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", Json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason},
            {"code", code}};
  if (retry_after_s > 0) {
    s["details"] = {{"retryAfterSeconds", static_cast<int>(std::ceil(retry_after_s))}};
  }
  return s.dump();
}

}  // namespace bulwark::k8s::testing::https
