#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "k8s/client.h"

namespace bulwark::k8s {
namespace {

namespace fs = std::filesystem;

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw-kubeconfig-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p) << text;
    return p;
  }

  std::string dir_;
};

// base64 of "CA-PEM\n", "CERT\n", "KEY\n".
constexpr char kKubeconfig[] = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: prod-cluster
  cluster:
    server: https://prod.example:6443
    certificate-authority: certs/ca.pem
- name: dev-cluster
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Q0EtUEVNCg==
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: ml}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
- name: sso
  context: {cluster: dev-cluster, user: sso-user}
- name: dangling
  context: {cluster: nowhere, user: dev-user}
users:
- name: dev-user
  user:
    client-certificate-data: Q0VSVAo=
    client-key-data: S0VZCg==
- name: prod-user
  user:
    client-certificate: certs/client.pem
    client-key: /ABSOLUTE/client-key.pem
    tokenFile: token
- name: sso-user
  user:
    exec:
      command: aws
)";

TEST_F(KubeconfigTest, CurrentContextWithInlineData) {
  auto cfg = LoadKubeConfig(Write("config", kKubeconfig));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg->ca_pem, "CA-PEM\n");
  EXPECT_EQ(cfg->client_cert_pem, "CERT\n");
  EXPECT_EQ(cfg->client_key_pem, "KEY\n");
  EXPECT_EQ(cfg->namespace_, "ml");
  EXPECT_TRUE(cfg->token.empty());
}

TEST_F(KubeconfigTest, NamedContextResolvesRelativeFiles) {
  Write("kube/certs/ca.pem", "the CA");
  Write("kube/certs/client.pem", "the cert");
  Write("kube/token", "tok-123\n");
  const std::string key = Write("keys/client-key.pem", "the key");
  std::string text = kKubeconfig;
  text.replace(text.find("/ABSOLUTE/client-key.pem"), 24, key);
  auto cfg = LoadKubeConfig(Write("kube/config", text), "prod");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server, "https://prod.example:6443");
  EXPECT_EQ(cfg->ca_pem, "the CA");
  EXPECT_EQ(cfg->client_cert_pem, "the cert");
  EXPECT_EQ(cfg->client_key_pem, "the key");
  EXPECT_EQ(cfg->token, "tok-123");
  EXPECT_EQ(cfg->token_file, dir_ + "/kube/token");
  EXPECT_EQ(cfg->namespace_, "default");
}

void ExpectError(const Result<ClientConfig>& r, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(r.ok());
  for (const char* p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << r.status().message();
  }
}

TEST_F(KubeconfigTest, ErrorsNameTheFieldAndTheFix) {
  const std::string path = Write("config", kKubeconfig);
  ExpectError(LoadKubeConfig(path, "nope"), {path.c_str(), "contexts", "'nope'", "dev, prod"});
  ExpectError(LoadKubeConfig(path, "sso"), {"users[name=sso-user].user.exec", "token"});
  ExpectError(LoadKubeConfig(path, "dangling"),
              {"contexts[name=dangling].context.cluster", "'nowhere'", "prod-cluster"});
  // prod's files do not exist next to this kubeconfig.
  ExpectError(LoadKubeConfig(path, "prod"),
              {"clusters[name=prod-cluster].cluster.certificate-authority", "certs/ca.pem"});
  ExpectError(LoadKubeConfig(dir_ + "/missing"), {"missing", "exists"});
  ExpectError(LoadKubeConfig(Write("bad.yaml", "clusters: [\n")), {"not valid YAML"});
  ExpectError(LoadKubeConfig(Write("list.yaml", "- 1\n")), {"not a YAML mapping"});

  std::string no_current = kKubeconfig;
  no_current.replace(no_current.find("current-context: dev"), 20, "current-context: \"\"");
  ExpectError(LoadKubeConfig(Write("c2", no_current)), {"current-context", "use-context"});

  std::string bad_b64 = kKubeconfig;
  bad_b64.replace(bad_b64.find("Q0EtUEVNCg=="), 12, "Q0E*UEVNCg==");
  ExpectError(LoadKubeConfig(Write("c3", bad_b64)),
              {"clusters[name=dev-cluster].cluster.certificate-authority-data", "base64"});

  std::string no_server = kKubeconfig;
  no_server.replace(no_server.find("server: https://127.0.0.1:6443"), 30, "server: \"\"");
  ExpectError(LoadKubeConfig(Write("c4", no_server)),
              {"clusters[name=dev-cluster].cluster.server"});

  std::string weird = kKubeconfig;
  weird.replace(weird.find("server: https://127.0.0.1:6443"), 30, "server: [1, 2]");
  ExpectError(LoadKubeConfig(Write("c5", weird)), {"server", "not a string"});

  ExpectError(LoadKubeConfig(Write("c6", "current-context: c\ncontexts: 5\n")),
              {"contexts is not a list", "- name: NAME", "context:"});
  std::string ftp = kKubeconfig;
  ftp.replace(ftp.find("https://127.0.0.1:6443"), 22, "ftp://127.0.0.1:6443");
  ExpectError(LoadKubeConfig(Write("c7", ftp)),
              {"clusters[name=dev-cluster].cluster.server", "scheme ftp://", "https://HOST:PORT"});
  std::string bytes = kKubeconfig;
  bytes.replace(bytes.find("https://127.0.0.1:6443"), 22, "\"https://127.0.0.1:6443\xff\"");
  ExpectError(LoadKubeConfig(Write("c8", bytes)),
              {"clusters[name=dev-cluster].cluster.server", "non-ASCII"});
}

// As client-go: HOST:PORT gets https:// when TLS is configured (a CA, insecure, or a client
// certificate), else http://.
TEST_F(KubeconfigTest, ServerWithoutSchemeGetsClientGosDefault) {
  std::string tls = kKubeconfig;
  tls.replace(tls.find("https://127.0.0.1:6443"), 22, "127.0.0.1:6443");
  auto r = LoadKubeConfig(Write("tls", tls));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "https://127.0.0.1:6443");

  const std::string plain = R"(current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
clusters:
- name: k
  cluster: {server: "localhost:8080"}
users:
- name: u
  user: {token: t}
)";
  r = LoadKubeConfig(Write("plain", plain));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "http://localhost:8080");

  std::string insecure = plain;
  const std::string server = "{server: \"localhost:8080\"}";
  insecure.replace(insecure.find(server), server.size(),
                   "{server: \"localhost:8080\", insecure-skip-tls-verify: true}");
  r = LoadKubeConfig(Write("insecure", insecure));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "https://localhost:8080");
}

TEST_F(KubeconfigTest, InClusterConfigReadsTheServiceAccount) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  auto r = InClusterConfig(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);

  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  r = InClusterConfig(dir_ + "/sa");
  ASSERT_FALSE(r.ok());  // no token yet
  EXPECT_NE(r.status().message().find("token"), std::string::npos);

  Write("sa/token", "sa-token\n");
  Write("sa/ca.crt", "CA");
  Write("sa/namespace", "bulwark-system");
  r = InClusterConfig(dir_ + "/sa");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->server, "https://[fd00::1]:443");
  EXPECT_EQ(r->token, "sa-token");
  EXPECT_EQ(r->token_file, dir_ + "/sa/token");
  EXPECT_EQ(r->ca_pem, "CA");
  EXPECT_EQ(r->namespace_, "bulwark-system");
}

}  // namespace
}  // namespace bulwark::k8s
