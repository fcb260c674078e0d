// Tests of the checkpoint engine's object tier (object_tier.h) and of PlanRetain.
//  * PlanRetain*: the pure retention decision on hand-made inputs (no I/O).
//  * ObjectTierTest*: real checkpoints (WriteShard + Commit on a temp file tier),
//    uploaded to a real s3rver on loopback (objstore/s3_test_server.h, SigV4 verified).
//    They FAIL (never skip) when node or s3rver is missing: run scripts/setup.sh.
// Deterministic: fixed seeds, no sleeps; each test uses its own key prefix.
#include "ckpt/object_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/test_util.h"
#include "objstore/s3.h"
#include "objstore/s3_test_server.h"

namespace bulwark::ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ::bulwark::ckpt::test_util;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// PlanRetain (pure)

RetainOptions Opts(int keep, long golden = 0) {
  RetainOptions o;
  o.keep = keep;
  o.golden_every = golden;
  return o;
}

TEST(PlanRetain, NothingCommittedDeletesNothing) {
  EXPECT_TRUE(PlanRetain({}, {1, 2, 3}, Opts(1)).empty());
}

TEST(PlanRetain, KeepsNewestAndGolden) {
  std::map<long, std::vector<long>> c;
  for (long s = 1; s <= 8; ++s) c[s] = {};
  EXPECT_EQ(PlanRetain(c, {1, 2, 3, 4, 5, 6, 7, 8}, Opts(3, 4)), (std::vector<long>{1, 2, 3, 5}));
  EXPECT_EQ(PlanRetain(c, {}, Opts(3, 4)), (std::vector<long>{1, 2, 3, 5}))
      << "committed steps missing from all_steps are still planned";
  EXPECT_EQ(PlanRetain(c, {}, Opts(8)), std::vector<long>{});
  EXPECT_EQ(PlanRetain(c, {}, Opts(100)), std::vector<long>{});
}

TEST(PlanRetain, KeepsTheDependencyClosure) {
  // 20 -> 15 -> 10 (transitive); 12 -> 9 but 12 is not kept.
  std::map<long, std::vector<long>> c = {{9, {}}, {10, {}}, {12, {9}}, {15, {10}}, {20, {15}}};
  EXPECT_EQ(PlanRetain(c, {9, 10, 12, 15, 20}, Opts(1)), (std::vector<long>{9, 12}));
  // Golden 12 keeps its dependency 9.
  EXPECT_EQ(PlanRetain(c, {9, 10, 12, 15, 20}, Opts(1, 6)), std::vector<long>{});
}

TEST(PlanRetain, PinnedStepsAndTheirDependenciesStay) {
  std::map<long, std::vector<long>> c = {{9, {}}, {10, {}}, {12, {9}}, {15, {}}, {20, {}}};
  RetainOptions o = Opts(1);
  o.pinned = {12, 15, 30};  // 30 is not committed: pinning it keeps nothing else
  EXPECT_EQ(PlanRetain(c, {9, 10, 12, 15, 20}, o), std::vector<long>{10});
}

TEST(PlanRetain, UncommittedOlderStepsGoNewerStay) {
  std::map<long, std::vector<long>> c = {{9, {}}, {10, {}}, {11, {}}, {12, {9}}};
  // 5: uncommitted and older than the newest committed (12): removed. 13: newer: kept.
  EXPECT_EQ(PlanRetain(c, {5, 9, 10, 11, 12, 13}, Opts(1)), (std::vector<long>{5, 10, 11}));
}

TEST(PlanRetain, NeverTheNewestCommittedEvenWithKeepBelowOne) {
  std::map<long, std::vector<long>> c = {{1, {}}, {2, {}}};
  EXPECT_EQ(PlanRetain(c, {1, 2, 3}, Opts(0)), std::vector<long>{1});
  EXPECT_EQ(PlanRetain(c, {1, 2, 3}, Opts(-5)), std::vector<long>{1});
  EXPECT_EQ(PlanRetain({{7, {}}}, {1, 7, 9}, Opts(1)), std::vector<long>{1});
}

TEST(PlanRetain, AReferencedStepThatIsNotCommittedIsKept) {
  // 12 references 9, whose COMMIT is gone (a crash mid-delete): 9's directory is
  // kept while a kept step references it; 12 is the newest and is never removed.
  EXPECT_EQ(PlanRetain({{12, {9}}}, {8, 9, 12}, Opts(1)), std::vector<long>{8});
}

// ---------------------------------------------------------------------------
// Helpers

std::string StepPrefix(long step) { return StepDir("", step).substr(1) + "/"; }

// Per rank of a world-2 step: a dim-0 split f32 tensor, a replicated tensor (deduped
// across ranks: references inside the step) and a per-rank blob. ~50 KiB per shard.
std::vector<std::vector<T>> World2(uint64_t seed) {
  std::vector<std::vector<T>> out(2);
  T rep = MakeT("optim/step", DType::kF32, {8192}, seed + 7, {}, {}, /*replicated=*/true);
  for (int r = 0; r < 2; ++r) {
    out[r].push_back(MakeT("model/w", DType::kF32, {64, 128}, seed + r, {128, 128}, {64L * r, 0}));
    out[r].push_back(rep);
    out[r].push_back(MakeT("rng/" + std::to_string(r), DType::kU8, {1000}, seed + 100 + r));
  }
  return out;
}

class ObjectTierTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    objstore::S3TestServerOptions o;
    o.source_dir = BW_TEST_SOURCE_DIR;
    auto r = objstore::S3TestServer::Start(o);
    if (r.ok()) {
      server_ = std::move(*r);
    } else {
      start_error_ = r.status().ToString();
    }
  }
  static void TearDownTestSuite() { server_.reset(); }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "could not start s3rver: " << start_error_;
    char tmpl[] = "/tmp/bw_object_tier_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/src";
    prefix_ =
        std::string("t/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
    auto t = ObjectTier::Open(Config());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(*t);
    BW_ASSERT_OK(tier_->client()->CreateBucket());
  }
  void TearDown() override {
    if (HasFailure() && server_) std::cerr << "s3rver output:\n" << server_->Output() << "\n";
    fs::remove_all(dir_);
  }

  objstore::S3Config Config() const {
    objstore::S3Config c;
    c.endpoint = server_->endpoint();
    c.bucket = kBucket;
    c.prefix = prefix_;
    c.access_key = objstore::S3TestServer::kAccessKey;
    c.secret_key = objstore::S3TestServer::kSecretKey;
    c.max_attempts = 2;
    c.backoff_initial_s = 0.01;
    c.timeout_s = 30;
    c.part_size = 16 << 10;  // shards (~50 KiB) go multipart
    c.allow_small_parts = true;
    return c;
  }
  objstore::S3Client* s3() { return tier_->client(); }
  Env* env() { return Env::Default(); }

  // Writes every rank's tensors on the file tier `root_` and commits there.
  void WriteAndCommit(long step, const std::vector<std::vector<T>>& per_rank,
                      const std::vector<const ShardIndex*>& previous = {}) {
    const int world = static_cast<int>(per_rank.size());
    for (int r = 0; r < world; ++r) {
      WriteOptions o;
      o.chunk_size = 4096;
      o.previous = previous.empty() ? nullptr : previous[r];
      BW_ASSERT_OK(WriteShard(env(), root_, step, r, world, Views(per_rank[r]), o));
    }
    BW_ASSERT_OK(Commit(env(), root_, step, world, /*verify_data=*/true));
  }
  void Upload(long step, int world) {
    for (int r = 0; r < world; ++r) BW_ASSERT_OK(tier_->UploadShard(root_, step, r, world));
  }
  // File tier + object tier.
  void SaveEverywhere(long step, const std::vector<std::vector<T>>& per_rank,
                      const std::vector<const ShardIndex*>& previous = {}) {
    ASSERT_NO_FATAL_FAILURE(WriteAndCommit(step, per_rank, previous));
    ASSERT_NO_FATAL_FAILURE(Upload(step, static_cast<int>(per_rank.size())));
    BW_ASSERT_OK(tier_->Commit(root_, step));
  }
  std::vector<long> Committed() {
    auto r = tier_->ListCommitted();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<long>{};
  }
  // Steps that still have any object on the tier.
  std::vector<long> StepsWithObjects() {
    auto objs = s3()->List("step-");
    EXPECT_TRUE(objs.ok()) << objs.status().ToString();
    std::vector<long> out;
    if (!objs.ok()) return out;
    for (const auto& o : *objs) {
      long s = std::stol(o.key.substr(5, 12));
      if (out.empty() || out.back() != s) out.push_back(s);
    }
    return out;
  }
  // Loads every tensor of `per_rank` from `root`'s `step` and compares the bytes.
  void ExpectLoads(const std::string& root, long step,
                   const std::vector<std::vector<T>>& per_rank) {
    auto reader = StepReader::Open(env(), root, step);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    for (const auto& ts : per_rank) {
      for (const T& t : ts) {
        std::vector<uint8_t> got(t.meta.nbytes(), 0xCD);
        BW_ASSERT_OK((*reader)->Load(t.meta, got.data()));
        EXPECT_TRUE(got == t.bytes) << "step " << step << " tensor " << t.meta.name;
      }
    }
  }
  std::string S3DataPath(const std::string& key) const {
    return server_->data_dir() + "/" + kBucket + "/" + prefix_ + key + "._S3rver_object";
  }

  static constexpr const char* kBucket = "bw-ckpt-object";
  static std::unique_ptr<objstore::S3TestServer> server_;
  static std::string start_error_;
  std::string dir_, root_, prefix_;
  std::unique_ptr<ObjectTier> tier_;
};
std::unique_ptr<objstore::S3TestServer> ObjectTierTest::server_;
std::string ObjectTierTest::start_error_;

// ---------------------------------------------------------------------------
// Round trips

TEST_F(ObjectTierTest, UploadCommitListDownloadRoundTrip) {
  const auto w = World2(1);
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(10, w));
  EXPECT_TRUE(Committed().empty());
  EXPECT_EQ(*tier_->NewestCommitted(), -1);
  ASSERT_NO_FATAL_FAILURE(Upload(10, 2));
  std::vector<std::string> skipped;
  EXPECT_TRUE(tier_->ListCommitted(&skipped)->empty()) << "uploaded but not committed";
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("COMMIT is missing"));
  BW_ASSERT_OK(tier_->Commit(root_, 10));
  EXPECT_GE(s3()->Stats().multipart_uploads, 2u) << "shards above part_size go multipart";

  EXPECT_EQ(Committed(), std::vector<long>{10});
  EXPECT_EQ(*tier_->NewestCommitted(), 10);
  EXPECT_EQ(*tier_->NewestCommitted(9), -1);
  auto m = tier_->ReadCommitted(10);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto lm = ReadCommitted(env(), root_, 10);
  ASSERT_TRUE(lm.ok());
  EXPECT_EQ(m->world, 2);
  ASSERT_EQ(m->shards.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(m->shards[r].size, lm->shards[r].size);
    EXPECT_EQ(m->shards[r].index_xxh3, lm->shards[r].index_xxh3);
  }
  // Byte-identical mirror of the file tier.
  for (const std::string& name :
       {std::string("MANIFEST"), std::string("COMMIT"), ShardFileName(0, 2), ShardFileName(1, 2)}) {
    auto got = s3()->Get(StepPrefix(10) + name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_TRUE(*got == ReadAll(StepDir(root_, 10) + "/" + name)) << name;
  }

  const std::string dst = dir_ + "/dst";
  BW_ASSERT_OK(tier_->Download(10, dst));
  EXPECT_EQ(*ListCommitted(env(), dst), std::vector<long>{10});
  BW_EXPECT_OK(VerifyStep(env(), dst, 10, /*full=*/true));
  for (const std::string& name :
       {std::string("MANIFEST"), std::string("COMMIT"), ShardFileName(0, 2), ShardFileName(1, 2)}) {
    EXPECT_TRUE(ReadAll(StepDir(dst, 10) + "/" + name) == ReadAll(StepDir(root_, 10) + "/" + name))
        << name;
  }
  ExpectLoads(dst, 10, w);
  // Again: the step is committed locally with the same shards, so it is skipped.
  BW_EXPECT_OK(tier_->Download(10, dst));
  // A step committed locally with other shards is refused, not overwritten.
  const std::string other = dir_ + "/other";
  const std::string saved_root = root_;
  root_ = other;
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(10, World2(99)));
  root_ = saved_root;
  Status st = tier_->Download(10, other);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("other shards"));
  // Absent steps.
  EXPECT_EQ(tier_->ReadCommitted(11).status().code(), Code::kNotFound);
  EXPECT_EQ(tier_->Download(11, dir_ + "/none").code(), Code::kNotFound);
}

TEST_F(ObjectTierTest, OpenUrlUsesTheEnvironmentsCredentials) {
  const auto w = World2(3);
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(5, w));
  ::setenv("AWS_ACCESS_KEY_ID", objstore::S3TestServer::kAccessKey, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", objstore::S3TestServer::kSecretKey, 1);
  const std::string ep = server_->endpoint();  // http://127.0.0.1:PORT
  auto t = ObjectTier::OpenUrl(std::string("s3://") + kBucket + "/" +
                               prefix_.substr(0, prefix_.size() - 1) + "?endpoint=" + ep);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto steps = (*t)->ListCommitted();
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  EXPECT_EQ(*steps, std::vector<long>{5});
  EXPECT_EQ((*t)->Url("step-x"), std::string("s3://") + kBucket + "/" + prefix_ + "step-x");
  EXPECT_FALSE(ObjectTier::OpenUrl("http://nope/x").ok());
}

TEST_F(ObjectTierTest, IncrementalStepDownloadsItsDependency) {
  auto w1 = World2(11);
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(1, w1));
  auto p0 = ReadShardIndex(env(), root_, 1, 0, 2);
  auto p1 = ReadShardIndex(env(), root_, 1, 1, 2);
  ASSERT_TRUE(p0.ok() && p1.ok());
  auto w2 = w1;
  for (auto& ts : w2) ts[0].bytes[5] ^= 0x40;  // one chunk of model/w changes per rank
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(2, w2, {&*p0, &*p1}));
  ASSERT_EQ(ReadCommitted(env(), root_, 2)->depends, std::vector<long>{1});

  // Step 2 on the object tier before its dependency: refused.
  ASSERT_NO_FATAL_FAILURE(Upload(2, 2));
  Status st = tier_->Commit(root_, 2);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("references step 1"));
  EXPECT_THAT(st.message(), HasSubstr("commit step 1 first"));
  EXPECT_TRUE(Committed().empty());
  // Uploaded but uncommitted dependency: still refused.
  ASSERT_NO_FATAL_FAILURE(Upload(1, 2));
  EXPECT_EQ(tier_->Commit(root_, 2).code(), Code::kFailedPrecondition);
  BW_ASSERT_OK(tier_->Commit(root_, 1));
  BW_ASSERT_OK(tier_->Commit(root_, 2));
  EXPECT_EQ(Committed(), (std::vector<long>{1, 2}));
  EXPECT_EQ(tier_->ReadCommitted(2)->depends, std::vector<long>{1});

  const std::string dst = dir_ + "/dst";
  BW_ASSERT_OK(tier_->Download(2, dst));
  EXPECT_EQ(*ListCommitted(env(), dst), (std::vector<long>{1, 2}));
  ExpectLoads(dst, 2, w2);
  ExpectLoads(dst, 1, w1);
  // Step 1 is already there: downloading 2 into a root holding 1 fetches only 2.
  const std::string dst2 = dir_ + "/dst2";
  BW_ASSERT_OK(tier_->Download(1, dst2));
  EXPECT_EQ(*ListCommitted(env(), dst2), std::vector<long>{1});
  BW_ASSERT_OK(tier_->Download(2, dst2));
  ExpectLoads(dst2, 2, w2);

  // A dependency that lost its COMMIT on the object tier: Download refuses, naming it.
  BW_ASSERT_OK(s3()->Delete(StepPrefix(1) + "COMMIT"));
  st = tier_->Download(2, dir_ + "/dst3");
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("depends on step 1"));
  EXPECT_FALSE(ReadCommitted(env(), dir_ + "/dst3", 2).ok());
}

// ---------------------------------------------------------------------------
// What is not committed

TEST_F(ObjectTierTest, BrokenStepsAreNotCommittedWithAReason) {
  const auto w = World2(21);
  for (long s = 1; s <= 5; ++s) ASSERT_NO_FATAL_FAILURE(SaveEverywhere(s, w));
  ASSERT_EQ(Committed(), (std::vector<long>{1, 2, 3, 4, 5}));
  const std::string shard1 = ShardFileName(1, 2);
  // 1: a shard is missing.
  BW_ASSERT_OK(s3()->Delete(StepPrefix(1) + shard1));
  // 2: a shard has the wrong size.
  std::string data = ReadAll(StepDir(root_, 2) + "/" + shard1);
  data.resize(data.size() - 1);
  BW_ASSERT_OK(s3()->Put(StepPrefix(2) + shard1, data.data(), data.size()));
  // 3: MANIFEST tampered with (same length, one byte changed).
  std::string man = ReadAll(StepDir(root_, 3) + "/MANIFEST");
  man[man.find("\"world\":2")] = '\'';
  BW_ASSERT_OK(s3()->Put(StepPrefix(3) + "MANIFEST", man.data(), man.size()));
  // 4: COMMIT absent.
  BW_ASSERT_OK(s3()->Delete(StepPrefix(4) + "COMMIT"));

  std::vector<std::string> skipped;
  auto steps = tier_->ListCommitted(&skipped);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  EXPECT_EQ(*steps, std::vector<long>{5});
  ASSERT_EQ(skipped.size(), 4u);
  EXPECT_THAT(skipped[0], HasSubstr("step 1: DATA_LOSS"));
  EXPECT_THAT(skipped[0], HasSubstr(shard1 + " is missing"));
  EXPECT_THAT(skipped[1], HasSubstr("step 2: DATA_LOSS"));
  EXPECT_THAT(skipped[1], HasSubstr("MANIFEST records"));
  EXPECT_THAT(skipped[2], HasSubstr("step 3: DATA_LOSS"));
  EXPECT_THAT(skipped[2], HasSubstr("does not match the size/xxh3 COMMIT pinned"));
  EXPECT_THAT(skipped[3], HasSubstr("step 4: NOT_FOUND"));
  EXPECT_THAT(skipped[3], HasSubstr("s3://bw-ckpt-object/" + prefix_ + "step-000000000004/COMMIT"));
  EXPECT_EQ(*tier_->NewestCommitted(4), -1);
  EXPECT_EQ(*tier_->NewestCommitted(), 5);
  for (long s = 1; s <= 4; ++s) {
    const std::string dst = dir_ + "/dst" + std::to_string(s);
    Status st = tier_->Download(s, dst);
    EXPECT_TRUE(st.code() == Code::kDataLoss || st.code() == Code::kNotFound) << st.ToString();
    EXPECT_FALSE(fs::exists(StepDir(dst, s) + "/COMMIT")) << s;
  }
  // A COMMIT that does not parse (torn) is not committed either.
  BW_ASSERT_OK(s3()->Put(StepPrefix(5) + "COMMIT", "{\"format\":2", 11));
  EXPECT_TRUE(Committed().empty());
}

TEST_F(ObjectTierTest, CommitAndUploadRefuseWhatIsNotReady) {
  const auto w = World2(31);
  // Not committed on the file tier.
  for (int r = 0; r < 2; ++r) {
    WriteOptions o;
    o.chunk_size = 4096;
    BW_ASSERT_OK(WriteShard(env(), root_, 7, r, 2, Views(w[r]), o));
  }
  ASSERT_NO_FATAL_FAILURE(Upload(7, 2));
  Status st = tier_->Commit(root_, 7);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("not committed on file tier"));
  // A shard not uploaded.
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(8, w));
  BW_ASSERT_OK(tier_->UploadShard(root_, 8, 0, 2));
  st = tier_->Commit(root_, 8);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr(ShardFileName(1, 2) + " is missing; upload rank 1"));
  // A shard of another size on S3.
  BW_ASSERT_OK(s3()->Put(StepPrefix(8) + ShardFileName(1, 2), "short", 5));
  st = tier_->Commit(root_, 8);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("has 5 bytes"));
  EXPECT_TRUE(Committed().empty());
  // Upload checks the local shard and its arguments.
  EXPECT_EQ(tier_->UploadShard(root_, 9, 0, 2).code(), Code::kNotFound);
  EXPECT_EQ(tier_->UploadShard(root_, 8, 2, 2).code(), Code::kInvalidArgument);
  WriteAll(StepDir(root_, 8) + "/" + ShardFileName(1, 2), "garbage");
  st = tier_->UploadShard(root_, 8, 1, 2);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("write it again"));
  // Re-uploading a shard of a committed step uncommits it until Commit runs again.
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(9, w));
  EXPECT_EQ(Committed(), std::vector<long>{9});
  BW_ASSERT_OK(tier_->UploadShard(root_, 9, 1, 2));
  EXPECT_TRUE(Committed().empty());
  BW_ASSERT_OK(tier_->Commit(root_, 9));
  EXPECT_EQ(Committed(), std::vector<long>{9});
}

// ---------------------------------------------------------------------------
// Retention

TEST_F(ObjectTierTest, RetainKeepsNewestGoldenAndDependencies) {
  std::vector<std::vector<T>> v = {{MakeT("a", DType::kU8, {10000}, 1)}};
  for (long s = 1; s <= 8; ++s) ASSERT_NO_FATAL_FAILURE(SaveEverywhere(s, v));
  EXPECT_EQ(tier_->Retain(Opts(0)).code(), Code::kInvalidArgument);
  std::vector<long> removed;
  BW_ASSERT_OK(tier_->Retain(Opts(3, 4), &removed));
  EXPECT_EQ(removed, (std::vector<long>{1, 2, 3, 5}));
  EXPECT_EQ(Committed(), (std::vector<long>{4, 6, 7, 8}));
  EXPECT_EQ(StepsWithObjects(), (std::vector<long>{4, 6, 7, 8}));

  // 10 references 6; 3 is an uncommitted upload older than the newest committed
  // step, 11 a newer one.
  auto p6 = ReadShardIndex(env(), root_, 6, 0, 1);
  ASSERT_TRUE(p6.ok());
  auto v10 = v;
  v10[0][0].bytes[9999] ^= 1;
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(10, v10, {&*p6}));
  ASSERT_EQ(tier_->ReadCommitted(10)->depends, std::vector<long>{6});
  ASSERT_NO_FATAL_FAILURE(Upload(3, 1));  // the file tier still has step 3
  ASSERT_NO_FATAL_FAILURE(WriteAndCommit(11, v));
  ASSERT_NO_FATAL_FAILURE(Upload(11, 1));
  removed.clear();
  BW_ASSERT_OK(tier_->Retain(Opts(1), &removed));
  EXPECT_EQ(removed, (std::vector<long>{3, 4, 7, 8}));
  EXPECT_EQ(Committed(), (std::vector<long>{6, 10}));
  EXPECT_EQ(StepsWithObjects(), (std::vector<long>{6, 10, 11}));
  BW_ASSERT_OK(tier_->Download(10, dir_ + "/a"));
  ExpectLoads(dir_ + "/a", 10, v10);
  // Idempotent; never the newest committed step.
  removed.clear();
  BW_ASSERT_OK(tier_->Retain(Opts(1), &removed));
  EXPECT_TRUE(removed.empty());
  EXPECT_EQ(Committed(), (std::vector<long>{6, 10}));
}

TEST_F(ObjectTierTest, RetainInterruptedAfterACommitDeleteLeavesAConsistentTier) {
  std::vector<std::vector<T>> v = {{MakeT("a", DType::kU8, {10000}, 2)}};
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(6, v));
  auto p6 = ReadShardIndex(env(), root_, 6, 0, 1);
  ASSERT_TRUE(p6.ok());
  auto v10 = v;
  v10[0][0].bytes[0] ^= 1;
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(10, v10, {&*p6}));
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(12, v));
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(13, v));
  // Retain(keep 1) deletes 12, 10, 6 in that order, each COMMIT first. Simulate a
  // crash right after the first COMMIT delete.
  ASSERT_EQ(PlanRetain({{6, {}}, {10, {6}}, {12, {}}, {13, {}}}, {6, 10, 12, 13}, Opts(1)),
            (std::vector<long>{6, 10, 12}));
  BW_ASSERT_OK(s3()->Delete(StepPrefix(12) + "COMMIT"));
  EXPECT_EQ(Committed(), (std::vector<long>{6, 10, 13}));
  // Every step still listed is complete and downloads, dependencies included.
  for (long s : {10L, 13L}) {
    const std::string dst = dir_ + "/c" + std::to_string(s);
    BW_ASSERT_OK(tier_->Download(s, dst));
    BW_EXPECT_OK(VerifyStep(env(), dst, s, /*full=*/true));
  }
  ExpectLoads(dir_ + "/c10", 10, v10);
  // A later Retain finishes the job, including the uncommitted remains of 12.
  std::vector<long> removed;
  BW_ASSERT_OK(tier_->Retain(Opts(1), &removed));
  EXPECT_EQ(removed, (std::vector<long>{6, 10, 12}));
  EXPECT_EQ(Committed(), std::vector<long>{13});
  EXPECT_EQ(StepsWithObjects(), std::vector<long>{13});
}

// ---------------------------------------------------------------------------
// Corruption on the object tier

TEST_F(ObjectTierTest, DownloadOfACorruptedObjectFailsWithDataLossAndCommitsNothing) {
  const auto w = World2(41);
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(1, w));
  ASSERT_NO_FATAL_FAILURE(SaveEverywhere(2, w));
  // Step 1: flip a chunk byte in s3rver's stored object (the size is unchanged).
  const std::string key = StepPrefix(1) + ShardFileName(0, 2);
  const std::string obj = S3DataPath(key);
  ASSERT_TRUE(fs::exists(obj)) << obj;
  std::string bytes = ReadAll(obj);
  bytes[bytes.size() - 40] ^= 0x01;  // last data byte region, before the 32-byte footer
  WriteAll(obj, bytes);
  EXPECT_EQ(Committed(), (std::vector<long>{1, 2})) << "sizes still match: only a download sees it";
  const std::string dst = dir_ + "/dst";
  Status st = tier_->Download(1, dst);
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr(key));
  EXPECT_FALSE(ReadCommitted(env(), dst, 1).ok());
  EXPECT_FALSE(fs::exists(StepDir(dst, 1)));
  // Step 2: a corrupted shard (index byte flipped) uploaded under the right size.
  std::string shard = ReadAll(StepDir(root_, 2) + "/" + ShardFileName(1, 2));
  shard[80] ^= 0x20;
  BW_ASSERT_OK(s3()->Put(StepPrefix(2) + ShardFileName(1, 2), shard.data(), shard.size()));
  st = tier_->Download(2, dst);
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_TRUE(ListCommitted(env(), dst)->empty());
  EXPECT_FALSE(fs::exists(StepDir(dst, 2)));
}

}  // namespace
}  // namespace bulwark::ckpt
