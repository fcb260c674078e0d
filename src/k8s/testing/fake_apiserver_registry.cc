// The fake API server's resource registry: the built-in kinds, the resource a CRD
// defines, and the discovery documents kubectl reads.
#include <algorithm>
#include <cctype>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

std::string ResourceInfo::GroupResource() const {
  return group.empty() ? plural : plural + "." + group;
}

std::string ResourceInfo::ApiVersion(const std::string& version) const {
  return group.empty() ? version : group + "/" + version;
}

bool ResourceInfo::Serves(const std::string& version) const {
  return std::find(versions.begin(), versions.end(), version) != versions.end();
}

std::string ResourceInfo::QualifiedKind() const {
  return group.empty() ? kind : kind + "." + group;
}

namespace {

struct Builtin {
  const char* group;
  const char* version;
  const char* plural;
  const char* kind;
  bool namespaced;
  bool status;
  CreateStatus create_status;
  std::vector<std::string> fields;
  std::vector<std::string> short_names;
  bool dns_label = false;
};

}  // namespace

std::vector<ResourceInfo> BuiltinResources() {
  using CS = CreateStatus;
  const std::vector<Builtin> kBuiltins = {
      {"",
       "v1",
       "pods",
       "Pod",
       true,
       true,
       CS::kPodPending,
       {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
       {"po"}},
      {"", "v1", "nodes", "Node", false, true, CS::kKeep, {"spec.unschedulable"}, {"no"}},
      {"", "v1", "services", "Service", true, true, CS::kClear, {}, {"svc"}, true},
      {"", "v1", "endpoints", "Endpoints", true, false, CS::kKeep, {}, {"ep"}},
      {"",
       "v1",
       "events",
       "Event",
       true,
       false,
       CS::kKeep,
       {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
       {"ev"}},
      {"",
       "v1",
       "namespaces",
       "Namespace",
       false,
       true,
       CS::kNamespaceActive,
       {"status.phase"},
       {"ns"},
       true},
      {"", "v1", "configmaps", "ConfigMap", true, false, CS::kKeep, {}, {"cm"}},
      {"", "v1", "secrets", "Secret", true, false, CS::kKeep, {"type"}, {}},
      {"", "v1", "serviceaccounts", "ServiceAccount", true, false, CS::kKeep, {}, {"sa"}},
      {"",
       "v1",
       "persistentvolumeclaims",
       "PersistentVolumeClaim",
       true,
       true,
       CS::kClear,
       {},
       {"pvc"}},
      {"coordination.k8s.io", "v1", "leases", "Lease", true, false, CS::kKeep, {}, {}},
      {"apps", "v1", "deployments", "Deployment", true, true, CS::kClear, {}, {"deploy"}},
      {"scheduling.k8s.io",
       "v1",
       "priorityclasses",
       "PriorityClass",
       false,
       false,
       CS::kKeep,
       {},
       {"pc"}},
      {"rbac.authorization.k8s.io", "v1", "roles", "Role", true, false, CS::kKeep, {}, {}},
      {"rbac.authorization.k8s.io",
       "v1",
       "rolebindings",
       "RoleBinding",
       true,
       false,
       CS::kKeep,
       {},
       {}},
      {"rbac.authorization.k8s.io",
       "v1",
       "clusterroles",
       "ClusterRole",
       false,
       false,
       CS::kKeep,
       {},
       {}},
      {"rbac.authorization.k8s.io",
       "v1",
       "clusterrolebindings",
       "ClusterRoleBinding",
       false,
       false,
       CS::kKeep,
       {},
       {}},
      {"apiextensions.k8s.io",
       "v1",
       "customresourcedefinitions",
       "CustomResourceDefinition",
       false,
       true,
       CS::kKeep,
       {},
       {"crd", "crds"}},
  };
  std::vector<ResourceInfo> out;
  for (const Builtin& b : kBuiltins) {
    ResourceInfo r;
    r.group = b.group;
    r.plural = b.plural;
    r.kind = b.kind;
    r.singular = Lower(b.kind);
    r.list_kind = r.kind + "List";
    r.versions = {b.version};
    r.namespaced = b.namespaced;
    if (b.status) r.status_versions = {b.version};
    r.create_status = b.create_status;
    r.field_labels = b.fields;
    r.short_names = b.short_names;
    r.dns_label_names = b.dns_label;
    out.push_back(std::move(r));
  }
  return out;
}

ApiOr<ResourceInfo> ResourceFromCrd(const ResourceInfo& crd_resource, const Json& crd) {
  std::vector<Json> causes;
  auto bad = [&](const std::string& field, const std::string& msg) {
    causes.push_back(Cause("FieldValueInvalid", field, msg));
  };
  std::string name =
      StrField(crd.is_object() && crd.contains("metadata") ? crd["metadata"] : Json(), "name");
  const Json spec = crd.contains("spec") && crd["spec"].is_object() ? crd["spec"] : Json::object();
  ResourceInfo r;
  r.custom = true;
  r.crd_name = name;
  r.unconditional_update = false;
  r.group = StrField(spec, "group");
  if (r.group.empty()) bad("spec.group", "Required value");
  const Json names =
      spec.contains("names") && spec["names"].is_object() ? spec["names"] : Json::object();
  r.plural = StrField(names, "plural");
  r.kind = StrField(names, "kind");
  if (r.plural.empty()) bad("spec.names.plural", "Required value");
  if (r.kind.empty()) bad("spec.names.kind", "Required value");
  r.singular = StrField(names, "singular").empty() ? Lower(r.kind) : StrField(names, "singular");
  r.list_kind = StrField(names, "listKind").empty() ? r.kind + "List" : StrField(names, "listKind");
  if (names.contains("shortNames") && names["shortNames"].is_array()) {
    for (const Json& s : names["shortNames"]) {
      if (s.is_string()) r.short_names.push_back(s.get<std::string>());
    }
  }
  std::string scope = StrField(spec, "scope");
  if (scope != "Namespaced" && scope != "Cluster") {
    bad("spec.scope",
        "Unsupported value: " + Quote(scope) + ": supported values: \"Cluster\", \"Namespaced\"");
  }
  r.namespaced = scope == "Namespaced";
  if (!r.plural.empty() && !r.group.empty() && name != r.plural + "." + r.group) {
    bad("metadata.name",
        "Invalid value: " + Quote(name) + ": must be spec.names.plural+\".\"+spec.group");
  }
  int storage = 0;
  if (!spec.contains("versions") || !spec["versions"].is_array() || spec["versions"].empty()) {
    bad("spec.versions", "Required value: must have at least one version");
  } else {
    for (size_t i = 0; i < spec["versions"].size(); ++i) {
      const Json& v = spec["versions"][i];
      std::string path = "spec.versions[" + std::to_string(i) + "]";
      std::string vname = v.is_object() ? StrField(v, "name") : "";
      if (vname.empty() || !CheckDnsLabel(vname).empty()) {
        bad(path + ".name", "Invalid value: " + Quote(vname) + ": must be a DNS label");
        continue;
      }
      bool served = BoolField(v, "served", false);
      bool is_storage = BoolField(v, "storage", false);
      storage += is_storage ? 1 : 0;
      const Json* schema = nullptr;
      if (v.contains("schema") && v["schema"].is_object() &&
          v["schema"].contains("openAPIV3Schema") && v["schema"]["openAPIV3Schema"].is_object()) {
        schema = &v["schema"]["openAPIV3Schema"];
      }
      if (schema == nullptr) {
        bad(path + ".schema.openAPIV3Schema", "Required value: schemas are required");
        continue;
      }
      if (StrField(*schema, "type") != "object") {
        bad(path + ".schema.openAPIV3Schema.type",
            "Unsupported value: " + Quote(StrField(*schema, "type")) +
                ": supported values: \"object\"");
      }
      std::vector<PrinterColumn> columns;
      if (v.contains("additionalPrinterColumns")) {
        const Json& cols = v["additionalPrinterColumns"];
        if (!cols.is_array()) {
          bad(path + ".additionalPrinterColumns", "Invalid value: must be a list");
        } else {
          for (size_t j = 0; j < cols.size(); ++j) {
            std::string cpath = path + ".additionalPrinterColumns[" + std::to_string(j) + "]";
            if (!cols[j].is_object()) {
              bad(cpath, "Invalid value: must be an object");
              continue;
            }
            PrinterColumn c;
            c.name = StrField(cols[j], "name");
            c.type = StrField(cols[j], "type");
            c.format = StrField(cols[j], "format");
            c.description = StrField(cols[j], "description");
            c.json_path = StrField(cols[j], "jsonPath");
            if (cols[j].contains("priority") && cols[j]["priority"].is_number_integer()) {
              c.priority = cols[j]["priority"].get<int>();
            }
            if (c.name.empty()) bad(cpath + ".name", "Required value");
            static const std::set<std::string> kTypes = {"boolean", "date", "integer", "number",
                                                         "string"};
            if (c.type.empty()) {
              bad(cpath + ".type", "Required value");
            } else if (kTypes.count(c.type) == 0) {
              bad(cpath + ".type",
                  "Unsupported value: " + Quote(c.type) +
                      ": supported values: \"boolean\", \"date\", \"integer\", \"number\", "
                      "\"string\"");
            }
            if (c.json_path.empty()) {
              bad(cpath + ".jsonPath", "Required value");
            } else if (c.json_path[0] != '.') {
              bad(cpath + ".jsonPath",
                  "Invalid value: " + Quote(c.json_path) + ": must be a simple json path");
            }
            if (c.priority < 0) bad(cpath + ".priority", "Invalid value: must be >= 0");
            columns.push_back(std::move(c));
          }
        }
      }
      if (!served) continue;
      r.columns[vname] = std::move(columns);
      if (is_storage) {
        r.versions.insert(r.versions.begin(), vname);
      } else {
        r.versions.push_back(vname);
      }
      r.schemas[vname] = *schema;
      if (v.contains("subresources") && v["subresources"].is_object() &&
          v["subresources"].contains("status")) {
        r.status_versions.insert(vname);
      }
      if (v.contains("selectableFields") && v["selectableFields"].is_array()) {
        for (const Json& f : v["selectableFields"]) {
          std::string jp = f.is_object() ? StrField(f, "jsonPath") : "";
          if (jp.size() > 1 && jp[0] == '.') r.field_labels.push_back(jp.substr(1));
        }
      }
    }
    if (storage != 1) {
      bad("spec.versions",
          "Invalid value: must have exactly one version marked as storage version");
    }
  }
  if (!causes.empty()) return ErrInvalid(crd_resource, name, std::move(causes));
  return r;
}

Json ApiVersionsJson(const std::string& host_port) {
  return {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs",
           {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", host_port}}}}};
}

namespace {

Json GroupJson(const std::vector<ResourceInfo>& served, const std::string& group) {
  std::vector<std::string> versions;
  for (const ResourceInfo& r : served) {
    if (r.group != group) continue;
    for (const std::string& v : r.versions) {
      if (std::find(versions.begin(), versions.end(), v) == versions.end()) versions.push_back(v);
    }
  }
  Json g = {{"name", group}, {"versions", Json::array()}};
  for (const std::string& v : versions) {
    g["versions"].push_back({{"groupVersion", group + "/" + v}, {"version", v}});
  }
  if (!versions.empty()) g["preferredVersion"] = g["versions"][0];
  return g;
}

}  // namespace

Json ApiGroupListJson(const std::vector<ResourceInfo>& served) {
  std::vector<std::string> groups;
  for (const ResourceInfo& r : served) {
    if (!r.group.empty() && std::find(groups.begin(), groups.end(), r.group) == groups.end()) {
      groups.push_back(r.group);
    }
  }
  Json out = {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", Json::array()}};
  for (const std::string& g : groups) out["groups"].push_back(GroupJson(served, g));
  return out;
}

ApiOr<Json> ApiGroupJson(const std::vector<ResourceInfo>& served, const std::string& group) {
  Json g = GroupJson(served, group);
  if (g["versions"].empty()) return ErrNotFoundPath();
  g["kind"] = "APIGroup";
  g["apiVersion"] = "v1";
  return g;
}

ApiOr<Json> ApiResourceListJson(const std::vector<ResourceInfo>& served, const std::string& group,
                                const std::string& version) {
  Json list = Json::array();
  for (const ResourceInfo& r : served) {
    if (r.group != group || !r.Serves(version)) continue;
    Json verbs = {"create", "delete", "deletecollection", "get",
                  "list",   "patch",  "update",           "watch"};
    Json res = {{"name", r.plural},
                {"singularName", r.singular},
                {"namespaced", r.namespaced},
                {"kind", r.kind},
                {"verbs", verbs}};
    if (!r.short_names.empty()) res["shortNames"] = r.short_names;
    list.push_back(res);
    if (r.HasStatus(version)) {
      list.push_back({{"name", r.plural + "/status"},
                      {"singularName", ""},
                      {"namespaced", r.namespaced},
                      {"kind", r.kind},
                      {"verbs", {"get", "patch", "update"}}});
    }
  }
  if (list.empty()) return ErrNotFoundPath();
  return Json{{"kind", "APIResourceList"},
              {"apiVersion", "v1"},
              {"groupVersion", group.empty() ? version : group + "/" + version},
              {"resources", list}};
}

}  // namespace bulwark::k8s::testing::internal
