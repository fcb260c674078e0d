// Conversions between YAML (yaml-cpp) and JSON (nlohmann) for Kubernetes manifests.
// Pure functions; thread-safe; never throw.
#pragma once

#include <yaml-cpp/yaml.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::trainjob {

// A YAML node as JSON. Quoted scalars are strings; plain scalars are typed by the
// YAML 1.2 core schema (null/~, true/false, decimal integers that fit int64, finite
// floats), anything else a string. Mapping keys become strings.
//
// Bounded: a value that expands to more than kMaxYamlValues nodes (aliases count each
// time they are used: a "billion laughs" alias bomb) or nests deeper than
// kMaxYamlDepth throws YamlTooLarge, before it takes memory or stack.
Json YamlToJson(const YAML::Node& node);

inline constexpr size_t kMaxYamlValues = 100000;
inline constexpr int kMaxYamlDepth = 100;

class YamlTooLarge : public std::runtime_error {
 public:
  YamlTooLarge(int line, const std::string& what) : std::runtime_error(what), line_(line) {}
  int line() const { return line_; }  // 1-based line of the value being converted

 private:
  int line_;
};

// JSON as a YAML node whose strings are tagged as quoted scalars, so the spec parser
// tells `nodes: "2"` (a string) from `nodes: 2`. Numbers keep JSON's text.
YAML::Node JsonToYaml(const Json& j);

// Objects as a YAML stream, one document each separated by "---" (block style, keys
// in the Json's order, i.e. sorted). Strings that YAML would read as another type
// ("32", "true", "", "null") are double-quoted. Ends with a newline.
std::string EmitYaml(const std::vector<Json>& docs);

// Every document of a YAML stream as JSON (empty documents skipped). For trusted
// files (deploy/*.yaml, tests); errors name `source` and the line.
Result<std::vector<Json>> ParseYamlDocuments(const std::string& text, const std::string& source);

}  // namespace bulwark::trainjob
