#include "k8s/testing/fault_proxy.h"

#include <curl/curl.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <set>

#include "common/curl_util.h"
#include "k8s/internal.h"
#include "k8s/testing/https_server.h"

namespace bulwark::k8s::testing {

namespace {

constexpr size_t kMaxRecords = 100000;

bool IsWatch(const https::HttpRequest& r) {
  if (r.path.find("/watch/") != std::string::npos) return true;
  const std::string q = "&" + r.query + "&";
  return q.find("&watch=1&") != std::string::npos || q.find("&watch=true&") != std::string::npos;
}

std::string LowerCopy(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One upstream libcurl handle per connection thread (keep-alive to the real server).
struct ThreadHandle {
  CURL* h = curl_easy_init();
  ~ThreadHandle() { curl_easy_cleanup(h); }
};

// What one forwarded watch stream is told from outside.
struct StreamFlags {
  std::atomic<bool> cut{false};
  std::atomic<bool> end{false};
};

}  // namespace

struct FaultProxy::Impl {
  ClientConfig upstream;
  https::TlsIdentity tls;
  std::unique_ptr<https::HttpServer> server;
  std::atomic<bool> stopping{false};

  struct Rule {
    int left;
    int status;
    double retry_after_s;
    std::string match;
  };
  mutable std::mutex mu;
  std::deque<Rule> rules;                       // guarded by mu
  std::deque<RequestRecord> records;            // guarded by mu
  std::set<std::shared_ptr<StreamFlags>> open;  // guarded by mu

  void Record(const https::HttpRequest& req, int status, bool watch, bool injected) {
    std::lock_guard<std::mutex> l(mu);
    records.push_back({req.method, req.path, req.query, status, watch, injected});
    if (records.size() > kMaxRecords) records.pop_front();
  }

  // The first pending rule this request matches, consumed; nullopt when none.
  std::optional<Rule> TakeRule(const https::HttpRequest& req) {
    const std::string line =
        req.method + " " + req.path + (req.query.empty() ? "" : "?" + req.query);
    std::lock_guard<std::mutex> l(mu);
    for (auto it = rules.begin(); it != rules.end(); ++it) {
      if (!it->match.empty() && line.find(it->match) == std::string::npos) continue;
      Rule r = *it;
      if (--it->left <= 0) rules.erase(it);
      return r;
    }
    return std::nullopt;
  }

  void Handle(const https::HttpRequest& req, https::HttpConn& conn);
};

namespace {

// Per-transfer state shared with libcurl's callbacks.
struct Transfer {
  https::HttpConn* conn = nullptr;
  bool watch = false;
  StreamFlags* flags = nullptr;
  const std::atomic<bool>* stopping = nullptr;
  std::string content_type;
  https::HttpHeaders forward;  // Warning, Retry-After, Audit-Id
  long code = 0;               // NOLINT(runtime/int)
  std::string body;            // non-streamed responses
  std::string line;            // streamed: bytes after the last newline
  bool streaming = false;
  bool cut = false;    // we cut the client's stream
  bool ended = false;  // EndWatches ended it
  bool client_gone = false;
};

// Starts the client's chunked stream of a 200 watch (once); false when the client is
// gone.
bool StartWatchStream(Transfer* t) {
  if (t->streaming) return true;
  if (!t->conn->StartStream(200, t->content_type.empty() ? "application/json" : t->content_type)) {
    t->client_gone = true;
    return false;
  }
  t->streaming = true;
  return true;
}

size_t OnHeader(char* p, size_t size, size_t n, void* self) {
  auto* t = static_cast<Transfer*>(self);
  std::string h(p, size * n);
  if (h == "\r\n" && t->watch && t->code == 200) {
    // The end of a watch's headers: forwarded at once, as the server flushes them, so
    // a watch that stays quiet is still open (and ends cleanly) for its client.
    return StartWatchStream(t) ? size * n : 0;
  }
  if (h.rfind("HTTP/", 0) == 0) {  // a status line (a new response after 100 Continue)
    const size_t sp = h.find(' ');
    t->code = sp == std::string::npos ? 0 : std::atol(h.c_str() + sp + 1);
    t->content_type.clear();
    t->forward.clear();
    return size * n;
  }
  const size_t colon = h.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = LowerCopy(h.substr(0, colon));
  std::string value = h.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
  if (name == "content-type") t->content_type = value;
  if (name == "warning") t->forward.push_back({"Warning", value});
  if (name == "retry-after") t->forward.push_back({"Retry-After", value});
  if (name == "audit-id") t->forward.push_back({"Audit-Id", value});
  return size * n;
}

size_t OnData(char* p, size_t size, size_t n, void* self) {
  auto* t = static_cast<Transfer*>(self);
  const size_t len = size * n;
  if (!t->watch || (t->code != 0 && t->code != 200)) {
    t->body.append(p, len);
    return len;
  }
  if (!StartWatchStream(t)) return 0;
  t->line.append(p, len);
  size_t nl;
  while ((nl = t->line.find('\n')) != std::string::npos) {
    const std::string event = t->line.substr(0, nl + 1);
    t->line.erase(0, nl + 1);
    if (t->flags->cut.load()) {
      // Half an event, then the connection closes without the terminating chunk.
      t->conn->WriteChunk(event.substr(0, event.size() / 2));
      t->conn->Cut();
      t->cut = true;
      return 0;
    }
    if (!t->conn->WriteChunk(event)) {
      t->client_gone = true;
      return 0;
    }
  }
  return len;
}

int OnProgress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(self);
  if (t->stopping->load()) return 1;
  if (!t->watch) return 0;
  if (t->flags->end.load()) {
    t->ended = true;
    return 1;
  }
  if (t->streaming && t->conn->PeerClosed()) {
    t->client_gone = true;
    return 1;
  }
  return 0;
}

}  // namespace

void FaultProxy::Impl::Handle(const https::HttpRequest& req, https::HttpConn& conn) {
  const bool watch = IsWatch(req);
  if (auto rule = TakeRule(req)) {
    https::HttpHeaders extra;
    if (rule->retry_after_s > 0) {
      extra.push_back(
          {"Retry-After", std::to_string(static_cast<int>(std::ceil(rule->retry_after_s)))});
    }
    Record(req, rule->status, watch, true);
    conn.Respond(rule->status, "application/json",
                 https::StatusBody(rule->status, internal::DefaultReason(rule->status),
                                   "injected by the test's fault proxy", rule->retry_after_s),
                 extra);
    return;
  }
  thread_local ThreadHandle th;
  CURL* h = th.h;
  char err[CURL_ERROR_SIZE];
  const std::string url = upstream.server + req.path + (req.query.empty() ? "" : "?" + req.query);
  curl::ResetWithBaseOptions(h, url, err);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(req.body.size()));  // NOLINT
  }
  curl::HeaderList headers;
  headers.Add("Expect:");
  for (const char* name : {"authorization", "accept", "content-type", "user-agent"}) {
    const std::string v = req.Header(name);
    if (!v.empty()) headers.Add(std::string(name) + ": " + v);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  curl_blob ca{const_cast<char*>(upstream.ca_pem.data()), upstream.ca_pem.size(), CURL_BLOB_COPY};
  curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
  curl_blob cert{const_cast<char*>(upstream.client_cert_pem.data()),
                 upstream.client_cert_pem.size(), CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(upstream.client_key_pem.data()), upstream.client_key_pem.size(),
                CURL_BLOB_COPY};
  if (req.Header("authorization").empty() && !upstream.client_cert_pem.empty()) {
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  if (!watch) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
  auto flags = std::make_shared<StreamFlags>();
  if (watch) {
    std::lock_guard<std::mutex> l(mu);
    open.insert(flags);
  }
  Transfer t;
  t.conn = &conn;
  t.watch = watch;
  t.flags = flags.get();
  t.stopping = &stopping;
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnData);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  const CURLcode rc = curl_easy_perform(h);
  if (watch) {
    std::lock_guard<std::mutex> l(mu);
    open.erase(flags);
  }
  if (t.cut || t.client_gone) {
    conn.set_closing();
    Record(req, static_cast<int>(t.code), watch, false);
    return;
  }
  if (t.streaming) {
    Record(req, 200, watch, false);
    if (!t.line.empty()) conn.WriteChunk(t.line);
    if (rc == CURLE_OK || t.ended) {
      conn.EndStream();
    } else {
      conn.Cut();  // the upstream stream broke: so does the client's
    }
    return;
  }
  if (rc != CURLE_OK) {
    const std::string msg =
        std::string("fault proxy: upstream ") + (err[0] ? err : curl_easy_strerror(rc));
    Record(req, 502, watch, false);
    conn.set_closing();
    conn.Respond(502, "application/json", https::StatusBody(502, "InternalError", msg));
    return;
  }
  Record(req, static_cast<int>(t.code), watch, false);
  conn.Respond(static_cast<int>(t.code), t.content_type, t.body, t.forward);
}

FaultProxy::FaultProxy() : impl_(std::make_unique<Impl>()) {}

FaultProxy::~FaultProxy() { Stop(); }

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(ClientConfig upstream) {
  if (upstream.server.empty()) return InvalidArgument("FaultProxy: upstream.server is empty");
  BW_RETURN_IF_ERROR(curl::GlobalInit());
  std::unique_ptr<FaultProxy> p(new FaultProxy());
  Impl* impl = p->impl_.get();
  impl->upstream = std::move(upstream);
  BW_ASSIGN_OR_RETURN(impl->tls, https::MakeTlsIdentity());
  impl->server = std::make_unique<https::HttpServer>(
      impl->tls.ctx,
      [impl](const https::HttpRequest& r, https::HttpConn& c) { impl->Handle(r, c); }, 4096);
  BW_RETURN_IF_ERROR(impl->server->Start());
  return p;
}

std::string FaultProxy::url() const {
  return "https://127.0.0.1:" + std::to_string(impl_->server->port());
}

std::string FaultProxy::ca_pem() const { return impl_->tls.ca_pem; }

ClientConfig FaultProxy::Through(ClientConfig cfg) const {
  cfg.server = url();
  cfg.ca_pem = ca_pem();
  cfg.client_cert_pem.clear();
  cfg.client_key_pem.clear();
  return cfg;
}

void FaultProxy::FailNext(int n, int http_status, double retry_after_s, const std::string& match) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->rules.push_back({n, http_status, retry_after_s, match});
}

void FaultProxy::CutWatches() {
  std::lock_guard<std::mutex> l(impl_->mu);
  for (const auto& f : impl_->open) f->cut.store(true);
}

void FaultProxy::EndWatches() {
  std::lock_guard<std::mutex> l(impl_->mu);
  for (const auto& f : impl_->open) f->end.store(true);
}

std::vector<RequestRecord> FaultProxy::Requests() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return {impl_->records.begin(), impl_->records.end()};
}

int FaultProxy::OpenWatches() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return static_cast<int>(impl_->open.size());
}

void FaultProxy::Stop() {
  if (!impl_ || !impl_->server) return;
  impl_->stopping.store(true);
  impl_->server->Stop();
}

}  // namespace bulwark::k8s::testing
