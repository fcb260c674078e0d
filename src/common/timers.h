// Timers: named one-shot deadlines on an injected Clock's monotonic time, for event
// loops (the agent's, the controller's). A loop arms timers, sleeps at most Until()
// (Clock::WaitReadable), then handles TakeExpired(). With a FakeClock the whole loop
// runs without a real wait.
//
// An expired timer stays armed (and Until() stays 0) until it is taken: a loop must
// take or disarm every timer it arms. Not thread-safe: one loop owns a Timers. The
// clock is not owned.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/clock.h"

namespace bulwark {

class Timers {
 public:
  explicit Timers(const Clock* clock) : clock_(clock) {}

  // (Re)arms `name` to expire `in_s` seconds from now (<= 0: at the next check).
  void Arm(const std::string& name, double in_s) { deadlines_[name] = clock_->NowMono() + in_s; }
  // Arms `name` only if it is not armed already (an earlier deadline stays).
  void ArmIfIdle(const std::string& name, double in_s) {
    if (!Armed(name)) Arm(name, in_s);
  }
  void Disarm(const std::string& name) { deadlines_.erase(name); }
  bool Armed(const std::string& name) const { return deadlines_.count(name) > 0; }
  // Seconds until `name` expires (0 if past); -1 if it is not armed.
  double Remaining(const std::string& name) const;

  // The names of every expired timer, earliest deadline first; they are disarmed.
  std::vector<std::string> TakeExpired();
  // Whether `name` has expired; if so it is disarmed.
  bool TakeIfExpired(const std::string& name);
  // Seconds until the earliest deadline, clamped to [0, cap_s] (cap_s when none).
  double Until(double cap_s) const;

 private:
  const Clock* clock_;
  std::map<std::string, double> deadlines_;  // name -> mono deadline
};

}  // namespace bulwark
