// Clock: the injected source of time for every decision and deadline.
//
// Times are seconds as double. NowWall() is Unix epoch time (comparable across
// processes on one machine and, NTP permitting, across nodes); NowMono() is a
// monotonic clock for measuring durations inside one process. Implementations are
// thread-safe. Decision logic (policy, ledger, cadence) must take time only from here.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace bulwark {

// RFC 3339 UTC time to the second (fraction dropped): "2026-11-24T22:33:01Z", the
// form Kubernetes writes in metadata and conditions.
std::string FormatRfc3339(double unix_seconds);

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double NowWall() const = 0;
  virtual double NowMono() const = 0;
};

// Real time. Use SystemClock::Get(); it is a process-wide singleton.
class SystemClock : public Clock {
 public:
  static SystemClock* Get();
  double NowWall() const override;
  double NowMono() const override;
};

// Manually advanced clock for tests and the simulator. Wall = base + mono.
class FakeClock : public Clock {
 public:
  explicit FakeClock(double start = 1000.0, double wall_base = 1.7e9)
      : now_(start), wall_base_(wall_base) {}
  double NowWall() const override { return wall_base_ + Now(); }
  double NowMono() const override { return Now(); }
  void Advance(double seconds) {
    std::lock_guard<std::mutex> l(mu_);
    now_ += seconds;
  }
  void Set(double t) {
    std::lock_guard<std::mutex> l(mu_);
    now_ = t;
  }

 private:
  double Now() const {
    std::lock_guard<std::mutex> l(mu_);
    return now_;
  }
  mutable std::mutex mu_;
  double now_;
  double wall_base_;
};

}  // namespace bulwark
