// AWS Signature Version 4 (header-based, payload signed in a single chunk) and the
// hashing/encoding primitives it needs.
//
// Everything here is a pure function of its arguments (no clock, no environment, no
// I/O) and is thread-safe. SignV4 implements the algorithm described in the IAM User
// Guide ("Create a signed AWS API request") and, for S3, in the Amazon S3 API
// Reference ("Signature Calculations for the Authorization Header: Transferring
// Payload in a Single Chunk"). It is tested against AWS's published vectors in
// sigv4_test.cc.
//
// S3 differs from other services in one way that matters here: the canonical URI is
// the path URI-encoded exactly once and is not normalised ("a//b" and "a/./b" are
// distinct keys). The caller therefore passes the canonical URI already encoded (use
// UriEncode(path, /*encode_slash=*/false)), and must send exactly that path on the
// wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bulwark::objstore {

// SHA-256 of an empty payload, in lowercase hex.
inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Lowercase hex of the SHA-256 digest of the bytes.
std::string Sha256Hex(const void* data, size_t n);
std::string Sha256Hex(std::string_view s);
// Raw (32-byte) HMAC-SHA256 of msg under key.
std::string HmacSha256(std::string_view key, std::string_view msg);
// Lowercase hex of raw bytes.
std::string HexEncode(std::string_view raw);
// `s` with A-Z lowered (header names, hex digests); other bytes unchanged.
std::string AsciiLower(std::string_view s);
// Base64 of the MD5 digest (the Content-MD5 header value).
std::string Md5Base64(const void* data, size_t n);

// SigV4 UriEncode over the UTF-8 bytes of s: A-Z a-z 0-9 '-' '.' '_' '~' are kept,
// '/' is kept unless encode_slash, every other byte becomes %XX (uppercase hex).
// Use encode_slash=false for paths and true for query names and values.
std::string UriEncode(std::string_view s, bool encode_slash);

// ISO 8601 basic UTC timestamp, "20130524T000000Z", of Unix time in seconds.
std::string FormatAmzDate(int64_t unix_seconds);

// Query parameters encoded with UriEncode(.., true), sorted by encoded name then
// encoded value, joined as "a=1&b=&c=3" (a parameter without a value keeps its '=').
// This is both the canonical query string and the query the client must send.
std::string CanonicalQueryString(const std::vector<std::pair<std::string, std::string>>& query);

struct SigV4Credentials {
  std::string access_key;
  std::string secret_key;
};

struct SigV4Request {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the already-encoded path, e.g. "/test%24file.text"
  // Decoded query parameter names and values, in any order.
  std::vector<std::pair<std::string, std::string>> query;
  // Every header to sign (names in any case, values as sent). Repeated names are
  // joined with ',' in their given order. Must include "host" (and, for S3,
  // "x-amz-content-sha256"); "x-amz-date" must equal the amz_date passed to SignV4.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // lowercase hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string credential_scope;  // "20130524/us-east-1/s3/aws4_request"
  std::string signed_headers;    // "host;range;x-amz-content-sha256;x-amz-date"
  std::string signature;         // lowercase hex
  // "AWS4-HMAC-SHA256 Credential=<key>/<scope>, SignedHeaders=<..>, Signature=<..>"
  std::string authorization;
};

// Signs req. amz_date is "YYYYMMDDTHHMMSSZ" (see FormatAmzDate); its first eight
// characters form the scope date. Pure: the same inputs give the same output.
SigV4Signature SignV4(const SigV4Request& req, const SigV4Credentials& creds,
                      std::string_view region, std::string_view service, std::string_view amz_date);

}  // namespace bulwark::objstore
