// The link check among the nodes of a diagnosis and the straggler trigger
// (controller_link.cc, docs/diagnosis.md), on a FakeClock with the test playing every
// agent (controller_fixture.h).
#include <gtest/gtest.h>

#include "controller/controller_fixture.h"

namespace bulwark {
namespace {

const char* kLinkSpec = R"(
name: link
nodes: 2
procsPerNode: 2
command: ["/usr/bin/python3", "train.py"]
checkpoint: {intervalSteps: 10}
faultPolicy:
  spareNodes: SPARES
  heartbeat: {intervalSeconds: 1000, misses: 3}
)";

std::string LinkSpec(int spares) {
  std::string s = kLinkSpec;
  s.replace(s.find("SPARES"), 6, std::to_string(spares));
  return s;
}

// A member's `link` result: its incoming link (from -> to) at `mib_s`.
Json LinkResult(int from, int to, double mib_s) {
  return {{"name", "link"},
          {"ok", true},
          {"seconds", 2.0},
          {"evidence", "ring member"},
          {"links", Json::array({Json{{"from", from}, {"to", to}, {"mib_s", mib_s}},
                                 Json{{"from", to}, {"to", from}, {"rtt_ms", 0.05}}})}};
}

Json Passed(const char* name) {
  return {{"name", name}, {"ok", true}, {"seconds", 0.1}, {"evidence", "fine"}};
}

class ControllerLinkTest : public testing::ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    diag_checks_ = Json::array({"matmul", "disk", "link"});
  }
  Json CollectiveFault(const char* kind, const char* subtype, int rank) {
    return FaultThenDiagnose(LinkSpec(0), kind, subtype, rank);
  }
  // With a standby connected, rank `slow` works three times as long as the others step
  // after step until its node gets a `diagnose`, which is returned; *standby: its agent.
  Json Straggle(int slow, int* standby) {
    Begin(LinkSpec(1));
    Expect(0, "start");
    Expect(1, "start");
    EXPECT_EQ(backend_.started.size(), 3u);
    *standby = Connect(backend_.started[2].node_id, 102);
    Started(0);
    for (int s = 1; s <= 60; ++s) {
      for (int r = 0; r < 4; ++r) {
        Send(r / 2, {{"type", "step"},
                     {"attempt", 0},
                     {"rank", r},
                     {"step", s},
                     {"loss", 1.0},
                     {"step_time", 0.3},
                     {"busy", r == slow ? 0.3 : 0.1},
                     {"t", clock_.NowWall()}});
      }
      clock_.Advance(1);
      for (int i = 0; i < 5; ++i) ctl_->RunOnce();
      for (const Json& m : agents_[slow / 2].Read()) {
        if (m["type"] == "diagnose") return m;
      }
    }
    return Json();
  }
  // Every member answers link_listening on `port`; returns each member's link_peers.
  std::vector<Json> Listen(const std::vector<std::pair<int, Json>>& members) {
    for (const auto& [agent, diagnose] : members) {
      Send(agent, {{"type", "link_listening"}, {"id", diagnose["id"]}, {"port", 40000 + agent}});
    }
    std::vector<Json> peers;
    for (const auto& [agent, diagnose] : members) peers.push_back(Expect(agent, "link_peers"));
    return peers;
  }
};

TEST_F(ControllerLinkTest, ACollectiveErrorTestsTheLinksAndNamesTheSlowNode) {
  Json diagnose = CollectiveFault("crash", "collective_error", 2);
  // node-1 is tested with the link check; node-0, the other node involved, is its peer.
  EXPECT_EQ(diagnose["checks"], Json::array({"matmul", "disk", "link"}));
  ASSERT_TRUE(diagnose["link"].is_object()) << diagnose;
  Json ref = Expect(0, "diagnose");
  EXPECT_EQ(ref["checks"], Json::array({"link"}));
  EXPECT_EQ(ref["link"]["session"], diagnose["link"]["session"]);
  std::vector<Json> peers = Listen({{1, diagnose}, {0, ref}});
  // The ring: node-1 first (under test), then node-0, each told its place.
  EXPECT_EQ(peers[0]["index"], 0);
  EXPECT_EQ(peers[1]["index"], 1);
  EXPECT_EQ(peers[0]["peers"], Json::array({"127.0.0.1:40001", "127.0.0.1:40000"}));
  EXPECT_EQ(peers[0]["id"], diagnose["id"]);
  EXPECT_EQ(peers[1]["id"], ref["id"]);
  // node-1 -> node-0 carries 2 MiB/s, node-0 -> node-1 900: node-1's link is slow.
  Send(0, {{"type", "diagnosis"}, {"id", ref["id"]}, {"results", {LinkResult(0, 1, 2.0)}}});
  for (int i = 0; i < 20; ++i) ctl_->RunOnce();
  EXPECT_TRUE(backend_.quarantined.empty());  // the verdict waits for the node under test
  Send(1, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results", {LinkResult(1, 0, 900.0), Passed("matmul"), Passed("disk:/ck")}}});
  Expect(1, "shutdown");
  ASSERT_EQ(backend_.quarantined.size(), 1u);
  EXPECT_NE(backend_.quarantined[0].find("link node-1->node-0 slow: 2.0 MiB/s"), std::string::npos)
      << backend_.quarantined[0];
  Json report = Finish();
  const Json& d = report["incidents"][0]["diagnosis"];
  EXPECT_EQ(d["verdict"], "unhealthy");
  EXPECT_EQ(d["link"]["members"], Json::array({"node-1", "node-0"}));
  EXPECT_EQ(d["link"]["at_fault"], Json::array({"node-1"}));
  EXPECT_EQ(d["link"]["evidence"],
            "node-0->node-1 900.0 MiB/s 0.050 ms; node-1->node-0 2.0 MiB/s 0.050 ms");
  bool link_failed = false;
  for (const Json& c : d["checks"]) link_failed |= c["name"] == "link" && c["ok"] == false;
  EXPECT_TRUE(link_failed) << d.dump();
}

TEST_F(ControllerLinkTest, APeerThatNeverListensCallsTheRingOffNotTheNode) {
  Json diagnose = CollectiveFault("fatal_log", "nccl_timeout", 1);
  Json ref = Expect(1, "diagnose");
  Send(0, {{"type", "link_listening"}, {"id", diagnose["id"]}, {"port", 40000}});
  // node-1 never listens: past the listen wait the ring is called off (no peers).
  clock_.Advance(6);
  Json off = Expect(0, "link_peers");
  EXPECT_TRUE(off["peers"].empty()) << off;
  Send(0, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results",
            {Json{{"name", "link"},
                  {"ok", false},
                  {"seconds", 0},
                  {"evidence", "not run: the controller called the ring off"}},
             Passed("matmul"), Passed("disk:/ck")}}});
  Json start = Expect(0, "start");  // healthy: kept in its slot, the relaunch goes on
  EXPECT_EQ(start["attempt"], 1);
  EXPECT_TRUE(backend_.quarantined.empty());
  Json report = Finish();
  const Json& d = report["incidents"][0]["diagnosis"];
  EXPECT_EQ(d["verdict"], "healthy") << d.dump();
  EXPECT_EQ(d["link"]["run"], false);
  EXPECT_NE(d["link"]["reason"].get<std::string>().find("only 1 of 2 nodes listened"),
            std::string::npos)
      << d.dump();
}

TEST_F(ControllerLinkTest, APeerThatNeverReportsIsNamedNotTheNodeUnderTest) {
  Json diagnose = CollectiveFault("crash", "collective_error", 2);
  Json ref = Expect(0, "diagnose");
  Listen({{1, diagnose}, {0, ref}});
  Send(1, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results", {LinkResult(1, 0, 900.0), Passed("matmul"), Passed("disk:/ck")}}});
  for (int i = 0; i < 20; ++i) ctl_->RunOnce();
  EXPECT_TRUE(backend_.quarantined.empty());
  clock_.Advance(26);               // past the ring's deadline: node-0 never reported
  Json start = Expect(1, "start");  // node-1 passed: kept in its slot
  EXPECT_EQ(start["attempt"], 1);
  EXPECT_TRUE(backend_.quarantined.empty());
  Json report = Finish();
  const Json& d = report["incidents"][0]["diagnosis"];
  EXPECT_EQ(d["verdict"], "healthy") << d.dump();
  EXPECT_EQ(d["link"]["at_fault"], Json::array({"node-0"})) << d.dump();
  EXPECT_NE(d["link"]["summary"].get<std::string>().find("not reported"), std::string::npos);
}

TEST_F(ControllerLinkTest, ACheckpointWriteThatFindsTheDiskFullTestsTheNode) {
  Begin(LinkSpec(1));
  Expect(0, "start");
  Expect(1, "start");
  const int standby = Connect(backend_.started[2].node_id, 102);
  Started(0);
  Step(0, 10);
  // A full shared volume is not one node's: an event, nothing stops.
  Send(1, {{"type", "ckpt"},
           {"attempt", 0},
           {"rank", 2},
           {"step", 10},
           {"tier", "shared"},
           {"error", "write /shared/x: No space left on device"}});
  for (int i = 0; i < 20; ++i) ctl_->RunOnce();
  for (const Json& m : agents_[0].Read()) EXPECT_NE(m["type"], "stop") << m.dump();
  // node-1's own disk is full: it leaves its slot for the standby and is tested.
  Send(1, {{"type", "ckpt"},
           {"attempt", 0},
           {"rank", 3},
           {"step", 10},
           {"tier", "disk"},
           {"error", "write /ck/step-000000000010/shard-3: No space left on device"}});
  Expect(0, "stop");
  Stopped(0, {});
  Json diagnose = Expect(1, "diagnose");
  EXPECT_EQ(diagnose["checks"], Json::array({"matmul", "disk"}));  // no link check
  Json start = Expect(standby, "start");
  EXPECT_EQ(start["group_rank"], 1);
  Send(1, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results",
            {Passed("matmul"), Json{{"name", "disk:/ck"},
                                    {"ok", false},
                                    {"seconds", 0.01},
                                    {"evidence",
                                     "write /ck/.bulwark-diag-7 after 0.0 MiB: No space left on "
                                     "device"}}}}});
  Expect(1, "shutdown");
  ASSERT_EQ(backend_.quarantined.size(), 1u);
  Json report = Finish();
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["kind"], "fatal_log");
  EXPECT_EQ(inc["subtype"], "disk_full");
  EXPECT_EQ(inc["rank"], 3);
  EXPECT_EQ(inc["node_id"], "node-1");
  EXPECT_EQ(inc["diagnosis"]["verdict"], "unhealthy");
  EXPECT_EQ(inc["diagnosis"]["reason"],
            "a checkpoint write found no space: the node's disks are tested");
}

TEST_F(ControllerLinkTest, AnOldAgentGetsNoLinkCheck) {
  diag_checks_ = Json::array({"matmul", "disk"});  // its hello names no link check
  Json diagnose = CollectiveFault("crash", "collective_error", 3);
  EXPECT_EQ(diagnose["checks"], Json::array({"matmul", "disk"}));
  EXPECT_FALSE(diagnose.contains("link"));
  Finish();
}

TEST_F(ControllerLinkTest, AStragglerIsTestedInPlaceAndSwappedWhenItsLinkIsSlow) {
  int standby = -1;
  Json diagnose = Straggle(2, &standby);  // rank 2, on node-1
  ASSERT_FALSE(diagnose.is_null()) << "the straggler's node was not tested";
  EXPECT_EQ(diagnose["checks"], Json::array({"matmul", "disk", "link"}));
  // Its reference peer is the idle standby; nothing was stopped.
  Json ref = Expect(standby, "diagnose");
  EXPECT_EQ(ref["checks"], Json::array({"link"}));
  for (const Json& m : agents_[0].Read()) EXPECT_NE(m["type"], "stop") << m.dump();
  Listen({{1, diagnose}, {standby, ref}});
  Send(standby, {{"type", "diagnosis"}, {"id", ref["id"]}, {"results", {LinkResult(0, 1, 2.0)}}});
  Send(1, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results", {LinkResult(1, 0, 800.0), Passed("matmul"), Passed("disk:/ck")}}});
  // The link is slow: node-1 is quarantined, the job stops and the standby takes slot 1.
  Expect(0, "stop");
  ASSERT_EQ(backend_.quarantined.size(), 1u);
  Stopped(0, {});
  Json start = Expect(standby, "start");
  EXPECT_EQ(start["group_rank"], 1);
  Json report = Finish();
  ASSERT_FALSE(report["observations"].empty()) << report.dump();
  const Json& o = report["observations"][0];
  EXPECT_EQ(o["kind"], "straggler");
  EXPECT_EQ(o["decision"]["action"], "test_in_place");
  EXPECT_EQ(o["diagnosis"]["verdict"], "unhealthy");
  EXPECT_EQ(o["diagnosis"]["link"]["at_fault"], Json::array({"node-1"}));
  EXPECT_EQ(o["diagnosis"]["charged_s"], 0.0);  // the job ran meanwhile
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["kind"], "node_lost");
  EXPECT_EQ(inc["subtype"], "quarantined");
  EXPECT_EQ(inc["decision"]["action"], "replace_node");
}

TEST_F(ControllerLinkTest, AStragglerWhoseChecksPassKeepsItsSlot) {
  int standby = -1;
  Json diagnose = Straggle(3, &standby);
  ASSERT_FALSE(diagnose.is_null());
  Json ref = Expect(standby, "diagnose");
  Listen({{1, diagnose}, {standby, ref}});
  Send(standby, {{"type", "diagnosis"}, {"id", ref["id"]}, {"results", {LinkResult(0, 1, 700)}}});
  Send(1, {{"type", "diagnosis"},
           {"id", diagnose["id"]},
           {"results", {LinkResult(1, 0, 800.0), Passed("matmul"), Passed("disk:/ck")}}});
  for (int i = 0; i < 50; ++i) ctl_->RunOnce();
  EXPECT_TRUE(backend_.quarantined.empty());
  for (const Json& m : agents_[0].Read()) EXPECT_NE(m["type"], "stop") << m.dump();
  Json report = Finish();
  const Json& o = report["observations"][0];
  EXPECT_EQ(o["diagnosis"]["verdict"], "healthy") << o.dump();
  EXPECT_EQ(o["diagnosis"]["action"], "kept in slot 1 (tested in place; the job went on)");
  EXPECT_EQ(o["diagnosis"]["link"]["summary"], "all 2 links bit-exact, median 750.0 MiB/s");
  EXPECT_TRUE(report["incidents"].empty()) << report["incidents"].dump();
}

}  // namespace
}  // namespace bulwark
