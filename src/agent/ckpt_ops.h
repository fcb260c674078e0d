// The agent's side of the checkpoint catalog (docs/protocol.md "Checkpoint
// catalog"): a controller that cannot see the checkpoint directories (Kubernetes)
// sends `ckpt_list`, `ckpt_commit` and `ckpt_download` requests to one agent, which
// runs them with ckpt/tier_ops.h and answers with `ckpt_result`.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ckpt/env.h"
#include "ckpt/object_tier.h"
#include "common/net.h"
#include "common/status.h"

namespace bulwark {

// Opens (or returns an already open) object tier for a URL; the pointer stays valid
// while the opener lives.
using ObjectTierOpener = std::function<Result<ckpt::ObjectTier*>(const std::string& url)>;

// True for the request types RunCatalogRequest serves.
bool IsCatalogRequest(const std::string& type);

// Runs one catalog request and returns its `ckpt_result` reply: {id, op, ok, and
// error/code, retain_error/retain_code, removed, committed {tier: [steps]} as they
// apply}. Blocking (the tier's I/O). A field of the wrong type or out of range gives a
// reply with ok false and an error naming the field. A request whose `id` is missing
// or not an integer cannot be answered: INVALID_ARGUMENT. Thread-safe if `objects` is.
Result<Json> RunCatalogRequest(const Json& req, ckpt::Env* env, const ObjectTierOpener& objects);

// Runs catalog requests one at a time, in arrival order, on its own thread, so the
// agent's loop never blocks on checkpoint I/O and one root's commits and retention
// never race.
//
// Thread-safety: Submit from any thread. `reply` is called on the worker thread.
// Destruction finishes the request in progress (bounded by its I/O) and drops the
// queued ones.
class CatalogWorker {
 public:
  // `env` (not owned; nullptr = ckpt::Env::Default()) must outlive the worker.
  explicit CatalogWorker(std::function<void(Json)> reply, ckpt::Env* env = nullptr);
  ~CatalogWorker();
  CatalogWorker(const CatalogWorker&) = delete;
  CatalogWorker& operator=(const CatalogWorker&) = delete;

  // Queues `req`. INVALID_ARGUMENT (nothing queued) when it has no integer `id`.
  Status Submit(Json req);

 private:
  void Loop();
  Result<ckpt::ObjectTier*> OpenObjectTier(const std::string& url);

  std::function<void(Json)> reply_;
  ckpt::Env* env_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Json> queue_;
  bool stop_ = false;
  // Object tiers by URL; used by the worker thread only.
  std::map<std::string, std::unique_ptr<ckpt::ObjectTier>> objects_;
  std::thread thread_;
};

}  // namespace bulwark
