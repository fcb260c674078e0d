// RunToEnd: start a command, collect its output, wait for it with a deadline, and reap
// it whatever happens — the loop every caller of a short-lived child wrote for itself.
// Thread-compatible (one call per thread; each call owns its child).
#pragma once

#include <string>

#include "common/proc.h"
#include "common/status.h"

namespace bulwark {

struct RunOutcome {
  ExitInfo exit;           // how it ended; when timed_out, the kill's
  bool timed_out = false;  // the deadline came first: its process group was killed
  std::string output;      // stdout and stderr, interleaved
};

// Spawns `opts` (its output captured; opts.capture_output is forced on) and reads until
// the output ends or the command exits (a process it left behind may hold the pipe open)
// or `timeout_s` passes; past the deadline its process group is killed (SIGTERM, 1 s,
// SIGKILL). The child is always reaped. A non-zero exit is an outcome, not an error;
// errors are Spawn's (the program cannot be started).
Result<RunOutcome> RunToEnd(SpawnOptions opts, double timeout_s);

}  // namespace bulwark
