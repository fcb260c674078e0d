// The informer against the fake API server: sync, events, bookmarks, a cut stream,
// compaction (410 -> relist), a server-ended watch and a bounded Stop(). Backoff
// waits run on a FakeClock that the tests advance, so the moment the informer
// reconnects is under the test's control.
#include <condition_variable>
#include <map>
#include <mutex>

#include "k8s/contract_test_util.h"
#include "k8s/informer.h"

namespace bulwark::k8s {
namespace {

using contract::ContractTest;
using contract::MakePod;
using contract::PollUntil;
using contract::Rv;
using contract::SecondsSince;

// Records what the handlers were told, per key.
class Recorder {
 public:
  InformerHandlers Handlers() {
    InformerHandlers h;
    h.on_add = [this](const Json& o) { Note("add", o); };
    h.on_update = [this](const Json& old_obj, const Json& o) {
      EXPECT_LT(Rv(ResourceVersion(old_obj)), Rv(ResourceVersion(o)));
      Note("update", o);
    };
    h.on_delete = [this](const Json& o) { Note("delete", o); };
    return h;
  }
  int Count(const std::string& what, const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    return counts_[what + " " + key];
  }
  int Total() {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (const auto& [k, v] : counts_) n += v;
    return n;
  }

 private:
  void Note(const std::string& what, const Json& o) {
    std::lock_guard<std::mutex> l(mu_);
    ++counts_[what + " " + KeyOf(o)];
  }
  std::mutex mu_;
  std::map<std::string, int> counts_;
};

class InformerContractTest : public ContractTest {
 protected:
  std::unique_ptr<Informer> NewInformer(const std::string& ns = "default") {
    InformerOptions o;
    o.resource = Pods();
    o.ns = ns;
    o.backoff_initial_s = 1;
    o.backoff_max_s = 1;
    return std::make_unique<Informer>(client_.get(), o, rec_.Handlers(), &clock_);
  }
  // A started informer, synced and with its watch open.
  std::unique_ptr<Informer> StartWatching(const std::string& ns = "default") {
    auto inf = NewInformer(ns);
    inf->Start();
    EXPECT_TRUE(inf->WaitForSync(10));
    EXPECT_TRUE(PollUntil([&] { return server_->OpenWatches() == 1; }));
    return inf;
  }
  // Cuts the watch in the middle of the event `trigger` causes and waits until the
  // informer is in its backoff (which only the fake clock can end).
  void CutAndWaitForBackoff(Informer* inf, const std::string& trigger) {
    server_->CutWatches();
    ASSERT_TRUE(server_->Create(MakePod(trigger)).ok());
    ASSERT_TRUE(PollUntil([&] { return inf->Stats().errors == 1; }));
  }
  // Polls `cond`, advancing the informer's clock by 1 s per poll so any backoff ends.
  bool AdvanceUntil(const std::function<bool()>& cond) {
    return PollUntil([&] {
      clock_.Advance(1);
      return cond();
    });
  }

  FakeClock clock_;
  Recorder rec_;
};

TEST_F(InformerContractTest, SyncsThenAppliesEventsInOrder) {
  ASSERT_TRUE(server_->Create(MakePod("a")).ok());
  ASSERT_TRUE(server_->Create(MakePod("b")).ok());
  ASSERT_TRUE(server_->Create(MakePod("elsewhere", "other")).ok());
  auto inf = NewInformer();
  inf->Start();
  inf->Start();  // idempotent
  ASSERT_TRUE(inf->WaitForSync(10));
  EXPECT_EQ(inf->Size(), 2u);
  EXPECT_EQ(rec_.Count("add", "default/a"), 1);
  EXPECT_EQ(rec_.Count("add", "default/b"), 1);

  auto a = server_->Get(Pods(), "default", "a");
  ASSERT_TRUE(a.ok());
  (*a)["metadata"]["labels"]["x"] = "1";
  ASSERT_TRUE(server_->Update(*a).ok());
  ASSERT_TRUE(server_->Delete(Pods(), "default", "b").ok());
  ASSERT_TRUE(server_->Create(MakePod("c")).ok());
  ASSERT_TRUE(PollUntil([&] { return rec_.Count("add", "default/c") == 1; }));
  EXPECT_EQ(rec_.Count("update", "default/a"), 1);
  EXPECT_EQ(rec_.Count("delete", "default/b"), 1);
  EXPECT_EQ(inf->Size(), 2u);
  auto cached = inf->Get("default/a");
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ((*cached)["metadata"]["labels"]["x"], "1");
  EXPECT_FALSE(inf->Get("default/b").has_value());
  auto list = inf->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(Name(list[0]), "a");  // key order
  EXPECT_EQ(Name(list[1]), "c");
  EXPECT_EQ(inf->Stats().events, 3u);
  EXPECT_EQ(inf->Stats().lists, 1u);
  EXPECT_EQ(rec_.Total(), 5);
}

// Synced means the initial list's objects were delivered, not only listed: a
// consumer that waits for it (the operator, before sizing the cluster) sees them all.
TEST_F(InformerContractTest, SyncedOnlyAfterTheInitialListIsDelivered) {
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(server_->Create(MakePod(n)).ok());
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int delivered = 0;
  InformerHandlers h;
  h.on_add = [&](const Json&) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(30), [&] { return release; });  // held by the test
    ++delivered;
  };
  InformerOptions o;
  o.resource = Pods();
  o.ns = "default";
  Informer inf(client_.get(), o, h, &clock_);
  inf.Start();
  // The list is in the cache, but its first add is held: not synced yet.
  ASSERT_TRUE(PollUntil([&] { return inf.Size() == 3u; }));
  EXPECT_FALSE(inf.Synced());
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(inf.WaitForSync(10));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(delivered, 3);
}

TEST_F(InformerContractTest, BookmarksAdvanceTheResourceVersion) {
  testing::FakeApiServerOptions opts;
  opts.bookmark_interval_s = 0.1;
  StartServer(opts);
  auto inf = NewInformer("quiet");
  inf->Start();
  ASSERT_TRUE(inf->WaitForSync(10));
  auto other = server_->Create(MakePod("p", "busy"));
  ASSERT_TRUE(other.ok());
  const uint64_t rv = Rv(ResourceVersion(*other));
  ASSERT_TRUE(PollUntil([&] { return Rv(inf->LastResourceVersion()) >= rv; }));
  EXPECT_GE(inf->Stats().bookmarks, 1u);
  EXPECT_EQ(inf->Stats().events, 0u);
  EXPECT_EQ(rec_.Total(), 0);
}

TEST_F(InformerContractTest, CutStreamResumesFromLastVersionExactlyOnce) {
  ASSERT_TRUE(server_->Create(MakePod("a")).ok());
  auto inf = StartWatching();
  // "cut" is written half, then the stream drops; nothing reconnects until the
  // fake clock moves.
  CutAndWaitForBackoff(inf.get(), "cut");
  EXPECT_EQ(rec_.Count("add", "default/cut"), 0);
  ASSERT_TRUE(server_->Create(MakePod("while-away")).ok());
  auto a = server_->Get(Pods(), "default", "a");
  ASSERT_TRUE(a.ok());
  (*a)["metadata"]["labels"]["v"] = "2";
  ASSERT_TRUE(server_->Update(*a).ok());

  ASSERT_TRUE(AdvanceUntil([&] { return rec_.Count("update", "default/a") == 1; }));
  EXPECT_EQ(rec_.Count("add", "default/a"), 1);
  EXPECT_EQ(rec_.Count("add", "default/cut"), 1);
  EXPECT_EQ(rec_.Count("add", "default/while-away"), 1);
  EXPECT_EQ(rec_.Total(), 4);
  const InformerStats st = inf->Stats();
  EXPECT_EQ(st.lists, 1u);  // resumed, not relisted
  EXPECT_GE(st.resumed, 1u);
  EXPECT_EQ(st.gone, 0u);
  EXPECT_EQ(inf->Size(), 3u);
}

TEST_F(InformerContractTest, CompactionForcesARelistThatReconcilesWhatWasMissed) {
  for (const char* n : {"keep", "change", "remove"}) ASSERT_TRUE(server_->Create(MakePod(n)).ok());
  auto inf = StartWatching();
  CutAndWaitForBackoff(inf.get(), "trigger");
  // While the informer is away: changes, then the history is compacted.
  auto change = server_->Get(Pods(), "default", "change");
  ASSERT_TRUE(change.ok());
  (*change)["metadata"]["labels"]["v"] = "2";
  ASSERT_TRUE(server_->Update(*change).ok());
  ASSERT_TRUE(server_->Delete(Pods(), "default", "remove").ok());
  ASSERT_TRUE(server_->Create(MakePod("new")).ok());
  server_->Compact();

  // The relist's stats are counted before its events are delivered: wait for both.
  ASSERT_TRUE(AdvanceUntil([&] { return inf->Stats().lists == 2 && rec_.Total() >= 3 + 4; }));
  const InformerStats st = inf->Stats();
  EXPECT_EQ(st.gone, 1u);
  EXPECT_EQ(rec_.Count("update", "default/change"), 1);
  EXPECT_EQ(rec_.Count("delete", "default/remove"), 1);
  EXPECT_EQ(rec_.Count("add", "default/new"), 1);
  EXPECT_EQ(rec_.Count("add", "default/trigger"), 1);
  EXPECT_EQ(rec_.Count("update", "default/keep"), 0);  // unchanged: no event
  EXPECT_EQ(rec_.Total(), 3 + 4);
  EXPECT_EQ(inf->Size(), 4u);
  auto cached = inf->Get("default/change");
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ((*cached)["metadata"]["labels"]["v"], "2");

  // And it watches again afterwards.
  ASSERT_TRUE(server_->Create(MakePod("later")).ok());
  ASSERT_TRUE(PollUntil([&] { return rec_.Count("add", "default/later") == 1; }));
}

TEST_F(InformerContractTest, ServerEndedWatchIsResumedWithoutRelist) {
  auto inf = StartWatching();
  const std::string rv = inf->LastResourceVersion();
  server_->EndWatches();
  // Resumes at once, or after a backoff if the watch had lasted < 1 s without events.
  ASSERT_TRUE(
      AdvanceUntil([&] { return inf->Stats().resumed >= 1 && server_->OpenWatches() == 1; }));
  ASSERT_TRUE(server_->Create(MakePod("after")).ok());
  ASSERT_TRUE(PollUntil([&] { return rec_.Count("add", "default/after") == 1; }));
  EXPECT_EQ(inf->Stats().lists, 1u);
  EXPECT_EQ(inf->Stats().gone, 0u);
  // The re-watch started from the informer's version, not from scratch.
  std::vector<std::string> watch_rvs;
  for (const auto& r : server_->Requests()) {
    if (!r.watch) continue;
    size_t at = r.query.find("resourceVersion=");
    ASSERT_NE(at, std::string::npos) << r.query;
    std::string v = r.query.substr(at + 16);
    watch_rvs.push_back(v.substr(0, v.find('&')));
  }
  ASSERT_GE(watch_rvs.size(), 2u);
  EXPECT_GE(Rv(watch_rvs.back()), Rv(rv));
  EXPECT_GT(Rv(watch_rvs.back()), 0u);
}

TEST_F(InformerContractTest, StopIsBoundedWhileAWatchIsOpen) {
  auto inf = StartWatching();
  auto t0 = std::chrono::steady_clock::now();
  inf->Stop();
  EXPECT_LT(SecondsSince(t0), 1.0);
  inf->Stop();  // again: no-op
  ASSERT_TRUE(PollUntil([&] { return server_->OpenWatches() == 0; }));
}

TEST_F(InformerContractTest, StopIsBoundedDuringBackoff) {
  auto inf = StartWatching();
  CutAndWaitForBackoff(inf.get(), "x");
  auto t0 = std::chrono::steady_clock::now();
  inf->Stop();  // the fake clock never advances: only Stop ends the wait
  EXPECT_LT(SecondsSince(t0), 1.0);
}

}  // namespace
}  // namespace bulwark::k8s
