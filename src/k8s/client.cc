// Client: configuration checks, the retry loop and the REST verbs (watch.cc has
// Watch). Retry rules (client.h): reads are retried on transport errors, 429 and
// 500/502/503/504; mutations only when they cannot have been applied (nothing was
// sent, 429, 503). Waits are the injected clock's sleeps.
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_set>

#include "common/curl_util.h"
#include "k8s/internal.h"

namespace bulwark::k8s {

using internal::HttpRequest;
using internal::HttpResult;

namespace {

bool IsMutation(const std::string& method) { return method != "GET"; }

bool RetryableStatus(long http) {
  return http == 429 || http == 500 || http == 502 || http == 503 || http == 504;
}

// Number of PEM certificates in `pem`, or -1 when it is not parseable.
int CountCerts(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return -1;
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_free(x);
    ++n;
  }
  BIO_free(bio);
  return n;
}

bool ParsesAsKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return false;
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (k == nullptr) return false;
  EVP_PKEY_free(k);
  return true;
}

Status CheckConfig(ClientConfig* cfg) {
  std::string& s = cfg->server;
  while (!s.empty() && s.back() == '/') s.pop_back();
  if (s.rfind("https://", 0) != 0 && s.rfind("http://", 0) != 0) {
    return InvalidArgument(
        "ClientConfig.server '" + s +
        "': must be https://host[:port] (e.g. https://10.96.0.1:443), or http://");
  }
  size_t host = s.find("://") + 3;
  if (host >= s.size() || s[host] == '/' || s.find_first_of("?# ", host) != std::string::npos) {
    return InvalidArgument("ClientConfig.server '" + s +
                           "': expected scheme://host[:port][/path] without query or spaces");
  }
  if (cfg->max_attempts < 1) {
    return InvalidArgument("ClientConfig.max_attempts is " + std::to_string(cfg->max_attempts) +
                           "; set it to 1 or more");
  }
  if (!(cfg->timeout_s > 0) || !(cfg->connect_timeout_s > 0)) {
    return InvalidArgument("ClientConfig.timeout_s and connect_timeout_s must be > 0 seconds");
  }
  if (!(cfg->backoff_initial_s >= 0) || !(cfg->backoff_max_s >= cfg->backoff_initial_s)) {
    return InvalidArgument(
        "ClientConfig.backoff_initial_s must be >= 0 and backoff_max_s >= backoff_initial_s");
  }
  if (!cfg->ca_pem.empty() && CountCerts(cfg->ca_pem) <= 0) {
    return InvalidArgument(
        "ClientConfig.ca_pem holds no PEM certificate; pass the cluster CA "
        "(kubeconfig certificate-authority-data, or ca.crt in cluster)");
  }
  if (cfg->client_cert_pem.empty() != cfg->client_key_pem.empty()) {
    return InvalidArgument(
        "ClientConfig.client_cert_pem and client_key_pem must be given together "
        "(kubeconfig client-certificate and client-key)");
  }
  if (!cfg->client_cert_pem.empty() && CountCerts(cfg->client_cert_pem) <= 0) {
    return InvalidArgument("ClientConfig.client_cert_pem holds no PEM certificate");
  }
  if (!cfg->client_key_pem.empty() && !ParsesAsKey(cfg->client_key_pem)) {
    return InvalidArgument("ClientConfig.client_key_pem holds no PEM private key");
  }
  return Status::Ok();
}

Result<Json> ParseBody(const HttpRequest& req, const HttpResult& r) {
  Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Internal(req.method + " " + req.path + ": " + std::to_string(r.status) +
                    " response is not a JSON object: " + r.body.substr(0, 200));
  }
  return j;
}

std::string ContentType(PatchType t) {
  switch (t) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

HttpRequest MakeRequest(const std::string& method, const std::string& path, std::string body = "",
                        std::string content_type = "") {
  HttpRequest req;
  req.method = method;
  req.path = path;
  req.body = std::move(body);
  req.content_type = std::move(content_type);
  return req;
}

void AddQuery(std::string* q, const std::string& key, const std::string& value) {
  if (value.empty()) return;
  if (!q->empty()) q->push_back('&');
  *q += key + "=" + internal::QueryEscape(value);
}

}  // namespace

// --- Client::Impl ------------------------------------------------------------------

std::string Client::Impl::Token() const {
  std::lock_guard<std::mutex> l(token_mu);
  return token;
}

bool Client::Impl::ReloadToken(const ClientConfig& cfg) {
  if (cfg.token_file.empty()) return false;
  std::ifstream in(cfg.token_file);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.empty()) return false;
  std::lock_guard<std::mutex> l(token_mu);
  token = t;
  return true;
}

double Client::Impl::Backoff(const ClientConfig& cfg, int retry,
                             std::optional<double> retry_after) const {
  if (retry_after && *retry_after > 0) return std::min(*retry_after, cfg.backoff_max_s);
  double d = std::min(cfg.backoff_initial_s * std::pow(2.0, retry - 1), cfg.backoff_max_s);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return d * std::uniform_real_distribution<double>(0.5, 1.0)(rng);
}

Status Client::Impl::Perform(const ClientConfig& cfg, const HttpRequest& req, HttpResult* out) {
  const std::string what = req.method + " " + req.path;
  const bool mutation = IsMutation(req.method);
  Status last;
  std::optional<double> retry_after;
  bool reloaded = false;
  int attempt = 0;
  bool wait = false;
  while (attempt < cfg.max_attempts) {
    if (wait) {
      retries.fetch_add(1, std::memory_order_relaxed);
      internal::WaitOn(clock, Backoff(cfg, attempt, retry_after), req.cancel,
                       /*sleep_on_clock=*/true);
    }
    if (req.cancel != nullptr && req.cancel->load()) return Unavailable(what + ": cancelled");
    ++attempt;
    wait = true;
    retry_after.reset();
    requests.fetch_add(1, std::memory_order_relaxed);
    HttpResult r = transport.Do(req, Token());
    if (r.cancelled) return Unavailable(what + ": cancelled");
    if (!r.completed) {
      const std::string msg = what + ": " + r.error;
      last = r.timed_out ? DeadlineExceeded(msg) : Unavailable(msg);
      if (!r.retryable || (mutation && !r.connect_failed)) return last;
      continue;
    }
    if (r.status / 100 == 2) {
      *out = std::move(r);
      return Status::Ok();
    }
    if (r.status == 401 && !reloaded && ReloadToken(cfg)) {
      reloaded = true;  // a rotated projected token: one more try, not counted
      --attempt;
      wait = false;
      continue;
    }
    last = internal::StatusFromHttp(req.method, req.path, r.status, r.body);
    const bool not_applied = r.status == 429 || r.status == 503;
    if (!RetryableStatus(r.status) || (mutation && !not_applied)) return last;
    if (not_applied) retry_after = internal::ParseRetryAfter(r.retry_after);
  }
  if (cfg.max_attempts > 1) {
    return Status(last.code(),
                  last.message() + " (after " + std::to_string(cfg.max_attempts) + " attempts)");
  }
  return last;
}

// --- Client ------------------------------------------------------------------------

Result<std::unique_ptr<Client>> Client::Create(ClientConfig cfg) {
  BW_RETURN_IF_ERROR(CheckConfig(&cfg));
  BW_RETURN_IF_ERROR(curl::GlobalInit());
  auto impl = std::make_unique<Impl>(cfg);
  impl->clock = cfg.clock != nullptr ? cfg.clock : SystemClock::Get();
  impl->token = cfg.token;
  return std::unique_ptr<Client>(new Client(std::move(cfg), std::move(impl)));
}

Client::Client(ClientConfig cfg, std::unique_ptr<Impl> impl)
    : cfg_(std::move(cfg)), impl_(std::move(impl)) {
  if (impl_->token.empty() && !cfg_.token_file.empty()) impl_->ReloadToken(cfg_);
}

Client::~Client() = default;

ClientStats Client::Stats() const {
  ClientStats s;
  s.requests = impl_->requests.load();
  s.retries = impl_->retries.load();
  s.watch_events = impl_->watch_events.load();
  return s;
}

namespace {

// The object path for a verb, or an error naming the bad argument.
Result<std::string> ObjectPath(const std::string& verb, const Resource& r, const std::string& ns,
                               const std::string& name, const std::string& sub = "") {
  std::string why = internal::CheckPathSegment(name);
  if (!why.empty()) {
    return InvalidArgument(verb + " " + r.plural + ": the object name " + why +
                           "; pass the metadata.name of an existing " + r.kind);
  }
  if (r.namespaced) {
    why = internal::CheckPathSegment(ns);
    if (!why.empty())
      return InvalidArgument(verb + " " + r.plural + "/" + name + ": namespace " + why);
  }
  return r.Path(ns, name, sub);
}

}  // namespace

Result<Json> Client::Get(const Resource& r, const std::string& ns, const std::string& name) {
  const std::string n = ns.empty() ? cfg_.namespace_ : ns;
  BW_ASSIGN_OR_RETURN(std::string path, ObjectPath("GET", r, n, name));
  HttpRequest req = MakeRequest("GET", path);
  HttpResult res;
  BW_RETURN_IF_ERROR(impl_->Perform(cfg_, req, &res));
  return ParseBody(req, res);
}

Result<ListResult> Client::List(const Resource& r, const std::string& ns, const ListOptions& o) {
  HttpRequest req = MakeRequest("GET", r.Path(ns));
  req.cancel = o.cancel;
  if (r.namespaced && !ns.empty()) {
    std::string why = internal::CheckPathSegment(ns);
    if (!why.empty()) return InvalidArgument("LIST " + r.plural + ": namespace " + why);
  }
  ListResult out;
  std::string cont;
  // A list ends: a server whose continue tokens lead back to one already followed is
  // an error, not followed for ever (kube-apiserver's tokens name the next key).
  std::unordered_set<std::string> followed;
  for (int page = 0;; ++page) {
    req.query.clear();
    AddQuery(&req.query, "labelSelector", o.label_selector);
    AddQuery(&req.query, "fieldSelector", o.field_selector);
    if (o.limit > 0) AddQuery(&req.query, "limit", std::to_string(o.limit));
    if (cont.empty()) AddQuery(&req.query, "resourceVersion", o.resource_version);
    AddQuery(&req.query, "continue", cont);
    HttpResult res;
    BW_RETURN_IF_ERROR(impl_->Perform(cfg_, req, &res));
    BW_ASSIGN_OR_RETURN(Json body, ParseBody(req, res));
    auto items = body.find("items");
    if (items != body.end() && !items->is_null() && !items->is_array()) {
      return Internal("GET " + req.path + ": list response 'items' is not an array");
    }
    if (items != body.end() && items->is_array()) {
      for (Json& it : *items) {
        // The API omits apiVersion/kind on list items; restore them for handlers.
        if (it.is_object()) {
          if (!it.contains("apiVersion")) it["apiVersion"] = r.ApiVersion();
          if (!it.contains("kind")) it["kind"] = r.kind;
        }
        out.items.push_back(std::move(it));
      }
    }
    const Json meta = body.value("metadata", Json::object());
    std::string rv = internal::StrField(meta, "resourceVersion");
    if (!rv.empty()) out.resource_version = rv;
    cont = internal::StrField(meta, "continue");
    if (cont.empty()) break;
    if (!followed.insert(cont).second) {
      return Internal("GET " + req.path + ": page " + std::to_string(page + 1) +
                      " of the list gives a continue token the list already followed: the "
                      "server's pages cycle");
    }
    if (page > 100000) return Internal("GET " + req.path + ": more than 100000 list pages");
  }
  return out;
}

Result<Json> Client::Create(const Resource& r, const std::string& ns, const Json& obj) {
  if (!obj.is_object())
    return InvalidArgument("POST " + r.plural + ": the object is not a JSON object");
  std::string n = ns.empty() ? Namespace(obj) : ns;
  if (n.empty()) n = cfg_.namespace_;
  if (r.namespaced) {
    std::string why = internal::CheckPathSegment(n);
    if (!why.empty()) return InvalidArgument("POST " + r.plural + ": namespace " + why);
  }
  HttpRequest req = MakeRequest("POST", r.Path(n), obj.dump(), "application/json");
  HttpResult res;
  BW_RETURN_IF_ERROR(impl_->Perform(cfg_, req, &res));
  return ParseBody(req, res);
}

Result<Json> Client::Put(const Resource& r, const std::string& ns, const Json& obj,
                         const std::string& sub) {
  const ClientConfig& cfg = cfg_;
  if (!obj.is_object())
    return InvalidArgument("PUT " + r.plural + ": the object is not a JSON object");
  std::string n = ns.empty() ? Namespace(obj) : ns;
  if (n.empty()) n = cfg.namespace_;
  BW_ASSIGN_OR_RETURN(std::string path, ObjectPath("PUT", r, n, Name(obj), sub));
  HttpRequest req = MakeRequest("PUT", path, obj.dump(), "application/json");
  HttpResult res;
  BW_RETURN_IF_ERROR(impl_->Perform(cfg, req, &res));
  return ParseBody(req, res);
}

Result<Json> Client::Update(const Resource& r, const std::string& ns, const Json& obj) {
  return Put(r, ns, obj, "");
}

Result<Json> Client::UpdateStatus(const Resource& r, const std::string& ns, const Json& obj) {
  return Put(r, ns, obj, "status");
}

Result<Json> Client::Patch(const Resource& r, const std::string& ns, const std::string& name,
                           const Json& patch, PatchType type, const std::string& subresource) {
  const std::string n = ns.empty() ? cfg_.namespace_ : ns;
  BW_ASSIGN_OR_RETURN(std::string path, ObjectPath("PATCH", r, n, name, subresource));
  if (type == PatchType::kJson ? !patch.is_array() : !patch.is_object()) {
    return InvalidArgument("PATCH " + path + ": a " +
                           (type == PatchType::kJson
                                ? std::string("JSON patch must be an array")
                                : std::string("merge patch must be an object")));
  }
  HttpRequest req = MakeRequest("PATCH", path, patch.dump(), ContentType(type));
  HttpResult res;
  BW_RETURN_IF_ERROR(impl_->Perform(cfg_, req, &res));
  return ParseBody(req, res);
}

Status Client::Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& o) {
  const std::string n = ns.empty() ? cfg_.namespace_ : ns;
  BW_ASSIGN_OR_RETURN(std::string path, ObjectPath("DELETE", r, n, name));
  Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (o.grace_period_seconds >= 0) body["gracePeriodSeconds"] = o.grace_period_seconds;
  if (!o.propagation_policy.empty()) body["propagationPolicy"] = o.propagation_policy;
  if (!o.precondition_uid.empty()) body["preconditions"]["uid"] = o.precondition_uid;
  if (!o.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = o.precondition_resource_version;
  }
  HttpRequest req = MakeRequest("DELETE", path, body.dump(), "application/json");
  HttpResult res;
  return impl_->Perform(cfg_, req, &res);
}

Result<Json> Client::UpdateWithRetry(const Resource& r, const std::string& ns,
                                     const std::string& name,
                                     const std::function<Status(Json&)>& mutate, bool status,
                                     int attempts) {
  Status last;
  for (int i = 0; i < std::max(1, attempts); ++i) {
    BW_ASSIGN_OR_RETURN(Json cur, Get(r, ns, name));
    Json next = cur;
    BW_RETURN_IF_ERROR(mutate(next));
    if (next == cur) return cur;
    auto res = status ? UpdateStatus(r, ns, next) : Update(r, ns, next);
    if (res.ok() || !IsConflict(res.status())) return res;
    last = res.status();
  }
  return Status(last.code(), last.message() + " (still conflicting after " +
                                 std::to_string(std::max(1, attempts)) + " read-modify-writes)");
}

}  // namespace bulwark::k8s
