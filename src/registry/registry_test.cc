// The registry client against a real registry (Debian's docker-registry on loopback,
// registry/testing/test_registry.h) with images built from a directory.
#include "registry/registry.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "common/net.h"
#include "common/proc.h"
#include "registry/internal.h"
#include "registry/testing/test_registry.h"
#include "trainjob/render.h"
#include "trainjob/trainjob.h"

namespace bulwark::registry {
namespace {

namespace fs = std::filesystem;
using testing::ImageSpec;
using testing::PushedImage;
using testing::PushTarget;
using testing::TestRegistry;

// A directory with a training script, as an image's content.
class ImageDir {
 public:
  ImageDir() {
    char tmpl[] = "/tmp/bw-image-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ + "/workspace");
    std::ofstream(dir_ + "/workspace/train.py") << "print('training')\n";
  }
  ~ImageDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
};

ImageSpec TrainerSpec() {
  ImageSpec s;
  s.entrypoint = {"/opt/conda/bin/python"};
  s.cmd = {"/workspace/train.py", "--epochs", "2"};
  s.working_dir = "/workspace";
  s.env = {"PATH=/opt/conda/bin:/usr/bin:/bin", "PYTHONUNBUFFERED=1"};
  return s;
}

std::string DockerConfig(const std::string& host, const std::string& user,
                         const std::string& password, bool as_auth = true) {
  nlohmann::json entry =
      as_auth ? nlohmann::json{{"auth", internal::Base64Encode(user + ":" + password)}}
              : nlohmann::json{{"username", user}, {"password", password}};
  return nlohmann::json{{"auths", {{host, entry}}}}.dump();
}

// A Bearer-token front for the real registry, as Docker Hub and most hosted registries
// authenticate: /v2/... without a token it issued -> 401 with `WWW-Authenticate: Bearer
// realm=".../token",service=...,scope=...`; /token with the right Basic credentials ->
// {"token", "expires_in"}; with the token, requests are forwarded to the registry.
// One connection at a time on its own thread (Connection: close).
class BearerFront {
 public:
  BearerFront(std::string upstream, std::string user, std::string password)
      : upstream_(std::move(upstream)),
        basic_("Basic " + internal::Base64Encode(user + ":" + password)) {
    auto l = TcpListen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    listener_ = std::move(l).value();
    port_ = *LocalPort(listener_.get());
    thread_ = std::thread([this] { Serve(); });
  }
  ~BearerFront() {
    stop_ = true;
    thread_.join();
  }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  int token_requests() const { return token_requests_.load(); }
  std::string last_token_query() {
    std::lock_guard<std::mutex> l(mu_);
    return last_query_;
  }

 private:
  void Serve() {
    while (!stop_) {
      PollReadable({listener_.get()}, 0.05);
      Fd c = TcpAcceptNonBlocking(listener_.get());
      if (c.valid()) Handle(std::move(c));
    }
  }

  void Handle(Fd c) {
    std::string req;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (req.find("\r\n\r\n") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      PollReadable({c.get()}, 0.1);
      bool eof = false;
      req += ReadAvailable(c.get(), &eof);
      if (eof) break;
    }
    const std::string line = req.substr(0, req.find("\r\n"));
    const std::string target =
        line.substr(line.find(' ') + 1, line.rfind(' ') - line.find(' ') - 1);
    auto header = [&req](const std::string& name) {
      const size_t at = req.find("\r\n" + name + ": ");
      if (at == std::string::npos) return std::string();
      const size_t start = at + name.size() + 4;
      return req.substr(start, req.find("\r\n", start) - start);
    };
    std::string status = "200 OK", body, extra;
    if (target.rfind("/token", 0) == 0) {
      ++token_requests_;
      {
        std::lock_guard<std::mutex> l(mu_);
        last_query_ = target.substr(target.find('?') + 1);
      }
      if (header("Authorization") == basic_) {
        const std::string token = "tok-" + std::to_string(token_requests_.load());
        {
          std::lock_guard<std::mutex> l(mu_);
          tokens_.push_back(token);
        }
        body = "{\"token\": \"" + token + "\", \"expires_in\": 300}";
        extra = "Content-Type: application/json\r\n";
      } else {
        status = "401 Unauthorized";
      }
    } else if (!Issued(header("Authorization"))) {
      status = "401 Unauthorized";
      extra = "WWW-Authenticate: Bearer realm=\"http://" + host() +
              "/token\",service=\"front\",scope=\"repository:team/trainer:pull\"\r\n";
    } else {
      internal::HttpRequest up;
      up.url = "http://" + upstream_ + target;
      if (const std::string a = header("Accept"); !a.empty()) up.headers = {"Accept: " + a};
      auto r = internal::Send(up);
      if (!r.ok()) {
        status = "502 Bad Gateway";
      } else {
        status = std::to_string(r->status) + " X";
        body = r->body;
        for (const char* h : {"content-type", "docker-content-digest"}) {
          if (r->headers.contains(h)) extra += std::string(h) + ": " + r->headers[h] + "\r\n";
        }
      }
    }
    const std::string resp = "HTTP/1.1 " + status +
                             "\r\nContent-Length: " + std::to_string(body.size()) +
                             "\r\nConnection: close\r\n" + extra + "\r\n" + body;
    fcntl(c.get(), F_SETFL, fcntl(c.get(), F_GETFL) & ~O_NONBLOCK);
    size_t sent = 0;
    while (sent < resp.size()) {
      const ssize_t n = send(c.get(), resp.data() + sent, resp.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  }

  bool Issued(const std::string& auth) {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& t : tokens_) {
      if (auth == "Bearer " + t) return true;
    }
    return false;
  }

  std::string upstream_, basic_;
  Fd listener_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> token_requests_{0};
  std::mutex mu_;
  std::vector<std::string> tokens_;
  std::string last_query_;
};

class RegistryTest : public ::testing::Test {
 protected:
  void StartRegistry(const std::string& user = "", const std::string& password = "") {
    testing::TestRegistryOptions o;
    o.user = user;
    o.password = password;
    auto r = TestRegistry::Start(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    registry_ = std::move(r).value();
    target_ = {registry_->host(), "team/trainer", user, password};
  }

  std::unique_ptr<TestRegistry> registry_;
  PushTarget target_;
  ImageDir dir_;
};

TEST(ImageRefTest, DockerDefaults) {
  auto r = ParseImageRef("pytorch/pytorch:latest");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry, "docker.io");
  EXPECT_EQ(r->ApiHost(), "registry-1.docker.io");
  EXPECT_EQ(r->repository, "pytorch/pytorch");
  EXPECT_EQ(r->tag, "latest");
  r = ParseImageRef("ubuntu");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->repository, "library/ubuntu");
  EXPECT_EQ(r->tag, "latest");
  r = ParseImageRef("localhost:5000/a/b:v1.2");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->registry, "localhost:5000");
  EXPECT_EQ(r->repository, "a/b");
  EXPECT_EQ(r->tag, "v1.2");
  const std::string d = "sha256:" + std::string(64, 'a');
  r = ParseImageRef("ghcr.io/org/img@" + d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->registry, "ghcr.io");
  EXPECT_EQ(r->tag, "");
  EXPECT_EQ(r->Reference(), d);
  r = ParseImageRef("img:1@" + d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tag, "1");
  EXPECT_EQ(r->Reference(), d);
  for (const char* bad : {"", "Upper/Case", "img@sha256:xyz", "img:", "a//b", "img:-x"}) {
    EXPECT_EQ(ParseImageRef(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(ImageConfigTest, KubernetesCommandSemantics) {
  ImageConfig c;
  c.entrypoint = {"python"};
  c.cmd = {"train.py"};
  EXPECT_EQ(ImageCommand(c, {}), (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(ImageCommand(c, {"eval.py"}), (std::vector<std::string>{"python", "eval.py"}));
  c.entrypoint.clear();
  EXPECT_EQ(ImageCommand(c, {}), (std::vector<std::string>{"train.py"}));
  c.cmd.clear();
  EXPECT_TRUE(ImageCommand(c, {}).empty());
}

TEST_F(RegistryTest, ResolvesTagAndDigestAndCaches) {
  StartRegistry();
  auto pushed = testing::PushImage(target_, "v1", dir_.path(), TrainerSpec());
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  Client client;
  const std::string image = registry_->host() + "/team/trainer:v1";
  auto c = client.Resolve(image, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->image, image);
  EXPECT_EQ(c->entrypoint, TrainerSpec().entrypoint);
  EXPECT_EQ(c->cmd, TrainerSpec().cmd);
  EXPECT_EQ(c->working_dir, "/workspace");
  EXPECT_EQ(c->env, TrainerSpec().env);
  EXPECT_EQ(c->manifest_digest, pushed->manifest_digest);
  EXPECT_EQ(c->config_digest, pushed->config_digest);
  EXPECT_EQ(client.stats().requests, 2u);  // manifest + config

  // The tag again within its TTL, and the digest: no request.
  ASSERT_TRUE(client.Resolve(image, {}).ok());
  auto by_digest =
      client.Resolve(registry_->host() + "/team/trainer@" + pushed->manifest_digest, {});
  ASSERT_TRUE(by_digest.ok()) << by_digest.status().ToString();
  EXPECT_EQ(by_digest->cmd, TrainerSpec().cmd);
  EXPECT_EQ(client.stats().requests, 2u);
  EXPECT_EQ(client.stats().cache_hits, 2u);

  // A fresh client resolves the digest from the registry (and verifies it).
  Client fresh;
  by_digest = fresh.Resolve(registry_->host() + "/team/trainer@" + pushed->manifest_digest, {});
  ASSERT_TRUE(by_digest.ok()) << by_digest.status().ToString();
  EXPECT_EQ(by_digest->entrypoint, TrainerSpec().entrypoint);
  EXPECT_EQ(fresh.stats().requests, 2u);
}

TEST_F(RegistryTest, TagTtlExpiresButConfigStaysCached) {
  StartRegistry();
  ASSERT_TRUE(testing::PushImage(target_, "v1", dir_.path(), TrainerSpec()).ok());
  FakeClock clock;
  ClientOptions o;
  o.clock = &clock;
  o.tag_ttl_s = 60;
  Client client(o);
  const std::string image = registry_->host() + "/team/trainer:v1";
  ASSERT_TRUE(client.Resolve(image, {}).ok());
  EXPECT_EQ(client.stats().requests, 2u);
  clock.Advance(61);
  ASSERT_TRUE(client.Resolve(image, {}).ok());
  EXPECT_EQ(client.stats().requests, 3u);  // the manifest again, not the config
  ASSERT_TRUE(client.Resolve(image, {}).ok());
  EXPECT_EQ(client.stats().requests, 3u);
}

TEST_F(RegistryTest, IndexPicksThePlatform) {
  StartRegistry();
  ImageSpec amd = TrainerSpec();
  ImageSpec arm = TrainerSpec();
  arm.architecture = "arm64";
  arm.entrypoint = {"/arm/python"};
  ImageSpec ppc = TrainerSpec();
  ppc.architecture = "ppc64le";
  ppc.oci = false;  // a Docker v2 manifest inside an OCI index
  auto p_arm = testing::PushImage(target_, "", dir_.path(), arm);
  auto p_amd = testing::PushImage(target_, "", dir_.path(), amd);
  auto p_ppc = testing::PushImage(target_, "", dir_.path(), ppc);
  ASSERT_TRUE(p_arm.ok() && p_amd.ok() && p_ppc.ok()) << p_arm.status().ToString();
  auto index = testing::PushIndex(target_, "multi", {{arm, *p_arm}, {amd, *p_amd}, {ppc, *p_ppc}});
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  auto list = testing::PushIndex(target_, "list", {{arm, *p_arm}, {amd, *p_amd}}, false);
  ASSERT_TRUE(list.ok()) << list.status().ToString();

  Client client;
  auto c = client.Resolve(registry_->host() + "/team/trainer:multi", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->entrypoint, amd.entrypoint);
  EXPECT_EQ(c->manifest_digest, p_amd->manifest_digest);
  EXPECT_EQ(client.stats().requests, 3u);  // index, manifest, config
  // The index by digest: cached under the index's digest too.
  c = client.Resolve(registry_->host() + "/team/trainer@" + *index, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(client.stats().requests, 3u);

  ClientOptions o;
  o.platform.architecture = "arm64";
  Client arm_client(o);
  c = arm_client.Resolve(registry_->host() + "/team/trainer:list", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->entrypoint, arm.entrypoint);
  o.platform.architecture = "ppc64le";
  Client ppc_client(o);
  c = ppc_client.Resolve(registry_->host() + "/team/trainer:multi", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config_digest, p_ppc->config_digest);
  o.platform.architecture = "s390x";
  Client none(o);
  c = none.Resolve(registry_->host() + "/team/trainer:multi", {});
  EXPECT_EQ(c.status().code(), Code::kNotFound);
  EXPECT_NE(c.status().message().find("no manifest for platform linux/s390x"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("linux/arm64, linux/amd64, linux/ppc64le"), std::string::npos)
      << c.status().message();
}

TEST_F(RegistryTest, PullSecretAuth) {
  StartRegistry("trainer", "s3cret");
  ASSERT_TRUE(testing::PushImage(target_, "v1", dir_.path(), TrainerSpec()).ok());
  const std::string image = registry_->host() + "/team/trainer:v1";

  Client client;
  auto missing = client.Resolve(image, {});
  EXPECT_EQ(missing.status().code(), Code::kPermissionDenied);
  EXPECT_NE(missing.status().message().find("set pod.imagePullSecrets"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find(registry_->host()), std::string::npos);

  // A secret for another registry is no secret for this one.
  auto other = client.Resolve(image, {{"other", DockerConfig("quay.io", "trainer", "s3cret")}});
  EXPECT_EQ(other.status().code(), Code::kPermissionDenied);

  auto wrong =
      client.Resolve(image, {{"regcred", DockerConfig(registry_->host(), "trainer", "wrong")}});
  EXPECT_EQ(wrong.status().code(), Code::kPermissionDenied);
  EXPECT_NE(wrong.status().message().find("pull secret regcred"), std::string::npos)
      << wrong.status().message();

  auto right =
      client.Resolve(image, {{"regcred", DockerConfig(registry_->host(), "trainer", "s3cret")}});
  ASSERT_TRUE(right.ok()) << right.status().ToString();
  EXPECT_EQ(right->cmd, TrainerSpec().cmd);
  // username/password instead of auth, under an http:// key.
  Client c2;
  auto up = c2.Resolve(
      image,
      {{"regcred", DockerConfig("http://" + registry_->host(), "trainer", "s3cret", false)}});
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  // The cache is per credential: anonymous is still refused after a success.
  EXPECT_EQ(client.Resolve(image, {}).status().code(), Code::kPermissionDenied);

  auto malformed = client.Resolve(image, {{"broken", "{\"auths\": 3}"}});
  EXPECT_EQ(malformed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(malformed.status().message().find("pull secret broken"), std::string::npos);
}

TEST_F(RegistryTest, BearerTokenFlowWithThePullSecret) {
  StartRegistry();
  auto pushed = testing::PushImage(target_, "v1", dir_.path(), TrainerSpec());
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  BearerFront front(registry_->host(), "trainer", "s3cret");
  const std::string image = front.host() + "/team/trainer:v1";

  Client client;
  auto anonymous = client.Resolve(image, {});  // the token endpoint refuses no credentials
  EXPECT_EQ(anonymous.status().code(), Code::kPermissionDenied) << anonymous.status().ToString();
  EXPECT_NE(anonymous.status().message().find("set pod.imagePullSecrets"), std::string::npos);
  auto wrong = client.Resolve(image, {{"regcred", DockerConfig(front.host(), "trainer", "no")}});
  EXPECT_EQ(wrong.status().code(), Code::kPermissionDenied);
  EXPECT_NE(wrong.status().message().find("pull secret regcred"), std::string::npos);

  const std::vector<PullSecret> secret = {
      {"regcred", DockerConfig(front.host(), "trainer", "s3cret")}};
  const int before = front.token_requests();
  auto c = client.Resolve(image, secret);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cmd, TrainerSpec().cmd);
  EXPECT_EQ(c->config_digest, pushed->config_digest);
  EXPECT_EQ(front.token_requests(), before + 1);  // one token for the manifest and the blob
  EXPECT_EQ(front.last_token_query(), "service=front&scope=repository%3Ateam%2Ftrainer%3Apull");
  // Another tag of the repository: the token is reused.
  ASSERT_TRUE(testing::PushImage(target_, "v2", dir_.path(), TrainerSpec()).ok());
  ASSERT_TRUE(client.Resolve(front.host() + "/team/trainer:v2", secret).ok());
  EXPECT_EQ(front.token_requests(), before + 1);
}

TEST_F(RegistryTest, NotFoundNamesImageAndRegistry) {
  StartRegistry();
  ASSERT_TRUE(testing::PushImage(target_, "v1", dir_.path(), TrainerSpec()).ok());
  Client client;
  for (const std::string& image :
       {registry_->host() + "/team/trainer:v2", registry_->host() + "/team/nothing:v1"}) {
    auto c = client.Resolve(image, {});
    EXPECT_EQ(c.status().code(), Code::kNotFound) << c.status().ToString();
    EXPECT_NE(c.status().message().find("image " + image), std::string::npos);
    EXPECT_NE(c.status().message().find("registry " + registry_->host()), std::string::npos);
    EXPECT_NE(c.status().message().find("set command:"), std::string::npos);
  }
}

TEST_F(RegistryTest, CorruptedConfigIsDataLoss) {
  StartRegistry();
  auto pushed = testing::PushImage(target_, "v1", dir_.path(), TrainerSpec());
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
  const std::string blob = registry_->BlobPath(pushed->config_digest);
  ASSERT_TRUE(fs::exists(blob)) << blob;
  std::ifstream in(blob);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const size_t at = text.find("train.py");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 8, "evil.py!");  // same size: the registry serves it as stored
  std::ofstream(blob, std::ios::trunc) << text;
  Client client;
  auto c = client.Resolve(registry_->host() + "/team/trainer:v1", {});
  EXPECT_EQ(c.status().code(), Code::kDataLoss) << c.status().ToString();
  EXPECT_NE(c.status().message().find(pushed->config_digest), std::string::npos);
}

// Kubeflow's quick-start PyTorchJob (Master + 3 Workers, pytorch/pytorch:latest, no
// command) with its image in the loopback registry: converted, its command read from
// the image, its pods rendered.
TEST_F(RegistryTest, QuickStartPyTorchJobRunsTheImagesCommand) {
  StartRegistry();
  ImageSpec spec;
  spec.entrypoint = {"/opt/conda/bin/python"};
  spec.cmd = {"/workspace/train.py"};
  spec.working_dir = "/workspace";
  spec.env = {"PATH=/opt/conda/bin:/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all"};
  target_.repository = "pytorch/pytorch";
  auto pushed = testing::PushImage(target_, "latest", dir_.path(), spec);
  ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();

  std::ifstream in(std::string(BW_TEST_SOURCE_DIR) +
                   "/src/trainjob/testdata/pytorchjob-quickstart.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string image = registry_->host() + "/pytorch/pytorch:latest";
  for (size_t at = text.find("pytorch/pytorch:latest"); at != std::string::npos;
       at = text.find("pytorch/pytorch:latest", at + image.size())) {
    text.replace(at, std::string("pytorch/pytorch:latest").size(), image);
  }
  auto m = trainjob::ParseManifest(text, "quickstart.yaml", "/", trainjob::Target::kKubernetes);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  trainjob::TrainJob t = m->job;
  EXPECT_EQ(t.job.nodes, 4);
  ASSERT_TRUE(t.job.command.empty());

  Client client;
  auto cfg = client.Resolve(t.pod.image, {});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto line = trainjob::ApplyImageConfig(*cfg, trainjob::Target::kKubernetes, &t);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "command from image " + image + " (" + pushed->manifest_digest +
                       "): [\"/opt/conda/bin/python\", \"/workspace/train.py\"]");
  EXPECT_EQ(t.job.command, (std::vector<std::string>{"/opt/conda/bin/python"}));
  EXPECT_EQ(t.job.args, (std::vector<std::string>{"/workspace/train.py"}));
  EXPECT_EQ(t.job.workdir, "/workspace");
  EXPECT_EQ(t.job.env.at("NVIDIA_VISIBLE_DEVICES"), "all");
  // The TrainJob the operator runs now has the command, and its four worker pods render.
  auto resolved = trainjob::TrainJobFromObject(trainjob::ToObject(t));
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(resolved->job.command, t.job.command);
  int workers = 0;
  for (const Json& o : trainjob::RenderJobObjects(t, {}, {})) {
    if (o.value("kind", "") != "Pod") continue;
    EXPECT_EQ(o["spec"]["containers"][0]["image"], image);
    workers += o["metadata"]["labels"][trainjob::kRoleLabel] == "worker";
  }
  EXPECT_EQ(workers, 4);
  // Every pod of the job resolves from the cache: one walk for the job.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client.Resolve(t.pod.image, {}).ok());
  EXPECT_EQ(client.stats().requests, 2u);
}

TEST(RegistryTimeoutTest, ServerThatNeverAnswers) {
  // Accepts connections (the kernel's backlog) but never reads or answers.
  auto listener = TcpListen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  auto port = LocalPort(listener->get());
  ASSERT_TRUE(port.ok());
  ClientOptions o;
  o.request_timeout_s = 0.5;
  o.connect_timeout_s = 0.5;
  Client client(o);
  const auto start = std::chrono::steady_clock::now();
  auto c = client.Resolve("127.0.0.1:" + std::to_string(*port) + "/team/trainer:v1", {});
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(c.status().code(), Code::kDeadlineExceeded) << c.status().ToString();
  EXPECT_LT(took, 5.0);
}

TEST(RegistryTimeoutTest, UnreachableRegistry) {
  auto port = PickFreePort("127.0.0.1");  // nothing listens there
  ASSERT_TRUE(port.ok());
  Client client;
  auto c = client.Resolve("127.0.0.1:" + std::to_string(*port) + "/team/trainer:v1", {});
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().ToString();
}

// `bulwark run`'s credentials: ~/.docker/config.json's credential helper, run by
// Docker's protocol (a real program on PATH, here a shell script standing in for
// docker-credential-pass and the like, which need a keyring), then its auths.
class DockerCredentialsTest : public RegistryTest {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw-docker-config-XXXXXX";
    home_ = mkdtemp(tmpl);
    fs::create_directories(home_ + "/bin");
    saved_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    const char* dc = std::getenv("DOCKER_CONFIG");
    saved_docker_config_ = dc ? std::optional<std::string>(dc) : std::nullopt;
    setenv("DOCKER_CONFIG", home_.c_str(), 1);
    setenv("PATH", (home_ + "/bin:" + saved_path_).c_str(), 1);
  }
  void TearDown() override {
    setenv("PATH", saved_path_.c_str(), 1);
    if (saved_docker_config_) {
      setenv("DOCKER_CONFIG", saved_docker_config_->c_str(), 1);
    } else {
      unsetenv("DOCKER_CONFIG");
    }
    std::error_code ec;
    fs::remove_all(home_, ec);
  }
  void WriteConfig(const std::string& json) { std::ofstream(home_ + "/config.json") << json; }
  // docker-credential-NAME: the shell `body`, with the server read from stdin in $server.
  void WriteHelper(const std::string& name, const std::string& body) {
    const std::string path = home_ + "/bin/docker-credential-" + name;
    std::ofstream(path) << "#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread server\n" << body;
    fs::permissions(path, fs::perms::owner_all);
  }
  std::string home_, saved_path_;
  std::optional<std::string> saved_docker_config_;
};

TEST_F(DockerCredentialsTest, TheRegistrysHelperIsAskedAndItsCredentialsPull) {
  StartRegistry("trainer", "s3cret");
  ASSERT_TRUE(testing::PushImage(target_, "v1", dir_.path(), TrainerSpec()).ok());
  const std::string image = registry_->host() + "/team/trainer:v1";
  EXPECT_TRUE(LocalDockerCredentials(image)->empty());  // no config.json: anonymous
  WriteHelper("bwtest",
              "[ \"$server\" = \"" + registry_->host() +
                  "\" ] || { echo \"asked for $server\" >&2; exit 1; }\n"
                  "echo \"{\\\"ServerURL\\\":\\\"$server\\\",\\\"Username\\\":\\\"trainer\\\","
                  "\\\"Secret\\\":\\\"s3cret\\\"}\"\n");
  WriteConfig(R"({"credHelpers": {")" + registry_->host() + R"(": "bwtest"}})");
  auto creds = LocalDockerCredentials(image);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  ASSERT_EQ(creds->size(), 1u);
  Client client;
  auto c = client.Resolve(image, *creds);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cmd, TrainerSpec().cmd);
  // credsStore serves every registry without a credHelpers entry.
  WriteConfig(R"({"credsStore": "bwtest"})");
  creds = LocalDockerCredentials(image);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_TRUE(Client().Resolve(image, *creds).ok());
  // Without the helper's credentials the registry refuses: the helper mattered.
  EXPECT_EQ(Client().Resolve(image, {}).status().code(), Code::kPermissionDenied);
}

TEST_F(DockerCredentialsTest, HelperAndConfigFailuresSayWhatToDo) {
  const std::string image = "127.0.0.1:5999/team/trainer:v1";
  WriteConfig("{not json");
  auto r = LocalDockerCredentials(image);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(home_ + "/config.json is not a JSON object"),
            std::string::npos)
      << r.status().ToString();
  WriteConfig(R"({"credsStore": "nope"})");
  r = LocalDockerCredentials(image);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("docker-credential-nope cannot be run"), std::string::npos)
      << r.status().ToString();
  // "Not found" from the helper is no error: no credentials, and the file's auths.
  WriteHelper("empty", "echo 'credentials not found in native keychain'; exit 1\n");
  WriteConfig(R"({"credsStore": "empty", "auths": {"127.0.0.1:5999": {"auth": "dTpw"}}})");
  r = LocalDockerCredentials(image);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_NE((*r)[0].dockerconfigjson.find("dTpw"), std::string::npos);
  WriteHelper("token", "echo '{\"Username\": \"<token>\", \"Secret\": \"refresh\"}'\n");
  WriteConfig(R"({"credsStore": "token"})");
  r = LocalDockerCredentials(image);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("identity token"), std::string::npos)
      << r.status().ToString();
  // A helper that exits without reading its stdin: an error, not a SIGPIPE death.
  const std::string noread = home_ + "/bin/docker-credential-noread";
  std::ofstream(noread) << "#!/bin/sh\necho 'no input read' >&2\nexit 4\n";
  fs::permissions(noread, fs::perms::owner_all);
  WriteConfig(R"({"credsStore": "noread"})");
  r = LocalDockerCredentials(image);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no input read"), std::string::npos) << r.status().ToString();
  // Writing to it once it is gone: EPIPE, and this process lives (no SIGPIPE).
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  errno = 0;
  EXPECT_EQ(internal::WriteNoSigpipe(fds[1], "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[1]);
  WriteHelper("broken", "echo 'keyring is locked' >&2; exit 2\n");
  WriteConfig(R"({"credsStore": "broken"})");
  r = LocalDockerCredentials(image);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("keyring is locked"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace bulwark::registry
