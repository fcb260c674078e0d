// LoadManifest / ParseManifest: tells a plain job spec, a TrainJob and a Kubeflow
// PyTorchJob apart and returns each as a TrainJob.
#include <filesystem>

#include "spec/job_fields.h"
#include "spec/job_spec_schema.h"
#include "spec/spec_reader.h"
#include "trainjob/trainjob.h"
#include "trainjob/trainjob_internal.h"
#include "trainjob/yaml_json.h"

namespace bulwark::trainjob {
namespace {

// The scalar at root[key], or "" when absent or not a scalar.
std::string ScalarAt(const YAML::Node& root, const char* key) {
  const YAML::Node n = root[key];
  return n.IsDefined() && n.IsScalar() ? n.Scalar() : "";
}

// `name_line`: the line of the spec's `name:` (0 = unknown).
Result<LoadedManifest> FromJobSpec(const YAML::Node& root, const std::string& source,
                                   const std::string& base_dir, Target target, int name_line) {
  spec_internal::JobFieldsOptions o;
  o.base_dir = base_dir;
  if (target == Target::kKubernetes) o.paths = spec_internal::PathMode::kContainer;
  Result<JobSpec> spec = spec_internal::ParseJobSpecNode(root, source, o);
  if (!spec.ok()) return spec.status();
  LoadedManifest m;
  m.kind = ManifestKind::kJobSpec;
  m.job.name = spec->name;
  m.job.job = std::move(spec).value();
  m.job.pod.gpus_per_node = m.job.job.procs_per_node;
  if (target == Target::kKubernetes) {
    // The job's name becomes the TrainJob's metadata.name (and its Services' names).
    if (!internal::IsDns1035Label(m.job.name)) {
      return InvalidArgument(
          source + (name_line > 0 ? ":" + std::to_string(name_line) : std::string()) +
          ": name: on Kubernetes the job's name is its TrainJob's metadata.name, which must be " +
          (m.job.name.size() > 63 ? std::string("at most 63 characters")
                                  : std::string("a DNS-1035 label (lowercase letters, digits "
                                                "and '-', starting with a letter)")) +
          " (got \"" + spec_internal::OneLine(m.job.name) +
          "\"); rename the job, e.g. name: gpt-char");
    }
    if (m.job.job.checkpoint.dir.empty()) {
      m.job.job.checkpoint.dir = "/bulwark/local/" + m.job.ns + "/" + m.job.name;
    }
    m.notes.push_back(source +
                      ": a job spec has no pod section: write it as a TrainJob to set the image, "
                      "GPUs and volumes (bulwark render --trainjob prints one)");
    if (!(m.job.job.slurm == SlurmSpec{})) {
      m.notes.push_back(source +
                        ": slurm: ignored on Kubernetes (it says how the job runs on "
                        "Slurm; the TrainJob has no such section)");
    }
  }
  return m;
}

Result<LoadedManifest> ParseManifestUnbounded(const YAML::Node& root,
                                              const std::string& source_name,
                                              const std::string& base_dir, Target target) {
  std::string api_version, kind;
  try {
    if (root.IsMap()) {
      api_version = ScalarAt(root, "apiVersion");
      kind = ScalarAt(root, "kind");
    }
  } catch (const std::exception&) {
    // Not a plain mapping; the job spec parser reports it.
  }
  if (api_version.empty() && kind.empty()) {
    int name_line = 0;
    try {
      if (root.IsMap() && root["name"].IsDefined()) name_line = root["name"].Mark().line + 1;
    } catch (const std::exception&) {
    }
    return FromJobSpec(root, source_name, base_dir, target, name_line);
  }
  internal::ParseContext ctx{source_name, true, base_dir, target};
  LoadedManifest m;
  if (kind == "PyTorchJob") {
    m.kind = ManifestKind::kPyTorchJob;
    Result<Json> obj = internal::ConvertPyTorchJob(root, ctx, &m.notes);
    if (!obj.ok()) return obj.status();
    internal::ParseContext converted{source_name + " (converted from PyTorchJob)", false, base_dir,
                                     target};
    Result<TrainJob> t = internal::ParseTrainJobNode(JsonToYaml(*obj), converted, nullptr);
    if (!t.ok()) return t.status();
    m.job = std::move(t).value();
    return m;
  }
  if (kind == "TrainJob" && api_version.rfind("trainer.kubeflow.org/", 0) == 0) {
    const int line = root["apiVersion"].Mark().line + 1;
    return InvalidArgument(
        source_name + ":" + std::to_string(line) +
        ": apiVersion: this is Kubeflow Trainer's "
        "TrainJob (" +
        spec_internal::OneLine(api_version) + "), not Bulwark's (got " +
        spec_internal::OneLine(api_version + " " + kind) +
        "); write it as a bulwark.dev/v1alpha1 TrainJob (docs/trainjob.md): "
        "spec.trainer.image -> spec.pod.image, spec.trainer.command and args -> "
        "spec.command and spec.args, spec.trainer.numNodes -> spec.nodes, "
        "spec.trainer.numProcPerNode -> spec.procsPerNode, spec.trainer.env -> spec.env (the "
        "runtimeRef's torch runtime is what Bulwark provides); or give a kubeflow.org/v1 "
        "PyTorchJob, which Bulwark converts");
  }
  if (kind == "TrainJob" || api_version.rfind("bulwark.dev/", 0) == 0) {
    m.kind = ManifestKind::kTrainJob;
    Result<TrainJob> t = internal::ParseTrainJobNode(root, ctx, &m.notes);
    if (!t.ok()) return t.status();
    m.job = std::move(t).value();
    return m;
  }
  const int line = root["kind"].IsDefined() ? root["kind"].Mark().line + 1 : 1;
  return InvalidArgument(source_name + ":" + std::to_string(line) +
                         ": kind: not a manifest Bulwark runs (got " +
                         spec_internal::OneLine(api_version + " " + kind) +
                         "); give a job spec (docs/job-spec.md), a bulwark.dev/v1alpha1 TrainJob "
                         "(docs/trainjob.md) or a kubeflow.org/v1 PyTorchJob");
}

}  // namespace

namespace internal {

Result<LoadedManifest> ParseLoadedManifest(const YAML::Node& root, const std::string& source_name,
                                           const std::string& base_dir, Target target) {
  try {
    return ParseManifestUnbounded(root, source_name, base_dir, target);
  } catch (const YamlTooLarge& e) {  // a value converted outside the field readers
    return InvalidArgument(source_name + ":" + std::to_string(e.line()) + ": (yaml): a value " +
                           e.what() + "; write the values out without YAML aliases");
  }
}

}  // namespace internal

Result<LoadedManifest> ParseManifest(const std::string& text, const std::string& source_name,
                                     const std::string& base_dir, Target target) {
  BW_ASSIGN_OR_RETURN(const YAML::Node root, internal::LoadDocument(text, source_name));
  return internal::ParseLoadedManifest(root, source_name, base_dir, target);
}

Result<LoadedManifest> LoadManifest(const std::string& path, Target target) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return InvalidArgument("manifest path " + path + ": " + ec.message());
  Result<std::string> text = spec_internal::ReadSpecFile(path);
  if (!text.ok()) return text.status();
  Result<LoadedManifest> m = ParseManifest(*text, path, abs.parent_path().string(), target);
  if (m.ok()) m->job.job.source_path = spec_internal::CleanPath(abs);
  return m;
}

}  // namespace bulwark::trainjob
