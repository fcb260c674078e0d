// Store: registry, reads, consistent paginated lists, commits, watch registration and
// fan-out, compaction, and the OnChange notifier. Writes are in fake_apiserver_write.cc.
#include "k8s/testing/fake_apiserver_store.h"

#include <algorithm>
#include <chrono>

namespace bulwark::k8s::testing::internal {

namespace {

// A watch stream whose consumer lags by more than this many events is closed, as
// kube-apiserver closes unresponsive watchers; the client re-watches from its last rv.
constexpr size_t kMaxWatchQueue = 200000;

// [from, to) key range of one namespace ("" = every key).
std::pair<std::string, std::string> NsRange(const std::string& ns) {
  if (ns.empty()) return {"", ""};
  return {ns + "/", ns + "0"};  // '0' follows '/'
}

bool InRange(const std::string& key, const std::string& from, const std::string& to) {
  return key >= from && (to.empty() || key < to);
}

bool Matches(const Watcher& w, const ObjPtr& o) {
  return o != nullptr && w.labels.Matches(o->obj) && w.fields.Matches(o->obj);
}

// Queues the event `c` means for `w` (none, or ADDED/MODIFIED/DELETED as the change
// enters, stays in or leaves the watcher's selection). Requires Store::mu_.
void Offer(Watcher* w, const Change& c) {
  bool now = c.type != ChangeType::kDeleted && Matches(*w, c.obj);
  bool before = c.prev != nullptr && Matches(*w, c.prev);
  const char* type = nullptr;
  if (c.type == ChangeType::kDeleted) {
    type = before ? "DELETED" : nullptr;
  } else if (now) {
    type = before ? "MODIFIED" : "ADDED";
  } else if (before) {
    type = "DELETED";  // no longer selected: the watcher sees it leave
  }
  if (type == nullptr) return;
  std::lock_guard<std::mutex> l(w->mu);
  if (w->queue.size() >= kMaxWatchQueue) {
    w->overflow = true;
  } else {
    w->queue.push_back({type, c.obj});
  }
  w->cv.notify_all();
}

const Json& Meta(const ObjPtr& o) { return MetaOf(o->obj); }

ApiOr<uint64_t> ParseRv(const std::string& s, const char* what) {
  uint64_t v = 0;
  if (s.empty()) return ErrBadRequest(std::string(what) + ": empty resourceVersion");
  for (char c : s) {
    if (c < '0' || c > '9' || v > (UINT64_MAX - 9) / 10) {
      return ErrBadRequest(std::string(what) + ": invalid resource version " + Quote(s) +
                           ": resourceVersion must be a decimal number returned by this server");
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace

const Json& MetaOf(const Json& obj) {
  static const Json kEmpty = Json::object();
  auto it = obj.find("metadata");
  return it != obj.end() && it->is_object() ? *it : kEmpty;
}

const char* ChangeName(ChangeType t) {
  switch (t) {
    case ChangeType::kAdded:
      return "ADDED";
    case ChangeType::kModified:
      return "MODIFIED";
    case ChangeType::kDeleted:
      return "DELETED";
  }
  return "MODIFIED";
}

Store::Store(const Clock* clock, size_t history)
    : clock_(clock), history_(std::max<size_t>(history, 1)) {
  std::lock_guard<std::mutex> l(mu_);
  for (ResourceInfo& r : BuiltinResources()) RegisterLocked(std::move(r));
  namespaces_ = by_gr_.at("namespaces");
  crds_ = by_gr_.at("customresourcedefinitions.apiextensions.k8s.io");
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    WriteOptions o;
    (void)CreateLocked(*namespaces_, "v1", "", Json{{"metadata", {{"name", ns}}}}, &o);
  }
  notifier_ = std::thread([this] {
    std::unique_lock<std::mutex> l(note_mu_);
    while (true) {
      note_cv_.wait(l, [&] { return note_stop_ || !notes_.empty(); });
      if (note_stop_) break;
      auto note = std::move(notes_.front());
      notes_.pop_front();
      auto fn = on_change_;
      note_busy_ = true;
      l.unlock();
      if (fn) fn(note.first, note.second);
      l.lock();
      note_busy_ = false;
      note_cv_.notify_all();
    }
  });
}

Store::~Store() { Shutdown(); }

void Store::Shutdown() {
  EndWatches();
  has_on_change_ = false;  // nothing would deliver further changes
  {
    std::lock_guard<std::mutex> l(note_mu_);
    note_stop_ = true;
  }
  note_cv_.notify_all();
  if (notifier_.joinable()) notifier_.join();
}

std::string Store::Render(const ResourceInfo& r, const std::string& version, const StoredObj& o) {
  std::string head = "{\"apiVersion\":" + Dump(r.ApiVersion(version)) + ",\"kind\":" + Dump(r.kind);
  if (o.text.size() <= 2) return head + "}";
  return head + "," + o.text.substr(1);
}

Json Store::RenderJson(const ResourceInfo& r, const std::string& version, const StoredObj& o) {
  Json j = o.obj;
  j["apiVersion"] = r.ApiVersion(version);
  j["kind"] = r.kind;
  return j;
}

Resolved Store::Find(const std::string& group, const std::string& version,
                     const std::string& plural) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_gr_.find(group.empty() ? plural : plural + "." + group);
  if (it == by_gr_.end() || !it->second->info->Serves(version)) return {};
  return {it->second, it->second->info};
}

Resolved Store::FindKind(const std::string& api_version, const std::string& kind) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [gr, rs] : by_gr_) {
    if (rs->info->kind != kind) continue;
    for (const std::string& v : rs->info->versions) {
      if (rs->info->ApiVersion(v) == api_version) return {rs, rs->info};
    }
  }
  return {};
}

std::vector<ResourceInfo> Store::Served() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ResourceInfo> out;
  for (const auto& [gr, rs] : by_gr_) out.push_back(*rs->info);
  return out;
}

uint64_t Store::CurrentRv() const {
  std::lock_guard<std::mutex> l(mu_);
  return rv_;
}

ApiOr<ObjPtr> Store::Get(const ResourceStore& rs, const std::string& ns,
                         const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = rs.objects.find(ns.empty() ? name : ns + "/" + name);
  if (rs.removed || it == rs.objects.end()) return ErrNotFound(*rs.info, name);
  return it->second;
}

std::vector<ObjPtr> Store::ListAll(const ResourceStore& rs, const std::string& ns) const {
  std::lock_guard<std::mutex> l(mu_);
  auto [from, to] = NsRange(ns);
  std::vector<ObjPtr> out;
  for (auto it = rs.objects.lower_bound(from);
       it != rs.objects.end() && InRange(it->first, from, to); ++it) {
    out.push_back(it->second);
  }
  return out;
}

std::map<std::string, ObjPtr> Store::SnapshotLocked(const ResourceStore& rs, uint64_t at,
                                                    const std::string& from,
                                                    const std::string& to) const {
  // The state at `at` of every key changed since: the `prev` of its first later change.
  std::map<std::string, ObjPtr> overlay;
  auto first = std::upper_bound(rs.history.begin(), rs.history.end(), at,
                                [](uint64_t v, const Change& c) { return v < c.rv; });
  for (auto it = first; it != rs.history.end(); ++it) {
    if (!InRange(it->obj->key, from, to)) continue;
    overlay.emplace(it->obj->key, it->type == ChangeType::kAdded ? nullptr : it->prev);
  }
  return overlay;
}

ApiOr<std::string> Store::List(const ResourceStore& rs, const std::string& version,
                               const ListQuery& q) const {
  std::vector<ObjPtr> items;
  std::string cont;
  uint64_t at;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (rs.removed) return ErrNotFoundPath();
    auto [from, to] = NsRange(q.ns);
    at = rv_;
    const std::string& match = q.resource_version_match;
    if (!match.empty() && match != "NotOlderThan" && match != "Exact") {
      return ErrBadRequest("resourceVersionMatch: Unsupported value: " + Quote(match) +
                           ": supported values: \"Exact\", \"NotOlderThan\"");
    }
    if (!match.empty() && q.resource_version.empty()) {
      return ErrBadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided");
    }
    if (!q.continue_token.empty()) {
      if (!q.resource_version.empty() && q.resource_version != "0") {
        return ErrBadRequest("specifying resource version is not allowed when using continue");
      }
      std::optional<std::string> raw = Base64Decode(q.continue_token);
      Json tok = raw ? Json::parse(*raw, nullptr, false) : Json();
      if (!tok.is_object() || !tok.contains("rv") || !tok["rv"].is_number_unsigned() ||
          !tok.contains("start") || !tok["start"].is_string()) {
        return ErrBadRequest(
            "continue key is not valid: pass the metadata.continue of the "
            "previous page unchanged");
      }
      at = tok["rv"].get<uint64_t>();
      if (at < rs.compacted_rv || at > rv_) {
        return ErrExpired(
            "The provided continue parameter is too old to display a consistent "
            "list result. You can start a new list without the continue "
            "parameter.");
      }
      from = std::max(from, tok["start"].get<std::string>());
    } else if (!q.resource_version.empty() && q.resource_version != "0") {
      ApiOr<uint64_t> want = ParseRv(q.resource_version, "resourceVersion");
      if (!want.ok()) return want.error();
      if (*want > rv_) {
        ApiError e{504, "Timeout",
                   "Too large resource version: " + q.resource_version +
                       ", current: " + std::to_string(rv_)};
        e.details = {
            {"causes",
             {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
            {"retryAfterSeconds", 1}};
        return e;
      }
      if (match == "Exact" || (match.empty() && q.limit > 0)) {
        if (*want < rs.compacted_rv) {
          return ErrExpired("The resourceVersion for the provided list is too old.");
        }
        at = *want;
      }
    } else if (match == "Exact") {
      return ErrBadRequest("resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"");
    }
    std::map<std::string, ObjPtr> overlay;
    if (at < rv_) overlay = SnapshotLocked(rs, at, from, to);
    auto a = rs.objects.lower_bound(from);
    auto b = overlay.begin();
    auto a_in = [&] { return a != rs.objects.end() && InRange(a->first, from, to); };
    std::string last;
    bool more = false;
    while (a_in() || b != overlay.end()) {
      ObjPtr o;
      if (!a_in() || (b != overlay.end() && b->first <= a->first)) {
        if (a_in() && a->first == b->first) ++a;
        last = b->first;
        o = b->second;
        ++b;
      } else {
        last = a->first;
        o = a->second;
        ++a;
      }
      if (o == nullptr || !q.labels.Matches(o->obj) || !q.fields.Matches(o->obj)) continue;
      if (q.limit > 0 && static_cast<int64_t>(items.size()) == q.limit) {
        more = true;
        break;
      }
      items.push_back(o);
    }
    if (more) {
      std::string start = items.back()->key + std::string(1, '\0');
      cont = Base64Encode(Dump({{"v", "meta.k8s.io/v1"}, {"rv", at}, {"start", start}}));
    }
  }
  std::string out = "{\"kind\":" + Dump(rs.info->list_kind) +
                    ",\"apiVersion\":" + Dump(rs.info->ApiVersion(version)) +
                    ",\"metadata\":{\"resourceVersion\":\"" + std::to_string(at) + "\"";
  if (!cont.empty()) out += ",\"continue\":\"" + cont + "\"";
  out += "},\"items\":[";
  size_t total = out.size();
  for (const ObjPtr& o : items) total += o->text.size() + 64;
  out.reserve(total);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    // Built-in kinds' items carry no apiVersion/kind (as kube-apiserver sends them);
    // custom objects' items do.
    out += rs.info->custom ? Render(*rs.info, version, *items[i]) : items[i]->text;
  }
  out += "]}";
  return out;
}

ObjPtr Store::Publish(Json obj, const std::string& key, const std::string& ns, uint64_t rv) {
  auto o = std::make_shared<StoredObj>();
  o->text = Dump(obj);
  o->obj = std::move(obj);
  o->key = key;
  o->ns = ns;
  o->rv = rv;
  return o;
}

void Store::IndexLocked(ResourceStore& rs, const ObjPtr& prev, const ObjPtr& obj) {
  auto owners = [](const ObjPtr& o) {
    std::vector<std::string> uids;
    if (o == nullptr) return uids;
    auto refs = Meta(o).find("ownerReferences");
    if (refs != Meta(o).end() && refs->is_array()) {
      for (const Json& r : *refs) {
        if (r.is_object() && r.contains("uid") && r["uid"].is_string()) {
          uids.push_back(r["uid"].get<std::string>());
        }
      }
    }
    return uids;
  };
  const std::string& key = obj ? obj->key : prev->key;
  for (const std::string& u : owners(prev)) {
    auto it = dependents_.find(u);
    if (it == dependents_.end()) continue;
    it->second.erase({&rs, key});
    if (it->second.empty()) dependents_.erase(it);
  }
  for (const std::string& u : owners(obj)) dependents_[u].insert({&rs, key});
  if (prev == nullptr) {
    ++ns_count_[obj->ns];
  } else if (obj == nullptr) {
    if (--ns_count_[prev->ns] == 0) ns_count_.erase(prev->ns);
    by_uid_.erase(Meta(prev).value("uid", ""));
  }
  if (obj != nullptr) by_uid_[Meta(obj).value("uid", "")] = {&rs, key};
}

void Store::CommitLocked(ResourceStore& rs, ChangeType type, ObjPtr obj, ObjPtr prev) {
  if (type == ChangeType::kDeleted) {
    rs.objects.erase(obj->key);
  } else {
    rs.objects[obj->key] = obj;
  }
  IndexLocked(rs, prev, type == ChangeType::kDeleted ? nullptr : obj);
  Change c{obj->rv, type, obj, prev};
  rs.history.push_back(c);
  while (rs.history.size() > history_) {
    rs.compacted_rv = rs.history.front().rv;
    rs.history.pop_front();
  }
  FanOutLocked(rs, c);
  if (has_on_change_.load()) {
    Json rendered = RenderJson(*rs.info, rs.info->versions.front(), *obj);
    std::lock_guard<std::mutex> l(note_mu_);
    notes_.emplace_back(ChangeName(type), std::move(rendered));
    note_cv_.notify_all();
  }
  if (&rs == crds_.get() && type != ChangeType::kDeleted) OnCrdCommittedLocked(obj);
}

void Store::FanOutLocked(ResourceStore& rs, const Change& c) {
  auto deliver = [&](const std::string& ns) {
    auto it = rs.watchers.find(ns);
    if (it == rs.watchers.end()) return;
    for (Watcher* w : it->second) Offer(w, c);
  };
  if (rs.info->namespaced && !c.obj->ns.empty()) deliver(c.obj->ns);
  deliver("");
}

ApiOr<std::shared_ptr<Watcher>> Store::Watch(const std::shared_ptr<ResourceStore>& rs,
                                             const std::string& version, const WatchQuery& q) {
  std::lock_guard<std::mutex> l(mu_);
  if (rs->removed) return ErrNotFoundPath();
  auto w = std::make_shared<Watcher>();
  w->rs = rs;
  w->info = rs->info;
  w->version = version;
  w->ns = rs->info->namespaced ? q.ns : "";
  w->labels = q.labels;
  w->fields = q.fields;
  w->bookmarks = q.bookmarks;
  auto [from, to] = NsRange(w->ns);
  bool initial = q.send_initial_events || q.resource_version.empty() || q.resource_version == "0";
  if (initial) {
    for (auto it = rs->objects.lower_bound(from);
         it != rs->objects.end() && InRange(it->first, from, to); ++it) {
      if (Matches(*w, it->second)) w->queue.push_back({"ADDED", it->second});
    }
    w->initial_events = w->queue.size();
    w->initial_rv = rv_;
  } else {
    ApiOr<uint64_t> start = ParseRv(q.resource_version, "resourceVersion");
    if (!start.ok()) return start.error();
    if (*start < rs->compacted_rv) {
      return ErrExpired("too old resource version: " + q.resource_version + " (" +
                        std::to_string(rs->compacted_rv) + ")");
    }
    auto first = std::upper_bound(rs->history.begin(), rs->history.end(), *start,
                                  [](uint64_t v, const Change& c) { return v < c.rv; });
    for (auto it = first; it != rs->history.end(); ++it) {
      if (InRange(it->obj->key, from, to)) Offer(w.get(), *it);
    }
  }
  rs->watchers[w->ns].push_back(w.get());
  ++open_watches_;
  return w;
}

void Store::Unwatch(Watcher* w) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = w->rs->watchers.find(w->ns);
  if (it == w->rs->watchers.end()) return;
  auto& v = it->second;
  auto pos = std::find(v.begin(), v.end(), w);
  if (pos == v.end()) return;
  v.erase(pos);
  if (v.empty()) w->rs->watchers.erase(it);
  --open_watches_;
}

uint64_t Store::BookmarkRv(Watcher* w) const {
  std::lock_guard<std::mutex> l(mu_);
  std::lock_guard<std::mutex> lw(w->mu);
  return w->queue.empty() ? rv_ : 0;
}

namespace {

template <typename Fn>
void ForEachWatcher(const std::map<std::string, std::shared_ptr<ResourceStore>>& stores, Fn fn) {
  for (const auto& [gr, rs] : stores) {
    for (auto& [ns, ws] : rs->watchers) {
      for (Watcher* w : ws) {
        std::lock_guard<std::mutex> l(w->mu);
        fn(*w);
        w->cv.notify_all();
      }
    }
  }
}

}  // namespace

void Store::CutWatches() {
  std::lock_guard<std::mutex> l(mu_);
  ForEachWatcher(by_gr_, [](Watcher& w) { w.cut = true; });
}

void Store::EndWatches() {
  std::lock_guard<std::mutex> l(mu_);
  ForEachWatcher(by_gr_, [](Watcher& w) { w.end = true; });
}

void Store::Compact() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [gr, rs] : by_gr_) {
    rs->history.clear();
    rs->compacted_rv = rv_;
  }
}

int Store::OpenWatches() const {
  std::lock_guard<std::mutex> l(mu_);
  return open_watches_;
}

void Store::SetOnChange(std::function<void(const std::string&, const Json&)> fn) {
  std::lock_guard<std::mutex> l(note_mu_);
  has_on_change_ = static_cast<bool>(fn);
  on_change_ = std::move(fn);
}

bool Store::SettleCallbacks(double timeout_s) {
  std::unique_lock<std::mutex> l(note_mu_);
  return note_cv_.wait_for(l, std::chrono::duration<double>(timeout_s),
                           [&] { return (notes_.empty() && !note_busy_) || note_stop_; });
}

}  // namespace bulwark::k8s::testing::internal
