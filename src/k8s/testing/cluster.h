// Test helpers over a real control plane (control_plane.h): the one control plane a
// test binary shares, objects addressed by their apiVersion/kind through an admin
// client, per-test namespaces, CRD builders and bounded polling. Test-only.
//
// A binary that uses SharedControlPlane() is registered with ctest as one test (not
// one per TEST), so its tests share one control plane and run in sequence; each test
// works in namespaces of its own (UniqueNamespace) and cluster-scoped names of its own.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/status.h"
#include "k8s/client.h"
#include "k8s/testing/control_plane.h"

namespace bulwark::k8s::testing {

// The binary's control plane: started on the first call with `opts` (later calls
// return the same one and ignore `opts`), stopped when the process exits. nullptr
// (after ADD_FAILURE with the reason) when it cannot start.
ControlPlane* SharedControlPlane(const ControlPlaneOptions& opts = {});

// The Resource of an object from its apiVersion and kind (the kinds the tests use;
// others: kind lower-cased + "s", namespaced).
Resource ResourceFor(const Json& obj);

// Objects by their apiVersion/kind through `client` (usually cluster-admin).
class Objects {
 public:
  explicit Objects(Client* client) : c_(client) {}
  Result<Json> Create(const Json& obj);
  Result<Json> Update(const Json& obj);        // PUT; metadata.resourceVersion is the precondition
  Result<Json> UpdateStatus(const Json& obj);  // PUT .../status
  Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name);
  // Every object of r in ns ("" = all), in the server's order; empty on error.
  std::vector<Json> List(const Resource& r, const std::string& ns = "");
  Status Delete(const Resource& r, const std::string& ns, const std::string& name);
  // The newest resourceVersion (a quorum LIST's).
  std::string CurrentResourceVersion();

 private:
  Client* c_;
};

// Creates namespace "<prefix>-<n>" (n unique in this process) with `labels`, waits until
// its `default` ServiceAccount exists when a controller manager runs (pod admission
// needs it), and returns its name.
Result<std::string> UniqueNamespace(Client* admin, const std::string& prefix,
                                    const std::map<std::string, std::string>& labels = {});

// A CustomResourceDefinition "<plural>.<group>" with one served storage version whose
// openAPIV3Schema is `schema`; `version_extra`'s keys (subresources,
// additionalPrinterColumns, ...) are added to that version.
Json CrdJson(const std::string& group, const std::string& plural, const std::string& kind,
             const std::string& version, const Json& schema,
             const Json& version_extra = Json::object(), const std::string& scope = "Namespaced");
// An object schema whose spec and status keep any fields.
Json OpenSpecStatusSchema();
// Creates (or replaces) a CRD and waits until the API server reports it Established.
Status InstallCrd(Client* admin, const Json& crd, double timeout_s = 30);

// Creates each object through `admin`, or replaces it (PUT, resourceVersion taken from
// the live object) when it exists — what `kubectl apply` does for these tests.
Status ApplyObjects(Client* admin, const std::vector<Json>& objects);

// Calls `cond` every 10 ms until it is true or `timeout_s` passes; its last value.
bool PollUntil(const std::function<bool()>& cond, double timeout_s = 10);

// Runs the cluster's kubectl (from the control plane's bin dir) with `args` against
// `kubeconfig`; returns its combined output, or an error with that output when it exits
// non-zero. Bounded by timeout_s.
Result<std::string> Kubectl(const ControlPlane& cp, const std::string& kubeconfig,
                            const std::vector<std::string>& args, double timeout_s = 60);

}  // namespace bulwark::k8s::testing
