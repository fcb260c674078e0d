// Tests of peer replication (peer.h): push/fetch round trips through a real
// PeerServer on 127.0.0.1, and raw clients speaking the wire protocol (peer.cc)
// to inject corruption, truncation, garbage and stalls. Staging dirs live on
// /dev/shm. No fixed sleeps: waits poll with a deadline.
#include "ckpt/peer.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "ckpt/staging.h"
#include "common/clock.h"
#include "common/net.h"
#include "gtest/gtest.h"

namespace bulwark::ckpt {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kChunk = 256;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/dev/shm/bwpeer-XXXXXX";
    char* p = ::mkdtemp(t);
    EXPECT_NE(p, nullptr);
    path = p != nullptr ? p : "/nonexistent";
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string Sub(const std::string& name) const { return path + "/" + name; }
};

struct TensorData {
  TensorMeta meta;
  std::vector<uint8_t> bytes;
};

TensorData MakeTensor(const std::string& name, DType dt, std::vector<int64_t> shape,
                      std::mt19937_64& rng) {
  TensorData t;
  t.meta.name = name;
  t.meta.dtype = dt;
  t.meta.shape = std::move(shape);
  t.bytes.resize(t.meta.nbytes());
  for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
  return t;
}

// Several dtypes, sizes not multiples of kChunk, one zero-size tensor, one sharded.
std::vector<TensorData> MakeTensors(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TensorData> ts;
  ts.push_back(MakeTensor("w", DType::kF32, {37, 11}, rng));  // 1628 bytes
  ts.push_back(MakeTensor("b", DType::kBF16, {5}, rng));
  ts.push_back(MakeTensor("idx", DType::kI64, {3, 3}, rng));
  ts.push_back(MakeTensor("empty", DType::kU8, {0}, rng));
  ts.push_back(MakeTensor("h", DType::kF64, {1000}, rng));  // 8000 bytes
  ts.push_back(MakeTensor("flag", DType::kBool, {7}, rng));
  TensorData s = MakeTensor("shard", DType::kI32, {4, 6}, rng);
  s.meta.global_shape = {8, 6};
  s.meta.offsets = {4, 0};
  ts.push_back(std::move(s));
  return ts;
}

std::vector<TensorView> Views(const std::vector<TensorData>& ts) {
  std::vector<TensorView> v;
  for (const TensorData& t : ts) {
    TensorView x;
    x.meta = t.meta;
    x.data = t.bytes.empty() ? nullptr : t.bytes.data();
    v.push_back(std::move(x));
  }
  return v;
}

// A sealed snapshot pinned in a trainer-side staging ring.
struct Sealed {
  std::unique_ptr<RingReader> reader;
  std::unique_ptr<Snapshot> snap;
};

Sealed StageSealed(const std::string& dir, int rank, int world, long step,
                   const std::vector<TensorData>& ts, uint64_t chunk = kChunk) {
  Sealed s;
  auto st = Stager::Open(dir, rank, world, 2, chunk);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (!st.ok()) return s;
  auto r = (*st)->Stage(step, Views(ts));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return s;
  auto reader = RingReader::Open(RingPath(dir, rank));
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  if (!reader.ok()) return s;
  s.reader = std::move(reader).value();
  auto snap = s.reader->Pin(r->slot, r->seq);
  EXPECT_TRUE(snap.ok()) << snap.status().ToString();
  if (snap.ok()) s.snap = std::move(snap).value();
  return s;
}

// Stages `step` of `rank` in a fresh trainer dir and pushes it.
Status StageAndPush(int port, int rank, int world, long step, const std::vector<TensorData>& ts) {
  TempDir src;
  Sealed s = StageSealed(src.path, rank, world, step, ts);
  if (!s.snap) return Internal("staging failed");
  return PushSnapshot("127.0.0.1", port, *s.snap, 10);
}

// The steps staged in rank's ring in `dir` (none when there is no ring).
std::vector<long> StagedSteps(const std::string& dir, int rank) {
  if (!fs::exists(RingPath(dir, rank))) return {};
  auto reader = RingReader::Open(RingPath(dir, rank));
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  return reader.ok() ? (*reader)->Steps() : std::vector<long>{};
}

// `dir` holds sealed `step` of `rank` bit-identical to `ts`, with the same metas.
void ExpectStaged(const std::string& dir, int rank, long step, const std::vector<TensorData>& ts,
                  uint64_t chunk = kChunk) {
  auto reader = RingReader::Open(RingPath(dir, rank));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto snap = (*reader)->PinStep(step);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  const Snapshot& s = **snap;
  EXPECT_EQ(s.rank(), rank);
  EXPECT_EQ(s.step(), step);
  EXPECT_EQ(s.chunk_size(), chunk);
  ASSERT_EQ(s.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorView& v = s.tensors()[i];
    SCOPED_TRACE(ts[i].meta.name);
    EXPECT_EQ(v.meta.name, ts[i].meta.name);
    EXPECT_EQ(v.meta.dtype, ts[i].meta.dtype);
    EXPECT_EQ(v.meta.shape, ts[i].meta.shape);
    EXPECT_EQ(v.meta.GlobalShape(), ts[i].meta.GlobalShape());
    EXPECT_EQ(v.meta.Offsets(), ts[i].meta.Offsets());
    std::vector<uint8_t> got(v.meta.nbytes());
    ASSERT_TRUE(CopyVerified(v, s.chunk_size(), got.data()).ok());
    EXPECT_EQ(got, ts[i].bytes);
  }
}

// Collects the server's log lines; WaitFor polls with a deadline.
struct LogSink {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> Fn() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> g(mu);
      lines.push_back(l);
      cv.notify_all();
    };
  }
  bool WaitFor(const std::string& needle, size_t min_count = 1, double timeout_s = 10) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, std::chrono::duration<double>(timeout_s), [&] {
      size_t n = 0;
      for (const auto& l : lines) n += l.find(needle) != std::string::npos;
      return n >= min_count;
    });
  }
};

struct Server {
  TempDir dir;
  LogSink log;
  std::unique_ptr<PeerServer> server;
  explicit Server(PeerServerOptions o = {}) {
    o.replica_dir = dir.Sub("replica");
    o.log = log.Fn();
    auto s = PeerServer::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(s).value();
  }
  int port() const { return server->port(); }
  std::string replica() const { return dir.Sub("replica"); }
};

// ---- raw wire client -------------------------------------------------------

std::string FrameBytes(uint16_t op, const std::string& json, uint64_t data_len,
                       const char* magic = "BWPR", uint16_t version = 1, int64_t json_len = -1) {
  std::string f(24, '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(f.data());
  std::memcpy(p, magic, 4);
  p[4] = static_cast<uint8_t>(version);
  p[5] = static_cast<uint8_t>(version >> 8);
  p[6] = static_cast<uint8_t>(op);
  p[7] = static_cast<uint8_t>(op >> 8);
  const uint32_t jl =
      json_len >= 0 ? static_cast<uint32_t>(json_len) : static_cast<uint32_t>(json.size());
  for (int i = 0; i < 4; ++i) p[8 + i] = static_cast<uint8_t>(jl >> (8 * i));
  internal::Put64(p + 16, data_len);
  return f + json;
}

Json SnapshotJson(int rank, int world, long step, const std::vector<TensorData>& ts) {
  Json j;
  j["rank"] = rank;
  j["world"] = world;
  j["step"] = step;
  j["chunk_size"] = kChunk;
  Json arr = Json::array();
  for (const TensorData& t : ts) {
    Json e;
    internal::MetaToJson(t.meta, &e);
    Json hs = Json::array();
    for (uint64_t off = 0; off < t.bytes.size(); off += kChunk) {
      hs.push_back(internal::Hex64(
          ChunkHash(t.bytes.data() + off, std::min<uint64_t>(kChunk, t.bytes.size() - off))));
    }
    e["hashes"] = std::move(hs);
    arr.push_back(std::move(e));
  }
  j["tensors"] = std::move(arr);
  return j;
}

std::string Concat(const std::vector<TensorData>& ts) {
  std::string d;
  for (const TensorData& t : ts) d.append(t.bytes.begin(), t.bytes.end());
  return d;
}

struct RawClient {
  Fd fd;
  explicit RawClient(Fd f) : fd(std::move(f)) {}
  explicit RawClient(int port) {
    auto c = TcpConnect("127.0.0.1", port, 5);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) fd = std::move(c).value();
  }
  bool Send(const std::string& b) {
    size_t off = 0;
    const double deadline = SystemClock::Get()->NowMono() + 10;
    while (off < b.size() && SystemClock::Get()->NowMono() < deadline) {
      ssize_t n = ::send(fd.get(), b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd p{fd.get(), POLLOUT, 0};
        ::poll(&p, 1, 100);
      } else {
        return false;
      }
    }
    return off == b.size();
  }
  // Reads n bytes; false on EOF, error or timeout.
  bool Read(void* dst, size_t n, double timeout_s = 10) {
    size_t off = 0;
    const double deadline = SystemClock::Get()->NowMono() + timeout_s;
    while (off < n && SystemClock::Get()->NowMono() < deadline) {
      ssize_t r = ::recv(fd.get(), static_cast<char*>(dst) + off, n - off, 0);
      if (r > 0) {
        off += static_cast<size_t>(r);
      } else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd p{fd.get(), POLLIN, 0};
        ::poll(&p, 1, 100);
      } else {
        return false;
      }
    }
    return off == n;
  }
  // Reads a STATUS frame: {code, message}; code -1 if none arrived.
  std::pair<int, std::string> ReadStatus(double timeout_s = 10) {
    uint8_t h[24];
    if (!Read(h, 24, timeout_s)) return {-1, "no reply"};
    if (std::memcmp(h, "BWPR", 4) != 0 || h[6] != 3) return {-1, "not a STATUS frame"};
    uint32_t jl = 0;
    for (int i = 0; i < 4; ++i) jl |= static_cast<uint32_t>(h[8 + i]) << (8 * i);
    std::string body(jl, '\0');
    if (!Read(body.data(), jl, timeout_s)) return {-1, "truncated reply"};
    Json j = Json::parse(body);
    return {j["code"].get<int>(), j["message"].get<std::string>()};
  }
};

// ---- round trips -----------------------------------------------------------

TEST(PeerTest, PushThenFetchRoundTripIsBitIdentical) {
  Server srv;
  auto ts = MakeTensors(1);
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 5, ts).ok());
  ExpectStaged(srv.replica(), 0, 5, ts);

  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", srv.port(), 0, 5, node.path, 2, 10);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectStaged(node.path, 0, 5, ts);
  // The replacement trainer restores through the SDK path.
  auto stager = Stager::Open(node.path, 0, 1, 2, kChunk);
  ASSERT_TRUE(stager.ok());
  EXPECT_EQ((*stager)->SealedSteps(), std::vector<long>{5});
  auto blobs = (*stager)->RestoreAll(5);
  ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
  ASSERT_EQ(blobs->size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ((*blobs)[i].data, ts[i].bytes);
}

TEST(PeerTest, LargeSnapshotCrossesPieceBoundaries) {
  // Tensors larger than the 4 MiB wire piece, chunks of 1 MiB + 3.
  const uint64_t chunk = (1 << 20) + 3;
  std::mt19937_64 rng(11);
  std::vector<TensorData> ts;
  ts.push_back(MakeTensor("big", DType::kF32, {(9 << 20) / 4 + 5}, rng));
  ts.push_back(MakeTensor("small", DType::kU8, {3}, rng));
  ts.push_back(MakeTensor("big2", DType::kBF16, {3 << 20}, rng));
  Server srv;
  {
    TempDir src;
    Sealed s = StageSealed(src.path, 1, 2, 3, ts, chunk);
    ASSERT_TRUE(s.snap);
    Status st = PushSnapshot("127.0.0.1", srv.port(), *s.snap, 30);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", srv.port(), 1, 3, node.path, 2, 30);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectStaged(node.path, 1, 3, ts, chunk);
}

TEST(PeerTest, ConcurrentPushesOfSeveralRanks) {
  Server srv;
  constexpr int kRanks = 3;
  std::vector<std::thread> threads;
  std::vector<Status> results(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (long step = 1; step <= 4 && results[r].ok(); ++step) {
        // UNAVAILABLE: server busy, or a concurrent fetch pins the slot to reuse.
        const double deadline = SystemClock::Get()->NowMono() + 10;
        do {
          results[r] = StageAndPush(srv.port(), r, kRanks, step, MakeTensors(r * 10 + step));
        } while (results[r].code() == Code::kUnavailable &&
                 SystemClock::Get()->NowMono() < deadline);
      }
    });
  }
  // ReplicaSteps and fetches run concurrently with the pushes.
  TempDir node;
  for (int i = 0; i < 20; ++i) {
    auto steps = srv.server->ReplicaSteps();
    for (const auto& [rank, held] : steps) {
      EXPECT_LE(held.size(), 2u);
      Status st = FetchSnapshot("127.0.0.1", srv.port(), rank, held.back(), node.path, 2, 10);
      EXPECT_TRUE(st.ok() || st.code() == Code::kNotFound || st.code() == Code::kUnavailable)
          << st.ToString();
    }
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].ToString();
  }
  std::map<int, std::vector<long>> want;
  for (int r = 0; r < kRanks; ++r) want[r] = {3, 4};
  EXPECT_EQ(srv.server->ReplicaSteps(), want);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(FetchSnapshot("127.0.0.1", srv.port(), r, 4, node.path, 2, 10).ok());
    ExpectStaged(node.path, r, 4, MakeTensors(r * 10 + 4));
  }
}

TEST(PeerTest, ReplicaRingKeepsNewestSlotsSteps) {
  PeerServerOptions o;
  o.slots = 2;
  Server srv(o);
  for (long step : {10, 20, 30}) {
    ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, step, MakeTensors(step)).ok());
  }
  EXPECT_EQ(srv.server->ReplicaSteps(), (std::map<int, std::vector<long>>{{0, {20, 30}}}));
  TempDir node;
  EXPECT_EQ(FetchSnapshot("127.0.0.1", srv.port(), 0, 10, node.path, 2, 10).code(),
            Code::kNotFound);
  ASSERT_TRUE(FetchSnapshot("127.0.0.1", srv.port(), 0, 30, node.path, 2, 10).ok());
  ExpectStaged(node.path, 0, 30, MakeTensors(30));
}

TEST(PeerTest, TwoRanksPushedToOneServer) {
  Server srv;
  auto t0 = MakeTensors(100), t1 = MakeTensors(101);
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 2, 7, t0).ok());
  ASSERT_TRUE(StageAndPush(srv.port(), 1, 2, 7, t1).ok());
  ASSERT_TRUE(StageAndPush(srv.port(), 1, 2, 8, t1).ok());
  EXPECT_EQ(srv.server->ReplicaSteps(), (std::map<int, std::vector<long>>{{0, {7}}, {1, {7, 8}}}));
  TempDir node;
  ASSERT_TRUE(FetchSnapshot("127.0.0.1", srv.port(), 0, 7, node.path, 2, 10).ok());
  ASSERT_TRUE(FetchSnapshot("127.0.0.1", srv.port(), 1, 7, node.path, 2, 10).ok());
  ExpectStaged(node.path, 0, 7, t0);
  ExpectStaged(node.path, 1, 7, t1);
}

TEST(PeerTest, FetchOfUnheldStepIsNotFound) {
  Server srv;
  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", srv.port(), 0, 1, node.path, 2, 10);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 1, MakeTensors(1)).ok());
  st = FetchSnapshot("127.0.0.1", srv.port(), 0, 2, node.path, 2, 10);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  st = FetchSnapshot("127.0.0.1", srv.port(), 3, 1, node.path, 2, 10);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_TRUE(StagedSteps(node.path, 0).empty());
}

TEST(PeerTest, FetchServesFromOwnStagingDir) {
  TempDir own;
  auto ts = MakeTensors(9);
  { Sealed s = StageSealed(own.path, 3, 4, 42, ts); }
  PeerServerOptions o;
  o.staging_dir = own.path;
  Server srv(o);
  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", srv.port(), 3, 42, node.path, 3, 10);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectStaged(node.path, 3, 42, ts);
  EXPECT_TRUE(srv.server->ReplicaSteps().empty());
}

TEST(PeerTest, ADonorsReplicatedSnapshotIsStagedAsAnotherRank) {
  // Rank 3's step 42 (every tensor replicated but the objects blob, as
  // bulwark.checkpoint.save(..., replicated=True) stages a data-parallel state) restores
  // rank 1, whose own copy of that step is gone.
  std::mt19937_64 rng(5);
  std::vector<TensorData> ts;
  ts.push_back(MakeTensor("model.w", DType::kF32, {37, 11}, rng));
  ts.push_back(MakeTensor("optim.m", DType::kF32, {300}, rng));
  ts.push_back(MakeTensor(kObjectsBlobName, DType::kU8, {77}, rng));
  ts[0].meta.replicated = ts[1].meta.replicated = true;
  TempDir own;
  { Sealed s = StageSealed(own.path, 3, 4, 42, ts); }
  PeerServerOptions o;
  o.staging_dir = own.path;
  Server srv(o);
  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", srv.port(), 3, 42, node.path, 2, 10,
                            kPeerDefaultMaxSnapshotBytes, /*as_rank=*/1);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectStaged(node.path, 1, 42, ts);
  EXPECT_TRUE(StagedSteps(node.path, 3).empty());

  // A rank-specific tensor: rank 3's copy is not rank 0's; nothing is staged.
  ts[1].meta.replicated = false;
  TempDir own2;
  { Sealed s = StageSealed(own2.path, 3, 4, 43, ts); }
  PeerServerOptions o2;
  o2.staging_dir = own2.path;
  Server srv2(o2);
  st = FetchSnapshot("127.0.0.1", srv2.port(), 3, 43, node.path, 2, 10,
                     kPeerDefaultMaxSnapshotBytes, /*as_rank=*/0);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("'optim.m' is not replicated"), std::string::npos) << st.ToString();
  EXPECT_TRUE(StagedSteps(node.path, 0).empty());
  // A rank outside the snapshot's world.
  st = FetchSnapshot("127.0.0.1", srv.port(), 3, 42, node.path, 2, 10, kPeerDefaultMaxSnapshotBytes,
                     /*as_rank=*/4);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
}

// ---- integrity -------------------------------------------------------------

TEST(PeerTest, CorruptedByteInPushIsDataLossAndNothingStaged) {
  Server srv;
  auto ts = MakeTensors(3);
  RawClient c(srv.port());
  ASSERT_TRUE(c.Send(FrameBytes(1, SnapshotJson(0, 1, 4, ts).dump(), Concat(ts).size())));
  ASSERT_EQ(c.ReadStatus().first, 0);
  std::string data = Concat(ts);
  // Byte 300 of tensor "h" (index 4): its chunk 1.
  size_t h_off = 0;
  for (int i = 0; i < 4; ++i) h_off += ts[i].bytes.size();
  data[h_off + 300] ^= 0x40;
  ASSERT_TRUE(c.Send(data));
  auto [code, msg] = c.ReadStatus();
  EXPECT_EQ(code, static_cast<int>(Code::kDataLoss)) << msg;
  EXPECT_NE(msg.find("tensor 'h' chunk 1"), std::string::npos) << msg;
  EXPECT_TRUE(srv.log.WaitFor("DATA_LOSS"));
  EXPECT_TRUE(srv.server->ReplicaSteps().empty());
  EXPECT_TRUE(StagedSteps(srv.replica(), 0).empty());
}

// A push that fails (a corrupted chunk, a pusher gone mid-transfer), received straight
// into the replica ring, leaves the newest replica before it readable and bit-identical:
// the slot it claimed (the oldest's) is emptied, the newest was never a candidate.
TEST(PeerTest, AFailedPushLeavesTheReplicasBeforeIt) {
  PeerServerOptions o;
  o.slots = 2;
  Server srv(o);
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 10, MakeTensors(10)).ok());
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 20, MakeTensors(20)).ok());
  for (bool corrupt : {true, false}) {
    auto ts = MakeTensors(30);
    RawClient c(srv.port());
    ASSERT_TRUE(c.Send(FrameBytes(1, SnapshotJson(0, 1, 30, ts).dump(), Concat(ts).size())));
    ASSERT_EQ(c.ReadStatus().first, 0);
    std::string data = Concat(ts);
    if (corrupt) {
      data[5] ^= 1;
      ASSERT_TRUE(c.Send(data));
      EXPECT_EQ(c.ReadStatus().first, static_cast<int>(Code::kDataLoss));
    } else {
      ASSERT_TRUE(c.Send(data.substr(0, data.size() / 2)));  // then the pusher dies
    }
  }
  ASSERT_TRUE(srv.log.WaitFor("PUSH rank 0 step 30 failed", 2));
  // Step 10's slot was the one claimed (the oldest); step 20, the newest, is whole.
  EXPECT_EQ(srv.server->ReplicaSteps(), (std::map<int, std::vector<long>>{{0, {20}}}));
  TempDir node;
  ASSERT_TRUE(FetchSnapshot("127.0.0.1", srv.port(), 0, 20, node.path, 2, 10).ok());
  ExpectStaged(node.path, 0, 20, MakeTensors(20));
  EXPECT_EQ(StagedSteps(srv.replica(), 0), (std::vector<long>{20}));
}

// The server keeps a rank's replica ring open between pushes; a ring file removed
// meanwhile (the replica directory cleaned) is recreated by the next push, not written
// unseen into the removed file.
TEST(PeerTest, AReplicaRingRemovedBetweenPushesIsRecreated) {
  Server srv;
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 10, MakeTensors(10)).ok());
  ASSERT_TRUE(fs::remove(RingPath(srv.replica(), 0)));
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 20, MakeTensors(20)).ok());
  EXPECT_EQ(srv.server->ReplicaSteps(), (std::map<int, std::vector<long>>{{0, {20}}}));
  TempDir node;
  ASSERT_TRUE(FetchSnapshot("127.0.0.1", srv.port(), 0, 20, node.path, 2, 10).ok());
  ExpectStaged(node.path, 0, 20, MakeTensors(20));
}

// A fake peer answering FETCH with `data` under the given header.
void FakeFetchServer(Fd& listener, const std::string& header, const std::string& data) {
  Fd c;
  const double deadline = SystemClock::Get()->NowMono() + 10;
  while (!c.valid() && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({listener.get()}, 0.1);
    c = TcpAcceptNonBlocking(listener.get());
  }
  if (!c.valid()) return;
  RawClient rc(std::move(c));
  uint8_t h[24];
  if (!rc.Read(h, 24)) return;
  uint32_t jl = h[8] | (h[9] << 8);
  std::string body(jl, '\0');
  if (!rc.Read(body.data(), jl)) return;
  rc.Send(FrameBytes(4, header, data.size()) + data);
  char b;
  rc.Read(&b, 1, 5);  // until the client closes
}

TEST(PeerTest, CorruptedFetchIsDataLossAndNothingStaged) {
  auto l = TcpListen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  const int port = *LocalPort(l->get());
  auto ts = MakeTensors(5);
  std::string data = Concat(ts);
  data[10] ^= 1;  // tensor "w" chunk 0
  std::thread srv([&] { FakeFetchServer(*l, SnapshotJson(0, 1, 6, ts).dump(), data); });
  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", port, 0, 6, node.path, 2, 10);
  srv.join();
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("tensor 'w' chunk 0"), std::string::npos) << st.ToString();
  EXPECT_TRUE(StagedSteps(node.path, 0).empty());
}

TEST(PeerTest, PushOfUnsealedSnapshotIsFailedPrecondition) {
  struct Unsealed : Snapshot {
    std::vector<TensorView> v;
    long step() const override { return 1; }
    int rank() const override { return 0; }
    int world() const override { return 1; }
    uint64_t chunk_size() const override { return kChunk; }
    const std::vector<TensorView>& tensors() const override { return v; }
    Status EnsureSealed(double*) override { return Status::Ok(); }
    uint64_t bytes() const override { return 0; }
  } snap;
  auto ts = MakeTensors(1);
  snap.v = Views(ts);  // no chunk_hashes
  EXPECT_EQ(PushSnapshot("127.0.0.1", 1, snap, 1).code(), Code::kFailedPrecondition);
}

// ---- malformed input -------------------------------------------------------

TEST(PeerTest, TruncatedStreamAndDisconnectThenServerStillServes) {
  Server srv;
  auto ts = MakeTensors(2);
  {
    RawClient c(srv.port());
    ASSERT_TRUE(c.Send(FrameBytes(1, SnapshotJson(0, 1, 1, ts).dump(), Concat(ts).size())));
    ASSERT_EQ(c.ReadStatus().first, 0);
    std::string data = Concat(ts);
    ASSERT_TRUE(c.Send(data.substr(0, data.size() / 2)));
  }  // closes mid-transfer
  EXPECT_TRUE(srv.log.WaitFor("closed the connection"));
  {
    RawClient c(srv.port());
    ASSERT_TRUE(c.Send(FrameBytes(1, "", 0).substr(0, 10)));
  }  // closes mid-header
  EXPECT_TRUE(srv.log.WaitFor("closed the connection", 2));
  { RawClient c(srv.port()); }  // connects and leaves
  EXPECT_TRUE(srv.log.WaitFor("closed the connection", 3));
  EXPECT_TRUE(srv.server->ReplicaSteps().empty());
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 2, ts).ok());
  EXPECT_EQ(srv.server->ReplicaSteps(), (std::map<int, std::vector<long>>{{0, {2}}}));
}

// Sends `bytes` as a request; returns the STATUS reply.
std::pair<int, std::string> Exchange(int port, const std::string& bytes) {
  RawClient c(port);
  EXPECT_TRUE(c.Send(bytes));
  return c.ReadStatus();
}

TEST(PeerTest, MalformedRequestsGetErrorReplies) {
  Server srv;
  auto ts = MakeTensors(4);
  const std::string data = Concat(ts);
  const std::string good = SnapshotJson(0, 1, 1, ts).dump();
  const int inv = static_cast<int>(Code::kInvalidArgument);
  std::mt19937_64 rng(7);
  std::string garbage(100, '\0');
  for (auto& ch : garbage) ch = static_cast<char>(rng());
  garbage[0] = 'x';

  struct Case {
    std::string name, bytes, expect;
  };
  Json neg = SnapshotJson(0, 1, 1, ts);
  neg["tensors"][0]["shape"] = Json::array({-3, 11});
  Json huge_off = SnapshotJson(0, 1, 1, ts);
  huge_off["tensors"][0]["offsets"] = Json::array({INT64_MAX, 0});
  Json bad_rank = SnapshotJson(0, 1, 1, ts);
  bad_rank["rank"] = 5;
  Json few_hashes = SnapshotJson(0, 1, 1, ts);
  few_hashes["tensors"][0]["hashes"].erase(0);
  Json bad_hash = SnapshotJson(0, 1, 1, ts);
  bad_hash["tensors"][0]["hashes"][0] = "zz";
  Json dup = SnapshotJson(0, 1, 1, ts);
  dup["tensors"][1]["name"] = "w";
  Json bad_dtype = SnapshotJson(0, 1, 1, ts);
  bad_dtype["tensors"][0]["dtype"] = "complex";
  std::vector<Case> cases = {
      {"garbage", garbage, "bad magic"},
      {"wrong magic", FrameBytes(1, good, data.size(), "BWPX"), "bad magic"},
      {"wrong version", FrameBytes(1, good, data.size(), "BWPR", 9), "version 9"},
      {"unknown op", FrameBytes(77, good, 0), "unexpected op"},
      {"bad json", FrameBytes(1, "{not json", data.size()), "not a JSON object"},
      {"json array", FrameBytes(1, "[1,2]", data.size()), "not a JSON object"},
      {"negative dim", FrameBytes(1, neg.dump(), data.size()), "dimension"},
      {"huge offsets", FrameBytes(1, huge_off.dump(), data.size()), "\"offsets\" holds"},
      {"rank >= world", FrameBytes(1, bad_rank.dump(), data.size()), "\"rank\" = 5 out of range"},
      {"sizes do not add up", FrameBytes(1, good, data.size() + 1), "add up to"},
      {"tensor too big", FrameBytes(1, good, data.size() - 1), "does not fit"},
      {"missing hash", FrameBytes(1, few_hashes.dump(), data.size()), "chunk hashes"},
      {"bad hash", FrameBytes(1, bad_hash.dump(), data.size()), "16 hex digits"},
      {"duplicate name", FrameBytes(1, dup.dump(), data.size()), "appears twice"},
      {"bad dtype", FrameBytes(1, bad_dtype.dump(), data.size()), "complex"},
      {"fetch with data", FrameBytes(2, "{\"rank\":0,\"step\":1}", 5), "must not carry data"},
      {"fetch bad rank", FrameBytes(2, "{\"rank\":-1,\"step\":1}", 0), "\"rank\""},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto [code, msg] = Exchange(srv.port(), c.bytes);
    EXPECT_EQ(code, inv) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_TRUE(srv.log.WaitFor("INVALID_ARGUMENT", ++n));
  }
  EXPECT_TRUE(srv.server->ReplicaSteps().empty());
  // Still serving.
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 1, ts).ok());
}

TEST(PeerTest, OversizedDeclaredLengthsRejectedBeforeAllocating) {
  PeerServerOptions o;
  o.max_snapshot_bytes = 1 << 20;
  Server srv(o);
  // The replies arrive without any data sent: the bounds are checked on the header.
  auto [c1, m1] = Exchange(srv.port(), FrameBytes(1, "", 1ull << 62));
  EXPECT_EQ(c1, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(m1.find("exceeds max_snapshot_bytes"), std::string::npos) << m1;
  auto [c2, m2] = Exchange(srv.port(), FrameBytes(1, "", 0, "BWPR", 1, 0xffffffffll));
  EXPECT_EQ(c2, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(m2.find("exceeds the limit of 64 MiB"), std::string::npos) << m2;
  auto [c3, m3] = Exchange(srv.port(), FrameBytes(1, "", (1 << 20) + 1));
  EXPECT_EQ(c3, static_cast<int>(Code::kInvalidArgument));
  // A tensor whose shape claims 2^104 bytes inside a small declared length.
  Json j;
  j["rank"] = 0;
  j["world"] = 1;
  j["step"] = 1;
  j["chunk_size"] = 4096;
  Json t;
  TensorMeta m;
  m.name = "big";
  m.dtype = DType::kF64;
  m.shape = {1ll << 50, 1ll << 51};
  internal::MetaToJson(m, &t);
  t["hashes"] = Json::array();
  j["tensors"] = Json::array({t});
  auto [c4, m4] = Exchange(srv.port(), FrameBytes(1, j.dump(), 1000));
  EXPECT_EQ(c4, static_cast<int>(Code::kInvalidArgument));
  // Rejected by TensorMeta::Validate's size bound before any allocation.
  EXPECT_NE(m4.find("larger than 2^62 bytes"), std::string::npos) << m4;
  // The client side applies its bound too.
  auto ts = MakeTensors(1);
  ASSERT_TRUE(StageAndPush(srv.port(), 0, 1, 1, ts).ok());
  TempDir node;
  EXPECT_EQ(FetchSnapshot("127.0.0.1", srv.port(), 0, 1, node.path, 2, 10, 100).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(StagedSteps(node.path, 0).empty());
}

// ---- stalls, shutdown, unreachable peers -----------------------------------

TEST(PeerTest, DestructorReturnsPromptlyWhileClientsStall) {
  PeerServerOptions o;
  o.io_timeout_s = 60;
  auto srv = std::make_unique<Server>(o);
  auto ts = MakeTensors(6);
  RawClient mid(srv->port());
  ASSERT_TRUE(mid.Send(FrameBytes(1, SnapshotJson(0, 1, 1, ts).dump(), Concat(ts).size())));
  ASSERT_EQ(mid.ReadStatus().first, 0);
  ASSERT_TRUE(mid.Send(Concat(ts).substr(0, 1000)));  // then stalls mid-transfer
  RawClient idle(srv->port());                        // connects, sends nothing
  RawClient half(srv->port());
  ASSERT_TRUE(half.Send(FrameBytes(1, "", 0).substr(0, 5)));  // stalls mid-header
  const std::string replica = srv->replica();
  const int port = srv->port();
  const double t0 = SystemClock::Get()->NowMono();
  srv->server.reset();
  EXPECT_LT(SystemClock::Get()->NowMono() - t0, 5.0);
  // The stalled push was aborted: told so (or cut off), nothing staged.
  auto [code, msg] = mid.ReadStatus(5);
  EXPECT_TRUE(code == static_cast<int>(Code::kAborted) || code == -1) << code << " " << msg;
  EXPECT_TRUE(StagedSteps(replica, 0).empty());
  // The port is closed.
  TempDir node;
  EXPECT_EQ(FetchSnapshot("127.0.0.1", port, 0, 1, node.path, 2, 2).code(), Code::kUnavailable);
}

TEST(PeerTest, FetchFromGoneServerIsUnavailableWithinTimeout) {
  int port = 0;
  {
    Server srv;
    port = srv.port();
  }
  TempDir node;
  const double t0 = SystemClock::Get()->NowMono();
  Status st = FetchSnapshot("127.0.0.1", port, 0, 1, node.path, 2, 2);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_LT(SystemClock::Get()->NowMono() - t0, 3.0);
  auto ts = MakeTensors(1);
  TempDir src;
  Sealed s = StageSealed(src.path, 0, 1, 1, ts);
  st = PushSnapshot("127.0.0.1", port, *s.snap, 2);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
}

TEST(PeerTest, PushToStalledPeerTimesOut) {
  // A listener that never accepts: the connection completes, nobody replies.
  auto l = TcpListen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  const int port = *LocalPort(l->get());
  auto ts = MakeTensors(1);
  TempDir src;
  Sealed s = StageSealed(src.path, 0, 1, 1, ts);
  const double t0 = SystemClock::Get()->NowMono();
  Status st = PushSnapshot("127.0.0.1", port, *s.snap, 0.5);
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_LT(SystemClock::Get()->NowMono() - t0, 3.0);
}

TEST(PeerTest, BusyServerRefusesBeyondMaxConnections) {
  PeerServerOptions o;
  o.max_connections = 1;
  Server srv(o);
  auto ts = MakeTensors(8);
  RawClient mid(srv.port());
  ASSERT_TRUE(mid.Send(FrameBytes(1, SnapshotJson(0, 1, 1, ts).dump(), Concat(ts).size())));
  ASSERT_EQ(mid.ReadStatus().first, 0);  // its worker is now busy
  TempDir node;
  Status st = FetchSnapshot("127.0.0.1", srv.port(), 0, 1, node.path, 2, 5);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("busy"), std::string::npos) << st.ToString();
  // Finishing the push frees the slot.
  ASSERT_TRUE(mid.Send(Concat(ts)));
  EXPECT_EQ(mid.ReadStatus().first, 0);
  const double deadline = SystemClock::Get()->NowMono() + 10;
  while (SystemClock::Get()->NowMono() < deadline) {
    st = FetchSnapshot("127.0.0.1", srv.port(), 0, 1, node.path, 2, 5);
    if (st.code() != Code::kUnavailable) break;
    PollReadable({}, 0.01);
  }
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectStaged(node.path, 0, 1, ts);
}

}  // namespace
}  // namespace bulwark::ckpt
