// S3Client tests:
//  * S3Unit*: config validation, URL parsing and XML parsing (no server).
//  * S3rver*: against a real s3rver on loopback (s3_test_server.h), with the SigV4
//    verifier in front (S3rverTest) and as the stock command line (S3rverStockTest).
//    They FAIL (never skip) when node or s3rver is missing: run scripts/setup.sh.
//  * S3Fake*: against a scripted HTTP server in this file, for what s3rver cannot be
//    made to do: 5xx/429 answers, hangs, an <Error> inside a 200, wrong Content-Range.
#include "objstore/s3.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/net.h"
#include "common/proc.h"
#include "objstore/s3_test_server.h"
#include "objstore/sigv4.h"

namespace bulwark::objstore {
namespace {

using ::testing::HasSubstr;

std::string Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string TempDir() {
  char tmpl[] = "/tmp/bw-s3-test-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl), nullptr);
  return tmpl;
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------------------------
// Unit tests (no server).

S3Config BasicConfig() {
  S3Config c;
  c.endpoint = "http://127.0.0.1:9";
  c.bucket = "bw-bucket";
  c.access_key = "AK";
  c.secret_key = "SK";
  return c;
}

TEST(S3Unit, ParseS3Url) {
  auto c = ParseS3Url("s3://my-bucket/ckpt/run-1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bucket, "my-bucket");
  EXPECT_EQ(c->prefix, "ckpt/run-1/");
  EXPECT_EQ(c->endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);

  c = ParseS3Url("s3://b12/?endpoint=http%3A%2F%2F127.0.0.1%3A4568&region=eu-west-1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bucket, "b12");
  EXPECT_EQ(c->prefix, "");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:4568");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_TRUE(c->path_style);

  c = ParseS3Url("s3://b12?region=eu-west-2&path_style=true");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->endpoint, "https://s3.eu-west-2.amazonaws.com");
  EXPECT_TRUE(c->path_style);

  EXPECT_THAT(ParseS3Url("http://b/x").status().message(), HasSubstr("scheme must be s3://"));
  EXPECT_THAT(ParseS3Url("s3:///x").status().message(), HasSubstr("bucket is empty"));
  EXPECT_THAT(ParseS3Url("s3://Bad_Bucket/x").status().message(), HasSubstr("bucket 'Bad_Bucket'"));
  EXPECT_THAT(ParseS3Url("s3://abc/x?colour=red").status().message(),
              HasSubstr("unknown parameter 'colour'"));
  EXPECT_THAT(ParseS3Url("s3://abc/x?path_style=maybe").status().message(),
              HasSubstr("path_style"));
  EXPECT_THAT(ParseS3Url("s3://abc/x?endpoint=ftp://h").status().message(),
              HasSubstr("S3Config.endpoint"));
  EXPECT_EQ(ParseS3Url("s3://abc").status().code(), Code::kOk);
}

TEST(S3Unit, CreateValidatesConfigAndNamesTheField) {
  auto err = [](auto mutate) {
    S3Config c = BasicConfig();
    mutate(c);
    auto r = S3Client::Create(c);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_TRUE(S3Client::Create(BasicConfig()).ok());
  EXPECT_THAT(err([](S3Config& c) { c.bucket = ""; }), HasSubstr("S3Config.bucket"));
  EXPECT_THAT(err([](S3Config& c) { c.bucket = "UPPER"; }), HasSubstr("S3Config.bucket"));
  EXPECT_THAT(err([](S3Config& c) { c.endpoint = "127.0.0.1:4568"; }),
              HasSubstr("S3Config.endpoint"));
  EXPECT_THAT(err([](S3Config& c) { c.endpoint = "http://h/path"; }),
              HasSubstr("S3Config.endpoint"));
  EXPECT_THAT(err([](S3Config& c) { c.region = ""; }), HasSubstr("S3Config.region"));
  EXPECT_THAT(err([](S3Config& c) { c.part_size = 1 << 20; }), HasSubstr("S3Config.part_size"));
  EXPECT_THAT(err([](S3Config& c) { c.max_attempts = 0; }), HasSubstr("S3Config.max_attempts"));
  EXPECT_THAT(err([](S3Config& c) { c.timeout_s = 0; }), HasSubstr("S3Config.timeout_s"));
  EXPECT_THAT(err([](S3Config& c) { c.list_page_size = 1001; }),
              HasSubstr("S3Config.list_page_size"));
  EXPECT_THAT(err([](S3Config& c) { c.secret_key = ""; }), HasSubstr("S3Config.secret_key"));
  S3Config small = BasicConfig();
  small.part_size = 1 << 20;
  small.allow_small_parts = true;
  EXPECT_TRUE(S3Client::Create(small).ok());

  // Credentials from the environment when the config has none.
  S3Config env = BasicConfig();
  env.access_key.clear();
  env.secret_key.clear();
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_SESSION_TOKEN");
  auto r = S3Client::Create(env);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));
  setenv("AWS_ACCESS_KEY_ID", "ENVAK", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "ENVSK", 1);
  setenv("AWS_SESSION_TOKEN", "ENVTOK", 1);
  r = S3Client::Create(env);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->config().access_key, "ENVAK");
  EXPECT_EQ((*r)->config().secret_key, "ENVSK");
  EXPECT_EQ((*r)->config().session_token, "ENVTOK");
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_SESSION_TOKEN");
}

TEST(S3Unit, KeysAreValidatedBeforeAnyIo) {
  auto c = S3Client::Create(BasicConfig());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Put("", "x", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Put("a\nb", "x", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Put(std::string(1025, 'k'), "x", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ((*c)->Stats().requests, 0u);
}

TEST(S3Unit, XmlParsing) {
  using namespace s3_internal;
  EXPECT_EQ(XmlUnescape("a&amp;b&lt;c&gt;d&quot;e&apos;f&#65;&#x42;&#x65E5;&bogus;&"),
            "a&b<c>d\"e'fAB\xe6\x97\xa5&bogus;&");
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
      "<IsTruncated>true</IsTruncated>"
      "<Contents><Key>p/a &amp; b&lt;1&gt;.bin</Key><LastModified>2024-01-01T00:00:00.000Z"
      "</LastModified><ETag>&quot;0123&quot;</ETag><Size>12</Size>"
      "<StorageClass>STANDARD</StorageClass></Contents>"
      "<Contents><Key>p/z</Key><ETag>\"abcd-2\"</ETag><Size>0</Size></Contents>"
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
      "</ListBucketResult>";
  auto page = ParseListObjectsV2(xml);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "p/a & b<1>.bin");
  EXPECT_EQ(page->objects[0].size, 12u);
  EXPECT_EQ(page->objects[0].etag, "0123");
  EXPECT_EQ(page->objects[1].key, "p/z");
  EXPECT_EQ(page->objects[1].etag, "abcd-2");
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");

  auto empty = ParseListObjectsV2(
      "<ListBucketResult><IsTruncated>false</IsTruncated>"
      "<KeyCount>0</KeyCount></ListBucketResult>");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->objects.empty());
  EXPECT_FALSE(empty->truncated);
  EXPECT_FALSE(ParseListObjectsV2("<html>proxy error</html>").ok());
  EXPECT_FALSE(ParseListObjectsV2("<ListBucketResult><Contents><Key>k</Key></Contents>"
                                  "</ListBucketResult>")
                   .ok());

  auto e = ParseErrorBody(
      "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The specified key does not "
      "exist.</Message><Key>a&amp;b</Key></Error>");
  EXPECT_EQ(e.code, "NoSuchKey");
  EXPECT_EQ(e.message, "The specified key does not exist.");
  EXPECT_TRUE(ParseErrorBody("<CompleteMultipartUploadResult/>").code.empty());
}

// ---------------------------------------------------------------------------------
// Against s3rver.

class S3rverFixture : public ::testing::Test {
 protected:
  static void StartServer(bool verify) {
    S3TestServerOptions o;
    o.source_dir = BW_TEST_SOURCE_DIR;
    o.verify_sigv4 = verify;
    auto r = S3TestServer::Start(o);
    if (r.ok()) {
      server_ = std::move(*r);
    } else {
      start_error_ = r.status().ToString();
    }
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "could not start s3rver: " << start_error_;
  }
  void TearDown() override {
    if (HasFailure() && server_) std::cerr << "s3rver output:\n" << server_->Output() << "\n";
  }

  S3Config Config(const std::string& bucket) {
    S3Config c;
    c.endpoint = server_->endpoint();
    c.bucket = bucket;
    c.access_key = S3TestServer::kAccessKey;
    c.secret_key = S3TestServer::kSecretKey;
    c.max_attempts = 2;
    c.backoff_initial_s = 0.01;
    c.timeout_s = 30;
    return c;
  }
  std::unique_ptr<S3Client> Client(const S3Config& c) {
    auto r = S3Client::Create(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // A client on a fresh bucket (created).
  std::unique_ptr<S3Client> Fresh(const std::string& bucket) {
    auto c = Client(Config(bucket));
    if (c) {
      Status st = c->CreateBucket();
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return c;
  }

  static std::unique_ptr<S3TestServer> server_;
  static std::string start_error_;
};
std::unique_ptr<S3TestServer> S3rverFixture::server_;
std::string S3rverFixture::start_error_;

class S3rverTest : public S3rverFixture {
 protected:
  static void SetUpTestSuite() { StartServer(/*verify=*/true); }
};

TEST_F(S3rverTest, ObjectLifecycle) {
  auto c = Fresh("bw-lifecycle");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->CreateBucket().ok()) << "a second CreateBucket of our own bucket is OK";

  ASSERT_TRUE(c->Put("small.txt", "hello, s3", 9).ok());
  auto got = c->Get("small.txt");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hello, s3");

  auto head = c->Head("small.txt");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->key, "small.txt");
  EXPECT_EQ(head->size, 9u);
  // A single-PUT object's ETag is the MD5 of its bytes.
  EXPECT_EQ(head->etag, "78e54b877296d63a3ff6f8dd3da312ae") << "md5('hello, s3')";

  ASSERT_TRUE(c->Put("empty", "", 0).ok());
  auto empty = c->Get("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
  EXPECT_EQ(c->Head("empty")->size, 0u);

  // Overwrite.
  ASSERT_TRUE(c->Put("small.txt", "v2", 2).ok());
  EXPECT_EQ(*c->Get("small.txt"), "v2");

  ASSERT_TRUE(c->Delete("small.txt").ok());
  EXPECT_EQ(c->Head("small.txt").status().code(), Code::kNotFound);
  EXPECT_TRUE(c->Delete("small.txt").ok()) << "deleting an absent key is OK";

  auto missing = c->Get("no/such/key");
  ASSERT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("S3 GET no/such/key: 404 NoSuchKey"));
  auto head_missing = c->Head("no/such/key");
  EXPECT_EQ(head_missing.status().code(), Code::kNotFound);
  EXPECT_THAT(head_missing.status().message(), HasSubstr("S3 HEAD no/such/key: 404"));

  // A bucket that does not exist.
  auto nb = Client(Config("bw-no-such-bucket"));
  auto r = nb->Get("x");
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("NoSuchBucket"));
  EXPECT_EQ(nb->Delete("x").code(), Code::kNotFound) << "Delete is OK for a missing key only";
}

TEST_F(S3rverTest, MultipartPutAndRangedReads) {
  S3Config cfg = Config("bw-multipart");
  cfg.part_size = 5ull << 20;  // S3's minimum part size
  cfg.prefix = "ckpt/step-1/";
  auto c = Client(cfg);
  ASSERT_TRUE(c->CreateBucket().ok());
  const std::string data = Bytes((12ull << 20) + 12345, 1);
  ASSERT_TRUE(c->Put("shard-0", data.data(), data.size()).ok());
  auto st = c->Stats();
  EXPECT_EQ(st.multipart_uploads, 1u);
  EXPECT_EQ(st.parts_uploaded, 3u);
  EXPECT_EQ(st.aborted_uploads, 0u);

  auto got = c->Get("shard-0");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data) << "multipart object differs (size " << got->size() << ")";
  EXPECT_EQ(c->Head("shard-0")->size, data.size());

  // The object is under the prefix.
  auto raw = Client(Config("bw-multipart"));
  EXPECT_EQ(raw->Head("ckpt/step-1/shard-0")->size, data.size());

  // Ranged reads: inside, across a part boundary, at the very end.
  std::string buf(70000, '\0');
  ASSERT_TRUE(c->GetRange("shard-0", 1000, 5000, buf.data()).ok());
  EXPECT_EQ(buf.substr(0, 5000), data.substr(1000, 5000));
  const uint64_t boundary = 5ull << 20;
  ASSERT_TRUE(c->GetRange("shard-0", boundary - 30000, 70000, buf.data()).ok());
  EXPECT_EQ(buf, data.substr(boundary - 30000, 70000));
  ASSERT_TRUE(c->GetRange("shard-0", data.size() - 10, 10, buf.data()).ok());
  EXPECT_EQ(buf.substr(0, 10), data.substr(data.size() - 10));
  EXPECT_TRUE(c->GetRange("shard-0", 5, 0, nullptr).ok());

  // Past the end: the object is shorter than the caller believes.
  Status past = c->GetRange("shard-0", data.size() - 10, 20, buf.data());
  EXPECT_EQ(past.code(), Code::kDataLoss) << past.ToString();
  Status beyond = c->GetRange("shard-0", data.size() + 5, 10, buf.data());
  EXPECT_EQ(beyond.code(), Code::kDataLoss) << beyond.ToString();
  EXPECT_EQ(c->GetRange("missing", 0, 10, buf.data()).code(), Code::kNotFound);
}

TEST_F(S3rverTest, FilesStreamBothWays) {
  S3Config cfg = Config("bw-files");
  cfg.part_size = 1 << 20;
  cfg.allow_small_parts = true;  // s3rver does not enforce S3's 5 MiB minimum
  auto c = Client(cfg);
  ASSERT_TRUE(c->CreateBucket().ok());
  const std::string dir = TempDir();
  const std::string big = Bytes((3 << 20) + (1 << 19) + 7, 2);  // 3.5 MiB: 4 parts
  const std::string small = Bytes(1000, 3);
  WriteFile(dir + "/big.bin", big);
  WriteFile(dir + "/small.bin", small);
  WriteFile(dir + "/empty.bin", "");

  ASSERT_TRUE(c->PutFile("files/big.bin", dir + "/big.bin").ok());
  EXPECT_EQ(c->Stats().parts_uploaded, 4u);
  ASSERT_TRUE(c->PutFile("files/small.bin", dir + "/small.bin").ok());
  ASSERT_TRUE(c->PutFile("files/empty.bin", dir + "/empty.bin").ok());
  EXPECT_EQ(c->Stats().multipart_uploads, 1u);

  ASSERT_TRUE(c->GetToFile("files/big.bin", dir + "/big.out").ok());
  ASSERT_TRUE(c->GetToFile("files/small.bin", dir + "/small.out").ok());
  ASSERT_TRUE(c->GetToFile("files/empty.bin", dir + "/empty.out").ok());
  EXPECT_TRUE(ReadFile(dir + "/big.out") == big);
  EXPECT_EQ(ReadFile(dir + "/small.out"), small);
  EXPECT_EQ(ReadFile(dir + "/empty.out"), "");
  EXPECT_FALSE(std::filesystem::exists(dir + "/big.out.s3tmp"));

  // A failed download leaves nothing behind.
  Status st = c->GetToFile("files/missing", dir + "/missing.out");
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing.out"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing.out.s3tmp"));
  EXPECT_EQ(c->PutFile("files/x", dir + "/no-such-file").code(), Code::kNotFound);
  EXPECT_EQ(c->PutFile("files/x", dir).code(), Code::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST_F(S3rverTest, ListFollowsContinuationTokensAndStripsThePrefix) {
  S3Config cfg = Config("bw-list");
  cfg.prefix = "run1/";
  cfg.list_page_size = 7;
  auto c = Client(cfg);
  ASSERT_TRUE(c->CreateBucket().ok());
  std::vector<std::string> a_keys;
  for (int i = 0; i < 23; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "a/obj-%03d", i);
    a_keys.push_back(name);
    ASSERT_TRUE(c->Put(name, name, i).ok());
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c->Put("b/" + std::to_string(i), "b", 1).ok());
  S3Config other = cfg;
  other.prefix = "run2/";
  ASSERT_TRUE(Client(other)->Put("a/obj-000", "x", 1).ok());  // outside run1/

  const uint64_t before = c->Stats().requests;
  auto list = c->List("a/");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), a_keys.size());
  for (size_t i = 0; i < a_keys.size(); ++i) {
    EXPECT_EQ((*list)[i].key, a_keys[i]);
    EXPECT_EQ((*list)[i].size, i);
    EXPECT_FALSE((*list)[i].etag.empty());
  }
  EXPECT_EQ(c->Stats().requests - before, 4u) << "23 keys in pages of 7";

  auto all = c->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 27u);
  EXPECT_EQ(all->back().key, "b/3");
  auto none = c->List("zzz/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(S3rverTest, KeysWithSpacesUnicodeAndReservedCharactersRoundTrip) {
  auto c = Fresh("bw-keys");
  ASSERT_NE(c, nullptr);
  const std::vector<std::string> keys = {
      "with space/file name.bin",
      "unicode/\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e-\xc3\xa4\xc3\xb6\xc3\xbc.bin",
      "plus/a+b+c.bin",
      "reserved/amp&eq=q?hash#pct%25pct%.bin",
      "more/tilde~star*paren()comma,colon:semi;at@dollar$.bin",
      "xml/quote\"apos'lt<gt>.bin",
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string body = "body of " + keys[i];
    Status st = c->Put(keys[i], body.data(), body.size());
    ASSERT_TRUE(st.ok()) << keys[i] << ": " << st.ToString();
    auto got = c->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status().ToString();
    EXPECT_EQ(*got, body);
    EXPECT_EQ(c->Head(keys[i])->size, body.size());
  }
  auto list = c->List("");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  std::vector<std::string> listed, want = keys;
  for (const auto& o : *list) listed.push_back(o.key);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listed, want);
  auto plus = c->List("plus/a+");
  ASSERT_TRUE(plus.ok());
  ASSERT_EQ(plus->size(), 1u);
  EXPECT_EQ((*plus)[0].key, "plus/a+b+c.bin");
  for (const auto& k : keys) EXPECT_TRUE(c->Delete(k).ok()) << k;
  EXPECT_TRUE(c->List("")->empty());
}

TEST_F(S3rverTest, BadCredentialsAndClocksAreRefused) {
  ASSERT_NE(Fresh("bw-auth"), nullptr);

  // Wrong secret: the server recomputes the signature and refuses it.
  S3Config wrong = Config("bw-auth");
  wrong.prefix = "ckpt/step-1/";
  wrong.secret_key = "not-the-secret";
  auto bad = Client(wrong);
  Status st = bad->Put("x", "data", 4);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("S3 PUT ckpt/step-1/x: 403 SignatureDoesNotMatch: "));
  EXPECT_EQ(bad->Stats().retries, 0u) << "403 is not retried";
  EXPECT_THAT(bad->Get("x").status().message(), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(bad->List("").status().message(), HasSubstr("SignatureDoesNotMatch"));

  // Unknown access key (checked by s3rver itself).
  S3Config unknown = Config("bw-auth");
  unknown.access_key = "NOBODY";
  st = Client(unknown)->Put("x", "data", 4);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("403 InvalidAccessKeyId"));

  // A clock an hour slow: x-amz-date is checked (by s3rver).
  FakeClock slow(0, static_cast<double>(std::time(nullptr)) - 3600);
  S3Config skewed = Config("bw-auth");
  skewed.clock = &slow;
  st = Client(skewed)->Put("x", "data", 4);
  EXPECT_THAT(st.message(), HasSubstr("403 RequestTimeTooSkewed"));

  // A wrong region is refused (by the verifier, as S3 does).
  S3Config region = Config("bw-auth");
  region.region = "eu-west-1";
  EXPECT_THAT(Client(region)->Get("x").status().message(),
              HasSubstr("400 AuthorizationHeaderMalformed"));

  // A session token travels signed (an unsigned x-amz-* header would be refused).
  S3Config token = Config("bw-auth");
  token.session_token = "FwoGZXIvYXdzEXAMPLETOKEN/+=";
  EXPECT_TRUE(Client(token)->Put("with-token", "t", 1).ok());
}

TEST_F(S3rverTest, ConcurrentCallsOnOneClient) {
  S3Config cfg = Config("bw-concurrent");
  cfg.part_size = 256 << 10;
  cfg.allow_small_parts = true;
  auto c = Client(cfg);
  ASSERT_TRUE(c->CreateBucket().ok());
  constexpr int kThreads = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        const std::string key = "t" + std::to_string(t) + "/o" + std::to_string(i);
        const std::string data = Bytes((i == 3 ? 600 : 40) << 10, t * 10 + i);  // 1 multipart
        if (!c->Put(key, data.data(), data.size()).ok()) ++failures;
        auto got = c->Get(key);
        if (!got.ok() || *got != data) ++failures;
        std::string part(100, '\0');
        if (!c->GetRange(key, 7, 100, part.data()).ok() || part != data.substr(7, 100)) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto list = c->List("");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), static_cast<size_t>(kThreads * 4));
  EXPECT_EQ(c->Stats().multipart_uploads, static_cast<uint64_t>(kThreads));
}

// The stock s3rver command line, without the verifier.
class S3rverStockTest : public S3rverFixture {
 protected:
  static void SetUpTestSuite() { StartServer(/*verify=*/false); }
};

TEST_F(S3rverStockTest, RoundTripThroughTheStockCommandLine) {
  S3Config cfg = Config("bw-stock");
  cfg.part_size = 1 << 20;
  cfg.allow_small_parts = true;
  auto c = Client(cfg);
  ASSERT_TRUE(c->CreateBucket().ok());
  const std::string data = Bytes((2 << 20) + 99, 4);
  ASSERT_TRUE(c->Put("k", data.data(), data.size()).ok());
  EXPECT_TRUE(*c->Get("k") == data);
  EXPECT_EQ(c->List("")->size(), 1u);
  ASSERT_TRUE(c->Delete("k").ok());
  EXPECT_EQ(c->Get("k").status().code(), Code::kNotFound);

  // Why the verifier exists: stock s3rver 3.7.1 does not check V4 signatures, so a
  // wrong secret goes through. If this starts failing, s3rver began checking them:
  // update docs/objstore.md.
  S3Config wrong = Config("bw-stock");
  wrong.secret_key = "not-the-secret";
  EXPECT_TRUE(Client(wrong)->Put("k2", "x", 1).ok());
}

// ---------------------------------------------------------------------------------
// Against a scripted HTTP server.

struct HttpRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
};

// Answers each connection with handler(request): a complete raw HTTP response, or ""
// to never answer (the connection is held open until the server stops). One request
// per connection ("Connection: close"). Thread-safe accessors.
class FakeHttpServer {
 public:
  using Handler = std::function<std::string(const HttpRequest&)>;
  explicit FakeHttpServer(Handler h) : handler_(std::move(h)) {
    auto fd = TcpListen("127.0.0.1", 0);
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    listen_ = std::move(*fd);
    port_ = *LocalPort(listen_.get());
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<HttpRequest> requests() {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }

  static std::string Response(int code, const std::string& reason, const std::string& body,
                              const std::string& extra_headers = "") {
    return "HTTP/1.1 " + std::to_string(code) + " " + reason +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n" +
           extra_headers + "\r\n" + body;
  }
  static std::string S3Error(int code, const std::string& reason, const std::string& s3code,
                             const std::string& message) {
    return Response(code, reason,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + s3code +
                        "</Code><Message>" + message + "</Message></Error>",
                    "Content-Type: application/xml\r\n");
  }

 private:
  void Loop() {
    std::vector<Fd> held;
    while (!stop_) {
      PollReadable({listen_.get()}, 0.02);
      Fd conn = TcpAcceptNonBlocking(listen_.get());
      if (!conn.valid()) continue;
      HttpRequest req;
      if (!ReadRequest(conn.get(), &req)) continue;
      std::string resp = handler_(req);
      {
        std::lock_guard<std::mutex> l(mu_);
        requests_.push_back(req);
      }
      if (resp.empty()) {
        held.push_back(std::move(conn));
        continue;
      }
      size_t off = 0;
      double deadline = SystemClock::Get()->NowMono() + 5;
      while (off < resp.size() && SystemClock::Get()->NowMono() < deadline) {
        ssize_t w = send(conn.get(), resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
        if (w > 0) {
          off += static_cast<size_t>(w);
        } else {
          pollfd p{conn.get(), POLLOUT, 0};
          poll(&p, 1, 20);
        }
      }
    }
  }

  bool ReadRequest(int fd, HttpRequest* req) {
    std::string in;
    double deadline = SystemClock::Get()->NowMono() + 5;
    size_t header_end = std::string::npos;
    size_t body_len = 0;
    while (SystemClock::Get()->NowMono() < deadline) {
      PollReadable({fd}, 0.02);
      bool eof = false;
      in += ReadAvailable(fd, &eof);
      if (header_end == std::string::npos) {
        header_end = in.find("\r\n\r\n");
        if (header_end != std::string::npos) {
          std::istringstream lines(in.substr(0, header_end));
          std::string line;
          std::getline(lines, line);
          std::istringstream first(line);
          first >> req->method >> req->target;
          while (std::getline(lines, line)) {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            size_t colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string name = line.substr(0, colon);
            for (char& ch : name) ch = static_cast<char>(std::tolower(ch));
            size_t v = line.find_first_not_of(' ', colon + 1);
            req->headers[name] = v == std::string::npos ? "" : line.substr(v);
          }
          auto it = req->headers.find("content-length");
          body_len = it == req->headers.end() ? 0 : std::stoul(it->second);
        }
      }
      if (header_end != std::string::npos && in.size() >= header_end + 4 + body_len) {
        req->body = in.substr(header_end + 4, body_len);
        return true;
      }
      if (eof) return false;
    }
    return false;
  }

  Handler handler_;
  Fd listen_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<HttpRequest> requests_;
};

S3Config FakeConfig(const std::string& endpoint) {
  S3Config c;
  c.endpoint = endpoint;
  c.bucket = "bw-fake";
  c.access_key = "AK";
  c.secret_key = "SK";
  c.max_attempts = 3;
  c.backoff_initial_s = 0.01;
  c.backoff_max_s = 0.05;
  c.timeout_s = 5;
  return c;
}

std::unique_ptr<S3Client> MustCreate(const S3Config& c) {
  auto r = S3Client::Create(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(*r);
}

TEST(S3Fake, ConnectionRefusedIsUnavailableAfterBoundedRetries) {
  auto port = PickFreePort("127.0.0.1");  // nothing listens there
  ASSERT_TRUE(port.ok());
  S3Config cfg = FakeConfig("http://127.0.0.1:" + std::to_string(*port));
  FakeClock clock;
  cfg.clock = &clock;
  auto c = MustCreate(cfg);
  Status st = c->Put("k", "x", 1);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("S3 PUT k: "));
  EXPECT_THAT(st.message(), HasSubstr("(after 3 attempts)"));
  EXPECT_EQ(c->Stats().requests, 3u);
  EXPECT_EQ(c->Stats().retries, 2u);
  // Two backoffs on the client's clock: 0.01 s and 0.02 s, each with jitter in [0.5, 1].
  const double waited = clock.NowMono() - 1000.0;
  EXPECT_GE(waited, 0.5 * (0.01 + 0.02));
  EXPECT_LE(waited, 0.01 + 0.02 + 1e-9);
  EXPECT_EQ(c->Get("k").status().code(), Code::kUnavailable);
}

TEST(S3Fake, ServerErrorsAreRetriedAndPayloadsCarryTheirHashes) {
  std::atomic<int> n{0};
  FakeHttpServer srv([&](const HttpRequest&) {
    int i = n++;
    if (i == 0) return FakeHttpServer::S3Error(503, "Slow Down", "SlowDown", "Reduce your rate");
    if (i == 1) return FakeHttpServer::Response(429, "Too Many Requests", "");
    return FakeHttpServer::Response(200, "OK", "", "ETag: \"abc\"\r\n");
  });
  auto c = MustCreate(FakeConfig(srv.endpoint()));
  const std::string body = Bytes(3000, 5);
  Status st = c->Put("dir/k", body.data(), body.size());
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(c->Stats().retries, 2u);
  for (const auto& r : reqs) {
    EXPECT_EQ(r.method, "PUT");
    EXPECT_EQ(r.target, "/bw-fake/dir/k");
    EXPECT_EQ(r.body, body);
    EXPECT_EQ(r.headers.at("x-amz-content-sha256"), Sha256Hex(body));
    EXPECT_EQ(r.headers.at("content-md5"), Md5Base64(body.data(), body.size()));
    EXPECT_EQ(r.headers.at("host"), "127.0.0.1:" + srv.endpoint().substr(17));
    EXPECT_THAT(r.headers.at("authorization"),
                HasSubstr("SignedHeaders=content-md5;host;x-amz-content-sha256;x-amz-date,"));
    EXPECT_EQ(r.headers.count("expect"), 0u);
  }
}

TEST(S3Fake, PersistentServerErrorIsUnavailableWithTheS3Error) {
  FakeHttpServer srv([](const HttpRequest&) {
    return FakeHttpServer::S3Error(500, "Internal Server Error", "InternalError",
                                   "We encountered an internal error. Please try again.");
  });
  auto c = MustCreate(FakeConfig(srv.endpoint()));
  auto r = c->Get("k");
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(),
            "S3 GET k: 500 InternalError: We encountered an internal error. Please try again. "
            "(after 3 attempts)");
  EXPECT_EQ(srv.requests().size(), 3u);
}

TEST(S3Fake, HungServerTimesOut) {
  FakeHttpServer srv([](const HttpRequest&) { return std::string(); });
  S3Config cfg = FakeConfig(srv.endpoint());
  cfg.timeout_s = 0.3;
  cfg.max_attempts = 2;
  auto c = MustCreate(cfg);
  auto r = c->Get("k");
  // Each attempt ended at curl's timeout (a hang would end at ctest's, and fail).
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr("S3 GET k: Timeout was reached"));
  EXPECT_THAT(r.status().message(), HasSubstr("(after 2 attempts)"));
  EXPECT_EQ(srv.requests().size(), 2u);
}

// A ListObjectsV2 page of `keys`, truncated with NextContinuationToken `next` unless it
// is empty.
std::string ListPageXml(const std::vector<std::string>& keys, const std::string& next) {
  std::string xml = "<ListBucketResult><IsTruncated>" +
                    std::string(next.empty() ? "false" : "true") + "</IsTruncated>";
  for (const std::string& k : keys) {
    xml += "<Contents><Key>" + k + "</Key><Size>1</Size><ETag>\"e\"</ETag></Contents>";
  }
  if (!next.empty()) xml += "<NextContinuationToken>" + next + "</NextContinuationToken>";
  return xml + "</ListBucketResult>";
}

// The continuation-token a ListObjectsV2 request carried ("" for the first page).
std::string ContinuationToken(const HttpRequest& r) {
  const std::string q = "continuation-token=";
  size_t at = r.target.find(q);
  if (at == std::string::npos) return "";
  at += q.size();
  return r.target.substr(at, r.target.find('&', at) - at);
}

TEST(S3Fake, ListEndsWhenTheServersTokensCycle) {
  // Pages: first -> A -> B -> A ...: every page is new until B leads back to A.
  FakeHttpServer srv([](const HttpRequest& r) {
    const std::string t = ContinuationToken(r);
    if (t.empty()) return FakeHttpServer::Response(200, "OK", ListPageXml({"a"}, "A"));
    if (t == "A") return FakeHttpServer::Response(200, "OK", ListPageXml({"b"}, "B"));
    return FakeHttpServer::Response(200, "OK", ListPageXml({"c"}, "A"));
  });
  auto c = MustCreate(FakeConfig(srv.endpoint()));
  auto r = c->List("");
  EXPECT_EQ(r.status().code(), Code::kInternal) << r.status().ToString();
  EXPECT_THAT(r.status().message(),
              HasSubstr("page 3 gives NextContinuationToken 'A', which the listing already "
                        "followed: the server's tokens cycle"));
  EXPECT_EQ(srv.requests().size(), 3u);
}

TEST(S3Fake, ListEndsWhenTheServerIgnoresTheToken) {
  // A server without continuation-token support: the first page again, with a new token.
  std::atomic<int> n{0};
  FakeHttpServer srv([&](const HttpRequest&) {
    return FakeHttpServer::Response(200, "OK", ListPageXml({"a", "b"}, "t" + std::to_string(n++)));
  });
  auto c = MustCreate(FakeConfig(srv.endpoint()));
  auto r = c->List("");
  EXPECT_EQ(r.status().code(), Code::kInternal) << r.status().ToString();
  EXPECT_THAT(r.status().message(),
              HasSubstr("page 2 lists key 'a' again: the server's continuation tokens lead "
                        "back to pages already listed"));
  EXPECT_EQ(srv.requests().size(), 2u);
}

TEST(S3Fake, ListFollowsTokensToTheLastPage) {
  FakeHttpServer srv([](const HttpRequest& r) {
    const std::string t = ContinuationToken(r);
    if (t.empty()) return FakeHttpServer::Response(200, "OK", ListPageXml({"a", "b"}, "A"));
    if (t == "A") return FakeHttpServer::Response(200, "OK", ListPageXml({"c"}, "B"));
    return FakeHttpServer::Response(200, "OK", ListPageXml({}, ""));
  });
  auto c = MustCreate(FakeConfig(srv.endpoint()));
  auto r = c->List("");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[2].key, "c");
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(ContinuationToken(reqs[2]), "B");
}

// Scripted multipart server: answers CreateMultipartUpload and UploadPart, and
// `complete`/`part` for the step under test.
FakeHttpServer::Handler MultipartHandler(std::function<std::string()> part,
                                         std::function<std::string()> complete) {
  return [part, complete](const HttpRequest& r) -> std::string {
    if (r.method == "POST" && r.target.find("uploads=") != std::string::npos) {
      return FakeHttpServer::Response(
          200, "OK",
          "<InitiateMultipartUploadResult><Bucket>bw-fake</Bucket><Key>k</Key>"
          "<UploadId>up&amp;1</UploadId></InitiateMultipartUploadResult>");
    }
    if (r.method == "PUT") return part();
    if (r.method == "POST") return complete();
    if (r.method == "DELETE") return FakeHttpServer::Response(204, "No Content", "");
    return FakeHttpServer::Response(400, "Bad Request", "");
  };
}

TEST(S3Fake, ErrorInsideA200CompleteAbortsTheUpload) {
  FakeHttpServer srv(MultipartHandler(
      [] { return FakeHttpServer::Response(200, "OK", "", "ETag: \"e1\"\r\n"); },
      [] {
        return FakeHttpServer::Response(200, "OK",
                                        "<?xml version=\"1.0\"?>\n<Error><Code>AccessDenied</Code>"
                                        "<Message>Access Denied</Message></Error>");
      }));
  S3Config cfg = FakeConfig(srv.endpoint());
  cfg.part_size = 1000;
  cfg.allow_small_parts = true;
  auto c = MustCreate(cfg);
  const std::string data = Bytes(2500, 6);
  Status st = c->Put("k", data.data(), data.size());
  EXPECT_EQ(st.code(), Code::kInternal) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("S3 CompleteMultipartUpload k: 200 AccessDenied: Access "
                                      "Denied"));
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 6u);  // create, 3 parts, complete, abort
  EXPECT_EQ(reqs[1].target, "/bw-fake/k?partNumber=1&uploadId=up%261");
  EXPECT_EQ(reqs[3].body, data.substr(2000));
  EXPECT_EQ(reqs[4].body,
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag>"
            "</Part><Part><PartNumber>2</PartNumber><ETag>&quot;e1&quot;</ETag></Part><Part>"
            "<PartNumber>3</PartNumber><ETag>&quot;e1&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");
  EXPECT_EQ(reqs[5].method, "DELETE");
  EXPECT_EQ(reqs[5].target, "/bw-fake/k?uploadId=up%261");
  EXPECT_EQ(c->Stats().aborted_uploads, 1u);
  EXPECT_EQ(c->Stats().multipart_uploads, 0u);
}

TEST(S3Fake, RetryableErrorInsideA200CompleteIsRetried) {
  std::atomic<int> completes{0};
  FakeHttpServer srv(MultipartHandler(
      [] { return FakeHttpServer::Response(200, "OK", "", "ETag: \"e1\"\r\n"); },
      [&] {
        if (completes++ == 0) {
          return FakeHttpServer::Response(
              200, "OK", "<Error><Code>InternalError</Code><Message>retry me</Message></Error>");
        }
        return FakeHttpServer::Response(200, "OK",
                                        "<CompleteMultipartUploadResult><ETag>\"x-2\"</ETag>"
                                        "</CompleteMultipartUploadResult>");
      }));
  S3Config cfg = FakeConfig(srv.endpoint());
  cfg.part_size = 1000;
  cfg.allow_small_parts = true;
  auto c = MustCreate(cfg);
  const std::string data = Bytes(1500, 7);
  Status st = c->Put("k", data.data(), data.size());
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(completes.load(), 2);
  EXPECT_EQ(c->Stats().multipart_uploads, 1u);
}

TEST(S3Fake, FailedPartAbortsTheUpload) {
  FakeHttpServer srv(MultipartHandler(
      [] { return FakeHttpServer::S3Error(403, "Forbidden", "AccessDenied", "Access Denied"); },
      [] { return FakeHttpServer::Response(200, "OK", ""); }));
  S3Config cfg = FakeConfig(srv.endpoint());
  cfg.part_size = 1000;
  cfg.allow_small_parts = true;
  auto c = MustCreate(cfg);
  const std::string data = Bytes(2500, 8);
  Status st = c->Put("k", data.data(), data.size());
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("S3 UploadPart 1/3 k: 403 AccessDenied: Access Denied"));
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 3u);  // create, part 1, abort
  EXPECT_EQ(reqs[2].method, "DELETE");
  EXPECT_EQ(c->Stats().aborted_uploads, 1u);
}

TEST(S3Fake, RangedReadChecksWhatTheServerSent) {
  const std::string object = Bytes(100, 9);
  std::atomic<int> mode{0};
  FakeHttpServer srv([&](const HttpRequest& r) {
    EXPECT_EQ(r.headers.at("range"), "bytes=10-19");
    switch (mode.load()) {
      case 0:  // correct
        return FakeHttpServer::Response(206, "Partial Content", object.substr(10, 10),
                                        "Content-Range: bytes 10-19/100\r\n");
      case 1:  // the wrong range
        return FakeHttpServer::Response(206, "Partial Content", object.substr(0, 10),
                                        "Content-Range: bytes 0-9/100\r\n");
      case 2:  // the range ignored: the whole object
        return FakeHttpServer::Response(200, "OK", object);
      default:  // too short
        return FakeHttpServer::Response(206, "Partial Content", object.substr(10, 5),
                                        "Content-Range: bytes 10-14/15\r\n");
    }
  });
  auto c = MustCreate(FakeConfig(srv.endpoint()));
  std::string buf(10, '\0');
  ASSERT_TRUE(c->GetRange("k", 10, 10, buf.data()).ok());
  EXPECT_EQ(buf, object.substr(10, 10));
  for (int m = 1; m <= 3; ++m) {
    mode = m;
    Status st = c->GetRange("k", 10, 10, buf.data());
    EXPECT_EQ(st.code(), Code::kDataLoss) << "mode " << m << ": " << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("S3 GET k"));
  }
}

TEST(S3Fake, VirtualHostedStyleAddressesTheBucketInTheHost) {
  FakeHttpServer srv([](const HttpRequest&) {
    return FakeHttpServer::Response(200, "OK", "payload", "ETag: \"e\"\r\n");
  });
  // curl resolves every *.localhost name to loopback itself, so bw-fake.localhost
  // reaches the fake server.
  S3Config cfg = FakeConfig("http://localhost:" + srv.endpoint().substr(17));
  cfg.path_style = false;
  auto c = MustCreate(cfg);
  auto r = c->Get("a b/c");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "payload");
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].target, "/a%20b/c");
  EXPECT_EQ(reqs[0].headers.at("host"), "bw-fake.localhost:" + srv.endpoint().substr(17));
}

}  // namespace
}  // namespace bulwark::objstore
