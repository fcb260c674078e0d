// Tests of `bulwark ckpt ls | inspect | verify | gc` against real checkpoints
// written with ckpt::WriteShard + ckpt::Commit in an mkdtemp directory.
#include "cli/ckpt_cmd.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/object_tier.h"
#include "cli/stores.h"
#include "objstore/s3_test_server.h"
#include "store/store.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int kWorld = 2;

class CkptCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/bw_ckpt_cmd_testXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // The store registry `gc` reads replay pins from: this test's own (empty at first).
    state_ = dir_ + "-state";
    fs::create_directories(state_);
    ::setenv("XDG_STATE_HOME", state_.c_str(), 1);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::remove_all(state_, ec);
  }

  // Saves `step` on every rank: "w" (float32 [4,4], rank's half of [8,4], same data
  // every step), "opt" (replicated, same every step) and "blob" (changes every
  // step). `prev` >= 0: incremental against that step. Commits unless told not to.
  void Save(long step, long prev, bool commit = true) {
    for (int r = 0; r < kWorld; ++r) {
      std::vector<float> w(16);
      for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(r * 100 + i);
      std::vector<uint8_t> opt(256), blob(200);
      for (size_t i = 0; i < opt.size(); ++i) opt[i] = static_cast<uint8_t>(i * 7);
      for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(step + r + i);
      std::vector<ckpt::TensorView> t(3);
      t[0].meta.name = "w";
      t[0].meta.dtype = ckpt::DType::kF32;
      t[0].meta.shape = {4, 4};
      t[0].meta.global_shape = {8, 4};
      t[0].meta.offsets = {4 * r, 0};
      t[0].data = w.data();
      t[1].meta.name = "opt";
      t[1].meta.shape = {256};
      t[1].meta.replicated = true;
      t[1].data = opt.data();
      t[2].meta.name = "blob";
      t[2].meta.shape = {200};
      t[2].data = blob.data();
      ckpt::WriteOptions o;
      o.chunk_size = 64;
      Result<ckpt::ShardIndex> pi = NotFound("none");
      if (prev >= 0) {
        pi = ckpt::ReadShardIndex(env_, dir_, prev, r, kWorld);
        ASSERT_TRUE(pi.ok()) << pi.status().ToString();
        o.previous = &*pi;
      }
      Status st = ckpt::WriteShard(env_, dir_, step, r, kWorld, t, o);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    if (commit) {
      Status st = ckpt::Commit(env_, dir_, step, kWorld);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  }

  // 10 (full), 20 (incremental on 10), 25 (not committed), 30 (full), 40 (on 30).
  void SaveHistory() {
    Save(10, -1);
    Save(20, 10);
    Save(25, -1, /*commit=*/false);
    Save(30, -1);
    Save(40, 30);
  }

  std::string Shard(long step, int rank) {
    return ckpt::StepDir(dir_, step) + "/" + ckpt::ShardFileName(rank, kWorld);
  }

  // Flips the last chunk byte of a shard (just before its 32-byte footer).
  void FlipLastDataByte(const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    const auto pos = static_cast<std::streamoff>(fs::file_size(path) - 33);
    f.seekg(pos);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(pos);
    f.write(&c, 1);
  }

  bool StepExists(long step) { return fs::is_directory(ckpt::StepDir(dir_, step)); }

  // Runs `bulwark ckpt ARGS...` through CLI11, as main does.
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    CLI::App app{"test"};
    int rc = -1;
    CLI::App* c = AddCkptCommands(app, &rc, out_, err_);
    args.insert(args.begin(), "ckpt");
    std::vector<std::string> rev(args.rbegin(), args.rend());
    try {
      app.parse(rev);
    } catch (const CLI::ParseError& e) {
      err_ << "parse error: " << e.what();
      return 100;
    }
    EXPECT_TRUE(c->parsed());
    return rc;
  }

  ckpt::Env* env_ = ckpt::Env::Default();
  std::string dir_, state_;
  std::ostringstream out_, err_;
};

TEST_F(CkptCmdTest, LsListsCommittedStepsAndHidesUncommitted) {
  SaveHistory();
  ASSERT_EQ(Run({"ls", dir_}), 0) << err_.str();
  const std::string o = out_.str();
  EXPECT_NE(o.find("STEP"), std::string::npos) << o;
  for (const char* s : {"\n10 ", "\n20 ", "\n30 ", "\n40 "}) {
    EXPECT_NE(o.find(s), std::string::npos) << s << " in\n" << o;
  }
  EXPECT_EQ(o.find("\n25 "), std::string::npos) << o;
  EXPECT_NE(o.find("1 uncommitted or invalid step directory not shown"), std::string::npos) << o;
  EXPECT_NE(o.find("committed"), std::string::npos);

  ASSERT_EQ(Run({"ls", dir_, "--all"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("uncommitted: COMMIT missing"), std::string::npos) << out_.str();

  ASSERT_EQ(Run({"ls", dir_, "--all", "--json"}), 0) << err_.str();
  Json j = Json::parse(out_.str());
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 5u);
  EXPECT_EQ(j[0]["step"], 10);
  EXPECT_EQ(j[0]["world"], kWorld);
  EXPECT_TRUE(j[0]["committed"].get<bool>());
  EXPECT_GT(j[0]["logical_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j[1]["depends"], Json::array({10}));
  EXPECT_LT(j[1]["stored_bytes"].get<uint64_t>(), j[0]["stored_bytes"].get<uint64_t>())
      << "incremental step 20 stores less than full step 10";
  EXPECT_EQ(j[2]["step"], 25);
  EXPECT_FALSE(j[2]["committed"].get<bool>());
  EXPECT_EQ(j[2]["reason"], "uncommitted: COMMIT missing");
  EXPECT_EQ(j[4]["depends"], Json::array({30}));
  EXPECT_NE(j[4]["time_utc"].get<std::string>().find('T'), std::string::npos);
}

TEST_F(CkptCmdTest, InspectShowsManifestTensorsAndReferences) {
  SaveHistory();
  ASSERT_EQ(Run({"inspect", dir_, "20"}), 0) << err_.str();
  const std::string o = out_.str();
  EXPECT_NE(o.find("world 2"), std::string::npos) << o;
  EXPECT_NE(o.find("shard-00001-of-00002.bws"), std::string::npos) << o;
  EXPECT_NE(o.find("index xxh3"), std::string::npos) << o;
  EXPECT_NE(o.find("w  float32 [4, 4]  global [8, 4] at [4, 0]"), std::string::npos) << o;
  EXPECT_NE(o.find("replicated"), std::string::npos) << o;
  EXPECT_NE(o.find("refs: step 10 rank 0"), std::string::npos) << o;

  ASSERT_EQ(Run({"inspect", dir_, "20", "--rank", "1", "--json"}), 0) << err_.str();
  Json j = Json::parse(out_.str());
  EXPECT_EQ(j["world"], kWorld);
  EXPECT_EQ(j["shards"].size(), 2u);
  ASSERT_EQ(j["ranks"].size(), 1u);
  EXPECT_EQ(j["ranks"][0]["rank"], 1);
  const Json& t = j["ranks"][0]["tensors"];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0]["name"], "w");
  EXPECT_EQ(t[0]["global_shape"], Json::array({8, 4}));
  EXPECT_EQ(t[0]["offsets"], Json::array({4, 0}));
  EXPECT_EQ(t[0]["local_chunks"], 0) << "w is unchanged since step 10: a reference";
  EXPECT_EQ(t[0]["refs"][0]["step"], 10);
  EXPECT_EQ(t[0]["refs"][0]["rank"], 1);
  EXPECT_TRUE(t[1]["replicated"].get<bool>());
  EXPECT_EQ(t[2]["name"], "blob");
  EXPECT_EQ(t[2]["bytes"], 200);
  EXPECT_EQ(t[2]["chunks"], 4);
  EXPECT_EQ(t[2]["local_chunks"], 4);
}

TEST_F(CkptCmdTest, VerifyPassesThenNamesTheCorruptedShard) {
  SaveHistory();
  ASSERT_EQ(Run({"verify", dir_}), 0) << out_.str() << err_.str();
  EXPECT_NE(out_.str().find("step 25: skipped (uncommitted: COMMIT missing)"), std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("step 40: OK"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("4 verified, 0 failed, 1 skipped"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({"verify", dir_, "40"}), 0) << out_.str() << err_.str();

  FlipLastDataByte(Shard(40, 1));
  ASSERT_EQ(Run({"verify", dir_, "--all"}), 1) << out_.str();
  const std::string o = out_.str();
  EXPECT_NE(o.find("step 30: OK"), std::string::npos) << o;
  EXPECT_NE(o.find("step 40: FAILED"), std::string::npos) << o;
  EXPECT_NE(o.find("shard-00001-of-00002.bws"), std::string::npos) << o;
  EXPECT_NE(o.find("(read by rank 1 tensor '"), std::string::npos) << o;  // who read it
  EXPECT_NE(o.find("3 verified, 1 failed, 1 skipped"), std::string::npos) << o;

  ASSERT_EQ(Run({"verify", dir_, "40", "--json"}), 1);
  Json j = Json::parse(out_.str());
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["steps"][0]["result"], "failed");
  EXPECT_NE(j["steps"][0]["problems"][0].get<std::string>().find(Shard(40, 1)), std::string::npos)
      << j.dump();
  // An uncommitted step asked for by number is not verified.
  EXPECT_EQ(Run({"verify", dir_, "25"}), 1);
}

TEST_F(CkptCmdTest, CorruptManifestAndTruncatedShardAreReportedNotFatal) {
  SaveHistory();
  {
    std::ofstream m(ckpt::StepDir(dir_, 10) + "/MANIFEST", std::ios::app);
    m << "junk";
  }
  fs::resize_file(Shard(30, 0), fs::file_size(Shard(30, 0)) - 10);
  ASSERT_EQ(Run({"ls", dir_, "--all"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("invalid: "), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("MANIFEST"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({"verify", dir_}), 1);
  const std::string o = out_.str();
  EXPECT_NE(o.find("step 10: FAILED"), std::string::npos) << o;
  EXPECT_NE(o.find("step 30: FAILED"), std::string::npos) << o;
  EXPECT_NE(o.find(Shard(30, 0)), std::string::npos) << o;
  EXPECT_EQ(Run({"inspect", dir_, "10"}), 1);
  EXPECT_NE(err_.str().find("not committed"), std::string::npos) << err_.str();
}

TEST_F(CkptCmdTest, GcDryRunMatchesRealRun) {
  SaveHistory();
  ASSERT_EQ(Run({"gc", dir_, "--keep", "1", "--golden-every", "20", "--dry-run"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("would remove step 25 (uncommitted"), std::string::npos) << out_.str();
  EXPECT_EQ(out_.str().find("would remove step 10"), std::string::npos)
      << "step 10 is a dependency of golden step 20\n"
      << out_.str();
  EXPECT_NE(out_.str().find("dependencies 10,30"), std::string::npos) << out_.str();

  ASSERT_EQ(Run({"gc", dir_, "--keep", "1", "--dry-run", "--json"}), 0) << err_.str();
  Json dry = Json::parse(out_.str());
  EXPECT_EQ(dry["removed"], Json::array({10, 20, 25}));
  for (long s : {10, 20, 25, 30, 40}) EXPECT_TRUE(StepExists(s)) << "dry run removed " << s;

  ASSERT_EQ(Run({"gc", dir_, "--keep", "1"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("removed step 10 (committed; not among the newest 1"),
            std::string::npos)
      << out_.str();
  EXPECT_NE(out_.str().find("removed step 25"), std::string::npos) << out_.str();
  for (long s : {10, 20, 25}) EXPECT_FALSE(StepExists(s)) << s;
  for (long s : {30, 40}) EXPECT_TRUE(StepExists(s)) << s;
  EXPECT_NE(out_.str().find("3 step directories removed"), std::string::npos) << out_.str();
  ASSERT_EQ(Run({"verify", dir_}), 0) << out_.str();
}

// A step an incident's replay bundle needs is kept (as the controller's retention keeps
// it), found through the store registry or --store; --ignore-replay-pins removes it.
TEST_F(CkptCmdTest, GcKeepsTheStepsReplayBundlesPin) {
  SaveHistory();
  const std::string db = state_ + "/bulwark.db";
  {
    auto store = Store::Open(db);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    JobRecord j;
    j.name = "gpt";
    Json nan = {{"kind", "nan"},
                {"replay", {{"checkpoint_dir", dir_ + "/"}, {"checkpoint_step", 20}}}};
    Json other = {{"kind", "hang"},
                  {"replay", {{"checkpoint_dir", "/elsewhere"}, {"checkpoint_step", 30}}}};
    j.report_json = Json{{"incidents", Json::array({nan, other, Json("not an incident")})}}.dump();
    ASSERT_TRUE((*store)->PutJob(j).ok());
  }
  // Not registered yet: --store names it.
  ASSERT_EQ(Run({"gc", dir_, "--keep", "1", "--store", db, "--dry-run", "--json"}), 0)
      << err_.str();
  Json dry = Json::parse(out_.str());
  EXPECT_EQ(dry["removed"], Json::array({25})) << dry.dump(2);  // 10: 20's dependency
  EXPECT_EQ(dry["kept_pinned"],
            Json::array({{{"step", 20}, {"by", "the replay bundle of job gpt, incident 1"}}}));
  // Registered (as `bulwark run` does): found without --store.
  ASSERT_TRUE(cli::RememberStore(cli::StoreRegistryPath(), db).ok());
  ASSERT_EQ(Run({"gc", dir_, "--keep", "1"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("; step 20 (pinned by the replay bundle of job gpt, incident 1)"),
            std::string::npos)
      << out_.str();
  for (long s : {10, 20, 30, 40}) EXPECT_TRUE(StepExists(s)) << s;
  EXPECT_FALSE(StepExists(25));
  ASSERT_EQ(Run({"gc", dir_, "--keep", "1", "--ignore-replay-pins"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("removed step 20 (committed; not among the newest 1"),
            std::string::npos)
      << out_.str();
  for (long s : {10, 20}) EXPECT_FALSE(StepExists(s)) << s;
  ASSERT_EQ(Run({"verify", dir_}), 0) << out_.str();
}

TEST_F(CkptCmdTest, UsageErrorsExitTwoAndNameTheArgument) {
  SaveHistory();
  EXPECT_EQ(Run({}), 2);
  EXPECT_NE(err_.str().find("give a subcommand"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"ls"}), 2);
  EXPECT_NE(err_.str().find("missing DIR"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"ls", dir_ + "/nope"}), 2);
  EXPECT_NE(err_.str().find("does not exist"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"inspect", dir_, "abc"}), 2);
  EXPECT_NE(err_.str().find("STEP must be a non-negative integer"), std::string::npos)
      << err_.str();
  EXPECT_EQ(Run({"inspect", dir_, "7"}), 2);
  EXPECT_NE(err_.str().find("10, 20, 25, 30, 40"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"inspect", dir_, "10", "--rank", "5"}), 2);
  EXPECT_NE(err_.str().find("--rank 5 is out of range"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"verify", dir_, "x1"}), 2);
  EXPECT_EQ(Run({"verify", dir_, "10", "--all"}), 2);
  EXPECT_EQ(Run({"gc", dir_, "--keep", "0"}), 2);
  EXPECT_NE(err_.str().find("--keep must be an integer >= 1"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"gc", dir_}), 2);
  EXPECT_NE(err_.str().find("--keep is required"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"gc", dir_, "--keep", "2", "--golden-every", "-3"}), 2);
  for (long s : {10, 20, 25, 30, 40}) EXPECT_TRUE(StepExists(s)) << s;
}

// `ls` and `gc` on an object tier: the history uploaded to a real s3rver on loopback
// (fails, never skips, when s3rver is not installed: run scripts/setup.sh).
TEST_F(CkptCmdTest, LsAndGcOnAnObjectTier) {
  objstore::S3TestServerOptions so;
  so.source_dir = BW_TEST_SOURCE_DIR;
  auto server = objstore::S3TestServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ::setenv("AWS_ACCESS_KEY_ID", objstore::S3TestServer::kAccessKey, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", objstore::S3TestServer::kSecretKey, 1);
  const std::string url = "s3://bw-cli/ckpt?endpoint=" + (*server)->endpoint();
  auto tier = ckpt::ObjectTier::OpenUrl(url);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  ASSERT_TRUE((*tier)->client()->CreateBucket().ok());
  SaveHistory();
  for (long s : {10, 20, 25, 30, 40}) {
    for (int r = 0; r < kWorld; ++r) {
      Status st = (*tier)->UploadShard(dir_, s, r, kWorld);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    if (s == 25) continue;  // uploaded, never committed
    Status st = (*tier)->Commit(dir_, s);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  ASSERT_EQ(Run({"ls", url}), 0) << err_.str();
  EXPECT_NE(out_.str().find("1 uncommitted or invalid step directory not shown"), std::string::npos)
      << out_.str();
  ASSERT_EQ(Run({"ls", url, "--all", "--json"}), 0) << err_.str();
  Json ls = Json::parse(out_.str());
  ASSERT_EQ(ls.size(), 5u) << out_.str();
  EXPECT_EQ(ls[2]["step"], 25);
  EXPECT_EQ(ls[2]["reason"], "uncommitted: COMMIT missing");
  EXPECT_EQ(ls[1]["depends"], Json::array({10}));

  ASSERT_EQ(Run({"gc", url, "--keep", "1", "--dry-run", "--json"}), 0) << err_.str();
  EXPECT_EQ(Json::parse(out_.str())["removed"], Json::array({10, 20, 25}));
  EXPECT_EQ(*(*tier)->ListCommitted(), (std::vector<long>{10, 20, 30, 40}));
  ASSERT_EQ(Run({"gc", url, "--keep", "1"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("removed step 25 (uncommitted"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("3 step directories removed"), std::string::npos) << out_.str();
  EXPECT_EQ(*(*tier)->ListCommitted(), (std::vector<long>{30, 40}));
  auto scan = (*tier)->Scan();
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->size(), 2u);

  EXPECT_EQ(Run({"ls", "s3://Bad_Bucket/x"}), 2);
  EXPECT_NE(err_.str().find("Bad_Bucket"), std::string::npos) << err_.str();
  EXPECT_EQ(Run({"gc", "s3://b12/x?colour=red", "--keep", "1"}), 2);
}

TEST_F(CkptCmdTest, EmptyDirectory) {
  EXPECT_EQ(Run({"ls", dir_}), 0);
  EXPECT_NE(out_.str().find("no step directories"), std::string::npos);
  EXPECT_EQ(Run({"verify", dir_}), 0);
  EXPECT_EQ(Run({"gc", dir_, "--keep", "1"}), 0);
  EXPECT_NE(out_.str().find("nothing to remove"), std::string::npos);
}

}  // namespace
}  // namespace bulwark::cli
