// Store writes: create, update (main and /status), patch, delete with finalizers,
// preconditions and owner-reference garbage collection, namespace termination, and the
// registration of the resources CRDs define.
#include <algorithm>

#include "k8s/testing/fake_apiserver_store.h"

namespace bulwark::k8s::testing::internal {

namespace {

std::string KeyOf(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

std::string NameOfKey(const std::string& key) {
  size_t slash = key.find('/');
  return slash == std::string::npos ? key : key.substr(slash + 1);
}

// True when anything but metadata and status differs (what bumps metadata.generation).
bool SpecChanged(const Json& a, const Json& b) {
  for (const Json* x : {&a, &b}) {
    const Json& y = x == &a ? b : a;
    for (auto it = x->begin(); it != x->end(); ++it) {
      if (it.key() == "metadata" || it.key() == "status") continue;
      auto o = y.find(it.key());
      if (o == y.end() || *o != it.value()) return true;
    }
  }
  return false;
}

std::vector<std::string> Finalizers(const Json& meta) {
  std::vector<std::string> out;
  auto it = meta.find("finalizers");
  if (it == meta.end() || !it->is_array()) return out;
  for (const Json& f : *it) {
    if (f.is_string()) out.push_back(f.get<std::string>());
  }
  return out;
}

// Checks apiVersion/kind against the URL's and drops them (the store keeps neither);
// checks and sets metadata.namespace.
ApiOr<Json> CheckBody(const ResourceInfo& r, const std::string& version, const std::string& ns,
                      Json obj) {
  if (!obj.is_object()) {
    return ErrBadRequest("the request body must be a JSON object (a " + r.kind + ")");
  }
  std::string want = r.ApiVersion(version);
  if (obj.contains("apiVersion") && obj["apiVersion"] != want) {
    return ErrBadRequest("the API version in the data (" + obj["apiVersion"].dump() +
                         ") does not match the expected API version (" + want + ")");
  }
  if (obj.contains("kind") && obj["kind"] != r.kind) {
    return ErrBadRequest("the kind in the data (" + obj["kind"].dump() +
                         ") does not match the expected kind (" + r.kind + ") for " + want + " " +
                         r.plural);
  }
  obj.erase("apiVersion");
  obj.erase("kind");
  if (!obj.contains("metadata")) obj["metadata"] = Json::object();
  Json& meta = obj["metadata"];
  if (!meta.is_object()) return ErrBadRequest("metadata must be a JSON object");
  if (r.namespaced) {
    std::string body_ns = StrField(meta, "namespace");
    if (!body_ns.empty() && body_ns != ns) {
      return ErrBadRequest("the namespace of the provided object (" + body_ns +
                           ") does not match the namespace sent on the request (" + ns + ")");
    }
    meta["namespace"] = ns;
  } else {
    meta.erase("namespace");
  }
  meta.erase("managedFields");
  meta.erase("selfLink");
  return obj;
}

std::vector<Json> ValidateMeta(const ResourceInfo& r, const Json& meta) {
  std::vector<Json> causes;
  std::string name = StrField(meta, "name");
  std::string why = r.dns_label_names ? CheckDnsLabel(name) : CheckDnsSubdomain(name);
  if (!why.empty()) {
    causes.push_back(
        Cause("FieldValueInvalid", "metadata.name", "Invalid value: " + Quote(name) + ": " + why));
  }
  for (const char* field : {"labels", "annotations"}) {
    auto it = meta.find(field);
    if (it == meta.end() || it->is_null()) continue;
    std::string path = std::string("metadata.") + field;
    if (!it->is_object()) {
      causes.push_back(Cause("FieldValueTypeInvalid", path, "must be a map of strings"));
      continue;
    }
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      why = CheckLabelKey(kv.key());
      if (why.empty() && !kv.value().is_string()) why = "the value must be a string";
      if (why.empty() && path == "metadata.labels") why = CheckLabelValue(kv.value());
      if (!why.empty()) {
        causes.push_back(
            Cause("FieldValueInvalid", path, "Invalid value: " + Quote(kv.key()) + ": " + why));
      }
    }
  }
  auto refs = meta.find("ownerReferences");
  if (refs != meta.end() && !refs->is_null()) {
    if (!refs->is_array()) {
      causes.push_back(
          Cause("FieldValueTypeInvalid", "metadata.ownerReferences", "must be a list"));
    } else {
      for (size_t i = 0; i < refs->size(); ++i) {
        for (const char* f : {"apiVersion", "kind", "name", "uid"}) {
          if (!StrField((*refs)[i], f).empty()) continue;
          causes.push_back(Cause("FieldValueRequired",
                                 "metadata.ownerReferences[" + std::to_string(i) + "]." + f,
                                 "Required value"));
        }
      }
    }
  }
  auto fin = meta.find("finalizers");
  if (fin != meta.end() && !fin->is_null() && !fin->is_array()) {
    causes.push_back(Cause("FieldValueTypeInvalid", "metadata.finalizers", "must be a list"));
  }
  return causes;
}

// Kind-specific checks of built-in objects (the few the API would reject and tests hit).
std::vector<Json> ValidateKind(const ResourceInfo& r, const Json& obj) {
  std::vector<Json> causes;
  if (r.group.empty() && r.plural == "pods") {
    auto spec = obj.find("spec");
    if (spec == obj.end() || !spec->is_object() || !spec->contains("containers") ||
        !(*spec)["containers"].is_array() || (*spec)["containers"].empty()) {
      causes.push_back(Cause("FieldValueRequired", "spec.containers", "Required value"));
    }
  }
  return causes;
}

// Prunes/defaults/validates a custom object against the served version's schema.
std::optional<ApiError> CheckCustom(const ResourceInfo& r, const std::string& version,
                                    const std::string& name, Json* obj, WriteOptions* o) {
  auto schema = r.schemas.find(version);
  if (!r.custom || schema == r.schemas.end()) return std::nullopt;
  SchemaOutcome out;
  CheckCustomObject(schema->second, obj, &out);
  if (!out.unknown_fields.empty() && o->validation == FieldValidation::kStrict) {
    std::string list;
    for (const std::string& f : out.unknown_fields) {
      list += (list.empty() ? "" : ", ") + std::string("unknown field ") + Quote(f);
    }
    return ErrBadRequest("strict decoding error: " + list);
  }
  if (o->validation == FieldValidation::kWarn) {
    for (const std::string& f : out.unknown_fields)
      o->warnings.push_back("unknown field " + Quote(f));
  }
  if (!out.causes.empty()) return ErrInvalid(r, name, std::move(out.causes));
  return std::nullopt;
}

}  // namespace

ObjPtr Store::ModifyLocked(ResourceStore& rs, Json next, const ObjPtr& cur) {
  uint64_t rv = NextRv();
  next["metadata"]["resourceVersion"] = std::to_string(rv);
  ObjPtr obj = Publish(std::move(next), cur->key, cur->ns, rv);
  CommitLocked(rs, ChangeType::kModified, obj, cur);
  return obj;
}

ApiOr<ObjPtr> Store::Create(ResourceStore& rs, const std::string& version, const std::string& ns,
                            Json obj, WriteOptions* o) {
  std::lock_guard<std::mutex> l(mu_);
  return CreateLocked(rs, version, ns, std::move(obj), o);
}

ApiOr<ObjPtr> Store::CreateLocked(ResourceStore& rs, const std::string& version,
                                  const std::string& ns, Json obj, WriteOptions* o) {
  if (rs.removed) return ErrNotFoundPath();
  const ResourceInfo& r = *rs.info;
  ApiOr<Json> checked = CheckBody(r, version, ns, std::move(obj));
  if (!checked.ok()) return checked.error();
  Json body = std::move(*checked);
  Json& meta = body["metadata"];
  if (!StrField(meta, "resourceVersion").empty()) {
    return ErrBadRequest("resourceVersion should not be set on objects to be created");
  }
  std::string name = StrField(meta, "name");
  std::string generate = StrField(meta, "generateName");
  if (name.empty() && generate.empty()) {
    return ErrInvalid(r, "",
                      {Cause("FieldValueRequired", "metadata.name",
                             "Required value: name or generateName is required")});
  }
  if (r.namespaced) {
    if (ns.empty()) return ErrBadRequest("a namespace is required to create " + r.plural);
    auto nsit = namespaces_->objects.find(ns);
    if (nsit == namespaces_->objects.end()) return ErrNotFound(*namespaces_->info, ns);
    if (MetaOf(nsit->second->obj).contains("deletionTimestamp")) {
      return ErrForbidden(
          r, name.empty() ? generate : name,
          "unable to create new content in namespace " + ns + " because it is being terminated");
    }
  }
  for (int i = 0; name.empty() && i < 16; ++i) {
    std::string candidate = generate + RandomNameSuffix();
    if (!rs.objects.count(KeyOf(ns, candidate))) name = candidate;
  }
  meta["name"] = name;
  std::vector<Json> causes = ValidateMeta(r, meta);
  std::vector<Json> kind_causes = ValidateKind(r, body);
  causes.insert(causes.end(), kind_causes.begin(), kind_causes.end());
  if (!causes.empty()) return ErrInvalid(r, name, std::move(causes));
  std::string key = KeyOf(ns, name);
  if (rs.objects.count(key)) return ErrAlreadyExists(r, name);

  meta["uid"] = NewUid();
  meta["creationTimestamp"] = FormatRfc3339(clock_->NowWall());
  meta["generation"] = 1;
  meta.erase("deletionTimestamp");
  meta.erase("deletionGracePeriodSeconds");
  if (r.custom ? r.HasStatus(version) : r.create_status == CreateStatus::kClear) {
    body.erase("status");
  } else if (r.create_status == CreateStatus::kPodPending) {
    body["status"] = {{"phase", "Pending"}};
  } else if (r.create_status == CreateStatus::kNamespaceActive) {
    body["status"] = {{"phase", "Active"}};
    body["spec"] = {{"finalizers", {"kubernetes"}}};
  }
  if (std::optional<ApiError> e = CheckCustom(r, version, name, &body, o)) return *e;
  if (&rs == crds_.get()) {
    ApiOr<ResourceInfo> def = ResourceFromCrd(r, body);
    if (!def.ok()) return def.error();
    auto existing = by_gr_.find(def->GroupResource());
    if (existing != by_gr_.end() && !existing->second->info->custom) {
      return ErrInvalid(
          r, name,
          {Cause("FieldValueInvalid", "spec.names.plural",
                 "Invalid value: " + Quote(def->plural) + ": conflicts with a built-in resource")});
    }
    std::string now = FormatRfc3339(clock_->NowWall());
    Json names = body["spec"]["names"];
    names["singular"] = def->singular;
    names["listKind"] = def->list_kind;
    body["status"] = {{"conditions",
                       {{{"type", "NamesAccepted"},
                         {"status", "True"},
                         {"reason", "NoConflicts"},
                         {"message", "no conflicts found"},
                         {"lastTransitionTime", now}},
                        {{"type", "Established"},
                         {"status", "True"},
                         {"reason", "InitialNamesAccepted"},
                         {"message", "the initial names have been accepted"},
                         {"lastTransitionTime", now}}}},
                      {"acceptedNames", names},
                      {"storedVersions", {def->versions.front()}}};
  }
  uint64_t rv = NextRv();
  body["metadata"]["resourceVersion"] = std::to_string(rv);
  ObjPtr stored = Publish(std::move(body), key, r.namespaced ? ns : "", rv);
  CommitLocked(rs, ChangeType::kAdded, stored, nullptr);
  return stored;
}

ApiOr<ObjPtr> Store::Update(ResourceStore& rs, const std::string& version, const std::string& ns,
                            const std::string& name, Json obj, WriteOptions* o) {
  std::lock_guard<std::mutex> l(mu_);
  return UpdateLocked(rs, version, ns, name, std::move(obj), o);
}

ApiOr<ObjPtr> Store::UpdateLocked(ResourceStore& rs, const std::string& version,
                                  const std::string& ns, const std::string& name, Json obj,
                                  WriteOptions* o) {
  if (rs.removed) return ErrNotFoundPath();
  const ResourceInfo& r = *rs.info;
  if (o->status && !r.HasStatus(version)) return ErrNotFoundPath();
  ApiOr<Json> checked = CheckBody(r, version, ns, std::move(obj));
  if (!checked.ok()) return checked.error();
  Json body = std::move(*checked);
  std::string body_name = StrField(body["metadata"], "name");
  if (body_name != name) {
    return ErrBadRequest("the name of the object (" + body_name +
                         ") does not match the name on the URL (" + name + ")");
  }
  auto it = rs.objects.find(KeyOf(r.namespaced ? ns : "", name));
  if (it == rs.objects.end()) return ErrNotFound(r, name);
  ObjPtr cur = it->second;
  const Json& cur_meta = MetaOf(cur->obj);
  std::string want_rv = StrField(body["metadata"], "resourceVersion");
  if (!want_rv.empty() && want_rv != std::to_string(cur->rv)) {
    return ErrConflict(r, name,
                       "the object has been modified; please apply your changes to the latest "
                       "version and try again");
  }
  if (want_rv.empty() && o->require_rv && !r.unconditional_update) {
    return ErrInvalid(r, name,
                      {Cause("FieldValueInvalid", "metadata.resourceVersion",
                             "Invalid value: 0x0: must be specified for an update")});
  }
  Json next;
  if (o->status) {
    next = cur->obj;
    if (body.contains("status")) {
      next["status"] = body["status"];
    } else {
      next.erase("status");
    }
  } else {
    next = std::move(body);
    Json& meta = next["metadata"];
    for (const char* f : {"uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"}) {
      if (cur_meta.contains(f)) {
        meta[f] = cur_meta[f];
      } else {
        meta.erase(f);
      }
    }
    if (r.HasStatus(version)) {
      if (cur->obj.contains("status")) {
        next["status"] = cur->obj["status"];
      } else {
        next.erase("status");
      }
    }
    std::vector<Json> causes = ValidateMeta(r, meta);
    std::vector<Json> kind_causes = ValidateKind(r, next);
    causes.insert(causes.end(), kind_causes.begin(), kind_causes.end());
    if (cur_meta.contains("deletionTimestamp")) {
      std::vector<std::string> old_f = Finalizers(cur_meta), added;
      for (const std::string& f : Finalizers(meta)) {
        if (std::find(old_f.begin(), old_f.end(), f) == old_f.end()) added.push_back(f);
      }
      if (!added.empty()) {
        causes.push_back(Cause("FieldValueForbidden", "metadata.finalizers",
                               "Forbidden: no new finalizers can be added if the object is "
                               "being deleted, found new finalizers " +
                                   Json(added).dump()));
      }
    }
    if (!causes.empty()) return ErrInvalid(r, name, std::move(causes));
  }
  if (std::optional<ApiError> e = CheckCustom(r, version, name, &next, o)) return *e;
  if (&rs == crds_.get()) {
    ApiOr<ResourceInfo> def = ResourceFromCrd(r, next);
    if (!def.ok()) return def.error();
    ApiOr<ResourceInfo> old = ResourceFromCrd(r, cur->obj);
    if (old.ok() && old->namespaced != def->namespaced) {
      return ErrInvalid(
          r, name, {Cause("FieldValueInvalid", "spec.scope", "Invalid value: field is immutable")});
    }
  }
  next["metadata"]["resourceVersion"] = std::to_string(cur->rv);
  if (next == cur->obj) return cur;  // a no-op update changes nothing, as in etcd3
  if (!o->status && SpecChanged(next, cur->obj)) {
    next["metadata"]["generation"] = cur_meta.value("generation", 0) + 1;
  }
  if (next["metadata"].contains("deletionTimestamp") && Finalizers(next["metadata"]).empty()) {
    return RemoveLocked(rs, std::move(next), cur, false);
  }
  return ModifyLocked(rs, std::move(next), cur);
}

ApiOr<ObjPtr> Store::Patch(ResourceStore& rs, const std::string& version, const std::string& ns,
                           const std::string& name, PatchKind kind, const std::string& body,
                           WriteOptions* o) {
  std::lock_guard<std::mutex> l(mu_);
  if (rs.removed) return ErrNotFoundPath();
  const ResourceInfo& r = *rs.info;
  if (r.custom && kind == PatchKind::kStrategic) {
    return ErrUnsupportedMediaType(
        "strategic merge patch is not supported for custom resources (" + r.GroupResource() +
        "); use application/merge-patch+json or application/json-patch+json");
  }
  auto it = rs.objects.find(KeyOf(r.namespaced ? ns : "", name));
  if (it == rs.objects.end()) return ErrNotFound(r, name);
  ObjPtr cur = it->second;
  ApiOr<Json> patched = ApplyPatch(RenderJson(r, version, *cur), kind, body);
  if (!patched.ok()) return patched.error();
  if (!patched->is_object() || !(*patched)["metadata"].is_object()) {
    return ErrBadRequest("the patched object must be a JSON object with metadata");
  }
  // A resourceVersion in the patch is a precondition, as in kube-apiserver.
  std::string rv = StrField((*patched)["metadata"], "resourceVersion");
  if (!rv.empty() && rv != std::to_string(cur->rv)) {
    return ErrConflict(r, name,
                       "the object has been modified; please apply your changes to the latest "
                       "version and try again");
  }
  (*patched)["metadata"]["resourceVersion"] = std::to_string(cur->rv);
  return UpdateLocked(rs, version, ns, name, std::move(*patched), o);
}

ApiOr<DeleteOutcome> Store::Delete(ResourceStore& rs, const std::string& ns,
                                   const std::string& name, const DeleteOptions& o) {
  std::lock_guard<std::mutex> l(mu_);
  if (rs.removed) return ErrNotFoundPath();
  return DeleteLocked(rs, KeyOf(rs.info->namespaced ? ns : "", name), o);
}

ApiOr<DeleteOutcome> Store::DeleteLocked(ResourceStore& rs, const std::string& key,
                                         const DeleteOptions& o) {
  const ResourceInfo& r = *rs.info;
  auto it = rs.objects.find(key);
  if (it == rs.objects.end()) return ErrNotFound(r, NameOfKey(key));
  ObjPtr cur = it->second;
  const Json& meta = MetaOf(cur->obj);
  std::string name = NameOfKey(key);
  std::string uid = StrField(meta, "uid");
  if (!o.precondition_uid.empty() && o.precondition_uid != uid) {
    return ErrConflict(r, name,
                       "Precondition failed: UID in precondition: " + o.precondition_uid +
                           ", UID in object meta: " + uid);
  }
  if (!o.precondition_rv.empty() && o.precondition_rv != std::to_string(cur->rv)) {
    return ErrConflict(
        r, name,
        "Precondition failed: ResourceVersion in precondition: " + o.precondition_rv +
            ", ResourceVersion in object meta: " + std::to_string(cur->rv));
  }
  if (o.propagation == "Orphan") OrphanDependentsLocked(uid);
  if (o.propagation == "Foreground") CollectDependentsLocked(uid, /*dying=*/true);
  bool is_ns = &rs == namespaces_.get();
  if (is_ns || !Finalizers(meta).empty()) {
    if (!meta.contains("deletionTimestamp")) {
      Json next = cur->obj;
      next["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_->NowWall());
      next["metadata"]["deletionGracePeriodSeconds"] = 0;
      if (is_ns) {
        next["status"]["phase"] = "Terminating";
      } else {
        next["metadata"]["generation"] = meta.value("generation", 0) + 1;
      }
      cur = ModifyLocked(rs, std::move(next), cur);
    }
    if (is_ns) {
      std::vector<std::shared_ptr<ResourceStore>> stores;
      for (const auto& [gr, s] : by_gr_) {
        if (s->info->namespaced) stores.push_back(s);
      }
      for (const auto& s : stores) {
        std::vector<std::string> keys;
        for (auto k = s->objects.lower_bound(name + "/");
             k != s->objects.end() && k->first < name + "0"; ++k) {
          keys.push_back(k->first);
        }
        for (const std::string& k : keys) (void)DeleteLocked(*s, k, {});
      }
      FinishNamespaceLocked(name);
      auto now = rs.objects.find(key);
      if (now == rs.objects.end()) return DeleteOutcome{cur, true};
      return DeleteOutcome{now->second, false};
    }
    return DeleteOutcome{cur, false};
  }
  return DeleteOutcome{RemoveLocked(rs, cur->obj, cur, o.propagation == "Orphan"), true};
}

ObjPtr Store::RemoveLocked(ResourceStore& rs, Json state, const ObjPtr& cur, bool orphan) {
  if (&rs == crds_.get()) RemoveCustomResourceLocked(state);
  uint64_t rv = NextRv();
  state["metadata"]["resourceVersion"] = std::to_string(rv);
  ObjPtr gone = Publish(std::move(state), cur->key, cur->ns, rv);
  CommitLocked(rs, ChangeType::kDeleted, gone, cur);
  std::string uid = StrField(MetaOf(gone->obj), "uid");
  if (!orphan) CollectDependentsLocked(uid, false);
  if (rs.info->namespaced) FinishNamespaceLocked(gone->ns);
  return gone;
}

void Store::CollectDependentsLocked(const std::string& owner_uid, bool dying) {
  auto it = dependents_.find(owner_uid);
  if (it == dependents_.end()) return;
  auto deps = it->second;  // deletions below edit the index
  for (const auto& [store, key] : deps) {
    auto obj = store->objects.find(key);
    if (obj == store->objects.end()) continue;
    ObjPtr d = obj->second;
    Json kept = Json::array();
    Json refs = MetaOf(d->obj).value("ownerReferences", Json::array());
    for (const Json& ref : refs) {
      std::string u = StrField(ref, "uid");
      if (by_uid_.count(u) && !(dying && u == owner_uid)) kept.push_back(ref);
    }
    if (kept.empty()) {
      (void)DeleteLocked(*store, key, {});
    } else if (!dying && kept.size() != refs.size()) {
      Json next = d->obj;
      next["metadata"]["ownerReferences"] = kept;
      ModifyLocked(*store, std::move(next), d);
    }
  }
}

void Store::OrphanDependentsLocked(const std::string& owner_uid) {
  auto it = dependents_.find(owner_uid);
  if (it == dependents_.end()) return;
  auto deps = it->second;
  for (const auto& [store, key] : deps) {
    auto obj = store->objects.find(key);
    if (obj == store->objects.end()) continue;
    Json next = obj->second->obj;
    Json kept = Json::array();
    for (const Json& ref : next["metadata"]["ownerReferences"]) {
      if (StrField(ref, "uid") != owner_uid) kept.push_back(ref);
    }
    if (kept.empty()) {
      next["metadata"].erase("ownerReferences");
    } else {
      next["metadata"]["ownerReferences"] = kept;
    }
    ModifyLocked(*store, std::move(next), obj->second);
  }
}

void Store::FinishNamespaceLocked(const std::string& ns) {
  auto it = namespaces_->objects.find(ns);
  if (it == namespaces_->objects.end() || ns_count_.count(ns)) return;
  const Json& meta = MetaOf(it->second->obj);
  if (!meta.contains("deletionTimestamp") || !Finalizers(meta).empty()) return;
  ObjPtr cur = it->second;
  RemoveLocked(*namespaces_, cur->obj, cur, false);
}

void Store::RegisterLocked(ResourceInfo info) {
  std::string gr = info.GroupResource();
  auto it = by_gr_.find(gr);
  if (it != by_gr_.end() && it->second->info->custom == info.custom) {
    it->second->info = std::make_shared<const ResourceInfo>(std::move(info));
    return;
  }
  auto rs = std::make_shared<ResourceStore>();
  rs->info = std::make_shared<const ResourceInfo>(std::move(info));
  by_gr_[gr] = std::move(rs);
}

void Store::OnCrdCommittedLocked(const ObjPtr& crd) {
  ApiOr<ResourceInfo> def = ResourceFromCrd(*crds_->info, crd->obj);
  if (def.ok()) RegisterLocked(std::move(*def));
}

void Store::RemoveCustomResourceLocked(const Json& crd) {
  ApiOr<ResourceInfo> def = ResourceFromCrd(*crds_->info, crd);
  if (!def.ok()) return;
  auto it = by_gr_.find(def->GroupResource());
  if (it == by_gr_.end() || !it->second->info->custom) return;
  std::shared_ptr<ResourceStore> rs = it->second;
  // Custom objects go with their definition, finalizers or not.
  while (!rs->objects.empty()) {
    ObjPtr cur = rs->objects.begin()->second;
    RemoveLocked(*rs, cur->obj, cur, false);
  }
  for (auto& [ns, ws] : rs->watchers) {
    for (Watcher* w : ws) {
      std::lock_guard<std::mutex> l(w->mu);
      w->end = true;
      w->cv.notify_all();
    }
  }
  rs->removed = true;
  by_gr_.erase(it);
}

}  // namespace bulwark::k8s::testing::internal
