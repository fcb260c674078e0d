// Tests of the node agent's background persister (persister.h): a staged snapshot
// is persisted to the disk and shared tiers, the ring slot ends up sealed with the
// hashes the shard writer computed while writing (one pass), seal-only requests,
// incremental persists, and the reasons reported when a snapshot cannot be
// persisted. Deterministic: waits are Drain() with a deadline.
#include "ckpt/persister.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "ckpt/peer.h"
#include "ckpt/staging.h"
#include "ckpt/test_util.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bulwark::ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ::bulwark::ckpt::test_util;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;

struct Tensor {
  std::string name;
  std::vector<float> data;
};

std::vector<TensorView> Views(const std::vector<Tensor>& ts) {
  std::vector<TensorView> out;
  for (const Tensor& t : ts) {
    TensorView v;
    v.meta.name = t.name;
    v.meta.dtype = DType::kF32;
    v.meta.shape = {static_cast<int64_t>(t.data.size())};
    v.data = t.data.data();
    out.push_back(v);
  }
  return out;
}

class PersisterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    staging_ = MakeTempDir(fs::is_directory("/dev/shm") ? "/dev/shm" : "/tmp", "bw_persist_stg");
    disk_ = MakeTempDir("/tmp", "bw_persist_disk");
    ASSERT_FALSE(staging_.empty());
    ASSERT_FALSE(disk_.empty());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    // 3 tensors; "b" spans several 64 KiB chunks with a short last one.
    tensors_ = {{"a", std::vector<float>(1000)},
                {"b", std::vector<float>(70000)},
                {"c", std::vector<float>(16384)}};
    for (Tensor& t : tensors_) {
      for (float& f : t.data) f = u(rng);
    }
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(staging_, ec);
    fs::remove_all(disk_, ec);
  }

  std::unique_ptr<Persister> Make(const std::string& shared = "",
                                  const std::function<void(PersistConfig*)>& tweak = nullptr) {
    PersistConfig c;
    c.staging_dir = staging_;
    c.disk_dir = disk_;
    c.shared_dir = shared;
    c.world = 1;
    c.low_priority = false;
    if (tweak) tweak(&c);
    return std::make_unique<Persister>(c, Env::Default(), [this](const PersistEvent& e) {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(e);
    });
  }
  std::vector<PersistEvent> Events() {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  // A persister of `world` ranks whose object uploads block until Release(), so what
  // is staged after the first upload began queues up behind it.
  struct UploadGate {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false, uploading = false;
    bool WaitUploading() {
      std::unique_lock<std::mutex> l(mu);
      return cv.wait_for(l, std::chrono::seconds(60), [&] { return uploading; });
    }
    void Release() {
      {
        std::lock_guard<std::mutex> l(mu);
        release = true;
      }
      cv.notify_all();
    }
  };
  std::unique_ptr<Persister> MakeGated(UploadGate* g, int world,
                                       const std::function<void(PersistConfig*)>& tweak = nullptr) {
    return Make("", [g, world, tweak](PersistConfig* c) {
      if (tweak) tweak(c);
      c->world = world;
      c->object_upload = [g](const std::string&, long, int, int) {
        std::unique_lock<std::mutex> l(g->mu);
        g->uploading = true;
        g->cv.notify_all();
        g->cv.wait(l, [g] { return g->release; });
        return Status::Ok();
      };
      c->object_newest = [](long) -> Result<long> { return -1; };
    });
  }
  void ExpectLoads(const std::string& root, long step) {
    Result<std::unique_ptr<StepReader>> rd = StepReader::Open(Env::Default(), root, step);
    ASSERT_TRUE(rd.ok()) << rd.status().ToString();
    for (const TensorView& v : Views(tensors_)) {
      std::vector<float> got(v.meta.shape[0]);
      BW_ASSERT_OK((*rd)->Load(v.meta, got.data()));
      EXPECT_EQ(0, std::memcmp(got.data(), v.data, v.meta.nbytes())) << v.meta.name;
    }
  }

  static constexpr uint64_t kChunk = 64 << 10;
  std::string staging_, disk_;
  std::vector<Tensor> tensors_;
  std::mutex mu_;
  std::vector<PersistEvent> events_;
};

TEST_F(PersisterTest, PersistsToDiskAndSealsTheSlotInOnePass) {
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  // Staged without hashes (Stager::Stage seals as it copies): the persist hashes it
  // as it writes and seals the slot with those hashes.
  Result<StageResult> sr = StageUnsealed(**stager, 10, Views(tensors_));
  ASSERT_TRUE(sr.ok()) << sr.status().ToString();
  EXPECT_TRUE((*stager)->SealedSteps().empty());  // nobody sealed it yet
  auto p = Make();
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 10, /*persist=*/true);
  ASSERT_TRUE(p->Drain(60));
  std::vector<PersistEvent> ev = Events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].status.ok()) << ev[0].status.ToString();
  EXPECT_EQ(ev[0].tier, "disk");
  EXPECT_EQ(ev[0].step, 10);
  EXPECT_EQ(ev[0].bytes, (1000 + 70000 + 16384) * 4u);
  EXPECT_GT(ev[0].hash_s, 0);  // hashed by the writer
  BW_ASSERT_OK(Commit(Env::Default(), disk_, 10, 1, /*verify_data=*/true));
  ExpectLoads(disk_, 10);
  // The slot is sealed with the writer's hashes: the memory tier restores it, and
  // Restore verifies every chunk against them.
  EXPECT_EQ((*stager)->SealedSteps(), std::vector<long>{10});
  std::vector<std::vector<float>> out(tensors_.size());
  std::vector<std::pair<TensorMeta, void*>> dsts;
  std::vector<TensorView> views = Views(tensors_);
  for (size_t i = 0; i < views.size(); ++i) {
    out[i].resize(tensors_[i].data.size());
    dsts.emplace_back(views[i].meta, out[i].data());
  }
  BW_ASSERT_OK((*stager)->Restore(10, dsts));
  for (size_t i = 0; i < views.size(); ++i) EXPECT_EQ(out[i], tensors_[i].data);
}

TEST_F(PersisterTest, PortableStepsAreThoseEveryRankMayRestore) {
  // Rank 0 stages a data-parallel state (tensors replicated, the objects blob beside
  // them) at steps 4 and 5, and a rank-specific one at step 6; rank 1 the same state
  // at step 5 with another blob. Only 4 and 5 are portable; equal blobs, equal digests.
  auto p = Make("", [](PersistConfig* c) { c->world = 2; });
  std::vector<uint8_t> blob_a(300, 7), blob_b(300, 8);
  std::unique_ptr<Stager> stagers[2];
  for (int r = 0; r < 2; ++r) {
    auto st = Stager::Open(staging_, r, 2, 4, kChunk);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    stagers[r] = std::move(st).value();
  }
  auto stage = [&](int rank, long step, bool replicated, const std::vector<uint8_t>& blob) {
    std::vector<TensorView> v = Views(tensors_);
    for (TensorView& t : v) t.meta.replicated = replicated;
    TensorView b;
    b.meta.name = kObjectsBlobName;
    b.meta.dtype = DType::kU8;
    b.meta.shape = {static_cast<int64_t>(blob.size())};
    b.data = blob.data();
    v.push_back(b);
    ASSERT_TRUE(stagers[rank]->Stage(step, v).ok());
  };
  stage(0, 4, true, blob_a);
  stage(0, 5, true, blob_a);
  stage(0, 6, false, blob_a);
  stage(1, 5, true, blob_b);
  std::map<int, std::map<long, uint64_t>> got = p->Portable({0, 1, 2});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].size(), 2u);
  EXPECT_EQ(got[0].count(6), 0u);
  EXPECT_EQ(got[0][4], got[0][5]);
  EXPECT_NE(got[0][5], got[1][5]);
  // Without the blob (not bulwark.checkpoint's layout) nothing is portable.
  std::vector<TensorView> v = Views(tensors_);
  for (TensorView& t : v) t.meta.replicated = true;
  ASSERT_TRUE(stagers[1]->Stage(7, v).ok());
  EXPECT_EQ(p->Portable({1})[1].count(7), 0u);
  // The blob alone (a state of Python values, nothing declared replicated): not portable.
  TensorView b;
  b.meta.name = kObjectsBlobName;
  b.meta.dtype = DType::kU8;
  b.meta.shape = {static_cast<int64_t>(blob_a.size())};
  b.data = blob_a.data();
  ASSERT_TRUE(stagers[1]->Stage(8, {b}).ok());
  EXPECT_EQ(p->Portable({1})[1].count(8), 0u);
}

TEST_F(PersisterTest, SealOnlyRequestWritesNothing) {
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  Result<StageResult> sr = (*stager)->Stage(3, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  auto p = Make();
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 3, /*persist=*/false);
  ASSERT_TRUE(p->Drain(60));
  EXPECT_TRUE(Events().empty());
  EXPECT_EQ((*stager)->SealedSteps(), std::vector<long>{3});
  EXPECT_FALSE(fs::exists(StepDir(disk_, 3)));
  EXPECT_EQ(p->Inventory({0})[0], std::vector<long>{3});
}

TEST_F(PersisterTest, SharedTierGetsTheSameShard) {
  const std::string shared = MakeTempDir("/tmp", "bw_persist_shared");
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  Result<StageResult> sr = (*stager)->Stage(5, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  {
    auto p = Make(shared);
    p->OnStaged(0, sr->slot, sr->seq, sr->generation, 5, true);
    ASSERT_TRUE(p->Drain(60));
  }
  std::vector<PersistEvent> ev = Events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].tier, "disk");
  EXPECT_EQ(ev[1].tier, "shared");
  for (const PersistEvent& e : ev) EXPECT_TRUE(e.status.ok()) << e.status.ToString();
  BW_ASSERT_OK(Commit(Env::Default(), disk_, 5, 1, true));
  BW_ASSERT_OK(Commit(Env::Default(), shared, 5, 1, true));
  ExpectLoads(shared, 5);
  std::error_code ec;
  fs::remove_all(shared, ec);
}

TEST_F(PersisterTest, IncrementalPersistWritesOnlyChangedChunks) {
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  auto p = Make();
  Result<StageResult> sr = (*stager)->Stage(1, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 1, true);
  ASSERT_TRUE(p->Drain(60));
  BW_ASSERT_OK(Commit(Env::Default(), disk_, 1, 1, true));
  tensors_[1].data[5] += 1;  // first chunk of "b" only
  sr = (*stager)->Stage(2, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 2, true);
  ASSERT_TRUE(p->Drain(60));
  std::vector<PersistEvent> ev = Events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_TRUE(ev[1].status.ok()) << ev[1].status.ToString();
  EXPECT_EQ(ev[1].bytes, kChunk);  // one 64 KiB chunk rewritten
  BW_ASSERT_OK(Commit(Env::Default(), disk_, 2, 1, true));
  ExpectLoads(disk_, 2);
}

TEST_F(PersisterTest, OverwrittenSlotIsReportedNotPersisted) {
  auto stager = Stager::Open(staging_, 0, 1, 2, kChunk);
  ASSERT_TRUE(stager.ok());
  Result<StageResult> old = (*stager)->Stage(1, Views(tensors_));
  ASSERT_TRUE(old.ok());
  // Two more saves: with 2 slots the first one's slot is reused.
  ASSERT_TRUE((*stager)->Stage(2, Views(tensors_)).ok());
  ASSERT_TRUE((*stager)->Stage(3, Views(tensors_)).ok());
  auto p = Make();
  p->OnStaged(0, old->slot, old->seq, old->generation, 1, true);
  ASSERT_TRUE(p->Drain(60));
  std::vector<PersistEvent> ev = Events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_FALSE(ev[0].status.ok());
  EXPECT_THAT(ev[0].status.ToString(), HasSubstr("was not persisted"));
  EXPECT_FALSE(fs::exists(StepDir(disk_, 1) + "/" + ShardFileName(0, 1)));
}

TEST_F(PersisterTest, AdoptHashesChecksCounts) {
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  Result<StageResult> sr = StageUnsealed(**stager, 4, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  auto reader = RingReader::Open(RingPath(staging_, 0));
  ASSERT_TRUE(reader.ok());
  auto snap = (*reader)->Pin(sr->slot, sr->seq, nullptr, /*seal=*/false);
  ASSERT_TRUE(snap.ok());
  EXPECT_FALSE((*snap)->sealed());
  Status st = (*snap)->AdoptHashes({{1}, {2}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  st = (*snap)->AdoptHashes({{1}, {2, 3}, {4}});  // "b" has 5 chunks
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_FALSE((*snap)->sealed());
  double hash_s = 0;
  BW_ASSERT_OK((*snap)->EnsureSealed(&hash_s));
  EXPECT_TRUE((*snap)->sealed());
}

TEST_F(PersisterTest, SealedSnapshotsArePushedToThePeer) {
  const std::string replicas = staging_ + "/peer-replicas";
  PeerServerOptions po;
  po.replica_dir = replicas;
  po.slots = 2;
  po.log = [](const std::string&) {};
  auto server = PeerServer::Start(po);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  auto p = Make("", [&](PersistConfig* c) { c->peer_port = (*server)->port(); });
  for (long step : {1, 2}) {  // 1: seal-only; 2: persisted to disk, then pushed
    Result<StageResult> sr = (*stager)->Stage(step, Views(tensors_));
    ASSERT_TRUE(sr.ok());
    p->OnStaged(0, sr->slot, sr->seq, sr->generation, step, /*persist=*/step == 2);
    ASSERT_TRUE(p->Drain(60));
  }
  EXPECT_EQ((*server)->ReplicaSteps()[0], (std::vector<long>{1, 2}));
  for (const PersistEvent& e : Events())
    EXPECT_TRUE(e.status.ok()) << e.tier << e.status.ToString();
  // The replica is a sealed ring: the memory tier restores it bit for bit.
  std::vector<float> got(tensors_[1].data.size());
  auto rr = RingReader::Open(RingPath(replicas, 0));
  ASSERT_TRUE(rr.ok());
  auto snap = (*rr)->PinStep(2);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  BW_ASSERT_OK(CopyVerified((*snap)->tensors()[1], (*snap)->chunk_size(), got.data()));
  EXPECT_EQ(got, tensors_[1].data);
}

TEST_F(PersisterTest, PausedPushesLeaveThePeersReplicasAsTheyWere) {
  PeerServerOptions po;
  po.replica_dir = staging_ + "/peer-replicas";
  po.slots = 2;
  po.log = [](const std::string&) {};
  auto server = PeerServer::Start(po);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto stager = Stager::Open(staging_, 0, 1, 4, kChunk);
  ASSERT_TRUE(stager.ok());
  auto p = Make("", [&](PersistConfig* c) { c->peer_port = (*server)->port(); });
  auto stage = [&](long step) {
    Result<StageResult> sr = (*stager)->Stage(step, Views(tensors_));
    ASSERT_TRUE(sr.ok());
    p->OnStaged(0, sr->slot, sr->seq, sr->generation, step, /*persist=*/false);
    ASSERT_TRUE(p->Drain(60));
  };
  stage(1);
  stage(2);
  ASSERT_EQ((*server)->ReplicaSteps()[0], (std::vector<long>{1, 2}));
  // Stopped: the steps the old attempt stages on are sealed, not pushed, so the peer
  // still holds step 1 (two slots: a push of 3 would have evicted it).
  p->PausePushes(true);
  stage(3);
  stage(4);
  EXPECT_EQ((*server)->ReplicaSteps()[0], (std::vector<long>{1, 2}));
  EXPECT_EQ((*stager)->SealedSteps(), (std::vector<long>{1, 2, 3, 4}));
  // The next attempt launched: pushes go on.
  p->PausePushes(false);
  stage(5);
  EXPECT_EQ((*server)->ReplicaSteps()[0], (std::vector<long>{2, 5}));
}

// A FakeClock that moves one second on every reading from another thread than the
// test's: each push the persister times then takes exactly one second, and each check
// of the round gap one more.
class TickingClock : public FakeClock {
 public:
  double NowMono() const override {
    const double t = FakeClock::NowMono();
    if (std::this_thread::get_id() != test_thread_) SleepFor(1);
    return t;
  }

 private:
  std::thread::id test_thread_ = std::this_thread::get_id();
};

TEST_F(PersisterTest, PeerPushesKeepToTheirShareOfTheTime) {
  PeerServerOptions po;
  po.replica_dir = staging_ + "/peer-replicas";
  po.slots = 4;
  po.log = [](const std::string&) {};
  auto server = PeerServer::Start(po);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<std::unique_ptr<Stager>> stagers;
  for (int rank = 0; rank < 2; ++rank) {
    auto s = Stager::Open(staging_, rank, 2, 4, kChunk);
    ASSERT_TRUE(s.ok());
    stagers.push_back(std::move(*s));
  }
  TickingClock clock;
  auto p = Make("", [&](PersistConfig* c) {
    c->world = 2;
    c->peer_port = (*server)->port();
    c->peer_push_share = 0.25;
    c->clock = &clock;
  });
  for (long step = 1; step <= 6; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      Result<StageResult> sr = stagers[rank]->Stage(step, Views(tensors_));
      ASSERT_TRUE(sr.ok());
      p->OnStaged(rank, sr->slot, sr->seq, sr->generation, step, /*persist=*/false);
    }
    ASSERT_TRUE(p->Drain(60));
  }
  // Step 1's round: rank 0's push opens it, rank 1's joins it (one second each, so two
  // seconds of pushing at a share of 1/4): no round for the next 8 s, during which
  // steps 2 and 3 are checked (a second each) and stay on the node. Step 4 opens the
  // next round at second 8.
  std::map<int, std::vector<long>> replicas = (*server)->ReplicaSteps();
  EXPECT_EQ(replicas[0], (std::vector<long>{1, 4}));
  EXPECT_EQ(replicas[1], (std::vector<long>{1, 4}));
  for (const auto& s : stagers) EXPECT_EQ(s->SealedSteps(), (std::vector<long>{3, 4, 5, 6}));
  int pushes = 0;
  for (const PersistEvent& e : Events()) {
    if (e.tier != "peer") continue;
    ++pushes;
    BW_EXPECT_OK(e.status);
    EXPECT_DOUBLE_EQ(e.seconds, 1.0);
  }
  EXPECT_EQ(pushes, 4);
}

TEST_F(PersisterTest, PeerPushFailureIsReported) {
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  // A port nobody listens on: bind one, then close it.
  int port = 0;
  {
    PeerServerOptions po;
    po.replica_dir = staging_ + "/gone";
    auto s = PeerServer::Start(po);
    ASSERT_TRUE(s.ok());
    port = (*s)->port();
  }
  FakeClock clock;
  auto p = Make("", [&](PersistConfig* c) {
    c->peer_port = port;
    c->peer_timeout_s = 2;
    c->clock = &clock;
  });
  Result<StageResult> sr = (*stager)->Stage(1, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 1, false);
  ASSERT_TRUE(p->Drain(60));
  std::vector<PersistEvent> ev = Events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].tier, "peer");
  EXPECT_FALSE(ev[0].status.ok());
  EXPECT_EQ((*stager)->SealedSteps(), std::vector<long>{1});  // sealed regardless
  // Pushes pause after a failure (peer_backoff_s, 10 s by default): the next seal
  // does not try again, so a dead peer cannot hold up the persister every step.
  sr = (*stager)->Stage(2, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 2, false);
  ASSERT_TRUE(p->Drain(60));
  EXPECT_EQ(Events().size(), 1u);
  EXPECT_EQ((*stager)->SealedSteps(), (std::vector<long>{1, 2}));
  clock.Advance(10.5);  // the pause is over: the next seal pushes (and fails) again
  sr = (*stager)->Stage(3, Views(tensors_));
  ASSERT_TRUE(sr.ok());
  p->OnStaged(0, sr->slot, sr->seq, sr->generation, 3, false);
  ASSERT_TRUE(p->Drain(60));
  ASSERT_EQ(Events().size(), 2u);
  EXPECT_EQ(Events()[1].step, 3);
  EXPECT_EQ(Events()[1].tier, "peer");
}

TEST_F(PersisterTest, ObjectUploadFollowsDiskAndGuardsIncrementalBase) {
  auto stager = Stager::Open(staging_, 0, 1, 3, kChunk);
  ASSERT_TRUE(stager.ok());
  std::mutex mu;
  std::vector<long> uploaded;
  long object_newest = -1;  // what the "object tier" holds
  auto p = Make("", [&](PersistConfig* c) {
    c->object_interval = 2;
    c->object_upload = [&](const std::string& root, long step, int rank, int world) {
      EXPECT_EQ(root, disk_);
      EXPECT_EQ(rank, 0);
      EXPECT_EQ(world, 1);
      // The shard is durable on disk before the upload starts.
      EXPECT_TRUE(fs::exists(StepDir(root, step) + "/" + ShardFileName(0, 1)));
      std::lock_guard<std::mutex> l(mu);
      uploaded.push_back(step);
      return Status::Ok();
    };
    c->object_newest = [&](long max_step) -> Result<long> {
      std::lock_guard<std::mutex> l(mu);
      return object_newest <= max_step ? object_newest : -1;
    };
  });
  auto persist = [&](long step) {
    tensors_[0].data[0] = static_cast<float>(step);  // first chunk of "a" changes
    Result<StageResult> sr = (*stager)->Stage(step, Views(tensors_));
    ASSERT_TRUE(sr.ok());
    p->OnStaged(0, sr->slot, sr->seq, sr->generation, step, true);
    ASSERT_TRUE(p->Drain(60));
    BW_ASSERT_OK(Commit(Env::Default(), disk_, step, 1, true));
  };
  const uint64_t full = (1000 + 70000 + 16384) * 4u;
  persist(1);  // not due for the object tier (interval 2)
  persist(2);  // due; its disk base (1) is not on the object tier: written in full
  {
    std::lock_guard<std::mutex> l(mu);
    object_newest = 2;  // the controller committed step 2 there
  }
  persist(3);  // not due: incremental against 2
  persist(4);  // due; base 3 is not on the object tier: full again
  {
    std::lock_guard<std::mutex> l(mu);
    object_newest = 4;
  }
  persist(6);  // due; base 4 is on the object tier: incremental
  EXPECT_EQ(uploaded, (std::vector<long>{2, 4, 6}));
  std::map<long, uint64_t> disk_bytes;
  for (const PersistEvent& e : Events()) {
    EXPECT_TRUE(e.status.ok()) << e.tier << " " << e.status.ToString();
    if (e.tier == "disk") disk_bytes[e.step] = e.bytes;
  }
  EXPECT_EQ(disk_bytes[1], full);
  EXPECT_EQ(disk_bytes[2], full);
  EXPECT_EQ(disk_bytes[3], 1000 * 4u);  // "a" is one chunk
  EXPECT_EQ(disk_bytes[4], full);
  EXPECT_EQ(disk_bytes[6], 1000 * 4u);
}

TEST_F(PersisterTest, BehindPersisterSealsTheSameStepsForAllRanks) {
  auto r0 = Stager::Open(staging_, 0, 2, 4, kChunk);
  auto r1 = Stager::Open(staging_, 1, 2, 4, kChunk);
  ASSERT_TRUE(r0.ok() && r1.ok());
  // Hold the persister in an upload of rank 0's step 1 until released, so the seal
  // requests below queue up behind it.
  UploadGate gate;
  auto p = MakeGated(&gate, 2);
  auto stage = [&](Stager* st, int rank, long step, bool persist) {
    Result<StageResult> sr = StageUnsealed(*st, step, Views(tensors_));
    ASSERT_TRUE(sr.ok()) << sr.status().ToString();
    p->OnStaged(rank, sr->slot, sr->seq, sr->generation, step, persist);
  };
  stage(r0->get(), 0, 1, true);
  ASSERT_TRUE(gate.WaitUploading());
  // Rank 0 is ahead (staged 2, 3, 4); rank 1 has staged 2 and 3.
  for (long step : {2, 3, 4}) stage(r0->get(), 0, step, false);
  for (long step : {2, 3}) stage(r1->get(), 1, step, false);
  gate.Release();
  ASSERT_TRUE(p->Drain(60));
  // Step 3 (the newest both have) is sealed for both; step 2 is skipped for both
  // alike; then rank 0's step 4.
  EXPECT_EQ((*r0)->SealedSteps(), (std::vector<long>{1, 3, 4}));
  EXPECT_EQ((*r1)->SealedSteps(), (std::vector<long>{3}));
}

}  // namespace
TEST_F(PersisterTest, AQueuedPersistThatANewerStepReplacesIsSupersededNotFailed) {
  auto st = Stager::Open(staging_, 0, 1, 4, kChunk);
  ASSERT_TRUE(st.ok());
  // Hold the persister in the object upload of step 1, so steps 2 and 3 queue.
  UploadGate gate;
  auto p = MakeGated(&gate, 1);
  auto stage = [&](long step) {
    Result<StageResult> sr = (*st)->Stage(step, Views(tensors_));
    ASSERT_TRUE(sr.ok()) << sr.status().ToString();
    p->OnStaged(0, sr->slot, sr->seq, sr->generation, step, /*persist=*/true);
  };
  stage(1);
  ASSERT_TRUE(gate.WaitUploading());
  stage(2);
  stage(3);  // before step 2's write began: step 2's persist is superseded
  gate.Release();
  ASSERT_TRUE(p->Drain(60));
  std::map<long, PersistEvent> disk;
  for (const PersistEvent& e : Events()) {
    if (e.tier == "disk") disk[e.step] = e;
  }
  ASSERT_EQ(disk.size(), 3u);
  EXPECT_TRUE(disk[1].status.ok() && disk[1].superseded_by < 0) << disk[1].status.ToString();
  EXPECT_EQ(disk[2].superseded_by, 3);
  EXPECT_NE(disk[2].status.message().find("step 3 was staged before it started"), std::string::npos)
      << disk[2].status.ToString();
  EXPECT_TRUE(disk[3].status.ok() && disk[3].superseded_by < 0) << disk[3].status.ToString();
  BW_ASSERT_OK(Commit(Env::Default(), disk_, 3, 1, /*verify_data=*/true));
}

// A low-priority persister held in a write while the trainer stages more (the state of
// a node whose trainers keep every core busy, where a SCHED_IDLE thread may never run).
class PersisterPriorityTest : public PersisterTest {
 protected:
  // Starts a gated, low-priority persister of one rank and waits for its thread to
  // lower itself (it shows its tid once it did). False if it could not be started.
  bool Start(double escalate_after_s = 2.0) {
    auto st = Stager::Open(staging_, 0, 1, 4, kChunk);
    if (!st.ok()) return false;
    stager_ = std::move(*st);
    p_ = MakeGated(&gate_, 1, [this, escalate_after_s](PersistConfig* c) {
      c->low_priority = true;
      c->escalate_after_s = escalate_after_s;
      c->clock = &clock_;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (p_->CurrentPriority().thread_id != 0) return true;
      std::this_thread::yield();
    }
    return false;
  }
  void Stage(long step, bool persist) {
    Result<StageResult> sr = stager_->Stage(step, Views(tensors_));
    ASSERT_TRUE(sr.ok()) << sr.status().ToString();
    p_->OnStaged(0, sr->slot, sr->seq, sr->generation, step, persist);
  }
  int Policy() { return ::sched_getscheduler(p_->CurrentPriority().thread_id); }

  FakeClock clock_;
  UploadGate gate_;
  std::unique_ptr<Stager> stager_;
  std::unique_ptr<Persister> p_;
};

TEST_F(PersisterPriorityTest, ABehindPersisterIsRaisedUntilItCaughtUp) {
  ASSERT_TRUE(Start());
  if (!p_->CurrentPriority().idle) {
    // This process may not raise a thread out of SCHED_IDLE: nice 10 (or the test's own
    // nice when above that: it may not lower a nice value either), never idle.
    EXPECT_EQ(Policy(), SCHED_OTHER);
    EXPECT_EQ(::getpriority(PRIO_PROCESS, p_->CurrentPriority().thread_id),
              std::max(10, ::getpriority(PRIO_PROCESS, 0)));
    GTEST_SKIP() << "no CAP_SYS_NICE here: the fallback (nice 10) was checked instead";
  }
  EXPECT_EQ(Policy(), SCHED_IDLE);
  Stage(1, true);
  ASSERT_TRUE(gate_.WaitUploading());
  Stage(2, true);  // queued behind step 1: not behind yet
  EXPECT_FALSE(p_->CurrentPriority().raised);
  EXPECT_EQ(Policy(), SCHED_IDLE);
  Stage(3, true);  // replaces step 2's persist before it began: behind
  EXPECT_TRUE(p_->CurrentPriority().raised);
  EXPECT_EQ(Policy(), SCHED_OTHER);
  gate_.Release();
  ASSERT_TRUE(p_->Drain(60));
  // Caught up: idle again, until it falls behind once more.
  const Persister::Priority after = p_->CurrentPriority();
  EXPECT_FALSE(after.raised);
  EXPECT_EQ(after.raises, 1);
  EXPECT_EQ(Policy(), SCHED_IDLE);
}

TEST_F(PersisterPriorityTest, ARequestThatWaitedTooLongRaisesIt) {
  ASSERT_TRUE(Start(/*escalate_after_s=*/2.0));
  if (!p_->CurrentPriority().idle) GTEST_SKIP() << "no CAP_SYS_NICE here (see above)";
  Stage(1, true);
  ASSERT_TRUE(gate_.WaitUploading());
  clock_.Advance(1.5);
  Stage(2, false);  // step 1 has waited 1.5 s: not yet
  EXPECT_FALSE(p_->CurrentPriority().raised);
  clock_.Advance(1.0);
  Stage(3, false);  // 2.5 s
  EXPECT_TRUE(p_->CurrentPriority().raised);
  EXPECT_EQ(Policy(), SCHED_OTHER);
  gate_.Release();
  ASSERT_TRUE(p_->Drain(60));
  EXPECT_FALSE(p_->CurrentPriority().raised);
  EXPECT_EQ(Policy(), SCHED_IDLE);
}

}  // namespace bulwark::ckpt
