// Loading the single YAML document of a spec with yaml-cpp, robustly.
// Internal to the spec component. Thread-safe (no shared state); the returned
// node is owned by the caller.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "common/status.h"

namespace bulwark::spec_internal {

// Parses `text` as at most one YAML document; an empty stream (or only comments)
// yields a Null node. Syntax errors and more than one document give
// InvalidArgument with one "<source>:<line>: (yaml syntax|top level): ..." line.
// Never throws (yaml-cpp exceptions, including bad_alloc from malformed input,
// are converted).
Result<YAML::Node> LoadSingleDocument(const std::string& text, const std::string& source);

// OK if `text` is valid UTF-8 (what YAML and JSON readers, and every JSON this product
// writes, require); else InvalidArgument "<source>:<line>: (encoding): byte 0x.. at
// column C is not valid UTF-8; ...". LoadSingleDocument checks it first.
Status CheckUtf8(const std::string& text, const std::string& source);

// OK if every scalar and key of a loaded document decoded to valid UTF-8 (yaml-cpp
// writes the escapes \N and \_ as single Latin-1 bytes); else InvalidArgument
// "<source>:<line>: (encoding): ...". Aliased nodes are visited once.
// LoadSingleDocument checks it.
Status CheckDecodedUtf8(const YAML::Node& root, const std::string& source);

}  // namespace bulwark::spec_internal
