// Label and field selectors as kube-apiserver parses and applies them.
#include <cctype>
#include <cstdlib>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

namespace {

bool IsKeyChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
         c == '/';
}

// Splits at commas outside parentheses.
std::vector<std::string> SplitTopLevel(const std::string& s) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

ApiError SelectorError(const std::string& text, const std::string& why) {
  return ErrBadRequest("unable to parse requirement: labelSelector " + Quote(text) + ": " + why);
}

// Parses one requirement ("a in (x,y)", "!b", "c!=d", ...).
ApiOr<LabelRequirement> ParseRequirement(const std::string& full, const std::string& raw) {
  using Op = LabelRequirement::Op;
  std::string s = Trim(raw);
  LabelRequirement req;
  size_t i = 0;
  bool negated = false;
  if (!s.empty() && s[0] == '!') {
    negated = true;
    i = 1;
    while (i < s.size() && s[i] == ' ') ++i;
  }
  size_t key_start = i;
  while (i < s.size() && IsKeyChar(s[i])) ++i;
  req.key = s.substr(key_start, i - key_start);
  if (req.key.empty()) return SelectorError(full, "expected a label key in " + Quote(s));
  std::string why = CheckLabelKey(req.key);
  if (!why.empty()) return SelectorError(full, "invalid label key " + Quote(req.key) + ": " + why);
  std::string rest = Trim(s.substr(i));
  if (negated) {
    if (!rest.empty()) return SelectorError(full, "unexpected " + Quote(rest) + " after !key");
    req.op = Op::kNotExists;
    return req;
  }
  if (rest.empty()) {
    req.op = Op::kExists;
    return req;
  }
  std::string value;
  if (rest.rfind("!=", 0) == 0) {
    req.op = Op::kNe;
    value = rest.substr(2);
  } else if (rest.rfind("==", 0) == 0) {
    req.op = Op::kEq;
    value = rest.substr(2);
  } else if (rest[0] == '=') {
    req.op = Op::kEq;
    value = rest.substr(1);
  } else if (rest[0] == '>' || rest[0] == '<') {
    req.op = rest[0] == '>' ? Op::kGt : Op::kLt;
    value = Trim(rest.substr(1));
    char* end = nullptr;
    std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0') {
      return SelectorError(full, "for 'gt', 'lt' operators, the value must be an integer");
    }
    req.values = {value};
    return req;
  } else {
    size_t sp = rest.find_first_of(" (");
    std::string word = rest.substr(0, sp);
    if (word != "in" && word != "notin") {
      return SelectorError(full,
                           "found " + Quote(word) + ", expected: in, notin, =, ==, !=, gt, lt");
    }
    req.op = word == "in" ? Op::kIn : Op::kNotIn;
    std::string set = Trim(sp == std::string::npos ? "" : rest.substr(sp));
    if (set.size() < 2 || set.front() != '(' || set.back() != ')') {
      return SelectorError(full, "expected a parenthesised set of values after " + word);
    }
    std::string inner = set.substr(1, set.size() - 2);
    size_t pos = 0;
    while (pos <= inner.size()) {
      size_t comma = inner.find(',', pos);
      if (comma == std::string::npos) comma = inner.size();
      std::string v = Trim(inner.substr(pos, comma - pos));
      why = CheckLabelValue(v);
      if (!why.empty()) return SelectorError(full, "invalid value " + Quote(v) + ": " + why);
      req.values.push_back(v);
      pos = comma + 1;
    }
    return req;
  }
  value = Trim(value);
  why = CheckLabelValue(value);
  if (!why.empty()) return SelectorError(full, "invalid value " + Quote(value) + ": " + why);
  req.values = {value};
  return req;
}

// The value a field selector compares for `path`; booleans that are absent are "false".
std::string FieldValue(const Json& obj, const std::string& path) {
  std::string p = path == "source" ? "source.component" : path;
  const Json* cur = &obj;
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t dot = p.find('.', pos);
    if (dot == std::string::npos) dot = p.size();
    std::string part = p.substr(pos, dot - pos);
    if (!cur->is_object() || !cur->contains(part)) {
      return path == "spec.unschedulable" || path == "spec.hostNetwork" ? "false" : "";
    }
    cur = &(*cur)[part];
    pos = dot + 1;
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_null()) return "";
  return cur->dump();
}

}  // namespace

bool LabelSelector::Matches(const Json& obj) const {
  if (reqs.empty()) return true;
  static const Json kEmpty = Json::object();
  const Json* labels = &kEmpty;
  auto md = obj.find("metadata");
  if (md != obj.end() && md->is_object()) {
    auto l = md->find("labels");
    if (l != md->end() && l->is_object()) labels = &*l;
  }
  using Op = LabelRequirement::Op;
  for (const LabelRequirement& r : reqs) {
    auto it = labels->find(r.key);
    bool has = it != labels->end() && it->is_string();
    std::string v = has ? it->get<std::string>() : "";
    auto in_set = [&] {
      for (const std::string& x : r.values) {
        if (x == v) return true;
      }
      return false;
    };
    bool ok = false;
    switch (r.op) {
      case Op::kEq:
        ok = has && v == r.values[0];
        break;
      case Op::kNe:
        ok = !has || v != r.values[0];
        break;
      case Op::kIn:
        ok = has && in_set();
        break;
      case Op::kNotIn:
        ok = !has || !in_set();
        break;
      case Op::kExists:
        ok = has;
        break;
      case Op::kNotExists:
        ok = !has;
        break;
      case Op::kGt:
      case Op::kLt: {
        char* end = nullptr;
        long long n = std::strtoll(v.c_str(), &end, 10);                   // NOLINT(runtime/int)
        long long bound = std::strtoll(r.values[0].c_str(), nullptr, 10);  // NOLINT
        ok = has && !v.empty() && *end == '\0' && (r.op == Op::kGt ? n > bound : n < bound);
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

ApiOr<LabelSelector> ParseLabelSelector(const std::string& text) {
  LabelSelector sel;
  if (Trim(text).empty()) return sel;
  for (const std::string& part : SplitTopLevel(text)) {
    ApiOr<LabelRequirement> r = ParseRequirement(text, part);
    if (!r.ok()) return r.error();
    sel.reqs.push_back(std::move(*r));
  }
  return sel;
}

bool FieldSelector::Matches(const Json& obj) const {
  for (const Req& r : reqs) {
    bool eq = FieldValue(obj, r.field) == r.value;
    if (eq == r.negate) return false;
  }
  return true;
}

ApiOr<FieldSelector> ParseFieldSelector(const std::string& text, const ResourceInfo& r) {
  FieldSelector sel;
  if (Trim(text).empty()) return sel;
  // Split at unescaped commas; "\," "\=" "\\" are escapes, as in fields.ParseSelector.
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      parts.back() += text.substr(i, 2);
      ++i;
    } else if (text[i] == ',') {
      parts.emplace_back();
    } else {
      parts.back() += text[i];
    }
  }
  for (const std::string& raw : parts) {
    std::string part = Trim(raw);
    FieldSelector::Req req;
    size_t op = std::string::npos, op_len = 0;
    for (size_t i = 0; i < part.size(); ++i) {
      if (part[i] == '\\') {
        ++i;
      } else if (part.compare(i, 2, "!=") == 0) {
        op = i, op_len = 2, req.negate = true;
        break;
      } else if (part.compare(i, 2, "==") == 0) {
        op = i, op_len = 2;
        break;
      } else if (part[i] == '=') {
        op = i, op_len = 1;
        break;
      }
    }
    if (op == std::string::npos) {
      return ErrBadRequest("invalid fieldSelector " + Quote(text) + ": " + Quote(part) +
                           " is not of the form field=value, field==value or field!=value");
    }
    req.field = Trim(part.substr(0, op));
    std::string value = part.substr(op + op_len);
    for (size_t i = 0; i < value.size(); ++i) {
      if (value[i] == '\\' && i + 1 < value.size()) ++i;
      req.value += value[i];
    }
    bool known = req.field == "metadata.name" || req.field == "metadata.namespace";
    for (const std::string& f : r.field_labels) known = known || f == req.field;
    if (!known) {
      std::string supported = "metadata.name, metadata.namespace";
      for (const std::string& f : r.field_labels) supported += ", " + f;
      return ErrBadRequest("field label not supported: " + req.field + " (fieldSelector on " +
                           r.GroupResource() + " supports " + supported + ")");
    }
    sel.reqs.push_back(std::move(req));
  }
  return sel;
}

}  // namespace bulwark::k8s::testing::internal
