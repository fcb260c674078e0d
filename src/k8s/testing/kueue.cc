#include "k8s/testing/kueue.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/clock.h"
#include "common/curl_util.h"
#include "common/net.h"
#include "k8s/testing/cluster.h"
#include "k8s/testing/pki.h"

namespace bulwark::k8s::testing {

namespace {

constexpr const char* kKueueGroup = "kueue.x-k8s.io";
constexpr const char* kKueueVersion = "v1beta2";

std::string KueueBase64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

size_t KueueDiscard(char*, size_t size, size_t n, void*) { return size * n; }

// The HTTP status of GET `url` (TLS not verified: Kueue's probe port is plain HTTP and
// this only asks whether it answers), or 0 when nothing answered within 2 s.
long KueueProbe(const std::string& url) {  // NOLINT(runtime/int)
  if (!curl::GlobalInit().ok()) return 0;
  CURL* h = curl_easy_init();
  if (h == nullptr) return 0;
  char err[CURL_ERROR_SIZE];
  curl::ResetWithBaseOptions(h, url, err);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, KueueDiscard);
  long code = 0;  // NOLINT(runtime/int)
  if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(h);
  return code;
}

Status KueueWriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) return Internal("cannot write " + path);
  return Status::Ok();
}

// The top-level JSON objects of `text`, one after another (what `kubectl -o json`
// prints for several documents); text outside them (a warning line) is skipped.
std::vector<Json> KueueJsonObjects(const std::string& text) {
  std::vector<Json> out;
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"' && depth > 0) {
      in_string = true;
    } else if (c == '{') {
      if (depth++ == 0) start = i;
    } else if (c == '}' && depth > 0 && --depth == 0) {
      Json j = Json::parse(text.substr(start, i + 1 - start), nullptr, false);
      if (j.is_object()) out.push_back(std::move(j));
    }
  }
  return out;
}

// The objects of the YAML manifests at `path` (a file or a directory), as the real
// kubectl reads them (`kubectl create --dry-run=client -o json`): no YAML parser of ours.
Result<std::vector<Json>> KueueManifests(const ControlPlane& cp, const std::string& path) {
  BW_ASSIGN_OR_RETURN(std::string out,
                      Kubectl(cp, cp.admin_kubeconfig(),
                              {"create", "--dry-run=client", "-o", "json", "-f", path}, 120));
  std::vector<Json> items;
  for (Json& j : KueueJsonObjects(out)) {
    if (j.value("kind", "") != "List") {
      items.push_back(std::move(j));
      continue;
    }
    for (Json& o : j["items"]) items.push_back(std::move(o));
  }
  if (items.empty()) {
    return Internal("kubectl did not print the objects of " + path +
                    " as JSON: " + out.substr(0, 500));
  }
  return items;
}

// Whether a webhook of Kueue's manifests is one this fixture serves: the pod webhooks
// (the "pod" integration) and those of Kueue's own kinds. The other integrations'
// (Jobs, Deployments, JobSets, Ray, Kubeflow, ...) are left out: Kueue does not enable
// them here, and their kinds are not installed.
bool KueueWanted(const Json& webhook) {
  if (!webhook.contains("rules")) return false;
  for (const Json& rule : webhook["rules"]) {
    for (const Json& g : rule.value("apiGroups", Json::array())) {
      if (g == "" || g == kKueueGroup) return true;
    }
  }
  return false;
}

bool KueuePodWebhook(const Json& webhook) {
  for (const Json& rule : webhook["rules"]) {
    for (const Json& r : rule.value("resources", Json::array())) {
      if (r == "pods") return true;
    }
  }
  return false;
}

}  // namespace

Resource KueueResourceFlavors() {
  return {kKueueGroup, kKueueVersion, "resourceflavors", "ResourceFlavor", false};
}
Resource KueueClusterQueues() {
  return {kKueueGroup, kKueueVersion, "clusterqueues", "ClusterQueue", false};
}
Resource KueueLocalQueues() {
  return {kKueueGroup, kKueueVersion, "localqueues", "LocalQueue", true};
}
Resource KueueWorkloads() { return {kKueueGroup, kKueueVersion, "workloads", "Workload", true}; }

Result<std::unique_ptr<Kueue>> Kueue::Start(ControlPlane* cp, KueueOptions opts) {
  if (opts.binary.empty()) opts.binary = cp->bin_dir() + "/kueue";
  if (opts.manifests_dir.empty()) opts.manifests_dir = cp->bin_dir() + "/../kueue";
  std::unique_ptr<Kueue> k(new Kueue(cp, std::move(opts)));
  Status s = k->StartAll();
  if (!s.ok()) {
    k->Stop();
    return s;
  }
  return k;
}

Kueue::~Kueue() { Stop(); }

std::string Kueue::LogTail(size_t bytes) const { return cp_->LogTail(kComponent, bytes); }

Status Kueue::StartAll() {
  namespace fs = std::filesystem;
  const std::string& m = opts_.manifests_dir;
  if (!fs::exists(opts_.binary) || !fs::exists(m + "/VERSION")) {
    return NotFound("Kueue is not built (no " + opts_.binary + " or " + m +
                    "/VERSION): run scripts/k8s-control-plane.sh --kueue once (it builds "
                    "sigs.k8s.io/kueue from the Go module proxy into the control plane's cache)");
  }
  {
    std::ifstream in(m + "/VERSION");
    std::getline(in, version_);
  }
  BW_ASSIGN_OR_RETURN(std::unique_ptr<Client> admin, Client::Create(cp_->AdminConfig()));

  // Kueue's CRDs, as its manifests have them (v1beta2 is the storage version; nothing
  // here asks for v1beta1, so no conversion webhook is configured).
  BW_ASSIGN_OR_RETURN(std::vector<Json> crds, KueueManifests(*cp_, m + "/crd"));
  if (crds.empty()) return NotFound("no CRDs in " + m + "/crd");
  for (const Json& crd : crds) BW_RETURN_IF_ERROR(InstallCrd(admin.get(), crd, 60));

  // The webhook server's certificate (the same serves the metrics watcher's path).
  dir_ = cp_->work_dir() + "/kueue";
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_ + "/certs", ec);
  fs::create_directories(dir_ + "/etc-overlay", ec);
  if (ec) return Internal("cannot create " + dir_ + ": " + ec.message());
  BW_ASSIGN_OR_RETURN(KeyPair ca, MakeCa("bulwark-test-kueue-webhook-ca"));
  BW_ASSIGN_OR_RETURN(
      KeyPair serving,
      IssueCert(ca, {"kueue-webhook-service", {}, {"localhost"}, {"127.0.0.1"}, true, false}));
  BW_RETURN_IF_ERROR(KueueWriteFile(dir_ + "/certs/tls.crt", serving.cert_pem));
  BW_RETURN_IF_ERROR(KueueWriteFile(dir_ + "/certs/tls.key", serving.key_pem));
  BW_RETURN_IF_ERROR(KueueWriteFile(dir_ + "/certs/ca.crt", ca.cert_pem));

  BW_ASSIGN_OR_RETURN(int webhook_port, PickFixturePort("127.0.0.1"));
  BW_ASSIGN_OR_RETURN(int health_port, PickFixturePort("127.0.0.1"));
  webhook_url_ = "https://127.0.0.1:" + std::to_string(webhook_port);
  const Json selector = {{"matchLabels", {{opts_.namespace_label, opts_.namespace_value}}}};
  // Kueue reads YAML; JSON is YAML.
  const Json config = {
      {"apiVersion", "config.kueue.x-k8s.io/v1beta2"},
      {"kind", "Configuration"},
      {"namespace", "kueue-system"},
      {"manageJobsWithoutQueueName", false},
      {"managedJobsNamespaceSelector", selector},
      {"internalCertManagement", {{"enable", false}}},
      {"webhook", {{"host", "127.0.0.1"}, {"port", webhook_port}, {"certDir", dir_ + "/certs"}}},
      {"metrics", {{"bindAddress", "0"}}},
      {"health", {{"healthProbeBindAddress", "127.0.0.1:" + std::to_string(health_port)}}},
      {"leaderElection", {{"leaderElect", false}}},
      {"integrations", {{"frameworks", {"pod"}}}},
      // Its aggregated API server (pending workloads) is not needed and would bind :8082.
      {"featureGates", {{"VisibilityOnDemand", false}}}};
  BW_RETURN_IF_ERROR(KueueWriteFile(dir_ + "/config.yaml", config.dump(2)));

  // The webhook configurations of Kueue's manifests, served on loopback.
  BW_ASSIGN_OR_RETURN(std::vector<Json> hooks, KueueManifests(*cp_, m + "/webhook/manifests.yaml"));
  std::vector<Json> configs;
  for (Json cfg : hooks) {
    const std::string kind = cfg.value("kind", "");
    if (kind != "MutatingWebhookConfiguration" && kind != "ValidatingWebhookConfiguration") {
      continue;
    }
    cfg["metadata"] = {
        {"name", kind == "MutatingWebhookConfiguration" ? kMutatingWebhook : kValidatingWebhook}};
    Json kept = Json::array();
    for (Json w : cfg["webhooks"]) {
      if (!KueueWanted(w)) continue;
      const std::string path = w["clientConfig"]["service"].value("path", "");
      w["clientConfig"] = {{"url", webhook_url_ + path}, {"caBundle", KueueBase64(ca.cert_pem)}};
      if (KueuePodWebhook(w)) w["namespaceSelector"] = selector;
      w["timeoutSeconds"] = 10;
      kept.push_back(std::move(w));
    }
    cfg["webhooks"] = std::move(kept);
    configs.push_back(std::move(cfg));
  }
  if (configs.size() != 2) {
    return Internal("expected a Mutating and a Validating WebhookConfiguration in " + m +
                    "/webhook/manifests.yaml, found " + std::to_string(configs.size()));
  }

  // Kueue's process: /etc/kueue/metrics/certs exists only in its mount namespace.
  std::string unshare;
  for (const char* p : {"/usr/bin/unshare", "/bin/unshare"}) {
    if (fs::exists(p)) unshare = p;
  }
  if (unshare.empty()) {
    return NotFound("util-linux's unshare is not installed (Kueue runs in a mount namespace)");
  }
  std::vector<std::string> argv = {unshare, "--mount", "--propagation", "private"};
  if (geteuid() != 0) argv.insert(argv.begin() + 1, {"--user", "--map-root-user"});
  const char* script =
      "set -e; d=$1; shift\n"
      "mount -t tmpfs -o mode=0700 bulwark-kueue-etc \"$d/etc-overlay\"\n"
      "mkdir \"$d/etc-overlay/upper\" \"$d/etc-overlay/work\"\n"
      "mount -t overlay overlay -o \"lowerdir=/etc,upperdir=$d/etc-overlay/upper,"
      "workdir=$d/etc-overlay/work\" /etc\n"
      "mkdir -p /etc/kueue/metrics/certs\n"
      "cp \"$d/certs/tls.crt\" \"$d/certs/tls.key\" /etc/kueue/metrics/certs/\n"
      "exec \"$@\"\n";
  argv.insert(argv.end(), {"/bin/sh", "-c", script, "sh", dir_, opts_.binary,
                           "--config=" + dir_ + "/config.yaml",
                           "--kubeconfig=" + cp_->admin_kubeconfig(), "--zap-log-level=3"});

  // The webhook configurations go in before Kueue runs (the API server calls it from its
  // first admitted pod on); failurePolicy Fail, so pods of labelled namespaces wait.
  BW_RETURN_IF_ERROR(ApplyObjects(admin.get(), configs));
  running_ = true;
  BW_RETURN_IF_ERROR(cp_->StartCommand(kComponent, argv).status());
  const std::string readyz = "http://127.0.0.1:" + std::to_string(health_port) + "/readyz";
  const double deadline = SystemClock::Get()->NowMono() + opts_.start_timeout_s;
  long code = 0;  // NOLINT(runtime/int)
  while ((code = KueueProbe(readyz)) != 200) {
    const std::string dead = cp_->Check();
    if (dead.find(std::string(kComponent) + " exited") != std::string::npos) {
      return Unavailable("kueue did not start: " + dead + "\n--- kueue log ---\n" + LogTail());
    }
    if (SystemClock::Get()->NowMono() > deadline) {
      return DeadlineExceeded("kueue not ready within " + std::to_string(opts_.start_timeout_s) +
                              " s (" + readyz + ": " + std::to_string(code) +
                              ")\n--- kueue log ---\n" + LogTail());
    }
    PollReadable({}, 0.1);
  }
  return Status::Ok();
}

void Kueue::Stop() {
  if (!running_) return;
  running_ = false;
  auto admin = Client::Create(cp_->AdminConfig());
  if (admin.ok()) {
    const Resource mutating{"admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                            "MutatingWebhookConfiguration", false};
    const Resource validating{"admissionregistration.k8s.io", "v1",
                              "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
                              false};
    (void)(*admin)->Delete(mutating, "", kMutatingWebhook);
    (void)(*admin)->Delete(validating, "", kValidatingWebhook);
  }
  (void)cp_->StopExtra(kComponent);
}

}  // namespace bulwark::k8s::testing
