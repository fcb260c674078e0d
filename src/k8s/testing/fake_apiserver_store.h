// The fake API server's object store: resources, objects, the cluster-wide
// resourceVersion, per-resource event history, watchers, garbage collection, and the
// OnChange notifier. It holds every object as an immutable shared StoredObj (the JSON
// without apiVersion/kind plus its serialised text), indexed by resource and
// "namespace/name", so a LIST is a range scan that concatenates cached text and a
// change costs O(log n) plus the fan-out to the watchers of its resource and namespace.
//
// Thread-safety: every public method may be called from any thread. One mutex (mu_)
// guards the registry, objects, history and indexes; a Watcher's own mutex guards its
// queue and is only taken after mu_ (lock order: Store::mu_ -> Watcher::mu ->
// notifier mutex). The OnChange callback runs on the notifier thread with no lock held.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "k8s/testing/fake_apiserver_internal.h"

namespace bulwark::k8s::testing::internal {

// One committed state of an object. Immutable once published; shared by the object
// map, the history and watch queues.
struct StoredObj {
  Json obj;          // without apiVersion and kind
  std::string text;  // obj.dump()
  std::string key;   // "ns/name", or "name" when cluster-scoped
  std::string ns;
  uint64_t rv = 0;
};
using ObjPtr = std::shared_ptr<const StoredObj>;

enum class ChangeType { kAdded, kModified, kDeleted };
const char* ChangeName(ChangeType t);  // "ADDED", "MODIFIED", "DELETED"

struct Change {
  uint64_t rv = 0;
  ChangeType type = ChangeType::kAdded;
  ObjPtr obj;   // the state after the change (for kDeleted: the last state, new rv)
  ObjPtr prev;  // the state before (nullptr for kAdded)
};

struct ResourceStore;

// An event queued for one watch stream.
struct WatchItem {
  const char* type;  // "ADDED", "MODIFIED", "DELETED"
  ObjPtr obj;
};

// One open watch. Created by Store::Watch, drained by the stream's connection thread.
struct Watcher {
  // Immutable after registration.
  std::shared_ptr<ResourceStore> rs;
  std::shared_ptr<const ResourceInfo> info;  // as at registration (for rendering)
  std::string version;
  std::string ns;  // "" = every namespace
  LabelSelector labels;
  FieldSelector fields;
  bool bookmarks = false;
  size_t initial_events = 0;  // synthetic ADDED events at the head of the queue
  uint64_t initial_rv = 0;    // the rv those events reflect

  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  std::deque<WatchItem> queue;
  bool cut = false;       // CutWatches: cut the next event written mid-way
  bool end = false;       // EndWatches / CRD deleted / shutdown: finish cleanly
  bool overflow = false;  // the consumer fell too far behind: finish cleanly
};

// One resource type: its objects, history and watchers. Guarded by Store::mu_.
struct ResourceStore {
  // Replaced (never mutated) when its CRD changes; copy the pointer under Store::mu_
  // (Store::Find does) to use it outside.
  std::shared_ptr<const ResourceInfo> info;
  std::map<std::string, ObjPtr> objects;  // by key
  std::deque<Change> history;             // changes with rv > compacted_rv, in order
  uint64_t compacted_rv = 0;              // a watch/list from an older rv gets 410
  std::unordered_map<std::string, std::vector<Watcher*>> watchers;  // by ns ("" = all)
  bool removed = false;                                             // its CRD was deleted
};

struct ListQuery {
  std::string ns;  // "" = every namespace
  LabelSelector labels;
  FieldSelector fields;
  int64_t limit = 0;                   // 0 = no limit
  std::string continue_token;          // from a previous page
  std::string resource_version;        // "", "0" or a number
  std::string resource_version_match;  // "", "NotOlderThan", "Exact"
};

struct WatchQuery {
  std::string ns;
  LabelSelector labels;
  FieldSelector fields;
  std::string resource_version;
  bool bookmarks = false;
  bool send_initial_events = false;
};

enum class FieldValidation { kIgnore, kWarn, kStrict };

// Options and outputs of a write.
struct WriteOptions {
  FieldValidation validation = FieldValidation::kWarn;
  bool status = false;                // the /status subresource
  bool require_rv = true;             // custom kinds: PUT needs metadata.resourceVersion
  std::vector<std::string> warnings;  // out: Warning headers (pruned unknown fields)
};

struct DeleteOptions {
  std::string propagation;  // "", "Background", "Foreground", "Orphan"
  std::string precondition_uid;
  std::string precondition_rv;
};

// What a delete did: removed now (obj = its last state), or pending finalizers.
struct DeleteOutcome {
  ObjPtr obj;
  bool removed = true;
};

// A registry lookup: the resource's store and a snapshot of its description.
struct Resolved {
  std::shared_ptr<ResourceStore> rs;  // nullptr: not served
  std::shared_ptr<const ResourceInfo> info;
  explicit operator bool() const { return rs != nullptr; }
};

// metadata of a stored object (an empty object when absent).
const Json& MetaOf(const Json& obj);

class Store {
 public:
  Store(const Clock* clock, size_t history);
  ~Store();

  // Registry lookups.
  Resolved Find(const std::string& group, const std::string& version,
                const std::string& plural) const;
  Resolved FindKind(const std::string& api_version, const std::string& kind) const;
  std::vector<ResourceInfo> Served() const;

  // Reads.
  ApiOr<ObjPtr> Get(const ResourceStore& rs, const std::string& ns, const std::string& name) const;
  // A List object (serialised), honouring selectors, limit/continue and resourceVersion.
  ApiOr<std::string> List(const ResourceStore& rs, const std::string& version,
                          const ListQuery& q) const;
  std::vector<ObjPtr> ListAll(const ResourceStore& rs, const std::string& ns) const;
  uint64_t CurrentRv() const;

  // Writes (the API's semantics; see fake_apiserver.h).
  ApiOr<ObjPtr> Create(ResourceStore& rs, const std::string& version, const std::string& ns,
                       Json obj, WriteOptions* o);
  ApiOr<ObjPtr> Update(ResourceStore& rs, const std::string& version, const std::string& ns,
                       const std::string& name, Json obj, WriteOptions* o);
  ApiOr<ObjPtr> Patch(ResourceStore& rs, const std::string& version, const std::string& ns,
                      const std::string& name, PatchKind kind, const std::string& body,
                      WriteOptions* o);
  ApiOr<DeleteOutcome> Delete(ResourceStore& rs, const std::string& ns, const std::string& name,
                              const DeleteOptions& o);

  // Watches. Registers a watcher whose queue already holds the events after
  // q.resource_version (or synthetic ADDED events for "" / "0"). 410 Expired when the
  // version is older than the resource's history.
  ApiOr<std::shared_ptr<Watcher>> Watch(const std::shared_ptr<ResourceStore>& rs,
                                        const std::string& version, const WatchQuery& q);
  void Unwatch(Watcher* w);
  // The resourceVersion a BOOKMARK may carry now, or 0 while events are queued.
  uint64_t BookmarkRv(Watcher* w) const;
  void CutWatches();
  void EndWatches();
  void Compact();
  int OpenWatches() const;

  void SetOnChange(std::function<void(const std::string&, const Json&)> fn);
  // Waits until every change so far has been passed to OnChange; false on timeout.
  bool SettleCallbacks(double timeout_s);
  // Ends every watch and stops the notifier thread. Idempotent.
  void Shutdown();

  // apiVersion + kind + the stored fields, as a response carries it.
  static std::string Render(const ResourceInfo& r, const std::string& version, const StoredObj& o);
  static Json RenderJson(const ResourceInfo& r, const std::string& version, const StoredObj& o);

 private:
  // All *Locked methods require mu_.
  uint64_t NextRv() { return ++rv_; }
  ObjPtr Publish(Json obj, const std::string& key, const std::string& ns, uint64_t rv);
  void CommitLocked(ResourceStore& rs, ChangeType type, ObjPtr obj, ObjPtr prev);
  void FanOutLocked(ResourceStore& rs, const Change& c);
  void IndexLocked(ResourceStore& rs, const ObjPtr& prev, const ObjPtr& obj);
  ApiOr<ObjPtr> CreateLocked(ResourceStore& rs, const std::string& version, const std::string& ns,
                             Json obj, WriteOptions* o);
  ApiOr<ObjPtr> UpdateLocked(ResourceStore& rs, const std::string& version, const std::string& ns,
                             const std::string& name, Json obj, WriteOptions* o);
  ApiOr<DeleteOutcome> DeleteLocked(ResourceStore& rs, const std::string& key,
                                    const DeleteOptions& o);
  // Removes the object now: `state` with a new rv is published as DELETED (prev =
  // `cur`); then its dependents are collected (unless orphaned) and a terminating
  // namespace that became empty is removed.
  ObjPtr RemoveLocked(ResourceStore& rs, Json state, const ObjPtr& cur, bool orphan);
  // Deletes the dependents of `owner_uid` whose owners are all gone (`dying` counts as
  // gone) and drops dangling owner references from those with a live owner.
  void CollectDependentsLocked(const std::string& owner_uid, bool dying);
  void OrphanDependentsLocked(const std::string& owner_uid);
  void FinishNamespaceLocked(const std::string& ns);
  ObjPtr ModifyLocked(ResourceStore& rs, Json next, const ObjPtr& cur);
  void RegisterLocked(ResourceInfo info);
  void OnCrdCommittedLocked(const ObjPtr& crd);
  void RemoveCustomResourceLocked(const Json& crd);
  std::map<std::string, ObjPtr> SnapshotLocked(const ResourceStore& rs, uint64_t at,
                                               const std::string& from,
                                               const std::string& to) const;

  const Clock* clock_;
  const size_t history_;

  mutable std::mutex mu_;
  uint64_t rv_ = 1;
  std::map<std::string, std::shared_ptr<ResourceStore>> by_gr_;  // "plural.group"
  std::shared_ptr<ResourceStore> namespaces_, crds_;
  // uid -> (store, key) of every object; owner uid -> dependents.
  std::unordered_map<std::string, std::pair<ResourceStore*, std::string>> by_uid_;
  std::unordered_map<std::string, std::set<std::pair<ResourceStore*, std::string>>> dependents_;
  std::unordered_map<std::string, size_t> ns_count_;  // objects per namespace
  int open_watches_ = 0;

  // OnChange notifier (its own mutex; taken after mu_).
  std::mutex note_mu_;
  std::condition_variable note_cv_;
  std::deque<std::pair<std::string, Json>> notes_;
  std::function<void(const std::string&, const Json&)> on_change_;
  std::atomic<bool> has_on_change_{false};
  bool note_busy_ = false;
  bool note_stop_ = false;
  std::thread notifier_;
};

}  // namespace bulwark::k8s::testing::internal
