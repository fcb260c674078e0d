// Every object Bulwark generates validates against the official Kubernetes v1.36
// OpenAPI schema (npm kubernetes-models, tools/k8s-schema), with unknown fields
// rejected as by a strict API server; TrainJobs against our CRD. Negative cases
// prove the validator catches misspelled fields, wrong types and bad enum values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "trainjob/render.h"
#include "trainjob/testing/schema_check.h"
#include "trainjob/testing/test_files.h"
#include "trainjob/trainjob.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::ValidateK8sObjects;

const std::string kSource = BW_TEST_SOURCE_DIR;
using testing::kTestdata;

std::vector<Json> Docs(const std::string& path) {
  auto docs = ParseYamlDocuments(testing::ReadTestFile(path), path);
  EXPECT_TRUE(docs.ok()) << docs.status().message();
  return docs.ok() ? *docs : std::vector<Json>{};
}

TrainJob Full(GangMode gang) {
  auto r = LoadManifest(kTestdata + "/trainjob-full.yaml", Target::kKubernetes);
  EXPECT_TRUE(r.ok()) << r.status().message();
  TrainJob t = r.ok() ? r->job : TrainJob();
  t.uid = "0b7c1a4e-52c3-4b1d-9a59-3c1e7d2f8a10";
  t.scheduling.gang = gang;
  if (gang == GangMode::kKueue) t.scheduling.kueue_queue = "team-a";
  return t;
}

TEST(K8sSchemaTest, CrdValidates) {
  std::vector<std::string> skipped;
  Status s = ValidateK8sObjects({TrainJobCrd()}, &skipped);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(skipped.empty());
}

TEST(K8sSchemaTest, DeployManifestsValidate) {
  std::vector<Json> all;
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/deploy")) {
    if (entry.path().extension() != ".yaml") continue;
    if (entry.path().filename() == "kustomization.yaml") continue;  // kubectl's, not the API's
    for (Json& d : Docs(entry.path().string())) all.push_back(std::move(d));
  }
  ASSERT_GE(all.size(), 9u);  // CRD, RBAC (5 + Volcano's 2), namespace, deployment, sample, ...
  std::vector<std::string> skipped;
  Status s = ValidateK8sObjects(all, &skipped);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(skipped.empty()) << skipped.front();
}

// The deploy/ files in the order a document applies them: `kubectl apply -f deploy/X`
// lines (several -f on one line count in order), or kustomization.yaml's resources.
std::vector<std::string> ApplyOrder(const std::string& doc) {
  std::ifstream in(kSource + "/" + doc);
  std::vector<std::string> order;
  const bool kustomize = doc.find("kustomization") != std::string::npos;
  for (std::string line; std::getline(in, line);) {
    if (kustomize) {
      const size_t dash = line.find("- ");
      if (dash != std::string::npos && line.find(".yaml") != std::string::npos) {
        order.push_back(line.substr(dash + 2));
      }
      continue;
    }
    if (line.find("kubectl apply") == std::string::npos) continue;
    std::istringstream words(line);
    for (std::string w, prev; words >> w; prev = w) {
      if (prev == "-f" && w.rfind("deploy/", 0) == 0) order.push_back(w.substr(7));
      if (prev == "-k" && (w == "deploy/" || w == "deploy")) {  // kustomization's resources
        for (const std::string& f : ApplyOrder("deploy/kustomization.yaml")) order.push_back(f);
      }
      if (w == "#") break;
    }
  }
  return order;
}

TEST(K8sSchemaTest, TheDocumentedApplyOrdersCreateEachNamespaceBeforeItIsUsed) {
  const std::vector<std::string> want = {"crd.yaml", "rbac.yaml", "operator.yaml"};
  for (const std::string doc : {"README.md", "deploy/README.md", "deploy/kustomization.yaml"}) {
    std::vector<std::string> order = ApplyOrder(doc);
    std::vector<std::string> install;  // the operator's files, in the document's order
    for (const std::string& f : order) {
      if (std::find(want.begin(), want.end(), f) != want.end()) install.push_back(f);
    }
    // Each way the document shows (`apply -k deploy/`, the files one by one) applies
    // all three, in this order.
    ASSERT_FALSE(install.empty()) << doc << " applies none of the operator's files";
    for (size_t i = 0; i < install.size(); i += want.size()) {
      std::vector<std::string> one(install.begin() + i,
                                   install.begin() + std::min(install.size(), i + want.size()));
      EXPECT_EQ(one, want) << doc << " applies the operator's files in another order";
    }
    std::set<std::string> namespaces = {"default", "kube-system"};
    for (const std::string& f : order) {
      if (f == "sample-trainjob.yaml") continue;  // its namespace is the user's (`ml`)
      for (const Json& o : Docs(kSource + "/deploy/" + f)) {
        const Json meta = o.value("metadata", Json::object());
        if (o.value("kind", "") == "Namespace") namespaces.insert(meta.value("name", ""));
        const std::string ns = meta.value("namespace", "");
        EXPECT_TRUE(ns.empty() || namespaces.count(ns))
            << doc << ": deploy/" << f << " puts " << o.value("kind", "") << " "
            << meta.value("name", "") << " in namespace " << ns << " before any file creates it";
      }
    }
  }
}

TEST(K8sSchemaTest, RenderedObjectsValidateInEveryGangMode) {
  for (GangMode gang : {GangMode::kBulwark, GangMode::kVolcano, GangMode::kKueue}) {
    const TrainJob t = Full(gang);
    RenderOptions o;
    o.labels = {{"bulwark.dev/operator", "bulwark-operator-0"}};
    o.annotations = {{"bulwark.dev/generation", "3"}};
    o.python_dir = "/opt/bulwark/python";
    std::vector<Json> objs = RenderJobObjects(t, {"gpu-1", "gpu-2", "gpu-3"}, o);
    objs.push_back(ToObject(t));
    objs.push_back(RenderEvent(ToObject(t), "Normal", "Admitted", "admitted on rack r1", 1.7e9));
    std::vector<std::string> skipped;
    Status s = ValidateK8sObjects(objs, &skipped);
    EXPECT_TRUE(s.ok()) << GangModeName(gang) << ":\n" << s.message();
    if (gang == GangMode::kVolcano) {
      ASSERT_EQ(skipped.size(), 1u);
      EXPECT_THAT(skipped[0], HasSubstr("PodGroup"));
    } else {
      EXPECT_TRUE(skipped.empty());
    }
  }
}

TEST(K8sSchemaTest, NodeTaintEventAndConvertedJobsValidate) {
  Json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", "gpu-7"}, {"labels", {{"bulwark.dev/gpu-type", "h100"}}}}},
               {"spec", {{"taints", Json::array({RenderQuarantineTaint("NodeNotReady")})}}}};
  std::vector<Json> objs = {node, RenderEvent(node, "Warning", "NodeQuarantined", "NotReady", 1e9)};
  for (const char* f : {"pytorchjob-mnist.yaml", "pytorchjob-elastic.yaml", "pytorchjob-llm.yaml",
                        "pytorchjob-quickstart.yaml"}) {
    auto m = LoadManifest(kTestdata + "/" + f, Target::kKubernetes);
    ASSERT_TRUE(m.ok()) << m.status().message();
    m->job.pod.image_pull_secrets = {"regcred"};  // the pods' imagePullSecrets
    objs.push_back(ToObject(m->job));
    for (Json& o : RenderJobObjects(m->job, {}, {})) objs.push_back(std::move(o));
  }
  Status s = ValidateK8sObjects(objs);
  EXPECT_TRUE(s.ok()) << s.message();
}

// A validator that passes everything is a defect: each broken object is caught with
// the object, the JSON path and the problem.
TEST(K8sSchemaTest, CatchesMisspelledFieldsWrongTypesAndBadEnums) {
  Json pod = RenderPod(Full(GangMode::kBulwark), "node-0", 0, "gpu-1", {});
  Json misspelled = pod;
  misspelled["spec"]["hostNetwrk"] = true;
  misspelled["spec"]["containers"][0]["volumeMount"] = Json::array();
  Json wrong_type = pod;
  wrong_type["spec"]["terminationGracePeriodSeconds"] = "forty";
  wrong_type["spec"]["containers"][0]["command"] = "bulwark-agent";
  Json bad_enum = pod;
  bad_enum["spec"]["dnsPolicy"] = "ClusterFirstWithHostNetwork";
  bad_enum["spec"]["restartPolicy"] = "Sometimes";
  Status s = ValidateK8sObjects({misspelled, wrong_type, bad_enum});
  ASSERT_EQ(s.code(), Code::kInvalidArgument) << s.message();
  const std::string& m = s.message();
  EXPECT_THAT(m, HasSubstr("Pod ml/gpt-char-node-0: spec.hostNetwrk: unknown field"));
  EXPECT_THAT(m,
              HasSubstr("Pod ml/gpt-char-node-0: spec.containers[0].volumeMount: unknown field"));
  EXPECT_THAT(m, HasSubstr("spec.terminationGracePeriodSeconds: must be integer"));
  EXPECT_THAT(m, HasSubstr("spec.containers[0].command: must be array"));
  EXPECT_THAT(m, HasSubstr("spec.dnsPolicy: must be equal to one of the allowed values"));
  EXPECT_THAT(m, HasSubstr("spec.restartPolicy: must be equal to one of the allowed values"));
}

TEST(K8sSchemaTest, CatchesTrainJobsTheCrdRejects) {
  Json tj = ToObject(Full(GangMode::kBulwark));
  tj["spec"]["nodez"] = 3;
  tj["spec"]["procsPerNode"] = "eight";
  tj["spec"]["scheduling"]["tier"] = "gold";
  tj["spec"]["checkpoint"]["intervalSteps"] = "sometimes";
  tj["spec"]["faultPolicy"]["backoff"]["baseSeconds"] = 0;  // exclusive minimum
  tj["metadata"]["lables"] = Json::object();
  Json service = RenderHeadlessService(Full(GangMode::kBulwark));
  service["spec"]["clusterIP"] = 7;
  Status s = ValidateK8sObjects({tj, service});
  ASSERT_EQ(s.code(), Code::kInvalidArgument) << s.message();
  const std::string& m = s.message();
  EXPECT_THAT(m, HasSubstr("TrainJob ml/gpt-char: spec: unknown field \"nodez\""));
  EXPECT_THAT(m, HasSubstr("TrainJob ml/gpt-char: spec.procsPerNode: must be integer"));
  EXPECT_THAT(m, HasSubstr("spec.scheduling.tier: must be equal to one of the allowed values "
                           "(production, research)"));
  EXPECT_THAT(m, HasSubstr("spec.checkpoint.intervalSteps"));
  EXPECT_THAT(m, HasSubstr("spec.faultPolicy.backoff.baseSeconds: must be > 0"));
  EXPECT_THAT(m, HasSubstr("metadata.lables: unknown field"));
  EXPECT_THAT(m, HasSubstr("Service ml/gpt-char: spec.clusterIP: must be string"));
}

TEST(K8sSchemaTest, CatchesBrokenCrdSchemas) {
  Json crd = TrainJobCrd();
  Json& spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
  spec["properties"]["chaos"]["items"]["properties"]["rank"]["minimun"] = 0;
  spec["properties"]["nodes"]["type"] = 5;
  Status s = ValidateK8sObjects({crd});
  ASSERT_EQ(s.code(), Code::kInvalidArgument) << s.message();
  EXPECT_THAT(s.message(),
              HasSubstr("properties.chaos.items.properties.rank.minimun: unknown field"));
  EXPECT_THAT(s.message(), HasSubstr("properties.spec.properties.nodes.type: must be string"));
}

TEST(K8sSchemaTest, MissingToolIsAFailureThatSaysHowToInstallIt) {
  testing::SchemaCheckOptions o;
  o.tool_dir = "/nonexistent/k8s-schema";
  Status s = ValidateK8sObjects({TrainJobCrd()}, nullptr, o);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("scripts/setup.sh"));
}

}  // namespace
}  // namespace bulwark::trainjob
