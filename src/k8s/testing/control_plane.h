// ControlPlane: a real Kubernetes control plane on loopback for tests — etcd,
// kube-apiserver (RBAC authorization; client-certificate, bearer-token and
// service-account authentication; a service-account issuer with its own keys),
// optionally kube-controller-manager (garbage collector, namespace and service-account
// controllers), kube-scheduler and KWOK — in the manner of controller-runtime's envtest.
// The binaries are built from the Go module proxy by scripts/k8s-control-plane.sh into a
// versioned cache outside the repository; nothing here is product code.
//
// Contracts:
//  * Start() returns once kube-apiserver answers /readyz (and every optional component
//    has started), or an error that names the component and ends with its log's tail.
//  * Every process is spawned in its own process group with PR_SET_PDEATHSIG, and Stop()
//    (also run by the destructor) terminates and reaps every one of them and removes the
//    working directory (kept when BULWARK_KEEP_CONTROL_PLANE is set). Every wait is
//    bounded.
//  * Thread-safe after Start(): the accessors are const; Start*/Stop are serialised.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/json_util.h"
#include "common/proc.h"
#include "common/status.h"
#include "k8s/client.h"
#include "k8s/testing/pki.h"

namespace bulwark::k8s::testing {

struct ControlPlaneOptions {
  std::string bin_dir;   // "" = FindControlPlaneBinaries()
  std::string work_dir;  // "" = a fresh directory under $TMPDIR (or /tmp)
  // kube-controller-manager with `controllers` (the garbage collector for owner
  // references, the namespace controller for namespace deletion, the service-account
  // controller for each namespace's `default` ServiceAccount, which pod admission needs).
  bool controller_manager = true;
  std::vector<std::string> controllers = {"garbage-collector-controller", "namespace-controller",
                                          "serviceaccount-controller"};
  bool scheduler = false;                    // kube-scheduler (binds unbound pods)
  std::vector<std::string> apiserver_flags;  // extra kube-apiserver flags
  // Audit every request at level Metadata into audit_log_path() (JSON lines): who
  // called which verb on which resource, and the answer's code.
  bool audit = false;
  double start_timeout_s = 120;
};

struct ComponentInfo {
  std::string name;  // "etcd", "kube-apiserver", ...
  pid_t pid = -1;
  std::string log_path;
};

class ControlPlane {
 public:
  static Result<std::unique_ptr<ControlPlane>> Start(ControlPlaneOptions opts = {});
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  const std::string& url() const { return url_; }  // "https://127.0.0.1:PORT"
  const std::string& ca_pem() const { return ca_.cert_pem; }
  const std::string& bin_dir() const { return opts_.bin_dir; }
  const std::string& work_dir() const { return opts_.work_dir; }
  // cluster-admin through a client certificate in group system:masters.
  ClientConfig AdminConfig() const;
  // A kubeconfig for AdminConfig() (for kubectl, KWOK, the other components).
  const std::string& admin_kubeconfig() const { return admin_kubeconfig_; }
  // A client certificate for user `user` in `groups`, signed by the cluster CA (RBAC
  // then decides what it may do).
  Result<ClientConfig> UserConfig(const std::string& user,
                                  const std::vector<std::string>& groups = {}) const;
  // A bound token for ServiceAccount ns/name from the TokenRequest API (the account
  // must exist); the config authenticates as system:serviceaccount:ns:name.
  Result<ClientConfig> ServiceAccountConfig(const std::string& ns, const std::string& name,
                                            int expiration_s = 3600) const;
  // Writes a kubeconfig for `cfg` (certificates and token inline).
  static Status WriteKubeconfig(const std::string& path, const ClientConfig& cfg);

  // etcd: its client URL, its current revision (= the API's newest resourceVersion) and
  // a compaction of its history up to `revision` (watches and lists from an older
  // resourceVersion that reach etcd get 410 Gone).
  const std::string& etcd_url() const { return etcd_url_; }
  Result<int64_t> EtcdRevision() const;
  Status CompactEtcd(int64_t revision) const;

  // Starts kube-scheduler if it is not running.
  Status StartScheduler();
  // Starts a component binary of bin_dir with `args` (its log in the working dir) and
  // keeps it until Stop(); for KWOK and other test-only controllers.
  Result<ComponentInfo> StartExtra(const std::string& name, const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& env = {});
  // StartExtra for a command line of its own (argv[0] a path): a component that runs
  // under a wrapper, e.g. Kueue in a mount namespace (kueue.h).
  Result<ComponentInfo> StartCommand(const std::string& name, const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& env = {});
  // Stops one component started by StartExtra (SIGTERM, then SIGKILL after grace_s).
  // Check() does not report a component stopped this way.
  Status StopExtra(const std::string& name, double grace_s = 5);

  // The audit log (ControlPlaneOptions::audit), one JSON event per line.
  std::string audit_log_path() const { return opts_.work_dir + "/audit.log"; }
  // The audit events so far whose user is `username` (e.g.
  // "system:serviceaccount:ns:name"), oldest first.
  std::vector<Json> AuditEvents(const std::string& username) const;

  // Every component and whether it is alive; "" when all are, else which exited how.
  std::string Check();
  std::vector<ComponentInfo> Components() const;
  // The last `bytes` of a component's log.
  std::string LogTail(const std::string& name, size_t bytes = 4000) const;

  // Terminates and reaps every component (apiserver and controllers first, etcd last)
  // and removes the working directory. Idempotent.
  void Stop();

 private:
  explicit ControlPlane(ControlPlaneOptions opts) : opts_(std::move(opts)) {}
  Status StartAll();
  Result<ComponentInfo> Launch(const std::string& name, const std::string& binary,
                               const std::vector<std::string>& args,
                               const std::map<std::string, std::string>& env);
  Status WaitReady(const std::string& name, const std::string& url, double timeout_s,
                   bool with_client_cert);
  Status WriteFile(const std::string& name, const std::string& content);

  struct Proc {
    ComponentInfo info;
    Child child;
    std::string exit;      // how it ended, once reaped
    bool stopped = false;  // by StopExtra: not a failure
  };

  ControlPlaneOptions opts_;
  bool owns_work_dir_ = false;
  std::string url_, etcd_url_, admin_kubeconfig_;
  KeyPair ca_, admin_;
  mutable std::mutex mu_;
  std::vector<Proc> procs_;  // in start order; guarded by mu_
};

// The directory holding the control-plane binaries: $BULWARK_K8S_BIN when set, else
// what `scripts/k8s-control-plane.sh --print` reports. The error says how to build them.
Result<std::string> FindControlPlaneBinaries();

}  // namespace bulwark::k8s::testing
