#include "operator/gpu_type.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/node_health.h"
#include "operator/placement.h"

namespace bulwark::op {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* key;
  const char* value;
  const char* want;
};

// Label values as the GPU operator's feature discovery, GKE, Karpenter / EKS Auto Mode
// and the clouds' instance types write them.
constexpr Case kCases[] = {
    {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3", "h100"},
    {"nvidia.com/gpu.product", "NVIDIA-H100-PCIe", "h100"},
    {"nvidia.com/gpu.product", "NVIDIA-H100-NVL", "h100"},
    {"nvidia.com/gpu.product", "NVIDIA-H200", "h200"},
    {"nvidia.com/gpu.product", "NVIDIA-GH200-480GB", "gh200"},
    {"nvidia.com/gpu.product", "NVIDIA-B200", "b200"},
    {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB", "a100"},
    {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB", "a100"},
    {"nvidia.com/gpu.product", "NVIDIA-A100-80GB-PCIe", "a100"},
    {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "a100"},
    {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3-SHARED", "h100"},
    {"nvidia.com/gpu.product", "Tesla-V100-SXM2-16GB", "v100"},
    {"nvidia.com/gpu.product", "Tesla-T4", "t4"},
    {"nvidia.com/gpu.product", "NVIDIA-L4", "l4"},
    {"nvidia.com/gpu.product", "NVIDIA-L40S", "l40s"},
    {"nvidia.com/gpu.product", "NVIDIA-A10G", "a10g"},
    {"cloud.google.com/gke-accelerator", "nvidia-tesla-a100", "a100"},
    {"cloud.google.com/gke-accelerator", "nvidia-a100-80gb", "a100"},
    {"cloud.google.com/gke-accelerator", "nvidia-h100-80gb", "h100"},
    {"cloud.google.com/gke-accelerator", "nvidia-h100-mega-80gb", "h100"},
    {"cloud.google.com/gke-accelerator", "nvidia-h200-141gb", "h200"},
    {"cloud.google.com/gke-accelerator", "nvidia-l4", "l4"},
    {"cloud.google.com/gke-accelerator", "nvidia-tesla-t4", "t4"},
    {"cloud.google.com/gke-accelerator", "nvidia-b200", "b200"},
    {"karpenter.k8s.aws/instance-gpu-name", "h100", "h100"},
    {"karpenter.k8s.aws/instance-gpu-name", "a100", "a100"},
    {"karpenter.k8s.aws/instance-gpu-name", "a10g", "a10g"},
    {"eks.amazonaws.com/instance-gpu-name", "l40s", "l40s"},
    {"node.kubernetes.io/instance-type", "p5.48xlarge", "h100"},
    {"node.kubernetes.io/instance-type", "p5e.48xlarge", "h200"},
    {"node.kubernetes.io/instance-type", "p4d.24xlarge", "a100"},
    {"node.kubernetes.io/instance-type", "p4de.24xlarge", "a100"},
    {"node.kubernetes.io/instance-type", "p3dn.24xlarge", "v100"},
    {"node.kubernetes.io/instance-type", "g5.48xlarge", "a10g"},
    {"node.kubernetes.io/instance-type", "a2-highgpu-8g", "a100"},
    {"node.kubernetes.io/instance-type", "a2-ultragpu-8g", "a100"},
    {"node.kubernetes.io/instance-type", "a3-highgpu-8g", "h100"},
    {"node.kubernetes.io/instance-type", "a3-megagpu-8g", "h100"},
    {"node.kubernetes.io/instance-type", "a3-ultragpu-8g", "h200"},
    {"node.kubernetes.io/instance-type", "g2-standard-96", "l4"},
    {"node.kubernetes.io/instance-type", "Standard_ND96asr_v4", "a100"},
    {"node.kubernetes.io/instance-type", "Standard_ND96amsr_A100_v4", "a100"},
    {"node.kubernetes.io/instance-type", "Standard_ND96isr_H100_v5", "h100"},
    {"beta.kubernetes.io/instance-type", "p5.48xlarge", "h100"},
};

TEST(GpuTypeTest, RealLabelValuesMapToBulwarksNames) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(c.key) + "=" + c.value);
    const GpuTypeGuess g = GpuTypeFromLabels(Json{{c.key, c.value}});
    EXPECT_EQ(g.type, c.want);
    EXPECT_EQ(g.source, c.key);
    EXPECT_EQ(g.note, "");
  }
}

TEST(GpuTypeTest, TheOverrideWinsThenTheProductThenTheCloudLabels) {
  Json labels = {{"bulwark.dev/gpu-type", "h100-80g"},
                 {"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"},
                 {"cloud.google.com/gke-accelerator", "nvidia-l4"},
                 {"node.kubernetes.io/instance-type", "p5.48xlarge"}};
  EXPECT_EQ(GpuTypeFromLabels(labels).type, "h100-80g");  // as written
  labels.erase("bulwark.dev/gpu-type");
  EXPECT_EQ(GpuTypeFromLabels(labels).type, "a100");
  labels.erase("nvidia.com/gpu.product");
  EXPECT_EQ(GpuTypeFromLabels(labels).type, "l4");
  labels.erase("cloud.google.com/gke-accelerator");
  EXPECT_EQ(GpuTypeFromLabels(labels).type, "h100");
}

TEST(GpuTypeTest, AnUnknownProductIsItsOwnTypeWithANote) {
  GpuTypeGuess g = GpuTypeFromLabels(Json{{"nvidia.com/gpu.product", "NVIDIA-RTX-PRO-6000"}});
  EXPECT_EQ(g.type, "nvidia-rtx-pro-6000");
  EXPECT_EQ(g.source, "nvidia.com/gpu.product");
  EXPECT_THAT(g.note, HasSubstr("NVIDIA-RTX-PRO-6000 names no GPU model Bulwark knows"));
  EXPECT_THAT(g.note, HasSubstr("bulwark.dev/gpu-type"));
  // A known instance type below it still names the model.
  g = GpuTypeFromLabels(Json{{"nvidia.com/gpu.product", "NVIDIA-Graphics-Device"},
                             {"node.kubernetes.io/instance-type", "a3-highgpu-8g"}});
  EXPECT_EQ(g.type, "h100");
  EXPECT_EQ(g.note, "");
  // An instance type that is not a GPU family names nothing.
  g = GpuTypeFromLabels(Json{{"node.kubernetes.io/instance-type", "m5.large"}});
  EXPECT_EQ(g.type, "");
  EXPECT_EQ(GpuTypeFromLabels(Json()).type, "");
  EXPECT_EQ(GpuModelFromName("NVIDIA-GeForce-RTX-4090"), "");
}

Json LabelledNode(const std::string& name, const Json& labels) {
  return {{"metadata", {{"name", name}, {"labels", labels}}},
          {"status",
           {{"allocatable", {{"nvidia.com/gpu", "8"}}},
            {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

TEST(GpuTypeTest, ReadNodeTakesTheTypeFromTheProductAndNotesUnlabelledNodes) {
  NodeView v = ReadNode(LabelledNode("n", {{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}),
                        "nvidia.com/gpu");
  EXPECT_EQ(v.spec.gpu_type, "h100");
  EXPECT_EQ(v.spec.gpus, 8);
  EXPECT_EQ(v.gpu_note, "");
  v = ReadNode(LabelledNode("n", Json::object()), "nvidia.com/gpu");
  EXPECT_EQ(v.spec.gpu_type, "gpu");
  EXPECT_THAT(v.gpu_note, HasSubstr("no label names the node's GPU model"));
}

// The defect of issue 16 at the operator's node index: nodes labelled only as the GPU
// operator labels them admit an h100 gang.
TEST(GpuTypeTest, AnH100GangIsAdmittedOnNodesLabelledOnlyByFeatureDiscovery) {
  sched::QueueSpec q;
  q.name = "default";
  ClusterPlacement p(sched::SchedulerConfig{}, {q}, /*unlimited_quota=*/true);
  std::vector<NodeView> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(ReadNode(LabelledNode("gpu-" + std::to_string(i),
                                          {{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}),
                             "nvidia.com/gpu"));
  }
  ASSERT_TRUE(p.SyncNodes(nodes, 0).ok());
  sched::JobRequest req;
  req.id = "ml/llama";
  req.queue = "default";
  req.nodes = 2;
  req.gpu_type = "h100";
  ASSERT_TRUE(p.Submit(req, 0).ok());
  PlacementCycle c = p.Schedule(0);
  ASSERT_EQ(c.admitted.size(), 1u);
  EXPECT_EQ(c.admitted[0].first, "ml/llama");
  EXPECT_EQ(c.admitted[0].second.gang.size(), 2u);
}

}  // namespace
}  // namespace bulwark::op
