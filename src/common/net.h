// Small socket seam: TCP listen/connect, a line-framed JSON connection, and Unix
// datagram sockets. All sockets are non-blocking and close-on-exec. Every call that
// could wait takes a timeout. Objects own their fd (closed in the destructor) and are
// not thread-safe; use one per thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "nlohmann/json.hpp"

namespace bulwark {

using Json = nlohmann::json;

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.Release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 = ephemeral). Returns the listening fd.
Result<Fd> TcpListen(const std::string& host, int port);
// Port a bound socket listens on.
Result<int> LocalPort(int fd);
// Accepts one pending connection or returns an invalid Fd if none is pending.
Fd TcpAcceptNonBlocking(int listen_fd);
// Connects with a deadline.
Result<Fd> TcpConnect(const std::string& host, int port, double timeout_s);
// Finds a free TCP port on host by binding port 0 (racy by nature; callers retry).
Result<int> PickFreePort(const std::string& host);
// A port for a server started later by another process (a test fixture's daemons): random
// in [10000, the first port of /proc/sys/net/ipv4/ip_local_port_range), free now. The
// kernel gives outgoing connections ports of the ephemeral range, so one made by anything
// on this machine can take a port PickFreePort returned before the daemon binds it; ports
// below that range are taken only by explicit binds. Still racy between such binders:
// callers retry a daemon that reports "Address already in use".
Result<int> PickFixturePort(const std::string& host);

// A line-delimited JSON stream over a connected, non-blocking socket.
class JsonLineConn {
 public:
  explicit JsonLineConn(Fd fd) : fd_(std::move(fd)) {}
  int fd() const { return fd_.get(); }
  bool closed() const { return closed_; }
  // Queues and writes as much as possible. Unavailable once the peer is gone.
  Status Send(const Json& msg);
  // Flushes the queued output, waiting at most timeout_s.
  Status Flush(double timeout_s);
  bool HasPendingOutput() const { return !out_.empty(); }
  // Reads what is available without blocking and returns complete messages.
  // Lines that are not JSON objects are returned in `bad` (if non-null).
  std::vector<Json> Read(std::vector<std::string>* bad = nullptr);

 private:
  Status WriteSome();
  Fd fd_;
  std::string in_;
  std::string out_;
  bool closed_ = false;
};

// Unix datagram socket bound to `path` (an existing file at path is removed first).
Result<Fd> UnixDgramBind(const std::string& path);
// Unbound datagram socket for sending.
Result<Fd> UnixDgramSocket();
// A connected pair of Unix stream sockets (blocking, close-on-exec).
Result<std::pair<Fd, Fd>> UnixStreamPair();
// Non-blocking send of one datagram. ResourceExhausted when the receiver's queue is full
// (net.unix.max_dgram_qlen datagrams wait unread); NotFound or Unavailable when nothing
// is bound at `path`.
Status UnixDgramSend(int fd, const std::string& path, const std::string& payload);
// Non-blocking receive of all pending datagrams.
std::vector<std::string> UnixDgramRecvAll(int fd);

// Waits until any of fds is readable or timeout_s passes. Returns readable fds.
std::vector<int> PollReadable(const std::vector<int>& fds, double timeout_s);

// Parses a JSON object; InvalidArgument naming `what` on failure.
Result<Json> ParseJsonObject(const std::string& text, const std::string& what);

}  // namespace bulwark
