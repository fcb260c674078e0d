// Test helper: validates Kubernetes objects against the official Kubernetes OpenAPI
// schema (v1.36.0, npm kubernetes-models 5.1.0) by running
// tools/k8s-schema/validate.mjs on node, with unknown fields rejected as by an API
// server with fieldValidation=Strict. TrainJobs are checked against TrainJobCrd()
// (added to the input when it holds no CRD for them); kinds outside Kubernetes with
// no CRD (Volcano's PodGroup) are skipped and listed in `skipped`.
//
// Blocking (runs one node process, bounded by `timeout_s`, always reaped);
// thread-safe (no shared state).
#pragma once

#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::trainjob::testing {

struct SchemaCheckOptions {
  // Directory holding validate.mjs and node_modules; "" = $BULWARK_K8S_SCHEMA_DIR, else
  // <source dir>/tools/k8s-schema.
  std::string tool_dir;
  double timeout_s = 120;
};

// OK when every object validates. InvalidArgument listing one problem per line
// ("Pod ml/job-node-0: spec.containers[0].imagePullPolicy: must be equal to one of the
// allowed values (...)"). FailedPrecondition when node or the npm packages are missing
// (the message says to run scripts/setup.sh), DeadlineExceeded on timeout.
// `skipped` (optional) receives the objects not checked, one line each.
Status ValidateK8sObjects(const std::vector<Json>& objects,
                          std::vector<std::string>* skipped = nullptr,
                          const SchemaCheckOptions& o = {});

}  // namespace bulwark::trainjob::testing
