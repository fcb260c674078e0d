#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "gtest/gtest.h"

namespace bulwark::ckpt {
namespace {

namespace fs = std::filesystem;

class CkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_ckpt_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void WriteAllTo(const std::string& path, const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data;
  }
  // Writes a shard with two small blobs (several chunks each) for `rank`.
  void WriteSmall(long step, int rank, int world) {
    std::string a = "alpha-" + std::to_string(rank) + std::string(150, 'a');
    std::string b(70, 'b');
    WriteOptions opts;
    opts.chunk_size = 64;
    ASSERT_TRUE(WriteShard(dir_, step, rank, world,
                           {{"a", a.data(), a.size()}, {"b", b.data(), b.size()}}, nullptr, opts)
                    .ok());
  }
  void WriteStep(long step, int world) {
    for (int r = 0; r < world; ++r) WriteSmall(step, r, world);
  }
  std::string ShardPath(long step, int rank, int world) {
    return StepDir(dir_, step) + "/" + ShardFileName(rank, world);
  }

  std::string dir_;
};

TEST_F(CkptTest, PathsAreZeroPadded) {
  EXPECT_EQ(StepDir("/c", 42), "/c/step-000000000042");
  EXPECT_EQ(ShardFileName(3, 8), "shard-00003-of-00008.bws");
}

TEST_F(CkptTest, RoundTripMultiChunkAndEmptyBlobs) {
  std::vector<uint8_t> big(10000);
  std::mt19937 rng(7);
  for (auto& x : big) x = static_cast<uint8_t>(rng());
  std::string small = "hello";
  WriteOptions opts;
  opts.chunk_size = 1000;
  for (int rank = 0; rank < 2; ++rank) {
    ShardStats stats;
    ASSERT_TRUE(WriteShard(dir_, 5, rank, 2,
                           {{"model", big.data(), big.size()},
                            {"empty", nullptr, 0},
                            {"opt", small.data(), small.size()}},
                           &stats, opts)
                    .ok());
    EXPECT_EQ(stats.path, ShardPath(5, rank, 2));
    EXPECT_EQ(stats.bytes, fs::file_size(stats.path));
    EXPECT_GT(stats.bytes, big.size());
  }
  EXPECT_EQ(*NewestCommitted(dir_), -1);  // not committed yet
  ASSERT_TRUE(Commit(dir_, 5, 2, true).ok());
  ASSERT_TRUE(VerifyStep(dir_, 5).ok());
  EXPECT_EQ(*ListCommitted(dir_), std::vector<long>{5});
  auto rec = ReadCommit(dir_, 5);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->world, 2);
  ASSERT_EQ(rec->shards.size(), 2u);
  EXPECT_EQ(rec->shards[1].file, "shard-00001-of-00002.bws");

  auto blobs = ReadShard(dir_, 5, 1, 2);
  ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
  ASSERT_EQ(blobs->size(), 3u);
  EXPECT_EQ((*blobs)[0].name, "model");
  EXPECT_EQ((*blobs)[0].data, big);
  EXPECT_EQ((*blobs)[1].name, "empty");
  EXPECT_TRUE((*blobs)[1].data.empty());
  EXPECT_EQ(std::string((*blobs)[2].data.begin(), (*blobs)[2].data.end()), "hello");
}

TEST_F(CkptTest, RejectsBadArguments) {
  std::string x = "x";
  EXPECT_EQ(WriteShard(dir_, 1, 0, 1, {{"a", x.data(), 1}, {"a", x.data(), 1}}, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(WriteShard(dir_, 1, 2, 2, {}, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(WriteShard(dir_, -1, 0, 1, {}, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(WriteShard(dir_, 1, 0, 1, {{"", x.data(), 1}}, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadShard(dir_, 1, 0, 1).status().code(), Code::kNotFound);
  EXPECT_EQ(Retain(dir_, 0).code(), Code::kInvalidArgument);
}

TEST_F(CkptTest, TruncationAtEveryOffsetIsDetected) {
  WriteSmall(3, 0, 1);
  const std::string path = ShardPath(3, 0, 1);
  const std::string orig = ReadAll(path);
  ASSERT_GT(orig.size(), 300u);
  for (size_t len = 0; len < orig.size(); ++len) {
    WriteAllTo(path, orig.substr(0, len));
    Status st = VerifyShard(dir_, 3, 0, 1, true);
    ASSERT_EQ(st.code(), Code::kDataLoss) << "truncated to " << len << ": " << st.ToString();
    ASSERT_FALSE(ReadShard(dir_, 3, 0, 1).ok()) << "truncated to " << len;
    ASSERT_FALSE(Commit(dir_, 3, 1).ok()) << "truncated to " << len;
  }
  WriteAllTo(path, orig + "x");  // extension is detected too
  EXPECT_EQ(VerifyShard(dir_, 3, 0, 1, false).code(), Code::kDataLoss);
  WriteAllTo(path, orig);
  EXPECT_TRUE(VerifyShard(dir_, 3, 0, 1, true).ok());
}

TEST_F(CkptTest, SingleBitFlipsAreDetected) {
  WriteSmall(4, 0, 1);
  const std::string path = ShardPath(4, 0, 1);
  const std::string orig = ReadAll(path);
  std::mt19937 rng(12345);
  std::vector<size_t> positions;
  for (size_t i = 0; i < 64; ++i) positions.push_back(i);                          // header
  for (size_t i = orig.size() - 32; i < orig.size(); ++i) positions.push_back(i);  // footer
  for (int i = 0; i < 400; ++i) positions.push_back(rng() % orig.size());
  for (size_t pos : positions) {
    std::string bad = orig;
    bad[pos] = static_cast<char>(bad[pos] ^ (1 << (rng() % 8)));
    WriteAllTo(path, bad);
    Status st = VerifyShard(dir_, 4, 0, 1, true);
    ASSERT_EQ(st.code(), Code::kDataLoss) << "flip at " << pos << ": " << st.ToString();
    ASSERT_FALSE(ReadShard(dir_, 4, 0, 1).ok()) << "flip at " << pos;
  }
  WriteAllTo(path, orig);
  EXPECT_TRUE(ReadShard(dir_, 4, 0, 1).ok());
}

TEST_F(CkptTest, CommitRefusedWhenShardMissingOrCorrupt) {
  WriteSmall(7, 0, 3);
  WriteSmall(7, 1, 3);
  Status st = Commit(dir_, 7, 3);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.message();
  WriteSmall(7, 2, 3);
  // Corrupt a data byte of rank 1: only the full-data verify catches it.
  const std::string p1 = ShardPath(7, 1, 3);
  std::string bytes = ReadAll(p1);
  bytes[bytes.size() - 40] ^= 0x10;
  WriteAllTo(p1, bytes);
  EXPECT_EQ(Commit(dir_, 7, 3, /*verify_data=*/true).code(), Code::kDataLoss);
  EXPECT_FALSE(fs::exists(StepDir(dir_, 7) + "/COMMIT"));
  // Corrupt the header of rank 2: the structural verify catches it.
  WriteSmall(7, 1, 3);
  const std::string p2 = ShardPath(7, 2, 3);
  bytes = ReadAll(p2);
  bytes[20] ^= 0x01;
  WriteAllTo(p2, bytes);
  EXPECT_EQ(Commit(dir_, 7, 3, false).code(), Code::kDataLoss);
  EXPECT_EQ(*NewestCommitted(dir_), -1);
  // A shard of a different world size does not count.
  WriteSmall(7, 2, 4);
  EXPECT_FALSE(Commit(dir_, 7, 3).ok());
  WriteSmall(7, 2, 3);
  EXPECT_TRUE(Commit(dir_, 7, 3, true).ok());
  EXPECT_EQ(*NewestCommitted(dir_), 7);
}

TEST_F(CkptTest, CrashAtEachProtocolStepFallsBackToPreviousStep) {
  WriteStep(10, 2);
  ASSERT_TRUE(Commit(dir_, 10, 2).ok());
  const std::string s20 = StepDir(dir_, 20);

  // Crash 1: step dir created, shard only partially written to its tmp file.
  fs::create_directories(s20);
  WriteAllTo(s20 + "/" + ShardFileName(0, 2) + ".tmp.999", "BWSHARD1 partial");
  EXPECT_EQ(*NewestCommitted(dir_), 10);

  // Crash 2: one shard renamed into place, the other still missing; no COMMIT.
  WriteSmall(20, 0, 2);
  EXPECT_EQ(*NewestCommitted(dir_), 10);
  // Crash 3: all shards durable, COMMIT never started.
  WriteSmall(20, 1, 2);
  EXPECT_EQ(*NewestCommitted(dir_), 10);

  // Crash 4: COMMIT written to its tmp file but not renamed.
  ASSERT_TRUE(Commit(dir_, 20, 2).ok());
  const std::string commit = ReadAll(s20 + "/COMMIT");
  fs::remove(s20 + "/COMMIT");
  WriteAllTo(s20 + "/COMMIT.tmp.999", commit);
  EXPECT_EQ(*NewestCommitted(dir_), 10);

  // Crash 5: COMMIT renamed but its data lost (no fsync): empty or torn file.
  for (size_t len : {size_t{0}, commit.size() / 2, commit.size() - 1}) {
    WriteAllTo(s20 + "/COMMIT", commit.substr(0, len));
    std::vector<std::string> skipped;
    EXPECT_EQ(*ListCommitted(dir_, &skipped), std::vector<long>{10}) << len;
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].find("step 20"), std::string::npos);
  }
  // A committed step whose shard later went missing is not committed either.
  WriteAllTo(s20 + "/COMMIT", commit);
  EXPECT_EQ(*NewestCommitted(dir_), 20);
  EXPECT_EQ(*NewestCommitted(dir_, 19), 10);
  const std::string shard1 = ShardPath(20, 1, 2);
  const std::string shard1_bytes = ReadAll(shard1);
  fs::remove(shard1);
  EXPECT_EQ(*NewestCommitted(dir_), 10);
  WriteAllTo(shard1, shard1_bytes);
  EXPECT_EQ(*NewestCommitted(dir_), 20);

  // Re-writing a shard of a committed step un-commits it until the next Commit.
  WriteSmall(20, 0, 2);
  EXPECT_EQ(*NewestCommitted(dir_), 10);
  ASSERT_TRUE(Commit(dir_, 20, 2).ok());
  EXPECT_EQ(*NewestCommitted(dir_), 20);
  EXPECT_TRUE(VerifyStep(dir_, 20).ok());
}

TEST_F(CkptTest, VerifyStepDetectsShardSwappedAfterCommit) {
  WriteStep(1, 1);
  ASSERT_TRUE(Commit(dir_, 1, 1).ok());
  const std::string commit = ReadAll(StepDir(dir_, 1) + "/COMMIT");
  // Replace the shard with a different valid one of the same size.
  std::string a = "alpha-0" + std::string(150, 'z');
  std::string b(70, 'b');
  WriteOptions opts;
  opts.chunk_size = 64;
  ASSERT_TRUE(WriteShard(dir_, 1, 0, 1, {{"a", a.data(), a.size()}, {"b", b.data(), b.size()}},
                         nullptr, opts)
                  .ok());
  WriteAllTo(StepDir(dir_, 1) + "/COMMIT", commit);
  EXPECT_EQ(VerifyStep(dir_, 1).code(), Code::kDataLoss);
}

TEST_F(CkptTest, RetainKeepsNewestCommittedAndNewerWork) {
  WriteStep(0, 1);  // uncommitted, older than newest committed: deleted
  for (long s = 1; s <= 5; ++s) {
    WriteStep(s, 1);
    ASSERT_TRUE(Commit(dir_, s, 1).ok());
  }
  WriteStep(6, 1);  // uncommitted, newer: kept (may be in progress)
  ASSERT_TRUE(Retain(dir_, 2).ok());
  EXPECT_EQ(*ListCommitted(dir_), (std::vector<long>{4, 5}));
  EXPECT_FALSE(fs::exists(StepDir(dir_, 0)));
  EXPECT_FALSE(fs::exists(StepDir(dir_, 3)));
  EXPECT_TRUE(fs::exists(StepDir(dir_, 6)));
  ASSERT_TRUE(Retain(dir_, 1).ok());
  EXPECT_EQ(*ListCommitted(dir_), std::vector<long>{5});
  ASSERT_TRUE(Retain(dir_, 1).ok());  // idempotent, never deletes the newest
  EXPECT_EQ(*ListCommitted(dir_), std::vector<long>{5});
  EXPECT_TRUE(ReadShard(dir_, 5, 0, 1).ok());
  EXPECT_TRUE(fs::exists(StepDir(dir_, 6)));
  // With nothing committed, Retain deletes nothing.
  fs::remove(StepDir(dir_, 5) + "/COMMIT");
  ASSERT_TRUE(Retain(dir_, 1).ok());
  EXPECT_TRUE(fs::exists(StepDir(dir_, 5)));
  EXPECT_TRUE(Retain(dir_ + "/missing", 1).ok());
}

TEST_F(CkptTest, GarbageCommitIsSkippedWithReason) {
  WriteStep(2, 1);
  WriteAllTo(StepDir(dir_, 2) + "/COMMIT", "not json\nxxh3 0000000000000000\n");
  std::vector<std::string> skipped;
  EXPECT_TRUE(ListCommitted(dir_, &skipped)->empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("checksum"), std::string::npos) << skipped[0];
  fs::create_directories(dir_ + "/step-abc");  // ignored, not a step dir
  EXPECT_EQ(*NewestCommitted(dir_), -1);
}

}  // namespace
}  // namespace bulwark::ckpt
