#include "trainjob/yaml_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <regex>
#include <system_error>

#include "spec/yaml_document.h"

namespace bulwark::trainjob {
namespace {

bool IsQuotedScalar(const YAML::Node& n) {
  // yaml-cpp tags plain scalars "?" and quoted/literal ones "!".
  return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
}

bool IsNullText(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

bool BoolText(const std::string& s, bool* out) {
  if (s == "true" || s == "True" || s == "TRUE") return *out = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return *out = false, true;
  return false;
}

bool IntText(const std::string& s, int64_t* out) {
  static const std::regex kInt("[-+]?[0-9]+");
  if (!std::regex_match(s, kInt)) return false;
  const char* b = s.data() + (s[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool FloatText(const std::string& s, double* out) {
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (!std::regex_match(s, kFloat)) return false;
  const char* b = s.data() + (s[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(b, s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(*out);
}

// True if a plain scalar `s` would be read back as something other than this string.
bool NeedsQuotes(const std::string& s) {
  bool b;
  int64_t i;
  double d;
  return IsNullText(s) || BoolText(s, &b) || IntText(s, &i) || FloatText(s, &d) || s == ".inf" ||
         s == "-.inf" || s == ".nan" || s == "yes" || s == "no" || s == "on" || s == "off" ||
         s == "y" || s == "n";
}

void Emit(YAML::Emitter& out, const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      if (j.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (auto it = j.begin(); it != j.end(); ++it) {
        out << YAML::Key;
        if (NeedsQuotes(it.key())) out << YAML::DoubleQuoted;
        out << it.key() << YAML::Value;
        Emit(out, it.value());
      }
      out << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (j.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const Json& v : j) Emit(out, v);
      out << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
      out << s;
      return;
    }
    case Json::value_t::null:
      out << YAML::Null;
      return;
    case Json::value_t::boolean:
      out << (j.get<bool>() ? "true" : "false");
      return;
    default:  // numbers: JSON's own text
      out << j.dump();
      return;
  }
}

}  // namespace

namespace {

Json YamlToJsonBounded(const YAML::Node& n, int depth, size_t* budget, int top_line) {
  if (*budget == 0 || depth > kMaxYamlDepth) {
    throw YamlTooLarge(top_line,
                       depth > kMaxYamlDepth
                           ? "nests deeper than " + std::to_string(kMaxYamlDepth) + " levels"
                           : "expands to more than " + std::to_string(kMaxYamlValues) +
                                 " values (aliases count each time they are used: a YAML "
                                 "alias bomb?)");
  }
  --*budget;
  if (!n.IsDefined() || n.IsNull()) return nullptr;
  if (n.IsMap()) {
    Json o = Json::object();
    for (const auto& kv : n) {
      const YAML::Node k = kv.first;
      o[k.IsScalar() ? k.Scalar() : YamlToJsonBounded(k, depth + 1, budget, top_line).dump()] =
          YamlToJsonBounded(kv.second, depth + 1, budget, top_line);
    }
    return o;
  }
  if (n.IsSequence()) {
    Json a = Json::array();
    for (const YAML::Node& item : n)
      a.push_back(YamlToJsonBounded(item, depth + 1, budget, top_line));
    return a;
  }
  const std::string& s = n.Scalar();
  if (IsQuotedScalar(n)) return s;
  bool b;
  int64_t i;
  double d;
  if (IsNullText(s)) return nullptr;
  if (BoolText(s, &b)) return b;
  if (IntText(s, &i)) return i;
  if (FloatText(s, &d)) return d;
  return s;
}

}  // namespace

Json YamlToJson(const YAML::Node& n) {
  size_t budget = kMaxYamlValues;
  const int line = n.IsDefined() && n.Mark().line >= 0 ? n.Mark().line + 1 : 1;
  return YamlToJsonBounded(n, 0, &budget, line);
}

YAML::Node JsonToYaml(const Json& j) {
  switch (j.type()) {
    case Json::value_t::object: {
      YAML::Node m(YAML::NodeType::Map);
      // A JSON object's keys are unique: no lookup (operator[] compares every key).
      for (auto it = j.begin(); it != j.end(); ++it) {
        m.force_insert(it.key(), JsonToYaml(it.value()));
      }
      return m;
    }
    case Json::value_t::array: {
      YAML::Node s(YAML::NodeType::Sequence);
      for (const Json& v : j) s.push_back(JsonToYaml(v));
      return s;
    }
    case Json::value_t::string: {
      YAML::Node s(j.get<std::string>());
      s.SetTag("!");
      return s;
    }
    case Json::value_t::null:
    case Json::value_t::discarded:
      return YAML::Node(YAML::NodeType::Null);
    default:
      return YAML::Node(j.dump());
  }
}

std::string EmitYaml(const std::vector<Json>& docs) {
  std::string out;
  for (const Json& d : docs) {
    YAML::Emitter e;
    Emit(e, d);
    if (!out.empty()) out += "---\n";
    out += e.c_str();
    out += "\n";
  }
  return out;
}

Result<std::vector<Json>> ParseYamlDocuments(const std::string& text, const std::string& source) {
  BW_RETURN_IF_ERROR(spec_internal::CheckUtf8(text, source));
  try {
    std::vector<Json> out;
    for (const YAML::Node& doc : YAML::LoadAll(text)) {
      BW_RETURN_IF_ERROR(spec_internal::CheckDecodedUtf8(doc, source));
      if (doc.IsDefined() && !doc.IsNull()) out.push_back(YamlToJson(doc));
    }
    return out;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) +
                           ": (yaml syntax): " + e.msg + "; fix the YAML syntax there");
  } catch (const YamlTooLarge& e) {
    return InvalidArgument(source + ":" + std::to_string(e.line()) + ": (yaml): the document " +
                           e.what() + "; write the values out");
  }
}

}  // namespace bulwark::trainjob
