#include "common/json_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace bulwark {
namespace {

std::string Where(const Json& j, const char* field) {
  std::string type = j.is_object() && j.contains("type") && j["type"].is_string()
                         ? j["type"].get<std::string>()
                         : std::string("?");
  return "message '" + type + "': field '" + field + "'";
}

Status Missing(const Json& j, const char* field) {
  return InvalidArgument(Where(j, field) + " is missing");
}

Status Mistyped(const Json& j, const char* field, const char* want) {
  return InvalidArgument(Where(j, field) + " must be " + want + " (got " +
                         j[field].dump().substr(0, 60) + ")");
}

bool Has(const Json& j, const char* field) { return j.is_object() && j.contains(field); }

}  // namespace

Result<long> JInt(const Json& j, const char* field) {
  if (!Has(j, field)) return Missing(j, field);
  const Json& v = j[field];
  if (v.is_number_integer()) return static_cast<long>(v.get<int64_t>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<long>(d);
  }
  return Mistyped(j, field, "an integer");
}

Result<double> JNum(const Json& j, const char* field) {
  if (!Has(j, field)) return Missing(j, field);
  const Json& v = j[field];
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::nan("");  // JSON has no NaN; senders encode it as null
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "nan" || s == "NaN") return std::nan("");
    if (s == "inf" || s == "Infinity") return INFINITY;
    if (s == "-inf" || s == "-Infinity") return -INFINITY;
  }
  return Mistyped(j, field, "a number");
}

Result<std::string> JStr(const Json& j, const char* field) {
  if (!Has(j, field)) return Missing(j, field);
  if (!j[field].is_string()) return Mistyped(j, field, "a string");
  return j[field].get<std::string>();
}

Result<std::vector<std::string>> JStrList(const Json& j, const char* field) {
  if (!Has(j, field)) return Missing(j, field);
  const Json& v = j[field];
  if (!v.is_array()) return Mistyped(j, field, "a list of strings");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) return Mistyped(j, field, "a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<std::vector<long>> JIntListOr(const Json& j, const char* field) {
  std::vector<long> out;
  if (!Has(j, field)) return out;
  const Json& v = j[field];
  if (!v.is_array()) return Mistyped(j, field, "a list of integers");
  for (const auto& e : v) {
    if (!e.is_number_integer()) return Mistyped(j, field, "a list of integers");
    out.push_back(e.get<long>());
  }
  return out;
}

Result<std::map<std::string, std::string>> JStrMap(const Json& j, const char* field) {
  if (!Has(j, field)) return Missing(j, field);
  const Json& v = j[field];
  if (!v.is_object()) return Mistyped(j, field, "an object of strings");
  std::map<std::string, std::string> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) return Mistyped(j, field, "an object of strings");
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

Result<long> JIntOr(const Json& j, const char* field, long def) {
  return Has(j, field) ? JInt(j, field) : Result<long>(def);
}
Result<double> JNumOr(const Json& j, const char* field, double def) {
  return Has(j, field) ? JNum(j, field) : Result<double>(def);
}
Result<std::string> JStrOr(const Json& j, const char* field, const std::string& def) {
  return Has(j, field) ? JStr(j, field) : Result<std::string>(def);
}

std::string DumpText(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string DigestHex(uint64_t digest) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return hex;
}

bool ParseDigestHex(const Json& v, uint64_t* out) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *out = std::strtoull(s.c_str(), nullptr, 16);
  return true;
}

}  // namespace bulwark
