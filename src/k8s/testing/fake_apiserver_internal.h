// Internal pieces of FakeApiServer shared by its .cc files: the API error type, small
// encoders, the resource registry entry, selectors, patches and the CRD schema check.
// Everything here is pure (no I/O, no shared state) and thread-safe to call.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace bulwark::k8s::testing::internal {

// ---- Errors (fake_apiserver_util.cc) -------------------------------------------------

// An error as kube-apiserver reports it: HTTP code, Status reason, message, details.
struct ApiError {
  int code = 500;
  std::string reason;  // "NotFound", "Conflict", "Invalid", "Expired", ...
  std::string message;
  Json details = Json::object();
  double retry_after_s = 0;  // > 0: a Retry-After header goes with the response
};

// Either a value or an ApiError. A value type; not thread-safe for concurrent mutation.
template <typename T>
class ApiOr {
 public:
  ApiOr(T v) : v_(std::move(v)) {}           // NOLINT(runtime/explicit)
  ApiOr(ApiError e) : err_(std::move(e)) {}  // NOLINT(runtime/explicit)
  bool ok() const { return v_.has_value(); }
  const ApiError& error() const { return err_; }
  T& value() { return *v_; }
  const T& value() const { return *v_; }
  T* operator->() { return &*v_; }
  T& operator*() { return *v_; }

 private:
  std::optional<T> v_;
  ApiError err_;
};

struct ResourceInfo;

// The Status object ({"kind":"Status",...}) for an error.
Json StatusJson(const ApiError& e);
// The Status a direct-access call returns: 404 -> kNotFound, 409 AlreadyExists ->
// kAlreadyExists, 409 -> kAborted, 410 -> kOutOfRange, 400/422 -> kInvalidArgument,
// 401/403 -> kPermissionDenied, 429/5xx -> kUnavailable; the message is the API's.
Status ToStatus(const ApiError& e);
ApiError ErrBadRequest(std::string message);
ApiError ErrNotFoundPath();  // "the server could not find the requested resource"
ApiError ErrNotFound(const ResourceInfo& r, const std::string& name);
ApiError ErrAlreadyExists(const ResourceInfo& r, const std::string& name);
ApiError ErrConflict(const ResourceInfo& r, const std::string& name, const std::string& why);
// 422 Invalid; each cause is {"reason","message","field"}.
ApiError ErrInvalid(const ResourceInfo& r, const std::string& name, std::vector<Json> causes);
Json Cause(const std::string& reason, const std::string& field, const std::string& message);
ApiError ErrExpired(std::string message);
ApiError ErrMethodNotAllowed();
ApiError ErrUnsupportedMediaType(std::string message);
ApiError ErrForbidden(const ResourceInfo& r, const std::string& name, const std::string& why);
// The response of an injected fault (FailNext) with this HTTP status.
ApiError ErrInjected(int http_status, double retry_after_s);

// ---- Encoders (fake_apiserver_util.cc) -----------------------------------------------

// j[key] when j is an object holding a string (resp. boolean) there, else "" (def):
// client JSON of the wrong type never throws.
std::string StrField(const Json& j, const char* key);
bool BoolField(const Json& j, const char* key, bool def);
// Serialises with invalid UTF-8 replaced (names from URLs may hold any bytes).
std::string Dump(const Json& j);

std::string NewUid();                      // random UUID v4
std::string RandomNameSuffix();            // 5 chars, as generateName uses
// url_safe: the URL alphabet without padding (continue tokens); else standard with '='.
std::string Base64Encode(const std::string& in, bool url_safe = true);
std::optional<std::string> Base64Decode(const std::string& in);
// Percent-decoding of one query component ('+' is a space, as Go's url.ParseQuery).
std::string UrlDecode(const std::string& s);
std::map<std::string, std::string> ParseQuery(const std::string& query);
// `s` quoted as Go's %q would for messages ("a\"b").
std::string Quote(const std::string& s);
std::string Lower(std::string s);        // ASCII lower case
std::string Trim(const std::string& s);  // without leading/trailing " \t\r"
// DNS-1123 subdomain (<= 253) / label (<= 63) checks; "" when valid, else the reason.
std::string CheckDnsSubdomain(const std::string& s);
std::string CheckDnsLabel(const std::string& s);
// Label key (optional DNS prefix + '/' + name <= 63) and value checks; "" when valid.
std::string CheckLabelKey(const std::string& s);
std::string CheckLabelValue(const std::string& s);

// ---- Resources (fake_apiserver_registry.cc) ------------------------------------------

// What create does with the status a client sends.
enum class CreateStatus { kKeep, kClear, kPodPending, kNamespaceActive };

// One additionalPrinterColumns entry of a CRD version.
struct PrinterColumn {
  std::string name, type, format, description;
  std::string json_path;  // ".status.phase", ".spec.items[0].name"
  int priority = 0;
};

// A served resource type: its names, versions and behaviour.
struct ResourceInfo {
  std::string group;  // "" = core
  std::string plural, singular, kind, list_kind;
  std::vector<std::string> versions;  // served versions; the storage version first
  bool namespaced = true;
  std::set<std::string> status_versions;  // versions with a /status subresource
  bool custom = false;                    // defined by a CRD (crd_name)
  std::string crd_name;
  bool unconditional_update = true;  // PUT without resourceVersion allowed
  CreateStatus create_status = CreateStatus::kKeep;
  bool dns_label_names = false;           // names must be DNS labels, not subdomains
  std::map<std::string, Json> schemas;    // custom: version -> openAPIV3Schema
  std::vector<std::string> field_labels;  // field-selector fields beyond metadata.*
  std::vector<std::string> short_names;
  // custom: version -> the CRD's additionalPrinterColumns (Table output)
  std::map<std::string, std::vector<PrinterColumn>> columns;

  std::string GroupResource() const;  // "pods", "trainjobs.bulwark.dev"
  std::string ApiVersion(const std::string& version) const;
  bool Serves(const std::string& version) const;
  bool HasStatus(const std::string& version) const { return status_versions.count(version) > 0; }
  // The kind with its group for Invalid messages: "Pod", "TrainJob.bulwark.dev".
  std::string QualifiedKind() const;
};

// The built-in resources the server serves from the start.
std::vector<ResourceInfo> BuiltinResources();
// The resource a CustomResourceDefinition defines; 422 naming the field when the CRD
// is not one the server can serve.
ApiOr<ResourceInfo> ResourceFromCrd(const ResourceInfo& crd_resource, const Json& crd);
// Discovery documents (/api, /apis, /api/v1, /apis/<g>, /apis/<g>/<v>) over `served`.
Json ApiVersionsJson(const std::string& host_port);
Json ApiGroupListJson(const std::vector<ResourceInfo>& served);
// 404 when no served resource has that group (and version, when not empty).
ApiOr<Json> ApiGroupJson(const std::vector<ResourceInfo>& served, const std::string& group);
ApiOr<Json> ApiResourceListJson(const std::vector<ResourceInfo>& served, const std::string& group,
                                const std::string& version);

// ---- Selectors (fake_apiserver_select.cc) --------------------------------------------

struct LabelRequirement {
  enum class Op { kEq, kNe, kIn, kNotIn, kExists, kNotExists, kGt, kLt };
  std::string key;
  Op op = Op::kEq;
  std::vector<std::string> values;
};

// A parsed labelSelector ("a=b,c in (x,y),!d"). Empty = everything.
struct LabelSelector {
  std::vector<LabelRequirement> reqs;
  bool Matches(const Json& obj) const;  // obj = a stored object (metadata.labels)
};
ApiOr<LabelSelector> ParseLabelSelector(const std::string& text);

// A parsed fieldSelector ("spec.nodeName=n1,status.phase!=Failed"). Empty = everything.
struct FieldSelector {
  struct Req {
    std::string field;
    bool negate = false;
    std::string value;
  };
  std::vector<Req> reqs;
  bool Matches(const Json& obj) const;
};
// 400 naming the field when `r` does not support it.
ApiOr<FieldSelector> ParseFieldSelector(const std::string& text, const ResourceInfo& r);

// ---- Patches (fake_apiserver_patch.cc) -----------------------------------------------

enum class PatchKind { kMerge, kStrategic, kJson };
// Applies `patch` (the request body) to `doc`. 400 for a malformed patch, 422 for a
// JSON patch whose operation does not apply (a failed "test", a missing path).
ApiOr<Json> ApplyPatch(const Json& doc, PatchKind kind, const std::string& patch);

// ---- Table output (fake_apiserver_table.cc) -------------------------------------------

enum class Rendering { kJson, kTable };
// Content negotiation on an Accept header: the first media range the server can
// produce, in the header's order. kTable for
// "application/json;as=Table;v=v1;g=meta.k8s.io" (v1beta1 too), as kubectl get asks;
// kJson for application/json without "as", application/*, */* or an empty header;
// 406 naming the header when nothing matches.
ApiOr<Rendering> NegotiateRendering(const std::string& accept);
// A meta.k8s.io/v1 Table of `objects` (rendered at `version`): a Name column, then the
// version's additionalPrinterColumns for custom resources (Age when it has none, and
// for built-in kinds, whose own printers are not reproduced). Cells follow the
// apiextensions table convertor: a missing field or a value of the wrong type is
// null, a date is the age relative to now_unix ("5m", "3h12m", "2d"). Rows carry
// PartialObjectMetadata (includeObject=Metadata, the default) or the whole object
// (includeObject=Object) or none (None).
Json ToTable(const ResourceInfo& r, const std::string& version, const std::vector<Json>& objects,
             const Json& list_metadata, const std::string& include_object, double now_unix);
// Kubernetes' HumanDuration: "45s", "2m5s", "17m", "3h12m", "2d5h", "400d", "3y20d".
std::string HumanDuration(double seconds);

// ---- CRD schema (fake_apiserver_schema.cc) -------------------------------------------

struct SchemaOutcome {
  std::vector<Json> causes;                 // Cause(...) per violation
  std::vector<std::string> unknown_fields;  // pruned paths, e.g. "spec.foo"
};
// Checks a custom object (without apiVersion/kind; metadata is not checked) against a
// structural openAPIV3Schema: prunes unknown fields (recording them), applies
// defaults, then validates. `obj` is modified in place.
void CheckCustomObject(const Json& schema, Json* obj, SchemaOutcome* out);

}  // namespace bulwark::k8s::testing::internal
