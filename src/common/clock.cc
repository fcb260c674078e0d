#include "common/clock.h"

#include <time.h>

#include <cmath>

#include "common/net.h"

namespace bulwark {

std::string FormatRfc3339(double unix_seconds) {
  const time_t t = static_cast<time_t>(std::floor(unix_seconds));
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

SystemClock* SystemClock::Get() {
  static SystemClock* c = new SystemClock();
  return c;
}

static double ReadClock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double SystemClock::NowWall() const { return ReadClock(CLOCK_REALTIME); }
double SystemClock::NowMono() const { return ReadClock(CLOCK_MONOTONIC); }

void SystemClock::SleepFor(double seconds) const {
  if (!(seconds > 0)) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

std::vector<int> SystemClock::WaitReadable(const std::vector<int>& fds, double timeout_s) const {
  return PollReadable(fds, timeout_s);
}

std::vector<int> FakeClock::WaitReadable(const std::vector<int>& fds, double timeout_s) const {
  std::vector<int> ready = PollReadable(fds, 0);
  if (ready.empty()) SleepFor(timeout_s);
  return ready;
}

}  // namespace bulwark
