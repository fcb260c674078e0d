#include "operator/node_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark::op {
namespace {

using ::testing::HasSubstr;

Json GpuNode(const std::string& name) {
  return Json::parse(R"({
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": ")" +
                     name + R"(",
      "labels": {"topology.kubernetes.io/zone": "us-central1-a",
                 "bulwark.dev/block": "b7", "bulwark.dev/rack": "r3",
                 "bulwark.dev/gpu-type": "h100", "cloud.google.com/gke-spot": "true"},
      "annotations": {"bulwark.dev/price-per-gpu-hour": "2.5"}},
    "spec": {},
    "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "200"},
               "conditions": [{"type": "MemoryPressure", "status": "False"},
                              {"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
  })");
}

TEST(ReadNodeTest, LabelsAllocatableAndPoolBecomeTheSchedulersNode) {
  const NodeView v = ReadNode(GpuNode("gpu-1"), "nvidia.com/gpu");
  EXPECT_FALSE(v.failed);
  EXPECT_EQ(v.reason, "");
  EXPECT_EQ(v.spec.name, "gpu-1");
  EXPECT_EQ(v.spec.gpu_type, "h100");
  EXPECT_EQ(v.spec.gpus, 8);
  EXPECT_EQ(v.spec.pool, sched::Pool::kSpot);
  EXPECT_EQ(v.spec.zone, "us-central1-a");
  EXPECT_EQ(v.spec.block, "b7");
  EXPECT_EQ(v.spec.rack, "r3");
  EXPECT_DOUBLE_EQ(v.spec.price_per_gpu_hour, 2.5);
  EXPECT_EQ(v.spec.health, sched::NodeHealth::kReady);
}

TEST(ReadNodeTest, CpuNodeAndMissingLabels) {
  Json n = GpuNode("cpu-1");
  n["metadata"]["labels"] = Json::object();
  n["status"]["allocatable"] = {{"cpu", "8"}};
  const NodeView v = ReadNode(n, "nvidia.com/gpu");
  EXPECT_EQ(v.spec.gpu_type, "cpu");
  EXPECT_EQ(v.spec.gpus, 1);
  EXPECT_EQ(v.spec.pool, sched::Pool::kOnDemand);
  EXPECT_EQ(v.spec.zone, "-");
  EXPECT_EQ(v.spec.rack, "-");
}

TEST(ReadNodeTest, FailuresCarryTheirReason) {
  Json n = GpuNode("a");
  n["status"]["conditions"][1] = {{"type", "Ready"},
                                  {"status", "Unknown"},
                                  {"reason", "NodeStatusUnknown"},
                                  {"message", "Kubelet stopped posting node status."}};
  NodeView v = ReadNode(n, "nvidia.com/gpu");
  EXPECT_TRUE(v.failed);
  EXPECT_THAT(v.reason, HasSubstr("NotReady (Unknown) NodeStatusUnknown: Kubelet stopped"));
  EXPECT_EQ(v.spec.health, sched::NodeHealth::kQuarantined);

  for (const char* taint : {"node.kubernetes.io/unreachable", "nvidia.com/gpu.unhealthy",
                            "cloud.google.com/impending-node-termination"}) {
    Json t = GpuNode("b");
    t["spec"]["taints"] = {{{"key", taint}, {"effect", "NoExecute"}}};
    v = ReadNode(t, "nvidia.com/gpu");
    EXPECT_TRUE(v.failed) << taint;
    EXPECT_THAT(v.reason, HasSubstr(taint));
  }
  Json k = GpuNode("c");
  k["status"]["conditions"].push_back(
      {{"type", "KernelDeadlock"}, {"status", "True"}, {"reason", "DockerHung"}});
  v = ReadNode(k, "nvidia.com/gpu");
  EXPECT_TRUE(v.failed);
  EXPECT_THAT(v.reason, HasSubstr("KernelDeadlock DockerHung"));
  Json none = GpuNode("d");
  none["status"].erase("conditions");
  EXPECT_TRUE(ReadNode(none, "nvidia.com/gpu").failed);
}

TEST(ReadNodeTest, QuarantineCordonAndDrainAreNotFailures) {
  Json q = GpuNode("q");
  q["spec"]["taints"] = {{{"key", "bulwark.dev/quarantined"}, {"effect", "NoSchedule"}}};
  NodeView v = ReadNode(q, "nvidia.com/gpu");
  EXPECT_FALSE(v.failed);
  EXPECT_TRUE(v.quarantined);
  EXPECT_EQ(v.spec.health, sched::NodeHealth::kQuarantined);
  Json c = GpuNode("c");
  c["spec"]["unschedulable"] = true;
  v = ReadNode(c, "nvidia.com/gpu");
  EXPECT_FALSE(v.failed);
  EXPECT_EQ(v.spec.health, sched::NodeHealth::kCordoned);
  Json d = GpuNode("d");
  d["spec"]["taints"] = {{{"key", "ToBeDeletedByClusterAutoscaler"}, {"effect", "NoSchedule"}}};
  v = ReadNode(d, "nvidia.com/gpu");
  EXPECT_EQ(v.spec.health, sched::NodeHealth::kDraining);
  EXPECT_THAT(v.reason, HasSubstr("ToBeDeletedByClusterAutoscaler"));
}

TEST(WholeQuantityTest, OnlyWholeNumbers) {
  EXPECT_EQ(WholeQuantity(Json("8")), 8);
  EXPECT_EQ(WholeQuantity(Json("8000m")), 8);
  EXPECT_EQ(WholeQuantity(Json("1k")), 1000);
  EXPECT_EQ(WholeQuantity(Json(4)), 4);
  EXPECT_EQ(WholeQuantity(Json("1500m")), -1);
  EXPECT_EQ(WholeQuantity(Json("8Gi")), -1);
  EXPECT_EQ(WholeQuantity(Json("abc")), -1);
  EXPECT_EQ(WholeQuantity(Json()), -1);
  EXPECT_EQ(WholeQuantity(Json(-2)), -1);
}

TEST(PodTroubleTest, FailedEvictedDeletedOrFine) {
  Json pod = {{"metadata", {{"name", "p"}}}, {"status", {{"phase", "Running"}}}};
  EXPECT_EQ(PodTrouble(pod), "");
  Json failed = pod;
  failed["status"] = Json::parse(R"({"phase": "Failed", "reason": "Evicted",
      "containerStatuses": [{"name": "agent",
        "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]})");
  EXPECT_EQ(PodTrouble(failed), "pod failed: Evicted (container agent: OOMKilled, exit code 137)");
  Json disrupted = pod;
  disrupted["status"]["conditions"] = {{{"type", "DisruptionTarget"},
                                        {"status", "True"},
                                        {"reason", "PreemptionByScheduler"},
                                        {"message", "preempted"}}};
  EXPECT_EQ(PodTrouble(disrupted), "pod disruption: PreemptionByScheduler: preempted");
  Json deleted = pod;
  deleted["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z";
  EXPECT_EQ(PodTrouble(deleted), "pod is being deleted");
}

TEST(QuarantineTaintTest, AddedOnce) {
  Json n = GpuNode("a");
  n["spec"]["taints"] = {{{"key", "other"}, {"effect", "NoSchedule"}}};
  Json t = WithQuarantineTaint(n, "NotReady (Unknown) NodeStatusUnknown");
  ASSERT_TRUE(t.is_array());
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1]["key"], "bulwark.dev/quarantined");
  EXPECT_EQ(t[1]["effect"], "NoSchedule");
  n["spec"]["taints"] = t;
  EXPECT_TRUE(WithQuarantineTaint(n, "again").is_null());
}

}  // namespace
}  // namespace bulwark::op
