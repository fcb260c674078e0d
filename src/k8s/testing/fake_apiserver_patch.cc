// PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch for the list
// fields Bulwark patches (merged by their patchMergeKey), and JSON patch (RFC 6902).
#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

namespace {

// patchMergeKey of the list fields of the core API that are merged by key. A list
// field not named here is replaced, as a list without patchStrategy=merge is.
std::string MergeKey(const std::string& field, const Json& elements) {
  static const std::map<std::string, std::string> kKeys = {
      {"containers", "name"},
      {"initContainers", "name"},
      {"ephemeralContainers", "name"},
      {"volumes", "name"},
      {"env", "name"},
      {"imagePullSecrets", "name"},
      {"resourceClaims", "name"},
      {"hostAliases", "ip"},
      {"conditions", "type"},
      {"volumeMounts", "mountPath"},
      {"volumeDevices", "devicePath"},
      {"ownerReferences", "uid"},
      {"readinessGates", "conditionType"},
      {"addresses", "type"},
      {"topologySpreadConstraints", "topologyKey"}};
  if (field == "ports") {
    for (const Json& e : elements) {
      if (e.is_object() && e.contains("containerPort")) return "containerPort";
    }
    return "port";
  }
  auto it = kKeys.find(field);
  return it == kKeys.end() ? "" : it->second;
}

bool IsDirective(const std::string& k) {
  return k.rfind("$setElementOrder/", 0) == 0 || k == "$retainKeys" ||
         k.rfind("$deleteFromPrimitiveList/", 0) == 0 || k == "$patch";
}

Json Strategic(const Json& orig, const Json& patch);

Json MergeList(const Json& orig, const Json& patch, const std::string& key) {
  Json out = orig.is_array() ? orig : Json::array();
  for (const Json& p : patch) {
    if (StrField(p, "$patch") == "replace") {
      Json replaced = Json::array();
      for (const Json& q : patch) {
        if (!(q.is_object() && q.contains("$patch"))) replaced.push_back(q);
      }
      return replaced;
    }
  }
  for (const Json& p : patch) {
    if (!p.is_object() || !p.contains(key)) {
      out.push_back(p);
      continue;
    }
    bool del = StrField(p, "$patch") == "delete";
    bool found = false;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].is_object() || !out[i].contains(key) || out[i][key] != p[key]) continue;
      found = true;
      if (del) {
        out.erase(out.begin() + static_cast<long>(i));
      } else {
        out[i] = Strategic(out[i], p);
      }
      break;
    }
    if (!found && !del) out.push_back(Strategic(Json::object(), p));
  }
  return out;
}

Json Strategic(const Json& orig, const Json& patch) {
  if (!patch.is_object()) return patch;
  Json out = orig.is_object() ? orig : Json::object();
  if (StrField(patch, "$patch") == "replace") {
    out = Json::object();
    for (auto it = patch.begin(); it != patch.end(); ++it) {
      if (!IsDirective(it.key())) out[it.key()] = it.value();
    }
    return out;
  }
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if (k.rfind("$deleteFromPrimitiveList/", 0) == 0 && v.is_array()) {
      std::string field = k.substr(sizeof("$deleteFromPrimitiveList/") - 1);
      if (out.contains(field) && out[field].is_array()) {
        Json kept = Json::array();
        for (const Json& e : out[field]) {
          if (std::find(v.begin(), v.end(), e) == v.end()) kept.push_back(e);
        }
        out[field] = kept;
      }
      continue;
    }
    if (IsDirective(k)) continue;
    if (v.is_null()) {
      out.erase(k);
    } else if (v.is_object()) {
      out[k] = Strategic(out.contains(k) ? out[k] : Json::object(), v);
    } else if (v.is_array() && !MergeKey(k, v).empty()) {
      out[k] = MergeList(out.contains(k) ? out[k] : Json::array(), v, MergeKey(k, v));
    } else if (v.is_array() && k == "finalizers") {  // patchStrategy=merge on primitives
      Json merged = out.contains(k) && out[k].is_array() ? out[k] : Json::array();
      for (const Json& e : v) {
        if (std::find(merged.begin(), merged.end(), e) == merged.end()) merged.push_back(e);
      }
      out[k] = merged;
    } else {
      out[k] = v;
    }
  }
  return out;
}

}  // namespace

ApiOr<Json> ApplyPatch(const Json& doc, PatchKind kind, const std::string& patch) {
  Json p = Json::parse(patch, nullptr, /*allow_exceptions=*/false);
  if (p.is_discarded()) return ErrBadRequest("the PATCH body is not valid JSON");
  if (kind == PatchKind::kJson) {
    if (!p.is_array()) {
      return ErrBadRequest(
          "a JSON patch (application/json-patch+json) must be an array of "
          "operations, e.g. [{\"op\":\"replace\",\"path\":\"/spec/x\","
          "\"value\":1}]");
    }
    try {
      return doc.patch(p);
    } catch (const Json::parse_error& e) {
      return ErrBadRequest(std::string("malformed JSON patch: ") + e.what());
    } catch (const Json::exception& e) {
      return ApiError{422, "Invalid",
                      std::string("the server rejected our request due to an error in our "
                                  "request: JSON patch does not apply: ") +
                          e.what()};
    }
  }
  if (!p.is_object()) {
    return ErrBadRequest("a merge patch must be a JSON object, e.g. {\"spec\":{\"x\":1}}");
  }
  if (kind == PatchKind::kStrategic) return Strategic(doc, p);
  Json out = doc;
  out.merge_patch(p);
  return out;
}

}  // namespace bulwark::k8s::testing::internal
