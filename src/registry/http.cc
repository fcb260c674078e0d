// One bounded HTTP exchange over libcurl, sha256 and base64 (internal.h).
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cctype>
#include <cmath>
#include <memory>

#include "common/curl_util.h"
#include "registry/internal.h"

namespace bulwark::registry::internal {
namespace {

struct Sink {
  HttpResponse* resp;
  size_t max;
  bool too_large = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (s->resp->body.size() + len > s->max) {
    s->too_large = true;
    return 0;  // aborts the transfer
  }
  s->resp->body.append(data, len);
  return len;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  std::string line(data, len);
  if (line.rfind("HTTP/", 0) == 0) {
    s->resp->headers.clear();  // a redirect's or 100-continue's headers
    return len;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return len;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string value = line.substr(colon + 1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front())))
    value.erase(value.begin());
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  s->resp->headers[name] = value;
  return len;
}

struct CurlDeleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
};

long Millis(double s) { return std::max(1L, static_cast<long>(std::lround(s * 1000))); }

}  // namespace

Result<HttpResponse> Send(const HttpRequest& req) {
  BW_RETURN_IF_ERROR(curl::GlobalInit());
  std::unique_ptr<CURL, CurlDeleter> h(curl_easy_init());
  if (!h) return Internal("curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE];
  curl::ResetWithBaseOptions(h.get(), req.url, errbuf);
  HttpResponse resp;
  Sink sink{&resp, req.max_body_bytes};
  curl::HeaderList headers;
  for (const std::string& hd : req.headers) headers.Add(hd);
  headers.Add("Expect:");
  CURL* c = h.get();
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, Millis(req.connect_timeout_s));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, Millis(req.timeout_s));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &sink);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (req.follow_redirects) {
    // Custom Authorization headers are not sent to another host (curl >= 7.58).
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  }
  if (!req.basic_user.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, req.basic_user.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, req.basic_password.c_str());
  }
  if (req.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  if (sink.too_large) {
    return InvalidArgument(req.method + " " + req.url + ": the answer is larger than " +
                           std::to_string(req.max_body_bytes) + " bytes");
  }
  if (rc != CURLE_OK) {
    const std::string why = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return DeadlineExceeded(req.method + " " + req.url + ": no answer within " +
                              std::to_string(static_cast<int>(std::ceil(req.timeout_s))) + " s (" +
                              why + ")");
    }
    return Unavailable(req.method + " " + req.url + ": " + why);
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

std::string Sha256Digest(const std::string& data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string Base64Encode(const std::string& raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(raw.data()),
                                static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> Base64Decode(const std::string& text) {
  std::string in;
  for (char ch : text) {
    if (!std::isspace(static_cast<unsigned char>(ch))) in += ch;
  }
  if (in.size() % 4 != 0) return InvalidArgument("not base64 (length not a multiple of 4)");
  std::string out(in.size() / 4 * 3 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return InvalidArgument("not base64");
  size_t pad = 0;
  if (!in.empty() && in.back() == '=') ++pad;
  if (in.size() > 1 && in[in.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

}  // namespace bulwark::registry::internal
