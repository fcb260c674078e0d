#include "common/timers.h"

#include <algorithm>

namespace bulwark {

double Timers::Remaining(const std::string& name) const {
  auto it = deadlines_.find(name);
  if (it == deadlines_.end()) return -1;
  return std::max(0.0, it->second - clock_->NowMono());
}

std::vector<std::string> Timers::TakeExpired() {
  const double now = clock_->NowMono();
  std::vector<std::pair<double, std::string>> due;
  for (auto it = deadlines_.begin(); it != deadlines_.end();) {
    if (it->second <= now) {
      due.emplace_back(it->second, it->first);
      it = deadlines_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(due.begin(), due.end());
  std::vector<std::string> names;
  names.reserve(due.size());
  for (auto& [at, name] : due) names.push_back(std::move(name));
  return names;
}

bool Timers::TakeIfExpired(const std::string& name) {
  auto it = deadlines_.find(name);
  if (it == deadlines_.end() || it->second > clock_->NowMono()) return false;
  deadlines_.erase(it);
  return true;
}

double Timers::Until(double cap_s) const {
  const double now = clock_->NowMono();
  double t = cap_s;
  for (const auto& [name, at] : deadlines_) t = std::min(t, at - now);
  return std::clamp(t, 0.0, std::max(0.0, cap_s));
}

}  // namespace bulwark
