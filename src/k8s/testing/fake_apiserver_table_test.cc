// FakeApiServer Table output over real HTTPS (libcurl): what `kubectl get` asks for
// (Accept: application/json;as=Table;v=v1;g=meta.k8s.io) and prints — a CRD's
// additionalPrinterColumns, the cell rules, ages from the injected clock, content
// negotiation, and the CRD validation of the columns.
#include <gtest/gtest.h>

#include "k8s/testing/fake_apiserver_internal.h"
#include "k8s/testing/fake_apiserver_test_util.h"

namespace bulwark::k8s::testing {
namespace {

constexpr const char* kTable = "Accept: application/json;as=Table;v=v1;g=meta.k8s.io";

Json Column(const std::string& name, const std::string& type, const std::string& path,
            int priority = 0) {
  return {{"name", name},
          {"type", type},
          {"jsonPath", path},
          {"description", name + " of the job"},
          {"priority", priority}};
}

Json Crd(const Json& columns) {
  Json extra = Json::object();
  if (!columns.is_null()) extra["additionalPrinterColumns"] = columns;
  return CrdJson("bulwark.dev", "trainjobs", "TrainJob", "v1alpha1", OpenSpecStatusSchema(), extra);
}

Json JobWithStatus(const std::string& name, Json spec, Json status = Json::object()) {
  return {{"apiVersion", "bulwark.dev/v1alpha1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", std::move(spec)},
          {"status", std::move(status)}};
}

class FakeApiServerTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServerOptions o;
    o.clock = &clock;
    server = StartServer(o);
    ASSERT_TRUE(server);
    curl = std::make_unique<Curl>(*server);
  }
  HttpResult GetTable(const std::string& path) { return curl->Do("GET", path, "", "", {kTable}); }
  static std::vector<std::string> Names(const Json& table) {
    std::vector<std::string> out;
    for (const Json& c : table["columnDefinitions"]) out.push_back(c["name"]);
    return out;
  }

  FakeClock clock{100.0, 1.8e9};
  std::unique_ptr<FakeApiServer> server;
  std::unique_ptr<Curl> curl;
};

TEST_F(FakeApiServerTableTest, PrinterColumnsBecomeTheTableWithTypedCells) {
  Json columns = {Column("Phase", "string", ".status.phase"),
                  Column("Nodes", "integer", ".spec.nodes"),
                  Column("Ratio", "number", ".status.ratio"),
                  Column("Ready", "boolean", ".status.ready"),
                  Column("FirstRank", "string", ".spec.ranks[0].id"),
                  Column("Missing", "string", ".status.nothing"),
                  Column("WrongType", "integer", ".status.phase"),
                  Column("Age", "date", ".metadata.creationTimestamp"),
                  Column("Detail", "string", ".status.message", 1)};
  ASSERT_EQ(curl->Post(kCrds, Crd(columns)).code, 201);
  Json spec = {{"nodes", 4}, {"ranks", {{{"id", 7}}}}};
  Json status = {{"phase", "Running"}, {"ratio", 0.97}, {"ready", true}, {"message", "ok"}};
  ASSERT_EQ(curl->Post(kJobs, JobWithStatus("a", spec, status)).code, 201);
  ASSERT_EQ(curl->Post(kJobs, JobWithStatus("b", {{"nodes", 2}})).code, 201);
  clock.Advance(3 * 3600 + 12 * 60 + 5);

  HttpResult r = GetTable(kJobs);
  ASSERT_EQ(r.code, 200) << r.body;
  Json t = r.json();
  EXPECT_EQ(t["kind"], "Table");
  EXPECT_EQ(t["apiVersion"], "meta.k8s.io/v1");
  EXPECT_FALSE(t["metadata"]["resourceVersion"].get<std::string>().empty());
  EXPECT_EQ(Names(t),
            (std::vector<std::string>{"Name", "Phase", "Nodes", "Ratio", "Ready", "FirstRank",
                                      "Missing", "WrongType", "Age", "Detail"}));
  EXPECT_EQ(t["columnDefinitions"][0]["format"], "name");
  EXPECT_EQ(t["columnDefinitions"][1]["description"], "Phase of the job");
  EXPECT_EQ(t["columnDefinitions"][9]["priority"], 1);
  ASSERT_EQ(t["rows"].size(), 2u);
  const Json& a = t["rows"][0]["cells"];
  EXPECT_EQ(a, Json({"a", "Running", 4, 0.97, true, "7", nullptr, nullptr, "3h12m", "ok"}));
  const Json& b = t["rows"][1]["cells"];
  EXPECT_EQ(b,
            Json({"b", nullptr, 2, nullptr, nullptr, nullptr, nullptr, nullptr, "3h12m", nullptr}));
  // Rows carry the object's metadata by default.
  const Json& obj = t["rows"][0]["object"];
  EXPECT_EQ(obj["kind"], "PartialObjectMetadata");
  EXPECT_EQ(obj["metadata"]["name"], "a");
  EXPECT_FALSE(obj.contains("spec"));

  // One object, and the includeObject choices.
  Json one = GetTable(std::string(kJobs) + "/a?includeObject=Object").json();
  ASSERT_EQ(one["rows"].size(), 1u);
  EXPECT_EQ(one["rows"][0]["object"]["spec"]["nodes"], 4);
  Json none = GetTable(std::string(kJobs) + "?includeObject=None").json();
  EXPECT_FALSE(none["rows"][0].contains("object"));
  EXPECT_EQ(GetTable(std::string(kJobs) + "/zz").code, 404);
}

TEST_F(FakeApiServerTableTest, NoColumnsMeansNameAndAgeAsForBuiltInKinds) {
  ASSERT_EQ(curl->Post(kCrds, Crd(nullptr)).code, 201);
  ASSERT_EQ(curl->Post(kJobs, JobWithStatus("a", {{"nodes", 1}})).code, 201);
  ASSERT_EQ(curl->Post(kPods, PodJson("default", "p")).code, 201);
  clock.Advance(90);
  Json jobs = GetTable(kJobs).json();
  EXPECT_EQ(Names(jobs), (std::vector<std::string>{"Name", "Age"}));
  EXPECT_EQ(jobs["rows"][0]["cells"], Json({"a", "90s"}));
  Json pods = GetTable(kPods).json();
  EXPECT_EQ(Names(pods), (std::vector<std::string>{"Name", "Age"}));
  EXPECT_EQ(pods["rows"][0]["cells"], Json({"p", "90s"}));
}

TEST_F(FakeApiServerTableTest, ContentNegotiationFollowsTheAcceptHeaderInOrder) {
  ASSERT_EQ(curl->Post(kPods, PodJson("default", "p")).code, 201);
  auto kind = [&](const std::string& accept) {
    HttpResult r = curl->Do("GET", kPods, "", "", {"Accept: " + accept});
    return r.code == 200 ? r.json()["kind"].get<std::string>() : std::to_string(r.code);
  };
  // kubectl get's header: Table first, JSON as the fallback.
  EXPECT_EQ(kind("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                 "g=meta.k8s.io,application/json"),
            "Table");
  EXPECT_EQ(kind("application/json; as=Table; v=v1beta1; g=meta.k8s.io"), "Table");
  EXPECT_EQ(kind("application/json"), "PodList");
  EXPECT_EQ(kind("*/*"), "PodList");
  EXPECT_EQ(kind("application/vnd.kubernetes.protobuf, application/json"), "PodList");
  EXPECT_EQ(kind("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,"
                 "application/json"),
            "PodList");
  EXPECT_EQ(kind("application/json;as=Table;v=v2;g=meta.k8s.io"), "406");
  EXPECT_EQ(kind("application/yaml"), "406");
  // Table watches are not reproduced: 406 with the reason, not a JSON stream.
  HttpResult w = curl->Do("GET", std::string(kPods) + "?watch=1", "", "", {kTable});
  EXPECT_EQ(w.code, 406);
  EXPECT_NE(w.body.find("watches"), std::string::npos) << w.body;
}

TEST_F(FakeApiServerTableTest, BadPrinterColumnsAreRejectedNamingTheField) {
  Json columns = {Column("", "string", ".status.phase"), Column("T", "color", ".status.phase"),
                  Column("P", "string", "status.phase"), Column("N", "integer", ".spec.n", -1)};
  HttpResult r = curl->Post(kCrds, Crd(columns));
  ASSERT_EQ(r.code, 422) << r.body;
  std::vector<std::string> fields;
  const Json status = r.json();
  for (const Json& c : status["details"]["causes"]) fields.push_back(c["field"]);
  const std::string p = "spec.versions[0].additionalPrinterColumns";
  EXPECT_EQ(fields, (std::vector<std::string>{p + "[0].name", p + "[1].type", p + "[2].jsonPath",
                                              p + "[3].priority"}));
  EXPECT_NE(r.body.find("supported values"), std::string::npos) << r.body;
}

TEST(HumanDurationTest, MatchesKubernetesFormatting) {
  using internal::HumanDuration;
  EXPECT_EQ(HumanDuration(-5), "<invalid>");
  EXPECT_EQ(HumanDuration(-0.5), "0s");
  EXPECT_EQ(HumanDuration(0), "0s");
  EXPECT_EQ(HumanDuration(119), "119s");
  EXPECT_EQ(HumanDuration(125), "2m5s");
  EXPECT_EQ(HumanDuration(300), "5m");
  EXPECT_EQ(HumanDuration(17 * 60 + 30), "17m");
  EXPECT_EQ(HumanDuration(3 * 3600), "3h");
  EXPECT_EQ(HumanDuration(3 * 3600 + 12 * 60 + 59), "3h12m");
  EXPECT_EQ(HumanDuration(20 * 3600), "20h");
  EXPECT_EQ(HumanDuration(2 * 86400 + 5 * 3600), "2d5h");
  EXPECT_EQ(HumanDuration(3 * 86400), "3d");
  EXPECT_EQ(HumanDuration(400 * 86400.0), "400d");
  EXPECT_EQ(HumanDuration((3 * 365 + 20) * 86400.0), "3y20d");
  EXPECT_EQ(HumanDuration(10 * 365 * 86400.0), "10y");
}

}  // namespace
}  // namespace bulwark::k8s::testing
