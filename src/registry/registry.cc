// Registry client (registry.h): image references, pull-secret credentials, the
// distribution API's manifest/config walk with its auth challenges, and the cache.
#include "registry/registry.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "common/net.h"
#include "common/proc.h"
#include "nlohmann/json.hpp"
#include "registry/internal.h"

namespace bulwark::registry {
namespace {

using Json = nlohmann::json;

constexpr char kOciIndex[] = "application/vnd.oci.image.index.v1+json";
constexpr char kDockerList[] = "application/vnd.docker.distribution.manifest.list.v2+json";
constexpr char kOciManifest[] = "application/vnd.oci.image.manifest.v1+json";
constexpr char kDockerManifest[] = "application/vnd.docker.distribution.manifest.v2+json";
constexpr char kSetCommand[] =
    "set command: in the spec (the program and its arguments) so the image's config is not "
    "needed";

bool IsHex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
  });
}

bool IsDigest(const std::string& d) {
  return d.size() == 7 + 64 && d.rfind("sha256:", 0) == 0 && IsHex(d.substr(7));
}

bool IsPathComponent(const std::string& c) {
  if (c.empty()) return false;
  if (!std::isalnum(static_cast<unsigned char>(c.front())) ||
      !std::isalnum(static_cast<unsigned char>(c.back()))) {
    return false;
  }
  return std::all_of(c.begin(), c.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' ||
           ch == '_' || ch == '-';
  });
}

// "localhost", "localhost:5000", "127.0.0.1:5000", "[::1]:5000" -> true.
bool IsLoopback(const std::string& host_port) {
  std::string host = host_port;
  if (host.rfind("[", 0) == 0) {
    host = host.substr(1, host.find(']') - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// A dockerconfigjson key ("https://index.docker.io/v1/", "quay.io", "http://h:5000")
// as the registry it names ("docker.io" for Docker Hub's aliases).
std::string NormalizeAuthHost(std::string key) {
  for (const char* scheme : {"https://", "http://"}) {
    if (key.rfind(scheme, 0) == 0) key = key.substr(std::string(scheme).size());
  }
  if (const size_t slash = key.find('/'); slash != std::string::npos) key.resize(slash);
  if (key == "index.docker.io" || key == "registry-1.docker.io" ||
      key == "registry.hub.docker.com") {
    return "docker.io";
  }
  return key;
}

struct Credential {
  std::string secret;  // the pull secret's name; "" = anonymous
  std::string user, password;
  std::string Fingerprint() const {
    return secret.empty() ? "" : internal::Sha256Digest(secret + "\n" + user + "\n" + password);
  }
};

// The first secret's credentials for `registry`; anonymous when none has an entry.
Result<Credential> FindCredential(const std::string& registry,
                                  const std::vector<PullSecret>& secrets) {
  for (const PullSecret& s : secrets) {
    Json cfg = Json::parse(s.dockerconfigjson, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object() || !cfg.contains("auths") ||
        !cfg["auths"].is_object()) {
      return InvalidArgument("pull secret " + s.name +
                             ": .dockerconfigjson is not {\"auths\": {HOST: {...}}}; recreate "
                             "it with kubectl create secret docker-registry");
    }
    for (const auto& [key, entry] : cfg["auths"].items()) {
      if (NormalizeAuthHost(key) != registry || !entry.is_object()) continue;
      Credential c;
      c.secret = s.name;
      if (entry.contains("auth") && entry["auth"].is_string()) {
        Result<std::string> raw = internal::Base64Decode(entry["auth"].get<std::string>());
        const size_t colon = raw.ok() ? raw->find(':') : std::string::npos;
        if (colon == std::string::npos) {
          return InvalidArgument("pull secret " + s.name + ": auths[\"" + key +
                                 "\"].auth is not base64 of user:password; recreate the secret");
        }
        c.user = raw->substr(0, colon);
        c.password = raw->substr(colon + 1);
      } else {
        c.user = entry.value("username", "");
        c.password = entry.value("password", "");
      }
      if (c.user.empty()) {
        return InvalidArgument("pull secret " + s.name + ": auths[\"" + key +
                               "\"] has no auth and no username; recreate the secret");
      }
      return c;
    }
  }
  return Credential{};
}

// Parses `WWW-Authenticate: Bearer realm="..",service="..",scope=".."` (or Basic).
struct Challenge {
  std::string scheme;  // "bearer" or "basic" (lowercased)
  std::map<std::string, std::string> params;
};

Challenge ParseChallenge(const std::string& header) {
  Challenge c;
  size_t i = 0;
  while (i < header.size() && !std::isspace(static_cast<unsigned char>(header[i]))) ++i;
  c.scheme = header.substr(0, i);
  for (char& ch : c.scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  while (i < header.size()) {
    while (i < header.size() && (header[i] == ' ' || header[i] == ',')) ++i;
    const size_t eq = header.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = header.substr(i, eq - i);
    i = eq + 1;
    std::string value;
    if (i < header.size() && header[i] == '"') {
      ++i;
      while (i < header.size() && header[i] != '"') {
        if (header[i] == '\\' && i + 1 < header.size()) ++i;
        value += header[i++];
      }
      ++i;
    } else {
      while (i < header.size() && header[i] != ',') value += header[i++];
    }
    c.params[key] = value;
  }
  return c;
}

std::string UrlEncode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

std::vector<std::string> StringList(const Json& v) {
  std::vector<std::string> out;
  if (!v.is_array()) return out;
  for (const Json& e : v) {
    if (e.is_string()) out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

namespace {

// Runs `docker-credential-<helper> get` for `server`: its credentials, std::nullopt when
// it has none for that server.
Result<std::optional<std::pair<std::string, std::string>>> RunCredentialHelper(
    const std::string& helper, const std::string& server, const std::string& config) {
  const std::string program = "docker-credential-" + helper;
  SpawnOptions o;
  o.argv = {program, "get"};
  o.env = CurrentEnv();
  o.stdin_pipe = true;
  auto child = Spawn(o);
  if (!child.ok()) {
    return FailedPrecondition(config + " names the credential helper \"" + helper + "\" for " +
                              server + ", but " + program + " cannot be run (" +
                              child.status().message() + "); install it, or remove it from " +
                              config + " and run docker login again");
  }
  std::string in = server + "\n";
  const double deadline = SystemClock::Get()->NowMono() + 10;
  std::string out;
  bool eof = false;
  while (!eof && SystemClock::Get()->NowMono() < deadline) {
    if (!in.empty() && child->input.valid()) {
      const ssize_t n = internal::WriteNoSigpipe(child->input.get(), in.data(), in.size());
      if (n > 0) in.erase(0, static_cast<size_t>(n));
      if (n < 0 && errno != EAGAIN) in.clear();
      if (in.empty()) child->input.Reset();  // EOF: the helper reads one line
    }
    PollReadable({child->output.get()}, 0.05);
    out += ReadAvailable(child->output.get(), &eof);
  }
  auto exit = WaitExit(child->pid, std::max(0.0, deadline - SystemClock::Get()->NowMono()));
  if (!exit) {
    TerminateGroup(child->pid, child->pgid, 1);
    return DeadlineExceeded(program +
                            " get did not answer within 10 s (a locked keychain?); "
                            "unlock it or run docker login again");
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (!exit->ok()) {
    if (out.find("credentials not found") != std::string::npos) {
      return std::optional<std::pair<std::string, std::string>>();
    }
    return Unavailable(program + " get failed for " + server + " (" + exit->Describe() +
                       "): " + out + "; run docker login " + server + " again");
  }
  Json j = Json::parse(out, nullptr, false);
  if (!j.is_object() || !j.contains("Username") || !j["Username"].is_string() ||
      !j.contains("Secret") || !j["Secret"].is_string()) {
    return InvalidArgument(program + " get answered for " + server +
                           " without {\"Username\", \"Secret\"} strings; reinstall the helper");
  }
  if (j["Username"] == "<token>") {
    return FailedPrecondition(program + " holds an identity token for " + server +
                              ", which Bulwark cannot use; docker login " + server +
                              " with a password or an access token");
  }
  return std::optional<std::pair<std::string, std::string>>(
      std::pair{j["Username"].get<std::string>(), j["Secret"].get<std::string>()});
}

}  // namespace

Result<std::vector<PullSecret>> LocalDockerCredentials(const std::string& image) {
  const char* dir = std::getenv("DOCKER_CONFIG");
  const char* home = std::getenv("HOME");
  std::string path;
  if (dir != nullptr && dir[0] != '\0') {
    path = std::string(dir) + "/config.json";
  } else if (home != nullptr && home[0] != '\0') {
    path = std::string(home) + "/.docker/config.json";
  } else {
    return std::vector<PullSecret>();
  }
  std::ifstream f(path);
  if (!f) return std::vector<PullSecret>();
  std::stringstream ss;
  ss << f.rdbuf();
  Json cfg = Json::parse(ss.str(), nullptr, false);
  if (!cfg.is_object()) {
    return InvalidArgument(path +
                           " is not a JSON object; fix it, or move it away and run "
                           "docker login again");
  }
  BW_ASSIGN_OR_RETURN(const ImageRef r, ParseImageRef(image));
  std::string helper;
  if (cfg.contains("credHelpers") && cfg["credHelpers"].is_object()) {
    for (const auto& [key, name] : cfg["credHelpers"].items()) {
      if (NormalizeAuthHost(key) == r.registry && name.is_string()) helper = name;
    }
  }
  if (helper.empty() && cfg.contains("credsStore") && cfg["credsStore"].is_string()) {
    helper = cfg["credsStore"].get<std::string>();
  }
  std::vector<PullSecret> out;
  if (!helper.empty()) {
    // Docker asks a helper for Docker Hub under its v1 URL, for others by host.
    const std::string server =
        r.registry == "docker.io" ? "https://index.docker.io/v1/" : r.registry;
    BW_ASSIGN_OR_RETURN(auto cred, RunCredentialHelper(helper, server, path));
    if (cred) {
      const Json auths = {
          {"auths", {{r.registry, {{"username", cred->first}, {"password", cred->second}}}}}};
      out.push_back(PullSecret{"docker-credential-" + helper + " (" + path + ")", auths.dump()});
    }
  }
  if (cfg.contains("auths") && cfg["auths"].is_object()) {
    out.push_back(PullSecret{path, Json{{"auths", cfg["auths"]}}.dump()});
  }
  return out;
}

Result<PullSecret> PullSecretFromData(const std::string& name, const std::string& base64) {
  Result<std::string> raw = internal::Base64Decode(base64);
  if (base64.empty() || !raw.ok() || raw->empty()) {
    return InvalidArgument("pull secret " + name +
                           " has no .dockerconfigjson (it must be of "
                           "type kubernetes.io/dockerconfigjson); recreate it with kubectl "
                           "create secret docker-registry");
  }
  return PullSecret{name, *raw};
}

std::string ImageRef::ApiHost() const {
  return registry == "docker.io" ? "registry-1.docker.io" : registry;
}

std::string ImageRef::ToString() const {
  std::string s = registry + "/" + repository;
  if (!tag.empty()) s += ":" + tag;
  if (!digest.empty()) s += "@" + digest;
  return s;
}

Result<ImageRef> ParseImageRef(const std::string& image) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("image \"" + image + "\": " + why +
                           "; write it as [HOST[:PORT]/]NAME[:TAG][@sha256:DIGEST]");
  };
  if (image.empty()) return bad("empty");
  ImageRef r;
  std::string rest = image;
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    r.digest = rest.substr(at + 1);
    rest.resize(at);
    if (!IsDigest(r.digest)) return bad("the digest is not sha256: and 64 lowercase hex digits");
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    const std::string first = rest.substr(0, slash);
    if (first.find('.') != std::string::npos || first.find(':') != std::string::npos ||
        first == "localhost") {
      r.registry = first;
      rest = rest.substr(slash + 1);
    }
  }
  if (r.registry.empty()) r.registry = "docker.io";
  const size_t last_slash = rest.rfind('/');
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && (last_slash == std::string::npos || colon > last_slash)) {
    r.tag = rest.substr(colon + 1);
    rest.resize(colon);
    const bool tag_ok = !r.tag.empty() && r.tag.size() <= 128 &&
                        std::all_of(r.tag.begin(), r.tag.end(),
                                    [](char c) {
                                      return std::isalnum(static_cast<unsigned char>(c)) ||
                                             c == '_' || c == '.' || c == '-';
                                    }) &&
                        r.tag.front() != '.' && r.tag.front() != '-';
    if (!tag_ok) return bad("the tag \"" + r.tag + "\" is not [A-Za-z0-9_][A-Za-z0-9_.-]*");
  }
  if (r.tag.empty() && r.digest.empty()) r.tag = "latest";
  size_t start = 0;
  while (true) {
    const size_t end = rest.find('/', start);
    const std::string comp = rest.substr(start, end == std::string::npos ? end : end - start);
    if (!IsPathComponent(comp)) {
      return bad("the name \"" + rest +
                 "\" must be lowercase letters, digits and . _ - "
                 "between slashes");
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  r.repository = rest;
  if (r.registry == "docker.io" && rest.find('/') == std::string::npos) {
    r.repository = "library/" + rest;
  }
  return r;
}

struct Client::Impl {
  ClientOptions opts;
  Clock* clock;
  mutable std::mutex mu;
  ClientStats stats;
  struct TagEntry {
    std::string manifest_digest;
    double expires = 0;
  };
  std::map<std::string, TagEntry> tags;        // ref + credential -> manifest digest
  std::map<std::string, ImageConfig> configs;  // repo@manifest digest + credential
  std::map<std::string, std::pair<std::string, double>> tokens;  // host+repo+cred

  explicit Impl(ClientOptions o)
      : opts(std::move(o)), clock(opts.clock ? opts.clock : SystemClock::Get()) {}

  std::string Scheme(const ImageRef& r) const {
    const std::string host = r.ApiHost();
    return IsLoopback(host) || opts.insecure_registries.contains(host) ||
                   opts.insecure_registries.contains(r.registry)
               ? "http://"
               : "https://";
  }

  // The context every message about this image carries.
  static std::string About(const std::string& image, const ImageRef& r) {
    return "image " + image + " (registry " + r.ApiHost() + ", repository " + r.repository + ")";
  }

  // One request; a transport failure names the image and says the fix.
  Result<internal::HttpResponse> Exchange(internal::HttpRequest req, const std::string& image,
                                          const ImageRef& r) {
    req.connect_timeout_s = opts.connect_timeout_s;
    req.timeout_s = opts.request_timeout_s;
    req.max_body_bytes = opts.max_body_bytes;
    {
      std::lock_guard<std::mutex> l(mu);
      ++stats.requests;
    }
    Result<internal::HttpResponse> resp = internal::Send(req);
    if (resp.ok()) return resp;
    const Status& st = resp.status();
    const char* fix = st.code() == Code::kInvalidArgument
                          ? "; is this a container registry? or "
                          : "; check that the registry is reachable from here (address, DNS, "
                            "firewall, https vs http), or ";
    return Status(st.code(), About(image, r) + ": " + st.message() + fix + kSetCommand);
  }

  // Fetches a Bearer token from the challenge's realm.
  Result<std::string> FetchToken(const Challenge& ch, const ImageRef& r, const Credential& cred,
                                 const std::string& image) {
    auto realm = ch.params.find("realm");
    if (realm == ch.params.end() || realm->second.empty()) {
      return InvalidArgument(About(image, r) +
                             ": the registry asked for a Bearer token without a realm; " +
                             kSetCommand);
    }
    std::string url = realm->second;
    std::string query;
    if (auto s = ch.params.find("service"); s != ch.params.end())
      query += "service=" + UrlEncode(s->second);
    const std::string scope = ch.params.contains("scope") ? ch.params.at("scope")
                                                          : "repository:" + r.repository + ":pull";
    query += (query.empty() ? "" : "&") + std::string("scope=") + UrlEncode(scope);
    url += (url.find('?') == std::string::npos ? "?" : "&") + query;
    internal::HttpRequest req;
    req.url = url;
    req.basic_user = cred.user;
    req.basic_password = cred.password;
    BW_ASSIGN_OR_RETURN(internal::HttpResponse resp, Exchange(req, image, r));
    if (resp.status == 401 || resp.status == 403) return Unauthorized(image, r, cred);
    if (resp.status != 200) {
      return Unavailable(About(image, r) + ": the token endpoint " + realm->second +
                         " answered HTTP " + std::to_string(resp.status) + "; " + kSetCommand);
    }
    Json j = Json::parse(resp.body, nullptr, false);
    std::string token;
    if (j.is_object()) token = j.value("token", j.value("access_token", ""));
    if (token.empty()) {
      return InvalidArgument(About(image, r) + ": the token endpoint " + realm->second +
                             " gave no token; " + kSetCommand);
    }
    const double ttl = j.is_object() && j.contains("expires_in") && j["expires_in"].is_number()
                           ? j["expires_in"].get<double>()
                           : 60;
    std::lock_guard<std::mutex> l(mu);
    tokens[r.ApiHost() + "|" + r.repository + "|" + cred.Fingerprint()] = {
        token, clock->NowMono() + std::max(1.0, ttl - 5)};
    return token;
  }

  static Status Unauthorized(const std::string& image, const ImageRef& r, const Credential& cred) {
    if (cred.secret.empty()) {
      return PermissionDenied(
          About(image, r) +
          ": the registry refuses anonymous access; set pod.imagePullSecrets "
          "(a PyTorchJob's template.spec.imagePullSecrets) to a kubernetes.io/dockerconfigjson "
          "Secret with credentials for " +
          r.registry + ", or " + kSetCommand);
    }
    return PermissionDenied(About(image, r) +
                            ": the registry refused the credentials of pull "
                            "secret " +
                            cred.secret + " (user " + cred.user + "); fix the Secret's auths[\"" +
                            r.registry + "\"], or " + kSetCommand);
  }

  // GET with the registry's auth dance: cached token, anonymous, then the challenge.
  Result<internal::HttpResponse> Get(const std::string& url, const std::vector<std::string>& hdrs,
                                     const ImageRef& r, const Credential& cred,
                                     const std::string& image, bool blob) {
    internal::HttpRequest req;
    req.url = url;
    req.headers = hdrs;
    req.follow_redirects = blob;
    const std::string token_key = r.ApiHost() + "|" + r.repository + "|" + cred.Fingerprint();
    {
      std::lock_guard<std::mutex> l(mu);
      auto it = tokens.find(token_key);
      if (it != tokens.end() && it->second.second > clock->NowMono()) {
        req.headers.push_back("Authorization: Bearer " + it->second.first);
      }
    }
    BW_ASSIGN_OR_RETURN(internal::HttpResponse resp, Exchange(req, image, r));
    if (resp.status != 401) return resp;
    const Challenge ch = ParseChallenge(resp.headers["www-authenticate"]);
    req.headers = hdrs;
    if (ch.scheme == "bearer") {
      BW_ASSIGN_OR_RETURN(std::string token, FetchToken(ch, r, cred, image));
      req.headers.push_back("Authorization: Bearer " + token);
    } else if (ch.scheme == "basic" && !cred.secret.empty()) {
      req.basic_user = cred.user;
      req.basic_password = cred.password;
    } else {
      return Unauthorized(image, r, cred);
    }
    BW_ASSIGN_OR_RETURN(resp, Exchange(req, image, r));
    if (resp.status == 401) return Unauthorized(image, r, cred);
    return resp;
  }

  Status HttpError(const internal::HttpResponse& resp, const std::string& what,
                   const std::string& image, const ImageRef& r, const Credential& cred) {
    if (resp.status == 404) {
      return NotFound(About(image, r) + ": " + what +
                      " not found; check the image name and "
                      "tag (is it pushed to " +
                      r.ApiHost() + "?), or " + kSetCommand);
    }
    if (resp.status == 401 || resp.status == 403) return Unauthorized(image, r, cred);
    return Unavailable(About(image, r) + ": " + what + ": HTTP " + std::to_string(resp.status) +
                       "; retry later, or " + kSetCommand);
  }

  Result<Json> FetchManifest(const std::string& reference, const ImageRef& r,
                             const Credential& cred, const std::string& image, std::string* digest,
                             std::string* media_type) {
    const std::string url =
        Scheme(r) + r.ApiHost() + "/v2/" + r.repository + "/manifests/" + reference;
    BW_ASSIGN_OR_RETURN(internal::HttpResponse resp,
                        Get(url,
                            {std::string("Accept: ") + kOciIndex + ", " + kDockerList + ", " +
                             kOciManifest + ", " + kDockerManifest},
                            r, cred, image, false));
    if (resp.status != 200) return HttpError(resp, "manifest " + reference, image, r, cred);
    *digest = internal::Sha256Digest(resp.body);
    if (IsDigest(reference) && *digest != reference) {
      return DataLoss(About(image, r) + ": manifest " + reference + " has digest " + *digest +
                      " (corrupted in the registry or in transit); re-push the image, or " +
                      kSetCommand);
    }
    Json m = Json::parse(resp.body, nullptr, false);
    if (m.is_discarded() || !m.is_object()) {
      return InvalidArgument(About(image, r) + ": manifest " + reference +
                             " is not a JSON object; " + kSetCommand);
    }
    *media_type = m.value("mediaType", "");
    if (media_type->empty()) {
      std::string ct = resp.headers["content-type"];
      *media_type = ct.substr(0, ct.find(';'));
    }
    if (media_type->empty() && m.contains("manifests")) *media_type = kOciIndex;
    if (media_type->empty() && m.contains("config")) *media_type = kOciManifest;
    return m;
  }

  Result<ImageConfig> Walk(const std::string& image, const ImageRef& r, const Credential& cred) {
    std::string digest, media_type;
    BW_ASSIGN_OR_RETURN(Json m, FetchManifest(r.Reference(), r, cred, image, &digest, &media_type));
    const std::string top_digest = digest;  // the index's when the reference names one
    if (media_type == kOciIndex || media_type == kDockerList) {
      const Platform& p = opts.platform;
      std::string pick, seen;
      if (m.contains("manifests") && m["manifests"].is_array()) {
        for (const Json& e : m["manifests"]) {
          if (!e.is_object() || !e.contains("platform") || !e["platform"].is_object()) continue;
          const Json& pl = e["platform"];
          const std::string os = pl.value("os", ""), arch = pl.value("architecture", "");
          const std::string variant = pl.value("variant", "");
          if (os == "unknown") continue;  // attestation manifests
          seen +=
              (seen.empty() ? "" : ", ") + os + "/" + arch + (variant.empty() ? "" : "/" + variant);
          if (os == p.os && arch == p.architecture && (p.variant.empty() || variant == p.variant) &&
              pick.empty()) {
            pick = e.value("digest", "");
          }
        }
      }
      const std::string want =
          p.os + "/" + p.architecture + (p.variant.empty() ? "" : "/" + p.variant);
      if (pick.empty()) {
        return NotFound(About(image, r) + ": no manifest for platform " + want +
                        " in its index (it has " + (seen.empty() ? "none" : seen) +
                        "); use an image built for " + want + ", or " + kSetCommand);
      }
      if (!IsDigest(pick)) {
        return InvalidArgument(About(image, r) + ": the index's entry for " + want +
                               " has no sha256 digest; " + kSetCommand);
      }
      BW_ASSIGN_OR_RETURN(m, FetchManifest(pick, r, cred, image, &digest, &media_type));
    }
    if (media_type != kOciManifest && media_type != kDockerManifest) {
      return InvalidArgument(About(image, r) + ": unsupported manifest type \"" + media_type +
                             "\" (want an OCI or Docker v2 image manifest); " + kSetCommand);
    }
    const std::string cache_key =
        r.ApiHost() + "/" + r.repository + "@" + digest + "|" + cred.Fingerprint();
    {
      std::lock_guard<std::mutex> l(mu);
      if (auto it = configs.find(cache_key); it != configs.end()) {
        ImageConfig c = it->second;
        c.image = image;
        configs[r.ApiHost() + "/" + r.repository + "@" + top_digest + "|" + cred.Fingerprint()] =
            it->second;
        if (r.digest.empty()) {
          tags[r.ToString() + "|" + cred.Fingerprint()] = {top_digest,
                                                           clock->NowMono() + opts.tag_ttl_s};
        }
        return c;
      }
    }
    const Json cfg_desc = m.contains("config") ? m["config"] : Json();
    const std::string cfg_digest = cfg_desc.is_object() ? cfg_desc.value("digest", "") : "";
    if (!IsDigest(cfg_digest)) {
      return InvalidArgument(About(image, r) + ": manifest " + digest +
                             " has no config with a sha256 digest; " + kSetCommand);
    }
    const std::string url =
        Scheme(r) + r.ApiHost() + "/v2/" + r.repository + "/blobs/" + cfg_digest;
    BW_ASSIGN_OR_RETURN(internal::HttpResponse resp, Get(url, {}, r, cred, image, true));
    if (resp.status != 200) return HttpError(resp, "config blob " + cfg_digest, image, r, cred);
    if (const std::string got = internal::Sha256Digest(resp.body); got != cfg_digest) {
      return DataLoss(About(image, r) + ": config blob " + cfg_digest + " has digest " + got +
                      " (corrupted in the registry or in transit); re-push the image, or " +
                      kSetCommand);
    }
    Json cj = Json::parse(resp.body, nullptr, false);
    if (cj.is_discarded() || !cj.is_object()) {
      return InvalidArgument(About(image, r) + ": config blob " + cfg_digest +
                             " is not a JSON object; " + kSetCommand);
    }
    ImageConfig c;
    c.image = image;
    c.registry = r.ApiHost();
    c.repository = r.repository;
    c.manifest_digest = digest;
    c.config_digest = cfg_digest;
    if (cj.contains("config") && cj["config"].is_object()) {
      const Json& cc = cj["config"];
      c.entrypoint = StringList(cc.value("Entrypoint", Json()));
      c.cmd = StringList(cc.value("Cmd", Json()));
      c.env = StringList(cc.value("Env", Json()));
      if (cc.contains("WorkingDir") && cc["WorkingDir"].is_string())
        c.working_dir = cc["WorkingDir"].get<std::string>();
    }
    std::lock_guard<std::mutex> l(mu);
    configs[cache_key] = c;
    configs[r.ApiHost() + "/" + r.repository + "@" + top_digest + "|" + cred.Fingerprint()] = c;
    if (r.digest.empty()) {
      tags[r.ToString() + "|" + cred.Fingerprint()] = {top_digest,
                                                       clock->NowMono() + opts.tag_ttl_s};
    }
    return c;
  }
};

Client::Client(ClientOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}
Client::~Client() = default;

ClientStats Client::stats() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->stats;
}

Result<std::optional<ImageConfig>> Client::Cached(const std::string& image,
                                                  const std::vector<PullSecret>& secrets) {
  BW_ASSIGN_OR_RETURN(const ImageRef r, ParseImageRef(image));
  BW_ASSIGN_OR_RETURN(const Credential cred, FindCredential(r.registry, secrets));
  std::lock_guard<std::mutex> l(impl_->mu);
  std::string digest = r.digest;
  if (digest.empty()) {
    auto it = impl_->tags.find(r.ToString() + "|" + cred.Fingerprint());
    if (it != impl_->tags.end() && it->second.expires > impl_->clock->NowMono())
      digest = it->second.manifest_digest;
  }
  if (digest.empty()) return std::optional<ImageConfig>();
  // Configs are kept under both an index's digest and its platform manifest's.
  auto it = impl_->configs.find(r.ApiHost() + "/" + r.repository + "@" + digest + "|" +
                                cred.Fingerprint());
  if (it == impl_->configs.end()) return std::optional<ImageConfig>();
  ++impl_->stats.cache_hits;
  ImageConfig c = it->second;
  c.image = image;
  return std::optional<ImageConfig>(std::move(c));
}

Result<ImageConfig> Client::Resolve(const std::string& image,
                                    const std::vector<PullSecret>& secrets) {
  BW_ASSIGN_OR_RETURN(std::optional<ImageConfig> cached, Cached(image, secrets));
  if (cached) return *std::move(cached);
  BW_ASSIGN_OR_RETURN(const ImageRef r, ParseImageRef(image));
  BW_ASSIGN_OR_RETURN(const Credential cred, FindCredential(r.registry, secrets));
  return impl_->Walk(image, r, cred);
}

namespace internal {

ssize_t WriteNoSigpipe(int fd, const void* data, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  const ssize_t r = ::write(fd, data, n);
  const int e = errno;
  if (r < 0 && e == EPIPE) {
    const timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);  // the SIGPIPE this write raised
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = e;
  return r;
}

}  // namespace internal

}  // namespace bulwark::registry
