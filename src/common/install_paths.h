// Where Bulwark's files are at run time, in a build tree or after `cmake --install`:
//   <prefix>/bin/bulwark, <prefix>/bin/bulwark-agent
//   <prefix>/lib/libbulwark.so
//   <prefix>/lib/bulwark/python/bulwark/...   (the package the ranks import)
// A build tree has build/bin and build/lib/libbulwark.so, and the package in the
// source tree (python/), whose path the build compiles in. Thread-safe.
#pragma once

#include <string>
#include <vector>

namespace bulwark {

// The directory of the running executable ("." if /proc/self/exe cannot be read).
std::string ExeDir();

// The Python package root for the ranks' PYTHONPATH: <exe dir>/../lib/bulwark/python if
// it holds the package (an installed tree), else `source_default` (the source tree's
// python/ of a build tree).
std::string DefaultPythonDir(const std::string& source_default);

// libbulwark.so next to the executable's prefix: <exe dir>/../lib/libbulwark.so if it
// exists, else `build_default`.
std::string DefaultSdkLib(const std::string& build_default);

// The command line that runs an agent bundle made by `bulwark-agent install DIR`
// (agent/install.h): {DIR/lib/ld.so, --library-path, DIR/lib, DIR/bin/bulwark-agent}.
// The agent's own arguments follow.
std::vector<std::string> AgentBundleCommand(const std::string& dir);

// The command line that runs this executable again: AgentBundleCommand(<bundle>) when it
// runs from an agent bundle (the process is the bundle's loader), else {its path} — the
// file at that path now when the binary was replaced while it ran (an upgrade, a
// rebuild), and {/proc/self/exe} when nothing is there any more.
std::vector<std::string> SelfCommand();

}  // namespace bulwark
