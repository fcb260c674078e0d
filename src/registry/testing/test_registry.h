// Test helpers for the registry client: a real registry (Debian's `docker-registry`,
// distribution 2.8, installed by scripts/setup.sh) on loopback, and images built from
// a directory and pushed to it with the distribution API's upload calls.
//
// TestRegistry::Start writes a config into a fresh temp dir (filesystem storage there,
// optionally htpasswd Basic auth with a bcrypt hash from libcrypt), starts the registry
// on 127.0.0.1 on a free port, and polls GET /v2/ until it answers (bounded by
// startup_timeout_s). The destructor stops it (SIGTERM, then SIGKILL of its group,
// reaped) and removes the dir. A missing binary is an error saying to run
// scripts/setup.sh: tests fail, not skip. Not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace bulwark::registry::testing {

struct TestRegistryOptions {
  std::string user, password;  // both set: htpasswd auth, else anonymous
  double startup_timeout_s = 20;
};

class TestRegistry {
 public:
  static Result<std::unique_ptr<TestRegistry>> Start(const TestRegistryOptions& opts);
  ~TestRegistry();
  TestRegistry(const TestRegistry&) = delete;
  TestRegistry& operator=(const TestRegistry&) = delete;

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  // Where the registry stores a blob's bytes (to corrupt one in a test).
  std::string BlobPath(const std::string& digest) const;
  std::string Output();  // what the registry printed so far

 private:
  TestRegistry() = default;
  pid_t pid_ = -1, pgid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  std::string dir_;
  std::string output_;
};

// The image to build: its config's fields and platform.
struct ImageSpec {
  std::vector<std::string> entrypoint, cmd, env;  // env: "NAME=value"
  std::string working_dir;
  std::string os = "linux", architecture = "amd64";
  bool oci = true;  // OCI media types, else Docker v2 schema 2
};

struct PushedImage {
  std::string manifest_digest, config_digest, layer_digest;
  size_t manifest_size = 0;
};

// Where and as whom to push.
struct PushTarget {
  std::string host;  // "127.0.0.1:PORT"
  std::string repository;
  std::string user, password;  // "" = anonymous
};

// Tars the regular files and directories under `dir` (sorted, mtime 0, uid/gid 0)
// into one uncompressed layer, writes the image config, uploads both blobs (POST then
// PUT ?digest=) and PUTs the manifest as `tag` ("" = by digest only).
Result<PushedImage> PushImage(const PushTarget& to, const std::string& tag, const std::string& dir,
                              const ImageSpec& spec);

// PUTs an OCI index (or Docker manifest list) naming already pushed manifests, each with
// its platform {os, architecture}, as `tag`. Returns the index's digest.
Result<std::string> PushIndex(const PushTarget& to, const std::string& tag,
                              const std::vector<std::pair<ImageSpec, PushedImage>>& entries,
                              bool oci = true);

// The uncompressed tar of `dir` as PushImage builds it.
Result<std::string> TarDirectory(const std::string& dir);

}  // namespace bulwark::registry::testing
