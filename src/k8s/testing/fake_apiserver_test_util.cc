#include "k8s/testing/fake_apiserver_test_util.h"

#include <gtest/gtest.h>

#include <chrono>

namespace bulwark::k8s::testing {

namespace {

size_t Collect(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

size_t CollectHeader(char* p, size_t size, size_t n, void* out) {
  std::string line(p, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string k = line.substr(0, colon);
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string v = line.substr(colon + 1);
    size_t b = v.find_first_not_of(' ');
    size_t e = v.find_last_not_of("\r\n ");
    v = b == std::string::npos ? "" : v.substr(b, e - b + 1);
    static_cast<std::multimap<std::string, std::string>*>(out)->emplace(k, v);
  }
  return size * n;
}

void SetTls(CURL* h, const std::string& ca) {
  curl_blob blob{const_cast<char*>(ca.data()), ca.size(), CURL_BLOB_COPY};
  curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
}

}  // namespace

Json HttpResult::json() const { return Json::parse(body, nullptr, false); }

std::string HttpResult::Header(const std::string& lower) const {
  auto it = headers.find(lower);
  return it == headers.end() ? "" : it->second;
}

Curl::Curl(std::string url, std::string ca_pem, std::string token)
    : url_(std::move(url)), ca_(std::move(ca_pem)), token_(std::move(token)) {}

HttpResult Curl::Do(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& content_type, const std::vector<std::string>& headers) {
  HttpResult r;
  CURL* h = curl_easy_init();
  std::string url = url_ + path;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  SetTls(h, ca_);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
  curl_slist* hs = nullptr;
  if (!token_.empty()) hs = curl_slist_append(hs, ("Authorization: Bearer " + token_).c_str());
  if (!body.empty()) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));  // NOLINT
    hs = curl_slist_append(hs, ("Content-Type: " + content_type).c_str());
  }
  for (const std::string& x : headers) hs = curl_slist_append(hs, x.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, Collect);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, CollectHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &r.headers);
  r.curl = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.code);
  curl_slist_free_all(hs);
  curl_easy_cleanup(h);
  return r;
}

WatchStream::WatchStream(const FakeApiServer& s, const std::string& path_and_query) {
  std::string url = s.url() + path_and_query;
  std::string ca = s.ca_pem();
  std::string token = s.client_config().token;
  thread_ = std::thread([this, url, ca, token] {
    CURL* h = curl_easy_init();
    handle_ = h;
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    SetTls(h, ca);
    curl_slist* hs = nullptr;
    if (!token.empty()) hs = curl_slist_append(hs, ("Authorization: Bearer " + token).c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnData);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, this);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    // The multi interface, polled every 50 ms, so Cancel() takes effect promptly.
    CURLM* m = curl_multi_init();
    curl_multi_add_handle(m, h);
    int running = 1;
    while (running && !cancel_.load()) {
      curl_multi_perform(m, &running);
      if (running) curl_multi_poll(m, nullptr, 0, 50, nullptr);
    }
    CURLcode rc = CURLE_ABORTED_BY_CALLBACK;
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(m, &left)) {
      if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
    }
    curl_multi_remove_handle(m, h);
    curl_multi_cleanup(m);
    long code = 0;  // NOLINT(runtime/int)
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hs);
    curl_easy_cleanup(h);
    std::lock_guard<std::mutex> l(mu_);
    result_ = rc;
    code_ = code;
    done_ = true;
  });
}

WatchStream::~WatchStream() {
  cancel_ = true;
  thread_.join();
}

size_t WatchStream::OnData(char* p, size_t size, size_t n, void* self) {
  auto* w = static_cast<WatchStream*>(self);
  std::lock_guard<std::mutex> l(w->mu_);
  if (w->code_ == 0)
    curl_easy_getinfo(static_cast<CURL*>(w->handle_), CURLINFO_RESPONSE_CODE, &w->code_);
  w->buf_.append(p, size * n);
  size_t nl;
  while ((nl = w->buf_.find('\n')) != std::string::npos) {
    w->events_.push_back(Json::parse(w->buf_.substr(0, nl), nullptr, false));
    w->buf_.erase(0, nl + 1);
  }
  return size * n;
}

bool WatchStream::WaitFor(const std::function<bool()>& pred, double timeout_s) {
  return PollUntil(
      [&] {
        std::lock_guard<std::mutex> l(mu_);
        return pred();
      },
      timeout_s);
}

bool WatchStream::WaitEvents(size_t n, double timeout_s) {
  return WaitFor([&] { return events_.size() >= n; }, timeout_s);
}

bool WatchStream::WaitDone(double timeout_s) {
  return WaitFor([&] { return done_; }, timeout_s);
}

std::vector<Json> WatchStream::Events() {
  std::lock_guard<std::mutex> l(mu_);
  return events_;
}

std::string WatchStream::Partial() {
  std::lock_guard<std::mutex> l(mu_);
  return buf_;
}

bool WatchStream::done() {
  std::lock_guard<std::mutex> l(mu_);
  return done_;
}

CURLcode WatchStream::result() {
  std::lock_guard<std::mutex> l(mu_);
  return result_;
}

long WatchStream::http_code() {  // NOLINT(runtime/int)
  std::lock_guard<std::mutex> l(mu_);
  return code_;
}

std::unique_ptr<FakeApiServer> StartServer(FakeApiServerOptions o) {
  auto s = FakeApiServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

bool PollUntil(const std::function<bool()>& pred, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

Json PodJson(const std::string& ns, const std::string& name, const Json& labels,
             const std::string& node) {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

Resource PodsResource() { return {"", "v1", "pods", "Pod", true}; }
Resource NodesResource() { return {"", "v1", "nodes", "Node", false}; }

Json CrdJson(const std::string& group, const std::string& plural, const std::string& kind,
             const std::string& version, const Json& schema, const Json& version_extra) {
  Json v = {{"name", version},
            {"served", true},
            {"storage", true},
            {"schema", {{"openAPIV3Schema", schema}}}};
  for (const auto& [k, x] : version_extra.items()) v[k] = x;
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", plural + "." + group}}},
          {"spec",
           {{"group", group},
            {"scope", "Namespaced"},
            {"names", {{"plural", plural}, {"kind", kind}}},
            {"versions", {v}}}}};
}

Json OpenSpecStatusSchema() {
  Json open = {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  return {{"type", "object"}, {"properties", {{"spec", open}, {"status", open}}}};
}
Resource ConfigMapsResource() { return {"", "v1", "configmaps", "ConfigMap", true}; }

}  // namespace bulwark::k8s::testing
