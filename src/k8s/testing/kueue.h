// Kueue (sigs.k8s.io/kueue, the real controller manager, built with its manifests by
// `scripts/k8s-control-plane.sh --kueue`) on a running ControlPlane, for the operator's
// `scheduling.gang: kueue` end-to-end test. Test infrastructure only.
//
// Start() installs Kueue's CRDs, issues a serving certificate for its webhook server
// (the test PKI, SAN 127.0.0.1), writes a Kueue Configuration (internal certificate
// management off, the webhook on 127.0.0.1:<free port>, health probes on another, no
// metrics or visibility server, no leader election, the "pod" integration for the
// namespaces labelled `namespace_label`), creates Kueue's Mutating and Validating
// WebhookConfigurations (the pod webhooks and those of Kueue's own kinds, from its
// manifests) pointing at https://127.0.0.1:<port><path> with the CA, starts `kueue`
// through ControlPlane::StartCommand and returns once its readiness probe answers 200.
//
// With internal certificate management off, Kueue v0.17 reads its metrics server's
// certificate from the fixed path /etc/kueue/metrics/certs (cmd/kueue/main.go) even when
// metrics are disabled. Rather than writing into the machine's /etc, Kueue runs in a
// private mount namespace (util-linux `unshare`; with a user namespace when not root)
// whose /etc is an overlay holding that directory; nothing outside the process sees it.
//
// Stop() (also the destructor) deletes the webhook configurations — pods are then
// admitted without Kueue again — and stops the process. The CRDs stay (cluster-scoped,
// harmless; a later Start replaces them). Kube-scheduler is not started here: Kueue
// only ungates admitted pods (ControlPlane::StartScheduler binds them).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "k8s/client.h"
#include "k8s/testing/control_plane.h"

namespace bulwark::k8s::testing {

// Kueue's kinds (kueue.x-k8s.io/v1beta2).
Resource KueueResourceFlavors();
Resource KueueClusterQueues();
Resource KueueLocalQueues();
Resource KueueWorkloads();

struct KueueOptions {
  // Kueue manages the pods of the namespaces labelled namespace_label=namespace_value
  // (its managedJobsNamespaceSelector and its pod webhooks' namespaceSelector): other
  // tests' pods never reach its webhooks.
  std::string namespace_label = "bulwark.dev/kueue";
  std::string namespace_value = "enabled";
  // The kueue binary and the manifests: "" = <bin_dir>/kueue and <bin_dir>/../kueue.
  std::string binary;
  std::string manifests_dir;
  double start_timeout_s = 90;
};

class Kueue {
 public:
  static Result<std::unique_ptr<Kueue>> Start(ControlPlane* cp, KueueOptions opts = {});
  ~Kueue();
  Kueue(const Kueue&) = delete;
  Kueue& operator=(const Kueue&) = delete;

  // The version the manifests came with ("v0.17.0").
  const std::string& version() const { return version_; }
  // "https://127.0.0.1:PORT": the webhook server.
  const std::string& webhook_url() const { return webhook_url_; }
  std::string LogTail(size_t bytes = 4000) const;
  // Deletes the webhook configurations and stops kueue. Idempotent.
  void Stop();

  static constexpr const char* kComponent = "kueue";  // its ControlPlane component name
  static constexpr const char* kMutatingWebhook = "kueue-mutating-webhook-configuration";
  static constexpr const char* kValidatingWebhook = "kueue-validating-webhook-configuration";

 private:
  Kueue(ControlPlane* cp, KueueOptions opts) : cp_(cp), opts_(std::move(opts)) {}
  Status StartAll();

  ControlPlane* cp_;
  KueueOptions opts_;
  std::string version_, webhook_url_, dir_;
  bool running_ = false;
};

}  // namespace bulwark::k8s::testing
