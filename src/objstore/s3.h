// S3 object-store client: the S3 REST protocol (SigV4-signed, over libcurl) for the
// checkpoint engine's uploads and downloads of checkpoint shards. See docs/objstore.md.
//
// Contracts:
//  * Every public method returns Status/Result and never throws.
//  * S3Client is thread-safe: every method may be called concurrently from any
//    number of threads on one client. Curl handles are pooled per client.
//  * Every request has a deadline (S3Config::timeout_s, plus a connect timeout and a
//    low-speed abort), and is retried at most max_attempts times in total, with
//    exponential backoff and jitter, on connection errors, timeouts, HTTP 5xx, 429 and
//    S3's retryable 400 codes (RequestTimeout). No call can block forever.
//  * Keys passed to methods are relative to S3Config::prefix; List returns keys
//    relative to it too.
//  * Error messages name the operation, the full key, the HTTP status and S3's error
//    Code and Message, e.g. "S3 PUT ckpt/step-1/x: 403 SignatureDoesNotMatch: ...".
//    Status codes: 404 -> NotFound; 403 -> FailedPrecondition (status.h has no
//    PermissionDenied; the message carries the S3 code, e.g. AccessDenied,
//    SignatureDoesNotMatch, InvalidAccessKeyId); other 4xx -> InvalidArgument;
//    409 -> AlreadyExists; 5xx/429/connection errors after the last attempt ->
//    Unavailable; a timeout on the last attempt -> DeadlineExceeded; a response of the
//    wrong length or range, and a range past the end of the object -> DataLoss.
//  * timeout_s bounds a whole attempt, body transfer included: size it for the largest
//    single GET/PUT (a part, for multipart uploads), or read big objects with GetRange.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace bulwark::objstore {

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:4568" or "https://s3.us-east-1.amazonaws.com"
  std::string region = "us-east-1";
  std::string bucket;
  std::string prefix;               // prepended to every key ("" or "a/b/")
  std::string access_key;           // empty: from AWS_ACCESS_KEY_ID
  std::string secret_key;           // empty: from AWS_SECRET_ACCESS_KEY
  std::string session_token;        // optional, from AWS_SESSION_TOKEN when access_key is empty
  bool path_style = true;           // http://host/bucket/key vs http://bucket.host/key
  uint64_t part_size = 8ull << 20;  // multipart part size (>= 5 MiB unless allow_small_parts)
  bool allow_small_parts = false;   // tests only: permits part_size < 5 MiB
  int max_attempts = 4;             // attempts per request (>= 1); retries back off exponentially
  double timeout_s = 60;            // whole-request deadline, per attempt
  // Added beyond the original shape:
  double connect_timeout_s = 10;   // TCP/TLS connect deadline, per attempt (<= timeout_s)
  double backoff_initial_s = 0.2;  // first retry waits ~this long (jittered in [50%,100%])
  double backoff_max_s = 10;       // cap of one backoff wait
  int list_page_size = 1000;       // ListObjectsV2 max-keys per page (1..1000)
  // Source of x-amz-date (NowWall) and of the waits between retries (SleepFor; HTTP
  // timeouts are curl's, in real time). nullptr: SystemClock. Not owned; must outlive
  // the client. S3 rejects requests more than 15 minutes off its clock.
  const Clock* clock = nullptr;
};

// Parses "s3://bucket[/prefix][?endpoint=URL&region=R&path_style=true|false]".
// Fills bucket and prefix (a non-empty prefix gets a trailing '/'), and endpoint,
// region and path_style when given. Without endpoint= the endpoint is AWS's
// "https://s3.<region>.amazonaws.com" with virtual-hosted addressing. Credentials are
// left empty (read from the environment by S3Client::Create). Errors name the field.
Result<S3Config> ParseS3Url(const std::string& url);

struct ObjectInfo {
  std::string key;  // relative to S3Config::prefix
  uint64_t size = 0;
  std::string etag;  // without the surrounding quotes
};

// Counters since the client was created (monotonic, relaxed; for tests and metrics).
struct S3ClientStats {
  uint64_t requests = 0;           // HTTP attempts sent
  uint64_t retries = 0;            // attempts that were retries
  uint64_t multipart_uploads = 0;  // completed multipart uploads
  uint64_t parts_uploaded = 0;
  uint64_t aborted_uploads = 0;  // AbortMultipartUpload calls made after a failure
};

class S3Client {  // thread-safe: every method may be called concurrently
 public:
  // Validates cfg (errors name the S3Config field) and fills credentials from the
  // environment when empty. Does no I/O.
  static Result<std::unique_ptr<S3Client>> Create(S3Config cfg);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Config& config() const { return cfg_; }
  S3ClientStats Stats() const;

  // Creates the bucket. OK if it already exists and this account can use it.
  Status CreateBucket();
  // Single PUT when n <= part_size, else a multipart upload (aborted on failure).
  // data must stay valid for the call; it is not copied.
  Status Put(const std::string& key, const void* data, size_t n);
  // Uploads the file at path; multipart above part_size. Holds at most one part in
  // memory; never the whole file.
  Status PutFile(const std::string& key, const std::string& path);
  Result<std::string> Get(const std::string& key);
  // Reads exactly n bytes at offset into dst (Range request). DataLoss if the object
  // has fewer bytes there. n == 0 succeeds without I/O.
  Status GetRange(const std::string& key, uint64_t offset, uint64_t n, void* dst);
  // Streams the object to path (via "<path>.s3tmp" renamed into place on success; on
  // failure nothing is left at path).
  Status GetToFile(const std::string& key, const std::string& path);
  Result<ObjectInfo> Head(const std::string& key);  // NotFound on 404
  // Every object whose key starts with prefix (relative to S3Config::prefix), in key
  // order, following continuation tokens (ListObjectsV2).
  Result<std::vector<ObjectInfo>> List(const std::string& prefix);
  Status Delete(const std::string& key);  // OK if absent

 private:
  struct Impl;
  S3Client(S3Config cfg, std::unique_ptr<Impl> impl);
  S3Config cfg_;
  std::unique_ptr<Impl> impl_;
};

// Internals exposed for unit tests.
namespace s3_internal {
// Decodes the five predefined XML entities and numeric character references.
std::string XmlUnescape(std::string_view s);
struct ListPage {
  std::vector<ObjectInfo> objects;  // keys as the server sent them (full keys)
  bool truncated = false;
  std::string next_token;
};
// Parses a ListObjectsV2 response body. InvalidArgument on a malformed body.
Result<ListPage> ParseListObjectsV2(std::string_view xml);
// Error Code and Message from an S3 <Error> body; both empty when there is none.
struct S3ErrorBody {
  std::string code;
  std::string message;
};
S3ErrorBody ParseErrorBody(std::string_view xml);
}  // namespace s3_internal

}  // namespace bulwark::objstore
