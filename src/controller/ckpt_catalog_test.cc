// The controller's checkpoint catalog seam: the remote catalog's requests, replies,
// re-sends and deadlines against a scripted transport and a fake clock, and the
// local catalog on real shards through an injected Env.
#include "controller/ckpt_catalog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <set>

#include "ckpt/test_util.h"

namespace bulwark {
namespace {

namespace tu = ckpt::test_util;

// Records what the catalog sends; `target` is the designated agent.
struct FakeAgents {
  std::string target = "node-0";
  std::set<std::string> refuse;  // sends to these fail
  std::vector<std::pair<std::string, Json>> sent;
  CatalogTransport Transport() {
    CatalogTransport t;
    t.designated = [this] { return target; };
    t.send = [this](const std::string& node, const Json& m) -> Status {
      if (refuse.count(node)) return Unavailable("connection closed");
      sent.emplace_back(node, m);
      return Status::Ok();
    };
    return t;
  }
};

CatalogConfig Config() {
  CatalogConfig c;
  c.disk_dir = "/ckpt/job";
  c.shared_dir = "/shared/job";
  c.world = 4;
  c.retain = {2, 100, {}};
  return c;
}

Json ListReply(long id, std::vector<long> disk, std::vector<long> shared) {
  return {{"type", "ckpt_result"},
          {"id", id},
          {"op", "list"},
          {"ok", true},
          {"committed", {{"disk", disk}, {"shared", shared}}}};
}

class ControllerRemoteCatalogTest : public ::testing::Test {
 protected:
  ControllerRemoteCatalogTest() : cat_(Config(), agents_.Transport(), &clock_, {10, 20, 100}) {}

  // Completes the listing the first Poll sends.
  void List(std::vector<long> disk) {
    EXPECT_TRUE(cat_.Poll().empty());
    ASSERT_FALSE(agents_.sent.empty());
    const Json req = agents_.sent.back().second;
    ASSERT_EQ(req["type"], "ckpt_list");
    ASSERT_TRUE(cat_.OnMessage(agents_.sent.back().first, ListReply(req["id"], disk, {})));
    auto evs = cat_.Poll();
    ASSERT_EQ(evs.size(), 1u);
    ASSERT_TRUE(evs[0].status.ok()) << evs[0].status.ToString();
    agents_.sent.clear();
  }

  FakeAgents agents_;
  FakeClock clock_;
  RemoteCatalog cat_;
};

TEST_F(ControllerRemoteCatalogTest, ListsFromTheDesignatedAgentBeforeSettling) {
  EXPECT_TRUE(cat_.Open().ok());
  EXPECT_FALSE(cat_.Settled());
  EXPECT_FALSE(cat_.Listed());
  EXPECT_EQ(cat_.NewestCommitted("disk", -1).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(cat_.Poll().empty());
  ASSERT_EQ(agents_.sent.size(), 1u);
  const auto& [node, req] = agents_.sent[0];
  EXPECT_EQ(node, "node-0");
  EXPECT_EQ(req["type"], "ckpt_list");
  EXPECT_EQ(req["dirs"]["disk"], "/ckpt/job");
  EXPECT_EQ(req["dirs"]["shared"], "/shared/job");
  EXPECT_FALSE(cat_.Settled());
  EXPECT_NE(cat_.Waiting().find("ckpt_list sent to node-0"), std::string::npos) << cat_.Waiting();
  // Polling again does not send a second listing while one is in flight.
  EXPECT_TRUE(cat_.Poll().empty());
  EXPECT_EQ(agents_.sent.size(), 1u);
  ASSERT_TRUE(cat_.OnMessage("node-0", ListReply(req["id"], {10, 20, 30}, {20})));
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].op, CatalogOp::kList);
  EXPECT_EQ(evs[0].node, "node-0");
  EXPECT_EQ(evs[0].committed["disk"], (std::vector<long>{10, 20, 30}));
  EXPECT_TRUE(cat_.Settled());
  EXPECT_TRUE(cat_.Listed());
  EXPECT_EQ(cat_.Waiting(), "");
  EXPECT_EQ(*cat_.NewestCommitted("disk", -1), 30);
  EXPECT_EQ(*cat_.NewestCommitted("disk", 25), 20);
  EXPECT_EQ(*cat_.NewestCommitted("shared", -1), 20);
  EXPECT_EQ(*cat_.NewestCommitted("disk", 5), -1);
}

TEST_F(ControllerRemoteCatalogTest, CommitRequestCarriesTheRetentionAndItsReplyUpdatesTheList) {
  List({10, 20});
  cat_.Commit("disk", 30);
  EXPECT_FALSE(cat_.Settled());  // a commit in flight: a resume chosen now could miss it
  EXPECT_TRUE(cat_.Poll().empty());
  ASSERT_EQ(agents_.sent.size(), 1u);
  const Json req = agents_.sent[0].second;
  EXPECT_EQ(req["type"], "ckpt_commit");
  EXPECT_EQ(req["tier"], "disk");
  EXPECT_EQ(req["step"], 30);
  EXPECT_EQ(req["world"], 4);
  EXPECT_EQ(req["dir"], "/ckpt/job");
  EXPECT_EQ(req["keep"], 2);
  EXPECT_EQ(req["golden_every"], 100);
  EXPECT_FALSE(req.contains("object_store"));
  clock_.Advance(1.5);
  Json reply = {{"type", "ckpt_result"},
                {"id", req["id"]},
                {"op", "commit"},
                {"ok", true},
                {"removed", {10}},
                {"committed", {{"disk", {20, 30}}}},
                {"retain_code", "INTERNAL"},
                {"retain_error", "rmdir failed"}};
  ASSERT_TRUE(cat_.OnMessage("node-0", reply));
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].op, CatalogOp::kCommit);
  EXPECT_EQ(evs[0].tier, "disk");
  EXPECT_EQ(evs[0].step, 30);
  EXPECT_TRUE(evs[0].status.ok());
  EXPECT_EQ(evs[0].retain.code(), Code::kInternal);
  EXPECT_EQ(evs[0].retain.message(), "rmdir failed");
  EXPECT_EQ(evs[0].removed, (std::vector<long>{10}));
  EXPECT_DOUBLE_EQ(evs[0].seconds, 1.5);
  EXPECT_TRUE(cat_.Settled());
  EXPECT_EQ(*cat_.NewestCommitted("disk", -1), 30);
  EXPECT_EQ(*cat_.NewestCommitted("disk", 15), -1);  // 10 was removed by retention
}

TEST_F(ControllerRemoteCatalogTest, FailedCommitKeepsTheErrorCodeAndTheList) {
  List({10});
  cat_.Commit("shared", 20);
  cat_.Poll();
  ASSERT_EQ(agents_.sent.size(), 1u);
  EXPECT_EQ(agents_.sent[0].second["dir"], "/shared/job");
  Json reply = {{"type", "ckpt_result"},
                {"id", agents_.sent[0].second["id"]},
                {"ok", false},
                {"code", "DATA_LOSS"},
                {"error", "shard 3 truncated"}};
  ASSERT_TRUE(cat_.OnMessage("node-0", reply));
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].status.code(), Code::kDataLoss);
  EXPECT_EQ(evs[0].status.message(), "shard 3 truncated");
  EXPECT_TRUE(evs[0].committed.empty());
  EXPECT_EQ(*cat_.NewestCommitted("disk", -1), 10);
}

TEST_F(ControllerRemoteCatalogTest, UnansweredRequestIsResentWhenItsAgentIsLost) {
  List({});
  cat_.Commit("disk", 40);
  cat_.Poll();
  ASSERT_EQ(agents_.sent.size(), 1u);
  const long id = agents_.sent[0].second["id"];
  // node-0 is lost before it answers: the same request goes to the next agent.
  cat_.OnAgentLost("node-0");
  agents_.target = "node-1";
  EXPECT_TRUE(cat_.Poll().empty());
  ASSERT_EQ(agents_.sent.size(), 2u);
  EXPECT_EQ(agents_.sent[1].first, "node-1");
  EXPECT_EQ(agents_.sent[1].second["id"], id);
  EXPECT_EQ(agents_.sent[1].second["type"], "ckpt_commit");
  // A late answer from the lost agent is stale and ignored.
  Json late = {{"type", "ckpt_result"}, {"id", id}, {"ok", false}, {"error", "too late"}};
  EXPECT_TRUE(cat_.OnMessage("node-0", late));
  EXPECT_TRUE(cat_.Poll().empty());
  EXPECT_FALSE(cat_.Settled());
  Json ok = {{"type", "ckpt_result"}, {"id", id}, {"ok", true}, {"committed", {{"disk", {40}}}}};
  EXPECT_TRUE(cat_.OnMessage("node-1", ok));
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_TRUE(evs[0].status.ok());
  EXPECT_EQ(evs[0].node, "node-1");
  EXPECT_TRUE(cat_.Settled());
  EXPECT_EQ(*cat_.NewestCommitted("disk", -1), 40);
}

TEST_F(ControllerRemoteCatalogTest, UnansweredRequestFailsAtItsDeadline) {
  List({});
  cat_.Commit("disk", 40);
  cat_.Poll();
  clock_.Advance(19.9);
  EXPECT_TRUE(cat_.Poll().empty());
  clock_.Advance(0.2);
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].status.code(), Code::kDeadlineExceeded);
  EXPECT_NE(evs[0].status.message().find("no reply from node-0 to ckpt_commit (disk step 40)"),
            std::string::npos)
      << evs[0].status.message();
  EXPECT_TRUE(cat_.Settled());
  // Its late reply finds no request.
  EXPECT_TRUE(cat_.OnMessage(
      "node-0", {{"type", "ckpt_result"}, {"id", agents_.sent[0].second["id"]}, {"ok", true}}));
  EXPECT_TRUE(cat_.Poll().empty());
}

TEST_F(ControllerRemoteCatalogTest, RequestWaitsForAnAgentThenFailsWithoutOne) {
  agents_.target = "";
  EXPECT_TRUE(cat_.Poll().empty());
  EXPECT_TRUE(agents_.sent.empty());
  EXPECT_NE(cat_.Waiting().find("ckpt_list waiting for a connected agent"), std::string::npos);
  clock_.Advance(5);
  agents_.target = "node-2";
  agents_.refuse = {"node-2"};
  EXPECT_TRUE(cat_.Poll().empty());
  EXPECT_NE(cat_.Waiting().find("node-2: UNAVAILABLE: connection closed"), std::string::npos)
      << cat_.Waiting();
  clock_.Advance(5.1);  // list deadline (10 s) from its creation: never sent
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].op, CatalogOp::kList);
  EXPECT_EQ(evs[0].status.code(), Code::kDeadlineExceeded);
  EXPECT_NE(evs[0].status.message().find("no agent connected to run ckpt_list"), std::string::npos)
      << evs[0].status.message();
  // The listing is asked for again (the resume step needs it), now that node-3 is up.
  EXPECT_FALSE(cat_.Settled());
  agents_.target = "node-3";
  cat_.Poll();
  ASSERT_EQ(agents_.sent.size(), 1u);
  EXPECT_EQ(agents_.sent[0].first, "node-3");
  EXPECT_EQ(agents_.sent[0].second["type"], "ckpt_list");
}

TEST_F(ControllerRemoteCatalogTest,
       ObjectTierRequestsNeedAnObjectStoreAndMalformedRepliesAreDropped) {
  List({});
  cat_.Commit("object", 10);  // no objectStore configured: nothing to do
  EXPECT_TRUE(cat_.Settled());
  cat_.Download(10);
  auto evs = cat_.Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].op, CatalogOp::kDownload);
  EXPECT_EQ(evs[0].status.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(agents_.sent.empty());
  EXPECT_FALSE(cat_.OnMessage("node-0", {{"type", "heartbeat"}}));
  EXPECT_TRUE(cat_.OnMessage("node-0", {{"type", "ckpt_result"}, {"id", "seven"}}));
  EXPECT_TRUE(cat_.OnMessage("node-0", {{"type", "ckpt_result"}, {"id", 999}}));
  EXPECT_TRUE(cat_.Poll().empty());

  CatalogConfig c = Config();
  c.object_store = "s3://b/p";
  RemoteCatalog with(c, agents_.Transport(), &clock_);
  BW_ASSERT_OK(with.Open());
  with.Commit("object", 10);
  with.Download(20);
  with.Poll();
  ASSERT_EQ(agents_.sent.size(), 3u);  // list, commit, download
  EXPECT_EQ(agents_.sent[1].second["type"], "ckpt_commit");
  EXPECT_EQ(agents_.sent[1].second["tier"], "object");
  EXPECT_EQ(agents_.sent[1].second["dir"], "/ckpt/job");  // committed there first
  EXPECT_EQ(agents_.sent[1].second["object_store"], "s3://b/p");
  EXPECT_EQ(agents_.sent[2].second["type"], "ckpt_download");
  EXPECT_EQ(agents_.sent[2].second["step"], 20);
  EXPECT_EQ(agents_.sent[2].second["dir"], "/ckpt/job");
}

// An Env that fails every call and counts them (the controller must not use it).
class CountingEnv : public ckpt::Env {
 public:
  explicit CountingEnv(ckpt::Env* base) : base_(base) {}
  std::atomic<int> calls{0};
  Result<std::unique_ptr<ckpt::WritableFile>> NewWritableFile(const std::string& p) override {
    calls++;
    return base_->NewWritableFile(p);
  }
  Result<std::unique_ptr<ckpt::ReadableFile>> OpenReadable(const std::string& p) override {
    calls++;
    return base_->OpenReadable(p);
  }
  Status Rename(const std::string& a, const std::string& b) override {
    calls++;
    return base_->Rename(a, b);
  }
  Status RemoveFile(const std::string& p) override {
    calls++;
    return base_->RemoveFile(p);
  }
  Status RemoveDir(const std::string& p) override {
    calls++;
    return base_->RemoveDir(p);
  }
  Status MkdirAll(const std::string& p) override {
    calls++;
    return base_->MkdirAll(p);
  }
  Status SyncDir(const std::string& p) override {
    calls++;
    return base_->SyncDir(p);
  }
  Result<std::vector<std::string>> ListDir(const std::string& p) override {
    calls++;
    return base_->ListDir(p);
  }
  Result<uint64_t> FileSize(const std::string& p) override {
    calls++;
    return base_->FileSize(p);
  }
  bool IsDir(const std::string& p) override {
    calls++;
    return base_->IsDir(p);
  }

 private:
  ckpt::Env* base_;
};

TEST(ControllerLocalCatalogTest, CommitsRetainsAndListsThroughTheInjectedEnv) {
  const std::string root = tu::MakeTempDir("/tmp", "bw-catalog");
  ASSERT_FALSE(root.empty());
  CountingEnv env(ckpt::Env::Default());
  FakeClock clock;
  CatalogConfig c;
  c.disk_dir = root + "/disk";
  c.world = 2;
  c.retain = {2, 0, {}};
  auto cat = NewLocalCatalog(c, &env, nullptr, &clock);
  BW_ASSERT_OK(cat->Open());
  EXPECT_GT(env.calls.load(), 0);  // the directory was made and listed through env
  auto evs = cat->Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].op, CatalogOp::kList);
  EXPECT_TRUE(evs[0].committed.at("disk").empty());
  EXPECT_TRUE(cat->Settled());
  auto t = tu::MakeT("w", ckpt::DType::kF32, {64}, 1);
  for (long step : {10, 20, 30}) {
    for (int rank = 0; rank < 2; ++rank) {
      BW_ASSERT_OK(ckpt::WriteShard(&env, c.disk_dir, step, rank, 2, {t.view()}, {}));
    }
    cat->Commit("disk", step);
    evs = cat->Poll();
    ASSERT_EQ(evs.size(), 1u);
    EXPECT_TRUE(evs[0].status.ok()) << evs[0].status.ToString();
    EXPECT_EQ(evs[0].step, step);
  }
  EXPECT_EQ(evs[0].removed, (std::vector<long>{10}));
  EXPECT_EQ(evs[0].committed.at("disk"), (std::vector<long>{20, 30}));
  EXPECT_EQ(*cat->NewestCommitted("disk", 25), 20);
  // A step missing a rank's shard does not commit, and nothing is listed.
  BW_ASSERT_OK(ckpt::WriteShard(&env, c.disk_dir, 40, 0, 2, {t.view()}, {}));
  cat->Commit("disk", 40);
  evs = cat->Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_FALSE(evs[0].status.ok());
  EXPECT_TRUE(evs[0].committed.empty());
  // Object tier operations without an object tier: commit is skipped, download fails.
  cat->Commit("object", 30);
  EXPECT_TRUE(cat->Poll().empty());
  cat->Download(30);
  evs = cat->Poll();
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].status.code(), Code::kFailedPrecondition);
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
}

}  // namespace
}  // namespace bulwark
