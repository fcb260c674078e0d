// Reading the manifests a command is given, as kubectl's -f does: a file or "-" for
// standard input, holding one or several YAML documents separated by "---".
// Thread-compatible; ReadManifestInput("-") consumes standard input.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainjob/trainjob.h"

namespace bulwark::trainjob {

// The text of a manifest input and where it came from.
struct ManifestInput {
  std::string text;
  std::string name;      // what errors call it: the path, or "<stdin>"
  std::string base_dir;  // where relative paths resolve: the file's dir, or the cwd
  std::string path;      // the absolute, clean file path ("" for standard input)
};

// Reads `path` ("-": standard input, at most 1 MiB as a file). NotFound for a missing
// file; errors name the path.
Result<ManifestInput> ReadManifestInput(const std::string& path);

// The documents of a YAML stream: each as the text of the whole stream with every line
// outside it blanked, so a document's errors carry the line numbers of the stream. A
// document starts at a line "---" (at column 0, optionally followed by a space and a
// comment or content) and ends before the next one or at "..."; documents holding only
// comments and blank lines are left out. Never fails: syntax errors are the parser's.
std::vector<std::string> SplitYamlDocuments(const std::string& text);

// Every document of `in` parsed as LoadManifest parses a file (job spec, TrainJob or
// PyTorchJob; source_path set for a file). An error names the input and the line;
// an input with no document at all is an error too.
Result<std::vector<LoadedManifest>> ParseManifestInput(const ManifestInput& in, Target target);

// The documents of a manifest input with their YAML loaded once, to be parsed for several
// targets (validate checks a TrainJob both as the local backend and as Kubernetes would
// run it). Immutable after construction; copies share the loaded documents.
class LoadedManifestInput {
 public:
  // Splits and loads every document; never fails (a document's load error is kept and
  // returned by Parse).
  explicit LoadedManifestInput(const ManifestInput& in);
  // What ParseManifestInput(in, target) returns: the first error in document order, a
  // load error included.
  Result<std::vector<LoadedManifest>> Parse(Target target) const;

 private:
  struct Documents;
  std::string name_, base_dir_, path_;
  std::shared_ptr<const Documents> docs_;
};

}  // namespace bulwark::trainjob
