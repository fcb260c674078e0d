// API errors in kube-apiserver's wording, and small encoders (time, UIDs, base64,
// query strings, name checks) for the fake API server.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

namespace {

Json ResourceDetails(const ResourceInfo& r, const std::string& name) {
  Json d = {{"name", name}, {"kind", r.plural}};
  if (!r.group.empty()) d["group"] = r.group;
  return d;
}

std::mt19937_64& Rng() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  return rng;
}

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-') return false;
  }
  return true;
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63 characters.
bool IsQualifiedName(const std::string& s) {
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  for (char c : s) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

std::string StrField(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool BoolField(const Json& j, const char* key, bool def) {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json StatusJson(const ApiError& e) {
  Json s = {{"kind", "Status"},     {"apiVersion", "v1"},   {"metadata", Json::object()},
            {"status", "Failure"},  {"message", e.message}, {"reason", e.reason},
            {"details", e.details}, {"code", e.code}};
  if (e.details.empty()) s.erase("details");
  return s;
}

Status ToStatus(const ApiError& e) {
  std::string msg = std::to_string(e.code) + " " + e.reason + ": " + e.message;
  switch (e.code) {
    case 400:
    case 422:
      return InvalidArgument(msg);
    case 401:
    case 403:
      return PermissionDenied(msg);
    case 404:
      return NotFound(msg);
    case 409:
      return e.reason == "AlreadyExists" ? Status(Code::kAlreadyExists, msg) : Aborted(msg);
    case 410:
      return OutOfRange(msg);
    default:
      return e.code == 429 || e.code >= 500 ? Unavailable(msg) : Internal(msg);
  }
}

ApiError ErrBadRequest(std::string message) { return {400, "BadRequest", std::move(message)}; }

ApiError ErrNotFoundPath() {
  return {404, "NotFound", "the server could not find the requested resource"};
}

ApiError ErrNotFound(const ResourceInfo& r, const std::string& name) {
  return {404, "NotFound", r.GroupResource() + " " + Quote(name) + " not found",
          ResourceDetails(r, name)};
}

ApiError ErrAlreadyExists(const ResourceInfo& r, const std::string& name) {
  return {409, "AlreadyExists", r.GroupResource() + " " + Quote(name) + " already exists",
          ResourceDetails(r, name)};
}

ApiError ErrConflict(const ResourceInfo& r, const std::string& name, const std::string& why) {
  return {409, "Conflict",
          "Operation cannot be fulfilled on " + r.GroupResource() + " " + Quote(name) + ": " + why,
          ResourceDetails(r, name)};
}

Json Cause(const std::string& reason, const std::string& field, const std::string& message) {
  return {{"reason", reason}, {"message", message}, {"field", field}};
}

ApiError ErrInvalid(const ResourceInfo& r, const std::string& name, std::vector<Json> causes) {
  std::vector<std::string> parts;
  for (const Json& c : causes) {
    parts.push_back(StrField(c, "field") + ": " + StrField(c, "message"));
  }
  std::string list = parts.size() == 1 ? parts[0] : "";
  if (parts.size() != 1) {
    list = "[";
    for (size_t i = 0; i < parts.size(); ++i) list += (i ? ", " : "") + parts[i];
    list += "]";
  }
  Json details = {{"name", name}, {"kind", r.kind}, {"causes", causes}};
  if (!r.group.empty()) details["group"] = r.group;
  return {422, "Invalid", r.QualifiedKind() + " " + Quote(name) + " is invalid: " + list, details};
}

ApiError ErrExpired(std::string message) { return {410, "Expired", std::move(message)}; }

ApiError ErrMethodNotAllowed() {
  return {405, "MethodNotAllowed",
          "the server does not allow this method on the requested resource"};
}

ApiError ErrUnsupportedMediaType(std::string message) {
  return {415, "UnsupportedMediaType", std::move(message)};
}

ApiError ErrForbidden(const ResourceInfo& r, const std::string& name, const std::string& why) {
  return {403, "Forbidden", r.GroupResource() + " " + Quote(name) + " is forbidden: " + why,
          ResourceDetails(r, name)};
}

ApiError ErrInjected(int http_status, double retry_after_s) {
  // reason and message kube-apiserver gives with each status ("" = the default message).
  static const std::map<int, std::pair<const char*, const char*>> kByStatus = {
      {400, {"BadRequest", ""}},
      {401, {"Unauthorized", "Unauthorized"}},
      {403, {"Forbidden", ""}},
      {404, {"NotFound", ""}},
      {409,
       {"Conflict",
        "Operation cannot be fulfilled: the object has been modified; please apply your "
        "changes to the latest version and try again"}},
      {410, {"Expired", "too old resource version (injected)"}},
      {422, {"Invalid", ""}},
      {429, {"TooManyRequests", "Too many requests, please try again later."}},
      {500, {"InternalError", "Internal error occurred: injected fault"}},
      {503, {"ServiceUnavailable", "The server is currently unable to handle the request"}},
      {504, {"Timeout", "The server was unable to return a response in the time allotted"}}};
  ApiError e{http_status, "", "injected fault: HTTP " + std::to_string(http_status)};
  e.retry_after_s = retry_after_s;
  auto it = kByStatus.find(http_status);
  if (it != kByStatus.end()) {
    e.reason = it->second.first;
    if (*it->second.second) e.message = it->second.second;
  }
  if (retry_after_s > 0) {
    e.details["retryAfterSeconds"] = static_cast<int64_t>(std::ceil(retry_after_s));
  }
  return e;
}

std::string NewUid() {
  uint64_t a = Rng()(), b = Rng()();
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  char buf[40];
  snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
           static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
           static_cast<unsigned>(b >> 48),
           static_cast<unsigned long long>(b & 0xffffffffffffULL));  // NOLINT(runtime/int)
  return buf;
}

std::string RandomNameSuffix() {
  static const char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";  // as apimachinery's rand
  std::string s;
  for (int i = 0; i < 5; ++i) s += kAlphabet[Rng()() % (sizeof(kAlphabet) - 1)];
  return s;
}

std::string Base64Encode(const std::string& in, bool url_safe) {
  const char* kTable = url_safe
                           ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                           : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    size_t n = std::min<size_t>(3, in.size() - i);  // bytes in this group
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? uint8_t(in[i + k]) : 0u);
    for (size_t k = 0; k <= n; ++k) out += kTable[(v >> (18 - 6 * k)) & 63];
  }
  if (!url_safe) out.append((3 - in.size() % 3) % 3, '=');
  return out;
}

std::optional<std::string> Base64Decode(const std::string& in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '-' || c == '+')
      v = 62;
    else if (c == '_' || c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string UrlDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(uint8_t(s[i + 1])) &&
               std::isxdigit(uint8_t(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(const std::string& query) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string::npos) amp = query.size();
    std::string part = query.substr(pos, amp - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string k = UrlDecode(part.substr(0, eq));
      std::string v = eq == std::string::npos ? "" : UrlDecode(part.substr(eq + 1));
      out.emplace(k, v);  // the first value of a repeated parameter wins, as in Go
    }
    pos = amp + 1;
  }
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string CheckDnsSubdomain(const std::string& s) {
  if (s.size() > 253) return "must be no more than 253 characters";
  size_t pos = 0;
  while (true) {
    size_t dot = s.find('.', pos);
    std::string part = s.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!IsDnsLabel(part)) {
      return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
             "characters, '-' or '.', and must start and end with an alphanumeric character "
             "(e.g. 'example.com')";
    }
    if (dot == std::string::npos) return "";
    pos = dot + 1;
  }
}

std::string CheckDnsLabel(const std::string& s) {
  if (s.size() > 63) return "must be no more than 63 characters";
  if (!IsDnsLabel(s)) {
    return "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
           "'-', and must start and end with an alphanumeric character (e.g. 'my-name')";
  }
  return "";
}

std::string CheckLabelKey(const std::string& s) {
  size_t slash = s.find('/');
  std::string name = slash == std::string::npos ? s : s.substr(slash + 1);
  if (slash != std::string::npos) {
    std::string prefix = s.substr(0, slash);
    if (prefix.empty() || !CheckDnsSubdomain(prefix).empty()) {
      return "prefix part must be a lowercase RFC 1123 subdomain";
    }
  }
  if (!IsQualifiedName(name)) {
    return "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
           "start and end with an alphanumeric character, at most 63 characters";
  }
  return "";
}

std::string CheckLabelValue(const std::string& s) {
  if (s.empty() || IsQualifiedName(s)) return "";
  return "a valid label must be an empty string or consist of alphanumeric characters, '-', "
         "'_' or '.', and must start and end with an alphanumeric character, at most 63 "
         "characters";
}

}  // namespace bulwark::k8s::testing::internal
