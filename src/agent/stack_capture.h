// Best-effort stack capture of hung ranks, for hang incidents.
//
// For each rank: the /proc state and wchan; a Python stack via SIGUSR1 (the rank's
// faulthandler writes all threads' tracebacks to its BULWARK_STACK_FILE) — sent only
// if the process catches SIGUSR1 (SigCgt), since SIGUSR1's default action kills; a
// stopped process (state T) gets SIGCONT so the handler runs and SIGSTOP afterwards so
// it is left as found; and, for a rank that produced no Python dump, native stacks via
// `gdb -batch` when gdb is installed and budget remains. Blocks the caller at most
// `budget_s` (+ one gdb kill). Waits through the clock, signals and spawns through
// opts.procs. Not thread-safe with respect to the ranks' signals.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/proc.h"

namespace bulwark {

struct StackTarget {
  int rank = -1;
  pid_t pid = -1;
  std::string stack_file;  // BULWARK_STACK_FILE of this rank
};

struct StackCaptureOptions {
  double budget_s = 1.8;                  // total wall time the capture may take
  double python_wait_s = 1.0;             // of which: waiting for faulthandler dumps
  double gdb_timeout_s = 5;               // per gdb run, further bounded by the remaining budget
  std::string gdb_path = "/usr/bin/gdb";  // "" disables gdb
  Processes* procs = nullptr;             // signals, states, gdb; null = Processes::Real()
};

struct RankStack {
  std::string text;          // what goes into the incident's `stacks`
  char state = '?';          // /proc state before capture ('T' = stopped)
  bool python_dump = false;  // faulthandler produced output
};

// Captures stacks of `targets`; `tick` (may be empty) is called about every 20 ms
// while waiting so the caller can keep heartbeats flowing. Time from `clock`.
std::map<int, RankStack> CaptureStacks(const std::vector<StackTarget>& targets,
                                       const StackCaptureOptions& opts, const Clock* clock,
                                       const std::function<void()>& tick);

// True if `pid` has a handler installed for `sig` (from /proc/<pid>/status SigCgt).
bool CatchesSignal(pid_t pid, int sig);
// /proc/<pid>/wchan ("" if unavailable or "0").
std::string ReadWchan(pid_t pid);

}  // namespace bulwark
