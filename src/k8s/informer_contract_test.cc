// The informer against a real kube-apiserver (the binary's shared control plane):
// sync, events, the server's bookmarks, etcd compaction (410 -> relist) and a bounded
// Stop(); a stream cut mid-event and a watch ended early come from the FaultProxy in
// front of it. Backoff waits run on a FakeClock that the tests advance, so the moment
// the informer reconnects is under the test's control.
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>

#include "k8s/contract_test_util.h"
#include "k8s/informer.h"

namespace bulwark::k8s {
namespace {

using contract::ConfigMaps;
using contract::ContractTest;
using contract::MakeConfigMap;
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
  std::unique_ptr<Informer> NewInformer(const std::string& ns, const Resource& r = Pods(),
                                        int watch_timeout_seconds = 300) {
    InformerOptions o;
    o.resource = r;
    o.ns = ns;
    o.watch_timeout_seconds = watch_timeout_seconds;
    o.backoff_initial_s = 1;
    o.backoff_max_s = 1;
    return std::make_unique<Informer>(client_.get(), o, rec_.Handlers(), &clock_);
  }
  // A started informer, synced and with its watch open.
  std::unique_ptr<Informer> StartWatching(const std::string& ns, const Resource& r = Pods()) {
    auto inf = NewInformer(ns, r);
    inf->Start();
    EXPECT_TRUE(inf->WaitForSync(10));
    EXPECT_TRUE(PollUntil([&] { return proxy_->OpenWatches() == 1; }));
    return inf;
  }
  // Creates a pod (or a configmap) named `name` in ns_ through the admin client.
  void Create(const std::string& name, const Resource& r = Pods()) {
    auto c = r.plural == "pods" ? admin_->Create(r, ns_, MakePod(name, ns_))
                                : admin_->Create(r, ns_, MakeConfigMap(name, ns_));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
  }
  // Sets label v=2 on ns_/name.
  void Relabel(const std::string& name, const Resource& r = Pods()) {
    auto got = admin_->Get(r, ns_, name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    (*got)["metadata"]["labels"]["v"] = "2";
    auto put = admin_->Update(r, ns_, *got);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  // Cuts the watch in the middle of the event that creating `trigger` causes and waits
  // until the informer is in its backoff (which only the fake clock can end).
  void CutAndWaitForBackoff(Informer* inf, const std::string& trigger, const Resource& r = Pods()) {
    proxy_->CutWatches();
    Create(trigger, r);
    ASSERT_TRUE(PollUntil([&] { return inf->Stats().errors == 1; }));
  }
  // Polls `cond`, advancing the informer's clock by 1 s per poll so any backoff ends.
  bool AdvanceUntil(const std::function<bool()>& cond, double timeout_s = 10) {
    return PollUntil(
        [&] {
          clock_.Advance(1);
          return cond();
        },
        timeout_s);
  }
  std::string Key(const std::string& name) const { return ns_ + "/" + name; }

  FakeClock clock_;
  Recorder rec_;
};

TEST_F(InformerContractTest, SyncsThenAppliesEventsInOrder) {
  const std::string other = NewNamespace(ns_ + "-other");
  ASSERT_FALSE(other.empty());
  Create("a");
  Create("b");
  ASSERT_TRUE(admin_->Create(Pods(), other, MakePod("elsewhere", other)).ok());
  auto inf = NewInformer(ns_);
  inf->Start();
  inf->Start();  // idempotent
  ASSERT_TRUE(inf->WaitForSync(10));
  EXPECT_EQ(inf->Size(), 2u);
  EXPECT_EQ(rec_.Count("add", Key("a")), 1);
  EXPECT_EQ(rec_.Count("add", Key("b")), 1);

  auto a = admin_->Get(Pods(), ns_, "a");
  ASSERT_TRUE(a.ok());
  (*a)["metadata"]["labels"]["x"] = "1";
  ASSERT_TRUE(admin_->Update(Pods(), ns_, *a).ok());
  // The real server's DELETE of a pod: an update (deletionTimestamp set), then the
  // delete (at once: the pod was never scheduled).
  ASSERT_TRUE(admin_->Delete(Pods(), ns_, "b").ok());
  Create("c");
  ASSERT_TRUE(PollUntil([&] { return rec_.Count("add", Key("c")) == 1; }));
  EXPECT_EQ(rec_.Count("update", Key("a")), 1);
  EXPECT_EQ(rec_.Count("update", Key("b")), 1);
  EXPECT_EQ(rec_.Count("delete", Key("b")), 1);
  EXPECT_EQ(inf->Size(), 2u);
  auto cached = inf->Get(Key("a"));
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ((*cached)["metadata"]["labels"]["x"], "1");
  EXPECT_FALSE(inf->Get(Key("b")).has_value());
  auto list = inf->List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(Name(list[0]), "a");  // key order
  EXPECT_EQ(Name(list[1]), "c");
  EXPECT_EQ(inf->Stats().events, 4u);
  EXPECT_EQ(inf->Stats().lists, 1u);
  EXPECT_EQ(rec_.Total(), 6);
}

// Synced means the initial list's objects were delivered, not only listed: a
// consumer that waits for it (the operator, before sizing the cluster) sees them all.
TEST_F(InformerContractTest, SyncedOnlyAfterTheInitialListIsDelivered) {
  for (const char* n : {"a", "b", "c"}) Create(n);
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
  o.ns = ns_;
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

// The real server's bookmarks (allowWatchBookmarks) come 2 s before a watch's
// timeoutSeconds, carry the newest resourceVersion of the whole resource and are sent
// only when it is newer than what the watch has passed over: a watch opened after the
// last change anywhere gets none. So pods in another namespace keep changing (none of
// them reaches this informer) until its resourceVersion passes the first change's.
// Watch errors back off on the fake clock, which the poll advances.
TEST_F(InformerContractTest, BookmarksAdvanceTheResourceVersion) {
  const std::string busy = NewNamespace(ns_ + "-busy");
  ASSERT_FALSE(busy.empty());
  // 5 s watches: a bookmark ~3 s in, then the watch ends and is resumed.
  auto inf = NewInformer(ns_, Pods(), /*watch_timeout_seconds=*/5);
  inf->Start();
  ASSERT_TRUE(inf->WaitForSync(10));
  auto other = admin_->Create(Pods(), busy, MakePod("p", busy));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  const uint64_t rv = Rv(ResourceVersion(*other));
  auto last_touch = std::chrono::steady_clock::now();
  auto advanced = [&] {
    if (Rv(inf->LastResourceVersion()) >= rv) return true;
    if (std::chrono::steady_clock::now() - last_touch >= std::chrono::seconds(2)) {
      last_touch = std::chrono::steady_clock::now();
      Status st = TouchPod(busy, "p");
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return false;
  };
  ASSERT_TRUE(AdvanceUntil(advanced, 60))
      << inf->LastResourceVersion() << " < " << rv << "; watches " << inf->Stats().watches
      << ", bookmarks " << inf->Stats().bookmarks << ", errors " << inf->Stats().errors
      << ", touches " << touches_;
  EXPECT_GE(inf->Stats().bookmarks, 1u);
  EXPECT_EQ(inf->Stats().events, 0u);
  EXPECT_EQ(inf->Stats().lists, 1u);
  EXPECT_EQ(rec_.Total(), 0);
}

TEST_F(InformerContractTest, CutStreamResumesFromLastVersionExactlyOnce) {
  Create("a");
  auto inf = StartWatching(ns_);
  // "cut" is written half, then the stream drops; nothing reconnects until the
  // fake clock moves.
  CutAndWaitForBackoff(inf.get(), "cut");
  EXPECT_EQ(rec_.Count("add", Key("cut")), 0);
  Create("while-away");
  Relabel("a");

  ASSERT_TRUE(AdvanceUntil([&] { return rec_.Count("update", Key("a")) == 1; }));
  EXPECT_EQ(rec_.Count("add", Key("a")), 1);
  EXPECT_EQ(rec_.Count("add", Key("cut")), 1);
  EXPECT_EQ(rec_.Count("add", Key("while-away")), 1);
  EXPECT_EQ(rec_.Total(), 4);
  const InformerStats st = inf->Stats();
  EXPECT_EQ(st.lists, 1u);  // resumed, not relisted
  EXPECT_GE(st.resumed, 1u);
  EXPECT_EQ(st.gone, 0u);
  EXPECT_EQ(inf->Size(), 3u);
}

// On configmaps, which have no watch cache here, so that the resumed watch reaches
// etcd and gets 410 after the compaction.
TEST_F(InformerContractTest, CompactionForcesARelistThatReconcilesWhatWasMissed) {
  for (const char* n : {"keep", "change", "remove"}) Create(n, ConfigMaps());
  auto inf = StartWatching(ns_, ConfigMaps());
  CutAndWaitForBackoff(inf.get(), "trigger", ConfigMaps());
  // While the informer is away: changes (at least two writes after its version, from
  // which a watch starts one revision later), then the history is compacted.
  Relabel("change", ConfigMaps());
  ASSERT_TRUE(admin_->Delete(ConfigMaps(), ns_, "remove").ok());
  Create("new", ConfigMaps());
  CompactEtcdNow();

  // The relist's stats are counted before its events are delivered: wait for both.
  ASSERT_TRUE(AdvanceUntil([&] { return inf->Stats().lists == 2 && rec_.Total() >= 3 + 4; }));
  const InformerStats st = inf->Stats();
  EXPECT_EQ(st.gone, 1u);
  EXPECT_EQ(rec_.Count("update", Key("change")), 1);
  EXPECT_EQ(rec_.Count("delete", Key("remove")), 1);
  EXPECT_EQ(rec_.Count("add", Key("new")), 1);
  EXPECT_EQ(rec_.Count("add", Key("trigger")), 1);
  EXPECT_EQ(rec_.Count("update", Key("keep")), 0);  // unchanged: no event
  EXPECT_EQ(rec_.Total(), 3 + 4);
  EXPECT_EQ(inf->Size(), 4u);
  auto cached = inf->Get(Key("change"));
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ((*cached)["metadata"]["labels"]["v"], "2");

  // And it watches again afterwards.
  Create("later", ConfigMaps());
  ASSERT_TRUE(PollUntil([&] { return rec_.Count("add", Key("later")) == 1; }));
}

TEST_F(InformerContractTest, ServerEndedWatchIsResumedWithoutRelist) {
  auto inf = StartWatching(ns_);
  const std::string rv = inf->LastResourceVersion();
  proxy_->EndWatches();
  // Resumes at once, or after a backoff if the watch had lasted < 1 s without events.
  ASSERT_TRUE(
      AdvanceUntil([&] { return inf->Stats().resumed >= 1 && proxy_->OpenWatches() == 1; }));
  Create("after");
  ASSERT_TRUE(PollUntil([&] { return rec_.Count("add", Key("after")) == 1; }));
  EXPECT_EQ(inf->Stats().lists, 1u);
  EXPECT_EQ(inf->Stats().gone, 0u);
  // The re-watch started from the informer's version, not from scratch. (The proxy
  // records a watch when it ends: end the re-watch too.)
  proxy_->EndWatches();
  auto watch_rvs = [&] {
    std::vector<std::string> out;
    for (const auto& r : proxy_->Requests()) {
      if (!r.watch) continue;
      const size_t at = r.query.find("resourceVersion=");
      EXPECT_NE(at, std::string::npos) << r.query;
      if (at == std::string::npos) continue;
      const std::string v = r.query.substr(at + 16);
      out.push_back(v.substr(0, v.find('&')));
    }
    return out;
  };
  ASSERT_TRUE(PollUntil([&] { return watch_rvs().size() >= 2; }));
  const std::vector<std::string> rvs = watch_rvs();
  EXPECT_EQ(rvs[0], rv);
  EXPECT_GE(Rv(rvs[1]), Rv(rv));
  EXPECT_GT(Rv(rvs[1]), 0u);
}

// Whether inf->Stop() returns within `deadline_s` (a generous bound: a Stop that waited
// for the watch to end or the backoff to pass would take the 300 s watch or forever).
bool StopReturns(Informer* inf, double deadline_s = 60) {
  auto done = std::async(std::launch::async, [inf] { inf->Stop(); });
  return done.wait_for(std::chrono::duration<double>(deadline_s)) == std::future_status::ready;
}

TEST_F(InformerContractTest, StopIsBoundedWhileAWatchIsOpen) {
  auto inf = StartWatching(ns_);
  EXPECT_TRUE(StopReturns(inf.get()));
  inf->Stop();  // again: no-op
  ASSERT_TRUE(PollUntil([&] { return proxy_->OpenWatches() == 0; }));
}

TEST_F(InformerContractTest, StopIsBoundedDuringBackoff) {
  auto inf = StartWatching(ns_);
  CutAndWaitForBackoff(inf.get(), "x");
  EXPECT_TRUE(StopReturns(inf.get()));  // the fake clock never advances: only Stop ends it
}

}  // namespace
}  // namespace bulwark::k8s
