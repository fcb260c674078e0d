// ImageResolver: reads the configs of TrainJobs' images (their ENTRYPOINT + CMD, for
// jobs without a command) off the operator's reconcile thread. A registry request may
// take up to its connect and request timeouts (10 + 30 s); made on the reconcile thread,
// one slow registry would stall every job of the cluster for that long.
//
// Lookup answers at once: from the registry client's cache (a digest, or a tag seen
// within its TTL), or with the finished result of an earlier request for the same image
// and credentials (an error is handed out once: the next Lookup asks again), or "in
// flight": then one worker thread resolves it and calls `done(job key)` for every job
// that asked meanwhile, so the operator reconciles them again. Requests for one image
// and credentials are merged.
//
// Thread-safe. The destructor stops the worker after the request in flight, which the
// registry client's timeouts bound.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "registry/registry.h"

namespace bulwark::op {

class ImageResolver {
 public:
  // `client` is not owned and must outlive this; `done` is called on the worker thread.
  ImageResolver(registry::Client* client, std::function<void(const std::string& job)> done);
  ~ImageResolver();
  ImageResolver(const ImageResolver&) = delete;
  ImageResolver& operator=(const ImageResolver&) = delete;

  // The config of `image` with `secrets` for job `job` (a "namespace/name" key), or
  // std::nullopt while a request for it is in flight.
  std::optional<Result<registry::ImageConfig>> Lookup(
      const std::string& job, const std::string& image,
      const std::vector<registry::PullSecret>& secrets);

  // Requests sent to registries so far (for tests and metrics).
  int requests_started() const;

 private:
  struct Request {
    std::string image;
    std::vector<registry::PullSecret> secrets;
    std::set<std::string> jobs;  // to tell when it finishes
  };
  void Loop();

  registry::Client* client_;
  std::function<void(const std::string&)> done_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Request> waiting_;  // by request key, not yet started
  std::deque<std::string> order_;           // waiting_'s keys, first come first served
  std::map<std::string, Request> running_;  // the one in flight
  std::map<std::string, Result<registry::ImageConfig>> finished_;  // not yet handed out
  int started_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace bulwark::op
