// FakeApiServer: an in-process HTTPS server that reproduces the parts of the
// kube-apiserver REST semantics Bulwark depends on, for the client's contract suite,
// the operator's end-to-end tests and the operator benchmark. No live cluster runs in
// CI; docs/kubernetes.md says what this server checks and what it does not.
//
// What it implements (each is a contract test in src/k8s/client_contract_test.cc):
//  * TLS with a self-signed CA generated at start (ca_pem()); optional bearer token.
//  * Resource registry: core kinds (pods, nodes, services, endpoints, events,
//    namespaces, configmaps, secrets, serviceaccounts, persistentvolumeclaims),
//    coordination.k8s.io/v1 leases, apps/v1 deployments, scheduling.k8s.io/v1
//    priorityclasses, rbac.authorization.k8s.io/v1 roles, clusterroles and their
//    bindings, apiextensions.k8s.io/v1 customresourcedefinitions; creating a CRD
//    registers its resource (served versions, scope, status subresource, established
//    at once) and checks every custom object against the served version's structural
//    openAPIV3Schema (type, properties, required, items, enum, minimum/maximum,
//    min/maxLength, pattern, min/maxItems, additionalProperties, nullable,
//    x-kubernetes-int-or-string, defaults). Unknown fields are pruned with a Warning
//    header (fieldValidation=Warn, the default), pruned silently (Ignore) or rejected
//    with 400 (Strict), unless x-kubernetes-preserve-unknown-fields. Violations are
//    422 Invalid with details.causes[{field, message}]. x-kubernetes-validations CEL
//    rules and anyOf/oneOf/allOf/not are NOT evaluated. Deleting a CRD deletes its
//    objects and ends their watches.
//  * Namespaces: default, kube-system, kube-public and kube-node-lease exist at start;
//    creating in a missing namespace is 404, in a terminating one 403; deleting a
//    namespace deletes its objects and removes it once they are gone.
//  * Objects: uid, creationTimestamp, generateName, metadata.generation (bumped on a
//    change outside metadata and status), one cluster-wide resourceVersion counter;
//    409 AlreadyExists on a duplicate create; PUT with a stale
//    metadata.resourceVersion -> 409 Conflict; a PUT without resourceVersion is an
//    unconditional update for built-in kinds and 422 for custom objects (as the real
//    server); an update that changes nothing keeps the resourceVersion and sends no
//    event;
//    status subresource: PUT/PATCH .../status changes only status, the main endpoint
//    ignores status for kinds that have the subresource; JSON merge patch
//    (application/merge-patch+json); strategic merge patch as merge patch except for
//    the core list fields with a patchMergeKey (containers, env, volumes, ... by name;
//    conditions by type; ports; ownerReferences by uid; finalizers merged as a set)
//    and the $patch/$deleteFromPrimitiveList directives, 415 for custom objects as the
//    real server; JSON patch (RFC 6902: add, remove, replace, move, copy, test). A
//    metadata.resourceVersion in a patch is a precondition (409 when stale).
//  * Deletion: finalizers (deletionTimestamp set, object kept until the finalizer list
//    is empty), gracePeriodSeconds accepted and ignored (deletion is immediate),
//    preconditions (uid, resourceVersion); owner-reference garbage collection,
//    synchronously: removing an owner deletes the dependents left without a live owner
//    (Background and Foreground; Foreground deletes them before the owner) and drops
//    dangling references from the others; Orphan removes the owner's references.
//  * LIST: labelSelector (=, ==, !=, in, notin, exists, !exists, gt, lt),
//    fieldSelector (metadata.name, metadata.namespace and each kind's field labels,
//    e.g. pods' spec.nodeName and status.phase; 400 for others), limit + continue
//    (every page a consistent snapshot at the first page's resourceVersion; 410 once
//    that is compacted), resourceVersion with resourceVersionMatch (NotOlderThan,
//    Exact: a snapshot at that version; 410 when compacted; 504 when in the future).
//  * WATCH (?watch=1): events after resourceVersion (ADDED/MODIFIED/DELETED),
//    resourceVersion "" or "0" -> synthetic ADDED for every current object first;
//    sendInitialEvents=true (with resourceVersionMatch=NotOlderThan) ends them with a
//    BOOKMARK annotated k8s.io/initial-events-end; BOOKMARK events every
//    bookmark_interval_s when allowWatchBookmarks=true; timeoutSeconds; a
//    resourceVersion older than the compacted history -> an ERROR event carrying
//    Status{code: 410, reason: Expired} (as the real server does); chunked transfer
//    encoding, one JSON object per line; events in resourceVersion order; an object
//    entering or leaving a watch's selectors arrives as ADDED or DELETED.
//  * Fault injection: FailNext (429 with Retry-After, 500, 503, 409, ...),
//    CutWatches (every open watch stream is closed in the middle of its next event),
//    Compact (history before now is forgotten: older watches and lists get 410).
//  * Discovery (/api, /apis, /api/v1, /apis/<g>/<v>) and /version, so kubectl can
//    talk to it.
//  * Table output, as `kubectl get` asks for it (Accept negotiated in order;
//    application/json;as=Table;v=v1|v1beta1;g=meta.k8s.io) on GET of an object or a
//    list: a Name column, then a CRD version's additionalPrinterColumns (validated at
//    CRD creation) with the apiextensions cell rules (null when missing or of the
//    wrong type; dates as ages from `clock`), or Name and Age for built-in kinds and
//    CRDs without columns; includeObject=Metadata|Object|None. Other Accept types
//    are 406.
//
// Not reproduced (docs/kubernetes.md): scheduler, kubelet, controllers (nothing moves
// a pod past Pending unless a test does), admission webhooks, RBAC enforcement
// (any bearer token equal to `token` is cluster-admin), server-side apply, dryRun,
// protobuf and YAML bodies, the built-in kinds' own printer columns (kubectl's
// "Ready", "Status" ... for pods), Table watches (406), client certificates (not checked),
// HTTP/2, persistence (in-memory), more than one process.
//
// Thread-safe: the server runs its own threads; every public method may be called
// from any thread. Stop() (and the destructor) closes every connection and joins;
// every wait inside is bounded (socket waits are sliced to <= 100 ms).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/status.h"
#include "k8s/client.h"

namespace bulwark::k8s::testing {

struct FakeApiServerOptions {
  std::string token;                    // required bearer token ("" = accept any or none)
  double bookmark_interval_s = 1;       // BOOKMARK cadence on watches that allow them
  size_t history = 100000;              // watch events kept per resource before compaction
  int max_watch_timeout_s = 1800;       // cap on timeoutSeconds (and the default)
  size_t max_connections = 4096;        // concurrent connections; more are answered 429
  size_t max_request_records = 100000;  // Requests() keeps the newest this many
  // Source of creationTimestamp/deletionTimestamp; nullptr = SystemClock. Not owned.
  const Clock* clock = nullptr;
};

struct RequestRecord {
  std::string method;  // GET, POST, PUT, PATCH, DELETE
  std::string path;    // without the query
  std::string query;
  int status = 0;
  bool watch = false;
};

class FakeApiServer {
 public:
  static Result<std::unique_ptr<FakeApiServer>> Start(FakeApiServerOptions opts = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string url() const;     // "https://127.0.0.1:PORT"
  std::string ca_pem() const;  // the CA that signed the server certificate
  // A ready ClientConfig (server, CA, token, namespace "default").
  ClientConfig client_config() const;
  // Writes a kubeconfig for this server (for kubectl and LoadKubeConfig tests).
  Status WriteKubeconfig(const std::string& path) const;

  // Direct access to the store (no HTTP), with the same semantics as the API
  // (resourceVersion bump, watch notification, CRD schema check). `obj` must carry
  // apiVersion, kind and metadata.name (and metadata.namespace when namespaced).
  // Create prunes unknown fields of custom objects, as fieldValidation=Warn does.
  Result<Json> Create(const Json& obj);
  Result<Json> Update(const Json& obj);  // unconditional when obj has no resourceVersion
  // PUT .../status: only obj's status is taken (for fake kubelets and controllers).
  Result<Json> UpdateStatus(const Json& obj);
  Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name) const;
  // Every object of r (in namespace ns, "" = all), ordered by namespace/name.
  std::vector<Json> List(const Resource& r, const std::string& ns = "") const;
  Status Delete(const Resource& r, const std::string& ns, const std::string& name);
  std::string CurrentResourceVersion() const;

  // Fault injection. The next `n` requests whose "METHOD path?query" contains `match`
  // ("" = any; e.g. "GET /api/v1/pods", "watch=") are answered with `http_status`
  // (a Status with the matching reason; Retry-After, rounded up to whole seconds, when
  // retry_after_s > 0), without touching the store. Calls queue: each request is
  // checked against the pending rules in the order they were added, and consumes one
  // count of the first that matches. Counted exactly, across threads.
  void FailNext(int n, int http_status, double retry_after_s = 0, const std::string& match = "");
  // Every watch stream open now is cut mid-way through the next event it writes
  // (a chunk holding the first half of the event's line, then the connection is
  // closed without the terminating chunk). Streams opened later are not affected.
  void CutWatches();
  // Forgets the event history up to now: a watch or list from an older
  // resourceVersion gets 410.
  void Compact();
  // Closes every open watch stream cleanly (as a server-side timeout would).
  void EndWatches();

  // Replaces the required bearer token ("" = accept any), e.g. to test token rotation.
  void SetToken(const std::string& token);

  std::vector<RequestRecord> Requests() const;
  int OpenWatches() const;
  // Called after every committed change, in resourceVersion order, with the type
  // ("ADDED", "MODIFIED", "DELETED") and the object (apiVersion/kind included), for
  // tests that emulate controllers (e.g. a fake kubelet). It runs on the server's one
  // notifier thread, after the change is visible and with no lock held, so it may
  // call Create/Update/UpdateStatus/Get/List/Delete on this server (their changes are
  // delivered after the current one). Keep it short; do not call Stop() or
  // SettleCallbacks() from it. Replaces any previous callback; nullptr removes it.
  void OnChange(std::function<void(const std::string& type, const Json& obj)> fn);
  // Waits until every change made so far has been passed to OnChange (and the
  // callbacks returned); false after timeout_s.
  bool SettleCallbacks(double timeout_s);

  // Closes the listener and every connection (open watches are cut) and joins every
  // server thread; bounded (well under a second). Idempotent. The direct-access
  // methods keep working afterwards; OnChange is no longer called.
  void Stop();

 private:
  FakeApiServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::k8s::testing
