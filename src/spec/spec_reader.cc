#include "spec/spec_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <system_error>

namespace bulwark::spec_internal {
namespace {

constexpr size_t kMaxShown = 60;

char LowerChar(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool Ignored(char c) { return c == '_' || c == '-'; }

// Whether `a` and `b` are equal after dropping case, '_' and '-'.
bool SameNormalized(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  for (;;) {
    while (i < a.size() && Ignored(a[i])) ++i;
    while (j < b.size() && Ignored(b[j])) ++j;
    if (i == a.size() || j == b.size()) return i == a.size() && j == b.size();
    if (LowerChar(a[i++]) != LowerChar(b[j++])) return false;
  }
}

// Renders text with control/non-ASCII bytes escaped, truncated for messages.
std::string Printable(const std::string& s) {
  std::string r;
  for (size_t i = 0; i < s.size() && r.size() < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      r += '\\';
      r += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      r += buf;
    } else {
      r += static_cast<char>(c);
    }
  }
  if (r.size() >= kMaxShown) r += "...";
  return r;
}

bool IsQuoted(const YAML::Node& n) {
  // yaml-cpp tags plain scalars "?" and quoted/literal ones "!".
  return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
}

std::string JoinKeys(std::span<const FieldDef> fields) {
  std::string r;
  for (const FieldDef& f : fields) {
    if (!r.empty()) r += ", ";
    r += f.key;
  }
  return r;
}

std::string Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

}  // namespace

int EditDistance(const std::string& a, const std::string& b) {
  // One row of the Wagner-Fischer table; `diag` holds the previous row's cell j-1.
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = static_cast<int>(i);
    const char ca = LowerChar(a[i - 1]);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      const int sub = diag + (ca == LowerChar(b[j - 1]) ? 0 : 1);
      row[j] = std::min(std::min(up, row[j - 1]) + 1, sub);
      diag = up;
    }
  }
  return row[b.size()];
}

std::string SuggestKey(const std::string& key, std::span<const std::string> candidates) {
  std::string best;
  int best_d = 1 << 30;
  for (const std::string& c : candidates) {
    if (SameNormalized(key, c)) return c;
    const int allowed = std::max<int>(1, std::min<int>(3, static_cast<int>(c.size()) / 3));
    // The distance is at least the difference in length: a key far longer or shorter
    // than `c` (a pasted value, a line of a mangled file) costs no quadratic work.
    const long length_gap = static_cast<long>(key.size()) - static_cast<long>(c.size());
    if (length_gap > allowed || -length_gap > allowed) continue;
    const int d = EditDistance(key, c);
    if (d <= allowed && d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

int SpecReader::LineOf(const YAML::Node& n, int fallback) {
  if (!n.IsDefined()) return fallback;
  const YAML::Mark m = n.Mark();
  return m.line >= 0 ? m.line + 1 : fallback;
}

std::string SpecReader::Describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  if (IsQuoted(n)) return "\"" + Printable(n.Scalar()) + "\"";
  return Printable(n.Scalar());
}

std::string OneLine(const std::string& s) {
  // The bytes to escape but NUL, for strcspn: it stops at a NUL as at one of these, and
  // at the terminator of c_str() when no byte is left to escape.
  static const char kControl[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,  11,
                                  12, 13, 14, 15, 16, 17, 18, 19, 20, 21,  22,
                                  23, 24, 25, 26, 27, 28, 29, 30, 31, 127, 0};
  std::string r;
  r.reserve(s.size());
  for (size_t run = 0; run < s.size();) {  // run: start of the bytes not yet copied
    const size_t i = run + std::strcspn(s.c_str() + run, kControl);
    r.append(s, run, i - run);
    if (i == s.size()) break;
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(s[i]));
    r += buf;
    run = i + 1;
  }
  return r;
}

void SpecReader::Error(int line, const std::string& path, const std::string& problem,
                       const std::string& got, const std::string& fix) {
  std::string m = source_;
  if (show_lines_) m += ":" + std::to_string(line);
  // The path holds the input's keys, and a problem or fix may quote them.
  m += ": ";
  m += path.empty() ? std::string("(top level)") : OneLine(path);
  m += ": ";
  m += OneLine(problem);
  m += " (got ";
  m += OneLine(got);
  m += "); ";
  m += OneLine(fix);
  errors_.emplace_back(line, std::move(m));
}

std::vector<std::string> SpecReader::SortedErrors() const {
  std::vector<std::pair<int, std::string>> sorted = errors_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& e : sorted) out.push_back(std::move(e.second));
  return out;
}

std::map<std::string, Entry> SpecReader::Fields(const YAML::Node& map, int line,
                                                const std::string& path, const std::string& hint,
                                                std::span<const FieldDef> fields) {
  std::map<std::string, Entry> out;
  if (!map.IsDefined() || map.IsNull()) return out;
  if (!map.IsMap()) {
    Error(LineOf(map, line), path, "must be a mapping of fields", Describe(map), hint);
    return out;
  }
  std::vector<std::string> names;
  for (const FieldDef& f : fields) names.emplace_back(f.key);
  // yaml-cpp iterators yield pairs by value; `it->first` would dangle.
  for (const auto& kv : map) {
    const YAML::Node k = kv.first;
    const YAML::Node v = kv.second;
    const int key_line = LineOf(k, line);
    if (!k.IsScalar()) {
      Error(key_line, path, "field names must be plain strings", Describe(k),
            "use one of: " + JoinKeys(fields));
      continue;
    }
    const std::string key = k.Scalar();
    const FieldDef* def = nullptr;
    for (const FieldDef& f : fields) {
      if (key == f.key) def = &f;
    }
    if (def == nullptr) {
      std::string s = SuggestKey(key, names);
      std::string fix = s.empty()
                            ? "remove it; valid fields here: " + JoinKeys(fields)
                            : "did you mean \"" + s + "\"? valid fields here: " + JoinKeys(fields);
      Error(key_line, Child(path, Printable(key)), "unknown field", Describe(k), fix);
      continue;
    }
    auto found = out.find(key);
    if (found != out.end()) {
      Error(key_line, Child(path, key), "duplicate key",
            "a second definition; the first is at line " + std::to_string(found->second.line),
            "keep only one \"" + key + "\"");
      continue;
    }
    Entry e;
    e.value = v;
    e.line = v.IsNull() ? key_line : LineOf(v, key_line);
    e.path = Child(path, key);
    e.hint = def->hint;
    e.def = def;
    out.emplace(key, std::move(e));
  }
  return out;
}

bool SpecReader::RequireNumberScalar(const Entry& e, const char* what) {
  if (!e.value.IsScalar()) {
    Error(e.line, e.path, std::string("must be ") + what, Describe(e.value), e.hint);
    return false;
  }
  if (IsQuoted(e.value)) {
    Error(e.line, e.path, std::string("must be ") + what + ", not a quoted string",
          Describe(e.value), "remove the quotes; " + e.hint);
    return false;
  }
  return true;
}

bool SpecReader::ReadInt(const Entry& e, long lo, long hi, long* out) {
  if (!RequireNumberScalar(e, "an integer")) return false;
  std::string s = e.value.Scalar();
  const char* b = s.data();
  const char* end = s.data() + s.size();
  if (b != end && *b == '+') ++b;
  long v = 0;
  auto [p, ec] = std::from_chars(b, end, v);
  if (ec == std::errc::result_out_of_range) {
    Error(e.line, e.path, "integer out of range", Describe(e.value), e.hint);
    return false;
  }
  if (ec != std::errc() || p != end || b == end) {
    double d = 0;
    auto [dp, dec] = std::from_chars(b, end, d);
    bool numeric = dec == std::errc() && dp == end;
    Error(e.line, e.path, numeric ? "must be a whole number" : "must be an integer",
          Describe(e.value), e.hint);
    return false;
  }
  if (v < lo) {
    Error(e.line, e.path, "must be >= " + std::to_string(lo), Describe(e.value), e.hint);
    return false;
  }
  if (v > hi) {
    Error(e.line, e.path, "must be <= " + std::to_string(hi), Describe(e.value), e.hint);
    return false;
  }
  *out = v;
  return true;
}

bool SpecReader::ReadNumber(const Entry& e, double lo, bool lo_exclusive, double hi, double* out) {
  if (!RequireNumberScalar(e, "a number")) return false;
  std::string s = e.value.Scalar();
  const char* b = s.data();
  const char* end = s.data() + s.size();
  if (b != end && *b == '+') ++b;
  double v = 0;
  auto [p, ec] = std::from_chars(b, end, v, std::chars_format::general);
  if (ec == std::errc::result_out_of_range) {
    Error(e.line, e.path, "number out of range", Describe(e.value), e.hint);
    return false;
  }
  if (ec != std::errc() || p != end || b == end || !std::isfinite(v)) {
    Error(e.line, e.path, "must be a finite number", Describe(e.value), e.hint);
    return false;
  }
  auto fmt = [](double d) {
    std::ostringstream os;
    os << d;
    return os.str();
  };
  if (lo_exclusive ? !(v > lo) : !(v >= lo)) {
    Error(e.line, e.path, std::string("must be ") + (lo_exclusive ? "> " : ">= ") + fmt(lo),
          Describe(e.value), e.hint);
    return false;
  }
  if (v > hi) {
    Error(e.line, e.path, "must be <= " + fmt(hi), Describe(e.value), e.hint);
    return false;
  }
  *out = v;
  return true;
}

bool SpecReader::ReadInt(const Entry& e, long* out) {
  // Table limits are doubles; infinite (or beyond long) means the type's own limit.
  auto limit = [](double d, long inf) {
    if (std::isinf(d) || std::fabs(d) >= 9.2e18) return inf;
    return static_cast<long>(d);
  };
  const double lo = e.def->min_exclusive ? e.def->min + 1 : e.def->min;
  return ReadInt(e, limit(lo, LONG_MIN), limit(e.def->max, LONG_MAX), out);
}

bool SpecReader::ReadNumber(const Entry& e, double* out) {
  return ReadNumber(e, e.def->min, e.def->min_exclusive, e.def->max, out);
}

bool SpecReader::ReadString(const Entry& e, std::string* out) {
  if (!e.value.IsScalar()) {
    Error(e.line, e.path, "must be a string", Describe(e.value), e.hint);
    return false;
  }
  *out = e.value.Scalar();
  return true;
}

bool SpecReader::ReadStringList(const Entry& e, std::vector<std::string>* out) {
  out->clear();
  if (e.value.IsNull()) return true;
  if (e.value.IsScalar()) {
    std::istringstream words(e.value.Scalar());
    std::string w, list;
    while (words >> w) list += (list.empty() ? "\"" : ", \"") + Printable(w) + "\"";
    Error(e.line, e.path, "must be a list of strings, not a single string", Describe(e.value),
          "write it as a YAML list, e.g. " + e.path + ": [" + list + "]");
    return false;
  }
  if (!e.value.IsSequence()) {
    Error(e.line, e.path, "must be a list of strings", Describe(e.value), e.hint);
    return false;
  }
  bool ok = true;
  int i = 0;
  for (const YAML::Node& item : e.value) {
    std::string path = e.path + "[" + std::to_string(i++) + "]";
    if (!item.IsScalar()) {
      Error(LineOf(item, e.line), path, "list items must be strings", Describe(item),
            "quote the item or remove it; " + e.hint);
      ok = false;
      continue;
    }
    out->push_back(item.Scalar());
  }
  return ok;
}

}  // namespace bulwark::spec_internal
