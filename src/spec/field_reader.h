// FieldReader: a SpecReader plus the typed reads of optional fields by key that the
// config parsers share: the simulator's config (src/sim) and the scheduler's queue
// configuration (src/sched/config.h), whose `scheduler:` and `queues:` sections are
// one implementation (src/sched/config_sections.h) used by both.
//
// Internal to the components that parse YAML configs. Every problem is reported into
// reader() in the SpecReader format
//   "<source>:<line>: <field.path>: <problem> (got <value>); <fix>"
// and the reads return false instead of throwing (yaml-cpp itself may throw; see
// ParseDocument). Not thread-safe; one reader per parse.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/spec_reader.h"

namespace bulwark::spec_internal {

class FieldReader {
 public:
  using Fields = std::map<std::string, Entry>;

  explicit FieldReader(std::string source) : source_(source), r_(std::move(source)) {}

  SpecReader& reader() { return r_; }

  // Loads `text` as one YAML document (spec_internal::LoadSingleDocument) and calls
  // `parse` with its root when that is a mapping; otherwise reports "the config must
  // be a YAML mapping" with the fix `root_fix`. A yaml-cpp exception thrown by
  // `parse` is reported as a malformed tree. Returns OK, or InvalidArgument with every
  // reported error, one per line, ordered by line. Never throws.
  Status ParseDocument(const std::string& text, const std::string& root_fix,
                       const std::function<void(const YAML::Node&)>& parse);

  // Typed optional reads of `f[key]`: false when absent or invalid (invalid is
  // reported). Num stores the value times `scale`; Str rejects the empty string.
  bool Num(Fields& f, const char* key, double lo, bool excl, double hi, double* out,
           double scale = 1);
  bool Int(Fields& f, const char* key, long lo, long hi, int* out);
  bool Str(Fields& f, const char* key, std::string* out);
  bool Bool(Fields& f, const char* key, bool* out);
  bool IsAuto(Fields& f, const char* key);  // the scalar `auto`
  // The items of a list (null: none); false (reported) when `e` is not a list.
  bool ReadList(const Entry& e, std::vector<YAML::Node>* items);

  // "path[i]".
  static std::string Item(const std::string& path, size_t i);
  // An Entry for list item / map value `n` at `path`.
  static Entry Sub(const YAML::Node& n, int line, const std::string& path, const std::string& hint);

 private:
  std::string source_;
  SpecReader r_;
};

}  // namespace bulwark::spec_internal
