// Shared internals of the trainjob component: the parser entry on a YAML node, the
// PyTorchJob converter and name validators. Not part of the public API.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"
#include "trainjob/trainjob.h"

namespace bulwark::trainjob::internal {

struct ParseContext {
  std::string source;      // error prefix
  bool show_lines = true;  // false for objects without line information
  std::string base_dir;    // Target::kLocal path resolution
  Target target = Target::kKubernetes;
};

// Parses a TrainJob document. Appends to *notes (may be null) what a reader should
// know (for kLocal: the Kubernetes-only sections the local backend ignores).
Result<TrainJob> ParseTrainJobNode(const YAML::Node& root, const ParseContext& ctx,
                                   std::vector<std::string>* notes);

// Converts a Kubeflow PyTorchJob (kubeflow.org/v1) document to a TrainJob object,
// appending one note per converted or dropped part. Errors name the PyTorchJob
// field, its line and the fix.
Result<Json> ConvertPyTorchJob(const YAML::Node& root, const ParseContext& ctx,
                               std::vector<std::string>* notes);

// The single YAML document of a manifest; InvalidArgument naming `source` for text
// over the 1 MiB limit, syntax errors or more than one document.
Result<YAML::Node> LoadDocument(const std::string& text, const std::string& source);

// ParseManifest on a document LoadDocument loaded. Does not modify `root`, so one loaded
// document can be parsed for several targets.
Result<LoadedManifest> ParseLoadedManifest(const YAML::Node& root, const std::string& source_name,
                                           const std::string& base_dir, Target target);

bool IsDns1035Label(const std::string& s);      // [a-z]([-a-z0-9]*[a-z0-9])?, <= 63
bool IsDns1123Subdomain(const std::string& s);  // lowercase labels joined by '.', <= 253
bool IsLabelValue(const std::string& s);        // "" or alnum ends, [-_.A-Za-z0-9], <= 63
bool IsQualifiedName(const std::string& s);     // [prefix/]name as in label keys
bool IsQuantity(const std::string& s);          // a resource.Quantity string

// Joins "a", "b", "c" as "a, b, c".
std::string JoinComma(const std::vector<std::string>& items);

}  // namespace bulwark::trainjob::internal
