#include "k8s/workqueue.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace bulwark::k8s {

WorkQueue::WorkQueue(WorkQueueOptions opts) : opts_(opts) {}

void WorkQueue::Schedule(const std::string& key, double at) {
  if (processing_.count(key) != 0) {
    auto it = dirty_.find(key);
    if (it == dirty_.end()) {
      dirty_[key] = at;
    } else {
      it->second = std::min(it->second, at);
    }
  } else {
    auto it = waiting_.find(key);
    if (it == waiting_.end()) {
      waiting_[key] = at;
      order_.emplace(at, key);
    } else if (at < it->second) {
      order_.erase({it->second, key});
      it->second = at;
      order_.emplace(at, key);
    }
  }
  ++changes_;
  cv_.notify_all();
}

void WorkQueue::Add(const std::string& key, double now) {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return;
  Schedule(key, now);
}

void WorkQueue::AddAfter(const std::string& key, double delay_s, double now) {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return;
  Schedule(key, now + std::max(0.0, delay_s));
}

double WorkQueue::AddRateLimited(const std::string& key, double now) {
  std::lock_guard<std::mutex> l(mu_);
  int& f = failures_[key];
  // 2^f overflows nothing: the exponent is capped where the delay reaches max_delay_s.
  double delay = std::min(opts_.max_delay_s, opts_.base_delay_s * std::pow(2.0, std::min(f, 1000)));
  ++f;
  if (!shut_down_) Schedule(key, now + delay);
  return delay;
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  failures_.erase(key);
}

int WorkQueue::Failures(const std::string& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Pop(double now) {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_ || order_.empty() || order_.begin()->first > now) return std::nullopt;
  std::string key = order_.begin()->second;
  order_.erase(order_.begin());
  waiting_.erase(key);
  processing_.insert(key);
  ++changes_;
  return key;
}

void WorkQueue::Done(const std::string& key, double /*now*/) {
  std::lock_guard<std::mutex> l(mu_);
  if (processing_.erase(key) == 0) return;
  auto it = dirty_.find(key);
  if (it != dirty_.end()) {
    double at = it->second;
    dirty_.erase(it);
    Schedule(key, at);
  } else {
    ++changes_;
    cv_.notify_all();
  }
}

std::optional<double> WorkQueue::NextReady() const {
  std::lock_guard<std::mutex> l(mu_);
  if (order_.empty()) return std::nullopt;
  return order_.begin()->first;
}

bool WorkQueue::Wait(double max_wait_s) {
  std::unique_lock<std::mutex> l(mu_);
  if (shut_down_) return true;
  if (!(max_wait_s > 0)) return false;
  const uint64_t seen = changes_;
  return cv_.wait_for(l, std::chrono::duration<double>(std::min(max_wait_s, 3600.0)),
                      [&] { return shut_down_ || changes_ != seen; });
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> l(mu_);
  shut_down_ = true;
  ++changes_;
  cv_.notify_all();
}

bool WorkQueue::shut_down() const {
  std::lock_guard<std::mutex> l(mu_);
  return shut_down_;
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> l(mu_);
  return waiting_.size();
}

}  // namespace bulwark::k8s
