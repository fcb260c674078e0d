// Internals of the Kubernetes client shared by its .cc files and unit tests. Not part
// of the public API: the operator includes client.h, informer.h, workqueue.h and
// leader.h only.
//
// Pure helpers (error mapping, line framing, watch-event decoding, encodings) are
// thread-safe. Transport is thread-safe; one pooled connection serves one request
// at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/client.h"

namespace bulwark::k8s::internal {

// j[key] when j is an object and that member is a string, else "".
inline std::string StrField(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// --- error mapping (errors.cc) -----------------------------------------------------

// The Status for a non-2xx response: "VERB PATH: 409 Conflict: <API message>". `body`
// is the response body (a Kubernetes Status object when the API wrote one, else any
// text, of which the first 200 bytes are quoted). The code follows client.h.
Status StatusFromHttp(const std::string& verb, const std::string& path, long http,
                      std::string_view body);
// The same for a Status object carried by a watch ERROR event (its `code` field is
// the HTTP status).
Status StatusFromApiStatus(const std::string& verb, const std::string& path, const Json& st);
// At most 200 characters of a response body or line for an error message, line
// breaks flattened, "..." when cut.
std::string Excerpt(std::string_view s);
// "Conflict", "NotFound", ... for an HTTP status without a Status reason.
const char* DefaultReason(long http);
// Seconds from a Retry-After header (delta-seconds only); nullopt when absent/invalid.
std::optional<double> ParseRetryAfter(const std::string& value);

// --- encodings (encoding.cc) --------------------------------------------------------

// Standard base64 (whitespace ignored, padding optional); nullopt on bad input.
std::optional<std::string> Base64Decode(std::string_view s);
// RFC 3339 with microseconds ("2026-11-24T22:33:01.123456Z"): metav1.MicroTime.
std::string Rfc3339Micro(double unix_seconds);
// "" when `name` is usable as one path segment, else why not (for error messages).
std::string CheckPathSegment(const std::string& name);

// --- watch stream framing (watch.cc) ------------------------------------------------

// Splits a byte stream into '\n'-terminated lines across arbitrary chunk boundaries.
// A trailing '\r' is removed; empty lines are skipped. Not thread-safe.
class LineSplitter {
 public:
  // Appends data and calls on_line for every complete line, in order. Stops early and
  // returns false when on_line returns false (the rest of the chunk is dropped).
  bool Feed(std::string_view data, const std::function<bool(std::string_view)>& on_line);
  // Bytes of an incomplete last line held back (never delivered unless completed).
  size_t pending() const { return buf_.size(); }
  void Clear() { buf_.clear(); }

 private:
  std::string buf_;
};

// Decodes one watch line ({"type": "...", "object": {...}}). Errors name the line
// number and quote its start.
Result<WatchEvent> ParseWatchLine(std::string_view line, uint64_t line_no);

// --- HTTP transport over libcurl (http.cc) -----------------------------------------

// Percent-encodes everything but RFC 3986 unreserved characters (curl_easy_escape).
std::string QueryEscape(std::string_view s);

struct HttpRequest {
  std::string method;  // GET, POST, PUT, PATCH, DELETE
  std::string path;    // "/api/v1/namespaces/x/pods"
  std::string query;   // encoded, without '?'
  std::string body;
  std::string content_type;  // for bodies
  // Streaming: when set, 2xx body bytes go here as they arrive (returning false
  // aborts the transfer, reported as `stopped`), nothing is buffered, there is no
  // overall timeout and the transfer fails once no byte arrives for idle_timeout_s.
  std::function<bool(std::string_view)> on_data;
  double idle_timeout_s = 0;
  const std::atomic<bool>* cancel = nullptr;  // aborts within ~50 ms when true
};

struct HttpResult {
  // Transport outcome. When `completed`, `status` and the body are the server's.
  bool completed = false;
  bool connect_failed = false;  // the request never reached the server
  bool timed_out = false;
  bool idle = false;       // streaming: idle_timeout_s without a byte
  bool cancelled = false;  // `cancel` became true
  bool stopped = false;    // on_data returned false
  bool retryable = false;  // a transient transport failure (connection, timeout, reset)
  std::string error;       // curl's description when !completed
  long status = 0;
  std::string body;         // 2xx body (not streaming) or the start of an error body
  std::string retry_after;  // the Retry-After header, "" when absent
};

class Transport {
 public:
  // Validates nothing (Client::Create does); copies what it needs from cfg.
  explicit Transport(const ClientConfig& cfg);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // One attempt of `req` with the bearer `token` ("" = none). Never throws.
  HttpResult Do(const HttpRequest& req, const std::string& token);

 private:
  struct Conn;
  std::unique_ptr<Conn> Acquire();
  void Release(std::unique_ptr<Conn> c);

  ClientConfig cfg_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_;
};

// Waits `seconds` as measured on `clock` or until `cancel` becomes true (checked at
// least every 10 ms of the wait). `sleep_on_clock`: the wait is the clock's SleepFor in
// steps (a FakeClock advances itself, the wait takes no real time). Otherwise the clock
// is polled every <= 10 ms of real time and only its owner moves it (a FakeClock's
// owner ends the wait by advancing it, or `cancel` does).
void WaitOn(const Clock* clock, double seconds, const std::atomic<bool>* cancel,
            bool sleep_on_clock);

}  // namespace bulwark::k8s::internal

namespace bulwark::k8s {

// Shared state of a Client (client.cc, watch.cc).
struct Client::Impl {
  explicit Impl(const ClientConfig& cfg) : transport(cfg) {}
  internal::Transport transport;
  const Clock* clock = nullptr;
  mutable std::mutex token_mu;
  std::string token;  // current bearer token (re-read from token_file on 401)
  std::atomic<uint64_t> requests{0}, retries{0}, watch_events{0};

  std::string Token() const;
  // Re-reads cfg.token_file; true when it yielded a token.
  bool ReloadToken(const ClientConfig& cfg);
  // The jittered wait before retry `retry` (1-based), Retry-After honoured.
  double Backoff(const ClientConfig& cfg, int retry, std::optional<double> retry_after) const;
  // Runs req with the retry rules of client.h. On OK, *out holds the 2xx result.
  Status Perform(const ClientConfig& cfg, const internal::HttpRequest& req,
                 internal::HttpResult* out);
};

}  // namespace bulwark::k8s
