// The client's contract suite against the fake API server (HTTPS, real sockets):
// verbs on core and custom resources, pagination and selectors, optimistic
// concurrency, retries with backoff, error mapping, auth, kubeconfig and watches.
// The informer and leader election have their own files.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "k8s/contract_test_util.h"
#include "k8s/testing/fake_apiserver_test_util.h"

namespace bulwark::k8s {
namespace {

using contract::ContractTest;
using contract::MakePod;
using contract::PollUntil;
using contract::Rv;
using contract::SecondsSince;

Json TrainJobCrd() {
  Json spec_schema = {
      {"type", "object"},
      {"required", {"nodes"}},
      {"properties",
       {{"nodes", {{"type", "integer"}, {"minimum", 1}}}, {"image", {{"type", "string"}}}}}};
  Json schema = {
      {"type", "object"},
      {"properties",
       {{"spec", spec_schema},
        {"status", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  Json crd = testing::CrdJson("bulwark.dev", "trainjobs", "TrainJob", "v1alpha1", schema,
                              {{"subresources", {{"status", Json::object()}}}});
  crd["spec"]["names"]["singular"] = "trainjob";
  crd["spec"]["names"]["listKind"] = "TrainJobList";
  return crd;
}

Json TrainJob(const std::string& name, int nodes) {
  return {{"apiVersion", "bulwark.dev/v1alpha1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}, {"namespace", "ml"}}},
          {"spec", {{"nodes", nodes}, {"image", "trainer:1"}}}};
}

TEST_F(ContractTest, CrudOnCoreResources) {
  auto created = client_->Create(Pods(), "default", MakePod("p1", "default", {{"app", "a"}}));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE(Uid(*created).empty());
  EXPECT_FALSE(ResourceVersion(*created).empty());

  auto got = client_->Get(Pods(), "default", "p1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Uid(*got), Uid(*created));

  Json next = *got;
  next["metadata"]["labels"]["tier"] = "gold";
  auto updated = client_->Update(Pods(), "default", next);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_GT(Rv(ResourceVersion(*updated)), Rv(ResourceVersion(*got)));

  auto merged = client_->Patch(Pods(), "default", "p1", {{"metadata", {{"labels", {{"m", "1"}}}}}});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ((*merged)["metadata"]["labels"], Json({{"app", "a"}, {"tier", "gold"}, {"m", "1"}}));

  // Strategic merge: containers merge by name instead of replacing the list.
  auto strategic = client_->Patch(Pods(), "default", "p1",
                                  {{"spec", {{"containers", {{{"name", "c"}, {"image", "b:2"}}}}}}},
                                  PatchType::kStrategicMerge);
  ASSERT_TRUE(strategic.ok()) << strategic.status().ToString();
  EXPECT_EQ((*strategic)["spec"]["containers"][0]["image"], "b:2");

  auto jp = client_->Patch(
      Pods(), "default", "p1",
      Json::array({{{"op", "replace"}, {"path", "/metadata/labels/m"}, {"value", "2"}}}),
      PatchType::kJson);
  ASSERT_TRUE(jp.ok()) << jp.status().ToString();
  EXPECT_EQ((*jp)["metadata"]["labels"]["m"], "2");

  DeleteOptions wrong;
  wrong.precondition_uid = "not-the-uid";
  EXPECT_FALSE(client_->Delete(Pods(), "default", "p1", wrong).ok());
  DeleteOptions right;
  right.precondition_uid = Uid(*created);
  right.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(Pods(), "default", "p1", right).ok());
  EXPECT_TRUE(IsNotFound(client_->Get(Pods(), "default", "p1").status()));
  EXPECT_TRUE(IsNotFound(client_->Delete(Pods(), "default", "p1")));

  // Cluster-scoped.
  auto node = client_->Create(
      Nodes(), "", {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}}});
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(KeyOf(*node), "n1");
  EXPECT_TRUE(client_->Get(Nodes(), "", "n1").ok());
}

TEST_F(ContractTest, CrudOnCustomResourcesWithStatusSubresource) {
  ASSERT_TRUE(client_->Create(CustomResourceDefinitions(), "", TrainJobCrd()).ok());
  auto tj = client_->Create(TrainJobs(), "ml", TrainJob("a", 2));
  ASSERT_TRUE(tj.ok()) << tj.status().ToString();

  Json st = *tj;
  st["status"] = {{"phase", "Running"}, {"restarts", 1}};
  st["spec"]["nodes"] = 99;  // ignored by the status endpoint
  auto after_status = client_->UpdateStatus(TrainJobs(), "ml", st);
  ASSERT_TRUE(after_status.ok()) << after_status.status().ToString();
  EXPECT_EQ((*after_status)["status"]["phase"], "Running");
  EXPECT_EQ((*after_status)["spec"]["nodes"], 2);

  Json sp = *after_status;
  sp["spec"]["nodes"] = 4;
  sp["status"]["phase"] = "Ignored";  // ignored by the main endpoint
  auto after_spec = client_->Update(TrainJobs(), "ml", sp);
  ASSERT_TRUE(after_spec.ok()) << after_spec.status().ToString();
  EXPECT_EQ((*after_spec)["spec"]["nodes"], 4);
  EXPECT_EQ((*after_spec)["status"]["phase"], "Running");

  auto status_patch = client_->Patch(TrainJobs(), "ml", "a", {{"status", {{"step", 42}}}},
                                     PatchType::kMerge, "status");
  ASSERT_TRUE(status_patch.ok()) << status_patch.status().ToString();
  EXPECT_EQ((*status_patch)["status"]["step"], 42);

  // The CRD's schema is enforced: a clear 422 naming the field.
  auto bad = client_->Create(TrainJobs(), "ml", TrainJob("b", 0));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(
                "POST /apis/bulwark.dev/v1alpha1/namespaces/ml/trainjobs: 422 Invalid"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("spec.nodes"), std::string::npos);

  auto list = client_->List(TrainJobs(), "ml");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->items.size(), 1u);
  EXPECT_EQ(list->items[0]["kind"], "TrainJob");
  EXPECT_EQ(list->items[0]["apiVersion"], "bulwark.dev/v1alpha1");
  ASSERT_TRUE(client_->Delete(TrainJobs(), "ml", "a").ok());
  EXPECT_TRUE(IsNotFound(client_->Get(TrainJobs(), "ml", "a").status()));
}

TEST_F(ContractTest, ListFollowsPagesAndAppliesSelectors) {
  for (int i = 0; i < 25; ++i) {
    Json labels = {{"app", i < 15 ? "x" : "y"}};
    ASSERT_TRUE(
        server_->Create(MakePod("p" + std::to_string(i), "default", labels, i % 2 ? "n1" : "n2"))
            .ok());
  }
  ASSERT_TRUE(server_->Create(MakePod("other", "other")).ok());
  ListOptions o;
  o.limit = 4;
  o.label_selector = "app=x";
  auto x = client_->List(Pods(), "default", o);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->items.size(), 15u);
  EXPECT_FALSE(x->resource_version.empty());
  int pages = 0;
  for (const auto& r : server_->Requests()) {
    pages += r.method == "GET" && r.path == "/api/v1/namespaces/default/pods";
  }
  EXPECT_EQ(pages, 4);  // 4 + 4 + 4 + 3
  std::set<std::string> names;
  for (const auto& p : x->items) names.insert(Name(p));
  EXPECT_EQ(names.size(), 15u);  // no page repeated an item

  o.limit = 500;
  o.label_selector = "app in (x,y),app!=x";
  o.field_selector = "spec.nodeName=n1";
  auto y = client_->List(Pods(), "default", o);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->items.size(), 5u);  // odd i in 15..24
  for (const auto& p : y->items) EXPECT_EQ(p["spec"]["nodeName"], "n1");

  auto all = client_->List(Pods(), "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->items.size(), 26u);

  o = ListOptions();
  o.label_selector = "app in (x";
  auto bad = client_->List(Pods(), "default", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("GET /api/v1/namespaces/default/pods: 400"),
            std::string::npos);
}

TEST_F(ContractTest, UpdateWithRetryResolvesARealConflict) {
  ASSERT_TRUE(server_->Create(MakePod("p")).ok());
  auto other = NewClient();
  int calls = 0;
  auto res = client_->UpdateWithRetry(Pods(), "default", "p", [&](Json& obj) {
    if (++calls == 1) {
      // A second writer changes the object between our read and our write.
      auto theirs = other->Get(Pods(), "default", "p");
      if (!theirs.ok()) return theirs.status();
      (*theirs)["metadata"]["labels"]["writer"] = "other";
      auto w = other->Update(Pods(), "default", *theirs);
      if (!w.ok()) return w.status();
    }
    obj["metadata"]["labels"]["mine"] = "yes";
    return Status::Ok();
  });
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(SettledCount("PUT", "/api/v1/namespaces/default/pods/p", 3), 3);  // theirs, 409, ok
  auto final_obj = server_->Get(Pods(), "default", "p");
  ASSERT_TRUE(final_obj.ok());
  EXPECT_EQ((*final_obj)["metadata"]["labels"]["writer"], "other");  // nothing lost
  EXPECT_EQ((*final_obj)["metadata"]["labels"]["mine"], "yes");

  // An unchanged object is not written.
  const uint64_t sent = client_->Stats().requests;
  auto same = client_->UpdateWithRetry(Pods(), "default", "p", [](Json&) { return Status::Ok(); });
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(client_->Stats().requests - sent, 1u);  // the GET only
  // mutate's error aborts.
  auto aborted = client_->UpdateWithRetry(Pods(), "default", "p",
                                          [](Json&) { return FailedPrecondition("no"); });
  EXPECT_EQ(aborted.status().code(), Code::kFailedPrecondition);

  // A stale resourceVersion is a 409 -> kAborted naming verb, path and reason.
  Json stale = *final_obj;
  stale["metadata"]["resourceVersion"] = "1";
  auto conflict = client_->Update(Pods(), "default", stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_TRUE(IsConflict(conflict.status()));
  EXPECT_EQ(
      conflict.status().message().rfind("PUT /api/v1/namespaces/default/pods/p: 409 Conflict: ", 0),
      0u)
      << conflict.status().message();
}

TEST_F(ContractTest, TooManyRequestsHonoursRetryAfter) {
  ASSERT_TRUE(server_->Create(MakePod("p")).ok());
  const std::string path = "/api/v1/namespaces/default/pods/p";
  server_->FailNext(2, 429, 1, "GET " + path);  // Retry-After: 1 (whole seconds)
  auto t0 = std::chrono::steady_clock::now();
  auto got = client_->Get(Pods(), "default", "p");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // Two Retry-After waits of 1 s, where the jittered backoff alone would be < 0.1 s.
  EXPECT_GE(SecondsSince(t0), 1.95);
  EXPECT_EQ(SettledCount("GET", path, 3), 3);
  EXPECT_EQ(client_->Stats().retries, 2u);

  // A mutation is retried on 429 too: it was not applied.
  server_->FailNext(1, 429, 1, "POST");
  ASSERT_TRUE(client_->Create(Pods(), "default", MakePod("q")).ok());
  EXPECT_EQ(SettledCount("POST", "/api/v1/namespaces/default/pods", 2), 2);

  // Retry-After is capped by backoff_max_s.
  ClientConfig capped = FastConfig();
  capped.backoff_max_s = 0.2;
  auto c = NewClient(capped);
  server_->FailNext(1, 429, 30, "GET " + path);
  t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c->Get(Pods(), "default", "p").ok());
  EXPECT_GE(SecondsSince(t0), 0.19);
  EXPECT_LT(SecondsSince(t0), 5);
}

TEST_F(ContractTest, ServerErrorsAreRetriedWithBackoffExceptForUnsafeMutations) {
  ASSERT_TRUE(server_->Create(MakePod("p")).ok());
  const std::string path = "/api/v1/namespaces/default/pods/p";
  ClientConfig cfg = FastConfig();
  cfg.backoff_initial_s = 0.1;
  cfg.max_attempts = 3;
  auto c = NewClient(cfg);
  server_->FailNext(1, 500, 0, "GET " + path);
  server_->FailNext(1, 503, 0, "GET " + path);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c->Get(Pods(), "default", "p").ok());
  EXPECT_GE(SecondsSince(t0), 0.05 + 0.1 - 0.01);  // jittered 0.1 then 0.2, at least half
  EXPECT_EQ(SettledCount("GET", path, 3), 3);

  // Retries run out: kUnavailable naming the attempts.
  server_->FailNext(5, 503, 0, "GET " + path);
  auto failed = c->Get(Pods(), "default", "p");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_NE(failed.status().message().find("503 ServiceUnavailable"), std::string::npos);
  EXPECT_NE(failed.status().message().find("after 3 attempts"), std::string::npos);
  EXPECT_EQ(SettledCount("GET", path, 6), 6);

  // A 500 on POST may have been applied: surfaced, not repeated.
  const std::string coll = "/api/v1/namespaces/default/pods";
  server_->FailNext(1, 500, 0, "POST " + coll);
  const uint64_t sent = c->Stats().requests;
  auto post = c->Create(Pods(), "default", MakePod("q"));
  EXPECT_EQ(c->Stats().requests - sent, 1u);
  ASSERT_FALSE(post.ok());
  EXPECT_EQ(post.status().code(), Code::kUnavailable);
  EXPECT_EQ(SettledCount("POST", coll, 1), 1);
  // A 503 on POST was not applied: retried.
  server_->FailNext(2, 503, 0, "POST " + coll);
  ASSERT_TRUE(c->Create(Pods(), "default", MakePod("q")).ok());
  EXPECT_EQ(SettledCount("POST", coll, 4), 4);
}

TEST_F(ContractTest, ErrorsMapToDocumentedCodes) {
  auto missing = client_->Get(Pods(), "default", "missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message().rfind(
                "GET /api/v1/namespaces/default/pods/missing: 404 NotFound", 0),
            0u)
      << missing.status().message();

  ASSERT_TRUE(client_->Create(Pods(), "default", MakePod("p")).ok());
  auto dup = client_->Create(Pods(), "default", MakePod("p"));
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(IsAlreadyExists(dup.status())) << dup.status().ToString();
  EXPECT_NE(dup.status().message().find("409 AlreadyExists"), std::string::npos);

  auto invalid = client_->Create(Pods(), "default", MakePod("Not_A_DNS_Name"));
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), Code::kInvalidArgument) << invalid.status().ToString();

  server_->FailNext(1, 403, 0, "GET");
  auto forbidden = client_->Get(Pods(), "default", "p");
  EXPECT_EQ(forbidden.status().code(), Code::kPermissionDenied) << forbidden.status().ToString();
  EXPECT_NE(forbidden.status().message().find("403 Forbidden"), std::string::npos);

  // A list from a compacted resourceVersion: 410 -> kOutOfRange.
  const std::string old_rv = server_->CurrentResourceVersion();
  ASSERT_TRUE(server_->Create(MakePod("q")).ok());
  server_->Compact();
  ListOptions o;
  o.resource_version = old_rv;
  auto gone = client_->List(Pods(), "default", o);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(IsGone(gone.status())) << gone.status().ToString();
  EXPECT_NE(gone.status().message().find("410"), std::string::npos);
}

TEST_F(ContractTest, BearerTokenIsRequiredAndRotatedTokensAreReRead) {
  testing::FakeApiServerOptions opts;
  opts.token = "s3cret";
  StartServer(opts);
  ClientConfig anon = FastConfig();
  anon.token = "";
  auto c = NewClient(anon);
  auto r = c->List(Pods(), "default");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kPermissionDenied) << r.status().ToString();
  EXPECT_NE(r.status().message().find("401"), std::string::npos);
  EXPECT_EQ(r.status().message().find("s3cret"), std::string::npos);
  EXPECT_TRUE(client_->List(Pods(), "default").ok());  // the configured token

  // A projected token rotated on disk: the 401 re-reads token_file once.
  char tmpl[] = "/tmp/bw-token-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << "s3cret\n";
  ClientConfig rotated = FastConfig();
  rotated.token = "expired-token";
  rotated.token_file = tmpl;
  auto rc = NewClient(rotated);
  EXPECT_TRUE(rc->List(Pods(), "default").ok());
  EXPECT_EQ(rc->Stats().requests, 2u);  // 401, then the re-read token
  std::filesystem::remove(tmpl);
}

TEST_F(ContractTest, LoadKubeConfigWrittenByTheServer) {
  char tmpl[] = "/tmp/bw-kubeconfig-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/config";
  ASSERT_TRUE(server_->WriteKubeconfig(path).ok());
  auto cfg = LoadKubeConfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, server_->url());
  auto c = Client::Create(*cfg);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Create(Pods(), "", MakePod("via-kubeconfig", cfg->namespace_)).ok());
  EXPECT_TRUE((*c)->Get(Pods(), "", "via-kubeconfig").ok());
  std::filesystem::remove_all(tmpl);

  // The wrong CA fails verification with a hint, not a retry storm.
  ClientConfig wrong = FastConfig();
  wrong.ca_pem = "";  // system store: does not know the fake CA
  auto w = NewClient(wrong);
  auto r = w->List(Pods(), "default");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CA"), std::string::npos) << r.status().message();
  EXPECT_EQ(w->Stats().requests, 1u);
}

// Collects a watch's events on a thread until cancelled.
class WatchCollector {
 public:
  WatchCollector(Client* c, const std::string& ns, WatchOptions o) {
    thread_ = std::thread([this, c, ns, o] {
      Status s = c->Watch(
          Pods(), ns, o,
          [this](const WatchEvent& e) {
            std::lock_guard<std::mutex> l(mu_);
            events_.push_back(e);
            return true;
          },
          &cancel_);
      std::lock_guard<std::mutex> l(mu_);
      status_ = s;
      done_ = true;
    });
  }
  ~WatchCollector() { (void)Finish(); }
  Status Finish() {
    cancel_ = true;
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  bool done() {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  std::vector<WatchEvent> Events(bool with_bookmarks = false) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<WatchEvent> out;
    for (const auto& e : events_) {
      if (with_bookmarks || e.type != EventType::kBookmark) out.push_back(e);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<WatchEvent> events_;
  Status status_;
  bool done_ = false;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

TEST_F(ContractTest, WatchDeliversChangesInOrderAndBookmarksAdvance) {
  testing::FakeApiServerOptions opts;
  opts.bookmark_interval_s = 0.1;
  StartServer(opts);
  WatchOptions o;
  o.resource_version = server_->CurrentResourceVersion();
  WatchCollector w(client_.get(), "default", o);
  ASSERT_TRUE(PollUntil([&] { return server_->OpenWatches() == 1; }));
  auto p = server_->Create(MakePod("p"));
  ASSERT_TRUE(p.ok());
  Json changed = *p;
  changed["metadata"]["labels"]["k"] = "v";
  ASSERT_TRUE(server_->Update(changed).ok());
  ASSERT_TRUE(server_->Delete(Pods(), "default", "p").ok());
  ASSERT_TRUE(PollUntil([&] { return w.Events().size() >= 3; }));
  // A change elsewhere is not delivered here, but a bookmark moves past it.
  auto elsewhere = server_->Create(MakePod("q", "other"));
  ASSERT_TRUE(elsewhere.ok());
  const uint64_t elsewhere_rv = Rv(ResourceVersion(*elsewhere));
  ASSERT_TRUE(PollUntil([&] {
    for (const auto& e : w.Events(true)) {
      if (e.type == EventType::kBookmark && Rv(ResourceVersion(e.object)) >= elsewhere_rv)
        return true;
    }
    return false;
  }));
  EXPECT_TRUE(w.Finish().ok());
  auto ev = w.Events();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].type, EventType::kAdded);
  EXPECT_EQ(ev[1].type, EventType::kModified);
  EXPECT_EQ(ev[1].object["metadata"]["labels"]["k"], "v");
  EXPECT_EQ(ev[2].type, EventType::kDeleted);
  EXPECT_LT(Rv(ResourceVersion(ev[0].object)), Rv(ResourceVersion(ev[1].object)));
  EXPECT_LT(Rv(ResourceVersion(ev[1].object)), Rv(ResourceVersion(ev[2].object)));
  uint64_t last = 0;
  for (const auto& e : w.Events(true)) {  // bookmarks never go backwards
    EXPECT_GE(Rv(ResourceVersion(e.object)), last);
    last = Rv(ResourceVersion(e.object));
  }
  EXPECT_GE(client_->Stats().watch_events, 4u);
}

TEST_F(ContractTest, WatchCutMidEventDeliversNoPartialEventAndResumes) {
  const std::string rv0 = server_->CurrentResourceVersion();
  WatchOptions o;
  o.resource_version = rv0;
  o.allow_bookmarks = false;
  std::unique_ptr<WatchCollector> w = std::make_unique<WatchCollector>(client_.get(), "default", o);
  ASSERT_TRUE(PollUntil([&] { return server_->OpenWatches() == 1; }));
  ASSERT_TRUE(server_->Create(MakePod("before")).ok());
  ASSERT_TRUE(PollUntil([&] { return w->Events().size() == 1; }));
  const std::string seen_rv = ResourceVersion(w->Events()[0].object);
  server_->CutWatches();
  ASSERT_TRUE(server_->Create(MakePod("cut")).ok());
  ASSERT_TRUE(PollUntil([&] { return w->done(); }));
  Status s = w->Finish();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  ASSERT_EQ(w->Events().size(), 1u);  // "cut" was half-written: not delivered
  EXPECT_EQ(Name(w->Events()[0].object), "before");

  // Resuming from the last delivered version yields the cut event, once.
  o.resource_version = seen_rv;
  w = std::make_unique<WatchCollector>(client_.get(), "default", o);
  ASSERT_TRUE(PollUntil([&] { return w->Events().size() >= 1; }));
  EXPECT_TRUE(w->Finish().ok());
  auto ev = w->Events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(Name(ev[0].object), "cut");
  EXPECT_EQ(ev[0].type, EventType::kAdded);
}

TEST_F(ContractTest, WatchFromCompactedVersionIsGone) {
  const std::string old_rv = server_->CurrentResourceVersion();
  ASSERT_TRUE(server_->Create(MakePod("p")).ok());
  server_->Compact();
  WatchOptions o;
  o.resource_version = old_rv;
  Status s = client_->Watch(Pods(), "default", o, [](const WatchEvent&) { return true; });
  EXPECT_TRUE(IsGone(s)) << s.ToString();
  EXPECT_EQ(s.message().rfind("WATCH /api/v1/namespaces/default/pods: 410", 0), 0u) << s.message();
}

TEST_F(ContractTest, WatchEndsWhenTheServerEndsItOrTheConsumerStops) {
  WatchOptions o;
  o.resource_version = server_->CurrentResourceVersion();
  o.timeout_seconds = 1;  // the server closes the stream cleanly after ~1 s
  auto t0 = std::chrono::steady_clock::now();
  Status s = client_->Watch(Pods(), "default", o, [](const WatchEvent&) { return true; });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(SecondsSince(t0), 10);

  // on_event returning false ends the watch with OK.
  ASSERT_TRUE(server_->Create(MakePod("a")).ok());
  ASSERT_TRUE(server_->Create(MakePod("b")).ok());
  o.resource_version = "0";  // synthetic ADDED for both
  o.timeout_seconds = 300;
  int seen = 0;
  s = client_->Watch(Pods(), "default", o, [&](const WatchEvent& e) {
    ++seen;
    return e.type == EventType::kBookmark;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace bulwark::k8s
