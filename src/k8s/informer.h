// Informer: a local cache of one resource type kept current by list-then-watch.
//
// Protocol (docs/kubernetes.md, "Watching"):
//   1. LIST (all pages) -> replace the cache, remember the list's resourceVersion RV;
//      objects gone since the previous list are delivered as deletes, new ones as
//      adds, changed ones (different resourceVersion) as updates.
//   2. WATCH from RV with bookmarks. Every event advances RV to its object's
//      resourceVersion (a BOOKMARK only advances RV).
//   3. The server ends the watch (timeoutSeconds): watch again from RV. (A watch
//      that ends within 1 s of real time without any event is treated as a cut, as
//      client-go's reflector does, so a misbehaving server cannot make it spin.)
//      The stream is cut or idle (kUnavailable): watch again from RV after a backoff.
//      410 Gone / Expired (kOutOfRange): go to 1 (relist).
//      Any other error: back off, go to 1.
// Backoff: exponential from backoff_initial_s to backoff_max_s with jitter, reset
// after a watch that delivered at least one event or lasted > 10 s. Backoff waits
// are measured on the injected clock only (with a FakeClock the test decides when
// the informer reconnects) and are interrupted by Stop(), as are an open watch and
// a list in flight.
//
// Threading: one background thread per informer runs the protocol and calls the
// handlers, in event order, from that thread; handlers must not block for long and
// must not call Stop(). Get/List/Synced/Stats are thread-safe and may be called from
// any thread (including handlers). The cache holds the objects as last seen.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "k8s/client.h"

namespace bulwark::k8s {

struct InformerOptions {
  Resource resource;
  std::string ns;  // "" = all namespaces (or cluster-scoped)
  std::string label_selector;
  std::string field_selector;
  int watch_timeout_seconds = 300;  // per watch request; jittered up to +10 %
  double idle_timeout_s = 90;
  double backoff_initial_s = 0.5;
  double backoff_max_s = 30;
  uint64_t seed = 1;  // jitter
};

struct InformerHandlers {
  std::function<void(const Json& obj)> on_add;
  std::function<void(const Json& old_obj, const Json& new_obj)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

struct InformerStats {
  uint64_t lists = 0;    // full relists (the first included)
  uint64_t watches = 0;  // watch requests started
  uint64_t gone = 0;     // 410s that forced a relist
  uint64_t resumed = 0;  // watches re-started from the last RV after a cut or timeout
  uint64_t bookmarks = 0;
  uint64_t events = 0;  // ADDED/MODIFIED/DELETED applied
  uint64_t errors = 0;  // failed lists/watches (backed off)
};

class Informer {
 public:
  // `client` and `clock` (nullptr = SystemClock) are not owned and must outlive it.
  Informer(Client* client, InformerOptions opts, InformerHandlers handlers,
           const Clock* clock = nullptr);
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();  // starts the thread; idempotent
  void Stop();   // ends the thread within ~1 s (cancels the watch, joins)

  // True once the first LIST has been applied and its events delivered to the
  // handlers (and stays true), as client-go's HasSynced: a consumer that waits for it
  // has seen every object of the initial list, not a prefix of it.
  bool Synced() const;
  // Polls Synced() until true or the timeout; the wait is bounded.
  bool WaitForSync(double timeout_s) const;

  std::optional<Json> Get(const std::string& key) const;  // KeyOf(obj)
  std::vector<Json> List() const;                         // in key order
  size_t Size() const;
  std::string LastResourceVersion() const;
  InformerStats Stats() const;

 private:
  void Run();
  void ApplyList(ListResult list);
  bool ApplyEvent(const WatchEvent& e);  // false: stop watching (error event)

  Client* client_;
  InformerOptions opts_;
  InformerHandlers handlers_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::map<std::string, Json> cache_;
  std::string rv_;
  InformerStats stats_;
  std::atomic<bool> synced_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace bulwark::k8s
