// Removing a distributed launcher (torchrun, python -m torch.distributed.run or
// .launch) from a container's command: in a Bulwark pod the agent starts the ranks
// with the torchrun environment itself. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::trainjob {

struct Launch {
  std::vector<std::string> argv;  // the trainer's command line
  size_t program_args = 0;        // argv[0, program_args) is the command, the rest its args
  std::string launcher;           // e.g. "torchrun"; "" when there was none
  std::vector<std::string> dropped_flags;  // the launcher's flags, as written
  int nproc_per_node = 0;                  // --nproc_per_node when it is an integer, else 0
};

// `command` and `args` as a container has them. Recognises torchrun, python[3[.x]] -m
// torch.distributed.run / torch.distributed.launch (flags until the script; --module,
// --no_python honoured), also inside `sh -c` / `bash -c` when the script is a plain
// command line. Without a launcher returns command + args unchanged. InvalidArgument
// when a launcher sits in a shell script that is not a plain command line, or has no
// script after its flags.
Result<Launch> StripLauncher(const std::vector<std::string>& command,
                             const std::vector<std::string>& args);

}  // namespace bulwark::trainjob
