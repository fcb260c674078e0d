// ImageResolver (image_resolver.h).
#include "operator/image_resolver.h"

#include <utility>

namespace bulwark::op {
namespace {

// Requests are the same when the image and every credential are.
std::string RequestKey(const std::string& image, const std::vector<registry::PullSecret>& secrets) {
  std::string key = image;
  for (const registry::PullSecret& s : secrets) {
    key += '\n' + s.name + '\n' + std::to_string(std::hash<std::string>()(s.dockerconfigjson));
  }
  return key;
}

}  // namespace

ImageResolver::ImageResolver(registry::Client* client,
                             std::function<void(const std::string& job)> done)
    : client_(client), done_(std::move(done)), worker_([this] { Loop(); }) {}

ImageResolver::~ImageResolver() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::optional<Result<registry::ImageConfig>> ImageResolver::Lookup(
    const std::string& job, const std::string& image,
    const std::vector<registry::PullSecret>& secrets) {
  auto cached = client_->Cached(image, secrets);
  if (!cached.ok()) return Result<registry::ImageConfig>(cached.status());
  const std::string key = RequestKey(image, secrets);
  std::lock_guard<std::mutex> l(mu_);
  if (cached->has_value()) {
    finished_.erase(key);  // a read's result the cache now serves
    return Result<registry::ImageConfig>(**cached);
  }
  if (auto f = finished_.find(key); f != finished_.end()) {
    Result<registry::ImageConfig> r = std::move(f->second);
    finished_.erase(f);
    return r;
  }
  if (auto r = running_.find(key); r != running_.end()) {
    r->second.jobs.insert(job);
    return std::nullopt;
  }
  auto [w, fresh] = waiting_.try_emplace(key, Request{image, secrets, {}});
  w->second.jobs.insert(job);
  if (fresh) {
    order_.push_back(key);
    cv_.notify_all();
  }
  return std::nullopt;
}

int ImageResolver::requests_started() const {
  std::lock_guard<std::mutex> l(mu_);
  return started_;
}

void ImageResolver::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return stop_ || !order_.empty(); });
    if (stop_) return;
    const std::string key = order_.front();
    order_.pop_front();
    auto node = waiting_.extract(key);
    Request& req = running_.emplace(key, std::move(node.mapped())).first->second;
    ++started_;
    const std::string image = req.image;
    const std::vector<registry::PullSecret> secrets = req.secrets;
    l.unlock();
    Result<registry::ImageConfig> result = client_->Resolve(image, secrets);
    l.lock();
    std::set<std::string> jobs = std::move(running_.at(key).jobs);
    running_.erase(key);
    finished_.insert_or_assign(key, std::move(result));
    l.unlock();
    for (const std::string& job : jobs) done_(job);
    l.lock();
  }
}

}  // namespace bulwark::op
