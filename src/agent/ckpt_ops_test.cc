// The agent's checkpoint catalog handlers (ckpt_list, ckpt_commit, ckpt_download) on
// real shards in a temporary directory, and the worker thread that runs them.
#include "agent/ckpt_ops.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "ckpt/test_util.h"

namespace bulwark {
namespace {

namespace tu = ckpt::test_util;

const ObjectTierOpener kNoObjects = [](const std::string& url) -> Result<ckpt::ObjectTier*> {
  return Unavailable("no object store in this test (" + url + ")");
};

class CkptOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tu::MakeTempDir("/tmp", "bw-ckptops");
    ASSERT_FALSE(dir_.empty());
    disk_ = dir_ + "/disk";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void WriteStep(long step, int ranks, int world) {
    auto t = tu::MakeT("w", ckpt::DType::kF32, {32}, static_cast<uint64_t>(step));
    for (int r = 0; r < ranks; ++r) {
      BW_ASSERT_OK(ckpt::WriteShard(ckpt::Env::Default(), disk_, step, r, world, {t.view()}, {}));
    }
  }
  Json Commit(long id, long step) {
    Json req = {
        {"type", "ckpt_commit"}, {"id", id},  {"tier", "disk"},   {"step", step}, {"world", 2},
        {"dir", disk_},          {"keep", 2}, {"golden_every", 0}};
    auto r = RunCatalogRequest(req, ckpt::Env::Default(), kNoObjects);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  std::string dir_, disk_;
};

TEST_F(CkptOpsTest, CommitRunsRetentionAndRepliesWithTheCommittedList) {
  for (long step : {10, 20, 30}) {
    WriteStep(step, 2, 2);
    Json reply = Commit(step, step);
    EXPECT_EQ(reply["type"], "ckpt_result");
    EXPECT_EQ(reply["id"], step);
    EXPECT_EQ(reply["op"], "commit");
    EXPECT_EQ(reply["tier"], "disk");
    EXPECT_EQ(reply["ok"], true) << reply.dump();
    if (step == 30) {
      EXPECT_EQ(reply["removed"], Json::array({10}));
      EXPECT_EQ(reply["committed"]["disk"], Json::array({20, 30}));
    }
  }
  EXPECT_TRUE(std::filesystem::exists(ckpt::StepDir(disk_, 30) + "/COMMIT"));
  EXPECT_FALSE(std::filesystem::exists(ckpt::StepDir(disk_, 10)));

  Json list = {
      {"type", "ckpt_list"}, {"id", 99}, {"dirs", {{"disk", disk_}, {"shared", dir_ + "/absent"}}}};
  auto r = RunCatalogRequest(list, ckpt::Env::Default(), kNoObjects);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["op"], "list");
  EXPECT_EQ((*r)["ok"], true);
  EXPECT_EQ((*r)["committed"]["disk"], Json::array({20, 30}));
  EXPECT_EQ((*r)["committed"]["shared"], Json::array());
}

TEST_F(CkptOpsTest, IncompleteStepIsNotCommittedAndTheReplySaysWhy) {
  WriteStep(10, 1, 2);  // rank 1's shard is missing
  Json reply = Commit(5, 10);
  EXPECT_EQ(reply["ok"], false);
  ASSERT_TRUE(reply["error"].is_string());
  EXPECT_NE(reply["error"].get<std::string>().find("shard"), std::string::npos) << reply.dump();
  EXPECT_TRUE(reply["code"].is_string());
  EXPECT_FALSE(reply.contains("committed"));
  EXPECT_FALSE(std::filesystem::exists(ckpt::StepDir(disk_, 10) + "/COMMIT"));
}

TEST_F(CkptOpsTest, BadRequestsGetRepliesNamingTheField) {
  auto run = [](const Json& req) {
    return RunCatalogRequest(req, ckpt::Env::Default(), kNoObjects);
  };
  // Without an id there is nobody to answer.
  auto noid = run({{"type", "ckpt_commit"}, {"step", 1}});
  EXPECT_EQ(noid.status().code(), Code::kInvalidArgument);
  EXPECT_NE(noid.status().message().find("'id'"), std::string::npos) << noid.status().message();
  struct Case {
    Json req;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{{"type", "ckpt_commit"}, {"id", 1}, {"tier", "disk"}, {"world", 2}, {"dir", "/x"}},
       "'step'"},
      {{{"type", "ckpt_commit"},
        {"id", 1},
        {"step", -4},
        {"tier", "disk"},
        {"world", 2},
        {"dir", "/x"}},
       "'step' must be >= 0"},
      {{{"type", "ckpt_commit"},
        {"id", 1},
        {"step", 4},
        {"tier", "tape"},
        {"world", 2},
        {"dir", "/x"}},
       "'tier' must be disk, shared or object"},
      {{{"type", "ckpt_commit"},
        {"id", 1},
        {"step", 4},
        {"tier", "disk"},
        {"world", 0},
        {"dir", "/x"}},
       "'world'"},
      {{{"type", "ckpt_commit"},
        {"id", 1},
        {"step", 4},
        {"tier", "disk"},
        {"world", 1},
        {"dir", ""}},
       "'dir'"},
      {{{"type", "ckpt_list"}, {"id", 1}, {"dirs", "/x"}}, "'dirs'"},
      {{{"type", "ckpt_list"}, {"id", 1}, {"dirs", {{"tape", "/x"}}}}, "'dirs.tape'"},
      {{{"type", "ckpt_download"}, {"id", 1}, {"step", 3}, {"dir", "/x"}}, "'object_store'"},
      {{{"type", "ckpt_commit"},
        {"id", 1},
        {"step", 4},
        {"tier", "object"},
        {"world", 1},
        {"dir", "/x"},
        {"object_store", "s3://b"}},
       "no object store in this test"},
      {{{"type", "ckpt_frobnicate"}, {"id", 1}}, "unknown catalog request type"},
  };
  for (const Case& c : cases) {
    auto r = run(c.req);
    ASSERT_TRUE(r.ok()) << c.req.dump() << ": " << r.status().ToString();
    EXPECT_EQ((*r)["id"], 1);
    EXPECT_EQ((*r)["ok"], false) << c.req.dump();
    ASSERT_TRUE((*r)["error"].is_string()) << r->dump();
    EXPECT_NE((*r)["error"].get<std::string>().find(c.expect), std::string::npos)
        << c.req.dump() << " -> " << (*r)["error"];
  }
}

TEST_F(CkptOpsTest, WorkerAnswersInOrderOnItsOwnThread) {
  WriteStep(10, 2, 2);
  WriteStep(20, 2, 2);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Json> replies;
  CatalogWorker worker([&](Json r) {
    std::lock_guard<std::mutex> l(mu);
    replies.push_back(std::move(r));
    cv.notify_all();
  });
  EXPECT_EQ(worker.Submit({{"type", "ckpt_commit"}}).code(), Code::kInvalidArgument);
  for (long step : {10, 20}) {
    BW_EXPECT_OK(worker.Submit({{"type", "ckpt_commit"},
                                {"id", step},
                                {"tier", "disk"},
                                {"step", step},
                                {"world", 2},
                                {"dir", disk_}}));
  }
  BW_EXPECT_OK(worker.Submit({{"type", "ckpt_list"}, {"id", 3}, {"dirs", {{"disk", disk_}}}}));
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return replies.size() == 3; }));
  EXPECT_EQ(replies[0]["id"], 10);
  EXPECT_EQ(replies[1]["id"], 20);
  EXPECT_EQ(replies[2]["id"], 3);
  EXPECT_EQ(replies[2]["committed"]["disk"], Json::array({10, 20})) << replies[2].dump();
}

}  // namespace
}  // namespace bulwark
