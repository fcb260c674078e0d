// The client's contract suite against a real kube-apiserver (the binary's shared
// control plane, k8s/testing/cluster.h): verbs on core and custom resources,
// pagination and selectors, optimistic concurrency, error mapping, client-certificate
// and bearer-token authentication with RBAC, kubeconfig and watches. The faults a real
// server cannot be made to produce on demand (429/5xx with Retry-After, a stream cut
// mid-event) come from a FaultProxy in front of it, which also counts requests. The
// informer and leader election have their own files.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "k8s/contract_test_util.h"
#include "k8s/testing/pki.h"

namespace bulwark::k8s {
namespace {

using contract::ConfigMaps;
using contract::ContractTest;
using contract::MakeConfigMap;
using contract::MakePod;
using contract::PollUntil;
using contract::Rv;
using contract::SecondsSince;

// A TrainJob-like CRD in API group `group` (unique per test: CRDs are cluster-scoped).
Json TestTrainJobCrd(const std::string& group) {
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
  Json crd = testing::CrdJson(group, "trainjobs", "TrainJob", "v1alpha1", schema,
                              {{"subresources", {{"status", Json::object()}}}});
  crd["spec"]["names"]["listKind"] = "TrainJobList";
  return crd;
}

Json TestTrainJob(const std::string& group, const std::string& ns, const std::string& name,
                  int nodes) {
  return {{"apiVersion", group + "/v1alpha1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"nodes", nodes}, {"image", "trainer:1"}}}};
}

// Writes `content` to `path` (replacing it).
void WriteText(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
  out.close();
  ASSERT_TRUE(out.good()) << path;
}

// The statuses the proxy forwarded (not injected) for GET `path`, in order.
std::vector<int> ForwardedGetStatuses(const testing::FaultProxy& proxy, const std::string& path) {
  std::vector<int> out;
  for (const auto& r : proxy.Requests()) {
    if (r.method == "GET" && r.path == path && !r.injected) out.push_back(r.status);
  }
  return out;
}

TEST_F(ContractTest, CrudOnCoreResources) {
  auto created = client_->Create(Pods(), ns_, MakePod("p1", ns_, {{"app", "a"}}));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE(Uid(*created).empty());
  EXPECT_FALSE(ResourceVersion(*created).empty());

  auto got = client_->Get(Pods(), ns_, "p1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Uid(*got), Uid(*created));

  Json next = *got;
  next["metadata"]["labels"]["tier"] = "gold";
  auto updated = client_->Update(Pods(), ns_, next);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_GT(Rv(ResourceVersion(*updated)), Rv(ResourceVersion(*got)));

  auto merged = client_->Patch(Pods(), ns_, "p1", {{"metadata", {{"labels", {{"m", "1"}}}}}});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ((*merged)["metadata"]["labels"], Json({{"app", "a"}, {"tier", "gold"}, {"m", "1"}}));

  // Strategic merge: containers merge by name instead of replacing the list.
  auto strategic = client_->Patch(Pods(), ns_, "p1",
                                  {{"spec", {{"containers", {{{"name", "c"}, {"image", "b:2"}}}}}}},
                                  PatchType::kStrategicMerge);
  ASSERT_TRUE(strategic.ok()) << strategic.status().ToString();
  ASSERT_EQ((*strategic)["spec"]["containers"].size(), 1u);
  EXPECT_EQ((*strategic)["spec"]["containers"][0]["image"], "b:2");

  auto jp = client_->Patch(
      Pods(), ns_, "p1",
      Json::array({{{"op", "replace"}, {"path", "/metadata/labels/m"}, {"value", "2"}}}),
      PatchType::kJson);
  ASSERT_TRUE(jp.ok()) << jp.status().ToString();
  EXPECT_EQ((*jp)["metadata"]["labels"]["m"], "2");

  // A UID precondition that does not hold: the real server answers 409 Conflict.
  DeleteOptions wrong;
  wrong.precondition_uid = "not-the-uid";
  Status wrong_delete = client_->Delete(Pods(), ns_, "p1", wrong);
  EXPECT_TRUE(IsConflict(wrong_delete)) << wrong_delete.ToString();
  EXPECT_TRUE(client_->Get(Pods(), ns_, "p1").ok());
  // An unscheduled pod is deleted at once (no kubelet has to confirm it).
  DeleteOptions right;
  right.precondition_uid = Uid(*created);
  right.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(Pods(), ns_, "p1", right).ok());
  EXPECT_TRUE(IsNotFound(client_->Get(Pods(), ns_, "p1").status()));
  EXPECT_TRUE(IsNotFound(client_->Delete(Pods(), ns_, "p1")));

  // Cluster-scoped (a name of this test's own).
  const std::string node_name = ns_ + "-n1";
  auto node = client_->Create(
      Nodes(), "", {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node_name}}}});
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  EXPECT_EQ(KeyOf(*node), node_name);
  EXPECT_TRUE(client_->Get(Nodes(), "", node_name).ok());
  EXPECT_TRUE(client_->Delete(Nodes(), "", node_name).ok());
}

TEST_F(ContractTest, CrudOnCustomResourcesWithStatusSubresource) {
  const std::string group = ns_ + ".contract.bulwark.dev";
  const Resource jobs{group, "v1alpha1", "trainjobs", "TrainJob", true};
  auto crd = client_->Create(CustomResourceDefinitions(), "", TestTrainJobCrd(group));
  ASSERT_TRUE(crd.ok()) << crd.status().ToString();
  // The real server serves the new resource only once the CRD is Established.
  Status installed = testing::InstallCrd(admin_.get(), TestTrainJobCrd(group));
  ASSERT_TRUE(installed.ok()) << installed.ToString();
  auto tj = client_->Create(jobs, ns_, TestTrainJob(group, ns_, "a", 2));
  ASSERT_TRUE(tj.ok()) << tj.status().ToString();

  Json st = *tj;
  st["status"] = {{"phase", "Running"}, {"restarts", 1}};
  st["spec"]["nodes"] = 99;  // ignored by the status endpoint
  auto after_status = client_->UpdateStatus(jobs, ns_, st);
  ASSERT_TRUE(after_status.ok()) << after_status.status().ToString();
  EXPECT_EQ((*after_status)["status"]["phase"], "Running");
  EXPECT_EQ((*after_status)["spec"]["nodes"], 2);

  Json sp = *after_status;
  sp["spec"]["nodes"] = 4;
  sp["status"]["phase"] = "Ignored";  // ignored by the main endpoint
  auto after_spec = client_->Update(jobs, ns_, sp);
  ASSERT_TRUE(after_spec.ok()) << after_spec.status().ToString();
  EXPECT_EQ((*after_spec)["spec"]["nodes"], 4);
  EXPECT_EQ((*after_spec)["status"]["phase"], "Running");

  auto status_patch =
      client_->Patch(jobs, ns_, "a", {{"status", {{"step", 42}}}}, PatchType::kMerge, "status");
  ASSERT_TRUE(status_patch.ok()) << status_patch.status().ToString();
  EXPECT_EQ((*status_patch)["status"]["step"], 42);
  EXPECT_EQ((*status_patch)["status"]["phase"], "Running");

  // The CRD's schema is enforced: a 422 naming the field.
  auto bad = client_->Create(jobs, ns_, TestTrainJob(group, ns_, "b", 0));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(
      bad.status().message().rfind(
          "POST /apis/" + group + "/v1alpha1/namespaces/" + ns_ + "/trainjobs: 422 Invalid: ", 0),
      0u)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("spec.nodes"), std::string::npos);

  auto list = client_->List(jobs, ns_);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->items.size(), 1u);
  EXPECT_EQ(list->items[0]["kind"], "TrainJob");
  EXPECT_EQ(list->items[0]["apiVersion"], group + "/v1alpha1");
  ASSERT_TRUE(client_->Delete(jobs, ns_, "a").ok());
  EXPECT_TRUE(IsNotFound(client_->Get(jobs, ns_, "a").status()));
  EXPECT_TRUE(admin_->Delete(CustomResourceDefinitions(), "", "trainjobs." + group).ok());
}

TEST_F(ContractTest, ListFollowsPagesAndAppliesSelectors) {
  const std::string other = NewNamespace(ns_ + "-other");
  ASSERT_FALSE(other.empty());
  for (int i = 0; i < 25; ++i) {
    Json labels = {{"app", i < 15 ? "x" : "y"}, {"suite", ns_}};
    ASSERT_TRUE(admin_
                    ->Create(Pods(), ns_,
                             MakePod("p" + std::to_string(i), ns_, labels, i % 2 ? "n1" : "n2"))
                    .ok());
  }
  ASSERT_TRUE(admin_->Create(Pods(), other, MakePod("other", other, {{"suite", ns_}})).ok());
  const std::string path = "/api/v1/namespaces/" + ns_ + "/pods";
  ListOptions o;
  o.limit = 4;
  o.label_selector = "app=x";
  auto x = client_->List(Pods(), ns_, o);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->items.size(), 15u);
  EXPECT_FALSE(x->resource_version.empty());
  EXPECT_EQ(SettledCount("GET", path, 4), 4);  // 4 + 4 + 4 + 3
  int continued = 0;
  for (const auto& r : proxy_->Requests()) {
    continued += r.path == path && r.query.find("continue=") != std::string::npos;
  }
  EXPECT_EQ(continued, 3);
  std::set<std::string> names;
  for (const auto& p : x->items) names.insert(Name(p));
  EXPECT_EQ(names.size(), 15u);  // no page repeated an item

  o.limit = 500;
  o.label_selector = "app in (x,y),app!=x";
  o.field_selector = "spec.nodeName=n1";
  auto y = client_->List(Pods(), ns_, o);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->items.size(), 5u);  // odd i in 15..24
  for (const auto& p : y->items) EXPECT_EQ(p["spec"]["nodeName"], "n1");

  // All namespaces (the shared server holds other tests' pods: select this test's).
  o = ListOptions();
  o.label_selector = "suite=" + ns_;
  auto all = client_->List(Pods(), "", o);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->items.size(), 26u);

  o = ListOptions();
  o.label_selector = "app in (x";
  auto bad = client_->List(Pods(), ns_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << bad.status().ToString();
  EXPECT_EQ(bad.status().message().rfind("GET " + path + ": 400 BadRequest", 0), 0u)
      << bad.status().message();
}

TEST_F(ContractTest, UpdateWithRetryResolvesARealConflict) {
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("p", ns_)).ok());
  const std::string path = "/api/v1/namespaces/" + ns_ + "/pods/p";
  auto other = NewClient();
  int calls = 0;
  auto res = client_->UpdateWithRetry(Pods(), ns_, "p", [&](Json& obj) {
    if (++calls == 1) {
      // A second writer changes the object between our read and our write.
      auto theirs = other->Get(Pods(), ns_, "p");
      if (!theirs.ok()) return theirs.status();
      (*theirs)["metadata"]["labels"]["writer"] = "other";
      auto w = other->Update(Pods(), ns_, *theirs);
      if (!w.ok()) return w.status();
    }
    obj["metadata"]["labels"]["mine"] = "yes";
    return Status::Ok();
  });
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(SettledCount("PUT", path, 3), 3);  // theirs, 409, ok
  auto final_obj = admin_->Get(Pods(), ns_, "p");
  ASSERT_TRUE(final_obj.ok());
  EXPECT_EQ((*final_obj)["metadata"]["labels"]["writer"], "other");  // nothing lost
  EXPECT_EQ((*final_obj)["metadata"]["labels"]["mine"], "yes");

  // An unchanged object is not written.
  const uint64_t sent = client_->Stats().requests;
  auto same = client_->UpdateWithRetry(Pods(), ns_, "p", [](Json&) { return Status::Ok(); });
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(client_->Stats().requests - sent, 1u);  // the GET only
  // mutate's error aborts.
  auto aborted =
      client_->UpdateWithRetry(Pods(), ns_, "p", [](Json&) { return FailedPrecondition("no"); });
  EXPECT_EQ(aborted.status().code(), Code::kFailedPrecondition);

  // A stale resourceVersion is a 409 -> kAborted naming verb, path and reason.
  Json stale = *final_obj;
  stale["metadata"]["resourceVersion"] = "1";
  auto conflict = client_->Update(Pods(), ns_, stale);
  ASSERT_FALSE(conflict.ok());
  EXPECT_TRUE(IsConflict(conflict.status()));
  EXPECT_EQ(conflict.status().message().rfind("PUT " + path + ": 409 Conflict: ", 0), 0u)
      << conflict.status().message();
}

TEST_F(ContractTest, TooManyRequestsHonoursRetryAfter) {
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("p", ns_)).ok());
  const std::string path = "/api/v1/namespaces/" + ns_ + "/pods/p";
  proxy_->FailNext(2, 429, 1, "GET " + path);  // Retry-After: 1 (whole seconds)
  double t0 = retry_clock_.NowMono();
  auto got = client_->Get(Pods(), ns_, "p");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // Two Retry-After waits of 1 s, where the jittered backoff alone would be < 0.1 s.
  EXPECT_NEAR(retry_clock_.NowMono() - t0, 2.0, 1e-6);
  EXPECT_EQ(SettledCount("GET", path, 3), 3);
  EXPECT_EQ(client_->Stats().retries, 2u);

  // A mutation is retried on 429 too: it was not applied.
  const std::string coll = "/api/v1/namespaces/" + ns_ + "/pods";
  proxy_->FailNext(1, 429, 1, "POST " + coll);
  ASSERT_TRUE(client_->Create(Pods(), ns_, MakePod("q", ns_)).ok());
  EXPECT_EQ(SettledCount("POST", coll, 2), 2);

  // Retry-After is capped by backoff_max_s.
  ClientConfig capped = FastConfig();
  capped.backoff_max_s = 0.2;
  auto c = NewClient(capped);
  proxy_->FailNext(1, 429, 30, "GET " + path);
  t0 = retry_clock_.NowMono();
  ASSERT_TRUE(c->Get(Pods(), ns_, "p").ok());
  EXPECT_NEAR(retry_clock_.NowMono() - t0, 0.2, 1e-6);
}

TEST_F(ContractTest, ServerErrorsAreRetriedWithBackoffExceptForUnsafeMutations) {
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("p", ns_)).ok());
  const std::string path = "/api/v1/namespaces/" + ns_ + "/pods/p";
  ClientConfig cfg = FastConfig();
  cfg.backoff_initial_s = 0.1;
  cfg.max_attempts = 3;
  auto c = NewClient(cfg);
  proxy_->FailNext(1, 500, 0, "GET " + path);
  proxy_->FailNext(1, 503, 0, "GET " + path);
  const double t0 = retry_clock_.NowMono();
  ASSERT_TRUE(c->Get(Pods(), ns_, "p").ok());
  // Waits of 0.1 then 0.2 s, each jittered to [50 %, 100 %].
  EXPECT_GE(retry_clock_.NowMono() - t0, 0.5 * (0.1 + 0.2) - 1e-9);
  EXPECT_LE(retry_clock_.NowMono() - t0, 0.1 + 0.2 + 1e-9);
  EXPECT_EQ(SettledCount("GET", path, 3), 3);

  // Retries run out: kUnavailable naming the attempts.
  proxy_->FailNext(5, 503, 0, "GET " + path);
  auto failed = c->Get(Pods(), ns_, "p");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_NE(failed.status().message().find("503 ServiceUnavailable"), std::string::npos);
  EXPECT_NE(failed.status().message().find("after 3 attempts"), std::string::npos);
  EXPECT_EQ(SettledCount("GET", path, 6), 6);

  // A 500 on POST may have been applied: surfaced, not repeated.
  const std::string coll = "/api/v1/namespaces/" + ns_ + "/pods";
  proxy_->FailNext(1, 500, 0, "POST " + coll);
  const uint64_t sent = c->Stats().requests;
  auto post = c->Create(Pods(), ns_, MakePod("q", ns_));
  EXPECT_EQ(c->Stats().requests - sent, 1u);
  ASSERT_FALSE(post.ok());
  EXPECT_EQ(post.status().code(), Code::kUnavailable);
  EXPECT_EQ(SettledCount("POST", coll, 1), 1);
  // A 503 on POST was not applied: retried.
  proxy_->FailNext(2, 503, 0, "POST " + coll);
  ASSERT_TRUE(c->Create(Pods(), ns_, MakePod("q", ns_)).ok());
  EXPECT_EQ(SettledCount("POST", coll, 4), 4);
}

TEST_F(ContractTest, ErrorsMapToDocumentedCodes) {
  const std::string coll = "/api/v1/namespaces/" + ns_ + "/pods";
  auto missing = client_->Get(Pods(), ns_, "missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message().rfind("GET " + coll + "/missing: 404 NotFound: ", 0), 0u)
      << missing.status().message();

  ASSERT_TRUE(client_->Create(Pods(), ns_, MakePod("p", ns_)).ok());
  auto dup = client_->Create(Pods(), ns_, MakePod("p", ns_));
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(IsAlreadyExists(dup.status())) << dup.status().ToString();
  EXPECT_EQ(dup.status().message().rfind("POST " + coll + ": 409 AlreadyExists: ", 0), 0u)
      << dup.status().message();

  auto invalid = client_->Create(Pods(), ns_, MakePod("Not_A_DNS_Name", ns_));
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), Code::kInvalidArgument) << invalid.status().ToString();
  EXPECT_EQ(invalid.status().message().rfind("POST " + coll + ": 422 Invalid: ", 0), 0u)
      << invalid.status().message();

  // The real server's RBAC refusal (a certificate user with no bindings).
  auto nobody_cfg = cp_->UserConfig("nobody-" + ns_);
  ASSERT_TRUE(nobody_cfg.ok()) << nobody_cfg.status().ToString();
  auto nobody = NewClient(*nobody_cfg);
  auto forbidden = nobody->Get(Pods(), ns_, "p");
  EXPECT_EQ(forbidden.status().code(), Code::kPermissionDenied) << forbidden.status().ToString();
  EXPECT_EQ(forbidden.status().message().rfind("GET " + coll + "/p: 403 Forbidden: ", 0), 0u)
      << forbidden.status().message();

  // An exact list (the client always pages, so a list from a resourceVersion is exact)
  // from a compacted resourceVersion: 410 Expired -> kOutOfRange. (configmaps have no
  // watch cache here, so the list reaches etcd.)
  auto first = admin_->Create(ConfigMaps(), ns_, MakeConfigMap("a", ns_));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string old_rv = ResourceVersion(*first);
  ASSERT_TRUE(admin_->Create(ConfigMaps(), ns_, MakeConfigMap("b", ns_)).ok());
  ASSERT_TRUE(admin_->Create(ConfigMaps(), ns_, MakeConfigMap("c", ns_)).ok());
  CompactEtcdNow();
  ListOptions o;
  o.resource_version = old_rv;
  auto gone = client_->List(ConfigMaps(), ns_, o);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(IsGone(gone.status())) << gone.status().ToString();
  EXPECT_EQ(gone.status().message().rfind(
                "GET /api/v1/namespaces/" + ns_ + "/configmaps: 410 Expired: ", 0),
            0u)
      << gone.status().message();
}

TEST_F(ContractTest, ClientCertificatesAuthenticateAndRbacDenialIsPermissionDenied) {
  // cluster-admin by client certificate (group system:masters), straight to the server.
  auto admin = NewClient(cp_->AdminConfig());
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Create(ConfigMaps(), ns_, MakeConfigMap("a", ns_)).ok());
  auto got = admin->Get(ConfigMaps(), ns_, "a");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["data"]["k"], "v");

  // A certificate user (CN) in a group (O) with no bindings: authenticated, refused.
  const std::string user = "alice-" + ns_;
  const std::string group = "team-" + ns_;
  auto user_cfg = cp_->UserConfig(user, {group});
  ASSERT_TRUE(user_cfg.ok()) << user_cfg.status().ToString();
  auto alice = NewClient(*user_cfg);
  const std::string coll = "/api/v1/namespaces/" + ns_ + "/configmaps";
  auto denied = alice->Get(ConfigMaps(), ns_, "a");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), Code::kPermissionDenied) << denied.status().ToString();
  EXPECT_EQ(denied.status().message().rfind("GET " + coll + "/a: 403 Forbidden: ", 0), 0u)
      << denied.status().message();
  EXPECT_NE(denied.status().message().find("\"" + user + "\""), std::string::npos)
      << denied.status().message();
  EXPECT_EQ(alice->Stats().requests, 1u);  // a refusal is not retried

  // A Role bound to the certificate's group: reads pass, writes are still refused.
  ASSERT_TRUE(
      testing::ApplyObjects(
          admin_.get(),
          {{{"apiVersion", "rbac.authorization.k8s.io/v1"},
            {"kind", "Role"},
            {"metadata", {{"name", "cm-reader"}, {"namespace", ns_}}},
            {"rules",
             {{{"apiGroups", {""}}, {"resources", {"configmaps"}}, {"verbs", {"get", "list"}}}}}},
           {{"apiVersion", "rbac.authorization.k8s.io/v1"},
            {"kind", "RoleBinding"},
            {"metadata", {{"name", "cm-reader"}, {"namespace", ns_}}},
            {"roleRef",
             {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "cm-reader"}}},
            {"subjects",
             {{{"kind", "Group"}, {"apiGroup", "rbac.authorization.k8s.io"}, {"name", group}}}}}})
          .ok());
  ASSERT_TRUE(PollUntil([&] { return alice->Get(ConfigMaps(), ns_, "a").ok(); }));
  auto write = alice->Create(ConfigMaps(), ns_, MakeConfigMap("b", ns_));
  ASSERT_FALSE(write.ok());
  EXPECT_EQ(write.status().code(), Code::kPermissionDenied) << write.status().ToString();
  EXPECT_EQ(write.status().message().rfind("POST " + coll + ": 403 Forbidden: ", 0), 0u)
      << write.status().message();

  // A certificate the cluster CA did not sign: not authenticated (401).
  auto stranger_ca = testing::MakeCa("not-the-cluster-ca");
  ASSERT_TRUE(stranger_ca.ok());
  auto forged_cert = testing::IssueCert(*stranger_ca, {user, {group}, {}, {}, false, true});
  ASSERT_TRUE(forged_cert.ok());
  ClientConfig forged = *user_cfg;
  forged.client_cert_pem = forged_cert->cert_pem;
  forged.client_key_pem = forged_cert->key_pem;
  auto unauth = NewClient(forged)->Get(ConfigMaps(), ns_, "a");
  ASSERT_FALSE(unauth.ok());
  EXPECT_EQ(unauth.status().code(), Code::kPermissionDenied) << unauth.status().ToString();
  EXPECT_EQ(unauth.status().message().rfind("GET " + coll + "/a: 401 Unauthorized", 0), 0u)
      << unauth.status().message();
}

TEST_F(ContractTest, BearerTokensAreCheckedAndRotatedTokensAreReRead) {
  // A ServiceAccount allowed to read pods here; its bound token from TokenRequest.
  ASSERT_TRUE(
      testing::ApplyObjects(
          admin_.get(),
          {{{"apiVersion", "v1"},
            {"kind", "ServiceAccount"},
            {"metadata", {{"name", "reader"}, {"namespace", ns_}}}},
           {{"apiVersion", "rbac.authorization.k8s.io/v1"},
            {"kind", "Role"},
            {"metadata", {{"name", "pod-reader"}, {"namespace", ns_}}},
            {"rules",
             {{{"apiGroups", {""}},
               {"resources", {"pods"}},
               {"verbs", {"get", "list", "watch"}}}}}},
           {{"apiVersion", "rbac.authorization.k8s.io/v1"},
            {"kind", "RoleBinding"},
            {"metadata", {{"name", "pod-reader"}, {"namespace", ns_}}},
            {"roleRef",
             {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "pod-reader"}}},
            {"subjects", {{{"kind", "ServiceAccount"}, {"name", "reader"}, {"namespace", ns_}}}}}})
          .ok());
  auto sa = cp_->ServiceAccountConfig(ns_, "reader");
  ASSERT_TRUE(sa.ok()) << sa.status().ToString();
  const std::string token = sa->token;
  // Through the proxy, which forwards the Authorization header.
  ClientConfig good = FastConfig();
  good.token = token;
  auto c = NewClient(good);
  ASSERT_TRUE(PollUntil([&] { return c->List(Pods(), ns_).ok(); }));

  const std::string coll = "/api/v1/namespaces/" + ns_ + "/pods";
  // No credentials at all (straight to the server; the proxy would add its own): the
  // real server takes the request as system:anonymous, and RBAC refuses it (403).
  ClientConfig anon = cp_->AdminConfig();
  anon.client_cert_pem.clear();
  anon.client_key_pem.clear();
  auto a = NewClient(anon)->List(Pods(), ns_);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kPermissionDenied) << a.status().ToString();
  EXPECT_EQ(a.status().message().rfind("GET " + coll + ": 403 Forbidden: ", 0), 0u)
      << a.status().message();
  EXPECT_NE(a.status().message().find("system:anonymous"), std::string::npos);

  // A token the server did not issue: 401, not retried, the token never quoted.
  ClientConfig forged = good;
  forged.token = "forged-token-" + ns_;
  auto fc = NewClient(forged);
  auto f = fc->List(Pods(), ns_);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kPermissionDenied) << f.status().ToString();
  EXPECT_EQ(f.status().message().rfind("GET " + coll + ": 401 Unauthorized", 0), 0u)
      << f.status().message();
  EXPECT_EQ(f.status().message().find(forged.token), std::string::npos);
  EXPECT_EQ(fc->Stats().requests, 1u);

  // A projected token rotated on disk: the client read a token from token_file that
  // the server no longer accepts; the 401 makes it re-read the file, once.
  char tmpl[] = "/tmp/bw-token-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string token_file = tmpl;
  WriteText(token_file, "stale-token\n");
  ClientConfig rotated = good;
  rotated.token = "";
  rotated.token_file = token_file;
  auto rc = NewClient(rotated);
  WriteText(token_file, token + "\n");
  const size_t before = ForwardedGetStatuses(*proxy_, coll).size();
  auto listed = rc->List(Pods(), ns_);
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(rc->Stats().requests, 2u);  // 401, then the re-read token
  PollUntil([&] { return ForwardedGetStatuses(*proxy_, coll).size() >= before + 2; }, 5);
  std::vector<int> statuses = ForwardedGetStatuses(*proxy_, coll);
  statuses.erase(statuses.begin(), statuses.begin() + static_cast<std::ptrdiff_t>(before));
  EXPECT_EQ(statuses, (std::vector<int>{401, 200}));

  // The same for a watch.
  WriteText(token_file, "stale-token\n");
  auto wc = NewClient(rotated);
  WriteText(token_file, token + "\n");
  WatchOptions wo;
  wo.timeout_seconds = 1;
  Status watched = wc->Watch(Pods(), ns_, wo, [](const WatchEvent&) { return true; });
  EXPECT_TRUE(watched.ok()) << watched.ToString();
  EXPECT_EQ(wc->Stats().requests, 2u);
  std::filesystem::remove(token_file);
}

TEST_F(ContractTest, LoadKubeConfigWrittenForTheCluster) {
  char tmpl[] = "/tmp/bw-kubeconfig-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/config";
  ClientConfig written = cp_->AdminConfig();  // client certificate and key, inline
  written.namespace_ = ns_;
  ASSERT_TRUE(testing::ControlPlane::WriteKubeconfig(path, written).ok());
  auto cfg = LoadKubeConfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, cp_->url());
  EXPECT_EQ(cfg->namespace_, ns_);
  EXPECT_FALSE(cfg->client_cert_pem.empty());
  auto c = Client::Create(*cfg);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Create(Pods(), "", MakePod("via-kubeconfig", cfg->namespace_)).ok());
  EXPECT_TRUE((*c)->Get(Pods(), "", "via-kubeconfig").ok());
  std::filesystem::remove_all(tmpl);

  // The wrong CA fails verification with a hint, not a retry storm.
  ClientConfig wrong = cp_->AdminConfig();
  wrong.ca_pem = "";  // the system store: does not know the cluster CA
  auto w = NewClient(wrong);
  auto r = w->List(Pods(), ns_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CA"), std::string::npos) << r.status().message();
  EXPECT_EQ(w->Stats().requests, 1u);
}

// Collects a watch's events on a thread until cancelled or the watch ends.
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
  const std::string elsewhere_ns = NewNamespace(ns_ + "-elsewhere");
  ASSERT_FALSE(elsewhere_ns.empty());
  WatchOptions o;
  o.resource_version = testing::Objects(admin_.get()).CurrentResourceVersion();
  ASSERT_FALSE(o.resource_version.empty());
  // The real server sends a watch a bookmark 2 s before its timeoutSeconds (and about
  // once a minute): a short watch gets one early, then ends.
  o.timeout_seconds = 4;
  auto w = std::make_unique<WatchCollector>(client_.get(), ns_, o);
  ASSERT_TRUE(PollUntil([&] { return proxy_->OpenWatches() == 1; }));
  auto p = admin_->Create(Pods(), ns_, MakePod("p", ns_));
  ASSERT_TRUE(p.ok());
  Json changed = *p;
  changed["metadata"]["labels"]["k"] = "v";
  ASSERT_TRUE(admin_->Update(Pods(), ns_, changed).ok());
  ASSERT_TRUE(admin_->Delete(Pods(), ns_, "p").ok());
  // The real server's DELETE of a pod first sets its deletionTimestamp (MODIFIED), then
  // removes it (DELETED) — at once here, as the pod was never scheduled.
  ASSERT_TRUE(PollUntil([&] { return w->Events().size() >= 4; }));
  // A change elsewhere is not delivered here, but a bookmark moves past it.
  auto elsewhere = admin_->Create(Pods(), elsewhere_ns, MakePod("q", elsewhere_ns));
  ASSERT_TRUE(elsewhere.ok());
  const uint64_t elsewhere_rv = Rv(ResourceVersion(*elsewhere));
  std::vector<WatchEvent> all;
  auto bookmark_past = [&] {
    for (const auto& e : all) {
      if (e.type == EventType::kBookmark && Rv(ResourceVersion(e.object)) >= elsewhere_rv) {
        return true;
      }
    }
    return false;
  };
  // Until a bookmark passes it: this watch, then (when it ended first) more short
  // watches from the last version seen. The server sends a watch a bookmark only when
  // the resource changed after the version the watch started from (anywhere, as a
  // bookmark carries the newest version): a watch opened after the last change gets
  // none, so each later watch is followed by one more change elsewhere.
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    ASSERT_TRUE(PollUntil([&] { return w->done(); }, 15));
    Status s = w->Finish();
    EXPECT_TRUE(s.ok()) << s.ToString();  // the server ended it (timeoutSeconds)
    for (const auto& e : w->Events(true)) all.push_back(e);
    if (bookmark_past() || SecondsSince(t0) > 30) break;
    ASSERT_FALSE(all.empty());
    o.resource_version = ResourceVersion(all.back().object);
    w = std::make_unique<WatchCollector>(client_.get(), ns_, o);
    ASSERT_TRUE(PollUntil([&] { return proxy_->OpenWatches() == 1; }));
    Status touched = TouchPod(elsewhere_ns, "q");
    ASSERT_TRUE(touched.ok()) << touched.ToString();
  }
  EXPECT_TRUE(bookmark_past());
  std::vector<WatchEvent> ev;
  for (const auto& e : all) {
    if (e.type != EventType::kBookmark) ev.push_back(e);
  }
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].type, EventType::kAdded);
  EXPECT_EQ(ev[1].type, EventType::kModified);
  EXPECT_EQ(ev[1].object["metadata"]["labels"]["k"], "v");
  EXPECT_FALSE(ev[1].object["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(ev[2].type, EventType::kModified);
  EXPECT_TRUE(ev[2].object["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(ev[3].type, EventType::kDeleted);
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(Name(ev[i].object), "p");
    EXPECT_LT(Rv(ResourceVersion(ev[i].object)), Rv(ResourceVersion(ev[i + 1].object)));
  }
  uint64_t last = 0;
  for (const auto& e : all) {  // bookmarks never go backwards
    EXPECT_GE(Rv(ResourceVersion(e.object)), last);
    last = Rv(ResourceVersion(e.object));
  }
  EXPECT_GE(client_->Stats().watch_events, 5u);
}

TEST_F(ContractTest, WatchCutMidEventDeliversNoPartialEventAndResumes) {
  WatchOptions o;
  o.resource_version = testing::Objects(admin_.get()).CurrentResourceVersion();
  o.allow_bookmarks = false;
  std::unique_ptr<WatchCollector> w = std::make_unique<WatchCollector>(client_.get(), ns_, o);
  ASSERT_TRUE(PollUntil([&] { return proxy_->OpenWatches() == 1; }));
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("before", ns_)).ok());
  ASSERT_TRUE(PollUntil([&] { return w->Events().size() == 1; }));
  const std::string seen_rv = ResourceVersion(w->Events()[0].object);
  proxy_->CutWatches();
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("cut", ns_)).ok());
  ASSERT_TRUE(PollUntil([&] { return w->done(); }));
  Status s = w->Finish();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  ASSERT_EQ(w->Events().size(), 1u);  // "cut" was half-written: not delivered
  EXPECT_EQ(Name(w->Events()[0].object), "before");

  // Resuming from the last delivered version yields the cut event, once.
  o.resource_version = seen_rv;
  w = std::make_unique<WatchCollector>(client_.get(), ns_, o);
  ASSERT_TRUE(PollUntil([&] { return w->Events().size() >= 1; }));
  EXPECT_TRUE(w->Finish().ok());
  auto ev = w->Events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(Name(ev[0].object), "cut");
  EXPECT_EQ(ev[0].type, EventType::kAdded);
}

TEST_F(ContractTest, WatchFromCompactedVersionIsGone) {
  // configmaps have no watch cache here: the watch reaches etcd, and the real server
  // answers 200 with an ERROR event (code 410, reason Expired) before any other.
  auto first = admin_->Create(ConfigMaps(), ns_, MakeConfigMap("a", ns_));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string old_rv = ResourceVersion(*first);
  ASSERT_TRUE(admin_->Create(ConfigMaps(), ns_, MakeConfigMap("b", ns_)).ok());
  ASSERT_TRUE(admin_->Create(ConfigMaps(), ns_, MakeConfigMap("c", ns_)).ok());
  CompactEtcdNow();
  WatchOptions o;
  o.resource_version = old_rv;
  int seen = 0;
  Status s = client_->Watch(ConfigMaps(), ns_, o, [&](const WatchEvent&) {
    ++seen;
    return true;
  });
  EXPECT_TRUE(IsGone(s)) << s.ToString();
  EXPECT_EQ(s.message().rfind("WATCH /api/v1/namespaces/" + ns_ + "/configmaps: 410 Expired: ", 0),
            0u)
      << s.message();
  EXPECT_EQ(seen, 0);
}

TEST_F(ContractTest, WatchEndsWhenTheServerEndsItOrTheConsumerStops) {
  WatchOptions o;
  o.resource_version = testing::Objects(admin_.get()).CurrentResourceVersion();
  o.timeout_seconds = 1;  // the server closes the stream cleanly after ~1 s
  // The consumer never stops it and nothing fails: OK means the server ended it.
  Status s = client_->Watch(Pods(), ns_, o, [](const WatchEvent&) { return true; });
  EXPECT_TRUE(s.ok()) << s.ToString();

  // on_event returning false ends the watch with OK.
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("a", ns_)).ok());
  ASSERT_TRUE(admin_->Create(Pods(), ns_, MakePod("b", ns_)).ok());
  o.resource_version = "0";  // synthetic ADDED for both
  o.timeout_seconds = 300;
  int seen = 0;
  s = client_->Watch(Pods(), ns_, o, [&](const WatchEvent& e) {
    ++seen;
    return e.type == EventType::kBookmark;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace bulwark::k8s
