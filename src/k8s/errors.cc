// HTTP status and Kubernetes Status objects -> bulwark::Status (client.h's table).
#include <cctype>
#include <cmath>

#include "k8s/internal.h"

namespace bulwark::k8s {

namespace internal {

namespace {

Code CodeFor(long http, const std::string& reason) {
  switch (http) {
    case 400:
    case 422:
      return Code::kInvalidArgument;
    case 401:
    case 403:
      return Code::kPermissionDenied;
    case 404:
      return Code::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? Code::kAlreadyExists : Code::kAborted;
    case 410:
      return Code::kOutOfRange;
    case 429:
      return Code::kUnavailable;
    default:
      break;
  }
  if (http >= 500) return Code::kUnavailable;
  if (http == 408 || http == 504) return Code::kDeadlineExceeded;
  if (http >= 400) return Code::kInvalidArgument;  // 405, 406, 413, 415, ...
  return Code::kInternal;                          // 1xx/3xx: not an API answer
}

Status Build(const std::string& verb, const std::string& path, long http, std::string reason,
             const std::string& message) {
  if (reason.empty()) reason = DefaultReason(http);
  std::string msg = verb + " " + path + ": " + std::to_string(http) + " " + reason;
  if (!message.empty()) msg += ": " + message;
  return Status(CodeFor(http, reason), std::move(msg));
}

}  // namespace

const char* DefaultReason(long http) {
  switch (http) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 408:
      return "Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 502:
      return "BadGateway";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "Unknown";
  }
}

Status StatusFromHttp(const std::string& verb, const std::string& path, long http,
                      std::string_view body) {
  Json st = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (st.is_object() && StrField(st, "kind") == "Status") {
    return Build(verb, path, http, StrField(st, "reason"), StrField(st, "message"));
  }
  return Build(verb, path, http, "", Excerpt(body));
}

Status StatusFromApiStatus(const std::string& verb, const std::string& path, const Json& st) {
  if (!st.is_object()) {
    return Internal(verb + " " + path +
                    ": ERROR event without a Status object: " + Excerpt(st.dump()));
  }
  long code = 500;
  if (st.contains("code") && st["code"].is_number_integer()) code = st["code"].get<long>();
  return Build(verb, path, code, StrField(st, "reason"), StrField(st, "message"));
}

std::optional<double> ParseRetryAfter(const std::string& value) {
  size_t b = 0, e = value.size();
  while (b < e && std::isspace(static_cast<unsigned char>(value[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(value[e - 1]))) --e;
  if (b == e || e - b > 9) return std::nullopt;
  double v = 0;
  for (size_t i = b; i < e; ++i) {
    if (value[i] < '0' || value[i] > '9') return std::nullopt;  // HTTP-dates are not used
    v = v * 10 + (value[i] - '0');
  }
  return v;
}

std::string Excerpt(std::string_view s) {
  std::string q(s.substr(0, 200));
  for (char& c : q) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > 200) q += "...";
  return q;
}

}  // namespace internal

bool IsConflict(const Status& s) { return s.code() == Code::kAborted; }
bool IsGone(const Status& s) { return s.code() == Code::kOutOfRange; }
bool IsNotFound(const Status& s) { return s.code() == Code::kNotFound; }
bool IsAlreadyExists(const Status& s) { return s.code() == Code::kAlreadyExists; }

}  // namespace bulwark::k8s
