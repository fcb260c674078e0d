// RunToEnd (run.h).
#include "common/run.h"

#include <algorithm>
#include <optional>

#include "common/clock.h"
#include "common/net.h"

namespace bulwark {

Result<RunOutcome> RunToEnd(SpawnOptions opts, double timeout_s) {
  opts.capture_output = true;
  BW_ASSIGN_OR_RETURN(Child c, Spawn(opts));
  const Clock* clock = SystemClock::Get();
  const double deadline = clock->NowMono() + timeout_s;
  RunOutcome r;
  bool eof = false;
  std::optional<ExitInfo> exit;
  while (!eof && !exit && clock->NowMono() < deadline) {
    PollReadable({c.output.get()}, std::clamp(deadline - clock->NowMono(), 0.0, 0.1));
    r.output += ReadAvailable(c.output.get(), &eof);
    if (!eof) {
      exit = Reap(c.pid);
      if (exit) r.output += ReadAvailable(c.output.get(), &eof);
    }
  }
  if (!exit) exit = WaitExit(c.pid, std::max(0.0, deadline - clock->NowMono()));
  if (!exit) {
    r.timed_out = true;
    r.exit = TerminateGroup(c.pid, c.pgid, 1);
    return r;
  }
  r.exit = *exit;
  return r;
}

}  // namespace bulwark
