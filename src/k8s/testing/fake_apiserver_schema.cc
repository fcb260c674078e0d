// The structural-schema check of custom objects (apiextensions-apiserver's pruning,
// defaulting and OpenAPI v3 validation, the subset CRDs use in practice). Messages follow
// kube-openapi's wording: "spec.nodes in body should be greater than or equal to 1".
#include <algorithm>
#include <mutex>
#include <regex>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

namespace {

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string TypeOf(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool HasType(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  return true;
}

bool Flag(const Json& s, const char* key) {
  auto it = s.find(key);
  return it != s.end() && it->is_boolean() && it->get<bool>();
}

size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Compiled `pattern`s, shared by every check; nullptr for a pattern std::regex rejects.
const std::regex* Pattern(const std::string& p) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<std::regex>> cache;
  std::lock_guard<std::mutex> l(mu);
  auto it = cache.find(p);
  if (it == cache.end()) {
    std::unique_ptr<std::regex> re;
    try {
      re = std::make_unique<std::regex>(p, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      re = nullptr;
    }
    it = cache.emplace(p, std::move(re)).first;
  }
  return it->second.get();
}

class Checker {
 public:
  explicit Checker(SchemaOutcome* out) : out_(out) {}

  void Walk(const Json& s, Json& v, const std::string& path, bool root) {
    if (!s.is_object()) return;
    std::string where = path.empty() ? "<root>" : path;
    if (v.is_null()) {
      if (!Flag(s, "nullable")) {
        Invalid(path, "\"null\"",
                where + " in body must be of type " +
                    (StrField(s, "type").empty() ? "object" : StrField(s, "type")) + ": \"null\"",
                "FieldValueTypeInvalid");
      }
      return;
    }
    if (Flag(s, "x-kubernetes-int-or-string")) {
      if (!v.is_number_integer() && !v.is_string()) {
        Invalid(path, Shown(v),
                where + " in body must be of type integer,string: \"" + TypeOf(v) + "\"",
                "FieldValueTypeInvalid");
        return;
      }
    } else if (s.contains("type") && s["type"].is_string() &&
               !HasType(v, s["type"].get<std::string>())) {
      Invalid(path, "\"" + TypeOf(v) + "\"",
              where + " in body must be of type " + s["type"].get<std::string>() + ": \"" +
                  TypeOf(v) + "\"",
              "FieldValueTypeInvalid");
      return;
    }
    if (s.contains("enum") && s["enum"].is_array() &&
        std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) {
      std::string supported;
      for (const Json& e : s["enum"]) supported += (supported.empty() ? "" : ", ") + e.dump();
      out_->causes.push_back(
          Cause("FieldValueNotSupported", path,
                "Unsupported value: " + Shown(v) + ": supported values: " + supported));
    }
    if (v.is_number()) CheckNumber(s, v, path, where);
    if (v.is_string()) CheckString(s, v.get<std::string>(), path, where);
    if (v.is_array()) CheckArray(s, v, path, where);
    if (v.is_object()) CheckObject(s, v, path, root);
  }

 private:
  static std::string Shown(const Json& v) {
    std::string d = v.dump();
    return d.size() > 80 ? d.substr(0, 77) + "..." : d;
  }

  void Invalid(const std::string& path, const std::string& value, const std::string& why,
               const char* reason = "FieldValueInvalid") {
    out_->causes.push_back(Cause(reason, path, "Invalid value: " + value + ": " + why));
  }

  void CheckNumber(const Json& s, const Json& v, const std::string& path,
                   const std::string& where) {
    double x = v.get<double>();
    if (s.contains("minimum") && s["minimum"].is_number()) {
      double m = s["minimum"].get<double>();
      bool excl = Flag(s, "exclusiveMinimum");
      if (excl ? x <= m : x < m) {
        Invalid(path, Shown(v),
                where + " in body should be greater than " + (excl ? "" : "or equal to ") +
                    s["minimum"].dump());
      }
    }
    if (s.contains("maximum") && s["maximum"].is_number()) {
      double m = s["maximum"].get<double>();
      bool excl = Flag(s, "exclusiveMaximum");
      if (excl ? x >= m : x > m) {
        Invalid(path, Shown(v),
                where + " in body should be less than " + (excl ? "" : "or equal to ") +
                    s["maximum"].dump());
      }
    }
  }

  void CheckString(const Json& s, const std::string& str, const std::string& path,
                   const std::string& where) {
    size_t len = Utf8Length(str);
    if (s.contains("minLength") && s["minLength"].is_number_integer() &&
        len < s["minLength"].get<size_t>()) {
      Invalid(path, Quote(str),
              where + " in body should be at least " + s["minLength"].dump() + " chars long");
    }
    if (s.contains("maxLength") && s["maxLength"].is_number_integer() &&
        len > s["maxLength"].get<size_t>()) {
      out_->causes.push_back(
          Cause("FieldValueTooLong", path,
                "Too long: may not be more than " + s["maxLength"].dump() + " bytes"));
    }
    if (s.contains("pattern") && s["pattern"].is_string()) {
      const std::regex* re = Pattern(s["pattern"].get<std::string>());
      if (re != nullptr && !std::regex_search(str, *re)) {
        Invalid(path, Quote(str),
                where + " in body should match '" + s["pattern"].get<std::string>() + "'");
      }
    }
  }

  void CheckArray(const Json& s, Json& v, const std::string& path, const std::string& where) {
    if (s.contains("minItems") && s["minItems"].is_number_integer() &&
        v.size() < s["minItems"].get<size_t>()) {
      Invalid(path, std::to_string(v.size()),
              where + " in body should have at least " + s["minItems"].dump() + " items");
    }
    if (s.contains("maxItems") && s["maxItems"].is_number_integer() &&
        v.size() > s["maxItems"].get<size_t>()) {
      out_->causes.push_back(Cause("FieldValueTooMany", path,
                                   "Too many: " + std::to_string(v.size()) +
                                       ": must have at most " + s["maxItems"].dump() + " items"));
    }
    if (s.contains("items") && s["items"].is_object()) {
      for (size_t i = 0; i < v.size(); ++i) {
        Walk(s["items"], v[i], path + "[" + std::to_string(i) + "]", false);
      }
    }
  }

  void CheckObject(const Json& s, Json& v, const std::string& path, bool root) {
    static const Json kNone = Json::object();
    const Json& props =
        s.contains("properties") && s["properties"].is_object() ? s["properties"] : kNone;
    const Json* additional = nullptr;
    bool keep_unknown = Flag(s, "x-kubernetes-preserve-unknown-fields") ||
                        Flag(s, "x-kubernetes-embedded-resource");
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_object()) additional = &a;
      if (a.is_boolean() && a.get<bool>()) keep_unknown = true;
    }
    for (auto it = props.begin(); it != props.end(); ++it) {
      if (!v.contains(it.key()) && it.value().is_object() && it.value().contains("default")) {
        v[it.key()] = it.value()["default"];
      }
    }
    std::vector<std::string> pruned;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string& key = it.key();
      if (root && key == "metadata") continue;  // checked as ObjectMeta, not by the schema
      std::string child = Join(path, key);
      if (props.contains(key)) {
        Walk(props[key], it.value(), child, false);
      } else if (additional != nullptr) {
        Walk(*additional, it.value(), child, false);
      } else if (!keep_unknown) {
        pruned.push_back(key);
        out_->unknown_fields.push_back(child);
      }
    }
    for (const std::string& k : pruned) v.erase(k);
    if (s.contains("required") && s["required"].is_array()) {
      for (const Json& r : s["required"]) {
        if (r.is_string() && !v.contains(r.get<std::string>())) {
          out_->causes.push_back(
              Cause("FieldValueRequired", Join(path, r.get<std::string>()), "Required value"));
        }
      }
    }
  }

  SchemaOutcome* out_;
};

}  // namespace

void CheckCustomObject(const Json& schema, Json* obj, SchemaOutcome* out) {
  Checker(out).Walk(schema, *obj, "", /*root=*/true);
}

}  // namespace bulwark::k8s::testing::internal
