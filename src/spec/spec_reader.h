// SpecReader: typed, error-collecting access to a yaml-cpp node tree.
//
// Internal to the spec component (used by job_spec.cc). Every accessor reports
// problems into the reader's error list in the form
//   "<source>:<line>: <field.path>: <problem> (got <value>); <fix>"
// and returns false instead of throwing, so one pass collects every error.
// Callers must still wrap use in try/catch: yaml-cpp may throw on malformed trees.
// Not thread-safe; one reader per parse.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace bulwark::spec_internal {

// The value type of a field. The parser enforces it; the TrainJob CRD's OpenAPI
// schema (src/trainjob/crd.cc) is generated from it, so the two cannot drift.
enum class FieldType : uint8_t {
  kString,      // any scalar, kept as text (`values` restricts it to an enum)
  kInt,         // plain integer within [min, max]
  kNumber,      // finite number within [min, max] (min exclusive if min_exclusive)
  kBool,        // true or false
  kIntOrAuto,   // an integer within [min, max] or the string "auto"
  kStringList,  // list of scalars
  kStringMap,   // mapping of string -> scalar
  kObject,      // mapping whose keys are `children`
  kObjectList,  // list of mappings whose keys are `children`
  kQuantity,    // a Kubernetes quantity: a plain integer >= 0 or a string such as "512Gi"
  kAnyObject,   // any mapping, passed through (e.g. a Kubernetes VolumeSource)
  kAny,         // any value, passed through unchecked
};

// A cross-field rule, as a CEL expression on the field's value (`self`) for the
// CRD's x-kubernetes-validations; the parser checks the same rule in C++.
struct CelRule {
  const char* rule;
  const char* message;
};

inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// A known key of a YAML mapping: the fix hint used for every error about it, and
// its type and limits (the one description both the parser and the CRD use).
// Only `key` and `hint` are needed where a table is used for key checking alone.
struct FieldDef {
  const char* key;   // camelCase YAML key
  const char* hint;  // "<fix>" part of error messages, e.g. "set nodes to an integer 1..1024"
  FieldType type = FieldType::kString;
  double min = -kUnbounded;  // kInt, kNumber, kIntOrAuto
  double max = kUnbounded;
  bool min_exclusive = false;
  bool required = false;
  std::span<const FieldDef> children = {};   // kObject, kObjectList
  std::span<const char* const> values = {};  // kString: the allowed values
  std::span<const CelRule> rules = {};       // on the value (on each item of a kObjectList)
  int max_items = 0;                         // lists: 0 = unbounded
};

// One present field of a mapping, after key validation.
struct Entry {
  YAML::Node value;
  int line = 0;                   // 1-based line of the value (of the key when the value is null)
  std::string path;               // dotted path, e.g. "faultPolicy.backoff.capSeconds"
  std::string hint;               // from FieldDef
  const FieldDef* def = nullptr;  // the field's table entry (owned by the static table)
};

// `s` with control characters (newline included) written as \xHH, so that an error
// built from input text stays one line per problem.
std::string OneLine(const std::string& s);

// Number of single-character edits turning `a` into `b` (case-insensitive).
int EditDistance(const std::string& a, const std::string& b);

// Closest of `candidates` to `key` if it is plausibly a typo (small edit distance,
// or equal after dropping case, '_' and '-'); "" otherwise.
std::string SuggestKey(const std::string& key, std::span<const std::string> candidates);

class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  // Without line numbers ("<source>: <path>: ..."), for input that has none, such
  // as an object read from the Kubernetes API.
  void set_show_lines(bool show) { show_lines_ = show; }

  // 1-based line of `n`, or `fallback` when the node carries no position.
  static int LineOf(const YAML::Node& n, int fallback);
  // Short human rendering of a node for "(got ...)": scalars verbatim or quoted,
  // collections as "a list"/"a mapping", truncated to a readable length.
  static std::string Describe(const YAML::Node& n);

  void Error(int line, const std::string& path, const std::string& problem, const std::string& got,
             const std::string& fix);
  bool has_errors() const { return !errors_.empty(); }
  // The reported errors ordered by line (stable: same-line errors keep report order).
  std::vector<std::string> SortedErrors() const;

  // Validates that `map` is a mapping (null counts as empty) whose keys are all in
  // `fields`; reports non-mapping values, unknown keys (with suggestions),
  // non-scalar keys and duplicate keys. Returns the present known fields by key
  // (first occurrence wins). `path` is the mapping's own path ("" for the root).
  std::map<std::string, Entry> Fields(const YAML::Node& map, int line, const std::string& path,
                                      const std::string& hint, std::span<const FieldDef> fields);

  // Typed reads. Each returns false (after reporting) on a type or range error.
  bool ReadInt(const Entry& e, long lo, long hi, long* out);
  // `lo_exclusive` makes the lower bound strict (value must be > lo).
  bool ReadNumber(const Entry& e, double lo, bool lo_exclusive, double hi, double* out);
  // The same, with the limits of the entry's FieldDef (e.def must be set).
  bool ReadInt(const Entry& e, long* out);
  bool ReadNumber(const Entry& e, double* out);
  // Any scalar is accepted as text; null and collections are errors.
  bool ReadString(const Entry& e, std::string* out);
  // A list of scalars; a lone scalar is rejected with a hint showing the list form.
  bool ReadStringList(const Entry& e, std::vector<std::string>* out);

 private:
  // Reports and returns false unless `e.value` is a plain (unquoted) scalar.
  bool RequireNumberScalar(const Entry& e, const char* what);

  std::string source_;
  bool show_lines_ = true;
  std::vector<std::pair<int, std::string>> errors_;  // (line, full message)
};

}  // namespace bulwark::spec_internal
