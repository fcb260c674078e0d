// Client pieces that need no API server: error mapping, times, paths, encodings,
// config validation, and transport behaviour against sockets that refuse or never
// answer (retries, deadlines, idle watches, cancellation).
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <functional>
#include <thread>

#include "common/clock.h"
#include "common/net.h"
#include "k8s/internal.h"
#include "k8s/testing/https_server.h"

namespace bulwark::k8s {
namespace {

using internal::StatusFromHttp;

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ErrorMappingTest, HttpStatusToCode) {
  struct Case {
    long http;
    const char* body;
    Code want;
  } cases[] = {
      {400, "", Code::kInvalidArgument},
      {422, R"({"kind":"Status","reason":"Invalid","message":"spec.x: Required"})",
       Code::kInvalidArgument},
      {401, "", Code::kPermissionDenied},
      {403, "", Code::kPermissionDenied},
      {404, R"({"kind":"Status","reason":"NotFound","message":"pods \"p\" not found"})",
       Code::kNotFound},
      {409, R"({"kind":"Status","reason":"AlreadyExists","message":"exists"})",
       Code::kAlreadyExists},
      {409, R"({"kind":"Status","reason":"Conflict","message":"modified"})", Code::kAborted},
      {410, R"({"kind":"Status","reason":"Expired","message":"too old"})", Code::kOutOfRange},
      {429, "", Code::kUnavailable},
      {500, "", Code::kUnavailable},
      {503, "", Code::kUnavailable},
  };
  for (const auto& c : cases) {
    Status s = StatusFromHttp("GET", "/api/v1/pods", c.http, c.body);
    EXPECT_EQ(s.code(), c.want) << c.http << " " << c.body << " -> " << s.ToString();
  }
  EXPECT_TRUE(
      IsConflict(StatusFromHttp("PUT", "/x", 409, R"({"kind":"Status","reason":"Conflict"})")));
  EXPECT_TRUE(IsAlreadyExists(
      StatusFromHttp("POST", "/x", 409, R"({"kind":"Status","reason":"AlreadyExists"})")));
  EXPECT_TRUE(IsGone(StatusFromHttp("GET", "/x", 410, "")));
  EXPECT_TRUE(IsNotFound(StatusFromHttp("GET", "/x", 404, "")));
  EXPECT_FALSE(IsConflict(StatusFromHttp("GET", "/x", 404, "")));
}

TEST(ErrorMappingTest, MessageNamesVerbPathStatusReasonAndMessage) {
  Status s = StatusFromHttp(
      "PUT", "/apis/bulwark.dev/v1alpha1/namespaces/ml/trainjobs/a", 409,
      R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,)"
      R"("message":"the object has been modified; please apply your changes to the latest version and try again"})");
  EXPECT_EQ(s.message(),
            "PUT /apis/bulwark.dev/v1alpha1/namespaces/ml/trainjobs/a: 409 Conflict: the object "
            "has been modified; please apply your changes to the latest version and try again");
  // Without a Status body: the default reason and the start of the body.
  s = StatusFromHttp("GET", "/api/v1/nodes", 503, "upstream connect error\nretry later");
  EXPECT_EQ(s.message(),
            "GET /api/v1/nodes: 503 ServiceUnavailable: upstream connect error retry later");
  s = internal::StatusFromApiStatus(
      "WATCH", "/api/v1/pods",
      Json{{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}, {"message", "too old"}});
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_EQ(s.message(), "WATCH /api/v1/pods: 410 Expired: too old");
}

TEST(ErrorMappingTest, RetryAfter) {
  EXPECT_EQ(internal::ParseRetryAfter("3"), 3.0);
  EXPECT_EQ(internal::ParseRetryAfter(" 12 "), 12.0);
  EXPECT_EQ(internal::ParseRetryAfter(""), std::nullopt);
  EXPECT_EQ(internal::ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), std::nullopt);
  EXPECT_EQ(internal::ParseRetryAfter("-1"), std::nullopt);
}

TEST(TimeTest, Rfc3339RoundTripsAndParsesVariants) {
  EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(1795559581.9), "2026-11-24T22:33:01Z");
  EXPECT_EQ(internal::Rfc3339Micro(1795559581.25), "2026-11-24T22:33:01.250000Z");
  EXPECT_EQ(internal::Rfc3339Micro(1795559581.9999999), "2026-11-24T22:33:02.000000Z");
  auto t = ParseRfc3339("2026-11-24T22:33:01Z");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1795559581);
  t = ParseRfc3339("2026-11-24T22:33:01.250000Z");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1795559581.25);
  t = ParseRfc3339("2026-11-24T23:33:01+01:00");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1795559581);
  t = ParseRfc3339("2026-11-24t22:33:01.5z");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1795559581.5);
  t = ParseRfc3339("2024-02-29T00:00:00Z");  // leap day
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 1709164800);
  for (double v : {0.0, 1e9, 1795559581.0, 4102444800.0}) {
    auto back = ParseRfc3339(FormatRfc3339(v));
    ASSERT_TRUE(back.ok());
    EXPECT_DOUBLE_EQ(*back, v);
  }
  for (const char* bad : {"", "2026-11-24", "2026-11-24 22:33:01Z", "2026-13-01T00:00:00Z",
                          "2023-02-29T00:00:00Z", "2026-11-24T22:33:01", "2026-11-24T22:33:01.Z",
                          "2026-11-24T22:33:01+0100", "2026-11-24T22:33:01Zjunk"}) {
    auto r = ParseRfc3339(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("RFC 3339"), std::string::npos);
  }
}

TEST(ResourceTest, PathsAndHelpers) {
  EXPECT_EQ(Pods().Path("ml", "p1"), "/api/v1/namespaces/ml/pods/p1");
  EXPECT_EQ(Pods().Path(""), "/api/v1/pods");
  EXPECT_EQ(Pods().Path("ml", "p1", "status"), "/api/v1/namespaces/ml/pods/p1/status");
  EXPECT_EQ(Nodes().Path("ignored", "n1"), "/api/v1/nodes/n1");
  EXPECT_EQ(TrainJobs().Path("ml", "a", "status"),
            "/apis/bulwark.dev/v1alpha1/namespaces/ml/trainjobs/a/status");
  EXPECT_EQ(TrainJobs().ApiVersion(), "bulwark.dev/v1alpha1");
  EXPECT_EQ(Pods().ApiVersion(), "v1");
  EXPECT_EQ(Leases().Path("bulwark-system", "op"),
            "/apis/coordination.k8s.io/v1/namespaces/bulwark-system/leases/op");
  EXPECT_EQ(CustomResourceDefinitions().Path("", "trainjobs.bulwark.dev"),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainjobs.bulwark.dev");
  EXPECT_FALSE(CustomResourceDefinitions().namespaced);
  EXPECT_EQ(PodGroups().ApiVersion(), "scheduling.volcano.sh/v1beta1");

  Json pod = {
      {"metadata", {{"name", "p"}, {"namespace", "ml"}, {"resourceVersion", "7"}, {"uid", "u-1"}}}};
  EXPECT_EQ(KeyOf(pod), "ml/p");
  EXPECT_EQ(Name(pod), "p");
  EXPECT_EQ(Namespace(pod), "ml");
  EXPECT_EQ(ResourceVersion(pod), "7");
  EXPECT_EQ(Uid(pod), "u-1");
  EXPECT_EQ(KeyOf(Json{{"metadata", {{"name", "n1"}}}}), "n1");
  EXPECT_EQ(KeyOf(Json::array()), "");
  EXPECT_EQ(Name(Json{{"metadata", 3}}), "");
}

TEST(EncodingTest, QueryEscapeAndBase64) {
  EXPECT_EQ(internal::QueryEscape("app in (a,b),!x"), "app%20in%20%28a%2Cb%29%2C%21x");
  EXPECT_EQ(internal::QueryEscape("a=b&c"), "a%3Db%26c");
  EXPECT_EQ(internal::QueryEscape("Az09-._~"), "Az09-._~");
  EXPECT_EQ(internal::Base64Decode("aGVsbG8="), "hello");
  EXPECT_EQ(internal::Base64Decode("aGVs\nbG8"), "hello");
  EXPECT_EQ(internal::Base64Decode(""), "");
  EXPECT_EQ(internal::Base64Decode("a"), std::nullopt);
  EXPECT_EQ(internal::Base64Decode("aGV*"), std::nullopt);
  EXPECT_EQ(internal::Base64Decode("aG==Vs"), std::nullopt);
  EXPECT_EQ(internal::CheckPathSegment("ok-name.1"), "");
  EXPECT_NE(internal::CheckPathSegment(""), "");
  EXPECT_NE(internal::CheckPathSegment("a/b"), "");
  EXPECT_NE(internal::CheckPathSegment(".."), "");
  EXPECT_NE(internal::CheckPathSegment("a?watch=1"), "");
}

// A self-signed EC certificate and its key, as PEM.
std::pair<std::string, std::string> SelfSigned() {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("test"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_set_pubkey(x, key);
  X509_sign(x, key, EVP_sha256());
  auto pem = [](auto write) {
    BIO* b = BIO_new(BIO_s_mem());
    write(b);
    char* data = nullptr;
    long n = BIO_get_mem_data(b, &data);
    std::string s(data, static_cast<size_t>(n));
    BIO_free(b);
    return s;
  };
  std::string cert = pem([&](BIO* b) { PEM_write_bio_X509(b, x); });
  std::string k =
      pem([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); });
  X509_free(x);
  EVP_PKEY_free(key);
  return {cert, k};
}

TEST(ClientConfigTest, CreateValidatesFieldsAndPems) {
  auto [cert, key] = SelfSigned();
  auto expect_bad = [](ClientConfig cfg, const char* field) {
    auto c = Client::Create(std::move(cfg));
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
  };
  ClientConfig good;
  good.server = "https://127.0.0.1:6443/";
  good.ca_pem = cert;
  good.client_cert_pem = cert;
  good.client_key_pem = key;
  auto c = Client::Create(good);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->config().server, "https://127.0.0.1:6443");

  const std::string cert_pem = cert;
  const std::pair<std::function<void(ClientConfig&)>, const char*> bad[] = {
      {[](ClientConfig& b) { b.server = "127.0.0.1:6443"; }, "ClientConfig.server"},
      {[](ClientConfig& b) { b.server = "https://"; }, "ClientConfig.server"},
      {[](ClientConfig& b) { b.max_attempts = 0; }, "ClientConfig.max_attempts"},
      {[](ClientConfig& b) { b.ca_pem = "not a pem"; }, "ClientConfig.ca_pem"},
      {[](ClientConfig& b) { b.client_key_pem = ""; }, "client_key_pem"},
      {[&](ClientConfig& b) { b.client_key_pem = cert_pem; }, "ClientConfig.client_key_pem"},
      {[](ClientConfig& b) { b.timeout_s = 0; }, "timeout_s"},
  };
  for (const auto& [mutate, field] : bad) {
    ClientConfig b = good;
    mutate(b);
    expect_bad(b, field);
  }
}

TEST(ClientObjectArgsTest, BadNamesAreRejectedBeforeAnyRequest) {
  ClientConfig cfg;
  cfg.server = "http://127.0.0.1:1";
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Get(Pods(), "ml", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("name"), std::string::npos);
  r = (*c)->Get(Pods(), "ml", "../../secrets");
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  r = (*c)->Update(Pods(), "ml", Json{{"metadata", {{"namespace", "ml"}}}});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  r = (*c)->Patch(Pods(), "ml", "p", Json::array(), PatchType::kMerge);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  r = (*c)->Create(Pods(), "ml", Json::array());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Stats().requests, 0u);
}

// A port nothing listens on (connection refused) and a socket that accepts into its
// backlog but never answers.
class DeadServerTest : public ::testing::Test {
 protected:
  // A client of plain http://127.0.0.1:port with fast retries.
  static std::unique_ptr<Client> ClientFor(int port) {
    ClientConfig cfg;
    cfg.server = "http://127.0.0.1:" + std::to_string(port);
    cfg.max_attempts = 3;
    cfg.backoff_initial_s = 0.01;
    cfg.backoff_max_s = 0.02;
    cfg.timeout_s = 0.3;
    auto c = Client::Create(cfg);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // A client of a socket that accepts connections (into its backlog) and never answers.
  std::unique_ptr<Client> SilentServerClient() {
    auto listener = TcpListen("127.0.0.1", 0);
    EXPECT_TRUE(listener.ok());
    if (!listener.ok()) return nullptr;
    silent_ = std::move(listener).value();
    auto port = LocalPort(silent_.get());
    EXPECT_TRUE(port.ok());
    return port.ok() ? ClientFor(*port) : nullptr;
  }

  Fd silent_;
};

TEST_F(DeadServerTest, RefusedConnectionsAreRetriedForReadsAndWrites) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  auto c = ClientFor(*port);
  ASSERT_NE(c, nullptr);
  auto r = c->Get(Pods(), "ml", "p");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("GET /api/v1/namespaces/ml/pods/p"), std::string::npos);
  EXPECT_NE(r.status().message().find("after 3 attempts"), std::string::npos);
  EXPECT_EQ(c->Stats().requests, 3u);
  EXPECT_EQ(c->Stats().retries, 2u);
  // Never sent, so a mutation is safe to retry too.
  auto cr = c->Create(Pods(), "ml", Json{{"metadata", {{"name", "p"}}}});
  ASSERT_FALSE(cr.ok());
  EXPECT_EQ(c->Stats().requests, 6u);
}

TEST_F(DeadServerTest, SilentServerTimesOutReadsRetriedWritesNot) {
  auto c = SilentServerClient();
  ASSERT_NE(c, nullptr);
  auto t0 = std::chrono::steady_clock::now();
  auto r = c->Get(Pods(), "ml", "p");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded) << r.status().ToString();
  EXPECT_EQ(c->Stats().requests, 3u);
  EXPECT_LT(Since(t0), 10);
  // The request may have been applied: a timed-out PUT is not repeated.
  auto u = c->Update(Pods(), "ml", Json{{"metadata", {{"name", "p"}}}});
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), Code::kDeadlineExceeded);
  EXPECT_EQ(c->Stats().requests, 4u);
}

TEST_F(DeadServerTest, IdleWatchFailsAndCancelEndsItPromptly) {
  auto c = SilentServerClient();
  ASSERT_NE(c, nullptr);
  WatchOptions wo;
  wo.idle_timeout_s = 0.3;
  auto never = [](const WatchEvent&) { return true; };
  auto t0 = std::chrono::steady_clock::now();
  Status s = c->Watch(Pods(), "", wo, never);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("no data"), std::string::npos);
  EXPECT_GE(Since(t0), 0.25);
  EXPECT_LT(Since(t0), 10);

  wo.idle_timeout_s = 60;
  std::atomic<bool> cancel{false};
  std::atomic<bool> returned{false};
  Status ws;
  std::thread watcher([&] {
    ws = c->Watch(Pods(), "", wo, never, &cancel);
    returned = true;
  });
  // Wait (bounded) until the watch request is in flight, then cancel it.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c->Stats().requests < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(returned.load());
  t0 = std::chrono::steady_clock::now();
  cancel = true;
  watcher.join();
  EXPECT_TRUE(ws.ok()) << ws.ToString();
  EXPECT_LT(Since(t0), 0.5);  // ~50 ms poll step; generous for sanitizer builds
}

// A server whose list pages lead back to a page already listed (continue tokens
// first -> A -> B -> A): the list is an error after three requests, not a loop.
TEST(ListTest, ContinueTokensThatCycleEndTheList) {
  namespace https = testing::https;
  auto id = https::MakeTlsIdentity();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::atomic<int> requests{0};
  https::HttpServer srv(
      id->ctx,
      [&](const https::HttpRequest& r, https::HttpConn& conn) {
        ++requests;
        const bool first = r.query.find("continue=") == std::string::npos;
        const bool after_a = r.query.find("continue=A") != std::string::npos;
        const std::string next = first ? "A" : after_a ? "B" : "A";
        Json page = {{"kind", "PodList"},
                     {"apiVersion", "v1"},
                     {"metadata", {{"resourceVersion", "7"}, {"continue", next}}},
                     {"items", Json::array({Json{{"metadata", {{"name", "p" + next}}}}})}};
        conn.Respond(200, "application/json", page.dump());
      },
      4);
  ASSERT_TRUE(srv.Start().ok());
  ClientConfig cfg;
  cfg.server = "https://127.0.0.1:" + std::to_string(srv.port());
  cfg.ca_pem = id->ca_pem;
  cfg.timeout_s = 5;
  auto c = Client::Create(cfg);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ListOptions o;
  o.limit = 1;
  auto list = (*c)->List(Pods(), "ml", o);
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), Code::kInternal) << list.status().ToString();
  EXPECT_EQ(list.status().message(),
            "GET /api/v1/namespaces/ml/pods: page 3 of the list gives a continue token the "
            "list already followed: the server's pages cycle");
  EXPECT_EQ(requests.load(), 3);
  srv.Stop();
}

}  // namespace
}  // namespace bulwark::k8s
