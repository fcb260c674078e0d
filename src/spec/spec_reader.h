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

#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace bulwark::spec_internal {

// A known key of a YAML mapping and the fix hint used for every error about it.
struct FieldDef {
  const char* key;   // camelCase YAML key
  const char* hint;  // "<fix>" part of error messages, e.g. "set nodes to an integer 1..1024"
};

// One present field of a mapping, after key validation.
struct Entry {
  YAML::Node value;
  int line = 0;      // 1-based line of the value (of the key when the value is null)
  std::string path;  // dotted path, e.g. "faultPolicy.backoff.capSeconds"
  std::string hint;  // from FieldDef
};

// Number of single-character edits turning `a` into `b` (case-insensitive).
int EditDistance(const std::string& a, const std::string& b);

// Closest of `candidates` to `key` if it is plausibly a typo (small edit distance,
// or equal after dropping case, '_' and '-'); "" otherwise.
std::string SuggestKey(const std::string& key, std::span<const std::string> candidates);

class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

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
  // Any scalar is accepted as text; null and collections are errors.
  bool ReadString(const Entry& e, std::string* out);
  // A list of scalars; a lone scalar is rejected with a hint showing the list form.
  bool ReadStringList(const Entry& e, std::vector<std::string>* out);

 private:
  // Reports and returns false unless `e.value` is a plain (unquoted) scalar.
  bool RequireNumberScalar(const Entry& e, const char* what);

  std::string source_;
  std::vector<std::pair<int, std::string>> errors_;  // (line, full message)
};

}  // namespace bulwark::spec_internal
