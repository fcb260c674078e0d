#include "objstore/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>
#include <map>

namespace bulwark::objstore {
namespace {

std::string Digest(const EVP_MD* md, const void* data, size_t n) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest only fails on allocation failure; an empty result then fails every
  // comparison downstream rather than being silently accepted.
  if (EVP_Digest(data, n, out, &len, md, nullptr) != 1) return std::string();
  return std::string(reinterpret_cast<const char*>(out), len);
}

// Trims leading/trailing whitespace and collapses runs of spaces into one (the
// SigV4 "Trimall" of a header value).
std::string TrimAll(std::string_view v) {
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  size_t b = 0, e = v.size();
  while (b < e && is_ws(v[b])) ++b;
  while (e > b && is_ws(v[e - 1])) --e;
  std::string out;
  out.reserve(e - b);
  bool prev_space = false;
  for (size_t i = b; i < e; ++i) {
    char c = v[i];
    if (c == ' ') {
      if (!prev_space) out.push_back(' ');
      prev_space = true;
    } else {
      out.push_back(c);
      prev_space = false;
    }
  }
  return out;
}

}  // namespace

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string Sha256Hex(const void* data, size_t n) {
  return HexEncode(Digest(EVP_sha256(), data, n));
}

std::string Sha256Hex(std::string_view s) { return Sha256Hex(s.data(), s.size()); }

std::string HmacSha256(std::string_view key, std::string_view msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len) == nullptr) {
    return std::string();
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string HexEncode(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string Md5Base64(const void* data, size_t n) {
  std::string md5 = Digest(EVP_md5(), data, n);
  unsigned char out[64];
  int len = EVP_EncodeBlock(out, reinterpret_cast<const unsigned char*>(md5.data()),
                            static_cast<int>(md5.size()));
  return std::string(reinterpret_cast<const char*>(out), len > 0 ? len : 0);
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (c == '/' && !encode_slash)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string FormatAmzDate(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  size_t n = strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf, n);
}

std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

SigV4Signature SignV4(const SigV4Request& req, const SigV4Credentials& creds,
                      std::string_view region, std::string_view service,
                      std::string_view amz_date) {
  SigV4Signature sig;
  // Canonical headers: lowercase names, sorted; repeated names joined with ','.
  std::map<std::string, std::vector<std::string>> headers;
  for (const auto& [name, value] : req.headers) headers[AsciiLower(name)].push_back(TrimAll(value));
  std::string canonical_headers;
  for (const auto& [name, values] : headers) {
    if (!sig.signed_headers.empty()) sig.signed_headers.push_back(';');
    sig.signed_headers += name;
    canonical_headers += name;
    canonical_headers.push_back(':');
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) canonical_headers.push_back(',');
      canonical_headers += values[i];
    }
    canonical_headers.push_back('\n');
  }
  sig.canonical_request = req.method + "\n" + req.canonical_uri + "\n" +
                          CanonicalQueryString(req.query) + "\n" + canonical_headers + "\n" +
                          sig.signed_headers + "\n" + req.payload_hash;

  std::string_view date = amz_date.substr(0, 8);
  sig.credential_scope =
      std::string(date) + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
  sig.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + sig.credential_scope +
                       "\n" + Sha256Hex(sig.canonical_request);

  std::string key = HmacSha256("AWS4" + creds.secret_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  sig.signature = HexEncode(HmacSha256(key, sig.string_to_sign));
  sig.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key + "/" +
                      sig.credential_scope + ", SignedHeaders=" + sig.signed_headers +
                      ", Signature=" + sig.signature;
  return sig;
}

}  // namespace bulwark::objstore
