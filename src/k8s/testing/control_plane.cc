#include "k8s/testing/control_plane.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "common/curl_util.h"
#include "common/net.h"
#include "common/run.h"

namespace bulwark::k8s::testing {

namespace {

namespace fs = std::filesystem;

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

size_t Collect(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

struct HttpReply {
  long code = 0;  // NOLINT(runtime/int)
  std::string body;
  std::string error;
};

// One blocking HTTP(S) request with a 5 s deadline, for readiness probes and etcd's
// JSON gateway. TLS is verified against ca_pem when given, else not verified (the
// probes of components that serve a self-signed certificate).
HttpReply Http(const std::string& method, const std::string& url, const std::string& body,
               const std::string& ca_pem = "", const KeyPair* client = nullptr) {
  HttpReply r;
  if (!curl::GlobalInit().ok()) {
    r.error = "curl_global_init failed";
    return r;
  }
  CURL* h = curl_easy_init();
  if (h == nullptr) {
    r.error = "curl_easy_init failed";
    return r;
  }
  char err[CURL_ERROR_SIZE];
  curl::ResetWithBaseOptions(h, url, err);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
  curl::HeaderList headers;
  if (!body.empty()) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));  // NOLINT
    headers.Add("Content-Type: application/json");
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  curl_blob ca{const_cast<char*>(ca_pem.data()), ca_pem.size(), CURL_BLOB_COPY};
  if (!ca_pem.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  } else {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_blob cert{}, key{};
  if (client != nullptr) {
    cert = {const_cast<char*>(client->cert_pem.data()), client->cert_pem.size(), CURL_BLOB_COPY};
    key = {const_cast<char*>(client->key_pem.data()), client->key_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
  CURLcode c = curl_easy_perform(h);
  if (c != CURLE_OK) {
    r.error = err[0] ? err : curl_easy_strerror(c);
  } else {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.code);
  }
  curl_easy_cleanup(h);
  return r;
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from =
      std::max<std::streamoff>(0, size - static_cast<std::streamoff>(bytes));
  in.seekg(from);
  std::string out(static_cast<size_t>(size - from), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

}  // namespace

Result<std::string> FindControlPlaneBinaries() {
  const char* env = std::getenv("BULWARK_K8S_BIN");
  if (env != nullptr && *env != '\0') {
    if (!fs::exists(fs::path(env) / "kube-apiserver")) {
      return NotFound(std::string("BULWARK_K8S_BIN=") + env +
                      " holds no kube-apiserver; unset it or run scripts/k8s-control-plane.sh");
    }
    return std::string(env);
  }
  const std::string script = std::string(BW_K8S_SOURCE_DIR) + "/scripts/k8s-control-plane.sh";
  SpawnOptions so;
  so.argv = {"/bin/bash", script, "--print"};
  so.env = CurrentEnv();
  BW_ASSIGN_OR_RETURN(RunOutcome run, RunToEnd(so, 25));
  std::string out = std::move(run.output);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (run.timed_out || !run.exit.ok()) {
    return NotFound("the Kubernetes control-plane binaries are not built: " + out +
                    " (bash scripts/k8s-control-plane.sh builds them once per machine, "
                    "from the Go module proxy)");
  }
  const size_t nl = out.rfind('\n');
  return nl == std::string::npos ? out : out.substr(nl + 1);
}

Result<std::unique_ptr<ControlPlane>> ControlPlane::Start(ControlPlaneOptions opts) {
  if (opts.bin_dir.empty()) {
    BW_ASSIGN_OR_RETURN(opts.bin_dir, FindControlPlaneBinaries());
  }
  bool owns = false;
  if (opts.work_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/bw-k8s-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return Internal("mkdtemp " + tmpl + " failed");
    opts.work_dir = tmpl;
    owns = true;
  } else {
    std::error_code ec;
    fs::create_directories(opts.work_dir, ec);
    if (ec) return Internal("cannot create " + opts.work_dir + ": " + ec.message());
  }
  std::unique_ptr<ControlPlane> cp(new ControlPlane(std::move(opts)));
  cp->owns_work_dir_ = owns;
  Status s = cp->StartAll();
  if (!s.ok()) {
    cp->Stop();
    return s;
  }
  return cp;
}

ControlPlane::~ControlPlane() { Stop(); }

Status ControlPlane::WriteFile(const std::string& name, const std::string& content) {
  const std::string path = opts_.work_dir + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) return Internal("cannot write " + path);
  ::chmod(path.c_str(), 0600);
  return Status::Ok();
}

Result<ComponentInfo> ControlPlane::Launch(const std::string& name, const std::string& binary,
                                           const std::vector<std::string>& args,
                                           const std::map<std::string, std::string>& env) {
  const std::string log = opts_.work_dir + "/" + name + ".log";
  SpawnOptions so;
  // The component writes straight into its log file, so no pipe can fill up.
  so.argv = {"/bin/sh", "-c", "log=$1; shift; exec \"$@\" >>\"$log\" 2>&1", "sh", log, binary};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  so.env = CurrentEnv();
  for (const auto& [k, v] : env) so.env[k] = v;
  so.capture_output = false;
  so.die_with_parent = true;
  BW_ASSIGN_OR_RETURN(Child c, Spawn(so));
  Proc p;
  p.info = {name, c.pid, log};
  p.child = std::move(c);
  std::lock_guard<std::mutex> l(mu_);
  procs_.push_back(std::move(p));
  return procs_.back().info;
}

Status ControlPlane::WaitReady(const std::string& name, const std::string& url, double timeout_s,
                               bool with_client_cert) {
  const double deadline = SystemClock::Get()->NowMono() + timeout_s;
  HttpReply last;
  while (SystemClock::Get()->NowMono() < deadline) {
    const std::string dead = Check();
    if (!dead.empty()) {
      return Unavailable(name + " did not start: " + dead + "\n--- " + name + " log ---\n" +
                         LogTail(name));
    }
    last = with_client_cert ? Http("GET", url, "", ca_.cert_pem, &admin_) : Http("GET", url, "");
    if (last.code == 200) return Status::Ok();
    PollReadable({}, 0.1);
  }
  return DeadlineExceeded(
      name + " not ready within " + std::to_string(timeout_s) + " s (" + url + ": " +
      (last.error.empty() ? std::to_string(last.code) + " " + last.body : last.error) + ")\n--- " +
      name + " log ---\n" + LogTail(name));
}

Status ControlPlane::StartAll() {
  const std::string& w = opts_.work_dir;
  const double t0 = SystemClock::Get()->NowMono();
  auto left = [&] {
    return std::max(1.0, opts_.start_timeout_s - (SystemClock::Get()->NowMono() - t0));
  };
  // PKI: a cluster CA, the API server's serving certificate, an admin client
  // certificate (system:masters) and the service-account signing key pair.
  BW_ASSIGN_OR_RETURN(ca_, MakeCa("bulwark-test-cluster-ca"));
  BW_ASSIGN_OR_RETURN(
      KeyPair serving,
      IssueCert(ca_, {"kube-apiserver",
                      {},
                      {"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                       "kubernetes.default.svc.cluster.local"},
                      {"127.0.0.1", "10.96.0.1"},
                      true,
                      false}));
  BW_ASSIGN_OR_RETURN(
      admin_, IssueCert(ca_, {"bulwark-test-admin", {"system:masters"}, {}, {}, false, true}));
  BW_ASSIGN_OR_RETURN(KeyPair sa, MakeSigningKey());
  BW_RETURN_IF_ERROR(WriteFile("ca.crt", ca_.cert_pem));
  BW_RETURN_IF_ERROR(WriteFile("apiserver.crt", serving.cert_pem));
  BW_RETURN_IF_ERROR(WriteFile("apiserver.key", serving.key_pem));
  BW_RETURN_IF_ERROR(WriteFile("sa.key", sa.key_pem));
  BW_RETURN_IF_ERROR(WriteFile("sa.pub", sa.cert_pem));

  // etcd.
  BW_ASSIGN_OR_RETURN(int client_port, PickFixturePort("127.0.0.1"));
  BW_ASSIGN_OR_RETURN(int peer_port, PickFixturePort("127.0.0.1"));
  etcd_url_ = "http://127.0.0.1:" + std::to_string(client_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
  BW_RETURN_IF_ERROR(
      Launch("etcd", opts_.bin_dir + "/etcd",
             {"--name=default", "--data-dir=" + w + "/etcd", "--listen-client-urls=" + etcd_url_,
              "--advertise-client-urls=" + etcd_url_, "--listen-peer-urls=" + peer,
              "--initial-advertise-peer-urls=" + peer, "--initial-cluster=default=" + peer,
              "--unsafe-no-fsync=true", "--log-level=warn"},
             {})
          .status());
  BW_RETURN_IF_ERROR(WaitReady("etcd", etcd_url_ + "/health", left(), false));

  // kube-apiserver.
  BW_ASSIGN_OR_RETURN(int api_port, PickFixturePort("127.0.0.1"));
  url_ = "https://127.0.0.1:" + std::to_string(api_port);
  std::vector<std::string> args = {
      "--etcd-servers=" + etcd_url_,
      "--bind-address=127.0.0.1",
      "--advertise-address=127.0.0.1",
      "--secure-port=" + std::to_string(api_port),
      "--cert-dir=" + w + "/apiserver-certs",
      "--tls-cert-file=" + w + "/apiserver.crt",
      "--tls-private-key-file=" + w + "/apiserver.key",
      "--client-ca-file=" + w + "/ca.crt",
      "--authorization-mode=RBAC",
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      "--service-account-key-file=" + w + "/sa.pub",
      "--service-account-signing-key-file=" + w + "/sa.key",
      "--service-cluster-ip-range=10.96.0.0/16",
      "--allow-privileged=true",
      "--endpoint-reconciler-type=none",
      "--profiling=false",
      "--v=1",
  };
  if (opts_.audit) {
    BW_RETURN_IF_ERROR(WriteFile("audit-policy.yaml",
                                 "apiVersion: audit.k8s.io/v1\nkind: Policy\n"
                                 "omitStages: [RequestReceived]\nrules:\n- level: Metadata\n"));
    args.push_back("--audit-policy-file=" + w + "/audit-policy.yaml");
    args.push_back("--audit-log-path=" + audit_log_path());
    args.push_back("--audit-log-format=json");
    args.push_back("--audit-log-mode=blocking");
  }
  args.insert(args.end(), opts_.apiserver_flags.begin(), opts_.apiserver_flags.end());
  BW_RETURN_IF_ERROR(
      Launch("kube-apiserver", opts_.bin_dir + "/kube-apiserver", args, {}).status());
  BW_RETURN_IF_ERROR(WaitReady("kube-apiserver", url_ + "/readyz", left(), true));
  admin_kubeconfig_ = w + "/admin.kubeconfig";
  BW_RETURN_IF_ERROR(WriteKubeconfig(admin_kubeconfig_, AdminConfig()));

  if (opts_.controller_manager) {
    std::string controllers;
    for (const std::string& c : opts_.controllers)
      controllers += (controllers.empty() ? "" : ",") + c;
    BW_RETURN_IF_ERROR(
        Launch("kube-controller-manager", opts_.bin_dir + "/kube-controller-manager",
               {"--kubeconfig=" + admin_kubeconfig_,
                "--authentication-kubeconfig=" + admin_kubeconfig_,
                "--authorization-kubeconfig=" + admin_kubeconfig_, "--controllers=" + controllers,
                "--leader-elect=false", "--use-service-account-credentials=false",
                "--root-ca-file=" + w + "/ca.crt",
                "--service-account-private-key-file=" + w + "/sa.key", "--bind-address=127.0.0.1",
                "--secure-port=0", "--cluster-name=bulwark-test", "--v=1"},
               {})
            .status());
    // The service-account controller has run once the default namespace's default
    // ServiceAccount exists (pod admission needs it).
    if (std::find(opts_.controllers.begin(), opts_.controllers.end(),
                  "serviceaccount-controller") != opts_.controllers.end()) {
      BW_RETURN_IF_ERROR(WaitReady("kube-controller-manager",
                                   url_ + "/api/v1/namespaces/default/serviceaccounts/default",
                                   left(), true));
    }
  }
  if (opts_.scheduler) BW_RETURN_IF_ERROR(StartScheduler());
  return Status::Ok();
}

Status ControlPlane::StartScheduler() {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const Proc& p : procs_) {
      if (p.info.name == "kube-scheduler" && p.exit.empty()) return Status::Ok();
    }
  }
  BW_ASSIGN_OR_RETURN(int port, PickFixturePort("127.0.0.1"));
  BW_RETURN_IF_ERROR(
      Launch(
          "kube-scheduler", opts_.bin_dir + "/kube-scheduler",
          {"--kubeconfig=" + admin_kubeconfig_, "--authentication-kubeconfig=" + admin_kubeconfig_,
           "--authorization-kubeconfig=" + admin_kubeconfig_, "--leader-elect=false",
           "--bind-address=127.0.0.1", "--secure-port=" + std::to_string(port), "--v=1"},
          {})
          .status());
  return WaitReady("kube-scheduler", "https://127.0.0.1:" + std::to_string(port) + "/healthz", 60,
                   false);
}

Result<ComponentInfo> ControlPlane::StartExtra(const std::string& name,
                                               const std::vector<std::string>& args,
                                               const std::map<std::string, std::string>& env) {
  BW_ASSIGN_OR_RETURN(ComponentInfo info, Launch(name, opts_.bin_dir + "/" + name, args, env));
  return info;
}

Result<ComponentInfo> ControlPlane::StartCommand(const std::string& name,
                                                 const std::vector<std::string>& argv,
                                                 const std::map<std::string, std::string>& env) {
  if (argv.empty()) return InvalidArgument("StartCommand " + name + ": empty command line");
  return Launch(name, argv[0], std::vector<std::string>(argv.begin() + 1, argv.end()), env);
}

Status ControlPlane::StopExtra(const std::string& name, double grace_s) {
  std::lock_guard<std::mutex> l(mu_);
  for (Proc& p : procs_) {
    if (p.info.name == name && p.exit.empty()) {
      p.exit = TerminateGroup(p.child.pid, p.child.pgid, grace_s).Describe();
      p.stopped = true;
      return Status::Ok();
    }
  }
  return NotFound("no running component " + name);
}

std::string ControlPlane::Check() {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (Proc& p : procs_) {
    if (p.exit.empty()) {
      if (auto e = Reap(p.child.pid)) p.exit = e->Describe();
    }
    if (!p.exit.empty() && !p.stopped)
      out += (out.empty() ? "" : "; ") + p.info.name + " exited (" + p.exit + ")";
  }
  return out;
}

std::vector<ComponentInfo> ControlPlane::Components() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ComponentInfo> out;
  for (const Proc& p : procs_) out.push_back(p.info);
  return out;
}

std::string ControlPlane::LogTail(const std::string& name, size_t bytes) const {
  std::string path;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const Proc& p : procs_) {
      if (p.info.name == name) path = p.info.log_path;
    }
  }
  return path.empty() ? "" : Tail(path, bytes);
}

void ControlPlane::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  // Reverse start order: controllers and the API server before etcd.
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) {
    if (it->exit.empty()) it->exit = TerminateGroup(it->child.pid, it->child.pgid, 5).Describe();
  }
  if (owns_work_dir_ && std::getenv("BULWARK_KEEP_CONTROL_PLANE") == nullptr) {
    std::error_code ec;
    fs::remove_all(opts_.work_dir, ec);
    owns_work_dir_ = false;
  }
}

ClientConfig ControlPlane::AdminConfig() const {
  ClientConfig c;
  c.server = url_;
  c.ca_pem = ca_.cert_pem;
  c.client_cert_pem = admin_.cert_pem;
  c.client_key_pem = admin_.key_pem;
  c.user_agent = "bulwark-test-admin";
  return c;
}

Result<ClientConfig> ControlPlane::UserConfig(const std::string& user,
                                              const std::vector<std::string>& groups) const {
  BW_ASSIGN_OR_RETURN(KeyPair kp, IssueCert(ca_, {user, groups, {}, {}, false, true}));
  ClientConfig c;
  c.server = url_;
  c.ca_pem = ca_.cert_pem;
  c.client_cert_pem = kp.cert_pem;
  c.client_key_pem = kp.key_pem;
  return c;
}

Result<ClientConfig> ControlPlane::ServiceAccountConfig(const std::string& ns,
                                                        const std::string& name,
                                                        int expiration_s) const {
  BW_ASSIGN_OR_RETURN(std::unique_ptr<Client> admin, Client::Create(AdminConfig()));
  Resource tokens{"", "v1", "serviceaccounts", "ServiceAccount", true};
  const std::string path = tokens.Path(ns, name, "token");
  const Json req = {{"apiVersion", "authentication.k8s.io/v1"},
                    {"kind", "TokenRequest"},
                    {"spec", {{"expirationSeconds", expiration_s}}}};
  HttpReply r = Http("POST", url_ + path, req.dump(), ca_.cert_pem, &admin_);
  if (r.code != 201 && r.code != 200) {
    return Unavailable("TokenRequest for serviceaccount " + ns + "/" + name + ": " +
                       (r.error.empty() ? std::to_string(r.code) + " " + r.body : r.error));
  }
  Json reply = Json::parse(r.body, nullptr, false);
  const std::string token =
      reply.is_object() && reply.contains("status") ? reply["status"].value("token", "") : "";
  if (token.empty()) return Internal("TokenRequest answered without a token: " + r.body);
  ClientConfig c;
  c.server = url_;
  c.ca_pem = ca_.cert_pem;
  c.token = token;
  c.namespace_ = ns;
  c.user_agent = "bulwark-test-sa-" + name;
  return c;
}

Status ControlPlane::WriteKubeconfig(const std::string& path, const ClientConfig& cfg) {
  std::ostringstream y;
  y << "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: "
    << cfg.server << "\n    certificate-authority-data: " << Base64(cfg.ca_pem)
    << "\nusers:\n- name: test\n  user:\n";
  if (!cfg.client_cert_pem.empty()) {
    y << "    client-certificate-data: " << Base64(cfg.client_cert_pem)
      << "\n    client-key-data: " << Base64(cfg.client_key_pem) << "\n";
  }
  if (!cfg.token.empty()) y << "    token: " << cfg.token << "\n";
  y << "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n    namespace: "
    << (cfg.namespace_.empty() ? "default" : cfg.namespace_) << "\ncurrent-context: test\n";
  std::ofstream out(path, std::ios::trunc);
  out << y.str();
  out.close();
  if (!out) return Internal("cannot write kubeconfig " + path);
  ::chmod(path.c_str(), 0600);
  return Status::Ok();
}

std::vector<Json> ControlPlane::AuditEvents(const std::string& username) const {
  std::vector<Json> out;
  std::ifstream in(audit_log_path());
  for (std::string line; std::getline(in, line);) {
    Json e = Json::parse(line, nullptr, false);
    if (e.is_object() && e.contains("user") && e["user"].value("username", "") == username) {
      out.push_back(std::move(e));
    }
  }
  return out;
}

Result<int64_t> ControlPlane::EtcdRevision() const {
  // etcd's gRPC-gateway: a range read returns the store's current revision in its header.
  HttpReply r = Http("POST", etcd_url_ + "/v3/kv/range", R"({"key":"AA==","limit":1})");
  if (r.code != 200) return Unavailable("etcd /v3/kv/range: " + r.error + r.body);
  Json j = Json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("header") || !j["header"].contains("revision")) {
    return Internal("etcd /v3/kv/range: no header.revision in " + r.body);
  }
  const Json& rev = j["header"]["revision"];  // int64 as a JSON string
  return rev.is_string() ? std::stoll(rev.get<std::string>()) : rev.get<int64_t>();
}

Status ControlPlane::CompactEtcd(int64_t revision) const {
  const Json req = {{"revision", std::to_string(revision)}, {"physical", true}};
  HttpReply r = Http("POST", etcd_url_ + "/v3/kv/compaction", req.dump());
  if (r.code != 200) return Unavailable("etcd /v3/kv/compaction: " + r.error + r.body);
  return Status::Ok();
}

}  // namespace bulwark::k8s::testing
