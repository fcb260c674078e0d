// Table output (meta.k8s.io/v1 Table), what `kubectl get` asks for and prints. See
// fake_apiserver_internal.h for the contract; the cell rules follow the apiextensions
// server's table convertor.
#include <cmath>
#include <cstdio>
#include <ctime>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {
namespace {

// One media range of an Accept header: "type/subtype" and its parameters.
struct MediaRange {
  std::string type;
  std::map<std::string, std::string> params;
};

std::vector<MediaRange> ParseAccept(const std::string& accept) {
  std::vector<MediaRange> out;
  size_t pos = 0;
  while (pos <= accept.size()) {
    size_t comma = accept.find(',', pos);
    if (comma == std::string::npos) comma = accept.size();
    std::string range = accept.substr(pos, comma - pos);
    pos = comma + 1;
    MediaRange m;
    size_t p = 0;
    bool first = true;
    while (p <= range.size()) {
      size_t semi = range.find(';', p);
      if (semi == std::string::npos) semi = range.size();
      std::string part = Trim(range.substr(p, semi - p));
      p = semi + 1;
      if (first) {
        m.type = Lower(part);
        first = false;
      } else if (size_t eq = part.find('='); eq != std::string::npos) {
        m.params[Lower(Trim(part.substr(0, eq)))] = Trim(part.substr(eq + 1));
      }
    }
    if (!m.type.empty()) out.push_back(std::move(m));
  }
  return out;
}

std::string Param(const MediaRange& m, const char* key) {
  auto it = m.params.find(key);
  return it == m.params.end() ? "" : it->second;
}

// Seconds since the epoch of "2026-01-02T03:04:05Z" (fractions and offsets
// accepted); nullopt when malformed.
std::optional<double> ParseTimestamp(const std::string& s) {
  int y, mo, d, h, mi, sec;
  char rest[32] = {0};
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%31s", &y, &mo, &d, &h, &mi, &sec, rest) < 6) {
    return std::nullopt;
  }
  struct tm tm = {};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  double t = static_cast<double>(timegm(&tm));
  std::string r = rest;
  size_t zone = r.find_first_of("Z+-");
  if (zone == std::string::npos) return std::nullopt;
  if (r[zone] != 'Z') {
    int oh = 0, om = 0;
    if (std::sscanf(r.c_str() + zone + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
    double off = oh * 3600.0 + om * 60.0;
    t += r[zone] == '+' ? -off : off;
  }
  return t;
}

// The value at a simple JSONPath (".a.b", ".a[0].b", optionally wrapped in {}), or
// nullptr when any step is missing.
const Json* Find(const Json& obj, std::string path) {
  if (path.size() >= 2 && path.front() == '{' && path.back() == '}') {
    path = path.substr(1, path.size() - 2);
  }
  const Json* cur = &obj;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      size_t end = path.find_first_of(".[", i + 1);
      if (end == std::string::npos) end = path.size();
      std::string key = path.substr(i + 1, end - i - 1);
      if (key.empty()) return nullptr;
      if (!cur->is_object() || !cur->contains(key)) return nullptr;
      cur = &(*cur)[key];
      i = end;
    } else if (path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string::npos) return nullptr;
      std::string idx = path.substr(i + 1, close - i - 1);
      char* endp = nullptr;
      long n = std::strtol(idx.c_str(), &endp, 10);  // NOLINT(runtime/int)
      if (idx.empty() || *endp != '\0' || n < 0 || !cur->is_array() ||
          static_cast<size_t>(n) >= cur->size()) {
        return nullptr;
      }
      cur = &(*cur)[static_cast<size_t>(n)];
      i = close + 1;
    } else {
      return nullptr;
    }
  }
  return cur;
}

Json Cell(const PrinterColumn& c, const Json& obj, double now_unix) {
  const Json* v = Find(obj, c.json_path);
  if (v == nullptr || v->is_null()) return nullptr;
  if (c.type == "string") {
    if (v->is_string()) return *v;
    return v->dump();  // JSONPath prints other values as JSON
  }
  if (c.type == "integer") {
    if (v->is_number()) return static_cast<int64_t>(v->get<double>());
    return nullptr;
  }
  if (c.type == "number") {
    if (v->is_number()) return v->get<double>();
    return nullptr;
  }
  if (c.type == "boolean") return v->is_boolean() ? *v : Json(nullptr);
  if (c.type == "date") {
    if (!v->is_string()) return nullptr;
    std::optional<double> t = ParseTimestamp(v->get<std::string>());
    if (!t) return nullptr;
    return HumanDuration(now_unix - *t);
  }
  return nullptr;
}

std::vector<PrinterColumn> ColumnsOf(const ResourceInfo& r, const std::string& version) {
  auto it = r.columns.find(version);
  if (r.custom && it != r.columns.end() && !it->second.empty()) return it->second;
  PrinterColumn age;
  age.name = "Age";
  age.type = "date";
  age.json_path = ".metadata.creationTimestamp";
  age.description =
      "CreationTimestamp is a timestamp representing the server time when this object was "
      "created.";
  return {age};
}

}  // namespace

ApiOr<Rendering> NegotiateRendering(const std::string& accept) {
  if (Trim(accept).empty()) return Rendering::kJson;
  for (const MediaRange& m : ParseAccept(accept)) {
    if (m.type == "*/*" || m.type == "application/*") return Rendering::kJson;
    if (m.type != "application/json") continue;
    std::string as = Param(m, "as");
    if (as.empty()) return Rendering::kJson;
    std::string v = Param(m, "v"), g = Param(m, "g");
    if (as == "Table" && g == "meta.k8s.io" && (v == "v1" || v == "v1beta1")) {
      return Rendering::kTable;
    }
  }
  return ApiError{406, "NotAcceptable",
                  "only application/json and application/json;as=Table;v=v1;g=meta.k8s.io "
                  "responses are served (Accept: " +
                      accept + ")"};
}

std::string HumanDuration(double seconds) {
  auto n = static_cast<int64_t>(seconds);  // truncated toward zero, as Go's int()
  if (n < -1) return "<invalid>";
  if (n < 0) return "0s";
  auto f = [](const char* fmt, int64_t a, int64_t b = 0) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), fmt, static_cast<long long>(a),  // NOLINT(runtime/int)
                  static_cast<long long>(b));                        // NOLINT(runtime/int)
    return std::string(buf);
  };
  const int64_t minutes = n / 60, hours = n / 3600, days = hours / 24, years = days / 365;
  if (n < 60 * 2) return f("%llds", n);
  if (minutes < 10) return n % 60 == 0 ? f("%lldm", minutes) : f("%lldm%llds", minutes, n % 60);
  if (minutes < 60 * 3) return f("%lldm", minutes);
  if (hours < 8) {
    return minutes % 60 == 0 ? f("%lldh", hours) : f("%lldh%lldm", hours, minutes % 60);
  }
  if (hours < 48) return f("%lldh", hours);
  if (hours < 24 * 8) return hours % 24 == 0 ? f("%lldd", days) : f("%lldd%lldh", days, hours % 24);
  if (hours < 24 * 365 * 2) return f("%lldd", days);
  if (hours < 24 * 365 * 8) {
    int64_t dy = days % 365;
    return dy == 0 ? f("%lldy", years) : f("%lldy%lldd", years, dy);
  }
  return f("%lldy", years);
}

Json ToTable(const ResourceInfo& r, const std::string& version, const std::vector<Json>& objects,
             const Json& list_metadata, const std::string& include_object, double now_unix) {
  std::vector<PrinterColumn> cols = ColumnsOf(r, version);
  Json defs = Json::array();
  defs.push_back({{"name", "Name"},
                  {"type", "string"},
                  {"format", "name"},
                  {"description",
                   "Name must be unique within a namespace. Is required when creating "
                   "resources, although some resources may allow a client to request the "
                   "generation of an appropriate name automatically."},
                  {"priority", 0}});
  for (const PrinterColumn& c : cols) {
    defs.push_back({{"name", c.name},
                    {"type", c.type},
                    {"format", c.format},
                    {"description", c.description},
                    {"priority", c.priority}});
  }
  Json rows = Json::array();
  for (const Json& o : objects) {
    Json cells = Json::array();
    const Json* name = Find(o, ".metadata.name");
    cells.push_back(name != nullptr ? *name : Json(""));
    for (const PrinterColumn& c : cols) cells.push_back(Cell(c, o, now_unix));
    Json row = {{"cells", cells}};
    if (include_object == "Object") {
      row["object"] = o;
    } else if (include_object != "None") {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", o.contains("metadata") ? o["metadata"] : Json::object()}};
    }
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", list_metadata.is_object() ? list_metadata : Json::object()},
          {"columnDefinitions", defs},
          {"rows", rows}};
}

}  // namespace bulwark::k8s::testing::internal
