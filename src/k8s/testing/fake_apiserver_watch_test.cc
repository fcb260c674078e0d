// FakeApiServer watches over real HTTPS (libcurl): from a resourceVersion, from "0",
// bookmarks, initial-events-end, 410 Expired, selectors entering and leaving,
// CutWatches (partial line then EOF), EndWatches and timeoutSeconds, concurrency,
// client disconnects and a bounded Stop() with open watches.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "k8s/testing/fake_apiserver_test_util.h"

namespace bulwark::k8s::testing {
namespace {

std::vector<std::string> Types(const std::vector<Json>& events) {
  std::vector<std::string> out;
  for (const Json& e : events) out.push_back(e.value("type", "?"));
  return out;
}

uint64_t Rv(const Json& event) {
  return std::stoull(event["object"]["metadata"]["resourceVersion"].get<std::string>());
}

TEST(FakeApiServerWatchTest, StreamsChangesAfterAResourceVersionInOrder) {
  auto server = StartServer();
  Curl curl(*server);
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "before")).code, 201);
  std::string rv = curl.Get(kPods).json()["metadata"]["resourceVersion"];
  WatchStream w(*server, std::string(kPods) + "?watch=1&resourceVersion=" + rv);
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 1; }, 10));
  Json created = curl.Post(kPods, PodJson("default", "a")).json();
  created["metadata"]["labels"] = {{"v", "2"}};
  ASSERT_EQ(curl.Put(std::string(kPods) + "/a", created).code, 200);
  ASSERT_EQ(curl.Delete(std::string(kPods) + "/a").code, 200);
  ASSERT_TRUE(w.WaitEvents(3, 10));
  std::vector<Json> ev = w.Events();
  EXPECT_EQ(Types(ev), (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED"}));
  EXPECT_EQ(ev[0]["object"]["kind"], "Pod");
  EXPECT_EQ(ev[0]["object"]["apiVersion"], "v1");
  EXPECT_EQ(ev[1]["object"]["metadata"]["labels"]["v"], "2");
  EXPECT_LT(Rv(ev[0]), Rv(ev[1]));
  EXPECT_LT(Rv(ev[1]), Rv(ev[2]));
  EXPECT_EQ(std::to_string(Rv(ev[2])), server->CurrentResourceVersion());
  EXPECT_EQ(w.http_code(), 200);
  std::vector<RequestRecord> recs = server->Requests();
  bool watch_recorded = false;
  for (const RequestRecord& r : recs) watch_recorded |= r.watch && r.status == 200;
  EXPECT_TRUE(watch_recorded);
}

TEST(FakeApiServerWatchTest, ReplaysHistoryAndStartsFromZeroWithSyntheticAdds) {
  auto server = StartServer();
  Curl curl(*server);
  std::string start = server->CurrentResourceVersion();
  for (const char* n : {"a", "b", "c"})
    ASSERT_EQ(curl.Post(kPods, PodJson("default", n)).code, 201);
  ASSERT_EQ(curl.Delete(std::string(kPods) + "/b").code, 200);
  // From an older version: the history since then, changes included.
  WatchStream replay(*server, std::string(kPods) + "?watch=true&resourceVersion=" + start);
  ASSERT_TRUE(replay.WaitEvents(4, 10));
  EXPECT_EQ(Types(replay.Events()),
            (std::vector<std::string>{"ADDED", "ADDED", "ADDED", "DELETED"}));
  // From "0" and from "": the current objects as ADDED, then changes.
  for (const std::string q : {"&resourceVersion=0", ""}) {
    WatchStream w(*server, std::string(kPods) + "?watch=1" + q);
    ASSERT_TRUE(w.WaitEvents(2, 10));
    ASSERT_EQ(curl.Post(kPods, PodJson("default", "d")).code, 201);
    ASSERT_TRUE(w.WaitEvents(3, 10));
    std::vector<Json> ev = w.Events();
    EXPECT_EQ(Types(ev), (std::vector<std::string>{"ADDED", "ADDED", "ADDED"}));
    EXPECT_EQ(ev[0]["object"]["metadata"]["name"], "a");
    EXPECT_EQ(ev[1]["object"]["metadata"]["name"], "c");
    EXPECT_EQ(ev[2]["object"]["metadata"]["name"], "d");
    ASSERT_EQ(curl.Delete(std::string(kPods) + "/d").code, 200);
  }
}

TEST(FakeApiServerWatchTest, SendsBookmarksOnlyWhenAllowed) {
  FakeApiServerOptions o;
  o.bookmark_interval_s = 0.05;
  auto server = StartServer(o);
  Curl curl(*server);
  std::string rv = server->CurrentResourceVersion();
  WatchStream plain(*server, std::string(kPods) + "?watch=1&resourceVersion=" + rv);
  WatchStream marked(
      *server, std::string(kPods) + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv);
  ASSERT_TRUE(marked.WaitEvents(2, 10));
  // A change elsewhere advances the bookmark's version, not this watch's events.
  ASSERT_EQ(
      curl.Post("/api/v1/namespaces/default/configmaps", {{"metadata", {{"name", "x"}}}}).code,
      201);
  std::string after = server->CurrentResourceVersion();
  ASSERT_TRUE(PollUntil(
      [&] {
        std::vector<Json> ev = marked.Events();
        return ev.back()["object"]["metadata"]["resourceVersion"] == after;
      },
      10));
  for (const Json& e : marked.Events()) {
    EXPECT_EQ(e["type"], "BOOKMARK");
    EXPECT_EQ(e["object"]["kind"], "Pod");
    EXPECT_EQ(e["object"]["apiVersion"], "v1");
  }
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "p")).code, 201);
  ASSERT_TRUE(plain.WaitEvents(1, 10));
  ASSERT_TRUE(marked.WaitEvents(marked.Events().size() + 1, 10));
  EXPECT_EQ(Types(plain.Events()), (std::vector<std::string>{"ADDED"}));
}

TEST(FakeApiServerWatchTest, SendInitialEventsEndsWithAnAnnotatedBookmark) {
  auto server = StartServer();
  Curl curl(*server);
  for (const char* n : {"a", "b"}) ASSERT_EQ(curl.Post(kPods, PodJson("default", n)).code, 201);
  std::string rv = server->CurrentResourceVersion();
  WatchStream w(*server, std::string(kPods) +
                             "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                             "&resourceVersionMatch=NotOlderThan");
  ASSERT_TRUE(w.WaitEvents(3, 10));
  std::vector<Json> ev = w.Events();
  EXPECT_EQ(Types(ev), (std::vector<std::string>{"ADDED", "ADDED", "BOOKMARK"}));
  EXPECT_EQ(ev[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
  EXPECT_EQ(ev[2]["object"]["metadata"]["resourceVersion"], rv);
  EXPECT_EQ(curl.Get(std::string(kPods) + "?watch=1&sendInitialEvents=true").code, 400);
  EXPECT_EQ(curl.Get(std::string(kPods) + "?watch=1&resourceVersionMatch=Exact").code, 400);
}

TEST(FakeApiServerWatchTest, TooOldResourceVersionIsAnExpiredErrorEvent) {
  FakeApiServerOptions o;
  o.history = 5;
  auto server = StartServer(o);
  Curl curl(*server);
  std::string old = server->CurrentResourceVersion();
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(curl.Post(kPods, PodJson("default", "p" + std::to_string(i))).code, 201);
  }
  WatchStream w(*server, std::string(kPods) + "?watch=1&resourceVersion=" + old);
  ASSERT_TRUE(w.WaitDone(10));
  EXPECT_EQ(w.result(), CURLE_OK);
  EXPECT_EQ(w.http_code(), 200);
  std::vector<Json> ev = w.Events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["type"], "ERROR");
  EXPECT_EQ(ev[0]["object"]["kind"], "Status");
  EXPECT_EQ(ev[0]["object"]["code"], 410);
  EXPECT_EQ(ev[0]["object"]["reason"], "Expired");
  // Recent enough versions still work; Compact() forgets everything before now.
  std::string recent = std::to_string(std::stoull(server->CurrentResourceVersion()) - 2);
  WatchStream ok(*server, std::string(kPods) + "?watch=1&resourceVersion=" + recent);
  ASSERT_TRUE(ok.WaitEvents(2, 10));
  server->Compact();
  WatchStream after(*server, std::string(kPods) + "?watch=1&resourceVersion=" + recent);
  ASSERT_TRUE(after.WaitDone(10));
  EXPECT_EQ(after.Events().at(0)["object"]["code"], 410);
  WatchStream now(
      *server, std::string(kPods) + "?watch=1&resourceVersion=" + server->CurrentResourceVersion());
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() >= 2; }, 10));
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "new")).code, 201);
  ASSERT_TRUE(now.WaitEvents(1, 10));
  EXPECT_EQ(curl.Get(std::string(kPods) + "?watch=1&resourceVersion=x1").code, 400);
}

TEST(FakeApiServerWatchTest, SelectorsAndNamespacesFilterAndTrackMembership) {
  auto server = StartServer();
  Curl curl(*server);
  ASSERT_EQ(curl.Post("/api/v1/namespaces", {{"metadata", {{"name", "ml"}}}}).code, 201);
  std::string rv = server->CurrentResourceVersion();
  WatchStream web(*server,
                  std::string(kPods) + "?watch=1&labelSelector=app%3Dweb&resourceVersion=" + rv);
  WatchStream ml(*server, "/api/v1/namespaces/ml/pods?watch=1&resourceVersion=" + rv);
  WatchStream node(*server,
                   "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dn1&resourceVersion=" + rv);
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 3; }, 10));
  Json p = curl.Post(kPods, PodJson("default", "a", {{"app", "db"}})).json();
  ASSERT_EQ(curl.Post("/api/v1/namespaces/ml/pods", PodJson("ml", "m", {}, "n1")).code, 201);
  p["metadata"]["labels"]["app"] = "web";  // enters the selection
  p = curl.Put(std::string(kPods) + "/a", p).json();
  p["metadata"]["labels"]["tier"] = "1";
  p = curl.Put(std::string(kPods) + "/a", p).json();
  p["metadata"]["labels"]["app"] = "db";  // leaves it
  p = curl.Put(std::string(kPods) + "/a", p).json();
  ASSERT_EQ(curl.Delete(std::string(kPods) + "/a").code, 200);  // already outside: no event
  ASSERT_TRUE(web.WaitEvents(3, 10));
  ASSERT_TRUE(ml.WaitEvents(1, 10));
  ASSERT_TRUE(node.WaitEvents(1, 10));
  // A final marker proves nothing else was queued for these watches.
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "z", {{"app", "web"}})).code, 201);
  ASSERT_TRUE(web.WaitEvents(4, 10));
  EXPECT_EQ(Types(web.Events()),
            (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED", "ADDED"}));
  EXPECT_EQ(web.Events()[2]["object"]["metadata"]["labels"]["app"], "db");
  EXPECT_EQ(ml.Events().size(), 1u);
  EXPECT_EQ(node.Events().size(), 1u);
  EXPECT_EQ(node.Events()[0]["object"]["metadata"]["namespace"], "ml");
}

TEST(FakeApiServerWatchTest, CutWatchesLeavesAPartialLineThenEof) {
  auto server = StartServer();
  Curl curl(*server);
  std::string rv = server->CurrentResourceVersion();
  WatchStream w(*server, std::string(kPods) + "?watch=1&resourceVersion=" + rv);
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 1; }, 10));
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "whole")).code, 201);
  ASSERT_TRUE(w.WaitEvents(1, 10));
  server->CutWatches();
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "halved")).code, 201);
  ASSERT_TRUE(w.WaitDone(10));
  EXPECT_NE(w.result(), CURLE_OK);  // the chunked body never ended
  EXPECT_EQ(w.Events().size(), 1u);
  std::string partial = w.Partial();
  EXPECT_FALSE(partial.empty());
  EXPECT_EQ(partial.rfind("{\"type\":\"ADDED\"", 0), 0u) << partial;
  EXPECT_TRUE(Json::parse(partial, nullptr, false).is_discarded());
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 0; }, 10));
  // A watch opened after the cut is not affected; the client resumes from its last rv.
  WatchStream again(*server,
                    std::string(kPods) + "?watch=1&resourceVersion=" +
                        w.Events()[0]["object"]["metadata"]["resourceVersion"].get<std::string>());
  ASSERT_TRUE(again.WaitEvents(1, 10));
  EXPECT_EQ(again.Events()[0]["object"]["metadata"]["name"], "halved");
  ASSERT_EQ(curl.Post(kPods, PodJson("default", "later")).code, 201);
  ASSERT_TRUE(again.WaitEvents(2, 10));
  EXPECT_FALSE(again.done());
}

TEST(FakeApiServerWatchTest, EndWatchesAndTimeoutSecondsEndStreamsCleanly) {
  auto server = StartServer();
  WatchStream ended(*server, std::string(kPods) + "?watch=1");
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 1; }, 10));
  server->EndWatches();
  ASSERT_TRUE(ended.WaitDone(10));
  EXPECT_EQ(ended.result(), CURLE_OK);
  auto t0 = std::chrono::steady_clock::now();
  WatchStream timed(*server, std::string(kPods) + "?watch=1&timeoutSeconds=1");
  ASSERT_TRUE(timed.WaitDone(10));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(timed.result(), CURLE_OK);
  EXPECT_GE(took, 0.9);
  EXPECT_EQ(server->OpenWatches(), 0);
}

TEST(FakeApiServerWatchTest, ClientDisconnectClosesTheWatch) {
  auto server = StartServer();
  {
    WatchStream w(*server, std::string(kPods) + "?watch=1");
    ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 1; }, 10));
  }  // the client goes away without the server writing anything
  EXPECT_TRUE(PollUntil([&] { return server->OpenWatches() == 0; }, 10));
}

TEST(FakeApiServerWatchTest, ConcurrentWritersAndWatchersSeeEveryEventInOrder) {
  auto server = StartServer();
  Curl curl(*server);
  for (const char* ns : {"a", "b"}) {
    ASSERT_EQ(curl.Post("/api/v1/namespaces", {{"metadata", {{"name", ns}}}}).code, 201);
  }
  std::string rv = server->CurrentResourceVersion();
  std::vector<std::unique_ptr<WatchStream>> all, in_a;
  for (int i = 0; i < 3; ++i) {
    all.push_back(
        std::make_unique<WatchStream>(*server, "/api/v1/pods?watch=1&resourceVersion=" + rv));
    in_a.push_back(std::make_unique<WatchStream>(
        *server, "/api/v1/namespaces/a/pods?watch=1&resourceVersion=" + rv));
  }
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 6; }, 10));
  constexpr int kPerThread = 40;
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      Curl c(*server);
      std::string ns = t % 2 ? "a" : "b";
      for (int i = 0; i < kPerThread; ++i) {
        std::string name = "w" + std::to_string(t) + "-" + std::to_string(i);
        EXPECT_EQ(c.Post("/api/v1/namespaces/" + ns + "/pods", PodJson(ns, name)).code, 201);
      }
    });
  }
  for (auto& t : writers) t.join();
  for (auto& w : all) {
    ASSERT_TRUE(w->WaitEvents(4 * kPerThread, 30));
    std::vector<Json> ev = w->Events();
    EXPECT_EQ(ev.size(), 4u * kPerThread);
    for (size_t i = 1; i < ev.size(); ++i) ASSERT_LT(Rv(ev[i - 1]), Rv(ev[i]));
  }
  for (auto& w : in_a) {
    ASSERT_TRUE(w->WaitEvents(2 * kPerThread, 30));
    for (const Json& e : w->Events()) EXPECT_EQ(e["object"]["metadata"]["namespace"], "a");
  }
}

TEST(FakeApiServerWatchTest, StopWithOpenWatchesIsBounded) {
  auto server = StartServer();
  std::vector<std::unique_ptr<WatchStream>> watches;
  for (int i = 0; i < 20; ++i) {
    watches.push_back(std::make_unique<WatchStream>(*server, std::string(kPods) + "?watch=1"));
  }
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 20; }, 20));
  auto t0 = std::chrono::steady_clock::now();
  server->Stop();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 3.0);
  for (auto& w : watches) EXPECT_TRUE(w->WaitDone(10));
  // Direct access still works after Stop().
  EXPECT_TRUE(server->Create(PodJson("default", "after")).ok());
}

TEST(FakeApiServerWatchTest, ConnectionsBeyondTheLimitGet429) {
  FakeApiServerOptions o;
  o.max_connections = 2;
  auto server = StartServer(o);
  WatchStream w1(*server, std::string(kPods) + "?watch=1");
  WatchStream w2(*server, std::string(kPods) + "?watch=1");
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 2; }, 10));
  Curl curl(*server);
  HttpResult r = curl.Get(kPods);
  EXPECT_EQ(r.code, 429);
  EXPECT_EQ(r.Header("retry-after"), "1");
  w1.Cancel();
  ASSERT_TRUE(w1.WaitDone(10));
  EXPECT_TRUE(PollUntil([&] { return curl.Get(kPods).code == 200; }, 10));
}

TEST(FakeApiServerWatchTest, FailNextAppliesToWatchRequests) {
  auto server = StartServer();
  server->FailNext(1, 503, 0, "watch=");
  Curl curl(*server);
  EXPECT_EQ(curl.Get(kPods).code, 200);
  WatchStream failed(*server, std::string(kPods) + "?watch=1");
  ASSERT_TRUE(failed.WaitDone(10));
  EXPECT_EQ(failed.http_code(), 503);
  WatchStream ok(*server, std::string(kPods) + "?watch=1");
  ASSERT_TRUE(PollUntil([&] { return server->OpenWatches() == 1; }, 10));
}

}  // namespace
}  // namespace bulwark::k8s::testing
