// WorkQueue: the reconciler's queue of object keys, with de-duplication and per-key
// rate-limited retries (client-go's rate-limiting workqueue, made clock-injected and
// deterministic).
//
// Semantics:
//   * Add(key): the key becomes ready now. A key is held at most once: adding a key
//     that is already waiting keeps one entry (at the earlier ready time).
//   * A key handed out by Pop() is "processing" until Done(key). Adding it meanwhile
//     marks it dirty: it is not handed out again until Done, after which it is ready
//     at the time it was added for (so one key never runs twice concurrently).
//   * AddRateLimited(key): ready after base * 2^failures (capped), failures counted
//     per key until Forget(key). Jitter-free: tests compute the exact times.
//   * AddAfter(key, delay): ready at now + delay (a periodic resync).
// Pure with respect to time: Pop(now) takes the time; Wait() is the only blocking
// call and it is bounded.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace bulwark::k8s {

struct WorkQueueOptions {
  double base_delay_s = 0.05;
  double max_delay_s = 300;
};

class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions opts = {});

  void Add(const std::string& key, double now);
  void AddAfter(const std::string& key, double delay_s, double now);
  // Returns the delay it scheduled the key for.
  double AddRateLimited(const std::string& key, double now);
  void Forget(const std::string& key);  // reset the key's failure count
  int Failures(const std::string& key) const;

  // The ready key with the earliest ready time (ties: smallest key), now processing;
  // nullopt when none is ready at `now` or the queue is shut down.
  std::optional<std::string> Pop(double now);
  void Done(const std::string& key, double now);

  // Earliest ready time of a waiting key that is not processing (nullopt: none).
  std::optional<double> NextReady() const;
  // Blocks up to max_wait_s (real time) or until Add/Done/ShutDown changes the queue.
  // True if a change (or the shutdown) ended the wait, false if the time ran out.
  bool Wait(double max_wait_s);
  void ShutDown();
  bool shut_down() const;
  size_t Len() const;  // waiting keys (processing ones excluded)

 private:
  void Schedule(const std::string& key, double at);  // requires mu_

  WorkQueueOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, double> waiting_;           // key -> ready time
  std::set<std::pair<double, std::string>> order_;  // (ready time, key) of waiting_
  std::set<std::string> processing_;
  std::map<std::string, double> dirty_;  // added while processing -> ready time
  std::map<std::string, int> failures_;
  bool shut_down_ = false;
  uint64_t changes_ = 0;
};

}  // namespace bulwark::k8s
