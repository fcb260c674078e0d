// `bulwark-agent install DIR`: copies the running agent into DIR so that it runs in a
// container of any image, with none of its libraries installed there. This is how a
// Kubernetes pod of an image without Bulwark (pytorch/pytorch, the user's own) gets
// its agent, as Argo's emissary executor gets its argoexec: an init container of the
// operator's image runs `install` into an emptyDir, and the training container's
// command is the installed agent (docs/kubernetes.md, "The agent in any image").
//
// DIR is laid out as an installed prefix (common/install_paths.h), so the agent finds
// the SDK with its built-in rules:
//   DIR/bin/bulwark-agent             the executable
//   DIR/lib/ld.so                     the dynamic loader it was linked against
//   DIR/lib/<soname>...               every shared library loaded in this process
//                                     (dl_iterate_phdr: glibc, libstdc++, libcurl, ...)
//   DIR/lib/libbulwark.so             the SDK library the ranks load (BULWARK_LIB)
//   DIR/lib/bulwark/python/bulwark/   the SDK package the ranks import (PYTHONPATH)
// and run as AgentBundleCommand(DIR) (common/install_paths.h): the bundled loader with
// --library-path DIR/lib, which binds the agent to the bundled glibc whatever the image
// has (the image's own programs, the ranks, keep the image's: --library-path is not
// inherited). The ranks' SDK (libbulwark.so in the image's Python) needs a glibc at
// least as new as the build's; where it cannot load, the ranks run without it (no
// step reports; the agent still supervises their processes).
//
// After copying, it runs the installed agent's --version through the bundled loader:
// an incomplete bundle fails here, in the init container, with the error.
#pragma once

#include <ostream>
#include <string>

#include "common/status.h"

namespace bulwark {

struct InstallOptions {
  std::string dest;        // DIR; created if missing
  std::string python_dir;  // the SDK package root to copy ("" or missing: none)
  std::string lib_path;    // libbulwark.so to copy ("" or missing: none)
};

// Copies the bundle; prints one line per part to `log`. Not thread-safe (run from main).
Status InstallAgentBundle(const InstallOptions& o, std::ostream& log);

}  // namespace bulwark
