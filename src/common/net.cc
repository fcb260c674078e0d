#include "common/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <random>

#include "common/clock.h"

namespace bulwark {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) Reset(o.Release());
  return *this;
}

void Fd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

Result<sockaddr_in> MakeAddr(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string h = host == "localhost" ? "127.0.0.1" : host;
  if (inet_pton(AF_INET, h.c_str(), &a.sin_addr) != 1) {
    return InvalidArgument("address '" + host + "' is not an IPv4 address; use e.g. 127.0.0.1");
  }
  return a;
}

}  // namespace

Result<Fd> TcpListen(const std::string& host, int port) {
  BW_ASSIGN_OR_RETURN(sockaddr_in a, MakeAddr(host, port));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return ErrnoStatus("bind " + host + ":" + std::to_string(port), errno);
  }
  if (::listen(fd.get(), 128) != 0) return ErrnoStatus("listen", errno);
  return fd;
}

Result<int> LocalPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return ErrnoStatus("getsockname", errno);
  }
  return static_cast<int>(ntohs(a.sin_port));
}

Fd TcpAcceptNonBlocking(int listen_fd) {
  int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (c >= 0) {
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return Fd(c);
}

Result<Fd> TcpConnect(const std::string& host, int port, double timeout_s) {
  BW_ASSIGN_OR_RETURN(sockaddr_in a, MakeAddr(host, port));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  std::string what = "connect " + host + ":" + std::to_string(port);
  if (rc != 0 && errno != EINPROGRESS) return ErrnoStatus(what, errno);
  if (rc != 0) {
    pollfd p{fd.get(), POLLOUT, 0};
    int n = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
    if (n == 0)
      return DeadlineExceeded(what + ": timed out after " + std::to_string(timeout_s) + " s");
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return ErrnoStatus(what, err);
  }
  return fd;
}

Result<int> PickFreePort(const std::string& host) {
  BW_ASSIGN_OR_RETURN(Fd fd, TcpListen(host, 0));
  return LocalPort(fd.get());
}

Result<int> PickFixturePort(const std::string& host) {
  constexpr int kLow = 10000;
  int high = 32768;  // Linux's default first ephemeral port
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  if (range >> first && first > kLow + 1000) high = first;
  if (high <= kLow + 1000) return PickFreePort(host);  // no room below the range
  static thread_local std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(kLow, high - 1);
  Status last = Status::Ok();
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(rng);
    auto fd = TcpListen(host, port);
    if (fd.ok()) return port;
    last = fd.status();
  }
  return Unavailable("no free port in [" + std::to_string(kLow) + ", " + std::to_string(high) +
                     ") on " + host + " after 200 tries: " + last.ToString());
}

Status JsonLineConn::Send(const Json& msg) {
  if (closed_) return Unavailable("connection closed");
  out_ += msg.dump(-1, ' ', false, Json::error_handler_t::replace);
  out_ += '\n';
  return WriteSome();
}

Status JsonLineConn::WriteSome() {
  while (!out_.empty()) {
    ssize_t n = ::send(fd_.get(), out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
    if (n < 0 && errno == EINTR) continue;
    closed_ = true;
    return ErrnoStatus("send", errno);
  }
  return Status::Ok();
}

Status JsonLineConn::Flush(double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (!out_.empty() && !closed_) {
    BW_RETURN_IF_ERROR(WriteSome());
    if (out_.empty()) break;
    double left = deadline - SystemClock::Get()->NowMono();
    if (left <= 0) return DeadlineExceeded("flush timed out");
    pollfd p{fd_.get(), POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
  }
  return closed_ ? Unavailable("connection closed") : Status::Ok();
}

std::vector<Json> JsonLineConn::Read(std::vector<std::string>* bad) {
  std::vector<Json> msgs;
  if (!closed_) {
    char buf[65536];
    while (true) {
      ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
        if (in_.size() > (64u << 20)) {  // a peer that never sends '\n'
          closed_ = true;
          if (bad) bad->push_back("line longer than 64 MiB; connection dropped");
          break;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      closed_ = true;  // EOF or error
      break;
    }
  }
  size_t pos = 0;
  while (true) {
    size_t nl = in_.find('\n', pos);
    if (nl == std::string::npos) break;
    std::string line = in_.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    auto r = ParseJsonObject(line, "message");
    if (r.ok()) {
      msgs.push_back(std::move(r).value());
    } else if (bad) {
      bad->push_back(r.status().message());
    }
  }
  in_.erase(0, pos);
  return msgs;
}

Result<Fd> UnixDgramBind(const std::string& path) {
  sockaddr_un a{};
  if (path.size() >= sizeof(a.sun_path)) {
    return InvalidArgument("socket path too long (" + std::to_string(path.size()) +
                           " bytes, max 107): " + path + "; use a shorter run directory");
  }
  Fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return ErrnoStatus("bind " + path, errno);
  }
  int sz = 4 << 20;
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  return fd;
}

Result<Fd> UnixDgramSocket() {
  Fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  return fd;
}

Result<std::pair<Fd, Fd>> UnixStreamPair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("socketpair", errno);
  }
  return std::make_pair(Fd(sv[0]), Fd(sv[1]));
}

Status UnixDgramSend(int fd, const std::string& path, const std::string& payload) {
  sockaddr_un a{};
  if (path.size() >= sizeof(a.sun_path)) return InvalidArgument("socket path too long: " + path);
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  ssize_t n = ::sendto(fd, payload.data(), payload.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                       reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (n < 0) return ErrnoStatus("sendto " + path, errno);
  return Status::Ok();
}

std::vector<std::string> UnixDgramRecvAll(int fd) {
  std::vector<std::string> out;
  std::string buf(65536, '\0');
  while (true) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.emplace_back(buf.data(), static_cast<size_t>(n));
  }
  return out;
}

std::vector<int> PollReadable(const std::vector<int>& fds, double timeout_s) {
  std::vector<pollfd> p;
  for (int f : fds) p.push_back(pollfd{f, POLLIN, 0});
  int ms = timeout_s <= 0 ? 0 : static_cast<int>(timeout_s * 1000) + 1;
  std::vector<int> ready;
  int n = ::poll(p.data(), p.size(), ms);
  if (n <= 0) return ready;
  for (const auto& x : p) {
    if (x.revents & (POLLIN | POLLHUP | POLLERR)) ready.push_back(x.fd);
  }
  return ready;
}

Result<Json> ParseJsonObject(const std::string& text, const std::string& what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    std::string shown = text.size() > 80 ? text.substr(0, 80) + "..." : text;
    return InvalidArgument(what + " is not valid JSON: '" + shown + "'");
  }
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument(what + " must be a JSON object with a string field \"type\"");
  }
  return j;
}

}  // namespace bulwark
