// Resource paths, the well-known resources, object helpers, RFC 3339 times and the
// small encodings the client needs (query escaping, base64).
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/clock.h"
#include "k8s/internal.h"

namespace bulwark::k8s {

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int DaysInMonth(int y, int m) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

std::string MetaField(const Json& obj, const char* field) {
  if (!obj.is_object()) return "";
  auto it = obj.find("metadata");
  return it == obj.end() ? "" : internal::StrField(*it, field);
}

}  // namespace

std::string Resource::ApiVersion() const { return group.empty() ? version : group + "/" + version; }

std::string Resource::Path(const std::string& ns, const std::string& name,
                           const std::string& sub) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  p += "/" + plural;
  if (!name.empty()) {
    p += "/" + name;
    if (!sub.empty()) p += "/" + sub;
  }
  return p;
}

const Resource& Pods() {
  static const Resource r{"", "v1", "pods", "Pod", true};
  return r;
}
const Resource& Nodes() {
  static const Resource r{"", "v1", "nodes", "Node", false};
  return r;
}
const Resource& Services() {
  static const Resource r{"", "v1", "services", "Service", true};
  return r;
}
const Resource& Events() {
  static const Resource r{"", "v1", "events", "Event", true};
  return r;
}
const Resource& Leases() {
  static const Resource r{"coordination.k8s.io", "v1", "leases", "Lease", true};
  return r;
}
const Resource& TrainJobs() {
  static const Resource r{"bulwark.dev", "v1alpha1", "trainjobs", "TrainJob", true};
  return r;
}
const Resource& CustomResourceDefinitions() {
  static const Resource r{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                          "CustomResourceDefinition", false};
  return r;
}
const Resource& PodGroups() {
  static const Resource r{"scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", true};
  return r;
}

const char* EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
    case EventType::kBookmark:
      return "BOOKMARK";
    case EventType::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

std::string Namespace(const Json& obj) { return MetaField(obj, "namespace"); }
std::string Name(const Json& obj) { return MetaField(obj, "name"); }
std::string ResourceVersion(const Json& obj) { return MetaField(obj, "resourceVersion"); }
std::string Uid(const Json& obj) { return MetaField(obj, "uid"); }

std::string KeyOf(const Json& obj) {
  std::string ns = Namespace(obj);
  return ns.empty() ? Name(obj) : ns + "/" + Name(obj);
}

Result<double> ParseRfc3339(const std::string& s) {
  auto bad = [&s](const std::string& why) {
    return InvalidArgument("time '" + s + "' is not RFC 3339 (" + why +
                           "); expected e.g. 2026-11-24T22:33:01Z or 2026-11-24T22:33:01.5+01:00");
  };
  size_t i = 0;
  auto digits = [&](size_t n, int* out) {
    if (i + n > s.size()) return false;
    int v = 0;
    for (size_t k = 0; k < n; ++k) {
      char c = s[i + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    *out = v;
    i += n;
    return true;
  };
  auto expect = [&](const char* any) {
    if (i < s.size() && std::string_view(any).find(s[i]) != std::string_view::npos) {
      ++i;
      return true;
    }
    return false;
  };
  int y, mo, d, h, mi, sec;
  if (!digits(4, &y) || !expect("-") || !digits(2, &mo) || !expect("-") || !digits(2, &d)) {
    return bad("date must be YYYY-MM-DD");
  }
  if (!expect("Tt")) return bad("missing 'T' between date and time");
  if (!digits(2, &h) || !expect(":") || !digits(2, &mi) || !expect(":") || !digits(2, &sec)) {
    return bad("time must be HH:MM:SS");
  }
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 || sec > 60) {
    return bad("a field is out of range");
  }
  double frac = 0;
  if (expect(".")) {
    double scale = 0.1;
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      frac += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
    if (i == start) return bad("no digits after '.'");
  }
  int offset_s = 0;
  if (!expect("Zz")) {
    if (i >= s.size() || (s[i] != '+' && s[i] != '-')) return bad("missing zone (Z or +HH:MM)");
    int sign = s[i] == '-' ? -1 : 1;
    ++i;
    int oh, om;
    if (!digits(2, &oh) || !expect(":") || !digits(2, &om) || oh > 23 || om > 59) {
      return bad("zone offset must be +HH:MM");
    }
    offset_s = sign * (oh * 3600 + om * 60);
  }
  if (i != s.size()) return bad("trailing characters");
  const int64_t secs = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
  return static_cast<double>(secs) + frac;
}

namespace internal {

std::string Rfc3339Micro(double unix_seconds) {
  int64_t secs = static_cast<int64_t>(std::floor(unix_seconds));
  int64_t micros = std::llround((unix_seconds - static_cast<double>(secs)) * 1e6);
  if (micros >= 1000000) {
    ++secs;
    micros -= 1000000;
  }
  char frac[32];
  snprintf(frac, sizeof(frac), ".%06lldZ", static_cast<long long>(micros));
  std::string out = FormatRfc3339(static_cast<double>(secs));
  out.pop_back();  // the 'Z'
  return out + frac;
}

std::optional<std::string> Base64Decode(std::string_view s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0, sextets = 0;
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    int v = val(c);
    if (v < 0 || pad > 0) return std::nullopt;  // bad character, or data after padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    ++sextets;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (sextets % 4 == 1 || pad > 2) return std::nullopt;
  return out;
}

std::string CheckPathSegment(const std::string& name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "'" + name + "' is not a valid name";
  for (unsigned char c : name) {
    if (c == '/' || c == '?' || c == '#' || c == '%' || c <= 0x20 || c == 0x7f) {
      return "'" + name + "' contains a character not allowed in a name ('/', '?', '#', '%', " +
             "space or control)";
    }
  }
  return "";
}

}  // namespace internal

}  // namespace bulwark::k8s
