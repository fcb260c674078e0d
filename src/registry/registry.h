// Registry client: reads a container image's config (ImageConfig: Entrypoint, Cmd,
// WorkingDir, Env) from its registry through the OCI distribution API, the way Argo's
// emissary executor finds the command of a container that gives none
// (docs/trainjob.md, "Commands from the image"). Library bw_registry.
//
// Resolution: GET the manifest (Accept: OCI index, Docker manifest list, OCI manifest,
// Docker v2 manifest); from an index the manifest of the configured platform; GET the
// config blob; every manifest fetched by digest and the config are checked against
// their sha256 digests. Auth: anonymous first; on 401 Basic or the Bearer token flow
// (WWW-Authenticate: Bearer realm, service, scope) with the credentials a
// kubernetes.io/dockerconfigjson pull secret holds for the registry's host. http for
// loopback hosts and the configured insecure registries, https otherwise. Every request
// is bounded (connect and total timeouts).
//
// Cache: the config by (repository, manifest digest) for the client's life (content
// addressed); a tag's manifest digest for `tag_ttl_s`. A reference by digest or a tag
// seen within the TTL costs no request. Entries are kept per credential, so one pull
// secret's result is never served to a caller without it.
//
// Errors (each message names the image and registry and says the fix):
//   NotFound          the repository, tag, digest or platform does not exist
//   PermissionDenied  401/403: no credentials, or the pull secret's were refused
//   Unavailable       the registry cannot be reached (DNS, connect, TLS, 5xx)
//   DeadlineExceeded  no answer within the timeout
//   DataLoss          a manifest or config whose digest does not match
//   InvalidArgument   a malformed reference, pull secret, manifest or config
//
// Thread-safe: one client may serve many threads; the cache is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "registry/image_config.h"

namespace bulwark::registry {

// A parsed image reference. Docker's defaults: no registry host -> docker.io (served
// at registry-1.docker.io), a single-component name on docker.io -> library/NAME, no
// tag and no digest -> tag "latest".
struct ImageRef {
  std::string registry;         // as written or "docker.io", e.g. "localhost:5000"
  std::string repository;       // "pytorch/pytorch", "library/ubuntu"
  std::string tag;              // "" when only a digest is given
  std::string digest;           // "sha256:<64 hex>" or ""
  std::string ApiHost() const;  // registry-1.docker.io for docker.io, else registry
  // The manifest reference: the digest when given, else the tag.
  std::string Reference() const { return digest.empty() ? tag : digest; }
  std::string ToString() const;  // registry/repository[:tag][@digest]
};

// InvalidArgument for a reference that is not [host[:port]/]path[:tag][@sha256:hex].
Result<ImageRef> ParseImageRef(const std::string& image);

// A kubernetes.io/dockerconfigjson Secret: its name (for messages) and the decoded
// `.dockerconfigjson` ({"auths": {HOST: {"auth": base64(user:pass)} or
// {"username", "password"}}}).
struct PullSecret {
  std::string name;
  std::string dockerconfigjson;
};

// This machine's Docker credentials for `image`, for `bulwark run`, from
// $DOCKER_CONFIG/config.json, else ~/.docker/config.json, as `docker pull` finds them:
// the credential helper of the image's registry (`credHelpers`, else `credsStore`) run
// as `docker-credential-<name> get` with the registry on stdin (Docker's protocol: JSON
// {ServerURL, Username, Secret} on stdout, at most 10 s), then the file's own `auths`.
// Empty when there is no file or it names nothing for the registry. Errors name the
// file or helper and the fix: a file that is not JSON, a helper not on PATH or failing
// (a helper's "credentials not found" is not an error: anonymous), an identity token
// (Username "<token>": log in with a password or access token instead).
Result<std::vector<PullSecret>> LocalDockerCredentials(const std::string& image);

// A Secret's data[".dockerconfigjson"] as the API returns it (base64) -> PullSecret.
// InvalidArgument naming the secret when it is empty or not base64.
Result<PullSecret> PullSecretFromData(const std::string& name, const std::string& base64);

struct Platform {
  std::string os = "linux";
  std::string architecture = "amd64";
  std::string variant;  // "" = any
};

struct ClientOptions {
  Platform platform;
  // Hosts ("host" or "host:port") spoken to over plain http; loopback hosts
  // (localhost, 127.0.0.0/8, [::1]) always are.
  std::set<std::string> insecure_registries;
  double connect_timeout_s = 10;
  double request_timeout_s = 30;  // each request, start to last byte
  double tag_ttl_s = 300;         // how long a tag's digest is trusted
  size_t max_body_bytes = 4 << 20;
  Clock* clock = nullptr;  // not owned; nullptr = SystemClock
};

struct ClientStats {
  uint64_t requests = 0;    // HTTP requests sent (token requests included)
  uint64_t cache_hits = 0;  // Resolve calls answered without a request
};

class Client {
 public:
  explicit Client(ClientOptions opts = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The config of `image` for the platform, using the first pull secret with an entry
  // for its registry (none: anonymous). See the header comment for errors.
  Result<ImageConfig> Resolve(const std::string& image, const std::vector<PullSecret>& secrets);
  // What Resolve would answer from the cache alone, without a request: the config, or
  // std::nullopt when Resolve would have to ask the registry. Errors: a malformed
  // reference or pull secret, as Resolve's.
  Result<std::optional<ImageConfig>> Cached(const std::string& image,
                                            const std::vector<PullSecret>& secrets);

  ClientStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::registry
