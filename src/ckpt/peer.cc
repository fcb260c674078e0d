// Peer replication of staged snapshots; the API is described in peer.h.
//
// WIRE PROTOCOL (version 1; every integer little-endian; one request per connection)
//   Frame header, 24 bytes:
//     0  magic     4 bytes "BWPR"
//     4  version   u16 = 1
//     6  op        u16: 1 PUSH, 2 FETCH, 3 STATUS, 4 SNAPSHOT
//     8  json_len  u32, <= 64 MiB (kPeerMaxHeaderBytes)
//     12 flags     u32 = 0
//     16 data_len  u64, <= the receiver's max_snapshot_bytes (0 unless PUSH/SNAPSHOT)
//   then json_len bytes of a JSON object, then data_len raw bytes.
//
//   Snapshot JSON (PUSH, SNAPSHOT):
//     {"rank": r, "world": w, "step": s, "chunk_size": c,
//      "tensors": [{<TensorMeta as in the shard index: name, dtype, shape,
//                   [global_shape], [offsets], [replicated], nbytes>,
//                   "hashes": ["<16 hex digits xxh3 of chunk 0>", ...]}, ...]}
//     Data: the tensors' bytes concatenated in that order, no padding; data_len
//     must equal the sum of nbytes and each tensor carries ceil(nbytes / c) hashes.
//   STATUS JSON: {"code": <bulwark::Code as int, 0 = OK>, "message": "..."}.
//   FETCH JSON: {"rank": r, "step": s}.
//
//   PUSH:   C->S PUSH header (data_len = tensor bytes)
//           S->C STATUS: OK = "send the data" (header valid), else the rejection and
//                the server closes. The data lands straight in a slot of the rank's
//                replica ring (staging.h: StageFilled), each chunk checked as it lands.
//           C->S data_len bytes
//           S->C STATUS: OK once every chunk verified and the snapshot is staged
//                sealed; DATA_LOSS naming the first bad tensor/chunk (nothing staged)
//   FETCH:  C->S FETCH header
//           S->C SNAPSHOT header + data, or STATUS with the error (NOT_FOUND, ...)
//           The client verifies every chunk before staging.
//   A malformed request (bad magic, version, op, JSON, TensorMeta, sizes) gets a
//   STATUS reply with the reason, which the server also logs; the server then
//   half-closes and drains the client's remaining input for at most 1 s so the
//   reply is not lost to a TCP reset.
//
// SERVER THREADS: one acceptor thread polls the listener and a stop pipe; each
// accepted connection gets its own thread, at most max_connections at once. Every
// socket wait polls the connection and the stop pipe, so Stop() wakes them all.
#include "ckpt/peer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <thread>

#include "ckpt/format.h"
#include "common/clock.h"
#include "common/net.h"

namespace bulwark::ckpt {
namespace {

using Json = nlohmann::json;

constexpr char kMagic[4] = {'B', 'W', 'P', 'R'};
constexpr uint16_t kVersion = 1;
constexpr size_t kFrameSize = 24;
constexpr uint64_t kPiece = 4ull << 20;  // data moves in pieces of this size, each with a deadline
constexpr int64_t kMaxDim = int64_t{1} << 53;
constexpr int kMaxDims = 64;
constexpr int kMaxWorld = 1 << 24;
constexpr double kLingerS = 1.0;

enum Op : uint16_t { kPush = 1, kFetch = 2, kStatus = 3, kSnapshot = 4 };

const char* OpName(uint16_t op) {
  switch (op) {
    case kPush:
      return "PUSH";
    case kFetch:
      return "FETCH";
    case kStatus:
      return "STATUS";
    case kSnapshot:
      return "SNAPSHOT";
  }
  return "?";
}

// A connected non-blocking socket with deadline-bounded full reads and writes.
// `stop_fd` (-1: none) becoming readable aborts any wait with ABORTED.
class Conn {
 public:
  Conn(Fd fd, int stop_fd, double timeout_s, std::string peer)
      : fd_(std::move(fd)), stop_fd_(stop_fd), timeout_s_(timeout_s), peer_(std::move(peer)) {}
  const std::string& peer() const { return peer_; }
  void set_timeout(double timeout_s) { timeout_s_ = timeout_s; }
  int fd() const { return fd_.get(); }
  Fd ReleaseFd() { return std::move(fd_); }

  // Reads exactly n bytes; each piece of <= kPiece bytes gets timeout_s.
  Status ReadFull(void* p, uint64_t n) {
    uint8_t* b = static_cast<uint8_t*>(p);
    for (uint64_t done = 0; done < n;) {
      const uint64_t len = std::min(kPiece, n - done);
      BW_RETURN_IF_ERROR(ReadPiece(b + done, len, n, done));
      done += len;
    }
    return Status::Ok();
  }

  // Writes exactly n bytes; each piece of <= kPiece bytes gets timeout_s.
  Status WriteFull(const void* p, uint64_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (uint64_t done = 0; done < n;) {
      const uint64_t len = std::min(kPiece, n - done);
      const double deadline = SystemClock::Get()->NowMono() + timeout_s_;
      for (uint64_t off = 0; off < len;) {
        ssize_t w = ::send(fd_.get(), b + done + off, len - off, MSG_NOSIGNAL);
        if (w > 0) {
          off += static_cast<uint64_t>(w);
          continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          BW_RETURN_IF_ERROR(Wait(POLLOUT, deadline, "sending"));
          continue;
        }
        return Unavailable("sending to " + peer_ + ": " + std::strerror(errno));
      }
      done += len;
    }
    return Status::Ok();
  }

  // After an error reply: half-close, then discard input until EOF, 64 MiB or
  // kLingerS, so the peer reads the reply instead of a reset.
  void LingerClose() {
    ::shutdown(fd_.get(), SHUT_WR);
    const double deadline = SystemClock::Get()->NowMono() + std::min(kLingerS, timeout_s_);
    char buf[65536];
    uint64_t drained = 0;
    while (drained < (64u << 20)) {
      ssize_t r = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (r > 0) {
        drained += static_cast<uint64_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
          Wait(POLLIN, deadline, "draining").ok()) {
        continue;
      }
      break;
    }
    fd_.Reset();
  }

 private:
  Status ReadPiece(uint8_t* p, uint64_t len, uint64_t total, uint64_t before) {
    const double deadline = SystemClock::Get()->NowMono() + timeout_s_;
    for (uint64_t off = 0; off < len;) {
      ssize_t r = ::recv(fd_.get(), p + off, len - off, 0);
      if (r > 0) {
        off += static_cast<uint64_t>(r);
        continue;
      }
      if (r == 0) {
        return Unavailable(peer_ + " closed the connection after " + std::to_string(before + off) +
                           " of " + std::to_string(total) + " bytes of a message part");
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        BW_RETURN_IF_ERROR(Wait(POLLIN, deadline, "receiving"));
        continue;
      }
      return Unavailable("receiving from " + peer_ + ": " + std::strerror(errno));
    }
    return Status::Ok();
  }

  Status Wait(short events, double deadline, const char* what) {
    while (true) {
      const double left = deadline - SystemClock::Get()->NowMono();
      if (left <= 0) {
        return DeadlineExceeded(std::string(what) + " " + peer_ + ": no progress for " +
                                std::to_string(timeout_s_) + " s");
      }
      pollfd p[2] = {{fd_.get(), events, 0}, {stop_fd_, POLLIN, 0}};
      const int ms = static_cast<int>(std::min(left, 3600.0) * 1000) + 1;
      int n = ::poll(p, stop_fd_ >= 0 ? 2 : 1, ms);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Internal(std::string("poll: ") + std::strerror(errno));
      if (stop_fd_ >= 0 && (p[1].revents & POLLIN)) {
        return Status(Code::kAborted, std::string(what) + " " + peer_ + ": server stopping");
      }
      if (p[0].revents != 0) return Status::Ok();
    }
  }

  Fd fd_;
  int stop_fd_;
  double timeout_s_;
  std::string peer_;
};

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

struct Frame {
  uint16_t op = 0;
  Json json;
  uint64_t data_len = 0;
};

// Sends a frame header and its JSON (the data, if any, follows separately).
Status SendFrame(Conn& c, uint16_t op, const Json& j, uint64_t data_len) {
  const std::string body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (body.size() > kPeerMaxHeaderBytes) {
    return InvalidArgument("JSON header of " + std::to_string(body.size()) +
                           " bytes exceeds the protocol limit of 64 MiB");
  }
  std::string buf(kFrameSize, '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(buf.data());
  std::memcpy(p, kMagic, 4);
  Put16(p + 4, kVersion);
  Put16(p + 6, op);
  Put32(p + 8, static_cast<uint32_t>(body.size()));
  Put32(p + 12, 0);
  internal::Put64(p + 16, data_len);
  buf += body;
  return c.WriteFull(buf.data(), buf.size());
}

Status SendStatus(Conn& c, const Status& st) {
  Json j;
  j["code"] = static_cast<int>(st.code());
  j["message"] = st.message();
  return SendFrame(c, kStatus, j, 0);
}

// Reads a frame header and its JSON. Rejects (INVALID_ARGUMENT) bad magic,
// version, flags, an op outside `allowed`, lengths over the bounds (before
// allocating anything), and JSON that is not an object.
Status ReadFrame(Conn& c, const std::set<uint16_t>& allowed, uint64_t max_data, Frame* f) {
  uint8_t h[kFrameSize];
  BW_RETURN_IF_ERROR(c.ReadFull(h, kFrameSize));
  if (std::memcmp(h, kMagic, 4) != 0) {
    return InvalidArgument("bad magic: not a Bulwark peer-replication stream");
  }
  const uint16_t version = Get16(h + 4);
  if (version != kVersion) {
    return InvalidArgument("peer protocol version " + std::to_string(version) +
                           " is not supported (expected " + std::to_string(kVersion) +
                           "); run the same Bulwark version on both nodes");
  }
  f->op = Get16(h + 6);
  if (allowed.count(f->op) == 0) {
    return InvalidArgument("unexpected op " + std::to_string(f->op) + " (" + OpName(f->op) + ")");
  }
  const uint32_t json_len = Get32(h + 8);
  if (Get32(h + 12) != 0) return InvalidArgument("unknown frame flags");
  f->data_len = internal::Get64(h + 16);
  if (json_len > kPeerMaxHeaderBytes) {
    return InvalidArgument("declared JSON header length " + std::to_string(json_len) +
                           " exceeds the limit of 64 MiB");
  }
  if (f->data_len > max_data) {
    return InvalidArgument("declared data length " + std::to_string(f->data_len) +
                           " exceeds max_snapshot_bytes " + std::to_string(max_data));
  }
  if (f->data_len != 0 && f->op != kPush && f->op != kSnapshot) {
    return InvalidArgument(std::string(OpName(f->op)) + " frame must not carry data");
  }
  std::string body(json_len, '\0');
  BW_RETURN_IF_ERROR(c.ReadFull(body.data(), json_len));
  f->json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (f->json.is_discarded() || !f->json.is_object()) {
    return InvalidArgument(std::string(OpName(f->op)) + " header is not a JSON object");
  }
  return Status::Ok();
}

Status StatusFromJson(const Json& j) {
  if (!j.contains("code") || !j["code"].is_number_integer() || !j.contains("message") ||
      !j["message"].is_string()) {
    return InvalidArgument("malformed STATUS reply");
  }
  const int64_t code = j["code"].get<int64_t>();
  if (code < 0 || code > static_cast<int64_t>(Code::kAborted)) {
    return InvalidArgument("STATUS reply with unknown code " + std::to_string(code));
  }
  if (code == 0) return Status::Ok();
  return Status(static_cast<Code>(code), j["message"].get<std::string>());
}

// Integer field `key` of j in [lo, hi].
Status GetInt(const Json& j, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) {
    return InvalidArgument(std::string("field \"") + key + "\" missing or not an integer");
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return InvalidArgument(std::string("field \"") + key + "\" = " + it->dump() + " out of range");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return InvalidArgument(std::string("field \"") + key + "\" = " + std::to_string(v) +
                           " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "]");
  }
  *out = v;
  return Status::Ok();
}

// Dimension arrays must hold at most kMaxDims integers in [0, 2^53] so that
// TensorMeta::Validate and nbytes cannot overflow.
Status CheckDims(const Json& t, const char* key, bool required) {
  auto it = t.find(key);
  if (it == t.end()) {
    return required ? InvalidArgument(std::string("tensor field \"") + key + "\" missing")
                    : Status::Ok();
  }
  if (!it->is_array() || it->size() > kMaxDims) {
    return InvalidArgument(std::string("tensor field \"") + key +
                           "\" must be an array of <= " + std::to_string(kMaxDims) + " dimensions");
  }
  for (const Json& d : *it) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > kMaxDim) ||
        d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxDim) {
      return InvalidArgument(std::string("tensor field \"") + key +
                             "\" holds a dimension that is not an integer in [0, 2^53]");
    }
  }
  return Status::Ok();
}

// A snapshot's header as sent on the wire.
struct WireSnapshot {
  int rank = 0;
  int world = 1;
  long step = 0;
  uint64_t chunk_size = 0;
  std::vector<TensorMeta> metas;
  std::vector<std::vector<uint64_t>> hashes;
  uint64_t total = 0;
};

Json EncodeSnapshot(const Snapshot& snap) {
  Json j;
  j["rank"] = snap.rank();
  j["world"] = snap.world();
  j["step"] = snap.step();
  j["chunk_size"] = snap.chunk_size();
  Json ts = Json::array();
  for (const TensorView& t : snap.tensors()) {
    Json e;
    internal::MetaToJson(t.meta, &e);
    Json hs = Json::array();
    const uint64_t n = internal::ChunkCount(t.meta.nbytes(), snap.chunk_size());
    for (uint64_t i = 0; i < n; ++i) hs.push_back(internal::Hex64(t.chunk_hashes[i]));
    e["hashes"] = std::move(hs);
    ts.push_back(std::move(e));
  }
  j["tensors"] = std::move(ts);
  return j;
}

// Parses and bounds-checks a snapshot header against the declared data length.
Status DecodeSnapshot(const Json& j, uint64_t data_len, WireSnapshot* s) {
  int64_t v = 0;
  BW_RETURN_IF_ERROR(GetInt(j, "world", 1, kMaxWorld, &v));
  s->world = static_cast<int>(v);
  BW_RETURN_IF_ERROR(GetInt(j, "rank", 0, s->world - 1, &v));
  s->rank = static_cast<int>(v);
  BW_RETURN_IF_ERROR(GetInt(j, "step", 0, INT64_MAX, &v));
  s->step = static_cast<long>(v);
  BW_RETURN_IF_ERROR(GetInt(j, "chunk_size", 1, INT64_MAX, &v));
  s->chunk_size = static_cast<uint64_t>(v);
  auto ts = j.find("tensors");
  if (ts == j.end() || !ts->is_array())
    return InvalidArgument("field \"tensors\" must be an array");
  std::set<std::string> names;
  s->total = 0;
  for (const Json& t : *ts) {
    if (!t.is_object()) return InvalidArgument("tensor entry is not an object");
    BW_RETURN_IF_ERROR(CheckDims(t, "shape", true));
    BW_RETURN_IF_ERROR(CheckDims(t, "global_shape", false));
    BW_RETURN_IF_ERROR(CheckDims(t, "offsets", false));
    TensorMeta m;
    Status ms = internal::MetaFromJson(&t, "peer snapshot header", &m);
    if (!ms.ok()) return InvalidArgument(ms.message());
    // nbytes without overflow (saturating at data_len + 1).
    uint64_t nb = DTypeSize(m.dtype);
    for (int64_t d : m.shape) {
      const uint64_t dim = static_cast<uint64_t>(d);
      nb = (dim != 0 && nb > data_len / dim) ? data_len + 1 : nb * dim;
    }
    if (nb > data_len || m.nbytes() > data_len - s->total) {
      return InvalidArgument("tensor '" + m.name + "' of " + std::to_string(m.nbytes()) +
                             " bytes does not fit in the declared data length " +
                             std::to_string(data_len));
    }
    if (!names.insert(m.name).second) {
      return InvalidArgument("tensor '" + m.name + "' appears twice");
    }
    const uint64_t n = internal::ChunkCount(m.nbytes(), s->chunk_size);
    auto hs = t.find("hashes");
    if (hs == t.end() || !hs->is_array() || hs->size() != n) {
      return InvalidArgument("tensor '" + m.name + "' must carry " + std::to_string(n) +
                             " chunk hashes");
    }
    std::vector<uint64_t> hv(n);
    for (uint64_t i = 0; i < n; ++i) {
      const Json& h = (*hs)[i];
      if (!h.is_string() || !internal::ParseHex64(h.get<std::string>(), &hv[i])) {
        return InvalidArgument("tensor '" + m.name + "' chunk " + std::to_string(i) +
                               ": hash is not 16 hex digits");
      }
    }
    s->total += m.nbytes();
    s->metas.push_back(std::move(m));
    s->hashes.push_back(std::move(hv));
  }
  if (s->total != data_len) {
    return InvalidArgument("tensors add up to " + std::to_string(s->total) +
                           " bytes but the declared data length is " + std::to_string(data_len));
  }
  return Status::Ok();
}

// Receives w.total bytes, tensor i's into dsts[i], checking each chunk's hash as it
// lands. With `drain_on_mismatch` the rest is still read (so the sender gets the
// reply); the first mismatch is returned as DATA_LOSS either way.
Status ReceiveVerified(Conn& c, const WireSnapshot& w, const std::vector<uint8_t*>& dsts,
                       bool drain_on_mismatch, const std::string& who) {
  Status bad;
  for (size_t i = 0; i < w.metas.size(); ++i) {
    const uint64_t nb = w.metas[i].nbytes();
    for (uint64_t k = 0; k * w.chunk_size < nb; ++k) {
      const uint64_t len = std::min(w.chunk_size, nb - k * w.chunk_size);
      uint8_t* p = dsts[i] + k * w.chunk_size;
      BW_RETURN_IF_ERROR(c.ReadFull(p, len));
      if (bad.ok() && internal::Hash(p, len) != w.hashes[i][k]) {
        bad =
            DataLoss(who + ": rank " + std::to_string(w.rank) + " step " + std::to_string(w.step) +
                     " tensor '" + w.metas[i].name + "' chunk " + std::to_string(k) +
                     " checksum mismatch (corrupted in transfer); " + "nothing staged");
        if (!drain_on_mismatch) return bad;
      }
    }
  }
  return bad;
}

// Receives snapshot w straight into a free slot of `stager`'s ring (no buffer: no
// second copy, no transient memory the size of the snapshot), verifying each chunk as
// it lands, and publishes the slot sealed with the verified hashes. Any error leaves
// nothing staged (the slot is EMPTY); *transfer is the transfer's own outcome (not OK:
// the error came from the connection or the checksums, not from the ring). The caller
// serialises writers of one ring.
Status ReceiveIntoRing(Conn& c, const WireSnapshot& w, Stager* stager, bool drain_on_mismatch,
                       const std::string& who, Status* transfer) {
  return stager
      ->StageFilled(
          w.step, w.metas,
          [&](const std::vector<uint8_t*>& dsts) {
            *transfer = ReceiveVerified(c, w, dsts, drain_on_mismatch, who);
            return *transfer;
          },
          &w.hashes)
      .status();
}

Result<Conn> Connect(const std::string& host, int port, double timeout_s) {
  const std::string peer = host + ":" + std::to_string(port);
  if (!(timeout_s > 0)) return InvalidArgument("timeout must be > 0 s");
  Result<Fd> fd = TcpConnect(host, port, std::min(timeout_s, 3600.0));
  if (!fd.ok()) {
    if (fd.status().code() == Code::kInvalidArgument) return fd.status();
    return Unavailable("peer " + peer + " unreachable: " + fd.status().message());
  }
  return Conn(std::move(fd).value(), -1, timeout_s, "peer " + peer);
}

}  // namespace

// ---------------------------------------------------------------------------
// Server

struct PeerServer::Impl {
  PeerServerOptions opts;
  Fd listener;
  int port = 0;
  Fd stop_r, stop_w;
  std::thread acceptor;
  std::once_flag stop_once;

  struct Worker {
    std::thread t;
    std::atomic<bool> done{false};
  };
  std::mutex mu;                               // guards workers, rank_mu
  std::list<std::unique_ptr<Worker>> workers;  // threads, including ones lingering after a reply
  // Requests in flight: a worker frees its slot just before its final reply, so
  // a client that got its reply can be served again at once.
  std::atomic<int> active{0};
  class Slot {
   public:
    explicit Slot(std::atomic<int>* active) : active_(active) {}
    ~Slot() { Free(); }
    void Free() {
      if (active_ != nullptr) active_->fetch_sub(1);
      active_ = nullptr;
    }

   private:
    std::atomic<int>* active_;
  };
  std::map<int, std::unique_ptr<std::mutex>> rank_mu;
  // A rank's replica ring, kept open (mapped) between its pushes; used under
  // RankMutex(rank). Reopened when a push brings another world or chunk size, after a
  // ring error, and when the ring file is no longer the one mapped (removed, replaced).
  struct ReplicaRing {
    std::unique_ptr<Stager> stager;
    int world = -1;
    uint64_t chunk_size = 0;
    ino_t ino = 0;  // of the ring file after the last push (0: none yet)
  };
  std::map<int, ReplicaRing> rings;  // guarded by mu (entries are stable)

  void Log(const std::string& msg) {
    if (opts.log) {
      opts.log(msg);
    } else {
      std::cerr << "bulwark-peer: " << msg << std::endl;
    }
  }

  // The entry of `rank` (the caller holds RankMutex(rank) to use it).
  ReplicaRing& RingOf(int rank) {
    std::lock_guard<std::mutex> l(mu);
    return rings[rank];
  }

  // Receives push w into rank w.rank's replica ring (opened or reopened as needed).
  // Called under RankMutex(w.rank). *transfer as for ReceiveIntoRing.
  Status ReceiveReplica(Conn& c, const WireSnapshot& w, Status* transfer) {
    ReplicaRing& r = RingOf(w.rank);
    const std::string path = RingPath(opts.replica_dir, w.rank);
    struct stat sb {};
    const ino_t now_ino = ::stat(path.c_str(), &sb) == 0 ? sb.st_ino : 0;
    if (!r.stager || r.world != w.world || r.chunk_size != w.chunk_size || r.ino != now_ino) {
      r = ReplicaRing{};
      BW_ASSIGN_OR_RETURN(
          r.stager, Stager::Open(opts.replica_dir, w.rank, w.world, opts.slots, w.chunk_size));
      r.world = w.world;
      r.chunk_size = w.chunk_size;
    }
    Status st =
        ReceiveIntoRing(c, w, r.stager.get(), /*drain_on_mismatch=*/true, "peer replica", transfer);
    if (!st.ok() && transfer->ok()) {
      r = ReplicaRing{};  // the ring itself failed: open it afresh next time
      return st;
    }
    r.ino = ::stat(path.c_str(), &sb) == 0 ? sb.st_ino : 0;
    return st;
  }

  std::mutex& RankMutex(int rank) {
    std::lock_guard<std::mutex> l(mu);
    auto& m = rank_mu[rank];
    if (!m) m = std::make_unique<std::mutex>();
    return *m;
  }

  void ReapLocked() {
    for (auto it = workers.begin(); it != workers.end();) {
      if ((*it)->done.load()) {
        (*it)->t.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Refused connections, half-closed after their reply, drained until EOF or
  // their deadline so the reply is not lost to a reset. At most kMaxLingering.
  struct Lingering {
    Fd fd;
    double deadline;
  };
  static constexpr size_t kMaxLingering = 64;

  // Discards up to 1 MiB of input; false once the peer is done or failed.
  static bool DrainSome(int fd) {
    char buf[65536];
    for (int i = 0; i < 16;) {
      ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
      if (r > 0) {
        ++i;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
  }

  void AcceptLoop() {
    std::vector<Lingering> lingering;
    while (true) {
      std::vector<pollfd> p = {{listener.get(), POLLIN, 0}, {stop_r.get(), POLLIN, 0}};
      double next = -1;
      for (const Lingering& l : lingering) {
        p.push_back({l.fd.get(), POLLIN, 0});
        next = next < 0 ? l.deadline : std::min(next, l.deadline);
      }
      const int ms =
          next < 0
              ? -1
              : std::max(0, static_cast<int>((next - SystemClock::Get()->NowMono()) * 1000) + 1);
      int n = ::poll(p.data(), p.size(), ms);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (p[1].revents & POLLIN)) return;
      const double now = SystemClock::Get()->NowMono();
      std::vector<Lingering> keep;
      for (size_t i = 0; i < lingering.size(); ++i) {
        bool alive = lingering[i].deadline > now;
        if (alive && p[2 + i].revents != 0) alive = DrainSome(lingering[i].fd.get());
        if (alive) keep.push_back(std::move(lingering[i]));
      }
      lingering.swap(keep);
      if ((p[0].revents & POLLIN) == 0) continue;
      while (true) {
        Fd c = TcpAcceptNonBlocking(listener.get());
        if (!c.valid()) break;
        std::lock_guard<std::mutex> l(mu);
        ReapLocked();
        if (active.load() >= opts.max_connections ||
            static_cast<int>(workers.size()) >= 2 * opts.max_connections) {
          Log("refusing a connection: " + std::to_string(active.load()) +
              " transfers in flight (max_connections)");
          const int raw = c.get();
          Conn conn(std::move(c), stop_r.get(), 0.05, "client");
          Status st = SendStatus(
              conn, Unavailable("peer server busy: " + std::to_string(opts.max_connections) +
                                " transfers in flight; retry later"));
          if (st.ok() && lingering.size() < kMaxLingering) {
            ::shutdown(raw, SHUT_WR);
            lingering.push_back({conn.ReleaseFd(), SystemClock::Get()->NowMono() + kLingerS});
          }
          continue;
        }
        auto w = std::make_unique<Worker>();
        Worker* wp = w.get();
        active.fetch_add(1);
        try {
          wp->t = std::thread([this, wp, fd = std::move(c)]() mutable {
            {
              Slot slot(&active);
              Serve(std::move(fd), slot);
            }
            wp->done.store(true);
          });
        } catch (const std::system_error& e) {
          active.fetch_sub(1);
          Log(std::string("cannot start a connection thread: ") + e.what());
          continue;
        }
        workers.push_back(std::move(w));
      }
    }
  }

  void Serve(Fd fd, Slot& slot) {
    std::string peer = "client";
    {
      sockaddr_storage a{};
      socklen_t len = sizeof(a);
      if (::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
          a.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
        char ip[INET_ADDRSTRLEN] = {0};
        ::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        peer = "client " + std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
      }
    }
    Conn c(std::move(fd), stop_r.get(), opts.io_timeout_s, peer);
    Frame f;
    Status st = ReadFrame(c, {kPush, kFetch}, opts.max_snapshot_bytes, &f);
    if (!st.ok()) {
      Reject(c, slot, "request", st);
      return;
    }
    if (f.op == kPush) {
      ServePush(c, slot, f);
    } else {
      ServeFetch(c, slot, f);
    }
  }

  // Logs, replies with `st` if the connection still carries it, and closes
  // (bounded: a small reply, then at most kLingerS of draining; Stop aborts both).
  void Reject(Conn& c, Slot& slot, const std::string& what, const Status& st) {
    Log(c.peer() + ": " + what + " failed: " + st.ToString());
    slot.Free();
    if (SendStatus(c, st).ok()) c.LingerClose();
  }

  void ServePush(Conn& c, Slot& slot, const Frame& f) {
    WireSnapshot w;
    Status st = DecodeSnapshot(f.json, f.data_len, &w);
    if (!st.ok()) return Reject(c, slot, "PUSH", st);
    const std::string what =
        "PUSH rank " + std::to_string(w.rank) + " step " + std::to_string(w.step);
    // Background replication: this connection's thread (it serves this one request, then
    // ends) runs at nice 10, so a push takes longer on a busy node and the pusher's
    // rounds (PersistConfig::peer_push_share) space out by as much. Not SCHED_IDLE: the
    // thread holds the rank's replica lock while it receives, which the agent's loop
    // takes for its inventory, and a SCHED_IDLE holder starved by busy trainers stalled
    // that loop past its heartbeat (a node lost that was alive).
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    // Receive (the ready reply tells the client to send the data) into the replica
    // ring; the rank's lock keeps one writer per ring (and fetches out of a regrow).
    st = SendStatus(c, Status::Ok());
    if (!st.ok()) return Reject(c, slot, what, st);
    Status transfer;
    {
      std::lock_guard<std::mutex> l(RankMutex(w.rank));
      st = ReceiveReplica(c, w, &transfer);
    }
    if (!transfer.ok()) return Reject(c, slot, what, transfer);
    if (!st.ok()) {
      // The ring's own ABORTED (not the server stopping) must not read as a stop.
      st = st.Annotate("staging the replica into " + opts.replica_dir);
      return Reject(c, slot, what, st.code() == Code::kAborted ? Internal(st.message()) : st);
    }
    slot.Free();
    IgnoreError(
        SendStatus(c, Status::Ok()),
        "the replica is staged; a pusher that misses the OK retries and is told it is there");
  }

  // Pins `step` of `rank` in dir's ring; NOT_FOUND if absent.
  Result<std::unique_ptr<Snapshot>> PinFrom(const std::string& dir, int rank, long step,
                                            bool lock) {
    std::error_code ec;
    if (!std::filesystem::exists(RingPath(dir, rank), ec)) {
      return NotFound(RingPath(dir, rank) + " does not exist");
    }
    std::unique_lock<std::mutex> l;
    if (lock) l = std::unique_lock<std::mutex>(RankMutex(rank));
    BW_ASSIGN_OR_RETURN(auto reader, RingReader::Open(RingPath(dir, rank)));
    return reader->PinStep(step);
  }

  void ServeFetch(Conn& c, Slot& slot, const Frame& f) {
    int64_t rank = 0, step = 0;
    Status st = GetInt(f.json, "rank", 0, kMaxWorld - 1, &rank);
    if (st.ok()) st = GetInt(f.json, "step", 0, INT64_MAX, &step);
    if (!st.ok()) return Reject(c, slot, "FETCH", st);
    const std::string what = "FETCH rank " + std::to_string(rank) + " step " + std::to_string(step);
    Result<std::unique_ptr<Snapshot>> snap =
        PinFrom(opts.replica_dir, static_cast<int>(rank), static_cast<long>(step), true);
    if (!snap.ok() && snap.status().code() == Code::kNotFound && !opts.staging_dir.empty()) {
      snap = PinFrom(opts.staging_dir, static_cast<int>(rank), static_cast<long>(step), false);
    }
    if (!snap.ok()) {
      if (snap.status().code() == Code::kNotFound) {
        return Reject(c, slot, what,
                      NotFound("peer holds no snapshot of rank " + std::to_string(rank) + " step " +
                               std::to_string(step)));
      }
      return Reject(c, slot, what, snap.status());
    }
    const Snapshot& s = **snap;
    uint64_t total = 0;
    for (const TensorView& t : s.tensors()) total += t.meta.nbytes();
    st = SendFrame(c, kSnapshot, EncodeSnapshot(s), total);
    for (size_t i = 0; st.ok() && i < s.tensors().size(); ++i) {
      const TensorView& t = s.tensors()[i];
      st = c.WriteFull(t.data, t.meta.nbytes());
    }
    if (!st.ok()) Log(c.peer() + ": " + what + " failed: " + st.ToString());
  }
};

PeerServer::PeerServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PeerServer::~PeerServer() { Stop(); }

Result<std::unique_ptr<PeerServer>> PeerServer::Start(PeerServerOptions opts) {
  if (opts.replica_dir.empty()) return InvalidArgument("PeerServerOptions.replica_dir is empty");
  if (opts.slots < 2) return InvalidArgument("PeerServerOptions.slots must be >= 2");
  if (opts.max_connections < 1) {
    return InvalidArgument("PeerServerOptions.max_connections must be >= 1");
  }
  if (!(opts.io_timeout_s > 0))
    return InvalidArgument("PeerServerOptions.io_timeout_s must be > 0");
  std::error_code ec;
  std::filesystem::create_directories(opts.replica_dir, ec);
  if (ec) {
    return Internal("create replica dir " + opts.replica_dir + ": " + ec.message());
  }
  auto impl = std::make_unique<Impl>();
  BW_ASSIGN_OR_RETURN(impl->listener, TcpListen(opts.host, opts.port));
  BW_ASSIGN_OR_RETURN(impl->port, LocalPort(impl->listener.get()));
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe", errno);
  impl->stop_r.Reset(p[0]);
  impl->stop_w.Reset(p[1]);
  impl->opts = std::move(opts);
  Impl* ip = impl.get();
  impl->acceptor = std::thread([ip] { ip->AcceptLoop(); });
  return std::unique_ptr<PeerServer>(new PeerServer(std::move(impl)));
}

int PeerServer::port() const { return impl_->port; }

void PeerServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    Impl& s = *impl_;
    char b = 1;
    while (::write(s.stop_w.get(), &b, 1) < 0 && errno == EINTR) {
    }
    if (s.acceptor.joinable()) s.acceptor.join();
    s.listener.Reset();
    std::list<std::unique_ptr<Impl::Worker>> ws;
    {
      std::lock_guard<std::mutex> l(s.mu);
      ws.swap(s.workers);
    }
    for (auto& w : ws) w->t.join();
  });
}

std::map<int, std::vector<long>> PeerServer::ReplicaSteps() {
  std::map<int, std::vector<long>> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(impl_->opts.replica_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() < 11 || name.compare(0, 5, "rank-") != 0 ||
        name.compare(name.size() - 5, 5, ".ring") != 0) {
      continue;
    }
    const std::string digits = name.substr(5, name.size() - 10);
    if (digits.empty() || digits.size() > 8 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; })) {
      continue;
    }
    const int rank = std::stoi(digits);
    std::lock_guard<std::mutex> l(impl_->RankMutex(rank));
    auto reader = RingReader::Open(RingPath(impl_->opts.replica_dir, rank));
    if (!reader.ok()) continue;
    std::vector<long> steps = (*reader)->Steps();
    if (!steps.empty()) out[rank] = std::move(steps);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Client

Status PushSnapshot(const std::string& host, int port, const Snapshot& snap, double timeout_s) {
  if (snap.chunk_size() == 0) return InvalidArgument("snapshot chunk_size is 0");
  uint64_t total = 0;
  for (const TensorView& t : snap.tensors()) {
    if (t.meta.nbytes() > 0 && (t.chunk_hashes == nullptr || t.data == nullptr)) {
      return FailedPrecondition("tensor '" + t.meta.name +
                                "' has no chunk hashes: push only sealed snapshots "
                                "(RingReader::Pin with seal, or EnsureSealed first)");
    }
    total += t.meta.nbytes();
  }
  const std::string what = "push of rank " + std::to_string(snap.rank()) + " step " +
                           std::to_string(snap.step()) + " to " + host + ":" + std::to_string(port);
  BW_ASSIGN_OR_RETURN(Conn c, Connect(host, port, timeout_s));
  Status st = SendFrame(c, kPush, EncodeSnapshot(snap), total);
  Frame f;
  if (st.ok()) st = ReadFrame(c, {kStatus}, 0, &f);
  if (st.ok()) st = StatusFromJson(f.json);
  if (!st.ok()) return st.Annotate(what);
  for (const TensorView& t : snap.tensors()) {
    st = c.WriteFull(t.data, t.meta.nbytes());
    if (!st.ok()) break;
  }
  if (!st.ok() && st.code() != Code::kUnavailable) return st.Annotate(what);
  // The peer verifies each chunk as it lands and replies once the slot is published;
  // the reply may still wait for its last chunks' hashing: allow 1 s per 256 MiB on
  // top of the progress timeout. On a send error the server may still have explained
  // why.
  c.set_timeout(timeout_s + static_cast<double>(total) / (256.0 * (1 << 20)));
  Status reply = ReadFrame(c, {kStatus}, 0, &f);
  if (reply.ok()) reply = StatusFromJson(f.json);
  if (!st.ok() && reply.code() == Code::kUnavailable) return st.Annotate(what);
  return reply.Annotate(what);
}

Status FetchSnapshot(const std::string& host, int port, int rank, long step,
                     const std::string& staging_dir, int slots, double timeout_s,
                     uint64_t max_snapshot_bytes, int as_rank) {
  if (as_rank < 0) as_rank = rank;
  const std::string what =
      "fetch of rank " + std::to_string(rank) + " step " + std::to_string(step) +
      (as_rank != rank ? " as rank " + std::to_string(as_rank) : std::string()) + " from " + host +
      ":" + std::to_string(port);
  if (rank < 0 || step < 0) return InvalidArgument(what + ": rank and step must be >= 0");
  BW_ASSIGN_OR_RETURN(Conn c, Connect(host, port, timeout_s));
  Json req;
  req["rank"] = rank;
  req["step"] = step;
  Status st = SendFrame(c, kFetch, req, 0);
  Frame f;
  if (st.ok()) st = ReadFrame(c, {kStatus, kSnapshot}, max_snapshot_bytes, &f);
  if (st.ok() && f.op == kStatus) {
    st = StatusFromJson(f.json);
    if (st.ok()) st = InvalidArgument("peer replied OK without a snapshot");
  }
  if (!st.ok()) return st.Annotate(what);
  WireSnapshot w;
  st = DecodeSnapshot(f.json, f.data_len, &w);
  if (st.ok() && (w.rank != rank || w.step != step)) {
    st = InvalidArgument("peer sent rank " + std::to_string(w.rank) + " step " +
                         std::to_string(w.step));
  }
  if (!st.ok()) return st.Annotate(what);
  Status transfer;
  if (as_rank != rank) {
    // A donor's snapshot staged as another rank's: only a state every rank holds alike.
    for (const TensorMeta& t : w.metas) {
      if (!t.replicated && t.name != kObjectsBlobName) {
        return FailedPrecondition(what + ": tensor '" + t.name + "' is not replicated, so rank " +
                                  std::to_string(rank) + "'s copy is not rank " +
                                  std::to_string(as_rank) + "'s");
      }
    }
    if (as_rank >= w.world) {
      return InvalidArgument(what + ": rank " + std::to_string(as_rank) + " is not in world " +
                             std::to_string(w.world));
    }
  }
  Result<std::unique_ptr<Stager>> stager =
      Stager::Open(staging_dir, as_rank, w.world, slots, w.chunk_size);
  if (stager.ok()) {
    st = ReceiveIntoRing(c, w, stager->get(), /*drain_on_mismatch=*/false, "fetched snapshot",
                         &transfer);
  } else {
    st = stager.status();
  }
  if (!transfer.ok()) return transfer.Annotate(what);
  return st.Annotate(what + ": staging into " + staging_dir);
}

}  // namespace bulwark::ckpt
