// Clock: the injected source of time for every decision and deadline.
//
// Times are seconds as double. NowWall() is Unix epoch time (comparable across
// processes on one machine and, NTP permitting, across nodes); NowMono() is a
// monotonic clock for measuring durations inside one process. Implementations are
// thread-safe. Decision logic (policy, ledger, cadence) must take time only from here,
// and event loops wait only through SleepFor/WaitReadable, so a test drives a whole
// loop (the agent's, the controller's) on a FakeClock without a real wait.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace bulwark {

// RFC 3339 UTC time to the second (fraction dropped): "2026-11-24T22:33:01Z", the
// form Kubernetes writes in metadata and conditions.
std::string FormatRfc3339(double unix_seconds);

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double NowWall() const = 0;
  virtual double NowMono() const = 0;
  // Lets `seconds` of this clock's time pass (<= 0: returns at once). SystemClock
  // sleeps; FakeClock advances itself.
  virtual void SleepFor(double seconds) const = 0;
  // Waits until one of `fds` is readable or `timeout_s` of this clock's time has
  // passed, and returns the readable fds. SystemClock: poll(2). FakeClock: a poll that
  // does not block; when nothing is readable it advances itself by timeout_s.
  virtual std::vector<int> WaitReadable(const std::vector<int>& fds, double timeout_s) const = 0;
};

// Real time. Use SystemClock::Get(); it is a process-wide singleton.
class SystemClock : public Clock {
 public:
  static SystemClock* Get();
  double NowWall() const override;
  double NowMono() const override;
  void SleepFor(double seconds) const override;
  std::vector<int> WaitReadable(const std::vector<int>& fds, double timeout_s) const override;
};

// Manually advanced clock for tests and the simulator. Wall = base + mono.
class FakeClock : public Clock {
 public:
  explicit FakeClock(double start = 1000.0, double wall_base = 1.7e9)
      : now_(start), wall_base_(wall_base) {}
  double NowWall() const override { return wall_base_ + Now(); }
  double NowMono() const override { return Now(); }
  void SleepFor(double seconds) const override {
    if (seconds > 0) AdvanceBy(seconds);
  }
  std::vector<int> WaitReadable(const std::vector<int>& fds, double timeout_s) const override;
  void Advance(double seconds) { AdvanceBy(seconds); }
  void Set(double t) {
    std::lock_guard<std::mutex> l(mu_);
    now_ = t;
  }

 private:
  double Now() const {
    std::lock_guard<std::mutex> l(mu_);
    return now_;
  }
  void AdvanceBy(double seconds) const {
    std::lock_guard<std::mutex> l(mu_);
    now_ += seconds;
  }
  mutable std::mutex mu_;
  mutable double now_;  // guarded by mu_; advanced by the const waits
  double wall_base_;
};

}  // namespace bulwark
