// A small HTTPS/1.1 server for test infrastructure (the fault proxy, fault_proxy.h): a
// TLS identity generated in memory (a CA and a server certificate for
// 127.0.0.1/localhost), TLS streams over non-blocking sockets whose every wait is
// bounded and interrupted by the server's stop flag, and an HTTP/1.1 server
// (keep-alive, Content-Length bodies, chunked streams for watches) that runs one thread
// per connection.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::k8s::testing::https {

// A server SSL_CTX with a fresh EC P-256 CA and server certificate (SAN IP:127.0.0.1,
// DNS:localhost), and the CA's PEM. Thread-safe to share (SSL_CTX is).
struct TlsIdentity {
  std::shared_ptr<SSL_CTX> ctx;
  std::string ca_pem;
};
Result<TlsIdentity> MakeTlsIdentity();

// A kube-apiserver Status body (kind Status, status Failure) for an error response;
// details.retryAfterSeconds when retry_after_s > 0.
std::string StatusBody(int code, const std::string& reason, const std::string& message,
                       double retry_after_s = 0);

// One TLS connection over a non-blocking socket, through memory BIOs (so socket writes
// use MSG_NOSIGNAL). Every call waits at most its timeout and returns early once *stop
// is set. Used by one thread at a time.
class TlsStream {
 public:
  TlsStream(SSL_CTX* ctx, Fd fd, const std::atomic<bool>* stop);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  bool Handshake(double timeout_s);
  // > 0 bytes read; 0 the peer closed; -1 error, timeout or stop.
  int Read(char* buf, int n, double timeout_s);
  // Writes everything or returns false (peer gone, timeout, stop).
  bool Write(std::string_view data, double timeout_s);
  // Non-blocking: true when the peer has closed or the connection failed.
  bool PeerClosed();
  // Sends close_notify (best effort, bounded) and closes.
  void Close();
  // Closes the socket without close_notify: the peer sees the stream cut.
  void Abort();

 private:
  bool Flush(double deadline);
  int Fill(double deadline);  // 1 data, 0 EOF, -1 error/timeout/stop
  bool Stopping() const { return stop_->load(std::memory_order_relaxed); }

  Fd fd_;
  SSL* ssl_ = nullptr;
  BIO* rbio_ = nullptr;  // owned by ssl_
  BIO* wbio_ = nullptr;  // owned by ssl_
  const std::atomic<bool>* stop_;
};

struct HttpRequest {
  std::string method;
  std::string path;                            // without the query
  std::string query;                           // without '?'
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string Header(const std::string& lower_name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The response side of one connection, for the request handler.
class HttpConn {
 public:
  HttpConn(TlsStream* s, const std::atomic<bool>* stop) : s_(s), stop_(stop) {}
  // A complete response with Content-Length. False when the peer is gone.
  bool Respond(int code, const std::string& content_type, std::string_view body,
               const HttpHeaders& extra = {});
  // A chunked response (watch): start, chunks, end.
  bool StartStream(int code, const std::string& content_type);
  bool WriteChunk(std::string_view data);
  bool EndStream();
  // Cuts the connection mid-stream (no terminating chunk, no close_notify).
  void Cut();
  bool PeerClosed() { return s_->PeerClosed(); }
  bool Stopping() const { return stop_->load(std::memory_order_relaxed); }
  // Whether the connection must close after this response.
  bool closing() const { return closing_; }
  void set_closing() { closing_ = true; }

  // Reads the next request: 1 ok, 0 closed/idle timeout, -1 malformed (a 4xx was sent).
  int ReadRequest(HttpRequest* req, double idle_timeout_s);

 private:
  TlsStream* s_;
  const std::atomic<bool>* stop_;
  std::string in_;
  bool closing_ = false;
};

// Accepts TLS connections on 127.0.0.1 and runs `handler` for every request, one
// thread per connection, at most `max_conns` at once (more are answered 429).
class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpConn&)>;
  HttpServer(std::shared_ptr<SSL_CTX> ctx, Handler handler, size_t max_conns);
  ~HttpServer();
  Status Start();
  int port() const { return port_; }
  // Closes the listener and every connection and joins every thread (bounded: each
  // wait in a connection is sliced to <= 100 ms and checks the stop flag).
  void Stop();

 private:
  void AcceptLoop();
  void Serve(Fd fd, bool reject);
  void ReapDone();

  std::shared_ptr<SSL_CTX> ctx_;
  Handler handler_;
  size_t max_conns_;
  Fd listener_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::map<uint64_t, std::thread> threads_;  // guarded by mu_
  std::vector<uint64_t> done_;               // guarded by mu_
  size_t active_ = 0;                        // guarded by mu_
  uint64_t next_id_ = 0;                     // guarded by mu_
};

}  // namespace bulwark::k8s::testing::https
