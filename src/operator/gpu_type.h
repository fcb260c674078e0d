// Bulwark's GPU type names (h100, a100, l4, ...) from the labels GPU nodes carry on
// real clusters. A TrainJob's scheduling.gpuType and the queues' nominalGpus keys use
// these names; docs/kubernetes.md ("GPU types") has the table.
//
// Precedence, first label that names a known model wins:
//   1. bulwark.dev/gpu-type                 explicit override, taken as written
//   2. nvidia.com/gpu.product               NVIDIA GPU feature discovery (GPU operator),
//                                           e.g. NVIDIA-H100-80GB-HBM3 -> h100
//   3. cloud.google.com/gke-accelerator     GKE, e.g. nvidia-h100-80gb -> h100
//   4. karpenter.k8s.aws/instance-gpu-name, eks.amazonaws.com/instance-gpu-name
//                                           Karpenter / EKS Auto Mode, e.g. a100
//   5. node.kubernetes.io/instance-type (or beta.kubernetes.io/instance-type)
//                                           well-known GPU instance families, e.g.
//                                           p5.48xlarge -> h100, a2-highgpu-8g -> a100,
//                                           Standard_ND96asr_v4 -> a100
// Memory size, form factor (SXM/PCIe/NVL), MIG and sharing suffixes are not part of the
// type: NVIDIA-A100-SXM4-40GB and NVIDIA-A100-80GB-PCIe are both a100 (label a node
// bulwark.dev/gpu-type to tell them apart).
//
// A product no rule knows (say NVIDIA-RTX-PRO-6000) becomes its label value in lower
// case ("nvidia-rtx-pro-6000"), with a note saying so: jobs asking for exactly that
// gpuType run there; jobs asking for h100 do not. Pure: no I/O, no state.
#pragma once

#include <string>

#include "common/json_util.h"

namespace bulwark::op {

struct GpuTypeGuess {
  std::string type;    // "" when no label names a GPU
  std::string source;  // the label key it came from ("" when none)
  std::string note;    // "" for a known model; else why the type is what it is
};

// `labels`: the Node's metadata.labels (a JSON object; anything else reads as empty).
GpuTypeGuess GpuTypeFromLabels(const Json& labels);

// The known model in a GPU feature discovery product name (nvidia.com/gpu.product) or
// an accelerator name (gke-accelerator, instance-gpu-name): "" when none.
std::string GpuModelFromName(const std::string& name);

// The GPU model of a well-known cloud instance type (AWS, Google Cloud, Azure): "" when
// the type is not in the table.
std::string GpuModelFromInstanceType(const std::string& instance_type);

}  // namespace bulwark::op
