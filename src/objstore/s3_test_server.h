// Test helper: starts a real S3-compatible server (s3rver 3.7.1 on node, installed in
// tools/s3rver by scripts/setup.sh) on 127.0.0.1 with an ephemeral port and a fresh
// data directory, and stops it (SIGTERM, then SIGKILL of its process group, reaped)
// in the destructor. See docs/objstore.md for what s3rver does and does not check.
//
// Two modes:
//  * verify_sigv4 = true (default): s3rver is loaded by a small node wrapper that puts
//    a SigV4 verifier in front of s3rver's own handlers. s3rver 3.7.1 itself does NOT
//    check V4 signatures (only that the Authorization header is well formed and the
//    access key exists). The verifier recomputes every request's signature from the
//    bytes on the wire with the server's secret and answers 403 SignatureDoesNotMatch
//    (with the CanonicalRequest and StringToSign it computed) when they differ, checks
//    the credential scope and that every x-amz-* header is signed, and checks
//    x-amz-content-sha256 and Content-MD5 against the body received.
//  * verify_sigv4 = false: the stock `s3rver` command line (bin/s3rver.js), unchanged.
//
// Not thread-safe; one owner. Failing to start (node or s3rver missing, startup
// timeout) is an error whose message says how to install them: tests must fail, not
// skip, when it happens.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace bulwark::objstore {

struct S3TestServerOptions {
  std::string source_dir;  // the repository root (tools/s3rver is found under it)
  bool verify_sigv4 = true;
  double startup_timeout_s = 20;
};

class S3TestServer {
 public:
  // s3rver's built-in account.
  static constexpr const char* kAccessKey = "S3RVER";
  static constexpr const char* kSecretKey = "S3RVER";

  static Result<std::unique_ptr<S3TestServer>> Start(const S3TestServerOptions& opts);
  ~S3TestServer();
  S3TestServer(const S3TestServer&) = delete;
  S3TestServer& operator=(const S3TestServer&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& data_dir() const { return dir_; }
  // Output the server printed so far (for failure messages).
  std::string Output();

 private:
  S3TestServer() = default;
  pid_t pid_ = -1;
  pid_t pgid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  std::string dir_;
  std::string output_;
};

}  // namespace bulwark::objstore
