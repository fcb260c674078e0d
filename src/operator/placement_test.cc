#include "operator/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark::op {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

NodeView Node(const std::string& name, const std::string& rack) {
  NodeView v;
  v.spec.name = name;
  v.spec.zone = "z";
  v.spec.block = "b";
  v.spec.rack = rack;
  return v;
}

// n0..n2 in rack r0, n3..n4 in rack r1.
std::vector<NodeView> Cluster() {
  return {Node("n0", "r0"), Node("n1", "r0"), Node("n2", "r0"), Node("n3", "r1"), Node("n4", "r1")};
}

sched::JobRequest Job(const std::string& id, int nodes, int standby) {
  sched::JobRequest r;
  r.id = id;
  r.queue = "default";
  r.nodes = nodes;
  r.standby = standby;
  return r;
}

ClusterPlacement Placement() {
  sched::QueueSpec q;
  q.name = "default";
  return ClusterPlacement({}, {q}, /*unlimited_quota=*/true);
}

TEST(ClusterPlacementTest, WaitsForNodesThenAdmitsByName) {
  ClusterPlacement p = Placement();
  EXPECT_FALSE(p.ready());
  EXPECT_THAT(p.Submit(Job("ml/a", 2, 1), 0).message(), HasSubstr("not seen the cluster"));
  ASSERT_TRUE(p.SyncNodes(Cluster(), 0).ok());
  EXPECT_TRUE(p.ready());
  ASSERT_TRUE(p.Submit(Job("ml/a", 2, 1), 0).ok());
  EXPECT_EQ(p.Phase("ml/a"), sched::JobPhase::kPending);
  const PlacementCycle c = p.Schedule(1);
  ASSERT_EQ(c.admitted.size(), 1u);
  EXPECT_EQ(c.admitted[0].first, "ml/a");
  // Best fit for gang + standby: rack r0 has exactly 3 free.
  EXPECT_THAT(c.admitted[0].second.gang, ElementsAre("n0", "n1"));
  EXPECT_THAT(c.admitted[0].second.standby, ElementsAre("n2"));
  EXPECT_THAT(p.Nodes("ml/a")->gang, ElementsAre("n0", "n1"));
}

TEST(ClusterPlacementTest, FailedNodeGetsTheStandbyOnceAndTheStandbyIsRestocked) {
  ClusterPlacement p = Placement();
  ASSERT_TRUE(p.SyncNodes(Cluster(), 0).ok());
  ASSERT_TRUE(p.Submit(Job("ml/a", 2, 1), 0).ok());
  ASSERT_EQ(p.Schedule(1).admitted.size(), 1u);  // gang n0, n1; standby n2
  std::vector<NodeView> nodes = Cluster();
  nodes[1].failed = true;
  nodes[1].reason = "NotReady";
  nodes[1].spec.health = sched::NodeHealth::kQuarantined;
  auto f = p.SyncNodes(nodes, 2);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].action, sched::FailureAction::kUseStandby);
  EXPECT_EQ((*f)[0].node, "n1");
  EXPECT_EQ((*f)[0].job, "ml/a");
  EXPECT_EQ((*f)[0].replacement, "n2");
  EXPECT_EQ((*f)[0].slot, 1);
  EXPECT_THAT(p.Nodes("ml/a")->gang, ElementsAre("n0", "n2"));
  // Seen again: not a new failure.
  EXPECT_TRUE(p.SyncNodes(nodes, 3)->empty());
  EXPECT_EQ(p.FailNode("n1", 3).reason, "already failed");
  const PlacementCycle c = p.Schedule(4);
  ASSERT_EQ(c.restocked.size(), 1u);
  EXPECT_EQ(c.restocked[0].first, "ml/a");
  EXPECT_EQ(c.restocked[0].second, "n3");  // rack r0 is full: the closest in the block
  // The node comes back but keeps Bulwark's quarantine taint: still out of service.
  nodes[1].failed = false;
  nodes[1].quarantined = true;
  EXPECT_TRUE(p.SyncNodes(nodes, 5)->empty());
  ASSERT_TRUE(p.Submit(Job("ml/b", 2, 0), 5).ok());
  EXPECT_TRUE(p.Schedule(6).admitted.empty());  // only n4 is free
  nodes[1].quarantined = false;
  nodes[1].spec.health = sched::NodeHealth::kReady;
  EXPECT_TRUE(p.SyncNodes(nodes, 7)->empty());
  const PlacementCycle d = p.Schedule(8);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_THAT(d.admitted[0].second.gang, ElementsAre("n1", "n4"));
}

TEST(ClusterPlacementTest, NodeSetChangesRebuildAndKeepRunningJobsWhereTheyAre) {
  ClusterPlacement p = Placement();
  ASSERT_TRUE(p.SyncNodes(Cluster(), 0).ok());
  ASSERT_TRUE(p.Submit(Job("ml/a", 2, 0), 0).ok());
  ASSERT_EQ(p.Schedule(1).admitted.size(), 1u);  // n3, n4
  ASSERT_TRUE(p.Submit(Job("ml/big", 4, 0), 1).ok());
  EXPECT_TRUE(p.Schedule(2).admitted.empty());  // 3 free
  // A node joins: rebuilt; a stays on n3, n4; big (pending, resubmitted) now fits.
  std::vector<NodeView> nodes = Cluster();
  nodes.push_back(Node("n5", "r2"));
  ASSERT_TRUE(p.SyncNodes(nodes, 3).ok());
  EXPECT_EQ(p.NodeCount(), 6);
  EXPECT_THAT(p.Nodes("ml/a")->gang, ElementsAre("n3", "n4"));
  const PlacementCycle c = p.Schedule(4);
  ASSERT_EQ(c.admitted.size(), 1u);
  EXPECT_EQ(c.admitted[0].first, "ml/big");
  // A node of a running job is deleted: reported once as failed; no free node left,
  // so the job is requeued; the rest is rebuilt without it.
  nodes.erase(nodes.begin() + 4);  // n4
  auto f = p.SyncNodes(nodes, 5);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->size(), 1u);
  EXPECT_EQ((*f)[0].node, "n4");
  EXPECT_EQ((*f)[0].action, sched::FailureAction::kRequeue);
  EXPECT_EQ(p.NodeCount(), 5);
  EXPECT_EQ(p.Phase("ml/a"), sched::JobPhase::kPending);
  EXPECT_EQ(p.Phase("ml/big"), sched::JobPhase::kRunning);
  ASSERT_TRUE(p.Finish("ml/big", 6).ok());
  EXPECT_TRUE(p.Finish("ml/unknown", 6).ok());
}

TEST(ClusterPlacementTest, AdoptRecordsARunningGang) {
  ClusterPlacement p = Placement();
  ASSERT_TRUE(p.SyncNodes(Cluster(), 0).ok());
  JobNodes where;
  where.gang = {"n1", "n2"};
  where.standby = {"n0"};
  ASSERT_TRUE(p.Adopt(Job("ml/a", 2, 1), where, 0).ok());
  EXPECT_EQ(p.Phase("ml/a"), sched::JobPhase::kRunning);
  EXPECT_THAT(p.Nodes("ml/a")->standby, ElementsAre("n0"));
  Status held = p.Adopt(Job("ml/b", 1, 0), JobNodes{{"n1"}, {}, ""}, 0);
  EXPECT_FALSE(held.ok());
  EXPECT_THAT(held.message(), HasSubstr("n1 is held by job ml/a"));
  Status unknown = p.Adopt(Job("ml/c", 1, 0), JobNodes{{"gpu-99"}, {}, ""}, 0);
  EXPECT_EQ(unknown.code(), Code::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("node gpu-99 is not among the cluster's"));
}

}  // namespace
}  // namespace bulwark::op
