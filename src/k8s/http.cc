// HTTPS transport over libcurl. Design notes:
//  * Each pooled connection is a curl multi handle with one easy handle: the multi
//    handle keeps the connection cache (keep-alive across requests) and lets the
//    transfer loop poll in <= 50 ms steps, so `cancel` and the streaming idle timeout
//    take effect promptly whatever curl's own progress cadence is.
//  * A connection is used by one request at a time; a transfer that was aborted
//    (cancel, idle, error) discards its connection instead of pooling it.
//  * TLS: the server is verified against ClientConfig::ca_pem (CURLOPT_CAINFO_BLOB;
//    the system store when empty); client certificates go in as PEM blobs. The bearer
//    token is only ever placed in the Authorization header, never in a message.
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "common/clock.h"
#include "common/curl_util.h"
#include "k8s/internal.h"

namespace bulwark::k8s::internal {

namespace {

constexpr size_t kMaxPooled = 16;
constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxBody = size_t{1} << 30;
constexpr long kPollMs = 50;

// How a failed transfer failed: never reached the server (safe to repeat anything),
// failed in flight (repeat reads only), or will fail the same way again.
enum class Failure { kConnect, kTransient, kPermanent };

Failure Classify(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
      return Failure::kConnect;
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
      return Failure::kTransient;
    default:
      return Failure::kPermanent;
  }
}

// Per-transfer state shared with curl's callbacks.
struct Transfer {
  CURL* easy = nullptr;
  const HttpRequest* req = nullptr;
  HttpResult* res = nullptr;
  double last_byte = 0;  // SystemClock::Get()->NowMono() of the last byte received
  bool too_big = false;
};

size_t OnWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  t->last_byte = SystemClock::Get()->NowMono();
  HttpResult* r = t->res;
  if (r->status == 0) curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &r->status);
  if (r->status / 100 != 2) {  // keep the start of an error body for its Status
    size_t room = kMaxErrorBody > r->body.size() ? kMaxErrorBody - r->body.size() : 0;
    r->body.append(data, std::min(room, n));
    return n;
  }
  if (t->req->on_data) {
    if (!t->req->on_data(std::string_view(data, n))) {
      r->stopped = true;
      return 0;  // CURLE_WRITE_ERROR ends the transfer
    }
    return n;
  }
  if (r->body.size() + n > kMaxBody) {
    t->too_big = true;
    return 0;
  }
  r->body.append(data, n);
  return n;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->req->cancel != nullptr && t->req->cancel->load() ? 1 : 0;
}

void SetBlob(CURL* h, CURLoption opt, const std::string& pem) {
  curl_blob blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
  curl_easy_setopt(h, opt, &blob);
}

}  // namespace

struct Transport::Conn {
  CURLM* multi = nullptr;
  CURL* easy = nullptr;
  ~Conn() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
};

Transport::Transport(const ClientConfig& cfg) : cfg_(cfg) {}

Transport::~Transport() = default;

std::unique_ptr<Transport::Conn> Transport::Acquire() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<Conn>();
  c->multi = curl_multi_init();
  c->easy = curl_easy_init();
  if (c->multi == nullptr || c->easy == nullptr) return nullptr;
  return c;
}

void Transport::Release(std::unique_ptr<Conn> c) {
  std::lock_guard<std::mutex> l(mu_);
  if (idle_.size() < kMaxPooled) idle_.push_back(std::move(c));
}

HttpResult Transport::Do(const HttpRequest& req, const std::string& token) {
  HttpResult res;
  std::unique_ptr<Conn> conn = Acquire();
  if (conn == nullptr) {
    res.error = "curl initialisation failed";
    return res;
  }
  CURL* h = conn->easy;
  const bool streaming = static_cast<bool>(req.on_data);
  Transfer t;
  t.easy = h;
  t.req = &req;
  t.res = &res;
  t.last_byte = SystemClock::Get()->NowMono();

  curl::HeaderList hdrs;
  hdrs.Add("Accept: application/json");
  if (!token.empty()) hdrs.Add("Authorization: Bearer " + token);
  if (!req.content_type.empty()) hdrs.Add("Content-Type: " + req.content_type);
  hdrs.Add("Expect:");
  const std::string url = cfg_.server + req.path + (req.query.empty() ? "" : "?" + req.query);
  char errbuf[CURL_ERROR_SIZE];
  curl::ResetWithBaseOptions(h, url, errbuf);
  curl_easy_setopt(h, CURLOPT_USERAGENT, cfg_.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   std::max(1L, std::lround(cfg_.connect_timeout_s * 1000)));
  if (!streaming)
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, std::max(1L, std::lround(cfg_.timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs.list);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  if (cfg_.insecure_skip_tls_verify) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!cfg_.ca_pem.empty()) {
    SetBlob(h, CURLOPT_CAINFO_BLOB, cfg_.ca_pem);
  }
  if (!cfg_.client_cert_pem.empty()) {
    SetBlob(h, CURLOPT_SSLCERT_BLOB, cfg_.client_cert_pem);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    SetBlob(h, CURLOPT_SSLKEY_BLOB, cfg_.client_key_pem);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
  if (req.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else {
    // POSTFIELDS carries the body for every verb; CUSTOMREQUEST names the verb.
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.c_str());
    if (req.method != "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  CURLM* m = conn->multi;
  int running = 0;
  CURLMcode mc = curl_multi_add_handle(m, h);
  while (mc == CURLM_OK) {
    mc = curl_multi_perform(m, &running);
    if (mc != CURLM_OK || running == 0) break;
    if (req.cancel != nullptr && req.cancel->load()) {
      res.cancelled = true;
      break;
    }
    if (streaming && req.idle_timeout_s > 0 &&
        SystemClock::Get()->NowMono() - t.last_byte > req.idle_timeout_s) {
      res.idle = true;
      break;
    }
    curl_multi_poll(m, nullptr, 0, kPollMs, nullptr);
  }
  CURLcode rc = CURLE_OK;
  bool done = false;
  if (mc == CURLM_OK && running == 0) {
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(m, &left)) {
      if (msg->msg == CURLMSG_DONE) {
        rc = msg->data.result;
        done = true;
      }
    }
  }
  long sent = 0;
  curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &sent);
  curl_multi_remove_handle(m, h);

  if (mc != CURLM_OK) {
    res.error = std::string("curl multi: ") + curl_multi_strerror(mc);
  } else if (res.cancelled || res.idle) {
    res.error =
        res.cancelled ? "cancelled" : "no data for " + std::to_string(req.idle_timeout_s) + " s";
    res.retryable = res.idle;
  } else if (!done) {
    res.error = "transfer ended without a result";
  } else if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && res.stopped)) {
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    res.status = code;
    res.completed = true;
    curl_header* ra = nullptr;
    if (curl_easy_header(h, "Retry-After", 0, CURLH_HEADER, -1, &ra) == CURLHE_OK) {
      res.retry_after = ra->value;
    }
    Release(std::move(conn));
    return res;
  } else if (rc == CURLE_ABORTED_BY_CALLBACK) {
    res.cancelled = true;
    res.error = "cancelled";
  } else if (t.too_big) {
    res.error = "response body larger than " + std::to_string(kMaxBody >> 20) + " MiB";
  } else {
    res.error = curl_easy_strerror(rc);
    if (errbuf[0] != '\0') res.error += std::string(" (") + errbuf + ")";
    const Failure f = Classify(rc);
    res.retryable = f != Failure::kPermanent;
    res.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    res.connect_failed = f == Failure::kConnect || (res.retryable && sent == 0);
    if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE) {
      res.error +=
          "; check that the CA (kubeconfig certificate-authority[-data] or ca.crt) signed "
          "the server's certificate and that the server address matches it";
    }
  }
  return res;  // the connection is dropped: its state is unknown
}

std::string QueryEscape(std::string_view s) {
  char* e = curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
  if (e == nullptr) return "";
  std::string out(e);
  curl_free(e);
  return out;
}

void WaitOn(const Clock* clock, double seconds, const std::atomic<bool>* cancel,
            bool sleep_on_clock) {
  if (clock == nullptr) clock = SystemClock::Get();
  const double start = clock->NowMono();
  while (true) {
    if (cancel != nullptr && cancel->load()) return;
    const double left = seconds - (clock->NowMono() - start);
    // (A nanosecond short is done: a FakeClock far from 0 cannot advance by less.)
    if (left <= 1e-9) return;
    if (sleep_on_clock) {
      clock->SleepFor(std::min(left, 0.01));
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(left, 0.0005, 0.01)));
    }
  }
}

}  // namespace bulwark::k8s::internal
