// The job fields of a spec, parsed from any YAML mapping: the entry point the
// TrainJob parser (src/trainjob) shares with ParseJobSpec, so a TrainJob's `spec`
// takes exactly the fields, defaults, limits and error messages of a job spec.
// Internal to the spec and trainjob components. Thread-safe (no shared state).
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <span>
#include <string>

#include "common/status.h"
#include "spec/job_spec.h"
#include "spec/spec_reader.h"

namespace bulwark::spec_internal {

// How workdir and the checkpoint paths are resolved.
enum class PathMode {
  // On this machine: workdir defaults to base_dir, relative paths resolve against it
  // (checkpoint paths against workdir); all stored absolute. (ParseJobSpec.)
  kResolve,
  // Inside a container (Kubernetes): workdir stays "" unless set, meaning the image's
  // working directory; a relative workdir is relative to it. Relative checkpoint paths
  // resolve against workdir when it is absolute, else stay relative. An unset
  // checkpoint.dir stays "" for the caller to default.
  kContainer,
};

struct JobFieldsOptions {
  // Path of the mapping in error messages: "" for a job spec, "spec" for a TrainJob
  // ("spec.checkpoint.keep: ...").
  std::string root_path;
  // The job's name when it comes from elsewhere (a TrainJob's metadata.name); the
  // mapping then may not have a `name` field. "" = read and validate `name`.
  std::string name;
  PathMode paths = PathMode::kResolve;
  std::string base_dir;  // kResolve: "" = the current directory
  // A TrainJob may leave `command` out: it then comes from its image's ENTRYPOINT + CMD
  // (args, when given, replace CMD), resolved before the job starts. spec->command
  // stays empty. A job spec (ParseJobSpec) always requires it.
  bool command_optional = false;
  // Further keys the mapping may hold; they are key-checked here and returned for the
  // caller to parse (e.g. a TrainJob's scheduling, pod and suspend).
  std::span<const FieldDef> extra_fields;
};

// Reads a spec file into memory: errno-derived errors (NotFound for a missing file),
// InvalidArgument for a file over the 1 MiB spec limit.
Result<std::string> ReadSpecFile(const std::string& path);

// ParseJobSpec with options: the document checks (empty, not a mapping, more than one
// document, syntax, size) and then ParseJobFields on the root mapping.
Result<JobSpec> ParseJobSpecText(const std::string& text, const std::string& source,
                                 const JobFieldsOptions& o);

// ParseJobSpecText on a document already loaded with LoadSingleDocument (Null for an
// empty one), which does the syntax, size and single-document checks: the empty and
// not-a-mapping checks, then ParseJobFields. Does not modify `root`.
Result<JobSpec> ParseJobSpecNode(const YAML::Node& root, const std::string& source,
                                 const JobFieldsOptions& o);

// Parses the job fields of `map` (at `line`) into *spec, reporting every problem into
// `r`. Returns the present fields by key, including the extra ones.
std::map<std::string, Entry> ParseJobFields(SpecReader& r, const YAML::Node& map, int line,
                                            const JobFieldsOptions& o, JobSpec* spec);

}  // namespace bulwark::spec_internal
