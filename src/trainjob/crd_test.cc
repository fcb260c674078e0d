// The CRD: generated from the parser's tables (so it cannot drift), its names,
// columns and rules; deploy/crd.yaml is exactly its rendering; the sample parses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "spec/job_spec_schema.h"
#include "trainjob/render.h"
#include "trainjob/testing/test_files.h"
#include "trainjob/trainjob.h"
#include "trainjob/trainjob_schema.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob {
namespace {

using ::testing::HasSubstr;

const Json& VersionOf(const Json& crd) { return crd["spec"]["versions"][0]; }
const Json& SpecSchema(const Json& crd) {
  return VersionOf(crd)["schema"]["openAPIV3Schema"]["properties"]["spec"];
}

std::vector<std::string> RuleTexts(const Json& schema) {
  std::vector<std::string> out;
  for (const Json& r : schema.value("x-kubernetes-validations", Json::array())) {
    out.push_back(r["rule"]);
  }
  return out;
}

// Every field of `fields` is in `schema` with the table's type and limits.
void ExpectTable(const Json& schema, std::span<const spec_internal::FieldDef> fields,
                 const std::string& where) {
  using spec_internal::FieldType;
  ASSERT_TRUE(schema.contains("properties")) << where;
  for (const auto& f : fields) {
    const std::string at = where + "." + f.key;
    ASSERT_TRUE(schema["properties"].contains(f.key)) << at << " is missing from the CRD";
    const Json& p = schema["properties"][f.key];
    EXPECT_EQ(p["description"], f.hint) << at;
    switch (f.type) {
      case FieldType::kInt:
        EXPECT_EQ(p["type"], "integer") << at;
        if (std::isfinite(f.max)) {
          EXPECT_EQ(p["maximum"], static_cast<int64_t>(f.max)) << at;
        }
        if (std::isfinite(f.min)) {
          EXPECT_EQ(p["minimum"], static_cast<int64_t>(f.min + (f.min_exclusive ? 1 : 0))) << at;
        }
        break;
      case FieldType::kNumber:
        EXPECT_EQ(p["type"], "number") << at;
        if (std::isfinite(f.min)) {
          EXPECT_EQ(p["minimum"], f.min) << at;
        }
        EXPECT_EQ(p.value("exclusiveMinimum", false), f.min_exclusive) << at;
        break;
      case FieldType::kIntOrAuto:
      case FieldType::kQuantity:
        EXPECT_EQ(p["x-kubernetes-int-or-string"], true) << at;
        break;
      case FieldType::kObject:
        ExpectTable(p, f.children, at);
        break;
      case FieldType::kObjectList:
        EXPECT_EQ(p["type"], "array") << at;
        ExpectTable(p["items"], f.children, at + "[]");
        break;
      case FieldType::kString:
        EXPECT_EQ(p["type"], "string") << at;
        if (!f.values.empty()) {
          EXPECT_EQ(p["enum"].size(), f.values.size()) << at;
        }
        break;
      default:
        break;
    }
    for (const auto& r : f.rules) {
      const Json& holder = f.type == FieldType::kObjectList ? p["items"] : p;
      EXPECT_THAT(RuleTexts(holder), ::testing::Contains(std::string(r.rule))) << at;
    }
    // A TrainJob's command may come from its image (docs/trainjob.md).
    if (f.required && std::string_view(f.key) != "command") {
      EXPECT_THAT(schema["required"], ::testing::Contains(f.key)) << at;
    }
  }
}

TEST(CrdTest, NamesVersionsAndColumns) {
  const Json crd = TrainJobCrd();
  EXPECT_EQ(crd["apiVersion"], "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd["metadata"]["name"], "trainjobs.bulwark.dev");
  const Json& spec = crd["spec"];
  EXPECT_EQ(spec["group"], "bulwark.dev");
  EXPECT_EQ(spec["scope"], "Namespaced");
  EXPECT_EQ(spec["names"]["kind"], "TrainJob");
  EXPECT_EQ(spec["names"]["plural"], "trainjobs");
  EXPECT_EQ(spec["names"]["shortNames"], Json({"tj"}));
  EXPECT_EQ(spec["names"]["categories"], Json({"all"}));
  const Json& v = VersionOf(crd);
  EXPECT_EQ(v["name"], "v1alpha1");
  EXPECT_EQ(v["served"], true);
  EXPECT_EQ(v["storage"], true);
  EXPECT_EQ(v["subresources"]["status"], Json::object());
  std::vector<std::string> columns;
  for (const Json& c : v["additionalPrinterColumns"]) columns.push_back(c["name"]);
  EXPECT_EQ(columns, (std::vector<std::string>{"Phase", "Nodes", "Step", "Restarts", "ETTR",
                                               "Checkpoint", "Age"}));
  const Json& status = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
  for (const char* k :
       {"phase", "message", "observedGeneration", "conditions", "restarts", "currentStep",
        "startTime", "completionTime", "lastCheckpoint", "admission", "ettr"}) {
    EXPECT_TRUE(status.contains(k)) << k;
  }
  EXPECT_EQ(status["conditions"]["items"]["properties"]["type"]["enum"],
            Json({"Admitted", "Running", "Restarting", "Succeeded", "Failed"}));
  EXPECT_EQ(status["ettr"]["properties"]["lostSeconds"]["properties"].size(), 7u);
}

// The spec schema is generated from the same tables the parser reads: every field of
// every table appears with its type, limits, hint and rules (a field added to a
// table appears here without touching crd.cc).
TEST(CrdTest, SpecSchemaIsGeneratedFromTheParserTables) {
  const Json crd = TrainJobCrd();
  const Json& spec = SpecSchema(crd);
  ExpectTable(spec, spec_internal::kJobFields, "spec");
  ExpectTable(spec, internal::kSpecExtraFields, "spec");
  EXPECT_EQ(spec["properties"].size(),
            std::size(spec_internal::kJobFields) + std::size(internal::kSpecExtraFields));
  EXPECT_FALSE(spec["properties"].contains("name"));  // a TrainJob's name is metadata.name
  EXPECT_EQ(spec["properties"]["nodes"]["maximum"], spec_internal::kMaxNodes);
  EXPECT_EQ(spec["required"], Json({"pod"}));
  const Json& interval = spec["properties"]["checkpoint"]["properties"]["intervalSteps"];
  // Structural (as kube-apiserver requires): anyOf names only the two types; the bounds
  // and the string form's pattern sit beside it.
  EXPECT_EQ(interval["anyOf"], Json::parse(R"([{"type": "integer"}, {"type": "string"}])"));
  EXPECT_EQ(interval["minimum"], 0);
  EXPECT_EQ(interval["pattern"], "^auto$");
}

TEST(CrdTest, CrossFieldRulesCarryMessages) {
  const Json crd = TrainJobCrd();
  const Json& spec = SpecSchema(crd);
  auto has_rule = [](const Json& schema, const std::string& needle) {
    for (const Json& r : schema.value("x-kubernetes-validations", Json::array())) {
      if (r["rule"].get<std::string>().find(needle) != std::string::npos) {
        EXPECT_FALSE(r["message"].get<std::string>().empty());
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has_rule(spec["properties"]["checkpoint"], "self.memorySlots != 0"));
  EXPECT_TRUE(has_rule(spec["properties"]["scheduling"], "self.gang != 'kueue'"));
  EXPECT_TRUE(
      has_rule(spec["properties"]["chaos"]["items"], "has(self.atSeconds) != has(self.atStep)"));
  EXPECT_TRUE(has_rule(spec, "f.rank <"));
  EXPECT_TRUE(has_rule(spec["properties"]["faultPolicy"]["properties"]["backoff"], "capSeconds"));
  EXPECT_TRUE(has_rule(spec["properties"]["pod"]["properties"]["tolerations"]["items"],
                       "bulwark.dev/quarantined"));
}

TEST(CrdTest, DeployCrdYamlIsTheRenderedCrd) {
  const std::string path = std::string(BW_TEST_SOURCE_DIR) + "/deploy/crd.yaml";
  const std::string want = EmitYaml({TrainJobCrd()});
  EXPECT_TRUE(testing::ReadTestFile(path) == want)
      << path << " differs from `bulwark render --crd`; regenerate it with:\n"
      << "  build/bin/bulwark render --crd > deploy/crd.yaml";
}

TEST(CrdTest, LlamaExampleTrainJobParses) {
  auto r =
      LoadManifest(std::string(BW_TEST_SOURCE_DIR) + "/examples/kubernetes/llama-8b-trainjob.yaml",
                   Target::kKubernetes);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->kind, ManifestKind::kTrainJob);
  EXPECT_EQ(r->job.job.nodes, 4);
  EXPECT_FALSE(r->job.pod.image.empty());
}

}  // namespace
}  // namespace bulwark::trainjob
