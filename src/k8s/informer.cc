// Informer: list-then-watch (informer.h has the protocol).
//
// Exactly-once delivery across a cut stream rests on two facts: Client::Watch never
// delivers a partial line, and a watch resumed from RV returns only events after RV.
// As a guard against a server that replays, an event whose numeric resourceVersion
// is not newer than the last one applied is dropped.
#include "k8s/informer.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "k8s/internal.h"

namespace bulwark::k8s {

namespace {

// Numeric value of a resourceVersion, or nullopt when it is not a plain integer.
std::optional<uint64_t> RvNumber(const std::string& rv) {
  if (rv.empty() || rv.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : rv) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace

Informer::Informer(Client* client, InformerOptions opts, InformerHandlers handlers,
                   const Clock* clock)
    : client_(client),
      opts_(std::move(opts)),
      handlers_(std::move(handlers)),
      clock_(clock != nullptr ? clock : SystemClock::Get()) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable() || stop_.load()) return;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  stop_.store(true);
  std::thread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

bool Informer::Synced() const { return synced_.load(); }

bool Informer::WaitForSync(double timeout_s) const {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
  while (!Synced()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::optional<Json> Informer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::List() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Json> out;
  out.reserve(cache_.size());
  for (const auto& [k, v] : cache_) out.push_back(v);
  return out;
}

size_t Informer::Size() const {
  std::lock_guard<std::mutex> l(mu_);
  return cache_.size();
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard<std::mutex> l(mu_);
  return rv_;
}

InformerStats Informer::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void Informer::ApplyList(ListResult list) {
  std::map<std::string, Json> next;
  for (Json& obj : list.items) {
    std::string key = KeyOf(obj);
    next[key] = std::move(obj);
  }
  std::vector<Json> added, deleted;
  std::vector<std::pair<Json, Json>> updated;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, obj] : next) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        added.push_back(obj);
      } else if (ResourceVersion(it->second) != ResourceVersion(obj)) {
        updated.emplace_back(it->second, obj);
      }
    }
    for (const auto& [key, obj] : cache_) {
      if (next.count(key) == 0) deleted.push_back(obj);
    }
    cache_ = std::move(next);
    rv_ = list.resource_version;
    ++stats_.lists;
  }
  for (const Json& o : deleted) {
    if (handlers_.on_delete) handlers_.on_delete(o);
  }
  for (const Json& o : added) {
    if (handlers_.on_add) handlers_.on_add(o);
  }
  for (const auto& [o, n] : updated) {
    if (handlers_.on_update) handlers_.on_update(o, n);
  }
  synced_.store(true);  // after delivery: see Synced()
}

bool Informer::ApplyEvent(const WatchEvent& e) {
  if (e.type == EventType::kError) return false;
  const std::string rv = ResourceVersion(e.object);
  std::optional<Json> old;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto have = RvNumber(rv_), got = RvNumber(rv);
    if (have && got && *got <= *have) return true;  // replayed: already applied
    if (!rv.empty()) rv_ = rv;
    if (e.type == EventType::kBookmark) {
      ++stats_.bookmarks;
      return true;
    }
    const std::string key = KeyOf(e.object);
    auto it = cache_.find(key);
    if (it != cache_.end()) old = std::move(it->second);
    if (e.type == EventType::kDeleted) {
      if (it == cache_.end()) return true;  // never seen: nothing to tell
      cache_.erase(it);
    } else {
      cache_[key] = e.object;
    }
    ++stats_.events;
  }
  if (e.type == EventType::kDeleted) {
    if (handlers_.on_delete) handlers_.on_delete(e.object);
  } else if (old) {
    if (handlers_.on_update) handlers_.on_update(*old, e.object);
  } else if (handlers_.on_add) {
    handlers_.on_add(e.object);
  }
  return true;
}

void Informer::Run() {
  std::mt19937_64 rng(opts_.seed);
  const double initial = std::max(0.001, opts_.backoff_initial_s);
  const double max_backoff = std::max(initial, opts_.backoff_max_s);
  double backoff = initial;
  auto back_off = [&] {
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    internal::WaitOn(clock_, backoff * jitter(rng), &stop_, /*sleep_on_clock=*/false);
    backoff = std::min(max_backoff, backoff * 2);
  };
  auto count = [this](uint64_t InformerStats::*field) {
    std::lock_guard<std::mutex> l(mu_);
    ++(stats_.*field);
  };

  bool need_list = true;
  bool resuming = false;
  while (!stop_.load()) {
    if (need_list) {
      ListOptions lo;
      lo.label_selector = opts_.label_selector;
      lo.field_selector = opts_.field_selector;
      lo.cancel = &stop_;
      auto list = client_->List(opts_.resource, opts_.ns, lo);
      if (stop_.load()) break;
      if (!list.ok()) {
        count(&InformerStats::errors);
        back_off();
        continue;
      }
      ApplyList(std::move(list).value());
      need_list = false;
      resuming = false;
    }

    WatchOptions wo;
    wo.resource_version = LastResourceVersion();
    wo.label_selector = opts_.label_selector;
    wo.field_selector = opts_.field_selector;
    wo.allow_bookmarks = true;
    const int base_timeout = std::max(1, opts_.watch_timeout_seconds);
    wo.timeout_seconds = base_timeout + static_cast<int>(std::uniform_int_distribution<int>(
                                            0, base_timeout / 10)(rng));
    wo.idle_timeout_s = opts_.idle_timeout_s;
    count(&InformerStats::watches);
    if (resuming) count(&InformerStats::resumed);
    uint64_t delivered = 0;
    const double started = clock_->NowMono();
    const auto real_start = std::chrono::steady_clock::now();
    Status st = client_->Watch(
        opts_.resource, opts_.ns, wo,
        [&](const WatchEvent& e) {
          ++delivered;
          return ApplyEvent(e) && !stop_.load();
        },
        &stop_);
    if (stop_.load()) break;
    if (delivered > 0 || clock_->NowMono() - started > 10) backoff = initial;
    resuming = true;
    if (st.ok() && delivered == 0 &&
        std::chrono::steady_clock::now() - real_start < std::chrono::seconds(1)) {
      // client-go's "very short watch": a server that keeps closing at once must
      // not make this loop spin.
      st = Unavailable("watch ended within 1 s without any event");
    }
    if (st.ok()) continue;  // the server ended the watch: resume at once
    if (IsGone(st)) {
      count(&InformerStats::gone);
      need_list = true;
      continue;
    }
    count(&InformerStats::errors);
    if (st.code() != Code::kUnavailable) need_list = true;
    back_off();
  }
}

}  // namespace bulwark::k8s
