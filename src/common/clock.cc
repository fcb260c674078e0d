#include "common/clock.h"

#include <time.h>

namespace bulwark {

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
