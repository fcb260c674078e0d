// Test helpers for the fake API server's tests: a blocking HTTPS client and a watch
// stream reader, both straight on libcurl (deliberately not bw_k8s's Client, so the
// server is checked independently of the client it serves).
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "k8s/testing/fake_apiserver.h"

namespace bulwark::k8s::testing {

// The pods collection of the default namespace.
inline constexpr const char* kPods = "/api/v1/namespaces/default/pods";
// The CRD collection, and the TrainJobs of the default namespace (once a test has
// created their CRD).
inline constexpr const char* kCrds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
inline constexpr const char* kJobs = "/apis/bulwark.dev/v1alpha1/namespaces/default/trainjobs";

struct HttpResult {
  CURLcode curl = CURLE_OK;
  long code = 0;  // NOLINT(runtime/int)
  std::string body;
  std::multimap<std::string, std::string> headers;  // lower-case names
  Json json() const;                                // the body parsed (null when not JSON)
  std::string Header(const std::string& lower) const;
};

// Blocking requests to one server. Thread-compatible: one instance per thread.
class Curl {
 public:
  Curl(std::string url, std::string ca_pem, std::string token = "");
  explicit Curl(const FakeApiServer& s) : Curl(s.url(), s.ca_pem(), s.client_config().token) {}
  HttpResult Do(const std::string& method, const std::string& path, const std::string& body = "",
                const std::string& content_type = "application/json",
                const std::vector<std::string>& headers = {});
  HttpResult Get(const std::string& path) { return Do("GET", path); }
  HttpResult Post(const std::string& path, const Json& body) {
    return Do("POST", path, body.dump());
  }
  HttpResult Put(const std::string& path, const Json& body) { return Do("PUT", path, body.dump()); }
  HttpResult Patch(const std::string& path, const Json& body,
                   const std::string& type = "application/merge-patch+json") {
    return Do("PATCH", path, body.dump(), type);
  }
  HttpResult Delete(const std::string& path, const Json& body = nullptr) {
    return Do("DELETE", path, body.is_null() ? "" : body.dump());
  }

 private:
  std::string url_, ca_, token_;
};

// One watch request read on a background thread; events are the complete lines.
class WatchStream {
 public:
  WatchStream(const FakeApiServer& s, const std::string& path_and_query);
  ~WatchStream();  // cancels the transfer (<= ~50 ms) and joins
  // Waits until at least n events arrived; false after timeout_s.
  bool WaitEvents(size_t n, double timeout_s);
  // Waits until the transfer ended; false after timeout_s.
  bool WaitDone(double timeout_s);
  std::vector<Json> Events();
  std::string Partial();  // bytes after the last newline
  bool done();
  CURLcode result();
  long http_code();  // NOLINT(runtime/int)
  void Cancel() { cancel_ = true; }

 private:
  static size_t OnData(char* p, size_t size, size_t n, void* self);
  bool WaitFor(const std::function<bool()>& pred, double timeout_s);

  std::mutex mu_;
  std::string buf_;
  std::vector<Json> events_;
  bool done_ = false;
  CURLcode result_ = CURLE_OK;
  long code_ = 0;  // NOLINT(runtime/int)
  std::atomic<bool> cancel_{false};
  void* handle_ = nullptr;  // the CURL handle, used on thread_ only
  std::thread thread_;
};

// A started server; a failure to start fails the calling test (nullptr).
std::unique_ptr<FakeApiServer> StartServer(FakeApiServerOptions o = {});

// Polls pred every 5 ms until it holds; false after timeout_s.
bool PollUntil(const std::function<bool()>& pred, double timeout_s);

// Objects for tests.
Json PodJson(const std::string& ns, const std::string& name, const Json& labels = Json::object(),
             const std::string& node = "");
Resource PodsResource();
// A CustomResourceDefinition "<plural>.<group>" with one served storage version
// `version` whose openAPIV3Schema is `schema`; `version_extra`'s keys (subresources,
// additionalPrinterColumns, ...) are added to that version.
Json CrdJson(const std::string& group, const std::string& plural, const std::string& kind,
             const std::string& version, const Json& schema,
             const Json& version_extra = Json::object());
// An object schema whose spec and status keep any fields.
Json OpenSpecStatusSchema();
Resource NodesResource();
Resource ConfigMapsResource();

}  // namespace bulwark::k8s::testing
