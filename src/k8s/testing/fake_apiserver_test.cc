// FakeApiServer over real HTTPS (libcurl): TLS and auth, discovery, CRUD and conflicts,
// status subresource, generation, patches, lists with selectors and pagination,
// finalizers and garbage collection, namespaces, fault injection, direct access and
// OnChange. Watches, CRDs and the load test are in the sibling test files.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "k8s/testing/fake_apiserver_test_util.h"

namespace bulwark::k8s::testing {
namespace {

class FakeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server = StartServer();
    ASSERT_TRUE(server);
    curl = std::make_unique<Curl>(*server);
  }
  HttpResult CreatePod(const std::string& name, const Json& labels = Json::object(),
                       const std::string& node = "") {
    return curl->Post(kPods, PodJson("default", name, labels, node));
  }
  std::unique_ptr<FakeApiServer> server;
  std::unique_ptr<Curl> curl;
};

TEST_F(FakeApiServerTest, ServesDiscoveryOverVerifiedTls) {
  HttpResult v = curl->Get("/version");
  ASSERT_EQ(v.curl, CURLE_OK);
  EXPECT_EQ(v.code, 200);
  EXPECT_EQ(v.json()["major"], "1");
  EXPECT_EQ(curl->Get("/api").json()["versions"][0], "v1");
  Json groups = curl->Get("/apis").json();
  bool has_coordination = false;
  for (const Json& g : groups["groups"]) has_coordination |= g["name"] == "coordination.k8s.io";
  EXPECT_TRUE(has_coordination);
  Json core = curl->Get("/api/v1").json();
  bool pods = false, pod_status = false;
  for (const Json& r : core["resources"]) {
    pods |= r["name"] == "pods" && r["namespaced"] == true && r["kind"] == "Pod";
    pod_status |= r["name"] == "pods/status";
  }
  EXPECT_TRUE(pods && pod_status);
  EXPECT_EQ(curl->Get("/apis/apps/v1").code, 200);
  EXPECT_EQ(curl->Get("/apis/nothere.io/v1").code, 404);
  EXPECT_EQ(curl->Get("/healthz").body, "ok");
  // The server certificate chains to ca_pem() only.
  Curl other(server->url(), "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  EXPECT_NE(other.Get("/version").curl, CURLE_OK);
  EXPECT_NE(server->ca_pem().find("BEGIN CERTIFICATE"), std::string::npos);
}

TEST_F(FakeApiServerTest, RequiresTheBearerTokenWhenConfigured) {
  FakeApiServerOptions o;
  o.token = "s3cret";
  auto s = FakeApiServer::Start(o);
  ASSERT_TRUE(s.ok());
  Curl none((*s)->url(), (*s)->ca_pem());
  HttpResult r = none.Get("/api/v1/namespaces");
  EXPECT_EQ(r.code, 401);
  EXPECT_EQ(r.json()["reason"], "Unauthorized");
  Curl good(**s);
  EXPECT_EQ(good.Get("/api/v1/namespaces").code, 200);
  EXPECT_EQ((*s)->client_config().token, "s3cret");
  (*s)->SetToken("rotated");
  EXPECT_EQ(good.Get("/api/v1/namespaces").code, 401);
  EXPECT_EQ(Curl((*s)->url(), (*s)->ca_pem(), "rotated").Get("/api/v1/namespaces").code, 200);
}

TEST_F(FakeApiServerTest, CreateGetUpdateDeleteWithConflicts) {
  HttpResult c = CreatePod("a");
  ASSERT_EQ(c.code, 201) << c.body;
  Json pod = c.json();
  EXPECT_EQ(pod["kind"], "Pod");
  EXPECT_EQ(pod["apiVersion"], "v1");
  EXPECT_EQ(pod["metadata"]["namespace"], "default");
  EXPECT_EQ(pod["metadata"]["uid"].get<std::string>().size(), 36u);
  EXPECT_EQ(pod["metadata"]["generation"], 1);
  EXPECT_FALSE(pod["metadata"]["creationTimestamp"].get<std::string>().empty());
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  std::string rv1 = pod["metadata"]["resourceVersion"];
  EXPECT_EQ(rv1, server->CurrentResourceVersion());

  HttpResult dup = CreatePod("a");
  EXPECT_EQ(dup.code, 409);
  EXPECT_EQ(dup.json()["reason"], "AlreadyExists");
  EXPECT_EQ(dup.json()["details"]["name"], "a");
  EXPECT_EQ(dup.json()["details"]["kind"], "pods");

  EXPECT_EQ(curl->Get(std::string(kPods) + "/a").json(), pod);

  Json next = pod;
  next["metadata"]["labels"] = {{"x", "1"}};
  HttpResult u = curl->Put(std::string(kPods) + "/a", next);
  ASSERT_EQ(u.code, 200) << u.body;
  std::string rv2 = u.json()["metadata"]["resourceVersion"];
  EXPECT_NE(rv1, rv2);

  next["metadata"]["labels"] = {{"x", "2"}};  // still carries rv1: stale
  HttpResult stale = curl->Put(std::string(kPods) + "/a", next);
  EXPECT_EQ(stale.code, 409);
  EXPECT_EQ(stale.json()["reason"], "Conflict");
  EXPECT_NE(stale.json()["message"].get<std::string>().find("the object has been modified"),
            std::string::npos);

  next["metadata"].erase("resourceVersion");  // unconditional update of a built-in kind
  HttpResult forced = curl->Put(std::string(kPods) + "/a", next);
  EXPECT_EQ(forced.code, 200);
  EXPECT_EQ(forced.json()["metadata"]["labels"]["x"], "2");

  next["metadata"]["name"] = "b";
  EXPECT_EQ(curl->Put(std::string(kPods) + "/a", next).code, 400);

  HttpResult d = curl->Delete(std::string(kPods) + "/a");
  EXPECT_EQ(d.code, 200);
  EXPECT_EQ(d.json()["status"], "Success");
  HttpResult gone = curl->Get(std::string(kPods) + "/a");
  EXPECT_EQ(gone.code, 404);
  EXPECT_EQ(gone.json()["kind"], "Status");
  EXPECT_EQ(gone.json()["reason"], "NotFound");
  EXPECT_EQ(gone.json()["message"], "pods \"a\" not found");
  EXPECT_EQ(curl->Delete(std::string(kPods) + "/a").code, 404);
  EXPECT_EQ(curl->Put(std::string(kPods) + "/a", PodJson("default", "a")).code, 404);
}

TEST_F(FakeApiServerTest, RejectsBadInputWithStatusNamingTheProblem) {
  EXPECT_EQ(curl->Get("/api/v1/namespaces/default/widgets").code, 404);
  EXPECT_EQ(curl->Get("/api/v2/pods").code, 404);
  EXPECT_EQ(curl->Get("/nonsense").code, 404);
  HttpResult bad_json = curl->Do("POST", kPods, "{not json");
  EXPECT_EQ(bad_json.code, 400);
  EXPECT_NE(bad_json.json()["message"].get<std::string>().find("not valid JSON"),
            std::string::npos);
  HttpResult no_ns = curl->Post("/api/v1/namespaces/nope/pods", PodJson("nope", "x"));
  EXPECT_EQ(no_ns.code, 404);
  EXPECT_EQ(no_ns.json()["message"], "namespaces \"nope\" not found");
  HttpResult wrong_ns = curl->Post(kPods, PodJson("other", "x"));
  EXPECT_EQ(wrong_ns.code, 400);
  Json wrong_kind = PodJson("default", "x");
  wrong_kind["kind"] = "Node";
  EXPECT_EQ(curl->Post(kPods, wrong_kind).code, 400);
  HttpResult invalid = curl->Post(kPods, PodJson("default", "Bad_Name"));
  EXPECT_EQ(invalid.code, 422);
  EXPECT_EQ(invalid.json()["reason"], "Invalid");
  EXPECT_EQ(invalid.json()["details"]["causes"][0]["field"], "metadata.name");
  Json no_containers = PodJson("default", "c");
  no_containers["spec"] = Json::object();
  HttpResult nc = curl->Post(kPods, no_containers);
  EXPECT_EQ(nc.code, 422);
  EXPECT_EQ(nc.json()["details"]["causes"][0]["field"], "spec.containers");
  Json bad_label = PodJson("default", "d", {{"ok", "not ok!"}});
  EXPECT_EQ(curl->Post(kPods, bad_label).code, 422);
  Json with_rv = PodJson("default", "e");
  with_rv["metadata"]["resourceVersion"] = "5";
  EXPECT_EQ(curl->Post(kPods, with_rv).code, 400);
  EXPECT_EQ(curl->Do("POST", kPods, "{}", "application/yaml").code, 415);
  EXPECT_EQ(curl->Do("GET", kPods, "", "", {"Accept: application/vnd.kubernetes.protobuf"}).code,
            406);
  EXPECT_EQ(curl->Do("POST", std::string(kPods) + "/a").code, 405);
  EXPECT_EQ(curl->Post(std::string(kPods) + "?dryRun=All", PodJson("default", "f")).code, 400);
  EXPECT_EQ(curl->Get(std::string(kPods) + "?limit=-1").code, 400);
  EXPECT_EQ(curl->Get(std::string(kPods) + "?labelSelector=a%20in%20b").code, 400);
  std::string big(4 * 1024 * 1024, 'x');
  EXPECT_EQ(curl->Do("POST", kPods, big).code, 413);
  // The server keeps serving after all of that.
  EXPECT_EQ(CreatePod("ok").code, 201);
}

TEST_F(FakeApiServerTest, GenerateNameAndNoOpUpdates) {
  Json p = PodJson("default", "");
  p["metadata"].erase("name");
  p["metadata"]["generateName"] = "worker-";
  HttpResult c = curl->Post(kPods, p);
  ASSERT_EQ(c.code, 201) << c.body;
  std::string name = c.json()["metadata"]["name"];
  EXPECT_EQ(name.rfind("worker-", 0), 0u);
  EXPECT_EQ(name.size(), 12u);
  p["metadata"].erase("generateName");
  HttpResult none = curl->Post(kPods, p);
  EXPECT_EQ(none.code, 422);
  EXPECT_EQ(none.json()["details"]["causes"][0]["field"], "metadata.name");

  std::string rv = server->CurrentResourceVersion();
  HttpResult same = curl->Put(std::string(kPods) + "/" + name, c.json());
  EXPECT_EQ(same.code, 200);
  EXPECT_EQ(same.json()["metadata"]["resourceVersion"], c.json()["metadata"]["resourceVersion"]);
  EXPECT_EQ(server->CurrentResourceVersion(), rv);
}

TEST_F(FakeApiServerTest, GenerationCountsSpecChangesOnly) {
  Json pod = CreatePod("g").json();
  pod["metadata"]["labels"] = {{"a", "b"}};
  pod = curl->Put(std::string(kPods) + "/g", pod).json();
  EXPECT_EQ(pod["metadata"]["generation"], 1);
  pod["spec"]["containers"][0]["image"] = "busybox:2";
  pod = curl->Put(std::string(kPods) + "/g", pod).json();
  EXPECT_EQ(pod["metadata"]["generation"], 2);
  pod["status"]["phase"] = "Running";
  pod = curl->Put(std::string(kPods) + "/g/status", pod).json();
  EXPECT_EQ(pod["metadata"]["generation"], 2);
  EXPECT_EQ(pod["status"]["phase"], "Running");
}

TEST_F(FakeApiServerTest, StatusSubresourceSeparatesSpecAndStatus) {
  Json pod = CreatePod("s").json();
  pod["status"] = {{"phase", "Running"}};
  pod["spec"]["containers"][0]["image"] = "changed";
  Json main = curl->Put(std::string(kPods) + "/s", pod).json();
  EXPECT_EQ(main["status"]["phase"], "Pending");  // the main endpoint ignores status
  EXPECT_EQ(main["spec"]["containers"][0]["image"], "changed");

  main["status"] = {{"phase", "Running"}, {"podIP", "10.0.0.1"}};
  main["spec"]["containers"][0]["image"] = "ignored";
  main["metadata"]["labels"] = {{"ignored", "yes"}};
  HttpResult st = curl->Put(std::string(kPods) + "/s/status", main);
  ASSERT_EQ(st.code, 200) << st.body;
  EXPECT_EQ(st.json()["status"]["phase"], "Running");
  EXPECT_EQ(st.json()["spec"]["containers"][0]["image"], "changed");
  EXPECT_TRUE(st.json()["metadata"]["labels"].empty());
  EXPECT_EQ(curl->Get(std::string(kPods) + "/s/status").json()["status"]["podIP"], "10.0.0.1");

  HttpResult ps = curl->Patch(std::string(kPods) + "/s/status",
                              {{"status", {{"phase", "Succeeded"}}}, {"spec", {{"x", 1}}}});
  EXPECT_EQ(ps.json()["status"]["phase"], "Succeeded");
  EXPECT_FALSE(ps.json()["spec"].contains("x"));

  curl->Post("/api/v1/namespaces/default/configmaps",
             {{"metadata", {{"name", "cm"}}}, {"data", {{"k", "v"}}}});
  EXPECT_EQ(curl->Get("/api/v1/namespaces/default/configmaps/cm/status").code, 404);
  EXPECT_EQ(curl->Get(std::string(kPods) + "/s/log").code, 404);
}

TEST_F(FakeApiServerTest, MergeStrategicAndJsonPatches) {
  Json pod = PodJson("default", "p", {{"keep", "1"}, {"drop", "1"}});
  pod["metadata"]["finalizers"] = {"a"};
  pod["spec"]["containers"][0]["env"] = {{{"name", "A"}, {"value", "1"}}};
  pod["spec"]["containers"].push_back({{"name", "side"}, {"image", "envoy"}});
  ASSERT_EQ(curl->Post(kPods, pod).code, 201);
  std::string path = std::string(kPods) + "/p";

  Json m =
      curl->Patch(path, {{"metadata", {{"labels", {{"drop", nullptr}, {"new", "2"}}}}}}).json();
  EXPECT_EQ(m["metadata"]["labels"], (Json{{"keep", "1"}, {"new", "2"}}));

  // Merge patch replaces lists; strategic merges containers and env by name.
  Json sp = {{"metadata", {{"finalizers", {"b"}}}},
             {"spec",
              {{"containers",
                {{{"name", "main"}, {"env", {{{"name", "B"}, {"value", "2"}}}}},
                 {{"name", "side"}, {"$patch", "delete"}}}}}}};
  HttpResult s = curl->Patch(path, sp, "application/strategic-merge-patch+json");
  ASSERT_EQ(s.code, 200) << s.body;
  Json sj = s.json();
  ASSERT_EQ(sj["spec"]["containers"].size(), 1u);
  EXPECT_EQ(sj["spec"]["containers"][0]["image"], "busybox");
  EXPECT_EQ(sj["spec"]["containers"][0]["env"].size(), 2u);
  EXPECT_EQ(sj["metadata"]["finalizers"], (Json{"a", "b"}));
  HttpResult drop =
      curl->Patch(path, {{"metadata", {{"$deleteFromPrimitiveList/finalizers", {"a"}}}}},
                  "application/strategic-merge-patch+json");
  EXPECT_EQ(drop.json()["metadata"]["finalizers"], (Json{"b"}));

  HttpResult merge_list =
      curl->Patch(path, {{"spec", {{"containers", {{{"name", "only"}, {"image", "x"}}}}}}});
  EXPECT_EQ(merge_list.json()["spec"]["containers"].size(), 1u);
  EXPECT_EQ(merge_list.json()["spec"]["containers"][0]["name"], "only");

  Json ops = {{{"op", "test"}, {"path", "/metadata/labels/keep"}, {"value", "1"}},
              {{"op", "add"}, {"path", "/metadata/labels/j"}, {"value", "p"}},
              {{"op", "remove"}, {"path", "/metadata/labels/new"}}};
  HttpResult j = curl->Patch(path, ops, "application/json-patch+json");
  ASSERT_EQ(j.code, 200) << j.body;
  EXPECT_EQ(j.json()["metadata"]["labels"], (Json{{"keep", "1"}, {"j", "p"}}));
  Json failing = {{{"op", "test"}, {"path", "/metadata/labels/keep"}, {"value", "2"}}};
  EXPECT_EQ(curl->Patch(path, failing, "application/json-patch+json").code, 422);
  EXPECT_EQ(curl->Patch(path, {{"op", "add"}}, "application/json-patch+json").code, 400);
  EXPECT_EQ(curl->Do("PATCH", path, "{bad", "application/merge-patch+json").code, 400);
  EXPECT_EQ(curl->Patch(path, Json::object(), "application/apply-patch+yaml").code, 415);
  EXPECT_EQ(curl->Patch(path, Json::object(), "text/plain").code, 415);
  EXPECT_EQ(curl->Patch(std::string(kPods) + "/missing", Json::object()).code, 404);

  // A resourceVersion in the patch is a precondition.
  HttpResult stale = curl->Patch(path, {{"metadata", {{"resourceVersion", "1"}}}});
  EXPECT_EQ(stale.code, 409);
}

TEST_F(FakeApiServerTest, ListsWithSelectors) {
  for (int i = 0; i < 12; ++i) {
    Json labels = {{"app", i % 3 == 0 ? "web" : "db"}, {"idx", std::to_string(i)}};
    if (i % 2 == 0) labels["even"] = "true";
    ASSERT_EQ(CreatePod("p" + std::to_string(i), labels, i < 4 ? "n1" : "n2").code, 201);
  }
  ASSERT_EQ(curl->Post("/api/v1/namespaces", {{"metadata", {{"name", "other"}}}}).code, 201);
  ASSERT_EQ(
      curl->Post("/api/v1/namespaces/other/pods", PodJson("other", "o1", {{"app", "web"}})).code,
      201);
  auto count = [&](const std::string& query) -> int {
    HttpResult r = curl->Get("/api/v1/pods?" + query);
    EXPECT_EQ(r.code, 200) << query << ": " << r.body;
    return static_cast<int>(r.json()["items"].size());
  };
  EXPECT_EQ(count(""), 13);
  EXPECT_EQ(count("labelSelector=app%3Dweb"), 5);
  EXPECT_EQ(count("labelSelector=app%3D%3Dweb"), 5);
  EXPECT_EQ(count("labelSelector=app%21%3Dweb"), 8);
  EXPECT_EQ(count("labelSelector=app%20in%20(web,db)"), 13);
  EXPECT_EQ(count("labelSelector=idx%20notin%20(0,1,2)"), 10);
  EXPECT_EQ(count("labelSelector=even"), 6);
  EXPECT_EQ(count("labelSelector=%21even"), 7);
  EXPECT_EQ(count("labelSelector=app%3Dweb,even"), 2);
  EXPECT_EQ(count("labelSelector=idx%3E9"), 2);
  EXPECT_EQ(count("fieldSelector=spec.nodeName%3Dn1"), 4);
  EXPECT_EQ(count("fieldSelector=spec.nodeName%21%3Dn1"), 9);
  EXPECT_EQ(count("fieldSelector=status.phase%3DPending,metadata.namespace%3Dother"), 1);
  EXPECT_EQ(count("fieldSelector=metadata.name%3Dp3"), 1);
  HttpResult bad = curl->Get("/api/v1/pods?fieldSelector=spec.image%3Dx");
  EXPECT_EQ(bad.code, 400);
  EXPECT_NE(bad.json()["message"].get<std::string>().find("spec.image"), std::string::npos);
  Json ns_list = curl->Get("/api/v1/namespaces/other/pods").json();
  EXPECT_EQ(ns_list["kind"], "PodList");
  EXPECT_EQ(ns_list["apiVersion"], "v1");
  ASSERT_EQ(ns_list["items"].size(), 1u);
  EXPECT_FALSE(ns_list["items"][0].contains("kind"));  // as kube-apiserver sends items
  EXPECT_EQ(ns_list["metadata"]["resourceVersion"], server->CurrentResourceVersion());
}

TEST_F(FakeApiServerTest, PaginatesAsAConsistentSnapshot) {
  for (int i = 0; i < 25; ++i) ASSERT_EQ(CreatePod("p" + std::to_string(100 + i)).code, 201);
  std::string list_rv = server->CurrentResourceVersion();
  HttpResult first = curl->Get(std::string(kPods) + "?limit=10");
  ASSERT_EQ(first.code, 200);
  Json page = first.json();
  EXPECT_EQ(page["items"].size(), 10u);
  EXPECT_EQ(page["metadata"]["resourceVersion"], list_rv);
  std::string cont = page["metadata"]["continue"];
  // Changes between pages are not seen by the following pages.
  ASSERT_EQ(curl->Delete(std::string(kPods) + "/p115").code, 200);
  ASSERT_EQ(CreatePod("p1150").code, 201);
  Json renamed = curl->Get(std::string(kPods) + "/p120").json();
  renamed["metadata"]["labels"] = {{"changed", "yes"}};
  ASSERT_EQ(curl->Put(std::string(kPods) + "/p120", renamed).code, 200);
  std::vector<std::string> names;
  for (const Json& it : page["items"]) names.push_back(it["metadata"]["name"]);
  while (!cont.empty()) {
    HttpResult next = curl->Get(std::string(kPods) + "?limit=10&continue=" + cont);
    ASSERT_EQ(next.code, 200) << next.body;
    Json p = next.json();
    EXPECT_EQ(p["metadata"]["resourceVersion"], list_rv);
    for (const Json& it : p["items"]) {
      names.push_back(it["metadata"]["name"]);
      if (it["metadata"]["name"] == "p120") {
        EXPECT_TRUE(it["metadata"]["labels"].empty());
      }
    }
    cont = p["metadata"].value("continue", "");
  }
  ASSERT_EQ(names.size(), 25u);
  EXPECT_EQ(names[15], "p115");  // deleted after the first page, still in the snapshot
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));

  // An exact list at an older version, and the limits of history.
  HttpResult exact =
      curl->Get(std::string(kPods) + "?resourceVersion=" + list_rv + "&resourceVersionMatch=Exact");
  ASSERT_EQ(exact.code, 200);
  EXPECT_EQ(exact.json()["items"].size(), 25u);
  EXPECT_EQ(curl->Get(std::string(kPods)).json()["items"].size(), 25u);  // -1 +1
  HttpResult future = curl->Get(std::string(kPods) + "?resourceVersion=999999");
  EXPECT_EQ(future.code, 504);
  EXPECT_EQ(curl->Get(std::string(kPods) + "?resourceVersion=abc").code, 400);
  EXPECT_EQ(curl->Get(std::string(kPods) + "?continue=garbage!").code, 400);
  std::string old_cont = page["metadata"]["continue"];
  server->Compact();
  HttpResult expired = curl->Get(std::string(kPods) + "?limit=10&continue=" + old_cont);
  EXPECT_EQ(expired.code, 410);
  EXPECT_EQ(expired.json()["reason"], "Expired");
  EXPECT_EQ(
      curl->Get(std::string(kPods) + "?resourceVersion=" + list_rv + "&resourceVersionMatch=Exact")
          .code,
      410);
}

TEST_F(FakeApiServerTest, FinalizersAndPreconditions) {
  Json pod = PodJson("default", "f");
  pod["metadata"]["finalizers"] = {"bulwark.dev/cleanup"};
  Json created = curl->Post(kPods, pod).json();
  std::string path = std::string(kPods) + "/f";
  HttpResult pre = curl->Delete(path, {{"preconditions", {{"uid", "not-the-uid"}}}});
  EXPECT_EQ(pre.code, 409);
  EXPECT_NE(pre.json()["message"].get<std::string>().find("Precondition failed"),
            std::string::npos);
  EXPECT_EQ(curl->Delete(path, {{"preconditions", {{"resourceVersion", "1"}}}}).code, 409);

  HttpResult d = curl->Delete(path + "?gracePeriodSeconds=30");
  ASSERT_EQ(d.code, 200);
  Json terminating = curl->Get(path).json();
  EXPECT_TRUE(terminating["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(curl->Delete(path).code, 200);  // deleting again changes nothing
  Json more = terminating;
  more["metadata"]["finalizers"].push_back("another");
  EXPECT_EQ(curl->Put(path, more).code, 422);
  terminating["metadata"]["finalizers"] = Json::array();
  ASSERT_EQ(curl->Put(path, terminating).code, 200);
  EXPECT_EQ(curl->Get(path).code, 404);
}

TEST_F(FakeApiServerTest, GarbageCollectsDependents) {
  Json owner =
      curl->Post("/api/v1/namespaces/default/configmaps", {{"metadata", {{"name", "owner"}}}})
          .json();
  Json second =
      curl->Post("/api/v1/namespaces/default/configmaps", {{"metadata", {{"name", "second"}}}})
          .json();
  auto ref = [](const Json& o) {
    return Json{{"apiVersion", "v1"},
                {"kind", "ConfigMap"},
                {"name", o["metadata"]["name"]},
                {"uid", o["metadata"]["uid"]},
                {"controller", true}};
  };
  for (const char* n : {"d1", "d2", "shared", "orph"}) {
    Json p = PodJson("default", n);
    p["metadata"]["ownerReferences"] = {ref(owner)};
    if (std::string(n) == "shared") p["metadata"]["ownerReferences"].push_back(ref(second));
    if (std::string(n) == "orph") p["metadata"]["ownerReferences"] = {ref(second)};
    ASSERT_EQ(curl->Post(kPods, p).code, 201);
  }
  Json grandchild =
      curl->Post("/api/v1/namespaces/default/configmaps",
                 {{"metadata",
                   {{"name", "gc"},
                    {"ownerReferences", {ref(curl->Get(std::string(kPods) + "/d1").json())}}}}})
          .json();
  ASSERT_EQ(curl->Delete("/api/v1/namespaces/default/configmaps/owner").code, 200);
  EXPECT_EQ(curl->Get(std::string(kPods) + "/d1").code, 404);
  EXPECT_EQ(curl->Get(std::string(kPods) + "/d2").code, 404);
  EXPECT_EQ(curl->Get("/api/v1/namespaces/default/configmaps/gc").code, 404);  // transitive
  Json shared = curl->Get(std::string(kPods) + "/shared").json();
  ASSERT_EQ(shared["metadata"]["ownerReferences"].size(), 1u);  // dangling ref dropped
  EXPECT_EQ(shared["metadata"]["ownerReferences"][0]["name"], "second");

  ASSERT_EQ(curl->Delete("/api/v1/namespaces/default/configmaps/second",
                         {{"propagationPolicy", "Orphan"}})
                .code,
            200);
  Json orphan = curl->Get(std::string(kPods) + "/orph").json();
  EXPECT_FALSE(orphan["metadata"].contains("ownerReferences"));
  EXPECT_EQ(curl->Get(std::string(kPods) + "/shared").code, 200);
  EXPECT_EQ(curl->Delete(std::string(kPods) + "/orph?propagationPolicy=Sideways").code, 400);
}

TEST_F(FakeApiServerTest, DeletingANamespaceDeletesItsContents) {
  ASSERT_EQ(curl->Post("/api/v1/namespaces", {{"metadata", {{"name", "team"}}}}).code, 201);
  Json ns = curl->Get("/api/v1/namespaces/team").json();
  EXPECT_EQ(ns["status"]["phase"], "Active");
  Json held = PodJson("team", "held");
  held["metadata"]["finalizers"] = {"x/y"};
  ASSERT_EQ(curl->Post("/api/v1/namespaces/team/pods", held).code, 201);
  ASSERT_EQ(curl->Post("/api/v1/namespaces/team/pods", PodJson("team", "free")).code, 201);
  ASSERT_EQ(curl->Delete("/api/v1/namespaces/team").code, 200);
  EXPECT_EQ(curl->Get("/api/v1/namespaces/team/pods/free").code, 404);
  EXPECT_EQ(curl->Get("/api/v1/namespaces/team").json()["status"]["phase"], "Terminating");
  HttpResult refused = curl->Post("/api/v1/namespaces/team/pods", PodJson("team", "late"));
  EXPECT_EQ(refused.code, 403);
  EXPECT_NE(refused.json()["message"].get<std::string>().find("being terminated"),
            std::string::npos);
  EXPECT_EQ(
      curl->Patch("/api/v1/namespaces/team/pods/held", {{"metadata", {{"finalizers", nullptr}}}})
          .code,
      200);
  EXPECT_EQ(curl->Get("/api/v1/namespaces/team").code, 404);
}

TEST_F(FakeApiServerTest, DeleteCollectionHonoursSelectors) {
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(CreatePod("c" + std::to_string(i), {{"batch", i < 4 ? "a" : "b"}}).code, 201);
  }
  EXPECT_EQ(curl->Delete(std::string(kPods) + "?labelSelector=batch%3Da").code, 200);
  EXPECT_EQ(curl->Get(kPods).json()["items"].size(), 2u);
}

TEST_F(FakeApiServerTest, FailNextAnswersExactlyTheNextMatchingRequests) {
  ASSERT_EQ(CreatePod("x").code, 201);
  server->FailNext(2, 429, 1.5, "GET /api/v1/namespaces/default/pods/x");
  HttpResult other = curl->Get(kPods);  // does not match
  EXPECT_EQ(other.code, 200);
  HttpResult f1 = curl->Get(std::string(kPods) + "/x");
  EXPECT_EQ(f1.code, 429);
  EXPECT_EQ(f1.Header("retry-after"), "2");
  EXPECT_EQ(f1.json()["reason"], "TooManyRequests");
  EXPECT_EQ(f1.json()["details"]["retryAfterSeconds"], 2);
  EXPECT_EQ(curl->Get(std::string(kPods) + "/x").code, 429);
  EXPECT_EQ(curl->Get(std::string(kPods) + "/x").code, 200);

  server->FailNext(1, 503);
  server->FailNext(1, 500, 0, "POST");
  EXPECT_EQ(curl->Get(kPods).code, 503);  // first rule, any request
  EXPECT_EQ(curl->Get(kPods).code, 200);
  HttpResult post = CreatePod("y");
  EXPECT_EQ(post.code, 500);
  EXPECT_EQ(post.json()["reason"], "InternalError");
  EXPECT_EQ(curl->Get(std::string(kPods) + "/y").code, 404);  // the store was not touched
  server->FailNext(1, 409, 0, "PUT");
  Json x = curl->Get(std::string(kPods) + "/x").json();
  EXPECT_EQ(curl->Put(std::string(kPods) + "/x", x).code, 409);

  // Exact counts across threads.
  server->FailNext(37, 503, 0, "GET /api/v1/namespaces/default/pods/x");
  std::atomic<int> failed{0}, ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      Curl c(*server);
      for (int i = 0; i < 20; ++i) {
        long code = c.Get(std::string(kPods) + "/x").code;  // NOLINT(runtime/int)
        (code == 503 ? failed : ok)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 37);
  EXPECT_EQ(ok.load(), 43);
}

TEST_F(FakeApiServerTest, RecordsRequests) {
  ASSERT_EQ(CreatePod("r").code, 201);
  curl->Get(std::string(kPods) + "?labelSelector=a%3Db");
  std::vector<RequestRecord> recs = server->Requests();
  ASSERT_GE(recs.size(), 2u);
  EXPECT_EQ(recs[recs.size() - 2].method, "POST");
  EXPECT_EQ(recs[recs.size() - 2].status, 201);
  EXPECT_EQ(recs.back().path, kPods);
  EXPECT_EQ(recs.back().query, "labelSelector=a%3Db");
  EXPECT_FALSE(recs.back().watch);
}

TEST_F(FakeApiServerTest, DirectAccessHasTheApiSemantics) {
  auto created = server->Create(PodJson("default", "direct"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["generation"], 1);
  EXPECT_EQ(server->Create(PodJson("default", "direct")).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(curl->Get(std::string(kPods) + "/direct").json()["metadata"]["uid"],
            (*created)["metadata"]["uid"]);
  Json stale = *created;
  auto updated = server->Update(stale);  // carries the current rv: fine
  ASSERT_TRUE(updated.ok());
  stale["metadata"]["labels"] = {{"a", "b"}};
  auto u2 = server->Update(stale);
  ASSERT_TRUE(u2.ok());
  stale["metadata"]["labels"] = {{"a", "c"}};
  EXPECT_EQ(server->Update(stale).status().code(), Code::kAborted);  // rv now stale
  stale["metadata"].erase("resourceVersion");
  EXPECT_TRUE(server->Update(stale).ok());
  Json st = stale;
  st["status"] = {{"phase", "Running"}};
  ASSERT_TRUE(server->UpdateStatus(st).ok());
  auto got = server->Get(PodsResource(), "default", "direct");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["status"]["phase"], "Running");
  EXPECT_EQ((*got)["metadata"]["labels"]["a"], "c");
  EXPECT_EQ(server->List(PodsResource(), "default").size(), 1u);
  EXPECT_EQ(server->List(PodsResource()).size(), 1u);
  EXPECT_EQ(server->List(PodsResource(), "kube-system").size(), 0u);
  EXPECT_EQ(server->Create(Json{{"apiVersion", "v1"}, {"kind", "Pod"}}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(server->Create(Json{{"apiVersion", "x.io/v1"}, {"kind", "Thing"}}).status().code(),
            Code::kNotFound);
  EXPECT_TRUE(server->Delete(PodsResource(), "default", "direct").ok());
  EXPECT_EQ(server->Delete(PodsResource(), "default", "direct").code(), Code::kNotFound);
  EXPECT_EQ(server->Get(PodsResource(), "default", "direct").status().code(), Code::kNotFound);
  auto node = server->Create(Json{{"apiVersion", "v1"},
                                  {"kind", "Node"},
                                  {"metadata", {{"name", "n1"}}},
                                  {"status", {{"conditions", {{{"type", "Ready"}}}}}}});
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["status"]["conditions"][0]["type"], "Ready");  // nodes keep status
}

TEST_F(FakeApiServerTest, OnChangeRunsInOrderAndMayCallBackIntoTheServer) {
  std::mutex mu;
  std::vector<std::string> seen;
  // A fake kubelet: every pod bound to a node starts running.
  server->OnChange([&](const std::string& type, const Json& obj) {
    {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(type + " " + obj["kind"].get<std::string>() + " " +
                     obj["metadata"]["name"].get<std::string>());
    }
    if (obj["kind"] == "Pod" && type == "ADDED" && obj["spec"].contains("nodeName")) {
      Json running = obj;
      running["status"] = {{"phase", "Running"}};
      ASSERT_TRUE(server->UpdateStatus(running).ok());
      ASSERT_TRUE(server->Get(PodsResource(), "default", obj["metadata"]["name"]).ok());
    }
  });
  ASSERT_EQ(CreatePod("k1", {}, "n1").code, 201);
  ASSERT_TRUE(server->SettleCallbacks(10));  // the kubelet's update comes next
  ASSERT_EQ(CreatePod("k2").code, 201);
  ASSERT_EQ(curl->Delete(std::string(kPods) + "/k2").code, 200);
  ASSERT_TRUE(server->SettleCallbacks(10));
  EXPECT_EQ(curl->Get(std::string(kPods) + "/k1").json()["status"]["phase"], "Running");
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED Pod k1", "MODIFIED Pod k1", "ADDED Pod k2",
                                            "DELETED Pod k2"}));
}

TEST_F(FakeApiServerTest, WritesAKubeconfig) {
  std::string path = ::testing::TempDir() + "/fake-kubeconfig.yaml";
  ASSERT_TRUE(server->WriteKubeconfig(path).ok());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("server: " + server->url()), std::string::npos);
  EXPECT_NE(ss.str().find("certificate-authority-data: LS0t"), std::string::npos);
  EXPECT_NE(ss.str().find("current-context: fake"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_FALSE(server->WriteKubeconfig("/nonexistent-dir/x/kubeconfig").ok());
  ClientConfig c = server->client_config();
  EXPECT_EQ(c.server, server->url());
  EXPECT_EQ(c.namespace_, "default");
  EXPECT_EQ(c.ca_pem, server->ca_pem());
}

TEST(FakeApiServerOptionsTest, RejectsBadOptions) {
  FakeApiServerOptions o;
  o.bookmark_interval_s = 0;
  EXPECT_EQ(FakeApiServer::Start(o).status().code(), Code::kInvalidArgument);
  o = {};
  o.max_connections = 0;
  EXPECT_EQ(FakeApiServer::Start(o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace bulwark::k8s::testing
