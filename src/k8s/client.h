// Kubernetes API client: the REST protocol of kube-apiserver over HTTPS (libcurl),
// for the operator (src/operator) and `bulwark submit`. docs/kubernetes.md has the
// semantics it relies on and what the contract suite checks.
//
// Contracts:
//  * Every public method returns Status/Result and never throws.
//  * Client is thread-safe: any method may be called from any thread concurrently
//    (one curl handle per in-flight request, pooled).
//  * Every request has a deadline (ClientConfig::timeout_s; a watch has its own
//    server-side timeoutSeconds plus a client idle timeout) and is attempted at most
//    max_attempts times, with exponential backoff and jitter, on connection errors,
//    timeouts, 429 and 500/502/503/504. A 429 or 503 with Retry-After waits that long
//    (capped by backoff_max_s) instead. Mutations are retried only when the request
//    cannot have been applied (no connection was made, 429, 503); other failures of
//    POST/PUT/PATCH/DELETE surface to the caller, who re-reads. Failures that would
//    repeat (TLS verification, bad URL) are not retried.
//  * Errors carry the verb, the path, the HTTP status and the API's Status reason and
//    message, e.g. "PUT /apis/bulwark.dev/v1alpha1/namespaces/ml/trainjobs/a: 409
//    Conflict: the object has been modified; please apply your changes to the latest
//    version and try again". HTTP status -> Code:
//      400, 422 (Invalid)            -> kInvalidArgument
//      401, 403                      -> kPermissionDenied
//      404                           -> kNotFound
//      409 reason AlreadyExists      -> kAlreadyExists
//      409 (Conflict, stale resourceVersion) -> kAborted
//      410 (Gone / Expired)          -> kOutOfRange
//      429, 5xx, connection errors after the last attempt -> kUnavailable
//      a timeout on the last attempt -> kDeadlineExceeded
//    IsConflict / IsGone / IsNotFound below test for these.
//  * A 401 with a token_file re-reads the file once and retries (projected service
//    account tokens rotate).
//  * Objects are nlohmann::json (common/json_util.h's Json) exactly as the API sends
//    them; the client never drops unknown fields. (List restores the apiVersion and
//    kind the API omits on list items.)
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/status.h"

namespace bulwark::k8s {

struct ClientConfig {
  std::string server;           // "https://10.96.0.1:443" (no trailing '/')
  std::string ca_pem;           // PEM of the CA that signed the server's cert
  std::string client_cert_pem;  // client certificate (kubeconfig client-certificate[-data])
  std::string client_key_pem;   // its key
  std::string token;            // bearer token ("" = none)
  std::string token_file;       // re-read on 401 when set
  bool insecure_skip_tls_verify = false;
  std::string namespace_ = "default";  // the context's (or service account's) namespace
  std::string user_agent = "bulwark";
  double timeout_s = 30;           // whole request, per attempt (not watches)
  double connect_timeout_s = 10;   // TCP + TLS handshake, per attempt
  int max_attempts = 5;            // >= 1
  double backoff_initial_s = 0.2;  // first retry after ~this (jittered in [50%, 100%])
  double backoff_max_s = 10;       // cap of one wait, Retry-After included
  // Source of time for backoff and Retry-After waits, which are this clock's SleepFor
  // (a FakeClock moves itself forward: no real time passes); nullptr = SystemClock.
  // Not owned.
  const Clock* clock = nullptr;
};

// Reads a kubeconfig file (YAML): the named context, else current-context. Resolves
// relative certificate/key/CA/token file paths against the file's directory, reads
// *-data fields (base64), token and tokenFile. Unsupported auth (exec, auth-provider)
// is an error that names the user entry and says to use a token or certificate.
// Errors name the file, the field path and the fix.
Result<ClientConfig> LoadKubeConfig(const std::string& path, const std::string& context = "");
// The in-cluster config: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
// token (as token_file), ca.crt and namespace from `sa_dir`.
Result<ClientConfig> InClusterConfig(
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// A resource type. group "" is the core API (/api/v1), else /apis/<group>/<version>.
struct Resource {
  std::string group;
  std::string version;
  std::string plural;  // "pods"
  std::string kind;    // "Pod" (messages, synthesised objects)
  bool namespaced = true;

  std::string ApiVersion() const;  // "v1" or "group/version"
  // Collection or object path: ns "" on a namespaced resource = all namespaces
  // (collection only). sub = "status", ... (object only).
  std::string Path(const std::string& ns, const std::string& name = "",
                   const std::string& sub = "") const;
};

// The resources Bulwark uses.
const Resource& Pods();
const Resource& Nodes();
const Resource& Services();
const Resource& Events();                     // core/v1 Events (what `kubectl describe` shows)
const Resource& Leases();                     // coordination.k8s.io/v1
const Resource& TrainJobs();                  // bulwark.dev/v1alpha1
const Resource& CustomResourceDefinitions();  // apiextensions.k8s.io/v1
const Resource& PodGroups();                  // scheduling.volcano.sh/v1beta1 (gang delegation)

struct ListOptions {
  std::string label_selector;  // "a=b,c in (x,y),!d"
  std::string field_selector;  // "spec.nodeName=n1"
  // "" = most recent (quorum read); "0" = any (served from cache).
  std::string resource_version;
  int64_t limit = 500;  // page size; List follows continue tokens until done
  // Aborts the list (kUnavailable, "cancelled") within ~50 ms once true, backoff
  // waits included; nullptr = never. Not owned (the informer passes its stop flag).
  const std::atomic<bool>* cancel = nullptr;
};

struct ListResult {
  std::vector<Json> items;
  std::string resource_version;  // the list's metadata.resourceVersion
};

enum class EventType { kAdded, kModified, kDeleted, kBookmark, kError };
const char* EventTypeName(EventType t);  // "ADDED", ...

struct WatchEvent {
  EventType type = EventType::kAdded;
  Json object;  // the object; for kBookmark only metadata.resourceVersion; for kError a Status
};

struct WatchOptions {
  std::string resource_version;  // watch changes after this version ("" = from now)
  std::string label_selector;
  std::string field_selector;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;   // server ends the watch after this (jittered by the caller)
  double idle_timeout_s = 90;  // no byte received for this long: the stream is dead
};

enum class PatchType { kMerge, kStrategicMerge, kJson };

struct DeleteOptions {
  int64_t grace_period_seconds = -1;  // -1 = the object's default
  std::string propagation_policy;     // "", "Foreground", "Background", "Orphan"
  std::string precondition_uid;       // delete only this incarnation ("" = any)
  std::string precondition_resource_version;
};

struct ClientStats {
  uint64_t requests = 0;  // HTTP attempts sent (watches included)
  uint64_t retries = 0;
  uint64_t watch_events = 0;
};

bool IsConflict(const Status& s);  // 409 stale resourceVersion
bool IsGone(const Status& s);      // 410: resourceVersion too old, relist
bool IsNotFound(const Status& s);
bool IsAlreadyExists(const Status& s);

class Client {
 public:
  // Validates cfg (errors name the field) and parses the PEMs. Does no network I/O
  // (reads token_file when token is empty).
  static Result<std::unique_ptr<Client>> Create(ClientConfig cfg);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Namespaced object verbs (Get/Create/Update/Patch/Delete) given ns "" use the
  // object's metadata.namespace (Create/Update) or else cfg.namespace_; List and
  // Watch given ns "" span all namespaces.
  const ClientConfig& config() const { return cfg_; }
  ClientStats Stats() const;

  Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name);
  // Every page (continue tokens), as one result. ns "" = all namespaces.
  Result<ListResult> List(const Resource& r, const std::string& ns, const ListOptions& o = {});
  Result<Json> Create(const Resource& r, const std::string& ns, const Json& obj);
  // PUT of the whole object; its metadata.resourceVersion is the precondition (409 ->
  // kAborted when stale). UpdateStatus PUTs the status subresource.
  Result<Json> Update(const Resource& r, const std::string& ns, const Json& obj);
  Result<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& obj);
  Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                     const Json& patch, PatchType type = PatchType::kMerge,
                     const std::string& subresource = "");
  // kNotFound when absent (callers that do not care test IsNotFound).
  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& o = {});

  // Read-modify-write with the optimistic-concurrency loop: Get, mutate, Update (or
  // UpdateStatus); on 409 Conflict re-read and mutate again, up to `attempts` times.
  // mutate returns non-OK to abort (that Status is returned); returning OK without
  // changing the object skips the write and returns the object read.
  Result<Json> UpdateWithRetry(const Resource& r, const std::string& ns, const std::string& name,
                               const std::function<Status(Json&)>& mutate, bool status = false,
                               int attempts = 8);

  // Runs one watch stream on the calling thread until the server ends it (OK), the
  // stream fails (kUnavailable: cut, idle timeout, connection error; a partial last
  // line is discarded, never delivered), the start version is too old (kOutOfRange:
  // either HTTP 410 or an ERROR event with code 410), `cancel` becomes true (OK,
  // within ~100 ms), or on_event returns false (OK). Events are delivered in order;
  // ERROR events other than 410 end the watch with the Status they carry. A failed
  // watch is not retried here: Informer does that.
  Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>* cancel = nullptr);

 private:
  struct Impl;
  Client(ClientConfig cfg, std::unique_ptr<Impl> impl);
  // PUT of obj to its object path (+ "/" + sub).
  Result<Json> Put(const Resource& r, const std::string& ns, const Json& obj,
                   const std::string& sub);
  ClientConfig cfg_;
  std::unique_ptr<Impl> impl_;
};

// Object helpers.
std::string Namespace(const Json& obj);        // metadata.namespace or ""
std::string Name(const Json& obj);             // metadata.name or ""
std::string ResourceVersion(const Json& obj);  // metadata.resourceVersion or ""
std::string Uid(const Json& obj);
// "ns/name", or "name" for cluster-scoped objects (the informer's cache key).
std::string KeyOf(const Json& obj);
// Parses RFC 3339 / RFC 3339 with fractional seconds; kInvalidArgument otherwise.
Result<double> ParseRfc3339(const std::string& s);

}  // namespace bulwark::k8s
