// Unit tests of the checkpoint engine (format v2): shard write/read round trips,
// metadata validation, dedup of replicated tensors, incremental saves, commit,
// retention, resharding (any split dimensions), verification, exhaustive bit-flip and truncation
// detection, the shared-memory staging ring, and the FaultEnv test utility.
//
// Every test works in its own mkdtemp directory (under /tmp; staging rings under
// /dev/shm when it exists), removed at the end. Deterministic: fixed seeds, and
// child processes are reaped with a blocking waitpid.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "ckpt/fault_env.h"
#include "ckpt/staging.h"
#include "ckpt/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bulwark::ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ::bulwark::ckpt::test_util;  // NOLINT(build/namespaces)
using ::testing::HasSubstr;

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kBitsPerByte = 1;
#else
constexpr size_t kBitsPerByte = 3;
#endif

// ---------------------------------------------------------------------------
// Helpers

bool IsDataLossOrNotFound(const Status& st) {
  return st.code() == Code::kDataLoss || st.code() == Code::kNotFound;
}

class CkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("/tmp", "bw_ckpt_test");
    ASSERT_FALSE(dir_.empty());
    root_ = dir_ + "/ckpt";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Env* env() { return Env::Default(); }
  std::string ShardPath(long step, int rank, int world) const {
    return StepDir(root_, step) + "/" + ShardFileName(rank, world);
  }
  Status Write(long step, int rank, int world, const std::vector<T>& ts, uint64_t chunk = 64,
               const ShardIndex* previous = nullptr, ShardStats* stats = nullptr,
               bool dedup = true) {
    WriteOptions o;
    o.chunk_size = chunk;
    o.previous = previous;
    o.dedup_replicated = dedup;
    return WriteShard(env(), root_, step, rank, world, Views(ts), o, stats);
  }
  // Writes every rank's `per_rank[r]` and commits.
  void WriteAndCommit(long step, const std::vector<std::vector<T>>& per_rank, uint64_t chunk = 64) {
    const int world = static_cast<int>(per_rank.size());
    for (int r = 0; r < world; ++r) BW_ASSERT_OK(Write(step, r, world, per_rank[r], chunk));
    BW_ASSERT_OK(Commit(env(), root_, step, world, /*verify_data=*/true));
  }
  std::unique_ptr<StepReader> Open(long step) {
    auto r = StepReader::Open(env(), root_, step);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // Loads `want` from `reader`, asserting success.
  static std::vector<uint8_t> Load(StepReader* reader, const TensorMeta& want, int prefer = -1) {
    std::vector<uint8_t> out(want.nbytes(), 0xCD);
    Status st = reader->Load(want, out.data(), prefer);
    EXPECT_TRUE(st.ok()) << want.name << ": " << st.ToString();
    return out;
  }

  std::string dir_;
  std::string root_;
};

// ---------------------------------------------------------------------------
// Names, dtypes, round trips

TEST_F(CkptTest, PathsAreZeroPadded) {
  EXPECT_EQ(StepDir("/c", 42), "/c/step-000000000042");
  EXPECT_EQ(ShardFileName(3, 8), "shard-00003-of-00008.bws");
}

TEST_F(CkptTest, DTypeNamesRoundTrip) {
  const std::map<DType, size_t> sizes = {
      {DType::kU8, 1},  {DType::kI8, 1},   {DType::kI16, 2}, {DType::kI32, 4}, {DType::kI64, 8},
      {DType::kF16, 2}, {DType::kBF16, 2}, {DType::kF32, 4}, {DType::kF64, 8}, {DType::kBool, 1}};
  for (const auto& [d, size] : sizes) {
    EXPECT_EQ(DTypeSize(d), size) << DTypeName(d);
    auto back = ParseDType(DTypeName(d));
    ASSERT_TRUE(back.ok()) << DTypeName(d);
    EXPECT_EQ(*back, d);
  }
  EXPECT_STREQ(DTypeName(DType::kF32), "float32");
  auto bad = ParseDType("float128");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("float128"));
  EXPECT_THAT(bad.status().message(), HasSubstr("float32"));
}

TEST_F(CkptTest, RoundTripSeveralDtypesAndShapes) {
  std::vector<std::vector<T>> ranks(2);
  for (int r = 0; r < 2; ++r) {
    const uint64_t s = 100 * (r + 1);
    ranks[r] = {
        MakeT("u8", DType::kU8, {1000}, s + 1),     MakeT("i8", DType::kI8, {7}, s + 2),
        MakeT("i16", DType::kI16, {3, 5}, s + 3),   MakeT("i32", DType::kI32, {2, 3, 4}, s + 4),
        MakeT("i64", DType::kI64, {9}, s + 5),      MakeT("f16", DType::kF16, {17}, s + 6),
        MakeT("bf16", DType::kBF16, {4, 4}, s + 7), MakeT("f32", DType::kF32, {33, 3}, s + 8),
        MakeT("f64", DType::kF64, {5}, s + 9),      MakeT("bool", DType::kBool, {13}, s + 10),
        MakeT("scalar", DType::kF32, {}, s + 11),   MakeT("empty", DType::kF32, {4, 0, 2}, s + 12)};
  }
  uint64_t logical = 0;
  for (int r = 0; r < 2; ++r) {
    ShardStats stats;
    BW_ASSERT_OK(Write(7, r, 2, ranks[r], 64, nullptr, &stats));
    EXPECT_EQ(stats.path, ShardPath(7, r, 2));
    EXPECT_EQ(stats.file_bytes, fs::file_size(stats.path));
    uint64_t want = 0;
    for (const T& t : ranks[r]) want += t.bytes.size();
    EXPECT_EQ(stats.logical_bytes, want);
    EXPECT_EQ(stats.written_bytes, want);  // nothing replicated or incremental
    EXPECT_GT(stats.file_bytes, want);
    logical += want;
  }
  EXPECT_EQ(*NewestCommitted(env(), root_), -1);  // written, not committed
  BW_ASSERT_OK(Commit(env(), root_, 7, 2, /*verify_data=*/true));
  EXPECT_EQ(*ListCommitted(env(), root_), std::vector<long>{7});
  EXPECT_EQ(*NewestCommitted(env(), root_), 7);
  EXPECT_EQ(*NewestCommitted(env(), root_, 6), -1);

  auto m = ReadCommitted(env(), root_, 7);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->format, kFormatVersion);
  EXPECT_EQ(m->step, 7);
  EXPECT_EQ(m->world, 2);
  ASSERT_EQ(m->shards.size(), 2u);
  EXPECT_EQ(m->shards[1].rank, 1);
  EXPECT_EQ(m->shards[1].file, "shard-00001-of-00002.bws");
  EXPECT_EQ(m->shards[1].size, fs::file_size(ShardPath(7, 1, 2)));
  EXPECT_TRUE(m->depends.empty());
  EXPECT_EQ(m->logical_bytes, logical);
  EXPECT_EQ(m->stored_bytes, fs::file_size(ShardPath(7, 0, 2)) + fs::file_size(ShardPath(7, 1, 2)));
  EXPECT_GT(m->time, 0);

  auto reader = Open(7);
  ASSERT_NE(reader, nullptr);
  for (int r = 0; r < 2; ++r) {
    const ShardIndex& idx = reader->index(r);
    EXPECT_EQ(idx.rank, r);
    EXPECT_EQ(idx.world, 2);
    EXPECT_EQ(idx.chunk_size, 64u);
    ASSERT_EQ(idx.tensors.size(), ranks[r].size());
    for (const T& t : ranks[r]) {
      const TensorEntry* e = idx.Find(t.meta.name);
      ASSERT_NE(e, nullptr) << t.meta.name;
      EXPECT_EQ(e->meta.dtype, t.meta.dtype);
      EXPECT_EQ(e->meta.shape, t.meta.shape);
      EXPECT_EQ(e->chunks.size(), (t.bytes.size() + 63) / 64) << t.meta.name;
      EXPECT_EQ(Load(reader.get(), t.meta, r), t.bytes) << t.meta.name << " rank " << r;
    }
  }
  EXPECT_EQ(reader->index(0).Find("nope"), nullptr);
  EXPECT_GT(reader->bytes_read(), 0u);
  // ReadRankTensors: every tensor, in saved order, as raw bytes.
  for (int r = 0; r < 2; ++r) {
    auto blobs = ReadRankTensors(env(), root_, 7, r);
    ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
    ASSERT_EQ(blobs->size(), ranks[r].size());
    for (size_t i = 0; i < blobs->size(); ++i) {
      EXPECT_EQ((*blobs)[i].name, ranks[r][i].meta.name);
      EXPECT_EQ((*blobs)[i].data, ranks[r][i].bytes);
    }
  }
  EXPECT_EQ(ReadRankTensors(env(), root_, 7, 2).status().code(), Code::kInvalidArgument);
  // Asking for the wrong dtype or shape is an error naming the tensor.
  TensorMeta wrong = ranks[0][7].meta;
  wrong.dtype = DType::kI32;
  std::vector<uint8_t> buf(wrong.nbytes());
  Status st = reader->Load(wrong, buf.data());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("'f32'"));
  TensorMeta missing;
  missing.name = "missing";
  missing.shape = {1};
  st = reader->Load(missing, buf.data());
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("'missing'"));
}

TEST_F(CkptTest, BlobsToTensorsRoundTrip) {
  const std::string a = "hello", b;
  const std::vector<uint8_t> c = RandomBytes(300, 1);
  std::vector<TensorView> views =
      BlobsToTensors({{"a", a.data(), a.size()}, {"b", nullptr, 0}, {"c", c.data(), c.size()}});
  ASSERT_EQ(views.size(), 3u);
  EXPECT_EQ(views[0].meta.dtype, DType::kU8);
  EXPECT_EQ(views[0].meta.shape, std::vector<int64_t>{5});
  WriteOptions o;
  o.chunk_size = 128;
  BW_ASSERT_OK(WriteShard(env(), root_, 3, 0, 1, views, o));
  BW_ASSERT_OK(Commit(env(), root_, 3, 1));
  auto blobs = ReadRankTensors(env(), root_, 3, 0);
  ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
  ASSERT_EQ(blobs->size(), 3u);
  EXPECT_EQ(std::string((*blobs)[0].data.begin(), (*blobs)[0].data.end()), a);
  EXPECT_TRUE((*blobs)[1].data.empty());
  EXPECT_EQ((*blobs)[2].data, c);
}

TEST_F(CkptTest, EmptyTensorsAndScalars) {
  std::vector<T> ts = {MakeT("scalar_i64", DType::kI64, {}, 1),
                       MakeT("scalar_bool", DType::kBool, {}, 2), MakeT("zero", DType::kU8, {0}, 3),
                       MakeT("zero_2d", DType::kF64, {3, 0}, 4),
                       MakeT("zero_rows", DType::kF32, {0, 5}, 5, {4, 5}, {4, 0})};
  ShardStats stats;
  BW_ASSERT_OK(Write(1, 0, 1, ts, 64, nullptr, &stats));
  EXPECT_EQ(stats.logical_bytes, 9u);
  EXPECT_EQ(stats.written_bytes, 9u);
  // A shard with no tensors at all is valid too.
  BW_ASSERT_OK(Write(2, 0, 1, {}));
  BW_ASSERT_OK(Commit(env(), root_, 1, 1, true));
  BW_ASSERT_OK(Commit(env(), root_, 2, 1, true));
  auto reader = Open(1);
  ASSERT_NE(reader, nullptr);
  for (const T& t : ts) {
    EXPECT_EQ(Load(reader.get(), t.meta), t.bytes) << t.meta.name;
    EXPECT_EQ(reader->index(0).Find(t.meta.name)->chunks.size(), t.bytes.empty() ? 0u : 1u);
  }
  // A scalar is not a 1-element vector.
  TensorMeta vec = ts[0].meta;
  vec.shape = {1};
  std::vector<uint8_t> buf(8);
  EXPECT_EQ(reader->Load(vec, buf.data()).code(), Code::kInvalidArgument);
  auto empty = ReadRankTensors(env(), root_, 2, 0);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
  BW_EXPECT_OK(VerifyStep(env(), root_, 1));
  BW_EXPECT_OK(VerifyStep(env(), root_, 2));
}

TEST_F(CkptTest, RejectsBadArgumentsAndMetasNamingTheTensor) {
  const std::vector<uint8_t> bytes(64, 7);
  auto view = [&](const std::string& name, std::vector<int64_t> shape,
                  std::vector<int64_t> global = {}, std::vector<int64_t> offsets = {}) {
    TensorView v;
    v.meta.name = name;
    v.meta.dtype = DType::kU8;
    v.meta.shape = std::move(shape);
    v.meta.global_shape = std::move(global);
    v.meta.offsets = std::move(offsets);
    v.data = bytes.data();
    return v;
  };
  WriteOptions o;
  o.chunk_size = 16;
  struct Case {
    std::string what;
    std::vector<TensorView> views;
    std::string needle;
  };
  TensorView null_data = view("nul", {4});
  null_data.data = nullptr;
  const std::vector<Case> cases = {
      {"duplicate name", {view("dup", {4}), view("x", {2}), view("dup", {4})}, "'dup'"},
      {"empty name", {view("", {4})}, "name"},
      {"negative dim", {view("neg", {3, -1})}, "'neg'"},
      {"piece outside global", {view("offs", {4, 2}, {6, 2}, {3, 0})}, "'offs'"},
      {"negative offset", {view("negoff", {4}, {6}, {-1})}, "'negoff'"},
      {"rank mismatch", {view("rankmm", {3, 2}, {6})}, "'rankmm'"},
      {"offsets rank mismatch", {view("offrank", {3}, {6}, {0, 0})}, "'offrank'"},
      {"null data", {null_data}, "'nul'"},
      // Hostile sizes (a peer's or a file's metadata): no signed overflow, no wrap.
      {"offset overflow", {view("ovf", {4}, {8}, {INT64_MAX - 1})}, "'ovf'"},
      {"bytes overflow", {view("huge", {1ll << 40, 1ll << 40})}, "larger than 2^62"},
  };
  for (const Case& c : cases) {
    Status st = WriteShard(env(), root_, 1, 0, 1, c.views, o);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << c.what << ": " << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr(c.needle)) << c.what;
  }
  const std::vector<TensorView> ok = {view("a", {4})};
  EXPECT_EQ(WriteShard(env(), root_, -1, 0, 1, ok, o).code(), Code::kInvalidArgument);
  EXPECT_EQ(WriteShard(env(), root_, 1, 2, 2, ok, o).code(), Code::kInvalidArgument);
  EXPECT_EQ(WriteShard(env(), root_, 1, -1, 2, ok, o).code(), Code::kInvalidArgument);
  EXPECT_EQ(WriteShard(env(), root_, 1, 0, 0, ok, o).code(), Code::kInvalidArgument);
  WriteOptions zero = o;
  zero.chunk_size = 0;
  EXPECT_EQ(WriteShard(env(), root_, 1, 0, 1, ok, zero).code(), Code::kInvalidArgument);
  // Nothing was written by any rejected call.
  EXPECT_FALSE(fs::exists(StepDir(root_, 1)));
  EXPECT_FALSE(fs::exists(StepDir(root_, -1)));

  EXPECT_EQ(Commit(env(), root_, 1, 0).code(), Code::kInvalidArgument);
  EXPECT_EQ(Commit(env(), root_, -1, 1).code(), Code::kInvalidArgument);
  RetainOptions ro;
  ro.keep = 0;
  EXPECT_EQ(Retain(env(), root_, ro).code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadShardIndex(env(), root_, 1, 0, 1).status().code(), Code::kNotFound);
  EXPECT_EQ(ReadCommitted(env(), root_, 1).status().code(), Code::kNotFound);
  EXPECT_EQ(StepReader::Open(env(), root_, 1).status().code(), Code::kNotFound);
  EXPECT_EQ(*ListCommitted(env(), root_), std::vector<long>{});  // root does not exist

  // A bad wanted meta is rejected by Load.
  BW_ASSERT_OK(WriteShard(env(), root_, 2, 0, 1, ok, o));
  BW_ASSERT_OK(Commit(env(), root_, 2, 1));
  auto reader = Open(2);
  ASSERT_NE(reader, nullptr);
  TensorMeta bad;
  bad.name = "a";
  bad.shape = {-4};
  uint8_t buf[8];
  Status st = reader->Load(bad, buf);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("'a'"));
}

// ---------------------------------------------------------------------------
// Dedup, incremental saves, commit, retention

TEST_F(CkptTest, DedupReplicatedTensorsAcrossWorldFour) {
  constexpr int kWorld = 4;
  constexpr uint64_t kChunk = 64;
  const T params = MakeT("params", DType::kF32, {1024}, 42, {}, {}, /*replicated=*/true);  // 4 KiB
  ASSERT_EQ(params.bytes.size(), 4096u);
  std::vector<std::vector<T>> ranks(kWorld);
  uint64_t total_written = 0;
  for (int r = 0; r < kWorld; ++r) {
    ranks[r] = {params, MakeT("opt", DType::kU8, {100}, 1000 + r)};
    ShardStats stats;
    BW_ASSERT_OK(Write(5, r, kWorld, ranks[r], kChunk, nullptr, &stats));
    EXPECT_EQ(stats.logical_bytes, 4096u + 100u);
    // About a quarter of the replicated bytes (within two chunks), plus its own.
    const uint64_t share = stats.written_bytes - 100;
    EXPECT_GE(share, 1024 - 2 * kChunk) << "rank " << r;
    EXPECT_LE(share, 1024 + 2 * kChunk) << "rank " << r;
    total_written += share;
  }
  EXPECT_EQ(total_written, 4096u);  // every chunk written exactly once
  BW_ASSERT_OK(Commit(env(), root_, 5, kWorld, /*verify_data=*/true));
  auto m = ReadCommitted(env(), root_, 5);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->depends.empty());  // same-step references are not dependencies
  EXPECT_EQ(m->logical_bytes, kWorld * (4096u + 100u));

  auto reader = Open(5);
  ASSERT_NE(reader, nullptr);
  std::set<std::pair<int, uint64_t>> owners;
  for (int r = 0; r < kWorld; ++r) {
    const TensorEntry* e = reader->index(r).Find("params");
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->chunks.size(), 64u);
    for (uint64_t i = 0; i < e->chunks.size(); ++i) {
      const ChunkLoc& c = e->chunks[i];
      if (c.local()) {
        owners.insert({r, i});
      } else {
        EXPECT_EQ(c.ref_step, 5);
        EXPECT_NE(c.ref_rank, r);
      }
    }
    // Every rank reads back the full tensor (and its own state).
    EXPECT_EQ(Load(reader.get(), params.meta, r), params.bytes) << "rank " << r;
    auto blobs = ReadRankTensors(env(), root_, 5, r);
    ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
    ASSERT_EQ(blobs->size(), 2u);
    EXPECT_EQ((*blobs)[0].data, params.bytes);
    EXPECT_EQ((*blobs)[1].data, ranks[r][1].bytes);
  }
  EXPECT_EQ(owners.size(), 64u);  // each chunk local in exactly one shard

  // Without dedup every rank writes everything.
  for (int r = 0; r < kWorld; ++r) {
    ShardStats stats;
    BW_ASSERT_OK(Write(6, r, kWorld, ranks[r], kChunk, nullptr, &stats, /*dedup=*/false));
    EXPECT_EQ(stats.written_bytes, 4196u);
  }
  BW_ASSERT_OK(Commit(env(), root_, 6, kWorld, true));
  EXPECT_GT(ReadCommitted(env(), root_, 6)->stored_bytes, m->stored_bytes + 3 * 4096 - 512);
}

TEST_F(CkptTest, ReplicatedTensorThatDiffersBetweenRanksIsNeverMixed) {
  // The caller promised identical bytes and broke the promise: reads must fail
  // rather than return one rank's chunks stitched with another's.
  T a = MakeT("r", DType::kU8, {512}, 1, {}, {}, true);
  T b = a;
  b.bytes[300] ^= 1;
  BW_ASSERT_OK(Write(1, 0, 2, {a}));
  BW_ASSERT_OK(Write(1, 1, 2, {b}));
  BW_ASSERT_OK(Commit(env(), root_, 1, 2));
  auto reader = Open(1);
  ASSERT_NE(reader, nullptr);
  bool failed = false;
  for (int r = 0; r < 2; ++r) {
    std::vector<uint8_t> got(512);
    Status st = reader->Load(a.meta, got.data(), r);
    if (!st.ok()) {
      EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
      failed = true;
    } else {
      EXPECT_EQ(got, r == 0 ? a.bytes : b.bytes) << "rank " << r;
    }
  }
  EXPECT_TRUE(failed);
  EXPECT_EQ(VerifyStep(env(), root_, 1).code(), Code::kDataLoss);
}

TEST_F(CkptTest, IncrementalSavesReferenceUnchangedChunks) {
  constexpr int kWorld = 2;
  std::vector<std::vector<T>> s1(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    s1[r] = {MakeT("a", DType::kU8, {640}, 10 + r),               // 10 chunks
             MakeT("b", DType::kF32, {40}, 20 + r),               // 3 chunks
             MakeT("rep", DType::kU8, {256}, 30, {}, {}, true)};  // 4 chunks, replicated
  }
  WriteAndCommit(1, s1);

  // Step 2: a's chunk 3 and rep's chunk 0 change; b is unchanged.
  std::vector<std::vector<T>> s2 = s1;
  for (int r = 0; r < kWorld; ++r) {
    s2[r][0].bytes[3 * 64 + 5] ^= 0xff;
    s2[r][2].bytes[10] ^= 0xff;
  }
  uint64_t rep_written = 0;
  for (int r = 0; r < kWorld; ++r) {
    auto prev = ReadShardIndex(env(), root_, 1, r, kWorld);
    ASSERT_TRUE(prev.ok()) << prev.status().ToString();
    ShardStats stats;
    BW_ASSERT_OK(Write(2, r, kWorld, s2[r], 64, &*prev, &stats));
    ASSERT_TRUE(stats.written_bytes == 64 || stats.written_bytes == 128) << stats.written_bytes;
    rep_written += stats.written_bytes - 64;
    auto idx = ReadShardIndex(env(), root_, 2, r, kWorld);
    ASSERT_TRUE(idx.ok());
    const TensorEntry* a = idx->Find("a");
    for (size_t i = 0; i < a->chunks.size(); ++i) {
      if (i == 3) {
        EXPECT_TRUE(a->chunks[i].local());
      } else {
        EXPECT_EQ(a->chunks[i].ref_step, 1) << i;
        EXPECT_EQ(a->chunks[i].ref_rank, r) << i;
      }
    }
    for (const ChunkLoc& c : idx->Find("b")->chunks) EXPECT_EQ(c.ref_step, 1);
  }
  EXPECT_EQ(rep_written, 64u);  // the changed replicated chunk, once across ranks
  BW_ASSERT_OK(Commit(env(), root_, 2, kWorld, true));
  auto m2 = ReadCommitted(env(), root_, 2);
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m2->depends, std::vector<long>{1});
  EXPECT_LT(m2->stored_bytes, ReadCommitted(env(), root_, 1)->stored_bytes);

  // Step 3 against step 2: a's chunk 5 changes. Chunk 3 now references step 2,
  // the others step 1 directly (references are not chained).
  std::vector<std::vector<T>> s3 = s2;
  for (int r = 0; r < kWorld; ++r) {
    s3[r][0].bytes[5 * 64] ^= 0x01;
    auto prev = ReadShardIndex(env(), root_, 2, r, kWorld);
    ASSERT_TRUE(prev.ok());
    ShardStats stats;
    BW_ASSERT_OK(Write(3, r, kWorld, s3[r], 64, &*prev, &stats));
    EXPECT_EQ(stats.written_bytes, 64u);
    auto idx = ReadShardIndex(env(), root_, 3, r, kWorld);
    const TensorEntry* a = idx->Find("a");
    EXPECT_EQ(a->chunks[3].ref_step, 2);
    EXPECT_TRUE(a->chunks[5].local());
    EXPECT_EQ(a->chunks[0].ref_step, 1);
  }
  BW_ASSERT_OK(Commit(env(), root_, 3, kWorld, true));
  EXPECT_EQ(ReadCommitted(env(), root_, 3)->depends, (std::vector<long>{1, 2}));
  for (long step : {1L, 2L, 3L}) {
    const auto& want = step == 1 ? s1 : step == 2 ? s2 : s3;
    auto reader = Open(step);
    ASSERT_NE(reader, nullptr);
    for (int r = 0; r < kWorld; ++r) {
      for (const T& t : want[r]) {
        EXPECT_EQ(Load(reader.get(), t.meta, r), t.bytes) << "step " << step << " " << t.meta.name;
      }
    }
    VerifyReport rep;
    BW_EXPECT_OK(VerifyStep(env(), root_, step, true, &rep));
    EXPECT_EQ(rep.bytes, kWorld * (640u + 160u + 256u));
  }

  // A `previous` that is not comparable (other chunk size, other rank, or not
  // older) is ignored: the shard is written in full.
  auto prev0 = ReadShardIndex(env(), root_, 3, 0, kWorld);
  ASSERT_TRUE(prev0.ok());
  ShardStats stats;
  BW_ASSERT_OK(Write(4, 0, kWorld, s3[0], 128, &*prev0, &stats));
  EXPECT_EQ(stats.written_bytes, 640u + 160u + 128u);  // rep: 2 chunks of 128, one owned
  BW_ASSERT_OK(Write(4, 1, kWorld, s3[1], 64, &*prev0, &stats));
  EXPECT_EQ(stats.written_bytes, 640u + 160u + 128u);
  BW_ASSERT_OK(Write(3, 0, kWorld, s3[0], 64, &*prev0, &stats));  // previous == this step
  EXPECT_EQ(stats.written_bytes, 640u + 160u + 128u);
  // A tensor whose shape changed is written in full.
  std::vector<T> reshaped = s3[0];
  reshaped[1].meta.shape = {20, 2};
  auto prev2 = ReadShardIndex(env(), root_, 2, 0, kWorld);
  ASSERT_TRUE(prev2.ok());
  BW_ASSERT_OK(Write(5, 0, kWorld, reshaped, 64, &*prev2, &stats));
  EXPECT_EQ(stats.written_bytes, 64u + 160u);
}

TEST_F(CkptTest, CommitRefusesUncommittedReferencedStep) {
  std::vector<T> v1 = {MakeT("a", DType::kU8, {300}, 1)};
  BW_ASSERT_OK(Write(10, 0, 1, v1));  // never committed
  auto prev = ReadShardIndex(env(), root_, 10, 0, 1);
  ASSERT_TRUE(prev.ok());
  std::vector<T> v2 = v1;
  v2[0].bytes[0] ^= 1;
  BW_ASSERT_OK(Write(11, 0, 1, v2, 64, &*prev));
  Status st = Commit(env(), root_, 11, 1);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("step 10"));
  EXPECT_THAT(st.message(), HasSubstr("not committed"));
  EXPECT_FALSE(ReadCommitted(env(), root_, 11).ok());
  BW_ASSERT_OK(Commit(env(), root_, 10, 1));
  BW_ASSERT_OK(Commit(env(), root_, 11, 1));
  auto reader = Open(11);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(Load(reader.get(), v2[0].meta), v2[0].bytes);
}

TEST_F(CkptTest, CommitRefusesMissingOrForeignShards) {
  std::vector<std::vector<T>> ranks(4);
  for (int r = 0; r < 4; ++r) ranks[r] = {MakeT("x", DType::kU8, {100}, r)};
  for (int r : {0, 1, 3}) BW_ASSERT_OK(Write(3, r, 4, ranks[r]));
  Status st = Commit(env(), root_, 3, 4);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("rank 2"));
  EXPECT_THAT(st.message(), HasSubstr("step 3"));
  EXPECT_FALSE(fs::exists(StepDir(root_, 3) + "/COMMIT"));
  EXPECT_FALSE(fs::exists(StepDir(root_, 3) + "/MANIFEST"));
  EXPECT_EQ(ReadCommitted(env(), root_, 3).status().code(), Code::kNotFound);
  // Shards of another world do not count.
  st = Commit(env(), root_, 3, 2);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("rank 0"));
  // A shard under another rank's name is refused (its header names its rank).
  fs::copy_file(ShardPath(3, 1, 4), ShardPath(3, 2, 4));
  st = Commit(env(), root_, 3, 4);
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("rank 2"));
  // Corrupt chunk bytes: structure-only commit passes, verify_data refuses.
  BW_ASSERT_OK(Write(3, 2, 4, ranks[2]));
  std::string s = ReadAll(ShardPath(3, 1, 4));
  s[s.size() - 32 - 10] ^= 0x40;  // last data byte region, before the footer
  WriteAll(ShardPath(3, 1, 4), s);
  st = Commit(env(), root_, 3, 4, /*verify_data=*/true);
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("rank 1"));
  EXPECT_THAT(st.message(), HasSubstr("'x'"));
  BW_ASSERT_OK(Commit(env(), root_, 3, 4, /*verify_data=*/false));
  VerifyReport rep;
  st = VerifyStep(env(), root_, 3, /*full=*/true, &rep);
  EXPECT_EQ(st.code(), Code::kDataLoss);
  ASSERT_FALSE(rep.problems.empty());
  EXPECT_THAT(rep.problems[0], HasSubstr(ShardPath(3, 1, 4)));
  EXPECT_THAT(rep.problems[0], HasSubstr("checksum mismatch"));
  BW_EXPECT_OK(VerifyStep(env(), root_, 3, /*full=*/false));  // structure is fine
}

TEST_F(CkptTest, VerifyStepFullCountsEveryChunk) {
  std::vector<std::vector<T>> ranks(3);
  uint64_t chunks = 0, bytes = 0;
  for (int r = 0; r < 3; ++r) {
    ranks[r] = {MakeT("w", DType::kF32, {100}, 5, {}, {}, true),  // 400 B: 7 chunks
                MakeT("s", DType::kU8, {65}, 10 + r)};            // 2 chunks
    chunks += 7 + 2;
    bytes += 400 + 65;
  }
  WriteAndCommit(8, ranks);
  VerifyReport rep;
  BW_ASSERT_OK(VerifyStep(env(), root_, 8, true, &rep));
  EXPECT_EQ(rep.chunks, chunks);
  EXPECT_EQ(rep.bytes, bytes);
  EXPECT_TRUE(rep.problems.empty());
  EXPECT_EQ(VerifyStep(env(), root_, 9).code(), Code::kNotFound);
}

TEST_F(CkptTest, ListCommittedSkipsIncompleteSteps) {
  std::vector<T> v = {MakeT("a", DType::kU8, {10}, 1)};
  WriteAndCommit(1, {v});
  BW_ASSERT_OK(Write(2, 0, 1, v));  // uncommitted
  WriteAndCommit(3, {v});
  fs::remove(ShardPath(3, 0, 1));  // committed, then lost its shard
  fs::create_directories(root_ + "/step-abc");
  fs::create_directories(root_ + "/step-1");
  WriteAll(root_ + "/notes.txt", "x");
  std::vector<std::string> skipped;
  auto listed = ListCommitted(env(), root_, &skipped);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, std::vector<long>{1});
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr("step 2"));
  EXPECT_THAT(skipped[1], HasSubstr("step 3"));
  EXPECT_THAT(skipped[1], HasSubstr("missing"));
  EXPECT_EQ(*NewestCommitted(env(), root_), 1);
  EXPECT_EQ(ReadCommitted(env(), root_, 3).status().code(), Code::kDataLoss);
}

TEST_F(CkptTest, RewritingACommittedStepUncommitsItFirst) {
  std::vector<T> v1 = {MakeT("a", DType::kU8, {200}, 1)};
  WriteAndCommit(4, {v1});
  std::vector<T> v2 = {MakeT("a", DType::kU8, {200}, 2)};
  BW_ASSERT_OK(Write(4, 0, 1, v2));
  EXPECT_EQ(ReadCommitted(env(), root_, 4).status().code(), Code::kNotFound);
  EXPECT_FALSE(fs::exists(StepDir(root_, 4) + "/MANIFEST"));
  EXPECT_EQ(*NewestCommitted(env(), root_), -1);
  BW_ASSERT_OK(Commit(env(), root_, 4, 1));
  auto reader = Open(4);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(Load(reader.get(), v2[0].meta), v2[0].bytes);
}

TEST_F(CkptTest, ShardReplacedAfterCommitIsDetected) {
  // Same shapes, other bytes: the file size is unchanged, only the chunk hashes
  // in the index differ. MANIFEST pinned the index checksum.
  std::vector<T> v1 = {MakeT("a", DType::kU8, {200}, 1)};
  WriteAndCommit(4, {v1});
  const std::string manifest = ReadAll(StepDir(root_, 4) + "/MANIFEST");
  const std::string commit = ReadAll(StepDir(root_, 4) + "/COMMIT");
  const uint64_t size = fs::file_size(ShardPath(4, 0, 1));
  BW_ASSERT_OK(Write(4, 0, 1, {MakeT("a", DType::kU8, {200}, 2)}));
  ASSERT_EQ(fs::file_size(ShardPath(4, 0, 1)), size);
  WriteAll(StepDir(root_, 4) + "/MANIFEST", manifest);
  WriteAll(StepDir(root_, 4) + "/COMMIT", commit);
  ASSERT_TRUE(ReadCommitted(env(), root_, 4).ok());
  auto r = StepReader::Open(env(), root_, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("index checksum"));
  EXPECT_EQ(VerifyStep(env(), root_, 4).code(), Code::kDataLoss);
}

TEST_F(CkptTest, ManifestReplacedAfterCommitIsDetected) {
  // A valid MANIFEST from another commit of the same step (its own checksum line
  // is fine) under an older COMMIT: COMMIT pinned the MANIFEST's size and xxh3.
  WriteAndCommit(4, {{MakeT("a", DType::kU8, {200}, 1)}});
  const std::string commit = ReadAll(StepDir(root_, 4) + "/COMMIT");
  const std::string manifest = ReadAll(StepDir(root_, 4) + "/MANIFEST");
  std::string other;
  for (int i = 0; i < 100 && (other.empty() || other == manifest); ++i) {
    BW_ASSERT_OK(Commit(env(), root_, 4, 1));  // a new MANIFEST (new commit time)
    other = ReadAll(StepDir(root_, 4) + "/MANIFEST");
  }
  ASSERT_NE(other, manifest);
  WriteAll(StepDir(root_, 4) + "/COMMIT", commit);
  auto m = ReadCommitted(env(), root_, 4);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kDataLoss);
  EXPECT_THAT(m.status().message(), HasSubstr("MANIFEST"));
  EXPECT_EQ(*ListCommitted(env(), root_), std::vector<long>{});
}

TEST_F(CkptTest, ExtendedFilesAreDetected) {
  WriteAndCommit(4, {{MakeT("a", DType::kU8, {200}, 1)}});
  for (const std::string& name :
       {std::string("MANIFEST"), std::string("COMMIT"), ShardFileName(0, 1)}) {
    const std::string path = StepDir(root_, 4) + "/" + name;
    const std::string orig = ReadAll(path);
    WriteAll(path, orig + "\n");
    EXPECT_EQ(ReadCommitted(env(), root_, 4).status().code(), Code::kDataLoss) << name;
    EXPECT_EQ(VerifyStep(env(), root_, 4).code(), Code::kDataLoss) << name;
    WriteAll(path, orig);
  }
  BW_EXPECT_OK(VerifyStep(env(), root_, 4));
}

TEST_F(CkptTest, RetainKeepsNewestGoldenAndDependencies) {
  std::vector<T> v = {MakeT("a", DType::kU8, {100}, 1)};
  for (long s = 1; s <= 8; ++s) WriteAndCommit(s, {v});
  RetainOptions ro;
  ro.keep = 3;
  ro.golden_every = 4;
  std::vector<long> removed;
  BW_ASSERT_OK(Retain(env(), root_, ro, &removed));
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<long>{1, 2, 3, 5}));
  EXPECT_EQ(*ListCommitted(env(), root_), (std::vector<long>{4, 6, 7, 8}));
  for (long s : {1, 2, 3, 5}) EXPECT_FALSE(fs::exists(StepDir(root_, s))) << s;
  for (long s : {4, 6, 7, 8}) BW_EXPECT_OK(VerifyStep(env(), root_, s));

  // Dependencies: step 12 references step 9 (not the newest before it).
  WriteAndCommit(9, {v});
  std::vector<T> w = v;
  w[0].bytes[0] ^= 1;
  WriteAndCommit(10, {w});
  WriteAndCommit(11, {w});
  auto prev9 = ReadShardIndex(env(), root_, 9, 0, 1);
  ASSERT_TRUE(prev9.ok());
  std::vector<T> x = v;
  x[0].bytes[99] ^= 1;
  BW_ASSERT_OK(Write(12, 0, 1, x, 64, &*prev9));
  BW_ASSERT_OK(Commit(env(), root_, 12, 1));
  ASSERT_EQ(ReadCommitted(env(), root_, 12)->depends, std::vector<long>{9});
  // Uncommitted steps: an older one (with a stray tmp file) goes, a newer one stays.
  BW_ASSERT_OK(Write(5, 0, 1, v));
  WriteAll(StepDir(root_, 5) + "/" + ShardFileName(0, 1) + ".tmp.12345", "partial");
  BW_ASSERT_OK(Write(13, 0, 1, v));
  ro.keep = 1;
  ro.golden_every = 0;
  removed.clear();
  BW_ASSERT_OK(Retain(env(), root_, ro, &removed));
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<long>{4, 5, 6, 7, 8, 10, 11}));
  EXPECT_EQ(*ListCommitted(env(), root_), (std::vector<long>{9, 12}));
  EXPECT_TRUE(fs::exists(ShardPath(13, 0, 1)));
  auto reader = Open(12);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(Load(reader.get(), x[0].meta), x[0].bytes);
  // Idempotent, and never the newest committed step even with keep = 1.
  removed.clear();
  BW_ASSERT_OK(Retain(env(), root_, ro, &removed));
  EXPECT_TRUE(removed.empty());
  // A step whose COMMIT is gone (a crash mid-delete) is uncommitted and removed.
  WriteAndCommit(14, {v});
  fs::remove(StepDir(root_, 9) + "/COMMIT");  // 9 is now uncommitted; 12 depends on it
  removed.clear();
  BW_ASSERT_OK(Retain(env(), root_, ro, &removed));
  EXPECT_EQ(*ListCommitted(env(), root_), std::vector<long>{14});
  EXPECT_EQ(removed, (std::vector<long>{9, 12, 13}));  // 13: uncommitted, older than 14
  EXPECT_FALSE(fs::exists(StepDir(root_, 13)));
  // Nothing to do on an empty or absent root.
  BW_EXPECT_OK(Retain(env(), dir_ + "/absent", ro));
}

// ---------------------------------------------------------------------------
// Resharding

// Rows [a, b) of a row-major {rows, cols} f32 tensor.
std::vector<uint8_t> Rows(const std::vector<uint8_t>& whole, int64_t cols, int64_t a, int64_t b) {
  const size_t row = static_cast<size_t>(cols) * 4;
  return std::vector<uint8_t>(whole.begin() + a * row, whole.begin() + b * row);
}

// The region [lo, hi) of a row-major f32 tensor of shape `global`, row-major.
std::vector<uint8_t> Sub(const std::vector<uint8_t>& whole, const std::vector<int64_t>& global,
                         const std::vector<int64_t>& lo, const std::vector<int64_t>& hi) {
  int64_t volume = 1;
  for (size_t d = 0; d < lo.size(); ++d) volume *= hi[d] - lo[d];
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < volume; ++i) {
    int64_t rest = i, at = 0, stride = 1;
    for (size_t d = lo.size(); d-- > 0;) {
      const int64_t extent = hi[d] - lo[d];
      at += (lo[d] + rest % extent) * stride;
      rest /= extent;
      stride *= global[d];
    }
    out.insert(out.end(), whole.begin() + at * 4, whole.begin() + at * 4 + 4);
  }
  return out;
}

TensorMeta Piece(const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> global,
                 std::vector<int64_t> offsets) {
  TensorMeta m;
  m.name = name;
  m.dtype = DType::kF32;
  m.shape = std::move(shape);
  m.global_shape = std::move(global);
  m.offsets = std::move(offsets);
  return m;
}

TEST_F(CkptTest, ReshardsDimZeroFromFourRanksToThreeAndOne) {
  const std::vector<uint8_t> whole = RandomBytes(10 * 3 * 4, 77);
  const int64_t split4[][2] = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};  // 3,3,2,2 rows
  std::vector<std::vector<T>> ranks(4);
  for (int r = 0; r < 4; ++r) {
    T t;
    t.meta = Piece("emb", {split4[r][1] - split4[r][0], 3}, {10, 3}, {split4[r][0], 0});
    t.bytes = Rows(whole, 3, split4[r][0], split4[r][1]);
    ranks[r] = {t, MakeT("own", DType::kU8, {10}, r)};
  }
  // 20-byte chunks do not align with 12-byte rows: partial chunk reads.
  WriteAndCommit(20, ranks, /*chunk=*/20);
  auto reader = Open(20);
  ASSERT_NE(reader, nullptr);
  // Into 3 ranks: 4,3,3 rows.
  const int64_t split3[][2] = {{0, 4}, {4, 7}, {7, 10}};
  for (const auto& s : split3) {
    TensorMeta want = Piece("emb", {s[1] - s[0], 3}, {10, 3}, {s[0], 0});
    EXPECT_EQ(Load(reader.get(), want), Rows(whole, 3, s[0], s[1])) << s[0];
  }
  // Into 1 rank: the whole tensor, with or without an explicit global shape.
  EXPECT_EQ(Load(reader.get(), Piece("emb", {10, 3}, {}, {})), whole);
  EXPECT_EQ(Load(reader.get(), Piece("emb", {10, 3}, {10, 3}, {0, 0})), whole);
  // Every row range.
  for (int64_t a = 0; a < 10; ++a) {
    for (int64_t b = a + 1; b <= 10; ++b) {
      EXPECT_EQ(Load(reader.get(), Piece("emb", {b - a, 3}, {10, 3}, {a, 0})), Rows(whole, 3, a, b))
          << "rows " << a << ".." << b;
    }
  }
  // A rank's own piece via ReadRankTensors.
  auto blobs = ReadRankTensors(env(), root_, 20, 2);
  ASSERT_TRUE(blobs.ok());
  EXPECT_EQ((*blobs)[0].data, Rows(whole, 3, 6, 8));

  // Into pieces split along another dimension: columns 1..3 of every row.
  EXPECT_EQ(Load(reader.get(), Piece("emb", {10, 2}, {10, 3}, {0, 1})),
            Sub(whole, {10, 3}, {0, 1}, {10, 3}));
  // Wrong global shape or dtype.
  std::vector<uint8_t> buf(10 * 3 * 4);
  Status st = reader->Load(Piece("emb", {11, 3}, {}, {}), buf.data());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("global shape"));
  TensorMeta f64 = Piece("emb", {10, 3}, {}, {});
  f64.dtype = DType::kF64;
  std::vector<uint8_t> buf64(f64.nbytes());
  EXPECT_EQ(reader->Load(f64, buf64.data()).code(), Code::kInvalidArgument);
}

TEST_F(CkptTest, ReshardsPiecesSplitAlongAnotherDimAndRefusesGaps) {
  const std::vector<uint8_t> whole = RandomBytes(4 * 6 * 4, 5);
  // "cols": split along dim 1 by 2 ranks; "gap": rows 4..6 of 10 saved by nobody;
  // "diag": the diagonal blocks of a 2x2 grid.
  std::vector<std::vector<T>> ranks(2);
  for (int r = 0; r < 2; ++r) {
    T cols;
    cols.meta = Piece("cols", {4, 3}, {4, 6}, {0, 3 * r});
    cols.bytes = Sub(whole, {4, 6}, {0, 3 * r}, {4, 3 * r + 3});
    T gap = MakeT("gap", DType::kF32, {4, 2}, 9 + r, {10, 2}, {r == 0 ? 0 : 6, 0});
    T diag = MakeT("diag", DType::kF32, {2, 2}, 20 + r, {4, 4}, {2 * r, 2 * r});
    ranks[r] = {cols, gap, diag};
  }
  WriteAndCommit(1, ranks);
  auto reader = Open(1);
  ASSERT_NE(reader, nullptr);
  // Exact pieces load.
  EXPECT_EQ(Load(reader.get(), ranks[1][0].meta), ranks[1][0].bytes);
  EXPECT_EQ(Load(reader.get(), ranks[1][1].meta), ranks[1][1].bytes);
  // The whole, rows split instead of columns, and a region across both pieces.
  EXPECT_EQ(Load(reader.get(), Piece("cols", {4, 6}, {4, 6}, {0, 0})), whole);
  EXPECT_EQ(Load(reader.get(), Piece("cols", {2, 6}, {4, 6}, {2, 0})),
            Sub(whole, {4, 6}, {2, 0}, {4, 6}));
  EXPECT_EQ(Load(reader.get(), Piece("cols", {2, 3}, {4, 6}, {1, 2})),
            Sub(whole, {4, 6}, {1, 2}, {3, 5}));
  std::vector<uint8_t> buf(10 * 6 * 4, 0xAB);
  Status st = reader->Load(Piece("gap", {10, 2}, {10, 2}, {0, 0}), buf.data());
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("'gap'"));
  EXPECT_THAT(st.message(), HasSubstr("rows 4..6 of dim 0"));
  EXPECT_EQ(buf, std::vector<uint8_t>(10 * 6 * 4, 0xAB));  // nothing written
  // Rows both pieces cover still load.
  std::vector<uint8_t> got(2 * 2 * 4);
  BW_EXPECT_OK(reader->Load(Piece("gap", {2, 2}, {10, 2}, {7, 0}), got.data()));
  EXPECT_EQ(got,
            std::vector<uint8_t>(ranks[1][1].bytes.begin() + 8, ranks[1][1].bytes.begin() + 24));
  // A column of the gap misses the same rows.
  st = reader->Load(Piece("gap", {10, 1}, {10, 2}, {0, 1}), buf.data());
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("rows 4..6 of dim 0"));
  // Two diagonal blocks of a 2x2 grid: the message counts the elements.
  st = reader->Load(Piece("diag", {4, 4}, {4, 4}, {0, 0}), buf.data());
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("'diag'"));
  EXPECT_THAT(st.message(), HasSubstr("cover 8 of the 16 elements"));
}

TEST_F(CkptTest, ReshardsAGridOfPiecesIntoAnyRegion) {
  // A {6, 4, 5} tensor on a 2x2 grid (dims 0 and 2 split: 3+3 rows, 3+2 of dim 2),
  // as a 2-D device mesh saves it; "dup" is split along dim 0 only and replicated
  // over the other mesh dim (ranks 0 and 1 hold the same piece, as do 2 and 3).
  const std::vector<int64_t> g = {6, 4, 5};
  const std::vector<uint8_t> whole = RandomBytes(6 * 4 * 5 * 4, 11);
  const int64_t rows[2][2] = {{0, 3}, {3, 6}}, last[2][2] = {{0, 3}, {3, 5}};
  std::vector<std::vector<T>> ranks(4);
  for (int r = 0; r < 4; ++r) {
    const auto& rr = rows[r / 2];
    const auto& ll = last[r % 2];
    T grid;
    grid.meta = Piece("grid", {rr[1] - rr[0], 4, ll[1] - ll[0]}, g, {rr[0], 0, ll[0]});
    grid.bytes = Sub(whole, g, {rr[0], 0, ll[0]}, {rr[1], 4, ll[1]});
    T dup;
    dup.meta = Piece("dup", {3, 4, 5}, g, {3 * (r / 2), 0, 0});
    dup.bytes = Sub(whole, g, {3 * (r / 2), 0, 0}, {3 * (r / 2) + 3, 4, 5});
    ranks[r] = {grid, dup};
  }
  WriteAndCommit(3, ranks, /*chunk=*/28);  // chunks straddle rows and pieces' runs
  auto reader = Open(3);
  ASSERT_NE(reader, nullptr);
  for (const char* name : {"grid", "dup"}) {
    EXPECT_EQ(Load(reader.get(), Piece(name, g, g, {0, 0, 0})), whole) << name;
    // Every box of the global tensor, whichever pieces it crosses.
    for (int64_t a0 = 0; a0 < 6; ++a0)
      for (int64_t b0 = a0 + 1; b0 <= 6; ++b0)
        for (int64_t a1 = 0; a1 < 4; ++a1)
          for (int64_t b1 = a1 + 1; b1 <= 4; ++b1)
            for (int64_t a2 = 0; a2 < 5; ++a2)
              for (int64_t b2 = a2 + 1; b2 <= 5; ++b2) {
                TensorMeta want = Piece(name, {b0 - a0, b1 - a1, b2 - a2}, g, {a0, a1, a2});
                ASSERT_EQ(Load(reader.get(), want), Sub(whole, g, {a0, a1, a2}, {b0, b1, b2}))
                    << name << " at " << a0 << "," << a1 << "," << a2;
              }
  }
  // An empty region needs no piece.
  BW_EXPECT_OK(reader->Load(Piece("grid", {0, 4, 5}, g, {6, 0, 0}), nullptr));
}

TEST_F(CkptTest, ReshardRefusesDistinctPiecesThatOverlap) {
  const std::vector<uint8_t> whole = RandomBytes(6 * 2 * 4, 3);
  std::vector<std::vector<T>> ranks(2);
  const int64_t span[2][2] = {{0, 4}, {2, 6}};  // rows 2..4 saved twice, differently cut
  for (int r = 0; r < 2; ++r) {
    T t;
    t.meta = Piece("w", {span[r][1] - span[r][0], 2}, {6, 2}, {span[r][0], 0});
    t.bytes = Rows(whole, 2, span[r][0], span[r][1]);
    ranks[r] = {t};
  }
  WriteAndCommit(4, ranks);
  auto reader = Open(4);
  ASSERT_NE(reader, nullptr);
  std::vector<uint8_t> buf(6 * 2 * 4);
  Status st = reader->Load(Piece("w", {6, 2}, {6, 2}, {0, 0}), buf.data());
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("'w'"));
  EXPECT_THAT(st.message(), HasSubstr("overlap"));
  // Regions inside one piece still load (the exact piece, or rows only one covers).
  EXPECT_EQ(Load(reader.get(), ranks[1][0].meta), ranks[1][0].bytes);
  EXPECT_EQ(Load(reader.get(), Piece("w", {1, 2}, {6, 2}, {5, 0})), Rows(whole, 2, 5, 6));
}

// ---------------------------------------------------------------------------
// Corruption anywhere: bit flips and truncations

// Two committed steps of world 2 with 64-byte chunks: replicated (dedup), dim-0
// sharded, per-rank, scalar and empty tensors; step 2 is incremental over step 1.
class CkptCorruptionTest : public CkptTest {
 protected:
  void SetUp() override {
    CkptTest::SetUp();
    for (int r = 0; r < 2; ++r) {
      want_[1].push_back({MakeT("w", DType::kF32, {40}, 1, {}, {}, true),
                          MakeT("emb", DType::kI32, {4, 4}, 10 + r, {8, 4}, {4L * r, 0}),
                          MakeT("opt", DType::kU8, {150}, 20 + r),
                          MakeT("s", DType::kI64, {}, 30 + r), MakeT("e", DType::kF32, {0}, 0)});
    }
    WriteAndCommit(1, want_[1]);
    want_[2] = want_[1];
    for (int r = 0; r < 2; ++r) {
      want_[2][r][0].bytes[150] ^= 0x5a;  // w chunk 2
      want_[2][r][2].bytes[70] ^= 0x5a;   // opt chunk 1
      want_[2][r][3].bytes[0] ^= 0x5a;    // s
      auto prev = ReadShardIndex(env(), root_, 1, r, 2);
      ASSERT_TRUE(prev.ok());
      BW_ASSERT_OK(Write(2, r, 2, want_[2][r], 64, &*prev));
    }
    BW_ASSERT_OK(Commit(env(), root_, 2, 2, true));
    ASSERT_EQ(ReadCommitted(env(), root_, 2)->depends, std::vector<long>{1});
    for (long step : {1L, 2L}) {
      for (const std::string& n : {ShardFileName(0, 2), ShardFileName(1, 2),
                                   std::string("MANIFEST"), std::string("COMMIT")}) {
        files_.push_back({step, StepDir(root_, step) + "/" + n});
      }
    }
  }

  // Opens `step` and loads every tensor of every rank: each read either fails with
  // DATA_LOSS / NOT_FOUND or returns exactly the saved bytes. Returns a
  // description of the first violation, empty if none.
  std::string CheckLoads(long step) {
    auto reader = StepReader::Open(env(), root_, step);
    if (!reader.ok()) {
      if (IsDataLossOrNotFound(reader.status())) return "";
      return "step " + std::to_string(step) + " Open: unexpected " + reader.status().ToString();
    }
    for (int r = 0; r < 2; ++r) {
      for (const T& t : want_[step][r]) {
        std::vector<uint8_t> got(t.bytes.size(), 0xCD);
        Status st = (*reader)->Load(t.meta, got.data(), r);
        const std::string what = "step " + std::to_string(step) + " Load " + t.meta.name +
                                 " of rank " + std::to_string(r);
        if (!st.ok() && !IsDataLossOrNotFound(st)) return what + ": unexpected " + st.ToString();
        if (st.ok() && got != t.bytes) return what + " returned WRONG BYTES";
      }
    }
    return "";
  }

  // After corrupting a file of step `owner`: VerifyStep(full) of `owner` fails with
  // DATA_LOSS or NOT_FOUND, and no read of `owner` or of a later step (which may
  // reference it) returns wrong bytes.
  void ExpectDetected(long owner, const std::string& what) {
    Status v = VerifyStep(env(), root_, owner, /*full=*/true);
    ASSERT_FALSE(v.ok()) << what << ": corruption not detected by VerifyStep";
    ASSERT_TRUE(IsDataLossOrNotFound(v)) << what << ": " << v.ToString();
    for (long step = owner; step <= 2; ++step) ASSERT_EQ(CheckLoads(step), "") << what;
  }

  std::map<long, std::vector<std::vector<T>>> want_;
  std::vector<std::pair<long, std::string>> files_;  // (step, path)
};

TEST_F(CkptCorruptionTest, BitFlipsAnywhereAreDetected) {
  // Every byte of every file, with a rotating subset of kBitsPerByte of its 8 bit
  // positions (every bit position is hit across consecutive bytes) to bound the
  // runtime: ~14k flips, 3 per byte; 1 per byte under ASan, which is 7x slower.
  uint64_t flips = 0, bytes = 0;
  for (const auto& [step, path] : files_) {
    const std::string orig = ReadAll(path);
    ASSERT_FALSE(orig.empty());
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    for (size_t i = 0; i < orig.size() && !HasFatalFailure(); ++i) {
      for (size_t j = 0; j < kBitsPerByte && !HasFatalFailure(); ++j) {
        const int bit = static_cast<int>((i * kBitsPerByte + j) % 8);
        const char flipped = static_cast<char>(orig[i] ^ (1 << bit));
        ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(i)), 1);
        ExpectDetected(step, path + ": bit " + std::to_string(bit) + " of byte " +
                                 std::to_string(i) + " flipped");
        ASSERT_EQ(::pwrite(fd, &orig[i], 1, static_cast<off_t>(i)), 1);
        ++flips;
      }
      ++bytes;
    }
    ::close(fd);
  }
  for (long step : {1L, 2L}) BW_EXPECT_OK(VerifyStep(env(), root_, step));
  EXPECT_GT(bytes, 4000u);
  RecordProperty("flips", static_cast<int>(flips));
}

TEST_F(CkptCorruptionTest, TruncationsAnywhereAreDetected) {
  uint64_t cuts = 0;
  for (const auto& [step, path] : files_) {
    const std::string orig = ReadAll(path);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    for (size_t len = 0; len < orig.size() && !HasFatalFailure(); ++len) {
      ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(len)), 0);
      ExpectDetected(step, path + " truncated to " + std::to_string(len) + " bytes");
      // Restore the tail in place (no O_TRUNC rewrite: cheap on every file system).
      const ssize_t n = static_cast<ssize_t>(orig.size() - len);
      ASSERT_EQ(::pwrite(fd, orig.data() + len, static_cast<size_t>(n), static_cast<off_t>(len)),
                n);
      ++cuts;
    }
    ::close(fd);
    // A missing file is detected too.
    fs::remove(path);
    ExpectDetected(step, path + " removed");
    WriteAll(path, orig);
  }
  for (long step : {1L, 2L}) BW_EXPECT_OK(VerifyStep(env(), root_, step));
  RecordProperty("truncations", static_cast<int>(cuts));
}

// ---------------------------------------------------------------------------
// Staging ring

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir(fs::is_directory("/dev/shm") ? "/dev/shm" : "/tmp", "bw_staging_test");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Stager> OpenStager(int rank = 0, int world = 1, int slots = 2,
                                     uint64_t chunk = 64, const std::string& dir = "") {
    auto s = Stager::Open(dir.empty() ? dir_ : dir, rank, world, slots, chunk);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // Seals (slot, seq) the way the agent does: pin, which seals, then unpin.
  void Seal(const StageResult& r, int rank = 0) {
    auto reader = RingReader::Open(RingPath(dir_, rank));
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    auto snap = (*reader)->Pin(r.slot, r.seq);
    ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  }
  // Restores every tensor of `want` from `step`, asserting the bytes.
  void ExpectRestores(Stager* s, long step, const std::vector<T>& want) {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::pair<TensorMeta, void*>> dsts;
    bufs.reserve(want.size());
    for (const T& t : want) {
      bufs.emplace_back(t.bytes.size(), 0xCD);
      dsts.emplace_back(t.meta, bufs.back().data());
    }
    Status st = s->Restore(step, dsts);
    ASSERT_TRUE(st.ok()) << "step " << step << ": " << st.ToString();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(bufs[i], want[i].bytes) << "step " << step << " " << want[i].meta.name;
    }
  }

  // Forks a trainer that opens rank 0's ring (world 1) and is killed half-way
  // through copying a `bytes`-byte uint8 tensor "big" as `step`: the second half
  // of its source is unreadable and the fault is turned into SIGKILL, so the
  // slot it claimed is left WRITING. Deterministic.
  void KillStagerMidCopy(int slots, uint64_t chunk, long step, size_t bytes) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(60);  // a hung child dies by SIGALRM, failing the test below
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      const size_t readable = bytes / 2;
      const size_t head = (readable + page - 1) / page * page;
      void* mem = ::mmap(nullptr, head + bytes + page, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) ::_exit(10);
      uint8_t* base = static_cast<uint8_t*>(mem);
      if (::mprotect(base + head, bytes + page, PROT_NONE) != 0) ::_exit(11);
      uint8_t* src = base + head - readable;
      std::memset(src, 0xAB, readable);
      struct sigaction sa {};
      sa.sa_handler = [](int) { ::raise(SIGKILL); };
      sigemptyset(&sa.sa_mask);
      ::sigaction(SIGSEGV, &sa, nullptr);
      ::sigaction(SIGBUS, &sa, nullptr);
      auto child = Stager::Open(dir_, 0, 1, slots, chunk);
      if (!child.ok()) ::_exit(12);
      TensorView v;
      v.meta.name = "big";
      v.meta.shape = {static_cast<int64_t>(bytes)};
      v.data = src;
      auto r = (*child)->Stage(step, {v});
      ::_exit(r.ok() ? 13 : 14);  // not reached: the copy faults
    }
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "child exit " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  }

  std::string dir_;
};

std::vector<T> StageSet(uint64_t seed, size_t big = 1000) {
  return {MakeT("f32", DType::kF32, {static_cast<int64_t>(big / 4)}, seed),
          MakeT("empty", DType::kU8, {0}, seed + 1), MakeT("scalar", DType::kI64, {}, seed + 2),
          MakeT("bf16", DType::kBF16, {3, 7}, seed + 3)};
}

TEST_F(StagingTest, StageRestoreRoundTrip) {
  auto s = OpenStager(0, 1, 3);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->mapped_bytes(), 0u);  // allocated at the first Stage
  EXPECT_TRUE(s->SealedSteps().empty());
  const std::vector<T> ts = StageSet(1);
  auto r = s->Stage(10, Views(ts));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->slot, 0);
  EXPECT_GT(r->seq, 0u);
  EXPECT_GT(r->generation, 0u);
  EXPECT_GE(r->bytes, 1000u + 8u + 42u);
  EXPECT_GT(s->mapped_bytes(), 3 * r->bytes);
  EXPECT_TRUE(fs::exists(RingPath(dir_, 0)));
  // Stage seals as it copies: restorable at once.
  EXPECT_EQ(s->SealedSteps(), std::vector<long>{10});
  ExpectRestores(s.get(), 10, ts);
  // Only sealed slots are restorable: one staged without hashes is not, until sealed.
  auto u = StageUnsealed(*s, 12, Views(ts));
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  std::vector<uint8_t> buf(1000);
  EXPECT_EQ(s->Restore(12, {{ts[0].meta, buf.data()}}).code(), Code::kNotFound);
  Seal(*u);
  EXPECT_EQ(s->SealedSteps(), (std::vector<long>{10, 12}));
  ExpectRestores(s.get(), 12, ts);
  auto all = s->RestoreAll(10);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ((*all)[i].name, ts[i].meta.name);
    EXPECT_EQ((*all)[i].data, ts[i].bytes);
  }
  // Errors name what is wrong.
  TensorMeta reshaped = ts[0].meta;
  reshaped.shape = {50, 5};
  Status st = s->Restore(10, {{reshaped, buf.data()}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("'f32'"));
  TensorMeta missing = ts[0].meta;
  missing.name = "nope";
  EXPECT_EQ(s->Restore(10, {{missing, buf.data()}}).code(), Code::kNotFound);
  EXPECT_EQ(s->Restore(11, {{ts[0].meta, buf.data()}}).code(), Code::kNotFound);
  EXPECT_EQ(s->RestoreAll(11).status().code(), Code::kNotFound);
  // A new trainer process of the same rank finds the snapshot.
  s.reset();
  auto s2 = OpenStager(0, 1, 3);
  ASSERT_NE(s2, nullptr);
  ExpectRestores(s2.get(), 10, ts);
  EXPECT_EQ(s2->SealedSteps(), (std::vector<long>{10, 12}));
}

TEST_F(StagingTest, LargeSaveCopiedByTwoThreadsIsExact) {
  // Over the 32 MiB parallel-copy threshold, with sizes that put the split between
  // the copy threads inside a tensor, and an empty tensor in the middle.
  auto s = OpenStager(0, 1, 2, 1 << 20);
  ASSERT_NE(s, nullptr);
  const std::vector<T> ts = {
      MakeT("a", DType::kU8, {(17 << 20) + 13}, 1), MakeT("empty", DType::kF32, {0}, 2),
      MakeT("b", DType::kF32, {(5 << 20) + 7}, 3), MakeT("c", DType::kU8, {4099}, 4)};
  auto r = s->Stage(7, Views(ts));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Seal(*r);
  ExpectRestores(s.get(), 7, ts);
}

TEST_F(StagingTest, OpenRejectsBadArguments) {
  EXPECT_EQ(Stager::Open(dir_, 0, 1, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Stager::Open(dir_, 0, 1, 2, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(RingReader::Open(RingPath(dir_, 5)).status().code(), Code::kNotFound);
  WriteAll(RingPath(dir_, 6), std::string(8192, 'x'));
  EXPECT_EQ(RingReader::Open(RingPath(dir_, 6)).status().code(), Code::kDataLoss);
  auto s = OpenStager();
  TensorView v;
  v.meta.name = "x";
  v.meta.shape = {4};
  EXPECT_EQ(s->Stage(1, {v}).status().code(), Code::kInvalidArgument);  // null data
}

TEST_F(StagingTest, PinSealsAndChunkHashesMatchXxh3) {
  auto s = OpenStager(2, 4, 2, 64);
  ASSERT_NE(s, nullptr);
  const std::vector<T> ts = {MakeT("a", DType::kU8, {1000}, 3), MakeT("b", DType::kF64, {0}, 4),
                             MakeT("c", DType::kF32, {}, 5), MakeT("d", DType::kI16, {64}, 6)};
  auto r = s->Stage(7, Views(ts));
  ASSERT_TRUE(r.ok());
  auto reader = RingReader::Open(RingPath(dir_, 2));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->generation(), r->generation);
  EXPECT_EQ((*reader)->Pin(r->slot, r->seq + 1).status().code(), Code::kNotFound);
  EXPECT_EQ((*reader)->Pin(2, r->seq).status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*reader)->Pin(-1, r->seq).status().code(), Code::kInvalidArgument);
  double hash_s = 0;
  auto snap = (*reader)->Pin(r->slot, r->seq, &hash_s);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  const Snapshot& sn = **snap;
  EXPECT_EQ(sn.step(), 7);
  EXPECT_EQ(sn.rank(), 2);
  EXPECT_EQ(sn.world(), 4);
  EXPECT_EQ(sn.chunk_size(), 64u);
  EXPECT_EQ(sn.bytes(), 1000u + 0u + 4u + 128u);
  EXPECT_GE(hash_s, 0.0);
  ASSERT_EQ(sn.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorView& v = sn.tensors()[i];
    EXPECT_EQ(v.meta.name, ts[i].meta.name);
    EXPECT_EQ(v.meta.dtype, ts[i].meta.dtype);
    EXPECT_EQ(v.meta.shape, ts[i].meta.shape);
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    const size_t n = ts[i].bytes.size();
    if (n > 0) {
      EXPECT_EQ(std::vector<uint8_t>(p, p + n), ts[i].bytes) << v.meta.name;
    }
    ASSERT_NE(v.chunk_hashes, nullptr);
    for (size_t c = 0; c * 64 < n; ++c) {
      EXPECT_EQ(v.chunk_hashes[c], XXH3_64bits(p + c * 64, std::min<size_t>(64, n - c * 64)))
          << v.meta.name << " chunk " << c;
    }
  }
  EXPECT_EQ(s->SealedSteps(), std::vector<long>{7});
  EXPECT_EQ((*reader)->Steps(), std::vector<long>{7});
  auto again = (*reader)->PinStep(7);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->step(), 7);
  EXPECT_EQ((*reader)->PinStep(8).status().code(), Code::kNotFound);
}

// StageFilled: the filler writes the slot; with the hashes it checked, the slot is
// SEALED at once with them (restorable without a sealing pass); a failed fill, or too
// few hashes, leaves nothing staged and the newest snapshot before it restorable.
TEST_F(StagingTest, StageFilledPublishesSealedOrNothing) {
  auto s = OpenStager(0, 1, 3, 64);
  ASSERT_NE(s, nullptr);
  const std::vector<T> ts = {MakeT("a", DType::kU8, {150}, 3), MakeT("b", DType::kF32, {0}, 4)};
  std::vector<TensorMeta> metas;
  std::vector<std::vector<uint64_t>> hashes;
  for (const T& t : ts) {
    metas.push_back(t.meta);
    hashes.emplace_back();
    for (size_t c = 0; c * 64 < t.bytes.size(); ++c) {
      hashes.back().push_back(
          XXH3_64bits(t.bytes.data() + c * 64, std::min<size_t>(64, t.bytes.size() - c * 64)));
    }
  }
  auto copy = [&](const std::vector<uint8_t*>& dsts) {
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].bytes.empty()) std::memcpy(dsts[i], ts[i].bytes.data(), ts[i].bytes.size());
    }
    return Status::Ok();
  };
  ASSERT_TRUE(s->StageFilled(5, metas, copy, &hashes).ok());
  EXPECT_EQ(s->SealedSteps(), std::vector<long>{5});  // sealed without a reader's pass
  ExpectRestores(s.get(), 5, ts);
  auto broken = [](const std::vector<uint8_t*>&) { return DataLoss("transfer broke"); };
  EXPECT_EQ(s->StageFilled(6, metas, broken, &hashes).status().code(), Code::kDataLoss);
  std::vector<std::vector<uint64_t>> short_hashes = {{hashes[0][0]}, {}};
  EXPECT_EQ(s->StageFilled(7, metas, copy, &short_hashes).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(s->SealedSteps(), std::vector<long>{5});
  auto reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->Steps(), std::vector<long>{5});
  ExpectRestores(s.get(), 5, ts);
}

TEST_F(StagingTest, PinWithoutSealThenEnsureSealed) {
  auto s = OpenStager();
  const std::vector<T> ts = {MakeT("a", DType::kU8, {200}, 3)};
  auto r = StageUnsealed(*s, 1, Views(ts));
  ASSERT_TRUE(r.ok());
  auto reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(reader.ok());
  auto snap = (*reader)->Pin(r->slot, r->seq, nullptr, /*seal=*/false);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_TRUE(s->SealedSteps().empty());
  double hash_s = 0;
  BW_ASSERT_OK((*snap)->EnsureSealed(&hash_s));
  EXPECT_EQ(s->SealedSteps(), std::vector<long>{1});
  const TensorView& v = (*snap)->tensors()[0];
  for (size_t c = 0; c * 64 < 200; ++c) {
    EXPECT_EQ(v.chunk_hashes[c],
              XXH3_64bits(ts[0].bytes.data() + c * 64, std::min<size_t>(64, 200 - c * 64)));
  }
}

TEST_F(StagingTest, WriterNeverOverwritesPinnedSlotOrNewestSnapshot) {
  auto s = OpenStager(0, 1, /*slots=*/2);
  ASSERT_NE(s, nullptr);
  const auto a = StageSet(10), b = StageSet(20), c = StageSet(30), d = StageSet(40);
  auto r1 = s->Stage(1, Views(a));
  ASSERT_TRUE(r1.ok());
  auto reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(reader.ok());
  {
    auto pinned = (*reader)->Pin(r1->slot, r1->seq);  // the agent persists step 1
    ASSERT_TRUE(pinned.ok());
    auto r2 = s->Stage(2, Views(b));
    ASSERT_TRUE(r2.ok()) << r2.status().ToString();
    EXPECT_NE(r2->slot, r1->slot);
    // Slot 1 is pinned and slot 2 holds the newest snapshot: no slot to write.
    auto r3 = s->Stage(3, Views(c));
    ASSERT_FALSE(r3.ok());
    EXPECT_EQ(r3.status().code(), Code::kUnavailable);
    // The pinned snapshot is intact.
    const uint8_t* p = static_cast<const uint8_t*>((*pinned)->tensors()[0].data);
    EXPECT_EQ(std::vector<uint8_t>(p, p + a[0].bytes.size()), a[0].bytes);
    Seal(*r2);
  }
  // Unpinned: step 3 goes to step 1's slot, never the newest (step 2's).
  auto r3 = s->Stage(3, Views(c));
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ(r3->slot, r1->slot);
  EXPECT_GT(r3->seq, r1->seq);
  ExpectRestores(s.get(), 2, b);
  EXPECT_EQ(s->Restore(1, {}).code(), Code::kNotFound);  // overwritten
  Seal(*r3);
  // Pin the newest (3): step 4 takes step 2's slot; step 5 then has none.
  {
    auto pinned = (*reader)->Pin(r3->slot, r3->seq);
    ASSERT_TRUE(pinned.ok());
    auto r4 = s->Stage(4, Views(d));
    ASSERT_TRUE(r4.ok()) << r4.status().ToString();
    EXPECT_NE(r4->slot, r3->slot);
    EXPECT_EQ(s->Stage(5, Views(a)).status().code(), Code::kUnavailable);
    Seal(*r4);
  }
  ExpectRestores(s.get(), 3, c);
  ExpectRestores(s.get(), 4, d);
  EXPECT_EQ(s->SealedSteps(), (std::vector<long>{3, 4}));
  // Without pins, a third save replaces the oldest, keeping the newest.
  auto r5 = s->Stage(5, Views(a));
  ASSERT_TRUE(r5.ok());
  EXPECT_EQ(r5->slot, r3->slot);
  ExpectRestores(s.get(), 4, d);
}

// The writer must know which slot holds its newest snapshot even when pins make
// it use the slots unevenly, so that a crash mid-copy never destroys it.
TEST_F(StagingTest, NewestSnapshotSurvivesUnevenSlotUse) {
  auto s = OpenStager(0, 1, /*slots=*/3);
  ASSERT_NE(s, nullptr);
  std::map<long, StageResult> at;
  auto stage = [&](Stager* st, long step) {
    auto r = st->Stage(step, Views(StageSet(static_cast<uint64_t>(step))));
    EXPECT_TRUE(r.ok()) << "step " << step << ": " << r.status().ToString();
    if (r.ok()) at[step] = *r;
  };
  stage(s.get(), 1);
  stage(s.get(), 2);
  auto reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(reader.ok());
  {
    auto pinned = (*reader)->Pin(at[2].slot, at[2].seq);  // a slow persist of step 2
    ASSERT_TRUE(pinned.ok());
    for (long step = 3; step <= 6; ++step) stage(s.get(), step);
  }
  stage(s.get(), 7);
  ASSERT_FALSE(HasFailure());
  Seal(at[7]);
  // Step 7 is the newest snapshot; a trainer dies copying step 8.
  KillStagerMidCopy(3, 64, 8, 2048);
  auto s2 = OpenStager(0, 1, 3);
  ASSERT_NE(s2, nullptr);
  ExpectRestores(s2.get(), 7, StageSet(7));
  // Staged normally, step 8 does not go to step 7's slot either.
  stage(s2.get(), 8);
  EXPECT_NE(at[8].slot, at[7].slot) << "step 8 overwrote the slot of the newest snapshot (7)";
}

// A trainer killed in the middle of copying into a slot: the slot stays WRITING
// (a Stager that does not reopen cannot use it), the previous sealed snapshot is
// intact, and the next Stager::Open of the rank reclaims the slot.
TEST_F(StagingTest, WriterKilledMidCopyKeepsNewestSealedSnapshot) {
  constexpr size_t kBig = 1 << 20;
  const std::vector<T> first = {MakeT("big", DType::kU8, {kBig}, 1)};
  auto s = OpenStager(0, 1, 2, 64 << 10);
  ASSERT_NE(s, nullptr);
  auto r1 = s->Stage(1, Views(first));
  ASSERT_TRUE(r1.ok());
  Seal(*r1);
  auto before = OpenStager(0, 1, 2, 64 << 10);  // opened before the crash
  ASSERT_NE(before, nullptr);

  KillStagerMidCopy(2, 64 << 10, 2, kBig);
  ASSERT_FALSE(HasFatalFailure());

  // The other slot is stuck WRITING and the first holds the newest snapshot.
  auto stuck = before->Stage(3, Views(first));
  EXPECT_EQ(stuck.status().code(), Code::kUnavailable) << stuck.status().ToString();
  auto reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->Steps(), std::vector<long>{1});
  ExpectRestores(before.get(), 1, first);

  // A restarted trainer reclaims the slot.
  auto after = OpenStager(0, 1, 2, 64 << 10);
  ASSERT_NE(after, nullptr);
  ExpectRestores(after.get(), 1, first);
  const std::vector<T> third = {MakeT("big", DType::kU8, {kBig}, 3)};
  auto r3 = after->Stage(3, Views(third));
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_NE(r3->slot, r1->slot);
  Seal(*r3);
  ExpectRestores(after.get(), 3, third);
  ExpectRestores(after.get(), 1, first);
}

TEST_F(StagingTest, GrowingTheStateRegrowsTheRing) {
  auto s = OpenStager(0, 1, 2);
  ASSERT_NE(s, nullptr);
  const std::vector<T> small = {MakeT("x", DType::kU8, {100}, 1)};
  auto r1 = s->Stage(1, Views(small));
  ASSERT_TRUE(r1.ok());
  const uint64_t mapped1 = s->mapped_bytes();
  auto old_reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(old_reader.ok());
  auto old_snap = (*old_reader)->Pin(r1->slot, r1->seq);
  ASSERT_TRUE(old_snap.ok());

  // Same layout, more bytes: no regrow for a save that still fits.
  auto r2 = s->Stage(2, Views(small));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->generation, r1->generation);
  EXPECT_EQ(s->mapped_bytes(), mapped1);

  const std::vector<T> big = {MakeT("x", DType::kU8, {100}, 1),
                              MakeT("y", DType::kF32, {300000}, 2)};
  auto r3 = s->Stage(3, Views(big));
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_NE(r3->generation, r1->generation);
  EXPECT_GT(s->mapped_bytes(), mapped1 + 2 * 1200000);
  // A reader of the old file still sees its generation and its pinned snapshot.
  EXPECT_EQ((*old_reader)->generation(), r1->generation);
  const uint8_t* p = static_cast<const uint8_t*>((*old_snap)->tensors()[0].data);
  EXPECT_EQ(std::vector<uint8_t>(p, p + 100), small[0].bytes);
  // A new reader sees the new ring, which holds only the new snapshot.
  auto reader = RingReader::Open(RingPath(dir_, 0));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->generation(), r3->generation);
  Seal(*r3);
  EXPECT_EQ((*reader)->Steps(), std::vector<long>{3});
  ExpectRestores(s.get(), 3, big);
  EXPECT_EQ(s->Restore(1, {}).code(), Code::kNotFound);
  // Shrinking back does not regrow.
  auto r4 = s->Stage(4, Views(small));
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(r4->generation, r3->generation);
}

TEST_F(StagingTest, StageCopyIntoAnotherDirectoryRestoresIdentically) {
  auto s = OpenStager(1, 2, 2);
  ASSERT_NE(s, nullptr);
  const std::vector<T> ts = StageSet(5, 4000);
  auto r = s->Stage(12, Views(ts));
  ASSERT_TRUE(r.ok());
  auto reader = RingReader::Open(RingPath(dir_, 1));
  ASSERT_TRUE(reader.ok());
  auto snap = (*reader)->Pin(r->slot, r->seq);
  ASSERT_TRUE(snap.ok());
  const std::string other = dir_ + "/peer";
  fs::create_directories(other);
  BW_ASSERT_OK(StageCopy(other, 3, **snap));
  auto copy = OpenStager(1, 2, 3, 64, other);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->SealedSteps(), std::vector<long>{12});  // sealed, restorable
  ExpectRestores(copy.get(), 12, ts);
  auto creader = RingReader::Open(RingPath(other, 1));
  ASSERT_TRUE(creader.ok());
  auto csnap = (*creader)->PinStep(12);
  ASSERT_TRUE(csnap.ok());
  EXPECT_EQ((*csnap)->rank(), 1);
  EXPECT_EQ((*csnap)->world(), 2);
  ASSERT_EQ((*csnap)->tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const size_t n = (ts[i].bytes.size() + 63) / 64;
    for (size_t c = 0; c < n; ++c) {
      EXPECT_EQ((*csnap)->tensors()[i].chunk_hashes[c], (*snap)->tensors()[i].chunk_hashes[c]);
    }
  }
}

// A sealed snapshot persisted to disk reuses its chunk hashes (the agent's path).
TEST_F(StagingTest, SealedSnapshotPersistsToDisk) {
  auto s = OpenStager(0, 1, 2, 64);
  const std::vector<T> ts = StageSet(9, 3000);
  auto r = s->Stage(5, Views(ts));
  ASSERT_TRUE(r.ok());
  auto reader = RingReader::Open(RingPath(dir_, 0));
  auto snap = (*reader)->Pin(r->slot, r->seq);
  ASSERT_TRUE(snap.ok());
  const std::string root = dir_ + "/disk";
  WriteOptions o;
  o.chunk_size = (*snap)->chunk_size();
  ShardStats stats;
  BW_ASSERT_OK(WriteShard(Env::Default(), root, 5, 0, 1, (*snap)->tensors(), o, &stats));
  EXPECT_EQ(stats.hash_s, 0.0);  // nothing hashed: the seal's hashes were used
  BW_ASSERT_OK(Commit(Env::Default(), root, 5, 1, /*verify_data=*/true));
  auto blobs = ReadRankTensors(Env::Default(), root, 5, 0);
  ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
  ASSERT_EQ(blobs->size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ((*blobs)[i].data, ts[i].bytes);
}

TEST_F(StagingTest, CorruptedSlotBytesAreDetectedOnRestore) {
  auto s = OpenStager(0, 1, 2, 64);
  std::vector<T> ts = {MakeT("x", DType::kU8, {4096}, 77)};
  auto r = s->Stage(1, Views(ts));
  ASSERT_TRUE(r.ok());
  Seal(*r);
  // Flip one byte of the staged copy in the ring file (found by its content).
  std::string ring = ReadAll(RingPath(dir_, 0));
  const std::string needle(reinterpret_cast<const char*>(ts[0].bytes.data()) + 1000, 64);
  const size_t at = ring.find(needle);
  ASSERT_NE(at, std::string::npos);
  const int fd = ::open(RingPath(dir_, 0).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const char flipped = static_cast<char>(ring[at] ^ 0x10);
  ASSERT_EQ(::pwrite(fd, &flipped, 1, static_cast<off_t>(at)), 1);
  ::close(fd);
  std::vector<uint8_t> buf(4096);
  Status st = s->Restore(1, {{ts[0].meta, buf.data()}});
  EXPECT_EQ(st.code(), Code::kDataLoss) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("'x'"));
  EXPECT_EQ(s->RestoreAll(1).status().code(), Code::kDataLoss);
}

// ---------------------------------------------------------------------------
// FaultEnv

class FaultEnvTest : public CkptTest {};

TEST_F(FaultEnvTest, CountsAndTracesEveryMutatingOperation) {
  FaultEnv fe(Env::Default());
  fe.set_trace(true);
  BW_ASSERT_OK(fe.MkdirAll(dir_ + "/d"));
  BW_ASSERT_OK(WriteFileAtomic(&fe, dir_ + "/d", "f", "hello"));
  // MkdirAll + NewWritableFile, Append, Sync, Close, Rename, SyncDir.
  EXPECT_EQ(fe.ops(), 7u);
  // Reads are not counted.
  EXPECT_EQ(*ReadWholeFile(&fe, dir_ + "/d/f"), "hello");
  EXPECT_TRUE(fe.IsDir(dir_ + "/d"));
  EXPECT_EQ(*fe.FileSize(dir_ + "/d/f"), 5u);
  EXPECT_EQ(fe.ListDir(dir_ + "/d")->size(), 1u);
  EXPECT_EQ(fe.ops(), 7u);
  BW_ASSERT_OK(RemoveTree(&fe, dir_ + "/d"));  // RemoveFile + RemoveDir
  EXPECT_EQ(fe.ops(), 9u);
  const std::vector<std::string> trace = fe.trace();
  ASSERT_EQ(trace.size(), 9u);
  EXPECT_EQ(trace[0], "#1 MkdirAll " + dir_ + "/d");
  EXPECT_THAT(trace[2], HasSubstr("#3 Append " + dir_ + "/d/f.tmp."));
  EXPECT_THAT(trace[2], HasSubstr(" 5"));
  EXPECT_THAT(trace[5], HasSubstr("Rename"));
  EXPECT_EQ(trace[8], "#9 RemoveDir " + dir_ + "/d");
  fe.ResetCount();
  EXPECT_EQ(fe.ops(), 0u);
  EXPECT_TRUE(fe.trace().empty());
}

TEST_F(FaultEnvTest, ErrorModeFailsTheOpAndEveryLaterOne) {
  FaultEnv fe(Env::Default());
  BW_ASSERT_OK(fe.MkdirAll(dir_ + "/d"));
  fe.Arm(FaultEnv::Mode::kError, 4);  // the Sync of the next WriteFileAtomic
  Status st = WriteFileAtomic(&fe, dir_ + "/d", "f", "hello");
  EXPECT_EQ(st.code(), Code::kInternal) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("injected I/O error at op #4"));
  EXPECT_THAT(st.message(), HasSubstr("Sync"));
  EXPECT_TRUE(fe.error_fired());
  EXPECT_FALSE(fs::exists(dir_ + "/d/f"));
  // Everything mutating fails from now on, reads still work.
  EXPECT_FALSE(fe.MkdirAll(dir_ + "/e").ok());
  EXPECT_FALSE(fs::exists(dir_ + "/e"));
  EXPECT_FALSE(fe.NewWritableFile(dir_ + "/g").ok());
  EXPECT_FALSE(fs::exists(dir_ + "/g"));
  EXPECT_TRUE(fe.ListDir(dir_ + "/d").ok());
  // Disarmed, it works again.
  fe.Arm(FaultEnv::Mode::kNone, 0);
  BW_EXPECT_OK(WriteFileAtomic(&fe, dir_ + "/d", "f", "hello"));
  EXPECT_EQ(ReadAll(dir_ + "/d/f"), "hello");
}

// Runs `body` in a child armed at op `k` in `mode`; asserts it died by SIGKILL.
void RunKilled(const std::function<void(FaultEnv*)>& body, FaultEnv::Mode mode, uint64_t k,
               uint64_t seed = 1) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(60);  // a hung child dies by SIGALRM, failing the test below
    FaultEnv fe(Env::Default(), seed);
    fe.Arm(mode, k);
    body(&fe);
    ::_exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
      << "exit " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
}

TEST_F(FaultEnvTest, KillModeTearsAnAppendAndDies) {
  const std::vector<uint8_t> data = RandomBytes(4096, 3);
  const std::string path = dir_ + "/f";
  std::set<size_t> sizes;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    RunKilled(
        [&](FaultEnv* fe) {
          auto f = fe->NewWritableFile(path);
          if (!f.ok()) ::_exit(2);
          (void)(*f)->Append(data.data(), data.size());  // op 2: torn
          ::_exit(3);
        },
        FaultEnv::Mode::kKill, 2, seed);
    const std::string got = ReadAll(path);
    ASSERT_LT(got.size(), data.size());
    EXPECT_EQ(got, std::string(data.begin(), data.begin() + static_cast<long>(got.size())));
    sizes.insert(got.size());
  }
  EXPECT_GT(sizes.size(), 4u);  // the prefix length varies with the seed
  // Same seed, same tear.
  RunKilled(
      [&](FaultEnv* fe) {
        auto f = fe->NewWritableFile(path);
        (void)(*f)->Append(data.data(), data.size());
      },
      FaultEnv::Mode::kKill, 2, 8);
  const size_t first = ReadAll(path).size();
  RunKilled(
      [&](FaultEnv* fe) {
        auto f = fe->NewWritableFile(path);
        (void)(*f)->Append(data.data(), data.size());
      },
      FaultEnv::Mode::kKill, 2, 8);
  EXPECT_EQ(ReadAll(path).size(), first);
  // A kill at a rename either renamed or not; the source or target exists.
  WriteAll(dir_ + "/a", "x");
  RunKilled([&](FaultEnv* fe) { (void)fe->Rename(dir_ + "/a", dir_ + "/b"); },
            FaultEnv::Mode::kKill, 1);
  EXPECT_NE(fs::exists(dir_ + "/a"), fs::exists(dir_ + "/b"));
}

TEST_F(FaultEnvTest, PowerLossDropsUnsyncedData) {
  const std::string a = dir_ + "/a", b = dir_ + "/b", c = dir_ + "/c";
  RunKilled(
      [&](FaultEnv* fe) {
        auto fa = fe->NewWritableFile(a + ".tmp");  // 1
        (void)(*fa)->Append("0123456789", 10);      // 2
        (void)(*fa)->Sync();                        // 3
        (void)(*fa)->Append("abcdef", 6);           // 4: never synced
        (void)(*fa)->Close();                       // 5
        (void)fe->Rename(a + ".tmp", a);            // 6: followed
        auto fb = fe->NewWritableFile(b);           // 7
        (void)(*fb)->Append("never synced", 12);    // 8
        (void)(*fb)->Close();                       // 9
        auto fc = fe->NewWritableFile(c);           // 10
        (void)(*fc)->Append("synced", 6);           // 11
        (void)(*fc)->Sync();                        // 12
        (void)(*fc)->Close();                       // 13
        (void)fe->SyncDir(dir_);                    // 14: power loss here
      },
      FaultEnv::Mode::kPowerLoss, 14);
  EXPECT_EQ(ReadAll(a), "0123456789");
  EXPECT_TRUE(fs::exists(b));
  EXPECT_EQ(ReadAll(b), "");
  EXPECT_EQ(ReadAll(c), "synced");
}

}  // namespace
}  // namespace bulwark::ckpt
