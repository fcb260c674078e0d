#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>

#include "ckpt/staging.h"
#include "common/net.h"
#include "gtest/gtest.h"
#include "sdk/bulwark.h"
#include "sdk/bulwark_c.h"

namespace bulwark::sdk {
namespace {

namespace fs = std::filesystem;

// Monotonic time advances by `tick` after every NowMono() read, so each timed
// interval is (number of reads in it) * tick. Client::Save reads it exactly twice.
class TickClock : public Clock {
 public:
  explicit TickClock(double tick) : tick_(tick) {}
  double NowWall() const override { return 1.7e9; }
  double NowMono() const override {
    double t = now_;
    now_ += tick_;
    return t;
  }
  void Advance(double s) { now_ += s; }
  void SleepFor(double s) const override { now_ += s > 0 ? s : 0; }
  std::vector<int> WaitReadable(const std::vector<int>& fds, double timeout_s) const override {
    std::vector<int> ready = PollReadable(fds, 0);
    if (ready.empty()) SleepFor(timeout_s);
    return ready;
  }

 private:
  double tick_;
  mutable double now_ = 100.0;
};

class SdkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_sdk_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Binds a fake agent socket; returns its fd (owned by agent_).
  void BindAgent() {
    auto fd = UnixDgramBind(dir_ + "/agent.sock");
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    agent_ = std::move(fd).value();
  }
  // Next datagram at the fake agent within 5 s, parsed.
  Json Recv() {
    if (PollReadable({agent_.get()}, 5.0).empty()) return Json();
    auto msgs = UnixDgramRecvAll(agent_.get());
    for (auto& m : msgs) pending_.push_back(Json::parse(m));
    if (pending_.empty()) return Json();
    Json j = pending_.front();
    pending_.erase(pending_.begin());
    return j;
  }
  EnvMap ManagedEnv() {
    return {{"RANK", "0"},
            {"WORLD_SIZE", "1"},
            {"BULWARK_AGENT_SOCK", dir_ + "/agent.sock"},
            {"BULWARK_RANK_SOCK", dir_ + "/rank0.sock"},
            {"BULWARK_CKPT_DIR", dir_ + "/ckpt"},
            {"BULWARK_CKPT_INTERVAL_STEPS", "5"},
            {"BULWARK_RESUME_STEP", "-1"}};
  }

  std::string dir_;
  Fd agent_;
  std::vector<Json> pending_;
};

TEST_F(SdkTest, ConfigParsesAndRejectsBadValues) {
  auto c = ConfigFromEnv({{"RANK", "2"},
                          {"WORLD_SIZE", "4"},
                          {"BULWARK_SKIP_FROM", "10"},
                          {"BULWARK_SKIP_TO", "20"},
                          {"BULWARK_RESUME_STEP", "8"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->world_size, 4);
  EXPECT_EQ(c->resume_step, 8);
  EXPECT_EQ(c->skip_to, 20);
  auto bad = ConfigFromEnv({{"BULWARK_CKPT_INTERVAL_STEPS", "ten"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("BULWARK_CKPT_INTERVAL_STEPS"), std::string::npos);
  EXPECT_FALSE(ConfigFromEnv({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).ok());
  EXPECT_FALSE(c->persist_by_agent);
  auto agent = ConfigFromEnv({{"BULWARK_CKPT_PERSIST", "agent"}});
  ASSERT_TRUE(agent.ok());
  EXPECT_TRUE(agent->persist_by_agent);
  auto typo = ConfigFromEnv({{"BULWARK_CKPT_PERSIST", "agnet"}});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("must be agent or sdk"), std::string::npos);
}

TEST_F(SdkTest, StandaloneWithNoEnvironment) {
  Client c;
  EXPECT_EQ(c.ReportStep(1, 1.0, 1).code(), Code::kFailedPrecondition);
  ASSERT_TRUE(c.Init({}).ok());
  EXPECT_FALSE(c.managed());
  EXPECT_TRUE(c.ReportStep(1, 0.5, 100).ok());
  EXPECT_EQ(c.ResumeStep(), -1);
  EXPECT_FALSE(c.ShouldCheckpoint(10));
  EXPECT_FALSE(c.PollInjectedNan());
  EXPECT_FALSE(c.ShouldSkip(3));
  std::string x = "x";
  EXPECT_EQ(c.Save(1, {{"x", x.data(), 1}}).code(), Code::kFailedPrecondition);
  EXPECT_EQ(c.Load().status().code(), Code::kNotFound);
}

TEST_F(SdkTest, StandaloneSaveCommitsAndLoads) {
  Client c;
  ASSERT_TRUE(c.Init({{"BULWARK_CKPT_DIR", dir_ + "/ckpt"}}).ok());
  std::string w = "weights", o = "optimizer";
  ASSERT_TRUE(c.Save(3, {{"w", w.data(), w.size()}, {"o", o.data(), o.size()}}).ok());
  EXPECT_EQ(*ckpt::NewestCommitted(ckpt::Env::Default(), dir_ + "/ckpt"), 3);
  auto blobs = c.Load(3);
  ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
  ASSERT_EQ(blobs->size(), 2u);
  EXPECT_EQ(std::string((*blobs)[1].data.begin(), (*blobs)[1].data.end()), "optimizer");
  // Resume step from the environment.
  Client c2;
  ASSERT_TRUE(c2.Init({{"BULWARK_CKPT_DIR", dir_ + "/ckpt"}, {"BULWARK_RESUME_STEP", "3"}}).ok());
  EXPECT_TRUE(c2.Load().ok());
  // An uncommitted step is never loaded.
  ASSERT_TRUE(
      ckpt::WriteShard(ckpt::Env::Default(), dir_ + "/ckpt", 4, 0, 1, {}, ckpt::WriteOptions())
          .ok());
  EXPECT_EQ(c2.Load(4).status().code(), Code::kNotFound);
}

TEST_F(SdkTest, AnotherWorldSizeReadsTheEntriesOfRankModuloTheSavedWorld) {
  // Step 6 saved by 2 ranks, each its own blob; an elastic job loads it with 3 ranks
  // (grown back) and with 1 (shrunk).
  const std::string root = dir_ + "/ckpt";
  for (int r = 0; r < 2; ++r) {
    const std::string v = "state of rank " + std::to_string(r);
    ASSERT_TRUE(ckpt::WriteShard(ckpt::Env::Default(), root, 6, r, 2,
                                 ckpt::BlobsToTensors({{"s", v.data(), v.size()}}),
                                 ckpt::WriteOptions())
                    .ok());
  }
  ASSERT_TRUE(ckpt::Commit(ckpt::Env::Default(), root, 6, 2).ok());
  const std::pair<int, int> cases[] = {{0, 3}, {1, 3}, {2, 3}, {0, 1}};
  for (const auto& [rank, world] : cases) {
    Client c;
    ASSERT_TRUE(c.Init({{"BULWARK_CKPT_DIR", root},
                        {"RANK", std::to_string(rank)},
                        {"WORLD_SIZE", std::to_string(world)}})
                    .ok());
    auto blobs = c.Load(6);
    ASSERT_TRUE(blobs.ok()) << blobs.status().ToString();
    ASSERT_EQ(blobs->size(), 1u);
    EXPECT_EQ(std::string((*blobs)[0].data.begin(), (*blobs)[0].data.end()),
              "state of rank " + std::to_string(rank % 2))
        << "rank " << rank << " of " << world;
  }
}

TEST_F(SdkTest, ReportsReachTheAgent) {
  BindAgent();
  TickClock clock(0.5);
  Client c(&clock);
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());  // mark at t=100
  Json hello = Recv();
  EXPECT_EQ(hello["type"], "hello");
  EXPECT_EQ(hello["pid"], ::getpid());
  EXPECT_TRUE(c.managed());
  EXPECT_TRUE(c.ShouldCheckpoint(10));
  EXPECT_FALSE(c.ShouldCheckpoint(11));

  clock.Advance(2.0);
  std::string w(1000, 'w');
  ASSERT_TRUE(c.Save(10, {{"w", w.data(), w.size()}}).ok());  // reads 102.5, 103
  Json ck = Recv();
  EXPECT_EQ(ck["type"], "ckpt");
  EXPECT_EQ(ck["step"], 10);
  EXPECT_EQ(ck["rank"], 0);
  EXPECT_GT(ck["bytes"].get<long>(), 1000);
  EXPECT_DOUBLE_EQ(ck["write_s"].get<double>(), 0.5);
  // Managed mode: the agent/controller commits, not the SDK.
  EXPECT_EQ(*ckpt::NewestCommitted(ckpt::Env::Default(), dir_ + "/ckpt"), -1);

  ASSERT_TRUE(c.ReportStep(10, 2.5, 4096).ok());  // reads 103.5
  Json s = Recv();
  EXPECT_EQ(s["type"], "step");
  EXPECT_EQ(s["step"], 10);
  EXPECT_EQ(s["tokens"], 4096);
  EXPECT_DOUBLE_EQ(s["loss"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(s["step_time"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(s["ckpt_stall"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["t"].get<double>(), 1.7e9);

  ASSERT_TRUE(c.ReportStep(11, std::nan(""), 1).ok());  // reads 104
  Json s2 = Recv();
  EXPECT_TRUE(s2["loss"].is_null());
  EXPECT_DOUBLE_EQ(s2["step_time"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s2["ckpt_stall"].get<double>(), 0.0);
}

TEST_F(SdkTest, FullStagingRingSkipsTheSnapshotInsteadOfFailing) {
  BindAgent();
  fs::create_directories(dir_ + "/stg");
  EnvMap env = ManagedEnv();
  env["BULWARK_STAGING_DIR"] = dir_ + "/stg";
  env["BULWARK_MEMORY_SLOTS"] = "2";
  TickClock clock(0.01);  // the bounded wait for a free slot ends after a few reads
  Client c(&clock);
  ASSERT_TRUE(c.Init(env).ok());
  EXPECT_EQ(Recv()["type"], "hello");
  std::string w(1000, 'w');
  ASSERT_TRUE(c.Save(1, {{"w", w.data(), w.size()}}).ok());
  EXPECT_EQ(Recv()["step"], 1);
  ASSERT_TRUE(c.Save(2, {{"w", w.data(), w.size()}}).ok());
  EXPECT_EQ(Recv()["step"], 2);
  {
    // The agent holds step 1's slot (a slow persist); step 2's is the newest: a
    // two-slot ring has nowhere to put step 3.
    auto reader = ckpt::RingReader::Open(ckpt::RingPath(dir_ + "/stg", 0));
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    auto pinned = (*reader)->PinStep(1);
    ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
    Status st = c.Save(3, {{"w", w.data(), w.size()}});
    EXPECT_TRUE(st.ok()) << st.ToString();  // skipped, not an error the trainer dies of
    EXPECT_EQ(c.snapshots_skipped(), 1);
    // Due for disk (interval 5): waits longer, still bounded, still skipped.
    EXPECT_TRUE(c.Save(5, {{"w", w.data(), w.size()}}).ok());
    EXPECT_EQ(c.snapshots_skipped(), 2);
  }
  // Unpinned: the next save is staged and reported.
  ASSERT_TRUE(c.Save(6, {{"w", w.data(), w.size()}}).ok());
  Json staged = Recv();
  EXPECT_EQ(staged["type"], "staged");
  EXPECT_EQ(staged["step"], 6);
  EXPECT_EQ(c.snapshots_skipped(), 2);
}

TEST_F(SdkTest, InjectNanArrivesOnceAndGarbageIsIgnored) {
  BindAgent();
  Client c;
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());
  EXPECT_FALSE(c.PollInjectedNan());
  const std::string rank_sock = dir_ + "/rank0.sock";
  ASSERT_TRUE(UnixDgramSend(agent_.get(), rank_sock, "not json").ok());
  ASSERT_TRUE(UnixDgramSend(agent_.get(), rank_sock, R"({"type":5})").ok());
  EXPECT_FALSE(c.PollInjectedNan());
  ASSERT_TRUE(UnixDgramSend(agent_.get(), rank_sock, R"({"type":"inject_nan"})").ok());
  EXPECT_TRUE(c.PollInjectedNan());
  EXPECT_FALSE(c.PollInjectedNan());
}

// The abort watcher's wait: an abort datagram ends it, so does an abort the training
// thread already took from the socket (it is not in the socket any more), and a park
// forgets the abort.
TEST_F(SdkTest, WaitAbortReturnsOnceAnAbortIsPending) {
  BindAgent();
  TickClock clock(0);  // WaitReadable polls once, then advances instead of blocking
  Client c(&clock);
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());
  const std::string rank_sock = dir_ + "/rank0.sock";
  EXPECT_FALSE(c.WaitAbort(30));
  ASSERT_TRUE(UnixDgramSend(agent_.get(), rank_sock, R"({"type":"abort"})").ok());
  EXPECT_TRUE(c.WaitAbort(30));
  EXPECT_TRUE(c.WaitAbort(30));  // sticky until the park
  ASSERT_TRUE(c.Park("").ok());
  EXPECT_FALSE(c.WaitAbort(30));
  ASSERT_TRUE(UnixDgramSend(agent_.get(), rank_sock, R"({"type":"abort"})").ok());
  EXPECT_TRUE(c.AbortRequested());  // the training thread drains it first
  EXPECT_TRUE(c.WaitAbort(30));
  ASSERT_TRUE(c.Park("").ok());
  EXPECT_FALSE(c.WaitAbort(0));
}

TEST_F(SdkTest, InjectSdcArrivesOnceAndDigestsAreReportedAsHex) {
  BindAgent();
  Client c;
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());
  EXPECT_EQ(Recv()["type"], "hello");
  EXPECT_FALSE(c.PollInjectedSdc());
  const std::string rank_sock = dir_ + "/rank0.sock";
  ASSERT_TRUE(UnixDgramSend(agent_.get(), rank_sock, R"({"type":"inject_sdc"})").ok());
  EXPECT_TRUE(c.PollInjectedSdc());
  EXPECT_FALSE(c.PollInjectedSdc());
  ASSERT_TRUE(c.ReportDigest(40, 0xab, "dp1").ok());
  Json d = Recv();
  EXPECT_EQ(d["type"], "digest");
  EXPECT_EQ(d["rank"], 0);
  EXPECT_EQ(d["step"], 40);
  EXPECT_EQ(d["digest"], "00000000000000ab");
  EXPECT_EQ(d["group"], "dp1");
  ASSERT_TRUE(c.ReportDigest(41, 0xffffffffffffffffULL).ok());
  d = Recv();
  EXPECT_EQ(d["digest"], "ffffffffffffffff");
  EXPECT_FALSE(d.contains("group"));
  Status bad = c.ReportDigest(-1, 1);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
}

TEST_F(SdkTest, MissingAgentNeverFails) {
  Client c;
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());  // nobody bound agent.sock
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(c.ReportStep(i, 1.0, 1).ok());
  std::string w = "w";
  EXPECT_TRUE(c.Save(5, {{"w", w.data(), 1}}).ok());
  EXPECT_TRUE(c.FlushReports(0));  // nothing waits for an agent that is not there
  EXPECT_TRUE(c.Finished().ok());
  EXPECT_EQ(c.reports_dropped(), 0);
}

// The agent's socket queues only net.unix.max_dgram_qlen datagrams (10 by default): an
// agent busy for a few steps used to lose the reports beyond (the last steps' losses a
// replay bundle wants, a checkpoint's `staged`, `finished`). They wait, in order, and go
// out as the agent reads.
class SdkOutboxTest : public SdkTest {
 protected:
  // What the agent reads until the client has nothing left to send (it is given a
  // chance after every read); its types and steps in the order read.
  std::vector<Json> ReadUntilFlushed(Client& c) {
    std::vector<Json> got;
    for (int turn = 0; turn < 100000; ++turn) {
      const bool empty = c.FlushReports(0);
      std::vector<std::string> ds = UnixDgramRecvAll(agent_.get());
      for (const std::string& d : ds) got.push_back(Json::parse(d));
      if (empty && ds.empty()) break;
    }
    return got;
  }
};

TEST_F(SdkOutboxTest, ReportsTheAgentsFullQueueHeldBackArriveInOrder) {
  BindAgent();
  TickClock clock(0.001);
  Client c(&clock);
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());
  constexpr int kSteps = 600;  // more than a queue of the largest usual max_dgram_qlen
  for (int s = 1; s <= kSteps; ++s) ASSERT_TRUE(c.ReportStep(s, 1.0 / s, 10).ok());
  ASSERT_TRUE(c.Finished().ok());  // waits its bound (fake time) for the agent, in vain
  const std::vector<Json> got = ReadUntilFlushed(c);
  ASSERT_EQ(got.size(), kSteps + 2u);  // hello, every step, finished
  EXPECT_EQ(got.front()["type"], "hello");
  for (int s = 1; s <= kSteps; ++s) {
    ASSERT_EQ(got[s]["type"], "step");
    ASSERT_EQ(got[s]["step"], s) << "out of order";
  }
  EXPECT_EQ(got.back()["type"], "finished");
  EXPECT_EQ(c.reports_dropped(), 0);
}

// A data loader's worker is a fork of its rank: it must not send (at its exit, or at
// a call) the reports its parent's outbox held when it was forked.
TEST_F(SdkOutboxTest, AForkedChildDoesNotSendItsParentsReports) {
  BindAgent();
  TickClock clock(0.001);
  Client c(&clock);
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());
  for (int s = 1; s <= 30; ++s) ASSERT_TRUE(c.ReportStep(s, 1.0, 10).ok());
  std::vector<std::string> first = UnixDgramRecvAll(agent_.get());  // the queue's share
  ASSERT_FALSE(first.empty());
  ASSERT_LT(first.size(), 31u) << "the queue took everything: nothing is held back";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool empty = c.FlushReports(0);
    ::_exit(empty ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(UnixDgramRecvAll(agent_.get()).empty()) << "the child sent its parent's reports";
  const std::vector<Json> rest = ReadUntilFlushed(c);
  EXPECT_EQ(first.size() + rest.size(), 31u);  // hello and 30 steps, each once
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back()["step"], 30);
}

TEST_F(SdkOutboxTest, AnAgentThatNeverReadsCostsTheOldestReportsNotMemoryOrTime) {
  BindAgent();
  TickClock clock(0.001);
  Client c(&clock);
  ASSERT_TRUE(c.Init(ManagedEnv()).ok());
  const int steps = static_cast<int>(Client::kMaxOutbox) + 100;
  for (int s = 1; s <= steps; ++s) ASSERT_TRUE(c.ReportStep(s, 1.0, 10).ok());
  // The queue took the first few, the outbox the newest; what is between was dropped.
  EXPECT_GT(c.reports_dropped(), 0);
  EXPECT_LE(c.reports_dropped(), 101);
  const std::vector<Json> got = ReadUntilFlushed(c);
  EXPECT_EQ(static_cast<long>(got.size()) + c.reports_dropped(), steps + 1);  // + hello
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back()["step"], steps);  // the newest are kept
  for (size_t i = 2; i < got.size(); ++i) {
    EXPECT_GT(got[i]["step"].get<long>(), got[i - 1]["step"].get<long>());
  }
}

TEST_F(SdkTest, DigestOfBuffersIsXxh3OfTheirConcatenation) {
  const std::string a = "parameters of layer one", b(100000, '\x7f');
  const std::string both = a + b;
  const void* data[] = {a.data(), nullptr, b.data()};
  const size_t lens[] = {a.size(), 0, b.size()};
  EXPECT_EQ(bw_digest(3, data, lens), XXH3_64bits(both.data(), both.size()));
  EXPECT_EQ(bw_digest(0, nullptr, nullptr), XXH3_64bits("", 0));
  const void* swapped[] = {b.data(), a.data()};
  const size_t swapped_lens[] = {b.size(), a.size()};
  EXPECT_NE(bw_digest(2, swapped, swapped_lens), bw_digest(3, data, lens));  // order counts
}

TEST_F(SdkTest, CAbiRoundTrip) {
  const std::string ckpt_dir = dir_ + "/cckpt";
  ::setenv("BULWARK_CKPT_DIR", ckpt_dir.c_str(), 1);
  ::setenv("BULWARK_CKPT_INTERVAL_STEPS", "4", 1);
  ::setenv("BULWARK_SKIP_FROM", "7", 1);
  ::setenv("BULWARK_SKIP_TO", "9", 1);
  ASSERT_EQ(bw_init(), BW_OK) << bw_last_error();
  EXPECT_EQ(bw_rank(), 0);
  EXPECT_EQ(bw_world_size(), 1);
  EXPECT_EQ(bw_resume_step(), -1);
  EXPECT_EQ(bw_should_checkpoint(8), 1);
  EXPECT_EQ(bw_should_checkpoint(9), 0);
  EXPECT_EQ(bw_skip_from(), 7);
  EXPECT_EQ(bw_skip_to(), 9);
  EXPECT_EQ(bw_report_step(1, 0.1, 10), BW_OK);
  const char* names[] = {"a", "b"};
  const void* data[] = {"xyz", "hello"};
  size_t sizes[] = {3, 5};
  ASSERT_EQ(bw_save(8, 2, names, data, sizes), BW_OK) << bw_last_error();
  bw_blobs* b = nullptr;
  ASSERT_EQ(bw_load(8, &b), BW_OK) << bw_last_error();
  ASSERT_EQ(bw_blobs_count(b), 2u);
  EXPECT_STREQ(bw_blobs_name(b, 1), "b");
  EXPECT_EQ(std::string(static_cast<const char*>(bw_blobs_data(b, 1)), bw_blobs_size(b, 1)),
            "hello");
  EXPECT_EQ(bw_blobs_name(b, 2), nullptr);
  bw_blobs_free(b);
  EXPECT_EQ(bw_load(99, &b), BW_ERR_NOT_FOUND);
  EXPECT_NE(std::string(bw_last_error()).find("99"), std::string::npos) << bw_last_error();
  const char* dup[] = {"a", "a"};
  EXPECT_EQ(bw_save(9, 2, dup, data, sizes), BW_ERR_INVALID_ARGUMENT);
  ::setenv("RANK", "x", 1);
  EXPECT_EQ(bw_init(), BW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bw_last_error()).find("RANK"), std::string::npos);
  for (const char* v : {"RANK", "BULWARK_CKPT_DIR", "BULWARK_CKPT_INTERVAL_STEPS",
                        "BULWARK_SKIP_FROM", "BULWARK_SKIP_TO"}) {
    ::unsetenv(v);
  }
  EXPECT_EQ(bw_shutdown(), BW_OK);
}

// Rows [a, b) and columns [c, d) of a row-major {rows, 4} float tensor whose element
// (i, j) is 10 * i + j + base.
std::vector<float> Grid(int64_t a, int64_t b, int64_t c, int64_t d, float base = 0) {
  std::vector<float> v;
  for (int64_t i = a; i < b; ++i) {
    for (int64_t j = c; j < d; ++j) v.push_back(static_cast<float>(10 * i + j) + base);
  }
  return v;
}

// Sets the rank environment the C ABI's client reads and re-initialises it.
void InitRank(const std::string& ckpt_dir, int rank, int world) {
  ::setenv("BULWARK_CKPT_DIR", ckpt_dir.c_str(), 1);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ASSERT_EQ(bw_init(), BW_OK) << bw_last_error();
}

// bw_load_piece of a {rows, 4} float32 region of "w" or "col".
int LoadPiece(bw_reader* r, const char* name, std::vector<long long> shape,
              std::vector<long long> offsets, std::vector<float>* out,
              const char* dtype = "float32") {
  const long long global[] = {5, 4};
  out->assign(static_cast<size_t>(shape[0] * shape[1]), -1.0f);
  return bw_load_piece(r, name, dtype, 2, shape.data(), global, offsets.data(), out->data(),
                       out->size() * sizeof(float));
}

TEST_F(SdkTest, CAbiSavesPiecesAndLoadsAnyRegionInAnyWorld) {
  // Step 5 saved by 2 ranks: "w" {5, 4} split along dim 0 (3 + 2 rows), "col" split
  // along dim 1 (2 + 2 columns), "b" replicated and whole.
  const std::string root = dir_ + "/sharded";
  const std::vector<float> bias = {1, 2, 3, 4};
  for (int r = 0; r < 2; ++r) {
    InitRank(root, r, 2);
    const std::vector<float> w = r == 0 ? Grid(0, 3, 0, 4) : Grid(3, 5, 0, 4);
    const std::vector<float> col = Grid(0, 5, 2 * r, 2 * r + 2, 0.5f);
    const char* names[] = {"w", "col", "b"};
    const char* dtypes[] = {"float32", "float32", "float32"};
    const int ndims[] = {2, 2, 1};
    const long long shapes[] = {r == 0 ? 3 : 2, 4, 5, 2, 4};
    const long long globals[] = {5, 4, 5, 4, 4};
    const long long offsets[] = {r == 0 ? 0 : 3, 0, 0, 2 * r, 0};
    const void* data[] = {w.data(), col.data(), bias.data()};
    const int flags[] = {0, 0, 1};
    ASSERT_EQ(
        bw_ckpt_save_sharded(5, 3, names, dtypes, ndims, shapes, globals, offsets, data, flags),
        BW_OK)
        << bw_last_error();
  }
  ASSERT_EQ(bw_commit(5), BW_OK) << bw_last_error();

  // The same world reads its own pieces, with the saved global shapes and offsets.
  InitRank(root, 1, 2);
  bw_reader* r = nullptr;
  ASSERT_EQ(bw_ckpt_open(5, 0, &r), BW_OK) << bw_last_error();
  ASSERT_EQ(bw_load_count(r), 3u);
  EXPECT_STREQ(bw_load_name(r, 0), "w");
  EXPECT_EQ(bw_load_dim(r, 0, 0), 2);
  EXPECT_EQ(bw_load_global_dim(r, 0, 0), 5);
  EXPECT_EQ(bw_load_offset(r, 0, 0), 3);
  EXPECT_EQ(bw_load_offset(r, 1, 1), 2);
  EXPECT_EQ(bw_load_global_dim(r, 2, 0), 4);  // whole: its own shape, offset 0
  EXPECT_EQ(bw_load_offset(r, 2, 0), 0);
  EXPECT_EQ(bw_load_offset(r, 0, 2), -1);
  EXPECT_EQ(bw_load_global_dim(r, 3, 0), -1);
  std::vector<float> got(8);
  ASSERT_EQ(bw_load_read(r, 0, got.data(), 32), BW_OK) << bw_last_error();
  EXPECT_EQ(got, Grid(3, 5, 0, 4));
  // Another split of the same world: rows 1..5 on this rank.
  ASSERT_EQ(LoadPiece(r, "w", {4, 4}, {1, 0}, &got), BW_OK) << bw_last_error();
  EXPECT_EQ(got, Grid(1, 5, 0, 4));
  // Rows instead of columns, and columns instead of rows.
  ASSERT_EQ(LoadPiece(r, "col", {2, 4}, {3, 0}, &got), BW_OK) << bw_last_error();
  EXPECT_EQ(got, Grid(3, 5, 0, 4, 0.5f));
  ASSERT_EQ(LoadPiece(r, "w", {5, 1}, {0, 3}, &got), BW_OK) << bw_last_error();
  EXPECT_EQ(got, Grid(0, 5, 3, 4));
  bw_load_close(r);

  // World 3: rank 2 reads rank 0's entries and the rows 4..5 of a 2 + 2 + 1 split.
  InitRank(root, 2, 3);
  ASSERT_EQ(bw_ckpt_open(5, 0, &r), BW_OK) << bw_last_error();
  EXPECT_EQ(bw_load_offset(r, 0, 0), 0);  // rank 0's entry
  ASSERT_EQ(LoadPiece(r, "w", {1, 4}, {4, 0}, &got), BW_OK) << bw_last_error();
  EXPECT_EQ(got, Grid(4, 5, 0, 4));
  bw_load_close(r);

  // World 1: the whole tensors (offsets and global shape omitted: the whole).
  InitRank(root, 0, 1);
  ASSERT_EQ(bw_ckpt_open(5, 0, &r), BW_OK) << bw_last_error();
  const long long whole[] = {5, 4};
  got.assign(20, -1.0f);
  ASSERT_EQ(bw_load_piece(r, "w", "float32", 2, whole, nullptr, nullptr, got.data(), 80), BW_OK)
      << bw_last_error();
  EXPECT_EQ(got, Grid(0, 5, 0, 4));
  ASSERT_EQ(LoadPiece(r, "col", {5, 4}, {0, 0}, &got), BW_OK) << bw_last_error();
  EXPECT_EQ(got, Grid(0, 5, 0, 4, 0.5f));
  const long long four[] = {4};
  std::vector<float> b(4);
  ASSERT_EQ(bw_load_piece(r, "b", "float32", 1, four, nullptr, nullptr, b.data(), 16), BW_OK)
      << bw_last_error();
  EXPECT_EQ(b, bias);

  // Bad requests: clear errors naming the tensor, nothing crashes.
  EXPECT_EQ(LoadPiece(r, "w", {5, 4}, {0, 0}, &got, "float64"), BW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bw_last_error()).find("'w'"), std::string::npos) << bw_last_error();
  const long long other[] = {6, 4};
  got.assign(24, 0);
  EXPECT_EQ(bw_load_piece(r, "w", "float32", 2, other, nullptr, nullptr, got.data(), 96),
            BW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bw_last_error()).find("global shape [5,4]"), std::string::npos)
      << bw_last_error();
  EXPECT_EQ(LoadPiece(r, "w", {3, 4}, {3, 0}, &got), BW_ERR_INVALID_ARGUMENT);  // 3..6 > 5
  EXPECT_NE(std::string(bw_last_error()).find("does not fit"), std::string::npos)
      << bw_last_error();
  EXPECT_EQ(bw_load_piece(r, "w", "float32", 2, whole, nullptr, nullptr, got.data(), 4),
            BW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bw_last_error()).find("has 80 bytes"), std::string::npos)
      << bw_last_error();
  EXPECT_EQ(bw_load_piece(r, "w", "float32", 2, nullptr, nullptr, nullptr, got.data(), 80),
            BW_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bw_load_piece(r, "nope", "float32", 2, whole, nullptr, nullptr, got.data(), 80),
            BW_ERR_NOT_FOUND);
  EXPECT_NE(std::string(bw_last_error()).find("'nope'"), std::string::npos) << bw_last_error();
  EXPECT_EQ(bw_load_piece(r, "w", "cfloat", 2, whole, nullptr, nullptr, got.data(), 80),
            BW_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bw_load_piece(nullptr, "w", "float32", 2, whole, nullptr, nullptr, got.data(), 80),
            BW_ERR_INVALID_ARGUMENT);
  bw_load_close(r);

  // A piece flagged replicated, and a piece outside its global shape, are refused.
  const char* names[] = {"p"};
  const char* dtypes[] = {"float32"};
  const int ndims[] = {1};
  const long long shape[] = {2}, global[] = {4}, off[] = {3};
  const void* data[] = {bias.data()};
  const int replicated[] = {1}, plain[] = {0};
  EXPECT_EQ(
      bw_ckpt_save_sharded(6, 1, names, dtypes, ndims, shape, global, nullptr, data, replicated),
      BW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bw_last_error()).find("'p' is the piece [2] at [0] of [4]"),
            std::string::npos)
      << bw_last_error();
  EXPECT_EQ(bw_ckpt_save_sharded(6, 1, names, dtypes, ndims, shape, global, off, data, plain),
            BW_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bw_last_error()).find("'p'"), std::string::npos) << bw_last_error();
  EXPECT_EQ(bw_ckpt_save_sharded(6, 1, names, dtypes, ndims, nullptr, global, off, data, plain),
            BW_ERR_INVALID_ARGUMENT);
  for (const char* v : {"RANK", "WORLD_SIZE", "BULWARK_CKPT_DIR"}) ::unsetenv(v);
  EXPECT_EQ(bw_shutdown(), BW_OK);
}

TEST_F(SdkTest, MemoryTierServesItsOwnPieceAndReshardsFromTheFileTier) {
  // Rank 0 of 2 stages its piece of "w" (rows 0..3 of {5, 4}) in the memory tier.
  fs::create_directories(dir_ + "/stg");
  const std::string root = dir_ + "/ckpt";
  Client c;
  ASSERT_TRUE(c.Init({{"RANK", "0"},
                      {"WORLD_SIZE", "2"},
                      {"BULWARK_CKPT_DIR", root},
                      {"BULWARK_STAGING_DIR", dir_ + "/stg"}})
                  .ok());
  const std::vector<float> mine = Grid(0, 3, 0, 4);
  ckpt::TensorView v;
  v.meta.name = "w";
  v.meta.dtype = ckpt::DType::kF32;
  v.meta.shape = {3, 4};
  v.meta.global_shape = {5, 4};
  v.meta.offsets = {0, 0};
  v.data = mine.data();
  ASSERT_TRUE(c.SaveTensors(7, {v}).ok());
  auto s = c.OpenLoad(7);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->tier(), "memory");
  ASSERT_EQ((*s)->tensors().size(), 1u);
  EXPECT_EQ((*s)->tensors()[0].GlobalShape(), (std::vector<int64_t>{5, 4}));
  std::vector<float> got(12);
  ASSERT_TRUE((*s)->Load(v.meta, got.data()).ok());
  EXPECT_EQ(got, mine);
  // The whole tensor is not in memory and the step is not on disk yet.
  ckpt::TensorMeta whole = v.meta;
  whole.shape = {5, 4};
  whole.offsets = {};
  got.assign(20, -1.0f);
  Status st = (*s)->Load(whole, got.data());
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("holds ([3,4] at [0,0] of [5,4])"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("disk:"), std::string::npos) << st.ToString();
  ckpt::TensorMeta f64 = v.meta;
  f64.dtype = ckpt::DType::kF64;
  std::vector<double> d(12);
  EXPECT_EQ((*s)->Load(f64, d.data()).code(), Code::kInvalidArgument);

  // Persisted (rank 0's disk copy marked +100 so the source of each read shows).
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> rows = r == 0 ? Grid(0, 3, 0, 4, 100) : Grid(3, 5, 0, 4);
    ckpt::TensorView p = v;
    p.meta.shape = {r == 0 ? 3 : 2, 4};
    p.meta.offsets = {r == 0 ? 0 : 3, 0};
    p.data = rows.data();
    ASSERT_TRUE(
        ckpt::WriteShard(ckpt::Env::Default(), root, 7, r, 2, {p}, ckpt::WriteOptions()).ok());
  }
  ASSERT_TRUE(ckpt::Commit(ckpt::Env::Default(), root, 7, 2).ok());
  ASSERT_TRUE((*s)->Load(whole, got.data()).ok());
  std::vector<float> want = Grid(0, 3, 0, 4, 100);
  for (float x : Grid(3, 5, 0, 4)) want.push_back(x);
  EXPECT_EQ(got, want);  // stitched from the disk copies
  got.assign(12, -1.0f);
  ASSERT_TRUE((*s)->Load(v.meta, got.data()).ok());
  EXPECT_EQ(got, mine);  // its own piece still from memory
  EXPECT_EQ((*s)->tier(), "memory");
}

}  // namespace
}  // namespace bulwark::sdk
