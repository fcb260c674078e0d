// The link check: a ring all-reduce and per-link bandwidth over TCP (link.h).
#include "diag/link.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace bulwark::diag {
namespace {

constexpr char kMagic[4] = {'B', 'W', 'L', 'K'};
constexpr int kPings = 5;
constexpr size_t kPingBytes = 64;

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string F(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// Moves `send_len` bytes out of `out` and `recv_len` bytes into `in` at once (either may
// be 0), polling both sockets, until done or `deadline`. Sends are paced to
// `throttle_bps` bytes/s when > 0. Records when the first and the last byte came in.
struct Pump {
  int out = -1, in = -1;
  const unsigned char* send_buf = nullptr;
  size_t send_len = 0;
  unsigned char* recv_buf = nullptr;
  size_t recv_len = 0;
  double throttle_bps = 0;
  double first_in = -1, last_in = -1;
  size_t sent = 0, got = 0;  // so far
  bool recv_failed = false;  // the error was on the incoming side (not an EOF)

  Status Run(double deadline, const std::string& what) {
    const double t0 = NowS();
    while (sent < send_len || got < recv_len) {
      const double now = NowS();
      if (now >= deadline) {
        return DeadlineExceeded(what + ": timed out with " + std::to_string(sent) + " of " +
                                std::to_string(send_len) + " bytes sent and " +
                                std::to_string(got) + " of " + std::to_string(recv_len) +
                                " received");
      }
      size_t allowed = send_len;
      double wait_s = deadline - now;
      if (throttle_bps > 0 && sent < send_len) {
        const double budget = throttle_bps * (now - t0) + 16384;
        allowed = std::min(send_len, static_cast<size_t>(budget));
        if (allowed <= sent) wait_s = std::min(wait_s, 0.002);
      }
      pollfd p[2];
      nfds_t np = 0;
      int out_i = -1, in_i = -1;
      if (sent < allowed) {
        out_i = static_cast<int>(np);
        p[np++] = {out, POLLOUT, 0};
      }
      if (got < recv_len) {
        in_i = static_cast<int>(np);
        p[np++] = {in, POLLIN, 0};
      }
      const int ms = std::max(1, static_cast<int>(std::ceil(wait_s * 1000)));
      const int rc = ::poll(p, np, ms);
      if (rc < 0 && errno != EINTR) return ErrnoStatus(what + ": poll", errno);
      if (rc <= 0) continue;
      if (out_i >= 0 && p[out_i].revents) {
        const ssize_t n = ::send(out, send_buf + sent, allowed - sent, MSG_NOSIGNAL);
        if (n > 0) {
          sent += static_cast<size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return ErrnoStatus(what + ": send", errno);
        }
      }
      if (in_i >= 0 && p[in_i].revents) {
        const ssize_t n = ::recv(in, recv_buf + got, recv_len - got, 0);
        if (n > 0) {
          const double t = NowS();
          if (first_in < 0) first_in = t;
          last_in = t;
          got += static_cast<size_t>(n);
        } else if (n == 0) {
          return Unavailable(what + ": the peer closed the connection after " +
                             std::to_string(got) + " of " + std::to_string(recv_len) + " bytes");
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          recv_failed = true;
          return ErrnoStatus(what + ": recv", errno);
        }
      }
    }
    return Status::Ok();
  }
};

Status SendAll(int fd, const void* buf, size_t len, double deadline, double throttle_bps,
               const std::string& what) {
  Pump p;
  p.out = fd;
  p.send_buf = static_cast<const unsigned char*>(buf);
  p.send_len = len;
  p.throttle_bps = throttle_bps;
  return p.Run(deadline, what);
}

Status RecvAll(int fd, void* buf, size_t len, double deadline, const std::string& what) {
  Pump p;
  p.in = fd;
  p.recv_buf = static_cast<unsigned char*>(buf);
  p.recv_len = len;
  return p.Run(deadline, what);
}

struct Hello {
  char magic[4];
  uint64_t session;
  uint32_t from;
} __attribute__((packed));

// Member k's all-reduce input: multiples of 1/4 below 256, so any sum of up to
// kMaxLinkMembers of them is exact in float32 whatever the order.
float Element(int k, size_t j) {
  return static_cast<float>((static_cast<uint64_t>(k) * 31 + j * 7 + (j >> 7)) % 1024) / 4.0f;
}

// The sum over members first-count+1 .. first (ring order, wrapping) of element j.
float PartialSum(int last, int count, int n, size_t j) {
  float s = 0;
  for (int c = 0; c < count; ++c) s += Element(((last - c) % n + n) % n, j);
  return s;
}

unsigned char PatternByte(int from, size_t i) {
  return static_cast<unsigned char>((i * 131 + static_cast<size_t>(from) * 17 + (i >> 12)) & 0xff);
}

}  // namespace

Json ToJson(const LinkSample& s) {
  Json j = {{"from", s.from}, {"to", s.to}, {"correct", s.correct}};
  if (s.mib_s >= 0) j["mib_s"] = s.mib_s;
  if (s.rtt_ms >= 0) j["rtt_ms"] = s.rtt_ms;
  if (!s.connected) j["connected"] = false;
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

Result<LinkSample> LinkSampleFromJson(const Json& j) {
  if (!j.is_object()) return InvalidArgument("a link sample must be a JSON object");
  LinkSample s;
  for (const char* k : {"from", "to"}) {
    if (!j.contains(k) || !j[k].is_number_integer() || j[k].get<long>() < 0 ||
        j[k].get<long>() >= kMaxLinkMembers) {
      return InvalidArgument(std::string("link sample: \"") + k + "\" must be a ring index in 0.." +
                             std::to_string(kMaxLinkMembers - 1));
    }
  }
  s.from = j["from"].get<int>();
  s.to = j["to"].get<int>();
  for (auto [k, v] : {std::pair<const char*, double*>{"mib_s", &s.mib_s}, {"rtt_ms", &s.rtt_ms}}) {
    if (!j.contains(k)) continue;
    if (!j[k].is_number() || !(j[k].get<double>() >= 0)) {
      return InvalidArgument(std::string("link sample: \"") + k + "\" must be a number >= 0");
    }
    *v = j[k].get<double>();
  }
  if (j.contains("correct")) {
    if (!j["correct"].is_boolean()) {
      return InvalidArgument("link sample: \"correct\" must be true or false");
    }
    s.correct = j["correct"].get<bool>();
  }
  if (j.contains("connected")) {
    if (!j["connected"].is_boolean()) {
      return InvalidArgument("link sample: \"connected\" must be true or false");
    }
    s.connected = j["connected"].get<bool>();
  }
  if (j.contains("error")) {
    if (!j["error"].is_string()) return InvalidArgument("link sample: \"error\" must be a string");
    s.error = j["error"].get<std::string>();
  }
  return s;
}

Result<std::vector<LinkPeer>> ParseLinkPeers(const std::string& text) {
  std::vector<LinkPeer> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    const size_t colon = item.rfind(':');
    char* end = nullptr;
    const long port =
        colon == std::string::npos ? 0 : std::strtol(item.c_str() + colon + 1, &end, 10);
    if (colon == std::string::npos || colon == 0 || end == nullptr || *end != '\0' || port < 1 ||
        port > 65535) {
      return InvalidArgument("peer '" + item + "' must be HOST:PORT with a port in 1..65535");
    }
    out.push_back({item.substr(0, colon), static_cast<int>(port)});
    pos = comma + 1;
  }
  if (out.size() < 2 || out.size() > static_cast<size_t>(kMaxLinkMembers)) {
    return InvalidArgument("the ring needs 2.." + std::to_string(kMaxLinkMembers) + " peers, got " +
                           std::to_string(out.size()));
  }
  return out;
}

LinkCheckOutput LinkSelfTest(const LinkOptions& o) {
  LinkCheckOutput r;
  const int n = static_cast<int>(o.peers.size());
  const int me = o.index;
  if (n < 2 || n > kMaxLinkMembers || me < 0 || me >= n || o.listen_fd < 0) {
    r.evidence = "bad ring: " + std::to_string(n) + " members, index " + std::to_string(me);
    return r;
  }
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  LinkSample in{prev, me, -1, -1, true, true, ""};
  LinkSample out{me, next, -1, -1, true, true, ""};
  LinkSample back{next, me, -1, -1, true, true, ""};  // a ring of 3+: the reverse link
  const double start = NowS();
  // Leave a second of the budget for the report; never less than half of it.
  const double deadline = start + std::max(o.budget_s * 0.5, o.budget_s - 1.0);
  const double bps = o.throttle_mib_s * 1048576.0;
  auto finish = [&](const std::string& what) {
    r.links = {in, out};
    if (n >= 3) r.links.push_back(back);
    r.ok =
        in.error.empty() && out.error.empty() && back.error.empty() && in.correct && back.correct;
    r.evidence = what;
    return r;
  };
  // Connect to the successor (its listener is bound already) and accept the predecessor.
  Fd out_fd, in_fd;
  {
    auto c = TcpConnect(o.peers[next].host, o.peers[next].port, std::max(0.1, deadline - NowS()));
    if (!c.ok()) {
      out.connected = false;
      out.error =
          "could not connect to member " + std::to_string(next) + ": " + c.status().message();
    } else {
      out_fd = std::move(*c);
      Hello h;
      std::memcpy(h.magic, kMagic, 4);
      h.session = o.session;
      h.from = static_cast<uint32_t>(me);
      Status st = SendAll(out_fd.get(), &h, sizeof h, deadline, 0, "hello");
      if (!st.ok()) {
        out.connected = false;
        out.error = st.message();
      }
    }
  }
  while (!in_fd.valid() && NowS() < deadline) {
    pollfd p{o.listen_fd, POLLIN, 0};
    ::poll(&p, 1, std::max(1, static_cast<int>((deadline - NowS()) * 1000)));
    Fd c = TcpAcceptNonBlocking(o.listen_fd);
    if (!c.valid()) continue;
    Hello h{};
    Status st = RecvAll(c.get(), &h, sizeof h, std::min(deadline, NowS() + 2), "hello");
    if (st.ok() && std::memcmp(h.magic, kMagic, 4) == 0 && h.session == o.session &&
        h.from == static_cast<uint32_t>(prev)) {
      in_fd = std::move(c);
    }  // else a stray or stale connection: dropped, keep accepting
  }
  if (!in_fd.valid()) {
    in.connected = false;
    in.error = "member " + std::to_string(prev) + " never connected within " +
               F("%.1f", deadline - start) + " s";
  }
  if (!out_fd.valid() || !in_fd.valid() || !out.error.empty()) {
    return finish("the ring did not form: " + (in.error.empty() ? out.error : in.error));
  }
  // 1. Latency: ping the successor, echo the predecessor's pings.
  {
    std::vector<double> rtts;
    unsigned char ping[kPingBytes], echo[kPingBytes];
    for (int k = 0; k < kPings; ++k) {
      std::memset(ping, k + 1, sizeof ping);
      const double t = NowS();
      Status st = SendAll(out_fd.get(), ping, sizeof ping, deadline, 0, "ping");
      LinkSample* on = &out;
      if (st.ok()) {
        on = &in;
        st = RecvAll(in_fd.get(), echo, sizeof echo, deadline, "ping from predecessor");
      }
      if (st.ok()) st = SendAll(in_fd.get(), echo, sizeof echo, deadline, bps, "echo");
      if (st.ok()) {
        on = &out;
        st = RecvAll(out_fd.get(), echo, sizeof echo, deadline, "echo from successor");
      }
      if (!st.ok()) {
        on->error = st.message();
        return finish("the pings failed: " + st.message());
      }
      rtts.push_back((NowS() - t) * 1000);
    }
    out.rtt_ms = MedianOf(rtts);
  }
  // 2. The ring all-reduce, every received chunk checked bit for bit.
  const size_t len = std::max<size_t>(o.reduce_floats, static_cast<size_t>(n));
  std::vector<float> buf(len), incoming(len / n + 1);
  for (size_t j = 0; j < len; ++j) buf[j] = Element(me, j);
  auto chunk_begin = [&](int c) { return len * static_cast<size_t>(c) / n; };
  auto chunk_len = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };
  std::string wrong;
  for (int phase = 0; phase < 2 && wrong.empty(); ++phase) {
    for (int s = 0; s < n - 1; ++s) {
      // reduce-scatter: send chunk me-s, receive chunk me-s-1 (prev's partial sum);
      // all-gather: send chunk me+1-s, receive chunk me-s (complete sums).
      const int send_c = ((phase == 0 ? me - s : me + 1 - s) % n + n) % n;
      const int recv_c = ((phase == 0 ? me - s - 1 : me - s) % n + n) % n;
      Pump p;
      p.out = out_fd.get();
      p.send_buf = reinterpret_cast<const unsigned char*>(buf.data() + chunk_begin(send_c));
      p.send_len = chunk_len(send_c) * sizeof(float);
      p.in = in_fd.get();
      p.recv_buf = reinterpret_cast<unsigned char*>(incoming.data());
      p.recv_len = chunk_len(recv_c) * sizeof(float);
      p.throttle_bps = bps;
      Status st = p.Run(deadline, phase == 0 ? "reduce-scatter" : "all-gather");
      if (!st.ok()) {
        in.error = st.message();
        return finish("the all-reduce failed: " + st.message());
      }
      // What the predecessor must have sent: its partial sum of s+2 members ending at
      // prev... (reduce-scatter) or the full sum (all-gather).
      const int count = phase == 0 ? s + 1 : n;
      for (size_t k = 0; k < chunk_len(recv_c); ++k) {
        const size_t j = chunk_begin(recv_c) + k;
        const float want = PartialSum(prev, count, n, j);
        if (std::memcmp(&incoming[k], &want, sizeof want) != 0 && wrong.empty()) {
          wrong = "element " + std::to_string(j) + " from member " + std::to_string(prev) +
                  " was " + F("%.9g", incoming[k]) + ", not " + F("%.9g", want);
        }
        buf[j] = phase == 0 ? buf[j] + incoming[k] : incoming[k];
      }
    }
  }
  if (wrong.empty()) {
    for (size_t j = 0; j < len && wrong.empty(); ++j) {
      const float want = PartialSum(n - 1, n, n, j);
      if (std::memcmp(&buf[j], &want, sizeof want) != 0) {
        wrong = "the reduced element " + std::to_string(j) + " is " + F("%.9g", buf[j]) + ", not " +
                F("%.9g", want);
      }
    }
  }
  if (!wrong.empty()) in.correct = false;
  // 3. Bandwidth: every member streams to its successor at once, in stamped chunks, and
  // -- in a ring of three or more -- back to its predecessor too (a ring of two has both
  // directions already), so every directed link between neighbours is measured. Each
  // stream's sending and receiving move on independently, so one slow link does not
  // pace the others.
  const size_t kChunk = 1 << 20;
  struct Stream {
    int fd = -1;
    int from = -1;  // the member this stream's incoming bytes come from
    bool send_open = true, recv_open = true;
    size_t sent = 0, got = 0;
    double last_in = 0;
    bool correct = true;
    std::vector<unsigned char> send, want, recv;
  };
  const bool both_ways = n >= 3;
  std::vector<Stream> streams(both_ways ? 2 : 1);
  streams[0].fd = in_fd.get();  // receives from the predecessor, sends back if both_ways
  streams[0].from = prev;
  streams[0].send_open = both_ways;  // a ring of two: each direction has its connection
  if (both_ways) {
    streams[1].fd = out_fd.get();  // sends to the successor, receives from it
    streams[1].from = next;
  }
  const double phase = NowS();
  auto stamp = [&](std::vector<unsigned char>* buf, size_t offset) {
    const uint64_t k = offset / kChunk;
    std::memcpy(buf->data(), &k, sizeof k);
  };
  for (Stream& st : streams) {
    st.send.resize(kChunk);
    st.want.resize(kChunk);
    st.recv.resize(kChunk);
    st.last_in = phase;
    for (size_t i = 0; i < kChunk; ++i) {
      st.send[i] = PatternByte(me, i);
      st.want[i] = PatternByte(st.from, i);
    }
    stamp(&st.send, 0);
  }
  // Forward sending rides on the stream of out_fd; in a ring of two it is a send-only
  // stream of its own.
  Stream fwd;
  Stream* sender = both_ways ? &streams[1] : &fwd;
  if (!both_ways) {
    fwd.fd = out_fd.get();
    fwd.recv_open = false;
    fwd.send.resize(kChunk);
    for (size_t i = 0; i < kChunk; ++i) fwd.send[i] = PatternByte(me, i);
    stamp(&fwd.send, 0);
  }
  std::vector<Stream*> all;
  for (Stream& st : streams) all.push_back(&st);
  if (!both_ways) all.push_back(sender);
  const double cap = std::min(deadline, phase + o.stream_cap_s);
  auto busy = [&] {
    for (const Stream* st : all) {
      if ((st->send_open && st->sent < o.bytes) || (st->recv_open && st->got < o.bytes)) {
        return true;
      }
    }
    return false;
  };
  while (busy()) {
    const double now = NowS();
    if (now >= cap) break;  // what came in by the cap is the measurement
    const size_t allowed =
        bps > 0 ? std::min(o.bytes, static_cast<size_t>(bps * (now - phase)) + 16384) : o.bytes;
    std::vector<pollfd> pf;
    std::vector<Stream*> who;
    bool paced = false;
    for (Stream* st : all) {
      short events = 0;
      if (st->send_open && st->sent < allowed) events |= POLLOUT;
      if (st->send_open && st->sent >= allowed && st->sent < o.bytes) paced = true;
      if (st->recv_open && st->got < o.bytes) events |= POLLIN;
      if (events == 0) continue;
      pf.push_back({st->fd, events, 0});
      who.push_back(st);
    }
    if (::poll(pf.data(), pf.size(), paced ? 2 : 50) <= 0) continue;
    for (size_t k = 0; k < pf.size(); ++k) {
      Stream& st = *who[k];
      if ((pf[k].events & POLLOUT) && (pf[k].revents & (POLLOUT | POLLERR | POLLHUP))) {
        const size_t at = st.sent % kChunk;
        const size_t len = std::min({kChunk - at, allowed - st.sent, o.bytes - st.sent});
        const ssize_t got = ::send(st.fd, st.send.data() + at, len, MSG_NOSIGNAL);
        if (got > 0) {
          st.sent += static_cast<size_t>(got);
          if (st.sent % kChunk == 0) stamp(&st.send, st.sent);
        } else if (got < 0 && errno != EAGAIN && errno != EINTR) {
          st.send_open = false;  // the peer is gone or done: its own report says which
        }
      }
      if ((pf[k].events & POLLIN) && (pf[k].revents & (POLLIN | POLLERR | POLLHUP))) {
        const size_t at = st.got % kChunk;
        const size_t len = std::min(kChunk - at, o.bytes - st.got);
        const ssize_t got = ::recv(st.fd, st.recv.data() + at, len, 0);
        if (got > 0) {
          st.got += static_cast<size_t>(got);
          st.last_in = NowS();
          if (st.got % kChunk == 0 || st.got == o.bytes) {
            const size_t have = (st.got - 1) % kChunk + 1;
            stamp(&st.want, st.got - have);
            if (std::memcmp(st.recv.data(), st.want.data(), have) != 0 && st.correct) {
              st.correct = false;
              if (wrong.empty()) {
                wrong = "chunk " + std::to_string((st.got - 1) / kChunk) +
                        " streamed from member " + std::to_string(st.from) + " was wrong";
              }
            }
          }
        } else if (got == 0) {
          st.recv_open = false;  // the peer reached its cap first
        } else if (errno != EAGAIN && errno != EINTR) {
          LinkSample& l = &st == &streams[0] ? in : back;
          l.error = "bandwidth stream: recv: " + std::string(std::strerror(errno));
          return finish("the bandwidth stream failed: " + l.error);
        }
      }
    }
  }
  auto rate = [&](const Stream& st) {
    return static_cast<double>(st.got) / 1048576.0 / std::max(st.last_in - phase, 1e-6);
  };
  in.mib_s = rate(streams[0]);
  in.correct = in.correct && streams[0].correct;
  if (both_ways) {
    back.mib_s = rate(streams[1]);
    back.correct = streams[1].correct;
  }
  // End in order: no more sends; drain the neighbours until they end too (bounded), so
  // no member closes a connection a neighbour still writes to.
  ::shutdown(out_fd.get(), SHUT_WR);
  if (both_ways) ::shutdown(in_fd.get(), SHUT_WR);
  const double drain_until = std::min(deadline, NowS() + 2);
  bool in_eof = false, out_eof = !both_ways;
  std::vector<unsigned char> sink(kChunk);
  while ((!in_eof || !out_eof) && NowS() < drain_until) {
    pollfd pf[2] = {{in_fd.get(), static_cast<short>(in_eof ? 0 : POLLIN), 0},
                    {out_fd.get(), static_cast<short>(out_eof ? 0 : POLLIN), 0}};
    if (::poll(pf, 2, std::max(1, static_cast<int>((drain_until - NowS()) * 1000))) <= 0) {
      continue;
    }
    for (int k = 0; k < 2; ++k) {
      if (!pf[k].revents) continue;
      const ssize_t got = ::recv(pf[k].fd, sink.data(), sink.size(), 0);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
        (k == 0 ? in_eof : out_eof) = true;
    }
  }
  const std::string self = "member " + std::to_string(me) + " of " + std::to_string(n);
  return finish(self + ": in from " + std::to_string(prev) + " " + F("%.1f", in.mib_s) + " MiB/s" +
                (n >= 3 ? ", from " + std::to_string(next) + " " + F("%.1f", back.mib_s) + " MiB/s"
                        : std::string()) +
                ", out to " + std::to_string(next) + " rtt " + F("%.3f", out.rtt_ms) + " ms; " +
                (wrong.empty() ? "all-reduce of " + std::to_string(len) + " floats bit-exact"
                               : "WRONG DATA: " + wrong));
}

LinkVerdict JudgeLinks(const std::vector<std::string>& names,
                       const std::vector<LinkSample>& samples, const std::vector<int>& suspects,
                       const std::vector<int>& silent) {
  LinkVerdict v;
  const int n = static_cast<int>(names.size());
  if (n < 2) {
    v.summary = "no ring: fewer than 2 members";
    return v;
  }
  // The ring's directed links: i-1 -> i for every member (index i), and in a ring of
  // three or more i+1 -> i too (index n + i). Merge what each end reported of each.
  const int m = n >= 3 ? 2 * n : n;
  std::vector<LinkSample> link(m);
  std::vector<bool> reported(m, false);
  for (int i = 0; i < n; ++i) {
    link[i] = {(i + n - 1) % n, i, -1, -1, true, true, ""};
    if (n >= 3) link[n + i] = {(i + 1) % n, i, -1, -1, true, true, ""};
  }
  for (const LinkSample& s : samples) {
    int k = -1;
    for (int j = 0; j < m && k < 0; ++j) {
      if (link[j].from == s.from && link[j].to == s.to) k = j;
    }
    if (k < 0) continue;  // not a link of the ring
    LinkSample& l = link[k];
    reported[k] = std::find(silent.begin(), silent.end(), s.to) == silent.end();
    if (s.mib_s >= 0) l.mib_s = s.mib_s;
    if (s.rtt_ms >= 0) l.rtt_ms = s.rtt_ms;
    l.correct = l.correct && s.correct;
    l.connected = l.connected && s.connected;
    if (!s.error.empty() && l.error.empty()) l.error = s.error;
  }
  // A reverse link shares its connection with a forward one: it is as reported, and as
  // connected, as the member that receives on it says.
  bool unformed = false;  // some link never connected: the ring did not form
  for (int i = 0; i < n; ++i) unformed = unformed || !reported[i] || !link[i].connected;
  std::vector<double> rates;
  for (const LinkSample& l : link) {
    if (l.mib_s >= 0) rates.push_back(l.mib_s);
  }
  v.median_mib_s = MedianOf(rates);
  v.link_bad.assign(m, false);
  auto name_of = [&](int i) { return names[i]; };
  std::vector<std::string> why(m);
  std::vector<int> bad_count(n, 0);
  for (int i = 0; i < m; ++i) {
    const LinkSample& l = link[i];
    const bool reverse = i >= n;
    if (!reported[i] && !(reverse && unformed)) {
      why[i] = "not reported";
    } else if (!l.connected) {
      why[i] = "failed: " + l.error;
    } else if (!l.correct) {
      why[i] = "delivered wrong data";
    } else if (unformed) {
      // a consequence of the ring that did not form: not this link's fault
    } else if (!l.error.empty()) {
      why[i] = "failed: " + l.error;
    } else if (l.mib_s < 0) {
      // not measured without an error: nothing to hold against it
    } else if (l.mib_s < kSlowLinkFraction * v.median_mib_s) {
      why[i] = "slow: " + F("%.1f", l.mib_s) + " MiB/s < " + F("%.2g", kSlowLinkFraction) +
               " x the median " + F("%.1f", v.median_mib_s) + " MiB/s";
    }
    if (!why[i].empty()) {
      v.link_bad[i] = true;
      ++bad_count[l.from];
      ++bad_count[l.to];
    }
    v.evidence += (i == 0 ? "" : "; ") + name_of(l.from) + "->" + name_of(l.to) + " " +
                  (l.mib_s >= 0 ? F("%.1f", l.mib_s) + " MiB/s" : std::string("? MiB/s")) +
                  (l.rtt_ms >= 0 ? " " + F("%.3f", l.rtt_ms) + " ms" : std::string()) +
                  (l.correct ? "" : " WRONG DATA");
  }
  const std::set<int> suspect(suspects.begin(), suspects.end());
  std::set<int> fault;
  std::string bad;
  for (int i = 0; i < m; ++i) {
    if (!v.link_bad[i]) continue;
    const int a = link[i].from, b = link[i].to;
    std::vector<int> named;
    if (!reported[i]) {
      named = {b};  // the member that did not report its incoming link
    } else if (bad_count[a] != bad_count[b]) {
      named = {bad_count[a] > bad_count[b] ? a : b};
    } else if (suspect.count(a) != suspect.count(b)) {
      named = {suspect.count(a) ? a : b};
    } else {
      named = {a, b};
    }
    std::string who;
    for (int x : named) {
      fault.insert(x);
      who += (who.empty() ? "" : " or ") + name_of(x);
    }
    bad += (bad.empty() ? "" : "; ") + std::string("link ") + name_of(a) + "->" + name_of(b) + " " +
           why[i] + " (" + (named.size() > 1 ? "one of " : "") + who + ")";
  }
  v.at_fault.assign(fault.begin(), fault.end());
  v.summary = bad.empty() ? "all " + std::to_string(m) + " links bit-exact, median " +
                                F("%.1f", v.median_mib_s) + " MiB/s"
                          : bad;
  return v;
}

}  // namespace bulwark::diag
