// S3 client over libcurl. Design notes:
//  * One curl easy handle per in-flight request, taken from a small per-client pool
//    (connections are reused). Handles are never shared between threads at once.
//  * Every attempt is signed afresh (new x-amz-date) and carries the real SHA-256 of
//    its payload in x-amz-content-sha256 and, for bodies, Content-MD5.
//  * The URL path and query sent are exactly the canonical URI and canonical query
//    string that were signed (CURLOPT_PATH_AS_IS stops curl from normalising them).
//  * Response bodies go to the caller's sink (string, fixed buffer or file) only for
//    2xx responses; error bodies are captured (capped) and parsed for Code/Message.
#include "objstore/s3.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_set>
#include <utility>

#include "common/curl_util.h"
#include "common/markup.h"
#include "objstore/sigv4.h"

namespace bulwark::objstore {

using Pairs = std::vector<std::pair<std::string, std::string>>;

namespace {

constexpr uint64_t kMinPartSize = 5ull << 20;
constexpr uint64_t kMaxPartSize = 5ull << 30;
constexpr uint64_t kMaxParts = 10000;
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxPooledHandles = 16;

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\n')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) {
    --e;
  }
  return std::string(s.substr(b, e - b));
}

std::string StripQuotes(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

bool ParseU64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The next element <tag ...>content</tag> (or <tag/>) at or after *pos in xml.
// Returns its raw content and moves *pos past it; nullopt if there is none.
std::optional<std::string_view> NextElement(std::string_view xml, std::string_view tag,
                                            size_t* pos) {
  const std::string open = "<" + std::string(tag);
  const std::string close = "</" + std::string(tag) + ">";
  size_t p = *pos;
  while (true) {
    size_t s = xml.find(open, p);
    if (s == std::string_view::npos) return std::nullopt;
    size_t after = s + open.size();
    if (after >= xml.size()) return std::nullopt;
    char c = xml[after];
    if (c != '>' && c != '/' && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      p = after;  // a longer tag name with this prefix, e.g. <KeyCount> for <Key>
      continue;
    }
    size_t gt = xml.find('>', after);
    if (gt == std::string_view::npos) return std::nullopt;
    if (xml[gt - 1] == '/') {  // <tag/>
      *pos = gt + 1;
      return std::string_view();
    }
    size_t e = xml.find(close, gt + 1);
    if (e == std::string_view::npos) return std::nullopt;
    *pos = e + close.size();
    return xml.substr(gt + 1, e - gt - 1);
  }
}

std::optional<std::string> ElementText(std::string_view xml, std::string_view tag) {
  size_t pos = 0;
  auto v = NextElement(xml, tag, &pos);
  if (!v) return std::nullopt;
  return s3_internal::XmlUnescape(*v);
}

Status StatusForHttp(long http, const std::string& code, std::string msg) {
  if (http == 404) return NotFound(std::move(msg));
  if (http == 403 || http == 401) return FailedPrecondition(std::move(msg));
  if (http == 409) return Status(Code::kAlreadyExists, std::move(msg));
  if (http == 412) return FailedPrecondition(std::move(msg));
  if (http == 429 || http >= 500) return Unavailable(std::move(msg));
  if (http >= 400) return InvalidArgument(std::move(msg));  // 400, 405, 411, 413, 416, ...
  if (http >= 300 && http < 400) return FailedPrecondition(std::move(msg));  // wrong region
  if (code == "InternalError" || code == "SlowDown" || code == "ServiceUnavailable") {
    return Unavailable(std::move(msg));  // an <Error> inside a 200 response
  }
  return Internal(std::move(msg));
}

bool RetryableHttp(long http, const std::string& code) {
  if (http == 429 || http == 500 || http == 502 || http == 503 || http == 504) return true;
  if (http == 400 && code == "RequestTimeout") return true;
  if (http / 100 == 2) {  // CompleteMultipartUpload may answer 200 with an <Error>
    return code == "InternalError" || code == "SlowDown" || code == "ServiceUnavailable";
  }
  return false;
}

bool RetryableCurl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SEND_FAIL_REWIND:
      return true;
    default:
      return false;
  }
}

Status ValidateKey(const std::string& full_key, const std::string& key) {
  if (key.empty()) return InvalidArgument("S3 key is empty");
  if (full_key.size() > kMaxKeyBytes) {
    return InvalidArgument("S3 key '" + full_key + "' is " + std::to_string(full_key.size()) +
                           " bytes; S3 allows at most 1024");
  }
  for (unsigned char c : full_key) {
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgument("S3 key '" + full_key +
                             "' contains a control character; such keys cannot be listed "
                             "through S3's XML responses");
    }
  }
  return Status::Ok();
}

bool ValidBucketName(const std::string& b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(b.front()) && alnum(b.back());
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Where a response body goes when the response is 2xx.
enum class Sink { kString, kBuffer, kFile };

struct Request {
  std::string op;        // "PUT", "UploadPart 3/5", "ListObjectsV2", ...
  std::string method;    // HTTP method
  std::string full_key;  // prefix + key; empty for bucket-level requests
  Pairs query;
  Pairs headers;  // extra headers, all signed (e.g. range, content-md5, content-type)
  const char* body = nullptr;
  size_t body_len = 0;
  bool error_in_2xx_body = false;  // parse a 2xx body for <Error> (CompleteMultipartUpload)
  Sink sink = Sink::kString;
  char* buf = nullptr;  // Sink::kBuffer
  uint64_t buf_len = 0;
  int fd = -1;  // Sink::kFile
};

struct Response {
  long http = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;                            // 2xx body (Sink::kString) or error body
  uint64_t sink_bytes = 0;                     // bytes written to a buffer/file sink
  s3_internal::S3ErrorBody error;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Per-attempt transfer state shared with curl's callbacks.
struct Transfer {
  const Request* req = nullptr;
  Response* resp = nullptr;
  size_t up_off = 0;
  bool overflow = false;  // a buffer sink received more than it can hold
  Status sink_error;      // a file sink failed to write
};

size_t OnHeader(char* data, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nitems;
  std::string_view line(data, n);
  if (line.substr(0, 5) == "HTTP/") {  // a new response (e.g. after 100 Continue)
    t->resp->headers.clear();
    size_t sp = line.find(' ');
    uint64_t code = 0;
    if (sp != std::string_view::npos && ParseU64(line.substr(sp + 1, 3), &code)) {
      t->resp->http = static_cast<long>(code);
    }
    return n;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->resp->headers[AsciiLower(Trim(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
  }
  return n;
}

size_t OnWrite(char* data, size_t size, size_t nmemb, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = size * nmemb;
  Response* r = t->resp;
  if (r->http / 100 != 2) {  // error body: keep the start of it for Code/Message
    size_t room = kMaxErrorBody > r->body.size() ? kMaxErrorBody - r->body.size() : 0;
    r->body.append(data, std::min(room, n));
    return n;
  }
  switch (t->req->sink) {
    case Sink::kString:
      r->body.append(data, n);
      return n;
    case Sink::kBuffer:
      if (r->sink_bytes + n > t->req->buf_len) {
        t->overflow = true;
        return 0;  // aborts the transfer with CURLE_WRITE_ERROR
      }
      std::memcpy(t->req->buf + r->sink_bytes, data, n);
      r->sink_bytes += n;
      return n;
    case Sink::kFile: {
      size_t done = 0;
      while (done < n) {
        ssize_t w = write(t->req->fd, data + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          t->sink_error = ErrnoStatus("write", w < 0 ? errno : EIO);
          return 0;
        }
        done += static_cast<size_t>(w);
      }
      r->sink_bytes += n;
      return n;
    }
  }
  return 0;
}

size_t OnRead(char* dst, size_t size, size_t nitems, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t n = std::min(size * nitems, t->req->body_len - t->up_off);
  if (n) std::memcpy(dst, t->req->body + t->up_off, n);
  t->up_off += n;
  return n;
}

int OnSeek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > t->req->body_len) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  t->up_off = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

struct Endpoint {
  std::string scheme;    // "http" or "https"
  std::string hostport;  // "127.0.0.1:4568"
};

Result<Endpoint> ParseEndpoint(const std::string& e) {
  Endpoint ep;
  std::string rest;
  if (e.rfind("http://", 0) == 0) {
    ep.scheme = "http";
    rest = e.substr(7);
  } else if (e.rfind("https://", 0) == 0) {
    ep.scheme = "https";
    rest = e.substr(8);
  } else {
    return InvalidArgument("S3Config.endpoint '" + e +
                           "': must start with http:// or https:// (e.g. "
                           "https://s3.us-east-1.amazonaws.com)");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find_first_of("/?#@ ") != std::string::npos) {
    return InvalidArgument("S3Config.endpoint '" + e +
                           "': expected scheme://host[:port] with no path, query or user");
  }
  ep.hostport = rest;
  return ep;
}

}  // namespace

// --- s3_internal ---------------------------------------------------------------------

namespace s3_internal {

std::string XmlUnescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) {
      out.push_back('&');
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    std::optional<uint32_t> cp;
    if (ent == "amp") cp = '&';
    if (ent == "lt") cp = '<';
    if (ent == "gt") cp = '>';
    if (ent == "quot") cp = '"';
    if (ent == "apos") cp = '\'';
    if (!cp && ent.size() >= 2 && ent[0] == '#') {
      bool hex = ent[1] == 'x' || ent[1] == 'X';
      std::string digits(ent.substr(hex ? 2 : 1));
      char* end = nullptr;
      unsigned long v = digits.empty() ? 0 : std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (!digits.empty() && end && *end == '\0' && v > 0 && v <= 0x10FFFF) {
        cp = static_cast<uint32_t>(v);
      }
    }
    if (!cp) {
      out.push_back('&');  // not an entity we know: keep it literally
      continue;
    }
    AppendUtf8(*cp, &out);
    i = semi;
  }
  return out;
}

Result<ListPage> ParseListObjectsV2(std::string_view xml) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return InvalidArgument("ListObjectsV2 response has no <ListBucketResult>: " +
                           std::string(xml.substr(0, 200)));
  }
  ListPage page;
  size_t pos = 0;
  while (auto contents = NextElement(xml, "Contents", &pos)) {
    ObjectInfo info;
    auto key = ElementText(*contents, "Key");
    auto size = ElementText(*contents, "Size");
    if (!key || !size || !ParseU64(Trim(*size), &info.size)) {
      return InvalidArgument("ListObjectsV2 response: <Contents> without a valid Key and Size: " +
                             std::string(contents->substr(0, 200)));
    }
    info.key = *key;
    info.etag = StripQuotes(Trim(ElementText(*contents, "ETag").value_or("")));
    page.objects.push_back(std::move(info));
  }
  // Keys are XML-escaped, so these tags can only be the response's own elements.
  auto truncated = ElementText(xml, "IsTruncated");
  page.truncated = truncated && Trim(*truncated) == "true";
  page.next_token = ElementText(xml, "NextContinuationToken").value_or("");
  return page;
}

S3ErrorBody ParseErrorBody(std::string_view xml) {
  S3ErrorBody e;
  size_t pos = 0;
  auto err = NextElement(xml, "Error", &pos);
  if (!err) return e;
  e.code = Trim(ElementText(*err, "Code").value_or(""));
  e.message = Trim(ElementText(*err, "Message").value_or(""));
  return e;
}

}  // namespace s3_internal

// --- S3Client::Impl ------------------------------------------------------------------

struct S3Client::Impl {
  S3Config cfg;
  Endpoint ep;
  const Clock* clock = nullptr;

  std::mutex pool_mu;
  std::vector<CURL*> pool;  // idle handles

  std::atomic<uint64_t> requests{0}, retries{0}, multipart_uploads{0}, parts_uploaded{0},
      aborted_uploads{0};

  ~Impl() {
    for (CURL* h : pool) curl_easy_cleanup(h);
  }

  CURL* Acquire() {
    {
      std::lock_guard<std::mutex> l(pool_mu);
      if (!pool.empty()) {
        CURL* h = pool.back();
        pool.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }

  void Release(CURL* h, bool healthy) {
    if (healthy) {
      std::lock_guard<std::mutex> l(pool_mu);
      if (pool.size() < kMaxPooledHandles) {
        pool.push_back(h);
        return;
      }
    }
    curl_easy_cleanup(h);
  }

  std::string Display(const Request& r) const {
    return r.full_key.empty() ? "s3://" + cfg.bucket : r.full_key;
  }

  double BackoffSeconds(int retry) const {
    double d = cfg.backoff_initial_s * std::pow(2.0, retry - 1);
    d = std::min(d, cfg.backoff_max_s);
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    return d * jitter(rng);
  }

  // One HTTP exchange. Returns the curl result; fills resp.
  CURLcode Once(CURL* h, const Request& req, Transfer* t, char* errbuf) {
    const bool vhost = !cfg.path_style;
    const std::string host = vhost ? cfg.bucket + "." + ep.hostport : ep.hostport;
    std::string path;
    if (vhost) {
      path = "/" + UriEncode(req.full_key, /*encode_slash=*/false);
    } else {
      path = "/" + cfg.bucket;
      if (!req.full_key.empty()) path += "/" + UriEncode(req.full_key, false);
    }
    const std::string query = CanonicalQueryString(req.query);
    const std::string url = ep.scheme + "://" + host + path + (query.empty() ? "" : "?" + query);

    SigV4Request sr;
    sr.method = req.method;
    sr.canonical_uri = path;
    sr.query = req.query;
    sr.payload_hash = req.body_len ? Sha256Hex(req.body, req.body_len) : std::string(kEmptySha256);
    const double now = (clock ? clock : SystemClock::Get())->NowWall();
    const std::string amz_date = FormatAmzDate(static_cast<int64_t>(std::floor(now)));
    sr.headers = {
        {"host", host}, {"x-amz-date", amz_date}, {"x-amz-content-sha256", sr.payload_hash}};
    if (!cfg.session_token.empty())
      sr.headers.emplace_back("x-amz-security-token", cfg.session_token);
    for (const auto& hv : req.headers) sr.headers.push_back(hv);
    SigV4Signature sig = SignV4(sr, {cfg.access_key, cfg.secret_key}, cfg.region, "s3", amz_date);

    curl::HeaderList hdrs;
    for (const auto& [k, v] : sr.headers) hdrs.Add(k + ": " + v);
    hdrs.Add("Authorization: " + sig.authorization);
    hdrs.Add("Expect:");  // no 100-continue round trip
    bool has_content_type = false;
    for (const auto& hv : req.headers) has_content_type |= AsciiLower(hv.first) == "content-type";
    if (!has_content_type) hdrs.Add("Content-Type:");  // no curl default for POST

    curl::ResetWithBaseOptions(h, url, errbuf);
    const long timeout_ms = std::max(1L, static_cast<long>(cfg.timeout_s * 1000));
    const long connect_ms =
        std::max(1L, static_cast<long>(std::min(cfg.connect_timeout_s, cfg.timeout_s) * 1000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    // Abort a transfer that moves less than 1 KiB/s for 30 s (or the whole timeout).
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, std::min(30L, static_cast<long>(std::ceil(cfg.timeout_s)))));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs.list);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWrite);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
    if (req.method == "GET") {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (req.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (req.method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, OnRead);
      curl_easy_setopt(h, CURLOPT_READDATA, t);
      curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, OnSeek);
      curl_easy_setopt(h, CURLOPT_SEEKDATA, t);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body_len));
    } else if (req.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body_len));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body_len ? req.body : "");
    } else {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    requests.fetch_add(1, std::memory_order_relaxed);
    return curl_easy_perform(h);
  }

  // Runs req with retries. OK iff the final response is 2xx (and, with
  // error_in_2xx_body, has no <Error>). *resp holds the last response either way.
  Status Perform(const Request& req, Response* resp) {
    const std::string what = "S3 " + req.op + " " + Display(req);
    Status last;
    for (int attempt = 1; attempt <= cfg.max_attempts; ++attempt) {
      if (attempt > 1) {
        retries.fetch_add(1, std::memory_order_relaxed);
        (clock ? clock : SystemClock::Get())->SleepFor(BackoffSeconds(attempt - 1));
        if (req.sink == Sink::kFile) {
          if (ftruncate(req.fd, 0) != 0 || lseek(req.fd, 0, SEEK_SET) != 0) {
            return ErrnoStatus(what + ": truncating the download file for a retry", errno);
          }
        }
      }
      *resp = Response();
      Transfer t;
      t.req = &req;
      t.resp = resp;
      char errbuf[CURL_ERROR_SIZE];
      CURL* h = Acquire();
      if (h == nullptr) return Internal(what + ": curl_easy_init failed");
      CURLcode rc = Once(h, req, &t, errbuf);
      if (rc == CURLE_OK) {
        long code = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        resp->http = code;
      }
      Release(h, rc == CURLE_OK);

      if (rc != CURLE_OK) {
        if (t.overflow) {
          return DataLoss(what + ": the server sent more than the " + std::to_string(req.buf_len) +
                          " bytes requested");
        }
        if (!t.sink_error.ok()) return t.sink_error.Annotate(what);
        std::string detail = curl_easy_strerror(rc);
        if (errbuf[0]) detail += " (" + std::string(errbuf) + ")";
        std::string msg = what + ": " + detail;
        last = rc == CURLE_OPERATION_TIMEDOUT ? DeadlineExceeded(msg) : Unavailable(msg);
        if (!RetryableCurl(rc)) return Internal(msg);
        continue;
      }
      if (resp->http / 100 == 2 && !req.error_in_2xx_body) return Status::Ok();
      resp->error = s3_internal::ParseErrorBody(resp->body);
      if (resp->http / 100 == 2 && resp->error.code.empty()) return Status::Ok();
      if (resp->error.code.empty()) resp->error.code = resp->Header("x-amz-error-code");
      std::string msg = what + ": " + std::to_string(resp->http);
      if (!resp->error.code.empty()) msg += " " + resp->error.code;
      if (!resp->error.message.empty()) msg += ": " + resp->error.message;
      if (resp->error.code.empty() && resp->error.message.empty() && !resp->body.empty()) {
        msg += ": " + resp->body.substr(0, 200);
      }
      last = StatusForHttp(resp->http, resp->error.code, msg);
      if (!RetryableHttp(resp->http, resp->error.code)) return last;
    }
    if (cfg.max_attempts > 1) {
      return Status(last.code(),
                    last.message() + " (after " + std::to_string(cfg.max_attempts) + " attempts)");
    }
    return last;
  }

  // Single-request PUT of an object.
  Status PutObject(const std::string& full_key, const char* data, size_t n) {
    Request r;
    r.op = "PUT";
    r.method = "PUT";
    r.full_key = full_key;
    r.body = data;
    r.body_len = n;
    r.headers = {{"content-md5", Md5Base64(data, n)}};
    Response resp;
    return Perform(r, &resp);
  }

  uint64_t EffectivePartSize(uint64_t total) const {
    uint64_t min_for_count = (total + kMaxParts - 1) / kMaxParts;
    return std::max<uint64_t>(cfg.part_size, min_for_count);
  }

  // Multipart upload of `total` bytes; part i's bytes come from get_part(offset, len,
  // scratch) which returns a pointer valid until the next call.
  template <typename GetPart>
  Status Multipart(const std::string& full_key, uint64_t total, GetPart get_part) {
    const uint64_t part = EffectivePartSize(total);
    const uint64_t nparts = (total + part - 1) / part;
    Request create;
    create.op = "CreateMultipartUpload";
    create.method = "POST";
    create.full_key = full_key;
    create.query = {{"uploads", ""}};
    Response resp;
    BW_RETURN_IF_ERROR(Perform(create, &resp));
    std::string upload_id = ElementText(resp.body, "UploadId").value_or("");
    if (upload_id.empty()) {
      return Internal("S3 CreateMultipartUpload " + full_key +
                      ": no UploadId in the response: " + resp.body.substr(0, 200));
    }

    auto abort = [&](const Status& cause) {
      aborted_uploads.fetch_add(1, std::memory_order_relaxed);
      Request ab;
      ab.op = "AbortMultipartUpload";
      ab.method = "DELETE";
      ab.full_key = full_key;
      ab.query = {{"uploadId", upload_id}};
      Response ar;
      Status st = Perform(ab, &ar);
      if (st.ok() || st.code() == Code::kNotFound) return cause;
      return Status(cause.code(), cause.message() + " (AbortMultipartUpload of upload " +
                                      upload_id + " also failed: " + st.message() + ")");
    };

    std::vector<std::string> etags;
    std::string scratch;
    for (uint64_t i = 0; i < nparts; ++i) {
      const uint64_t off = i * part;
      const uint64_t len = std::min(part, total - off);
      const char* data = nullptr;
      Status got = get_part(off, len, &scratch, &data);
      if (!got.ok()) return abort(got);
      Request up;
      up.op = "UploadPart " + std::to_string(i + 1) + "/" + std::to_string(nparts);
      up.method = "PUT";
      up.full_key = full_key;
      up.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
      up.body = data;
      up.body_len = len;
      up.headers = {{"content-md5", Md5Base64(data, len)}};
      Response ur;
      Status st = Perform(up, &ur);
      if (!st.ok()) return abort(st);
      std::string etag = ur.Header("etag");
      if (etag.empty()) {
        return abort(Internal("S3 " + up.op + " " + full_key + ": response has no ETag header"));
      }
      etags.push_back(etag);
      parts_uploaded.fetch_add(1, std::memory_order_relaxed);
    }

    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
             XmlEscape(etags[i]) + "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    Request done;
    done.op = "CompleteMultipartUpload";
    done.method = "POST";
    done.full_key = full_key;
    done.query = {{"uploadId", upload_id}};
    done.body = xml.data();
    done.body_len = xml.size();
    done.headers = {{"content-type", "application/xml"},
                    {"content-md5", Md5Base64(xml.data(), xml.size())}};
    done.error_in_2xx_body = true;
    Response dr;
    Status st = Perform(done, &dr);
    if (!st.ok()) return abort(st);
    multipart_uploads.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
};

// --- ParseS3Url ----------------------------------------------------------------------

Result<S3Config> ParseS3Url(const std::string& url) {
  const std::string usage = " (expected s3://bucket[/prefix][?endpoint=URL&region=R&path_style=B])";
  if (url.rfind("s3://", 0) != 0) {
    return InvalidArgument("S3 URL '" + url + "': scheme must be s3://" + usage);
  }
  std::string rest = url.substr(5), query;
  if (size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  S3Config cfg;
  size_t slash = rest.find('/');
  cfg.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) cfg.prefix = rest.substr(slash + 1);
  if (cfg.bucket.empty()) return InvalidArgument("S3 URL '" + url + "': bucket is empty" + usage);
  if (!ValidBucketName(cfg.bucket)) {
    return InvalidArgument("S3 URL '" + url + "': bucket '" + cfg.bucket +
                           "' is not a valid bucket name (3-63 of a-z 0-9 . -)");
  }
  if (!cfg.prefix.empty() && cfg.prefix.front() == '/') {
    return InvalidArgument("S3 URL '" + url + "': prefix must not start with '/'");
  }
  if (!cfg.prefix.empty() && cfg.prefix.back() != '/') cfg.prefix.push_back('/');
  bool path_style_given = false;
  size_t p = 0;
  while (p < query.size()) {
    size_t amp = query.find('&', p);
    std::string kv = query.substr(p, amp == std::string::npos ? std::string::npos : amp - p);
    p = amp == std::string::npos ? query.size() : amp + 1;
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq);
    std::string v = eq == std::string::npos ? "" : PercentDecode(kv.substr(eq + 1));
    if (k == "endpoint") {
      cfg.endpoint = v;
    } else if (k == "region") {
      if (v.empty()) return InvalidArgument("S3 URL '" + url + "': region is empty");
      cfg.region = v;
    } else if (k == "path_style") {
      if (v == "true" || v == "1") {
        cfg.path_style = true;
      } else if (v == "false" || v == "0") {
        cfg.path_style = false;
      } else {
        return InvalidArgument("S3 URL '" + url + "': path_style must be true or false, not '" + v +
                               "'");
      }
      path_style_given = true;
    } else {
      return InvalidArgument("S3 URL '" + url + "': unknown parameter '" + k +
                             "' (known: endpoint, region, path_style)");
    }
  }
  if (cfg.endpoint.empty()) {
    cfg.endpoint = "https://s3." + cfg.region + ".amazonaws.com";
    if (!path_style_given) cfg.path_style = false;
  } else {
    auto ep = ParseEndpoint(cfg.endpoint);
    if (!ep.ok()) return InvalidArgument("S3 URL '" + url + "': " + ep.status().message());
  }
  return cfg;
}

// --- S3Client ------------------------------------------------------------------------

S3Client::S3Client(S3Config cfg, std::unique_ptr<Impl> impl)
    : cfg_(std::move(cfg)), impl_(std::move(impl)) {}

S3Client::~S3Client() = default;

Result<std::unique_ptr<S3Client>> S3Client::Create(S3Config cfg) {
  BW_RETURN_IF_ERROR(curl::GlobalInit());
  BW_ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(cfg.endpoint));
  if (cfg.bucket.empty()) return InvalidArgument("S3Config.bucket is empty");
  if (!ValidBucketName(cfg.bucket)) {
    return InvalidArgument("S3Config.bucket '" + cfg.bucket +
                           "' is not a valid bucket name (3-63 characters of a-z 0-9 . -, "
                           "starting and ending with a letter or digit)");
  }
  if (cfg.region.empty()) return InvalidArgument("S3Config.region is empty");
  if (!cfg.prefix.empty() && cfg.prefix.front() == '/') {
    return InvalidArgument("S3Config.prefix '" + cfg.prefix + "' must not start with '/'");
  }
  if (cfg.access_key.empty()) {
    if (!cfg.secret_key.empty()) {
      return InvalidArgument("S3Config.secret_key is set but S3Config.access_key is empty");
    }
    const char* ak = std::getenv("AWS_ACCESS_KEY_ID");
    const char* sk = std::getenv("AWS_SECRET_ACCESS_KEY");
    const char* tok = std::getenv("AWS_SESSION_TOKEN");
    if (ak == nullptr || *ak == '\0') {
      return InvalidArgument("S3Config.access_key is empty and AWS_ACCESS_KEY_ID is not set");
    }
    if (sk == nullptr || *sk == '\0') {
      return InvalidArgument("S3Config.secret_key is empty and AWS_SECRET_ACCESS_KEY is not set");
    }
    cfg.access_key = ak;
    cfg.secret_key = sk;
    if (cfg.session_token.empty() && tok != nullptr) cfg.session_token = tok;
  } else if (cfg.secret_key.empty()) {
    return InvalidArgument("S3Config.secret_key is empty but S3Config.access_key is set");
  }
  if (cfg.part_size == 0 || cfg.part_size > kMaxPartSize) {
    return InvalidArgument("S3Config.part_size " + std::to_string(cfg.part_size) +
                           " is outside (0, 5 GiB]");
  }
  if (cfg.part_size < kMinPartSize && !cfg.allow_small_parts) {
    return InvalidArgument("S3Config.part_size " + std::to_string(cfg.part_size) +
                           " is below S3's 5 MiB minimum part size (set allow_small_parts only "
                           "for servers that accept smaller parts)");
  }
  if (cfg.max_attempts < 1) return InvalidArgument("S3Config.max_attempts must be >= 1");
  if (!(cfg.timeout_s > 0)) return InvalidArgument("S3Config.timeout_s must be > 0");
  if (!(cfg.connect_timeout_s > 0))
    return InvalidArgument("S3Config.connect_timeout_s must be > 0");
  if (!(cfg.backoff_initial_s >= 0) || !(cfg.backoff_max_s >= 0)) {
    return InvalidArgument("S3Config.backoff_initial_s and backoff_max_s must be >= 0");
  }
  if (cfg.list_page_size < 1 || cfg.list_page_size > 1000) {
    return InvalidArgument("S3Config.list_page_size must be in [1, 1000]");
  }
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->ep = ep;
  impl->clock = cfg.clock;
  return std::unique_ptr<S3Client>(new S3Client(std::move(cfg), std::move(impl)));
}

S3ClientStats S3Client::Stats() const {
  S3ClientStats s;
  s.requests = impl_->requests.load(std::memory_order_relaxed);
  s.retries = impl_->retries.load(std::memory_order_relaxed);
  s.multipart_uploads = impl_->multipart_uploads.load(std::memory_order_relaxed);
  s.parts_uploaded = impl_->parts_uploaded.load(std::memory_order_relaxed);
  s.aborted_uploads = impl_->aborted_uploads.load(std::memory_order_relaxed);
  return s;
}

Status S3Client::CreateBucket() {
  Request r;
  r.op = "CreateBucket";
  r.method = "PUT";
  std::string body;
  if (cfg_.region != "us-east-1") {
    body = "<CreateBucketConfiguration><LocationConstraint>" + XmlEscape(cfg_.region) +
           "</LocationConstraint></CreateBucketConfiguration>";
    r.body = body.data();
    r.body_len = body.size();
  }
  Response resp;
  Status st = impl_->Perform(r, &resp);
  if (st.ok() || resp.error.code == "BucketAlreadyOwnedByYou") return Status::Ok();
  if (resp.http == 409 && resp.error.code == "BucketAlreadyExists") {
    // Taken by someone, possibly us (some servers answer this for our own buckets):
    // HEAD says whether we can use it.
    Request head;
    head.op = "HeadBucket";
    head.method = "HEAD";
    Response hr;
    Status hs = impl_->Perform(head, &hr);
    if (hs.ok()) return Status::Ok();
    return Status(Code::kAlreadyExists,
                  st.message() + "; and it is not usable with these credentials: " + hs.message());
  }
  return st;
}

Status S3Client::Put(const std::string& key, const void* data, size_t n) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  if (n > 0 && data == nullptr) return InvalidArgument("S3 PUT " + full + ": data is null");
  const char* bytes = static_cast<const char*>(data);
  if (n <= cfg_.part_size) return impl_->PutObject(full, bytes, n);
  return impl_->Multipart(full, n, [bytes](uint64_t off, uint64_t, std::string*, const char** out) {
    *out = bytes + off;
    return Status::Ok();
  });
}

namespace {

// Reads exactly len bytes at off, or DataLoss if the file is shorter.
Status PreadFull(int fd, const std::string& path, uint64_t off, uint64_t len, char* dst) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t r = pread(fd, dst + done, len - done, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoStatus("read " + path, errno);
    if (r == 0) {
      return DataLoss("read " + path + ": file shrank while uploading (EOF at byte " +
                      std::to_string(off + done) + ")");
    }
    done += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Status S3Client::PutFile(const std::string& key, const std::string& path) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  FdCloser closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return ErrnoStatus("stat " + path, errno);
  if (!S_ISREG(st.st_mode))
    return InvalidArgument("S3 PutFile: " + path + " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size <= cfg_.part_size) {
    std::string buf(size, '\0');
    BW_RETURN_IF_ERROR(PreadFull(fd, path, 0, size, buf.data()));
    return impl_->PutObject(full, buf.data(), buf.size());
  }
  return impl_->Multipart(
      full, size, [fd, &path](uint64_t off, uint64_t len, std::string* scratch, const char** out) {
        scratch->resize(len);
        BW_RETURN_IF_ERROR(PreadFull(fd, path, off, len, scratch->data()));
        *out = scratch->data();
        return Status::Ok();
      });
}

Result<std::string> S3Client::Get(const std::string& key) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  Request r;
  r.op = "GET";
  r.method = "GET";
  r.full_key = full;
  Response resp;
  BW_RETURN_IF_ERROR(impl_->Perform(r, &resp));
  return std::move(resp.body);
}

Status S3Client::GetRange(const std::string& key, uint64_t offset, uint64_t n, void* dst) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  if (n == 0) return Status::Ok();
  if (dst == nullptr) return InvalidArgument("S3 GET " + full + ": dst is null");
  if (offset > UINT64_MAX - n) return InvalidArgument("S3 GET " + full + ": offset + n overflows");
  const uint64_t last = offset + n - 1;
  const std::string range = "bytes=" + std::to_string(offset) + "-" + std::to_string(last);
  Request r;
  r.op = "GET";
  r.method = "GET";
  r.full_key = full;
  r.headers = {{"range", range}};
  r.sink = Sink::kBuffer;
  r.buf = static_cast<char*>(dst);
  r.buf_len = n;
  Response resp;
  Status st = impl_->Perform(r, &resp);
  const std::string what = "S3 GET " + full + " " + range;
  if (resp.http == 416) {
    return DataLoss(what + ": the object is shorter than the requested range (416 " +
                    resp.error.code + ")");
  }
  BW_RETURN_IF_ERROR(st);
  if (resp.http == 206) {
    // "bytes <first>-<last>/<total>" must be exactly the range asked for.
    std::string cr = resp.Header("content-range");
    std::string want = "bytes " + std::to_string(offset) + "-" + std::to_string(last) + "/";
    if (cr.rfind(want, 0) != 0) {
      return DataLoss(what + ": server returned Content-Range '" + cr +
                      "' (the object is shorter than the range, or the server misread it)");
    }
  } else if (offset != 0) {
    return DataLoss(what + ": server answered " + std::to_string(resp.http) +
                    " instead of 206 Partial Content");
  }
  if (resp.sink_bytes != n) {
    return DataLoss(what + ": got " + std::to_string(resp.sink_bytes) + " of " + std::to_string(n) +
                    " bytes");
  }
  return Status::Ok();
}

Status S3Client::GetToFile(const std::string& key, const std::string& path) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  const std::string tmp = path + ".s3tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open " + tmp, errno);
  Request r;
  r.op = "GET";
  r.method = "GET";
  r.full_key = full;
  r.sink = Sink::kFile;
  r.fd = fd;
  Response resp;
  Status st = impl_->Perform(r, &resp);
  if (st.ok()) {
    std::string cl = resp.Header("content-length");
    uint64_t expect = 0;
    if (!cl.empty() && ParseU64(cl, &expect) && expect != resp.sink_bytes) {
      st = DataLoss("S3 GET " + full + ": wrote " + std::to_string(resp.sink_bytes) +
                    " bytes but Content-Length is " + cl);
    }
  }
  if (st.ok() && fsync(fd) != 0) st = ErrnoStatus("fsync " + tmp, errno);
  if (close(fd) != 0 && st.ok()) st = ErrnoStatus("close " + tmp, errno);
  if (st.ok() && rename(tmp.c_str(), path.c_str()) != 0) st = ErrnoStatus("rename " + tmp, errno);
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  return Status::Ok();
}

Result<ObjectInfo> S3Client::Head(const std::string& key) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  Request r;
  r.op = "HEAD";
  r.method = "HEAD";
  r.full_key = full;
  Response resp;
  BW_RETURN_IF_ERROR(impl_->Perform(r, &resp));
  ObjectInfo info;
  info.key = key;
  if (!ParseU64(resp.Header("content-length"), &info.size)) {
    return Internal("S3 HEAD " + full + ": response has no valid Content-Length ('" +
                    resp.Header("content-length") + "')");
  }
  info.etag = StripQuotes(resp.Header("etag"));
  return info;
}

Result<std::vector<ObjectInfo>> S3Client::List(const std::string& prefix) {
  const std::string full_prefix = cfg_.prefix + prefix;
  std::vector<ObjectInfo> out;
  std::string token;
  // A listing ends: a server whose tokens lead back to a page already listed (a cycle of
  // tokens, or a server that ignores continuation-token and mints a new one for the
  // same page) is found by a token or a key seen twice, not followed for ever.
  std::unordered_set<std::string> tokens_followed;
  std::unordered_set<std::string> keys_listed;
  for (int page = 1;; ++page) {
    Request r;
    r.op = "ListObjectsV2";
    r.method = "GET";
    r.query = {{"list-type", "2"}, {"max-keys", std::to_string(cfg_.list_page_size)}};
    if (!full_prefix.empty()) r.query.emplace_back("prefix", full_prefix);
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    Response resp;
    Status st = impl_->Perform(r, &resp);
    if (!st.ok()) return st.Annotate("listing prefix '" + full_prefix + "'");
    auto parsed = s3_internal::ParseListObjectsV2(resp.body);
    if (!parsed.ok()) return parsed.status().Annotate("S3 ListObjectsV2 s3://" + cfg_.bucket);
    for (auto& o : parsed->objects) {
      if (o.key.rfind(full_prefix, 0) != 0) {
        return Internal("S3 ListObjectsV2 s3://" + cfg_.bucket + ": server returned key '" + o.key +
                        "' outside prefix '" + full_prefix + "'");
      }
      if (!keys_listed.insert(o.key).second) {
        return Internal("S3 ListObjectsV2 s3://" + cfg_.bucket + ": page " + std::to_string(page) +
                        " lists key '" + o.key +
                        "' again: the server's continuation tokens lead back to pages "
                        "already listed (does it support continuation-token?)");
      }
      o.key = o.key.substr(cfg_.prefix.size());
      out.push_back(std::move(o));
    }
    if (!parsed->truncated) break;
    if (parsed->next_token.empty()) {
      return Internal("S3 ListObjectsV2 s3://" + cfg_.bucket + ": page " + std::to_string(page) +
                      " is truncated but has no NextContinuationToken");
    }
    if (!tokens_followed.insert(parsed->next_token).second) {
      return Internal("S3 ListObjectsV2 s3://" + cfg_.bucket + ": page " + std::to_string(page) +
                      " gives NextContinuationToken '" + parsed->next_token +
                      "', which the listing already followed: the server's tokens cycle");
    }
    token = parsed->next_token;
  }
  return out;
}

Status S3Client::Delete(const std::string& key) {
  const std::string full = cfg_.prefix + key;
  BW_RETURN_IF_ERROR(ValidateKey(full, key));
  Request r;
  r.op = "DELETE";
  r.method = "DELETE";
  r.full_key = full;
  Response resp;
  Status st = impl_->Perform(r, &resp);
  if (!st.ok() && resp.http == 404 && resp.error.code != "NoSuchBucket") return Status::Ok();
  return st;
}

}  // namespace bulwark::objstore
