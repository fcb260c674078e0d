// FakeApiServer custom resources over real HTTPS (libcurl): CRD registration and
// discovery, the structural-schema check (pruning, Strict, defaults, each keyword),
// custom-object update rules, extra versions, cluster scope, and CRD deletion.
#include <gtest/gtest.h>

#include "k8s/testing/fake_apiserver_test_util.h"

namespace bulwark::k8s::testing {
namespace {

Json TrainJobCrd() {
  Json spec_props = {
      {"nodes", {{"type", "integer"}, {"minimum", 1}, {"maximum", 1000}}},
      {"image",
       {{"type", "string"}, {"minLength", 1}, {"maxLength", 64}, {"pattern", "^[a-z0-9./:-]+$"}}},
      {"policy", {{"type", "string"}, {"enum", {"restart", "replace"}}, {"default", "restart"}}},
      {"env", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
      {"extra", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}},
      {"port", {{"x-kubernetes-int-or-string", true}}},
      {"note", {{"type", "string"}, {"nullable", true}}},
      {"ratio", {{"type", "number"}, {"exclusiveMaximum", true}, {"maximum", 1}}},
      {"ranks",
       {{"type", "array"},
        {"maxItems", 2},
        {"items", {{"type", "object"}, {"properties", {{"id", {{"type", "integer"}}}}}}}}}};
  Json schema = {
      {"type", "object"},
      {"properties",
       {{"spec",
         {{"type", "object"}, {"required", {"nodes", "image"}}, {"properties", spec_props}}},
        {"status", {{"type", "object"}, {"properties", {{"phase", {{"type", "string"}}}}}}}}}};
  Json crd = CrdJson("bulwark.dev", "trainjobs", "TrainJob", "v1alpha1", schema,
                     {{"subresources", {{"status", Json::object()}}}});
  crd["spec"]["names"]["shortNames"] = {"tj"};
  return crd;
}

Json Job(const std::string& name, Json spec) {
  return {{"apiVersion", "bulwark.dev/v1alpha1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", std::move(spec)}};
}

class FakeApiServerCrdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server = StartServer();
    ASSERT_TRUE(server);
    curl = std::make_unique<Curl>(*server);
    HttpResult r = curl->Post(kCrds, TrainJobCrd());
    ASSERT_EQ(r.code, 201) << r.body;
    crd = r.json();
  }
  // The causes' fields of a 422.
  std::vector<std::string> Fields(const HttpResult& r) {
    EXPECT_EQ(r.code, 422) << r.body;
    std::vector<std::string> out;
    Json status = r.json();
    for (const Json& c : status["details"]["causes"]) out.push_back(c["field"]);
    return out;
  }
  std::unique_ptr<FakeApiServer> server;
  std::unique_ptr<Curl> curl;
  Json crd;
};

TEST_F(FakeApiServerCrdTest, RegistersTheResourceWithDiscovery) {
  bool established = false;
  for (const Json& c : crd["status"]["conditions"]) {
    established |= c["type"] == "Established" && c["status"] == "True";
  }
  EXPECT_TRUE(established);
  EXPECT_EQ(crd["status"]["acceptedNames"]["kind"], "TrainJob");
  Json res = curl->Get("/apis/bulwark.dev/v1alpha1").json();
  ASSERT_EQ(res["resources"].size(), 2u);
  EXPECT_EQ(res["resources"][0]["name"], "trainjobs");
  EXPECT_EQ(res["resources"][0]["shortNames"][0], "tj");
  EXPECT_EQ(res["resources"][1]["name"], "trainjobs/status");
  bool listed = false;
  Json groups = curl->Get("/apis").json();
  for (const Json& g : groups["groups"]) listed |= g["name"] == "bulwark.dev";
  EXPECT_TRUE(listed);
  EXPECT_EQ(curl->Get(kJobs).json()["kind"], "TrainJobList");
  EXPECT_EQ(curl->Post(kCrds, TrainJobCrd()).code, 409);
}

TEST_F(FakeApiServerCrdTest, PrunesDefaultsAndAcceptsValidObjects) {
  Json spec = {{"nodes", 4},          {"image", "pytorch:2.3"},
               {"unknown", 1},        {"extra", {{"any", {{"thing", true}}}}},
               {"port", "http"},      {"note", nullptr},
               {"env", {{"A", "1"}}}, {"ratio", 0.5}};
  HttpResult r = curl->Post(kJobs, Job("a", spec));
  ASSERT_EQ(r.code, 201) << r.body;
  Json j = r.json();
  EXPECT_EQ(j["apiVersion"], "bulwark.dev/v1alpha1");
  EXPECT_EQ(j["kind"], "TrainJob");
  EXPECT_FALSE(j["spec"].contains("unknown"));
  EXPECT_EQ(j["spec"]["policy"], "restart");  // default
  EXPECT_EQ(j["spec"]["extra"]["any"]["thing"], true);
  EXPECT_NE(r.Header("warning").find("unknown field \\\"spec.unknown\\\""), std::string::npos)
      << r.Header("warning");
  spec["port"] = 8080;
  EXPECT_EQ(curl->Post(kJobs, Job("b", spec)).code, 201);
  HttpResult strict = curl->Post(std::string(kJobs) + "?fieldValidation=Strict", Job("c", spec));
  EXPECT_EQ(strict.code, 400);
  EXPECT_NE(strict.json()["message"].get<std::string>().find("unknown field \"spec.unknown\""),
            std::string::npos);
  spec.erase("unknown");
  EXPECT_EQ(curl->Post(std::string(kJobs) + "?fieldValidation=Strict", Job("c", spec)).code, 201);
  Json root_unknown = Job("d", spec);
  root_unknown["junk"] = 1;
  HttpResult pruned = curl->Post(std::string(kJobs) + "?fieldValidation=Ignore", root_unknown);
  EXPECT_EQ(pruned.code, 201);
  EXPECT_FALSE(pruned.json().contains("junk"));
  EXPECT_TRUE(pruned.Header("warning").empty());
  EXPECT_EQ(curl->Post(std::string(kJobs) + "?fieldValidation=Loose", Job("e", spec)).code, 400);
  Json list = curl->Get(kJobs).json();
  ASSERT_EQ(list["items"].size(), 4u);
  EXPECT_EQ(list["items"][0]["kind"], "TrainJob");  // custom items carry their kind
}

TEST_F(FakeApiServerCrdTest, RejectsEachSchemaViolationNamingTheField) {
  auto fields = [&](Json spec) { return Fields(curl->Post(kJobs, Job("bad", std::move(spec)))); };
  Json ok = {{"nodes", 2}, {"image", "img"}};
  auto with = [&](const char* k, Json v) {
    Json s = ok;
    s[k] = std::move(v);
    return s;
  };
  EXPECT_EQ(fields(with("nodes", 0)), std::vector<std::string>{"spec.nodes"});
  HttpResult zero = curl->Post(kJobs, Job("bad", with("nodes", 0)));
  EXPECT_NE(zero.json()["message"].get<std::string>().find(
                "spec.nodes in body should be greater than or equal to 1"),
            std::string::npos)
      << zero.body;
  EXPECT_EQ(zero.json()["details"]["kind"], "TrainJob");
  EXPECT_EQ(zero.json()["details"]["group"], "bulwark.dev");
  EXPECT_EQ(fields(with("nodes", 1001)), std::vector<std::string>{"spec.nodes"});
  EXPECT_EQ(fields(with("nodes", "four")), std::vector<std::string>{"spec.nodes"});
  EXPECT_EQ(fields(with("image", "UPPER")), std::vector<std::string>{"spec.image"});
  // Empty: both minLength and pattern fail, and both are reported.
  EXPECT_EQ(fields(with("image", "")), (std::vector<std::string>{"spec.image", "spec.image"}));
  EXPECT_EQ(fields(with("image", std::string(65, 'a'))), std::vector<std::string>{"spec.image"});
  EXPECT_EQ(fields(with("policy", "sometimes")), std::vector<std::string>{"spec.policy"});
  EXPECT_EQ(fields(with("env", {{"A", 1}})), std::vector<std::string>{"spec.env.A"});
  EXPECT_EQ(fields(with("port", true)), std::vector<std::string>{"spec.port"});
  EXPECT_EQ(fields(with("ratio", 1)), std::vector<std::string>{"spec.ratio"});
  EXPECT_EQ(fields(with("image", nullptr)), std::vector<std::string>{"spec.image"});
  EXPECT_EQ(fields(with("ranks", {{{"id", 1}}, {{"id", 2}}, {{"id", 3}}})),
            std::vector<std::string>{"spec.ranks"});
  EXPECT_EQ(fields(with("ranks", {{{"id", "x"}}})), std::vector<std::string>{"spec.ranks[0].id"});
  EXPECT_EQ(fields({{"nodes", 0}}), (std::vector<std::string>{"spec.nodes", "spec.image"}));
  HttpResult no_spec = curl->Post(kJobs, Json{{"metadata", {{"name", "x"}}}, {"spec", 5}});
  EXPECT_EQ(Fields(no_spec), std::vector<std::string>{"spec"});
}

TEST_F(FakeApiServerCrdTest, CustomObjectsNeedResourceVersionAndHaveStatus) {
  Json j = curl->Post(kJobs, Job("u", {{"nodes", 2}, {"image", "img"}})).json();
  std::string path = std::string(kJobs) + "/u";
  Json unconditional = j;
  unconditional["metadata"].erase("resourceVersion");
  HttpResult u = curl->Put(path, unconditional);
  EXPECT_EQ(Fields(u), std::vector<std::string>{"metadata.resourceVersion"});
  j["spec"]["nodes"] = 3;
  j["status"] = {{"phase", "Running"}};
  HttpResult put = curl->Put(path, j);
  ASSERT_EQ(put.code, 200) << put.body;
  EXPECT_EQ(put.json()["metadata"]["generation"], 2);
  EXPECT_FALSE(put.json().contains("status"));
  Json st = put.json();
  st["status"] = {{"phase", "Running"}, {"junk", 1}};
  HttpResult sp = curl->Put(path + "/status", st);
  ASSERT_EQ(sp.code, 200) << sp.body;
  EXPECT_EQ(sp.json()["status"], (Json{{"phase", "Running"}}));
  EXPECT_EQ(sp.json()["metadata"]["generation"], 2);
  EXPECT_EQ(curl->Patch(path, {{"spec", {{"nodes", 5}}}}).json()["spec"]["nodes"], 5);
  EXPECT_EQ(curl->Patch(path, {{"spec", {{"nodes", 0}}}}).code, 422);
  EXPECT_EQ(
      curl->Patch(path, {{"spec", {{"nodes", 6}}}}, "application/strategic-merge-patch+json").code,
      415);
  Json ops = {{{"op", "replace"}, {"path", "/spec/nodes"}, {"value", 7}}};
  EXPECT_EQ(curl->Patch(path, ops, "application/json-patch+json").json()["spec"]["nodes"], 7);
  // Direct access validates too.
  EXPECT_EQ(server->Create(Job("direct", {{"nodes", -1}, {"image", "i"}})).status().code(),
            Code::kInvalidArgument);
  auto direct = server->Create(Job("direct", {{"nodes", 1}, {"image", "i"}, {"x", 1}}));
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_FALSE((*direct)["spec"].contains("x"));
}

TEST_F(FakeApiServerCrdTest, RejectsInvalidDefinitions) {
  Json bad = TrainJobCrd();
  bad["metadata"]["name"] = "wrong.bulwark.dev";
  bad["spec"]["versions"][0].erase("schema");
  bad["spec"]["scope"] = "Galaxy";
  std::vector<std::string> f = Fields(curl->Post(kCrds, bad));
  EXPECT_EQ(f, (std::vector<std::string>{"spec.scope", "metadata.name",
                                         "spec.versions[0].schema.openAPIV3Schema"}));
  Json two_storage = TrainJobCrd();
  two_storage["metadata"]["name"] = "others.bulwark.dev";
  two_storage["spec"]["names"] = {{"plural", "others"}, {"kind", "Other"}};
  two_storage["spec"]["versions"].push_back(two_storage["spec"]["versions"][0]);
  two_storage["spec"]["versions"][1]["name"] = "v1";
  EXPECT_EQ(Fields(curl->Post(kCrds, two_storage)), std::vector<std::string>{"spec.versions"});
  Json builtin = TrainJobCrd();
  builtin["metadata"]["name"] = "deployments.apps";
  builtin["spec"]["group"] = "apps";
  builtin["spec"]["names"] = {{"plural", "deployments"}, {"kind", "Deployment"}};
  EXPECT_EQ(Fields(curl->Post(kCrds, builtin)), std::vector<std::string>{"spec.names.plural"});
}

TEST_F(FakeApiServerCrdTest, ServesAddedVersionsAndClusterScope) {
  ASSERT_EQ(curl->Post(kJobs, Job("v", {{"nodes", 2}, {"image", "img"}})).code, 201);
  Json next = crd;
  Json v1 = next["spec"]["versions"][0];
  v1["name"] = "v1";
  v1["storage"] = false;
  next["spec"]["versions"].push_back(v1);
  HttpResult up = curl->Put(std::string(kCrds) + "/trainjobs.bulwark.dev", next);
  ASSERT_EQ(up.code, 200) << up.body;
  HttpResult as_v1 = curl->Get("/apis/bulwark.dev/v1/namespaces/default/trainjobs/v");
  ASSERT_EQ(as_v1.code, 200) << as_v1.body;
  EXPECT_EQ(as_v1.json()["apiVersion"], "bulwark.dev/v1");
  EXPECT_EQ(curl->Get("/apis/bulwark.dev/v2/namespaces/default/trainjobs").code, 404);

  Json cluster = TrainJobCrd();
  cluster["metadata"]["name"] = "pools.bulwark.dev";
  cluster["spec"]["scope"] = "Cluster";
  cluster["spec"]["names"] = {{"plural", "pools"}, {"kind", "Pool"}};
  ASSERT_EQ(curl->Post(kCrds, cluster).code, 201);
  Json pool = {{"metadata", {{"name", "spot"}}}, {"spec", {{"nodes", 8}, {"image", "x"}}}};
  HttpResult created = curl->Post("/apis/bulwark.dev/v1alpha1/pools", pool);
  ASSERT_EQ(created.code, 201) << created.body;
  EXPECT_FALSE(created.json()["metadata"].contains("namespace"));
  EXPECT_EQ(curl->Get("/apis/bulwark.dev/v1alpha1/pools/spot").code, 200);
  EXPECT_EQ(curl->Get("/apis/bulwark.dev/v1alpha1/namespaces/default/pools/spot").code, 404);
}

TEST_F(FakeApiServerCrdTest, DeletingTheDefinitionDeletesObjectsAndEndsWatches) {
  ASSERT_EQ(curl->Post(kJobs, Job("gone", {{"nodes", 2}, {"image", "img"}})).code, 201);
  WatchStream w(*server, std::string(kJobs) + "?watch=1");
  ASSERT_TRUE(w.WaitEvents(1, 10));
  ASSERT_EQ(curl->Delete(std::string(kCrds) + "/trainjobs.bulwark.dev").code, 200);
  ASSERT_TRUE(w.WaitDone(10));
  EXPECT_EQ(w.result(), CURLE_OK);
  std::vector<Json> ev = w.Events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1]["type"], "DELETED");
  EXPECT_EQ(curl->Get(kJobs).code, 404);
  EXPECT_EQ(curl->Get("/apis/bulwark.dev/v1alpha1").code, 404);
  // It can be defined again, empty.
  ASSERT_EQ(curl->Post(kCrds, TrainJobCrd()).code, 201);
  EXPECT_EQ(curl->Get(kJobs).json()["items"].size(), 0u);
}

}  // namespace
}  // namespace bulwark::k8s::testing
