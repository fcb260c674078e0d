// Conversions between YAML (yaml-cpp) and JSON (nlohmann) for Kubernetes manifests.
// Pure functions; thread-safe; never throw.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::trainjob {

// A YAML node as JSON. Quoted scalars are strings; plain scalars are typed by the
// YAML 1.2 core schema (null/~, true/false, decimal integers that fit int64, finite
// floats), anything else a string. Mapping keys become strings.
Json YamlToJson(const YAML::Node& node);

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
