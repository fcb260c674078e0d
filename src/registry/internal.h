// Internals of the registry component shared with its test helpers
// (registry/testing): one bounded HTTP exchange over libcurl, sha256 and base64.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::registry::internal {

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;        // "Name: value"
  std::string body;                        // sent for PUT/POST/PATCH
  std::string basic_user, basic_password;  // Basic auth when basic_user is not ""
  bool follow_redirects = false;           // GET of blobs: storage backends redirect
  double connect_timeout_s = 10;
  double timeout_s = 30;
  size_t max_body_bytes = 4 << 20;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lowercased; the last value wins
  std::string body;
};

// Sends one request. Unavailable when the server cannot be reached (its curl error in
// the message), DeadlineExceeded after timeout_s, InvalidArgument for a body over
// max_body_bytes; any HTTP status is a successful exchange.
Result<HttpResponse> Send(const HttpRequest& req);

std::string Sha256Digest(const std::string& data);  // "sha256:<64 lowercase hex>"
std::string Base64Encode(const std::string& raw);
// nullopt-like: InvalidArgument for text that is not base64.
Result<std::string> Base64Decode(const std::string& text);
// write(2) that fails with EPIPE instead of raising SIGPIPE when the reader is gone (a
// credential helper that exits without reading its stdin); the signal mask is kept.
ssize_t WriteNoSigpipe(int fd, const void* data, size_t n);

}  // namespace bulwark::registry::internal
