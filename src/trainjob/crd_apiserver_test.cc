// The TrainJob CRD against the REAL kube-apiserver (v1.36, with RBAC and Pod Security
// admission; k8s/testing/control_plane.h), not the fake server, which ignores CEL:
//  * TrainJobCrd() is deploy/crd.yaml, installs and becomes Established;
//  * every x-kubernetes-validations rule in it, found by walking the schema, refuses
//    an example that breaks only that rule (422, the rule's message, its field) and
//    admits examples at its edge — a rule without examples fails the test;
//  * structural-schema semantics: pruning (and Strict refusal) of unknown fields,
//    schema defaults, type/enum/bound errors naming the field;
//  * the status subresource and metadata.generation;
//  * the printer columns through a real Table request and the real kubectl;
//  * Pod Security admission: the operator's pod runs under `restricted`; the training
//    pods need a `privileged` namespace.
// All tests share one control plane and each works in namespaces of its own.
#include <curl/curl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/curl_util.h"
#include "k8s/client.h"
#include "k8s/testing/cluster.h"
#include "k8s/testing/control_plane.h"
#include "spec/job_spec_schema.h"
#include "trainjob/render.h"
#include "trainjob/trainjob.h"
#include "trainjob/trainjob_schema.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob {
namespace {

using k8s::Client;
using k8s::Resource;
using k8s::testing::ControlPlane;
using ::testing::HasSubstr;

const Resource kServiceAccounts{"", "v1", "serviceaccounts", "ServiceAccount", true};

std::string ReadSourceFile(const std::string& relative) {
  std::ifstream in(std::string(BW_TEST_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The documents of a YAML file of the repository (a failure when unreadable).
std::vector<Json> SourceDocuments(const std::string& relative) {
  auto docs = ParseYamlDocuments(ReadSourceFile(relative), relative);
  EXPECT_TRUE(docs.ok()) << docs.status().ToString();
  return docs.ok() ? *docs : std::vector<Json>{};
}

Json J(const std::string& text) { return Json::parse(text); }

// --- Raw HTTPS to the API server as cluster-admin, for what k8s::Client does not send
// (dryRun, fieldValidation, the Table Accept header) and for the full Status body.

struct HttpReply {
  long code = 0;  // NOLINT(runtime/int)
  std::string body;
  std::vector<std::string> warnings;  // the Warning headers' texts
  std::string error;                  // curl's, when there is no reply
  Json json() const { return Json::parse(body, nullptr, false); }
  std::string Describe() const {
    return "HTTP " + std::to_string(code) + (error.empty() ? "" : " (" + error + ")") + ": " + body;
  }
};

size_t AppendBody(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

// A Warning header ("299 - \"text\"", RFC 7234) as its text.
size_t CollectWarning(char* p, size_t size, size_t n, void* out) {
  const std::string line(p, size * n);
  static const std::regex kWarning("^[Ww]arning:\\s*[0-9]{3} \\S+ \"(.*)\"\\s*$");
  std::smatch m;
  if (std::regex_match(line, m, kWarning)) {
    std::string text;
    const std::string quoted = m[1];
    for (size_t i = 0; i < quoted.size(); ++i) {
      if (quoted[i] == '\\' && i + 1 < quoted.size()) ++i;
      text += quoted[i];
    }
    static_cast<std::vector<std::string>*>(out)->push_back(text);
  }
  return size * n;
}

HttpReply Raw(const ControlPlane& cp, const std::string& method, const std::string& path,
              const Json& body = nullptr, const std::string& accept = "application/json") {
  HttpReply r;
  if (Status s = curl::GlobalInit(); !s.ok()) {
    r.error = s.ToString();
    return r;
  }
  const k8s::ClientConfig cfg = cp.AdminConfig();
  CURL* h = curl_easy_init();
  char err[CURL_ERROR_SIZE];
  curl::ResetWithBaseOptions(h, cp.url() + path, err);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
  curl::HeaderList headers;
  headers.Add("Accept: " + accept);
  const std::string payload = body.is_null() ? "" : body.dump();
  if (!payload.empty()) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));  // NOLINT
    headers.Add("Content-Type: application/json");
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  curl_blob ca{const_cast<char*>(cfg.ca_pem.data()), cfg.ca_pem.size(), CURL_BLOB_COPY};
  curl_blob cert{const_cast<char*>(cfg.client_cert_pem.data()), cfg.client_cert_pem.size(),
                 CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(cfg.client_key_pem.data()), cfg.client_key_pem.size(),
                CURL_BLOB_COPY};
  curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
  curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
  curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
  curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, CollectWarning);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &r.warnings);
  if (CURLcode c = curl_easy_perform(h); c != CURLE_OK) {
    r.error = err[0] ? err : curl_easy_strerror(c);
  } else {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.code);
  }
  curl_easy_cleanup(h);
  return r;
}

// POST of `obj` to its collection; `query` without '?' ("dryRun=All").
HttpReply PostObject(const ControlPlane& cp, const Json& obj, const std::string& query = "") {
  const Resource r = k8s::testing::ResourceFor(obj);
  return Raw(cp, "POST", r.Path(k8s::Namespace(obj)) + (query.empty() ? "" : "?" + query), obj);
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " | ") + s;
  return out;
}

// --- TrainJob objects and edits.

Json MinimalJob(const std::string& ns, const std::string& name) {
  return {{"apiVersion", kApiVersion},
          {"kind", kKind},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", J(R"({"nodes": 2, "procsPerNode": 4, "command": ["python3", "train.py"],
                         "pod": {"image": "ghcr.io/acme/train:1.0"}})")}};
}

// Sets the dotted `path` of an object to the JSON text `json`, creating objects on the
// way; "null" removes the key.
struct Edit {
  std::string path;
  std::string json;
};
using Edits = std::vector<Edit>;

Json Edited(Json obj, const Edits& edits) {
  for (const Edit& e : edits) {
    Json* at = &obj;
    std::string rest = e.path;
    for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
      at = &(*at)[rest.substr(0, dot)];
    }
    if (e.json == "null") {
      at->erase(rest);
    } else {
      (*at)[rest] = J(e.json);
    }
  }
  return obj;
}

std::string Describe(const Edits& edits) {
  std::string out;
  for (const Edit& e : edits) out += (out.empty() ? "" : ", ") + e.path + "=" + e.json;
  return out;
}

// The value at a printer column's JSONPath (".status.phase"; dotted fields only).
Json AtJsonPath(const Json& obj, const std::string& path) {
  const Json* at = &obj;
  std::stringstream ss(path.substr(1));
  for (std::string key; std::getline(ss, key, '.');) {
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
  }
  return *at;
}

// --- The CRD's schema, walked.

const Json& VersionOf(const Json& crd) { return crd["spec"]["versions"][0]; }
const Json& RootSchema(const Json& crd) { return VersionOf(crd)["schema"]["openAPIV3Schema"]; }

// A CEL rule and where it sits: `at` is the API field path of the schema node that
// holds it ("" = the object itself, "spec.chaos[0]" = the first list item).
struct RuleSite {
  std::string at;
  Json rule;  // {rule, message, [fieldPath], [reason], ...}
  std::string message() const { return rule.value("message", rule.value("rule", "")); }
  // The field the API reports a violation at (a rule at the root: "<nil>").
  std::string field() const {
    const std::string base = at.empty() ? "<nil>" : at;
    const std::string sub = rule.value("fieldPath", "");
    return sub.empty() ? base : (at.empty() ? sub.substr(1) : at + sub);
  }
};

std::string Child(const std::string& at, const std::string& key) {
  return at.empty() ? key : at + "." + key;
}

void CollectRules(const Json& schema, const std::string& at, std::vector<RuleSite>* out) {
  if (!schema.is_object()) return;
  for (const Json& r : schema.value("x-kubernetes-validations", Json::array())) {
    out->push_back({at, r});
  }
  if (schema.contains("properties")) {
    for (const auto& [k, v] : schema["properties"].items()) CollectRules(v, Child(at, k), out);
  }
  if (schema.contains("items")) CollectRules(schema["items"], at + "[0]", out);
  if (schema.contains("additionalProperties")) {
    CollectRules(schema["additionalProperties"], at + "[KEY]", out);
  }
}

// A schema default and the field path it applies to (list items are "[0]").
struct DefaultSite {
  std::string at;
  Json value;
};

void CollectDefaults(const Json& schema, const std::string& at, std::vector<DefaultSite>* out) {
  if (!schema.is_object()) return;
  if (schema.contains("default")) out->push_back({at, schema["default"]});
  if (schema.contains("properties")) {
    for (const auto& [k, v] : schema["properties"].items()) CollectDefaults(v, Child(at, k), out);
  }
  if (schema.contains("items")) CollectDefaults(schema["items"], at + "[0]", out);
  if (schema.contains("additionalProperties")) {
    CollectDefaults(schema["additionalProperties"], at + "[KEY]", out);
  }
}

// The causes of a 422 Status as "field: message" lines.
std::vector<std::string> Causes(const HttpReply& r) {
  std::vector<std::string> out;
  const Json j = r.json();
  if (!j.is_object() || !j.contains("details")) return out;
  for (const Json& c : j["details"].value("causes", Json::array())) {
    out.push_back(c.value("field", "") + ": " + c.value("message", "") + " [" +
                  c.value("reason", "") + "]");
  }
  return out;
}

// --- The fixture: the shared control plane, an admin client and the installed CRD.

class TrainJobApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cp_ = k8s::testing::SharedControlPlane();
    ASSERT_NE(cp_, nullptr);
    auto c = Client::Create(cp_->AdminConfig());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    admin_ = std::move(c).value();
    static bool installed = false;
    if (!installed) {
      Status s = k8s::testing::InstallCrd(admin_.get(), TrainJobCrd());
      ASSERT_TRUE(s.ok()) << "TrainJobCrd() does not install: " << s.ToString();
      installed = true;
    }
  }

  std::string NewNamespace(const std::string& prefix,
                           const std::map<std::string, std::string>& labels = {}) {
    auto ns = k8s::testing::UniqueNamespace(admin_.get(), prefix, labels);
    EXPECT_TRUE(ns.ok()) << ns.status().ToString();
    return ns.ok() ? *ns : "";
  }

  void CreateServiceAccount(const std::string& ns, const std::string& name) {
    auto sa = admin_->Create(kServiceAccounts, ns,
                             {{"apiVersion", "v1"},
                              {"kind", "ServiceAccount"},
                              {"metadata", {{"name", name}, {"namespace", ns}}}});
    ASSERT_TRUE(sa.ok() || k8s::IsAlreadyExists(sa.status())) << sa.status().ToString();
  }

  Result<std::string> Kubectl(const std::vector<std::string>& args) {
    std::vector<std::string> a = {"--cache-dir=" + cp_->work_dir() + "/kubectl-cache"};
    a.insert(a.end(), args.begin(), args.end());
    return k8s::testing::Kubectl(*cp_, cp_->admin_kubeconfig(), a);
  }

  ControlPlane* cp_ = nullptr;
  std::unique_ptr<Client> admin_;
};

// --- 1. The CRD.

TEST_F(TrainJobApiServerTest, GeneratedCrdIsDeployYamlAndIsEstablished) {
  const Json crd = TrainJobCrd();
  const std::vector<Json> docs = SourceDocuments("deploy/crd.yaml");
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0], crd) << "deploy/crd.yaml is not TrainJobCrd(); regenerate it with "
                             "`bulwark render --crd > deploy/crd.yaml`";

  // Applying it again is a no-op update; the server keeps the schema as sent.
  ASSERT_TRUE(k8s::testing::InstallCrd(admin_.get(), docs[0]).ok());
  auto live = admin_->Get(k8s::CustomResourceDefinitions(), "", "trainjobs.bulwark.dev");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_EQ(VersionOf(*live)["schema"], VersionOf(crd)["schema"]);
  EXPECT_EQ(VersionOf(*live)["additionalPrinterColumns"].size(),
            VersionOf(crd)["additionalPrinterColumns"].size());
  std::map<std::string, std::string> conditions;
  for (const Json& c : (*live)["status"]["conditions"]) {
    conditions[c["type"].get<std::string>()] = c["status"].get<std::string>();
  }
  EXPECT_EQ(conditions["Established"], "True");
  EXPECT_EQ(conditions["NamesAccepted"], "True");
  EXPECT_EQ(conditions.count("NonStructuralSchema"), 0u) << (*live)["status"].dump();
  const Json& accepted = (*live)["status"]["acceptedNames"];
  EXPECT_EQ(accepted["kind"], "TrainJob");
  EXPECT_EQ(accepted["shortNames"], Json({"tj"}));
  EXPECT_EQ(accepted["categories"], Json({"all"}));
}

// --- 2. Every CEL rule, evaluated by the server.

struct RuleCase {
  std::vector<Edits> violate;  // each breaks this rule and nothing else
  std::vector<Edits> satisfy;  // each is valid, at the rule's edge
};

// Examples for every rule of the CRD, keyed by the rule's message. Edits apply to
// MinimalJob (nodes 2, procsPerNode 4: world size 8).
const std::map<std::string, RuleCase>& RuleCases() {
  using spec_internal::kBackoffRules;
  using spec_internal::kChaosRules;
  using spec_internal::kCheckpointRules;
  using spec_internal::kCommandRules;
  using spec_internal::kJobRules;
  using spec_internal::kMemorySlotsRules;
  using spec_internal::kObjectStoreRules;
  static const std::map<std::string, RuleCase> cases = {
      {kCheckpointRules[0].message,
       {{{{"spec.checkpoint", R"({"intervalSteps": "auto", "memorySlots": 0})"}}},
        {{{"spec.checkpoint", R"({"intervalSteps": "auto", "memorySlots": 2})"}},
         {{"spec.checkpoint", R"({"intervalSteps": "auto"})"}},
         {{"spec.checkpoint", R"({"intervalSteps": 100, "memorySlots": 0})"}}}}},
      {kMemorySlotsRules[0].message,
       {{{{"spec.checkpoint", R"({"memorySlots": 1})"}}},
        {{{"spec.checkpoint", R"({"memorySlots": 0})"}},
         {{"spec.checkpoint", R"({"memorySlots": 2})"}},
         {{"spec.checkpoint", R"({"memorySlots": 62})"}}}}},
      {kObjectStoreRules[0].message,
       {{{{"spec.checkpoint", R"({"objectStore": "gs://bucket/prefix"})"}},
         {{"spec.checkpoint", R"({"objectStore": "s3://"})"}},
         {{"spec.checkpoint", R"({"objectStore": "s3:///prefix"})"}},
         {{"spec.checkpoint", R"({"objectStore": "s3://?region=eu-west-1"})"}}},
        {{{"spec.checkpoint", R"({"objectStore": "s3://b"})"}},
         {{"spec.checkpoint",
           R"({"objectStore": "s3://bucket/p?endpoint=http://minio:9000&region=us-east-1"})"}}}}},
      {kBackoffRules[0].message,
       {{{{"spec.faultPolicy", R"({"backoff": {"baseSeconds": 10, "capSeconds": 5}})"}},
         {{"spec.faultPolicy", R"({"backoff": {"baseSeconds": 40}})"}},
         {{"spec.faultPolicy", R"({"backoff": {"capSeconds": 0.5}})"}}},
        {{{"spec.faultPolicy", R"({"backoff": {"baseSeconds": 5, "capSeconds": 5}})"}},
         {{"spec.faultPolicy", R"({"backoff": {"baseSeconds": 30}})"}},
         {{"spec.faultPolicy", R"({"backoff": {"capSeconds": 1}})"}},
         {{"spec.faultPolicy", R"({"backoff": {}})"}}}}},
      {kChaosRules[0].message,
       {{{{"spec.chaos", R"([{"kind": "kill_rank", "rank": 0}])"}},
         {{"spec.chaos", R"([{"kind": "kill_rank", "rank": 0, "atSeconds": 1, "atStep": 1}])"}}},
        {{{"spec.chaos", R"([{"kind": "kill_rank", "rank": 0, "atStep": 0}])"}},
         {{"spec.chaos", R"([{"kind": "kill_rank", "rank": 0, "atSeconds": 0.5}])"}}}}},
      {kChaosRules[1].message,
       {{{{"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1, "rank": 0}])"}},
         {{"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1}])"}},
         {{"spec.chaos", R"([{"kind": "nan_loss", "atStep": 1, "node": 0}])"}},
         {{"spec.chaos", R"([{"kind": "hang_rank", "atStep": 1, "rank": 0, "node": 0}])"}}},
        {{{"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1, "node": 1}])"}},
         {{"spec.chaos", R"([{"kind": "hang_rank", "atStep": 1, "rank": 7}])"}}}}},
      {kJobRules[0].message,
       {{{{"spec.chaos", R"([{"kind": "kill_rank", "atStep": 1, "rank": 8}])"}},
         {{"spec.nodes", "null"},
          {"spec.procsPerNode", "null"},
          {"spec.chaos", R"([{"kind": "nan_loss", "atStep": 1, "rank": 1}])"}}},
        {{{"spec.chaos", R"([{"kind": "kill_rank", "atStep": 1, "rank": 7}])"}},
         {{"spec.nodes", "null"},
          {"spec.procsPerNode", "null"},
          {"spec.chaos", R"([{"kind": "nan_loss", "atStep": 1, "rank": 0}])"}}}}},
      {kJobRules[1].message,
       {{{{"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1, "node": 2}])"}},
         {{"spec.nodes", "null"},
          {"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1, "node": 1}])"}}},
        {{{"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1, "node": 1}])"}},
         {{"spec.nodes", "null"},
          {"spec.chaos", R"([{"kind": "kill_agent", "atStep": 1, "node": 0}])"}}}}},
      {kJobRules[2].message,
       {{{{"spec.elastic", R"({"minNodes": 3})"}},
         {{"spec.nodes", "null"}, {"spec.elastic", R"({"minNodes": 2})"}}},
        {{{"spec.elastic", R"({"minNodes": 2})"}},
         {{"spec.elastic", R"({"minNodes": 1, "waitSeconds": 5})"}},
         {{"spec.nodes", "null"}, {"spec.elastic", R"({"minNodes": 1})"}}}}},
      {kCommandRules[0].message,
       {{{{"spec.command", "[]"}},
         {{"spec.command", R"([""])"}},
         {{"spec.command", R"(["", "train.py"])"}}},
        {{{"spec.command", R"(["python3"])"}}}}},
      {internal::kSchedulingRules[0].message,
       {{{{"spec.scheduling", R"({"gang": "kueue"})"}},
         {{"spec.scheduling", R"({"gang": "kueue", "kueueQueue": ""})"}}},
        {{{"spec.scheduling", R"({"gang": "kueue", "kueueQueue": "team-a"})"}},
         {{"spec.scheduling", R"({"gang": "volcano"})"}}}}},
      {internal::kTolerationRules[0].message,
       {{{{"spec.pod.tolerations", R"([{"operator": "Exists"}])"}},
         {{"spec.pod.tolerations", R"([{"key": "", "operator": "Exists"}])"}},
         {{"spec.pod.tolerations",
           R"([{"key": "bulwark.dev/quarantined", "operator": "Exists", "effect": "NoSchedule"}])"}}},
        {{{"spec.pod.tolerations",
           R"([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])"}}}}},
      {internal::kDataVolumeRules[0].message,
       {{{{"spec.pod.dataVolume", "{}"}},
         {{"spec.pod.dataVolume", R"({"persistentVolumeClaim": {"claimName": "d"},
                                       "emptyDir": {}})"}}},
        {{{"spec.pod.dataVolume",
           R"({"persistentVolumeClaim": {"claimName": "d", "readOnly": true}})"}},
         {{"spec.pod.dataVolume", R"({"emptyDir": {}})"}}}}},
      {internal::kAbsolutePathRules[0].message,
       {{{{"spec.pod.localCheckpointPath", R"("mnt/nvme")"}},
         {{"spec.pod.localCheckpointPath", R"("")"}}},
        {{{"spec.pod.localCheckpointPath", R"("/mnt/nvme/bulwark")"}}}}},
      {"metadata.name must be at most 63 characters (it is the pods' bulwark.dev/job label)",
       {{{{"metadata.name", "\"" + std::string(64, 'a') + "\""}}},
        {{{"metadata.name", "\"" + std::string(63, 'a') + "\""}}}}},
  };
  return cases;
}

TEST_F(TrainJobApiServerTest, EveryCelRuleRefusesItsViolationWithItsMessage) {
  std::vector<RuleSite> sites;
  CollectRules(RootSchema(TrainJobCrd()), "", &sites);
  ASSERT_GE(sites.size(), RuleCases().size());
  const std::string ns = NewNamespace("cel");
  // The base is valid: created for real. The examples are edits of it under another
  // name; the satisfying ones are dry runs (validated and admitted, not stored).
  HttpReply created = PostObject(*cp_, MinimalJob(ns, "base"));
  ASSERT_EQ(created.code, 201) << created.Describe();
  const Json base = MinimalJob(ns, "candidate");

  std::set<std::string> covered;
  int n = 0;
  for (const RuleSite& site : sites) {
    SCOPED_TRACE("rule at " + (site.at.empty() ? std::string("<root>") : site.at) + ": " +
                 site.rule.dump());
    auto it = RuleCases().find(site.message());
    if (it == RuleCases().end()) {
      ADD_FAILURE() << "no examples for this rule: add a violating and a satisfying one to "
                       "RuleCases(), keyed by its message";
      continue;
    }
    covered.insert(it->first);
    EXPECT_FALSE(it->second.violate.empty());
    EXPECT_FALSE(it->second.satisfy.empty());
    for (const Edits& edits : it->second.violate) {
      Json obj = Edited(base, edits);
      if (obj["metadata"]["name"] == "candidate") {
        obj["metadata"]["name"] = "bad-" + std::to_string(++n);
      }
      HttpReply r = PostObject(*cp_, obj);
      SCOPED_TRACE("violation " + Describe(edits));
      EXPECT_EQ(r.code, 422) << r.Describe();
      const Json status = r.json();
      EXPECT_EQ(status.value("reason", ""), "Invalid") << r.Describe();
      EXPECT_THAT(status.value("message", ""), HasSubstr(site.message()));
      const std::vector<std::string> causes = Causes(r);
      if (causes.size() != 1) {
        ADD_FAILURE() << "the example must break only this rule: " << Joined(causes);
        continue;
      }
      EXPECT_THAT(causes[0], ::testing::StartsWith(site.field() + ": ")) << causes[0];
      EXPECT_THAT(causes[0], HasSubstr(site.message()));
      EXPECT_THAT(causes[0], HasSubstr("[" + site.rule.value("reason", "FieldValueInvalid") + "]"));
    }
    for (const Edits& edits : it->second.satisfy) {
      HttpReply r = PostObject(*cp_, Edited(base, edits), "dryRun=All");
      EXPECT_EQ(r.code, 201) << "valid at the rule's edge: " << Describe(edits) << ": "
                             << r.Describe();
    }
  }
  std::printf("[rules] %zu CEL rules in the CRD, %zu with examples\n", sites.size(),
              covered.size());
  for (const auto& [message, c] : RuleCases()) {
    EXPECT_TRUE(covered.count(message))
        << "RuleCases() has examples for a rule the CRD lacks: " << message;
  }
}

TEST_F(TrainJobApiServerTest, RealManifestsAreAccepted) {
  const std::string ns = NewNamespace("manifests");
  for (const char* path :
       {"deploy/sample-trainjob.yaml", "examples/kubernetes/llama-8b-trainjob.yaml",
        "src/trainjob/testdata/trainjob-full.yaml",
        "src/trainjob/testdata/trainjob-minimal.yaml"}) {
    for (Json obj : SourceDocuments(path)) {
      obj["metadata"]["namespace"] = ns;
      HttpReply r = PostObject(*cp_, obj, "fieldValidation=Strict");
      EXPECT_EQ(r.code, 201) << path << ": " << r.Describe();
      EXPECT_TRUE(r.warnings.empty()) << path << ": " << Joined(r.warnings);
      // What the operator reads back parses.
      auto back = admin_->Get(k8s::TrainJobs(), ns, obj["metadata"]["name"].get<std::string>());
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      auto parsed = TrainJobFromObject(*back);
      EXPECT_TRUE(parsed.ok()) << path << ": " << parsed.status().ToString();
    }
  }
}

// --- 3. Structural schema semantics.

TEST_F(TrainJobApiServerTest, UnknownFieldsArePrunedOrRefusedWhenStrict) {
  const std::string ns = NewNamespace("prune");
  const Json obj = Edited(
      MinimalJob(ns, "unknown"),
      {{"bogus", "1"},
       {"spec.bogus", "1"},
       {"spec.pod.bogus", R"("x")"},
       {"spec.checkpoint", R"({"keep": 2, "bogus": true})"},
       {"spec.chaos", R"([{"kind": "kill_rank", "atStep": 1, "rank": 0, "bogus": 1}])"},
       // Kept: a volume source is free-form (x-kubernetes-preserve-unknown-fields).
       {"spec.pod.dataVolume", R"({"persistentVolumeClaim": {"claimName": "d", "extra": 1}})"}});
  const std::vector<std::string> unknown = {"bogus", "spec.bogus", "spec.pod.bogus",
                                            "spec.checkpoint.bogus", "spec.chaos[0].bogus"};

  HttpReply strict = PostObject(*cp_, obj, "fieldValidation=Strict");
  EXPECT_EQ(strict.code, 400) << strict.Describe();
  EXPECT_EQ(strict.json().value("reason", ""), "BadRequest") << strict.Describe();
  for (const std::string& f : unknown) {
    EXPECT_THAT(strict.json().value("message", ""), HasSubstr("unknown field \"" + f + "\""))
        << strict.Describe();
  }
  EXPECT_THAT(strict.body, ::testing::Not(HasSubstr("extra")));
  ASSERT_TRUE(k8s::IsNotFound(admin_->Get(k8s::TrainJobs(), ns, "unknown").status()));

  // The default (Warn): created, pruned, one warning per unknown field.
  HttpReply warn = PostObject(*cp_, obj);
  ASSERT_EQ(warn.code, 201) << warn.Describe();
  for (const std::string& f : unknown) {
    EXPECT_THAT(Joined(warn.warnings), HasSubstr("unknown field \"" + f + "\""));
  }
  EXPECT_EQ(warn.warnings.size(), unknown.size()) << Joined(warn.warnings);
  auto live = admin_->Get(k8s::TrainJobs(), ns, "unknown");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_FALSE(live->contains("bogus"));
  const Json& spec = (*live)["spec"];
  EXPECT_FALSE(spec.contains("bogus"));
  EXPECT_FALSE(spec["pod"].contains("bogus"));
  EXPECT_EQ(spec["checkpoint"], J(R"({"keep": 2})"));
  EXPECT_EQ(spec["chaos"], J(R"([{"kind": "kill_rank", "atStep": 1, "rank": 0}])"));
  EXPECT_EQ(spec["pod"]["dataVolume"],
            J(R"({"persistentVolumeClaim": {"claimName": "d", "extra": 1}})"));

  // Ignore: pruned without a word.
  HttpReply ignore =
      PostObject(*cp_, Edited(obj, {{"metadata.name", R"("ignored")"}}), "fieldValidation=Ignore");
  EXPECT_EQ(ignore.code, 201) << ignore.Describe();
  EXPECT_TRUE(ignore.warnings.empty()) << Joined(ignore.warnings);
}

// The schema's defaults (none today: the parser applies the defaults of
// docs/job-spec.md and docs/trainjob.md when it reads the object) are applied to a
// created object, and nothing else is added: the stored spec is the spec sent.
TEST_F(TrainJobApiServerTest, SchemaDefaultsAreAppliedAndNothingElseIsAdded) {
  const Json crd = TrainJobCrd();
  std::vector<DefaultSite> defaults;
  CollectDefaults(RootSchema(crd), "", &defaults);
  const std::string ns = NewNamespace("defaults");
  Json obj = MinimalJob(ns, "defaults");
  const Json sent_spec = obj["spec"];
  // Every parent object of a defaulted field is present (empty), so the server
  // defaults the field.
  for (const DefaultSite& d : defaults) {
    ASSERT_EQ(d.at.find('['), std::string::npos)
        << d.at << ": a default inside a list or map; give this test an example item";
    Json* at = &obj;
    std::stringstream ss(d.at);
    std::vector<std::string> keys;
    for (std::string k; std::getline(ss, k, '.');) keys.push_back(k);
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      at = &(*at)[keys[i]];
      if (at->is_null()) *at = Json::object();
    }
  }
  HttpReply r = PostObject(*cp_, obj);
  ASSERT_EQ(r.code, 201) << r.Describe();
  if (obj.contains("status")) {
    Json live = r.json();
    live["status"] = obj["status"];
    ASSERT_TRUE(admin_->UpdateStatus(k8s::TrainJobs(), ns, live).ok());
  }
  auto live = admin_->Get(k8s::TrainJobs(), ns, "defaults");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  std::printf("[defaults] the CRD declares %zu schema default(s)\n", defaults.size());
  for (const DefaultSite& d : defaults) {
    EXPECT_EQ(AtJsonPath(*live, "." + d.at), d.value) << d.at;
  }
  if (defaults.empty()) {
    EXPECT_EQ((*live)["spec"], sent_spec);
  }
}

struct SchemaViolation {
  Edits edits;
  std::string field;      // the cause's field
  std::string reason;     // the cause's reason
  std::string substring;  // in the cause's message
};

TEST_F(TrainJobApiServerTest, TypeEnumAndBoundViolationsNameTheField) {
  const std::string ns = NewNamespace("schema");
  const std::vector<SchemaViolation> cases = {
      {{{"spec.nodes", R"("2")"}},
       "spec.nodes",
       "FieldValueTypeInvalid",
       "must be of type integer"},
      {{{"spec.nodes", "0"}},
       "spec.nodes",
       "FieldValueInvalid",
       "should be greater than or equal to 1"},
      {{{"spec.nodes", "1025"}},
       "spec.nodes",
       "FieldValueInvalid",
       "should be less than or equal to 1024"},
      {{{"spec.procsPerNode", "1.5"}},
       "spec.procsPerNode",
       "FieldValueTypeInvalid",
       "must be of type int32"},
      {{{"spec.scheduling", R"({"tier": "prod"})"}},
       "spec.scheduling.tier",
       "FieldValueNotSupported",
       R"(supported values: "production", "research")"},
      {{{"spec.chaos", R"([{"kind": "explode", "atStep": 1, "rank": 0}])"}},
       "spec.chaos[0].kind",
       "FieldValueNotSupported",
       "kill_agent"},
      {{{"spec.faultPolicy", R"({"backoff": {"baseSeconds": 0}})"}},
       "spec.faultPolicy.backoff.baseSeconds",
       "FieldValueInvalid",
       "should be greater than 0"},
      {{{"spec.checkpoint", R"({"memorySlots": 63})"}},
       "spec.checkpoint.memorySlots",
       "FieldValueInvalid",
       "should be less than or equal to 62"},
      {{{"spec.env", R"({"A": 1})"}},
       "spec.env.A",
       "FieldValueTypeInvalid",
       "must be of type string"},
      {{{"spec.pod", R"({"image": "x", "imagePullPolicy": "Sometimes"})"}},
       "spec.pod.imagePullPolicy",
       "FieldValueNotSupported",
       "IfNotPresent"},
      {{{"spec.pod", "null"}}, "spec.pod", "FieldValueRequired", "Required value"},
      {{{"spec.pod", R"({"gpusPerNode": 8})"}},
       "spec.pod.image",
       "FieldValueRequired",
       "Required value"},
      {{{"spec", "null"}}, "spec", "FieldValueRequired", "Required value"},
      {{{"spec.pod.tolerations",
         [] {
           Json t = Json::array();
           for (int i = 0; i < 65; ++i) t.push_back({{"key", "k" + std::to_string(i)}});
           return t.dump();
         }()}},
       "spec.pod.tolerations",
       "FieldValueTooMany",
       "must have at most 64 items"},
      {{{"spec.suspend", R"("yes")"}},
       "spec.suspend",
       "FieldValueTypeInvalid",
       "must be of type boolean"},
  };
  int n = 0;
  for (const SchemaViolation& c : cases) {
    HttpReply r = PostObject(*cp_, Edited(MinimalJob(ns, "bad-" + std::to_string(++n)), c.edits));
    SCOPED_TRACE(Describe(c.edits));
    EXPECT_EQ(r.code, 422) << r.Describe();
    const std::vector<std::string> causes = Causes(r);
    const std::string want = c.field + ": ";
    bool found = false;
    for (const std::string& cause : causes) {
      if (cause.rfind(want, 0) == 0 && cause.find(c.substring) != std::string::npos &&
          cause.find("[" + c.reason + "]") != std::string::npos) {
        found = true;
      }
    }
    EXPECT_TRUE(found) << "want " << want << "... " << c.substring << " [" << c.reason << "]; got "
                       << Joined(causes);
  }
  // Quantities and int-or-string fields: either form, nothing else.
  for (const Edits& ok :
       std::vector<Edits>{{{"spec.pod.cpu", "32"}, {"spec.pod.memory", R"("512Gi")"}},
                          {{"spec.pod.cpu", R"("31500m")"}, {"spec.pod.shmSize", R"("1e3")"}},
                          {{"spec.checkpoint", R"({"intervalSteps": 0})"}},
                          {{"spec.faultPolicy", R"({"spareNodes": "auto"})"}}}) {
    HttpReply r = PostObject(*cp_, Edited(MinimalJob(ns, "ok"), ok), "dryRun=All");
    EXPECT_EQ(r.code, 201) << Describe(ok) << ": " << r.Describe();
  }
  for (const Edit& bad : std::vector<Edit>{{"spec.pod.memory", R"("lots")"},
                                           {"spec.pod.cpu", "-1"},
                                           {"spec.checkpoint.intervalSteps", R"("sometimes")"},
                                           {"spec.faultPolicy.spareNodes", "1025"},
                                           {"spec.faultPolicy.spareNodes", "true"}}) {
    HttpReply r = PostObject(*cp_, Edited(MinimalJob(ns, "bad-" + std::to_string(++n)), {bad}));
    EXPECT_EQ(r.code, 422) << bad.path << "=" << bad.json << ": " << r.Describe();
    EXPECT_THAT(Joined(Causes(r)), HasSubstr(bad.path + ": ")) << bad.json;
  }
}

// --- 4. The status subresource.

Json SampleStatus() {
  return J(R"({
    "phase": "Running", "message": "step 1200, 4 nodes", "observedGeneration": 1,
    "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted",
                    "message": "rack r1", "lastTransitionTime": "2025-01-02T03:04:05Z",
                    "observedGeneration": 1}],
    "restarts": 2, "currentStep": 1200, "startTime": "2025-01-02T03:04:05Z",
    "lastCheckpoint": {"step": 1100, "tier": "memory", "time": "2025-01-02T04:00:00Z"},
    "admission": {"nodes": ["gpu-1", "gpu-2"], "standby": ["gpu-9"], "reason": "best fit"},
    "ettr": {"ratio": 0.97, "productiveSeconds": 3400, "wallSeconds": 3505,
             "lostSeconds": {"detection": 3, "restart": 40, "reinit": 30, "rework": 20,
                             "checkpoint": 12, "idle": 0}}})");
}

TEST_F(TrainJobApiServerTest, StatusSubresourceWritesOnlyStatusAndKeepsTheGeneration) {
  const std::string ns = NewNamespace("status");
  const Resource& tj = k8s::TrainJobs();
  // Status in a create is dropped.
  auto created = admin_->Create(tj, ns, Edited(MinimalJob(ns, "s"), {{"status", R"({})"}}));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE(created->contains("status")) << created->dump();
  EXPECT_EQ((*created)["metadata"]["generation"], 1);

  // /status: the status changes; spec and labels in the same write do not.
  Json w = *created;
  w["status"] = SampleStatus();
  w["spec"]["nodes"] = 3;
  w["metadata"]["labels"] = {{"written", "through-status"}};
  auto st = admin_->UpdateStatus(tj, ns, w);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)["status"], SampleStatus());
  EXPECT_EQ((*st)["spec"]["nodes"], 2);
  EXPECT_FALSE((*st)["metadata"].contains("labels")) << (*st)["metadata"].dump();
  EXPECT_EQ((*st)["metadata"]["generation"], 1);
  EXPECT_NE(k8s::ResourceVersion(*st), k8s::ResourceVersion(*created));

  // The main resource: the spec changes and bumps the generation; status does not change.
  Json u = *st;
  u["spec"]["nodes"] = 3;
  u["status"]["phase"] = "Failed";
  auto up = admin_->Update(tj, ns, u);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ((*up)["spec"]["nodes"], 3);
  EXPECT_EQ((*up)["status"]["phase"], "Running");
  EXPECT_EQ((*up)["metadata"]["generation"], 2);

  // Metadata alone and status alone leave the generation.
  Json m = *up;
  m["metadata"]["labels"] = {{"team", "a"}};
  auto meta = admin_->Update(tj, ns, m);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ((*meta)["metadata"]["generation"], 2);
  Json s2 = *meta;
  s2["status"]["phase"] = "Succeeded";
  s2["status"]["observedGeneration"] = 2;
  auto st2 = admin_->UpdateStatus(tj, ns, s2);
  ASSERT_TRUE(st2.ok()) << st2.status().ToString();
  EXPECT_EQ((*st2)["status"]["phase"], "Succeeded");
  EXPECT_EQ((*st2)["metadata"]["generation"], 2);
  EXPECT_EQ((*st2)["metadata"]["labels"], Json({{"team", "a"}}));

  // The status schema holds too.
  for (const auto& [edit, want] : std::vector<std::pair<Edit, std::string>>{
           {{"status.phase", R"("Bogus")"}, "status.phase: Unsupported value: \"Bogus\""},
           {{"status.conditions",
             R"([{"type": "Running", "status": "True", "reason": "A", "message": "",
                  "lastTransitionTime": "2025-01-02T03:04:05Z"},
                 {"type": "Running", "status": "False", "reason": "B", "message": "",
                  "lastTransitionTime": "2025-01-02T03:04:05Z"}])"},
            "status.conditions[1]: Duplicate value"},
           {{"status.conditions", R"([{"type": "Running", "status": "True"}])"},
            "status.conditions[0].reason: Required value"},
           {{"status.conditions",
             R"([{"type": "Running", "status": "True", "reason": "not camel",
                  "message": "", "lastTransitionTime": "2025-01-02T03:04:05Z"}])"},
            "status.conditions[0].reason: Invalid value"},
           {{"status.startTime", R"("yesterday")"}, "status.startTime: Invalid value"}}) {
    auto bad = admin_->UpdateStatus(tj, ns, Edited(*st2, {edit}));
    EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << edit.path << "=" << edit.json;
    EXPECT_THAT(bad.status().message(), HasSubstr(want));
  }
}

// --- 5. Printer columns.

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

// kubectl's table: the header's words and, per row, the text under each of them
// (columns are cut at the header words' offsets, so empty cells stay empty).
std::vector<std::map<std::string, std::string>> KubectlTable(const std::string& out,
                                                             std::vector<std::string>* header) {
  std::vector<std::map<std::string, std::string>> rows;
  const std::vector<std::string> lines = Lines(out);
  if (lines.empty()) return rows;
  std::vector<size_t> starts;
  for (size_t i = 0; i < lines[0].size(); ++i) {
    if (lines[0][i] != ' ' && (i == 0 || lines[0][i - 1] == ' ')) {
      starts.push_back(i);
      header->push_back(lines[0].substr(i, lines[0].find(' ', i) - i));
    }
  }
  for (size_t r = 1; r < lines.size(); ++r) {
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < starts.size(); ++c) {
      const size_t end = c + 1 < starts.size() ? starts[c + 1] : std::string::npos;
      std::string cell =
          starts[c] < lines[r].size() ? lines[r].substr(starts[c], end - starts[c]) : "";
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      row[(*header)[c]] = cell;
    }
    rows.push_back(row);
  }
  return rows;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// A JSON scalar as kubectl prints it.
std::string Printed(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

TEST_F(TrainJobApiServerTest, PrinterColumnsThroughATableRequestAndKubectl) {
  const Json crd = TrainJobCrd();
  const Json& columns = VersionOf(crd)["additionalPrinterColumns"];
  const std::string ns = NewNamespace("columns");
  const Resource& tj = k8s::TrainJobs();
  auto running = admin_->Create(tj, ns, Edited(MinimalJob(ns, "running"), {{"spec.nodes", "4"}}));
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  Json with_status = *running;
  with_status["status"] = SampleStatus();
  auto st = admin_->UpdateStatus(tj, ns, with_status);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE(admin_->Create(tj, ns, MinimalJob(ns, "fresh")).ok());

  // The server's Table: Name, then every column in order, each cell the value at its
  // JSONPath (a date as an age).
  HttpReply table =
      Raw(*cp_, "GET", tj.Path(ns), nullptr, "application/json;as=Table;v=v1;g=meta.k8s.io");
  ASSERT_EQ(table.code, 200) << table.Describe();
  const Json t = table.json();
  ASSERT_EQ(t.value("kind", ""), "Table") << table.body;
  const Json& defs = t["columnDefinitions"];
  ASSERT_EQ(defs.size(), columns.size() + 1) << defs.dump();
  EXPECT_EQ(defs[0]["name"], "Name");
  for (size_t i = 0; i < columns.size(); ++i) {
    EXPECT_EQ(defs[i + 1]["name"], columns[i]["name"]);
    EXPECT_EQ(defs[i + 1]["type"], columns[i]["type"]);
    EXPECT_EQ(defs[i + 1]["priority"], columns[i].value("priority", 0));
  }
  bool saw_running = false;
  for (const Json& row : t["rows"]) {
    if (row["cells"][0] != "running") continue;
    saw_running = true;
    for (size_t i = 0; i < columns.size(); ++i) {
      const Json& cell = row["cells"][i + 1];
      SCOPED_TRACE(columns[i].dump());
      if (columns[i]["type"] == "date") {
        EXPECT_THAT(cell.get<std::string>(), ::testing::MatchesRegex("[0-9]+[smhd].*"));
      } else {
        const Json want = AtJsonPath(*st, columns[i]["jsonPath"].get<std::string>());
        ASSERT_FALSE(want.is_null()) << "SampleStatus() must fill every column";
        EXPECT_EQ(cell, want);
      }
    }
  }
  EXPECT_TRUE(saw_running) << t.dump();

  // kubectl: the default view shows the priority-0 columns, -o wide all of them, each
  // filled for the job with a status.
  for (const bool wide : {false, true}) {
    std::vector<std::string> args = {"get", "trainjobs", "-n", ns};
    if (wide) args.insert(args.end(), {"-o", "wide"});
    auto out = Kubectl(args);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<std::string> header, want_header = {"NAME"};
    for (const Json& c : columns) {
      if (wide || c.value("priority", 0) == 0) {
        want_header.push_back(Upper(c["name"].get<std::string>()));
      }
    }
    const auto rows = KubectlTable(*out, &header);
    EXPECT_EQ(header, want_header) << *out;
    ASSERT_EQ(rows.size(), 2u) << *out;
    const auto& row = rows[0].at("NAME") == "running" ? rows[0] : rows[1];
    ASSERT_EQ(row.at("NAME"), "running") << *out;
    for (const Json& c : columns) {
      const std::string name = Upper(c["name"].get<std::string>());
      if (!row.count(name)) continue;
      if (c["type"] == "date") {
        EXPECT_THAT(row.at(name), ::testing::MatchesRegex("[0-9]+[smhd].*")) << *out;
      } else {
        EXPECT_EQ(row.at(name), Printed(AtJsonPath(*st, c["jsonPath"].get<std::string>())))
            << name << "\n"
            << *out;
      }
    }
    const auto& fresh = rows[0].at("NAME") == "fresh" ? rows[0] : rows[1];
    EXPECT_EQ(fresh.at("NODES"), "2") << *out;
  }

  // The short name and the `all` category reach the same resource.
  auto short_name = Kubectl({"get", "tj", "-n", ns, "-o", "name"});
  ASSERT_TRUE(short_name.ok()) << short_name.status().ToString();
  EXPECT_THAT(*short_name, HasSubstr("trainjob.bulwark.dev/running"));
  auto all = Kubectl({"get", "all", "-n", ns, "-o", "name"});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_THAT(*all, HasSubstr("trainjob.bulwark.dev/fresh"));
}

// --- 6. Pod Security admission.

// The pod of deploy/operator.yaml's Deployment, as a Pod in `ns`.
Json OperatorPod(const std::string& ns, Json* deployment) {
  for (const Json& doc : SourceDocuments("deploy/operator.yaml")) {
    if (doc.value("kind", "") != "Deployment") continue;
    *deployment = doc;
    (*deployment)["metadata"]["namespace"] = ns;
    Json meta = doc["spec"]["template"]["metadata"];
    meta["name"] = "bulwark-operator-pod";
    meta["namespace"] = ns;
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", meta},
            {"spec", doc["spec"]["template"]["spec"]}};
  }
  ADD_FAILURE() << "deploy/operator.yaml has no Deployment";
  return nullptr;
}

TEST_F(TrainJobApiServerTest, OperatorPodIsAdmittedUnderRestrictedPodSecurity) {
  const std::string ns =
      NewNamespace("psa-operator", {{"pod-security.kubernetes.io/enforce", "restricted"},
                                    {"pod-security.kubernetes.io/warn", "restricted"}});
  CreateServiceAccount(ns, "bulwark-operator");
  Json deployment;
  const Json pod = OperatorPod(ns, &deployment);
  ASSERT_FALSE(pod.is_null());

  HttpReply p = PostObject(*cp_, pod, "dryRun=All");
  EXPECT_EQ(p.code, 201) << p.Describe();
  EXPECT_TRUE(p.warnings.empty()) << Joined(p.warnings);
  HttpReply d = PostObject(*cp_, deployment, "dryRun=All");
  EXPECT_EQ(d.code, 201) << d.Describe();
  EXPECT_TRUE(d.warnings.empty()) << Joined(d.warnings);

  // The same pod without its security contexts is refused: the namespace's policy is
  // in force (and warns about the Deployment).
  Json bare = pod;
  bare["spec"].erase("securityContext");
  for (Json& c : bare["spec"]["containers"]) c.erase("securityContext");
  HttpReply refused = PostObject(*cp_, bare, "dryRun=All");
  EXPECT_EQ(refused.code, 403) << refused.Describe();
  const std::string msg = refused.json().value("message", "");
  EXPECT_THAT(msg, HasSubstr("violates PodSecurity \"restricted:latest\""));
  for (const char* check :
       {"allowPrivilegeEscalation", "capabilities", "runAsNonRoot", "seccompProfile"}) {
    EXPECT_THAT(msg, HasSubstr(check));
  }
  Json bare_deployment = deployment;
  bare_deployment["spec"]["template"]["spec"] = bare["spec"];
  HttpReply warned = PostObject(*cp_, bare_deployment, "dryRun=All");
  EXPECT_EQ(warned.code, 201) << warned.Describe();
  EXPECT_THAT(Joined(warned.warnings),
              HasSubstr("would violate PodSecurity \"restricted:latest\""));
}

TEST_F(TrainJobApiServerTest, TrainingPodsNeedAPrivilegedNamespace) {
  auto loaded =
      LoadManifest(std::string(BW_TEST_SOURCE_DIR) + "/examples/kubernetes/llama-8b-trainjob.yaml",
                   Target::kKubernetes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::string enforce = "pod-security.kubernetes.io/enforce";
  struct Level {
    std::string name;
    bool admitted;
  };
  for (const Level& level :
       std::vector<Level>{{"baseline", false}, {"restricted", false}, {"privileged", true}}) {
    SCOPED_TRACE(level.name);
    const std::string ns = NewNamespace("psa-" + level.name, {{enforce, level.name}});
    TrainJob t = loaded->job;
    t.ns = ns;
    auto created = admin_->Create(k8s::TrainJobs(), ns, ToObject(t));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    t.uid = k8s::Uid(*created);
    CreateServiceAccount(ns, t.pod.service_account_name);

    const std::vector<Json> objects = RenderJobObjects(t, {}, RenderOptions{});
    int pods = 0;
    for (const Json& obj : objects) {
      HttpReply r = PostObject(*cp_, obj, "dryRun=All");
      SCOPED_TRACE(obj["kind"].get<std::string>() + " " + k8s::Name(obj));
      if (obj["kind"] != "Pod") {
        EXPECT_EQ(r.code, 201) << r.Describe();
        continue;
      }
      ++pods;
      if (level.admitted) {
        EXPECT_EQ(r.code, 201) << r.Describe();
        EXPECT_TRUE(r.warnings.empty()) << Joined(r.warnings);
        continue;
      }
      EXPECT_EQ(r.code, 403) << r.Describe();
      const std::string msg = r.json().value("message", "");
      if (pods == 1) std::printf("[psa] %s: %s\n", level.name.c_str(), msg.c_str());
      EXPECT_THAT(msg, HasSubstr("violates PodSecurity \"" + level.name + ":latest\""));
      EXPECT_THAT(msg, HasSubstr("host namespaces (hostNetwork=true)"));
      EXPECT_THAT(msg, HasSubstr("hostPath"));
      EXPECT_THAT(msg, HasSubstr("\"ckpt-local\""));
      EXPECT_THAT(msg, HasSubstr("\"SYS_PTRACE\""));
    }
    EXPECT_EQ(pods, t.job.nodes + StandbyCount(t.job));
  }
}

}  // namespace
}  // namespace bulwark::trainjob
