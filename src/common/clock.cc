#include "common/clock.h"

#include <time.h>

#include <cmath>

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

}  // namespace bulwark
