// FakeApiServer: lifecycle, client configuration, direct store access and fault
// controls. The HTTP handler is in fake_apiserver_routes.cc, the semantics in the store.
#include "k8s/testing/fake_apiserver.h"

#include <cerrno>
#include <fstream>

#include "k8s/testing/fake_apiserver_impl.h"

namespace bulwark::k8s::testing {

using internal::ApiOr;
using internal::ObjPtr;
using internal::Resolved;
using internal::Store;

FakeApiServer::FakeApiServer() : impl_(std::make_unique<Impl>()) {}

FakeApiServer::~FakeApiServer() { Stop(); }

Result<std::unique_ptr<FakeApiServer>> FakeApiServer::Start(FakeApiServerOptions opts) {
  if (!(opts.bookmark_interval_s > 0)) {
    return InvalidArgument("FakeApiServerOptions.bookmark_interval_s must be > 0 (seconds)");
  }
  if (opts.max_watch_timeout_s <= 0) {
    return InvalidArgument("FakeApiServerOptions.max_watch_timeout_s must be > 0 (seconds)");
  }
  if (opts.max_connections == 0) {
    return InvalidArgument("FakeApiServerOptions.max_connections must be >= 1");
  }
  std::unique_ptr<FakeApiServer> s(new FakeApiServer());
  Impl& impl = *s->impl_;
  impl.opts = opts;
  impl.token = opts.token;
  BW_ASSIGN_OR_RETURN(impl.tls, internal::MakeTlsIdentity());
  impl.store = std::make_unique<Store>(opts.clock ? opts.clock : SystemClock::Get(), opts.history);
  Impl* raw = &impl;
  impl.http = std::make_unique<internal::HttpServer>(
      impl.tls.ctx,
      [raw](const internal::HttpRequest& r, internal::HttpConn& c) { raw->Handle(r, c); },
      opts.max_connections);
  BW_RETURN_IF_ERROR(impl.http->Start().Annotate("fake API server"));
  return s;
}

std::string FakeApiServer::url() const {
  return "https://127.0.0.1:" + std::to_string(impl_->http->port());
}

std::string FakeApiServer::ca_pem() const { return impl_->tls.ca_pem; }

ClientConfig FakeApiServer::client_config() const {
  ClientConfig c;
  c.server = url();
  c.ca_pem = ca_pem();
  std::lock_guard<std::mutex> l(impl_->mu);
  c.token = impl_->token;
  c.namespace_ = "default";
  return c;
}

Status FakeApiServer::WriteKubeconfig(const std::string& path) const {
  std::string token;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    token = impl_->token;
  }
  std::string yaml =
      "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n"
      "    server: " +
      url() +
      "\n    certificate-authority-data: " + internal::Base64Encode(ca_pem(), /*url_safe=*/false) +
      "\nusers:\n- name: fake\n  user:" +
      (token.empty() ? std::string(" {}") : "\n    token: " + token) +
      "\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
      "    namespace: default\ncurrent-context: fake\n";
  std::ofstream f(path, std::ios::trunc);
  if (!f) return ErrnoStatus("open " + path, errno);
  f << yaml;
  f.close();
  if (!f) return ErrnoStatus("write " + path, errno);
  return Status::Ok();
}

namespace {

// The served version in an apiVersion ("v1", "bulwark.dev/v1alpha1" -> "v1alpha1").
std::string VersionOf(const std::string& api_version) {
  size_t slash = api_version.find('/');
  return slash == std::string::npos ? api_version : api_version.substr(slash + 1);
}

// Resolves a direct-access object: its resource, version and namespace.
Result<Resolved> Resolve(const Store& store, const Json& obj, const char* op, std::string* version,
                         std::string* ns) {
  if (!obj.is_object())
    return InvalidArgument(std::string(op) + ": the object must be JSON object");
  std::string av = internal::StrField(obj, "apiVersion");
  std::string kind = internal::StrField(obj, "kind");
  if (av.empty() || kind.empty()) {
    return InvalidArgument(std::string(op) +
                           ": the object needs apiVersion and kind (e.g. \"v1\", \"Pod\")");
  }
  Resolved res = store.FindKind(av, kind);
  if (!res) {
    return NotFound(std::string(op) + ": no resource serves apiVersion " + av + " kind " + kind +
                    "; create its CustomResourceDefinition first");
  }
  *version = VersionOf(av);
  *ns = internal::StrField(internal::MetaOf(obj), "namespace");
  if (res.info->namespaced && ns->empty()) {
    return InvalidArgument(std::string(op) + ": metadata.namespace is required for " + kind);
  }
  if (!res.info->namespaced) ns->clear();
  return res;
}

}  // namespace

Result<Json> FakeApiServer::Create(const Json& obj) {
  std::string version, ns;
  BW_ASSIGN_OR_RETURN(Resolved res, Resolve(*impl_->store, obj, "Create", &version, &ns));
  internal::WriteOptions o;
  ApiOr<ObjPtr> out = impl_->store->Create(*res.rs, version, ns, obj, &o);
  if (!out.ok()) return internal::ToStatus(out.error());
  return Store::RenderJson(*res.info, version, **out);
}

namespace {

Result<Json> DirectUpdate(Store& store, const Json& obj, bool status) {
  std::string version, ns;
  BW_ASSIGN_OR_RETURN(Resolved res,
                      Resolve(store, obj, status ? "UpdateStatus" : "Update", &version, &ns));
  internal::WriteOptions o;
  o.status = status;
  o.require_rv = false;
  std::string name = internal::StrField(internal::MetaOf(obj), "name");
  ApiOr<ObjPtr> out = store.Update(*res.rs, version, ns, name, obj, &o);
  if (!out.ok()) return internal::ToStatus(out.error());
  return Store::RenderJson(*res.info, version, **out);
}

}  // namespace

Result<Json> FakeApiServer::Update(const Json& obj) {
  return DirectUpdate(*impl_->store, obj, false);
}

Result<Json> FakeApiServer::UpdateStatus(const Json& obj) {
  return DirectUpdate(*impl_->store, obj, true);
}

Result<Json> FakeApiServer::Get(const Resource& r, const std::string& ns,
                                const std::string& name) const {
  Resolved res = impl_->store->Find(r.group, r.version, r.plural);
  if (!res) return NotFound("Get: the server does not serve " + r.plural + " in " + r.version);
  ApiOr<ObjPtr> o = impl_->store->Get(*res.rs, res.info->namespaced ? ns : "", name);
  if (!o.ok()) return internal::ToStatus(o.error());
  return Store::RenderJson(*res.info, r.version, **o);
}

std::vector<Json> FakeApiServer::List(const Resource& r, const std::string& ns) const {
  std::vector<Json> out;
  Resolved res = impl_->store->Find(r.group, r.version, r.plural);
  if (!res) return out;
  for (const ObjPtr& o : impl_->store->ListAll(*res.rs, res.info->namespaced ? ns : "")) {
    out.push_back(Store::RenderJson(*res.info, r.version, *o));
  }
  return out;
}

Status FakeApiServer::Delete(const Resource& r, const std::string& ns, const std::string& name) {
  Resolved res = impl_->store->Find(r.group, r.version, r.plural);
  if (!res) return NotFound("Delete: the server does not serve " + r.plural + " in " + r.version);
  auto out = impl_->store->Delete(*res.rs, ns, name, {});
  return out.ok() ? Status::Ok() : internal::ToStatus(out.error());
}

std::string FakeApiServer::CurrentResourceVersion() const {
  return std::to_string(impl_->store->CurrentRv());
}

void FakeApiServer::FailNext(int n, int http_status, double retry_after_s,
                             const std::string& match) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->faults.push_back({n, http_status, retry_after_s, match});
}

void FakeApiServer::CutWatches() { impl_->store->CutWatches(); }
void FakeApiServer::Compact() { impl_->store->Compact(); }
void FakeApiServer::EndWatches() { impl_->store->EndWatches(); }

void FakeApiServer::SetToken(const std::string& token) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->token = token;
}

std::vector<RequestRecord> FakeApiServer::Requests() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return {impl_->records.begin(), impl_->records.end()};
}

int FakeApiServer::OpenWatches() const { return impl_->store->OpenWatches(); }

void FakeApiServer::OnChange(std::function<void(const std::string&, const Json&)> fn) {
  impl_->store->SetOnChange(std::move(fn));
}

bool FakeApiServer::SettleCallbacks(double timeout_s) {
  return impl_->store->SettleCallbacks(timeout_s);
}

void FakeApiServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  if (impl_->http) impl_->http->Stop();
  if (impl_->store) impl_->store->Shutdown();
}

std::optional<internal::ApiError> FakeApiServer::Impl::TakeFault(const std::string& method,
                                                                 const std::string& path,
                                                                 const std::string& query) {
  std::string target = method + " " + path + (query.empty() ? "" : "?" + query);
  std::lock_guard<std::mutex> l(mu);
  for (auto it = faults.begin(); it != faults.end(); ++it) {
    if (target.find(it->match) == std::string::npos) continue;
    internal::ApiError e = internal::ErrInjected(it->status, it->retry_after_s);
    if (--it->remaining <= 0) faults.erase(it);
    return e;
  }
  return std::nullopt;
}

void FakeApiServer::Impl::Record(RequestRecord r) {
  std::lock_guard<std::mutex> l(mu);
  records.push_back(std::move(r));
  while (records.size() > std::max<size_t>(opts.max_request_records, 1)) records.pop_front();
}

}  // namespace bulwark::k8s::testing
