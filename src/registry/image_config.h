// ImageConfig: what a container image's config says about how it starts (the OCI
// image config's Entrypoint, Cmd, WorkingDir and Env) and where it was read from.
// A plain value type with no dependencies, so pure components (src/trainjob) can take
// one without linking the registry client.
#pragma once

#include <string>
#include <vector>

namespace bulwark::registry {

struct ImageConfig {
  std::string image;                    // the reference as written, e.g. "pytorch/pytorch:latest"
  std::string registry;                 // the host answering, e.g. "registry-1.docker.io"
  std::string repository;               // e.g. "pytorch/pytorch"
  std::string manifest_digest;          // "sha256:..." of the platform's image manifest
  std::string config_digest;            // "sha256:..." of the config blob (verified)
  std::vector<std::string> entrypoint;  // config.Entrypoint ([] when unset)
  std::vector<std::string> cmd;         // config.Cmd ([] when unset)
  std::string working_dir;              // config.WorkingDir ("" when unset)
  std::vector<std::string> env;         // config.Env, "NAME=value" each
  bool operator==(const ImageConfig&) const = default;
};

// The argv Kubernetes runs for a container of this image that sets no command:
// Entrypoint + Cmd, or Entrypoint + `args` when args are given (args replace Cmd).
// Empty when the image has neither Entrypoint nor Cmd (and no args are given).
inline std::vector<std::string> ImageCommand(const ImageConfig& c,
                                             const std::vector<std::string>& args) {
  std::vector<std::string> argv = c.entrypoint;
  const std::vector<std::string>& tail = args.empty() ? c.cmd : args;
  argv.insert(argv.end(), tail.begin(), tail.end());
  return argv;
}

}  // namespace bulwark::registry
