#include "registry/testing/test_registry.h"

#include <crypt.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/net.h"
#include "common/proc.h"
#include "nlohmann/json.hpp"
#include "registry/internal.h"

namespace bulwark::registry::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kRegistryBin[] = "/usr/bin/docker-registry";

Status WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
  f.close();
  if (!f) return Internal("cannot write " + path);
  return Status::Ok();
}

Result<std::string> Bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2b$", 5, nullptr, 0, salt, sizeof salt) == nullptr)
    return ErrnoStatus("crypt_gensalt_rn $2b$", errno);
  crypt_data data;
  std::memset(&data, 0, sizeof data);
  const char* h = crypt_r(password.c_str(), salt, &data);
  if (h == nullptr || h[0] == '*') return Internal("crypt_r: bcrypt is not available");
  return std::string(h);
}

std::string Octal(uint64_t v, size_t width) {
  std::string s(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && v > 0; v >>= 3) s[i] = static_cast<char>('0' + (v & 7));
  return s;
}

// One ustar header for `name` (relative, at most 100 bytes).
Result<std::string> TarHeader(const std::string& name, char type, uint64_t size, int mode) {
  if (name.size() > 100) return InvalidArgument("tar: name longer than 100 bytes: " + name);
  std::string h(512, '\0');
  const auto put = [&h](size_t off, const std::string& v) { h.replace(off, v.size(), v); };
  put(0, name);
  put(100, Octal(static_cast<uint64_t>(mode), 8));
  put(108, Octal(0, 8));
  put(116, Octal(0, 8));
  put(124, Octal(size, 12));
  put(136, Octal(0, 12));
  put(148, std::string(8, ' '));
  h[156] = type;
  put(257, std::string("ustar\0", 6));
  put(263, "00");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  put(148, Octal(sum, 7));
  return h;
}

std::string Base(const PushTarget& to) { return "http://" + to.host + "/v2/" + to.repository; }

internal::HttpRequest Req(const PushTarget& to, const std::string& method, const std::string& url) {
  internal::HttpRequest r;
  r.method = method;
  r.url = url;
  r.basic_user = to.user;
  r.basic_password = to.password;
  r.timeout_s = 20;
  return r;
}

Status PushBlob(const PushTarget& to, const std::string& data, const std::string& digest) {
  BW_ASSIGN_OR_RETURN(internal::HttpResponse start,
                      internal::Send(Req(to, "POST", Base(to) + "/blobs/uploads/")));
  if (start.status != 202) {
    return Internal("POST blobs/uploads/: HTTP " + std::to_string(start.status) + " " + start.body);
  }
  std::string loc = start.headers["location"];
  if (loc.rfind("/", 0) == 0) loc = "http://" + to.host + loc;
  loc += (loc.find('?') == std::string::npos ? "?" : "&") + std::string("digest=") + digest;
  internal::HttpRequest put = Req(to, "PUT", loc);
  put.body = data;
  put.headers = {"Content-Type: application/octet-stream"};
  BW_ASSIGN_OR_RETURN(internal::HttpResponse done, internal::Send(put));
  if (done.status != 201) {
    return Internal("PUT upload of " + digest + ": HTTP " + std::to_string(done.status) + " " +
                    done.body);
  }
  return Status::Ok();
}

Status PutManifest(const PushTarget& to, const std::string& ref, const std::string& media_type,
                   const std::string& body) {
  internal::HttpRequest put = Req(to, "PUT", Base(to) + "/manifests/" + ref);
  put.body = body;
  put.headers = {"Content-Type: " + media_type};
  BW_ASSIGN_OR_RETURN(internal::HttpResponse r, internal::Send(put));
  if (r.status != 201) {
    return Internal("PUT manifests/" + ref + ": HTTP " + std::to_string(r.status) + " " + r.body);
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> TarDirectory(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> paths;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    paths.push_back(it->path());
  }
  if (ec) return Internal("tar " + dir + ": " + ec.message());
  std::sort(paths.begin(), paths.end());
  std::string tar;
  for (const fs::path& p : paths) {
    const std::string rel = fs::relative(p, dir).generic_string();
    if (fs::is_directory(p)) {
      BW_ASSIGN_OR_RETURN(std::string h, TarHeader(rel + "/", '5', 0, 0755));
      tar += h;
    } else if (fs::is_regular_file(p)) {
      std::ifstream f(p, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string data = ss.str();
      const bool exec = (fs::status(p).permissions() & fs::perms::owner_exec) != fs::perms::none;
      BW_ASSIGN_OR_RETURN(std::string h, TarHeader(rel, '0', data.size(), exec ? 0755 : 0644));
      tar += h + data + std::string((512 - data.size() % 512) % 512, '\0');
    }
  }
  tar += std::string(1024, '\0');
  return tar;
}

Result<PushedImage> PushImage(const PushTarget& to, const std::string& tag, const std::string& dir,
                              const ImageSpec& spec) {
  BW_ASSIGN_OR_RETURN(const std::string layer, TarDirectory(dir));
  PushedImage out;
  out.layer_digest = internal::Sha256Digest(layer);
  Json config = {{"architecture", spec.architecture},
                 {"os", spec.os},
                 {"created", "1970-01-01T00:00:00Z"},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", {out.layer_digest}}}},
                 {"config", Json::object()}};
  Json& c = config["config"];
  if (!spec.entrypoint.empty()) c["Entrypoint"] = spec.entrypoint;
  if (!spec.cmd.empty()) c["Cmd"] = spec.cmd;
  if (!spec.env.empty()) c["Env"] = spec.env;
  if (!spec.working_dir.empty()) c["WorkingDir"] = spec.working_dir;
  const std::string config_text = config.dump();
  out.config_digest = internal::Sha256Digest(config_text);
  BW_RETURN_IF_ERROR(PushBlob(to, layer, out.layer_digest));
  BW_RETURN_IF_ERROR(PushBlob(to, config_text, out.config_digest));
  const std::string mt = spec.oci ? "application/vnd.oci.image.manifest.v1+json"
                                  : "application/vnd.docker.distribution.manifest.v2+json";
  const Json manifest = {
      {"schemaVersion", 2},
      {"mediaType", mt},
      {"config",
       {{"mediaType", spec.oci ? "application/vnd.oci.image.config.v1+json"
                               : "application/vnd.docker.container.image.v1+json"},
        {"digest", out.config_digest},
        {"size", config_text.size()}}},
      {"layers",
       {{{"mediaType", spec.oci ? "application/vnd.oci.image.layer.v1.tar"
                                : "application/vnd.docker.image.rootfs.diff.tar"},
         {"digest", out.layer_digest},
         {"size", layer.size()}}}}};
  const std::string manifest_text = manifest.dump();
  out.manifest_digest = internal::Sha256Digest(manifest_text);
  out.manifest_size = manifest_text.size();
  BW_RETURN_IF_ERROR(PutManifest(to, tag.empty() ? out.manifest_digest : tag, mt, manifest_text));
  return out;
}

Result<std::string> PushIndex(const PushTarget& to, const std::string& tag,
                              const std::vector<std::pair<ImageSpec, PushedImage>>& entries,
                              bool oci) {
  const std::string mt = oci ? "application/vnd.oci.image.index.v1+json"
                             : "application/vnd.docker.distribution.manifest.list.v2+json";
  Json list = Json::array();
  for (const auto& [spec, img] : entries) {
    const char* entry_type = spec.oci ? "application/vnd.oci.image.manifest.v1+json"
                                      : "application/vnd.docker.distribution.manifest.v2+json";
    list.push_back({{"mediaType", entry_type},
                    {"digest", img.manifest_digest},
                    {"size", img.manifest_size},
                    {"platform", {{"os", spec.os}, {"architecture", spec.architecture}}}});
  }
  const Json index = {{"schemaVersion", 2}, {"mediaType", mt}, {"manifests", list}};
  const std::string text = index.dump();
  BW_RETURN_IF_ERROR(PutManifest(to, tag, mt, text));
  return internal::Sha256Digest(text);
}

Result<std::unique_ptr<TestRegistry>> TestRegistry::Start(const TestRegistryOptions& opts) {
  if (access(kRegistryBin, X_OK) != 0) {
    return FailedPrecondition(std::string(kRegistryBin) +
                              " is missing: run scripts/setup.sh (Debian package docker-registry)");
  }
  std::unique_ptr<TestRegistry> r(new TestRegistry());
  char tmpl[] = "/tmp/bw-registry-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return ErrnoStatus("mkdtemp /tmp/bw-registry-XXXXXX", errno);
  r->dir_ = tmpl;
  BW_ASSIGN_OR_RETURN(r->port_, PickFixturePort("127.0.0.1"));
  std::string auth;
  if (!opts.user.empty()) {
    BW_ASSIGN_OR_RETURN(const std::string hash, Bcrypt(opts.password));
    BW_RETURN_IF_ERROR(WriteFile(r->dir_ + "/htpasswd", opts.user + ":" + hash + "\n"));
    auth = "auth:\n  htpasswd:\n    realm: bulwark-test\n    path: " + r->dir_ + "/htpasswd\n";
  }
  const std::string config =
      "version: 0.1\n"
      "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
      "storage:\n  filesystem:\n    rootdirectory: " +
      r->dir_ +
      "/data\n"
      "  delete:\n    enabled: true\n"
      "http:\n  addr: 127.0.0.1:" +
      std::to_string(r->port_) + "\n" + auth;
  BW_RETURN_IF_ERROR(WriteFile(r->dir_ + "/config.yml", config));
  SpawnOptions so;
  so.argv = {kRegistryBin, "serve", r->dir_ + "/config.yml"};
  so.env = CurrentEnv();
  BW_ASSIGN_OR_RETURN(Child child, Spawn(so));
  r->pid_ = child.pid;
  r->pgid_ = child.pgid;
  r->out_fd_ = child.output.Release();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(opts.startup_timeout_s);
  while (true) {
    internal::HttpRequest ping;
    ping.url = "http://" + r->host() + "/v2/";
    ping.connect_timeout_s = 1;
    ping.timeout_s = 2;
    auto resp = internal::Send(ping);
    if (resp.ok() && (resp->status == 200 || resp->status == 401)) break;
    if (auto exited = WaitExit(r->pid_, 0); exited.has_value()) {
      r->pid_ = -1;
      return Internal("docker-registry exited at start: " + r->Output());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("docker-registry did not answer GET /v2/ within " +
                              std::to_string(opts.startup_timeout_s) + " s: " + r->Output());
    }
    PollReadable({}, 0.05);
  }
  return r;
}

std::string TestRegistry::Output() {
  if (out_fd_ >= 0) {
    bool eof = false;
    output_ += ReadAvailable(out_fd_, &eof);
  }
  return output_;
}

std::string TestRegistry::BlobPath(const std::string& digest) const {
  const std::string hex = digest.substr(digest.find(':') + 1);
  return dir_ + "/data/docker/registry/v2/blobs/sha256/" + hex.substr(0, 2) + "/" + hex + "/data";
}

TestRegistry::~TestRegistry() {
  if (pid_ > 0) TerminateGroup(pid_, pgid_, 3.0);
  if (out_fd_ >= 0) close(out_fd_);
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

}  // namespace bulwark::registry::testing
