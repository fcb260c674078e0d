#include "operator/gpu_type.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace bulwark::op {
namespace {

// Bulwark's names of the GPU models it recognises in product and accelerator names.
constexpr const char* kModels[] = {"b100", "b200", "b300",  "gb200", "gb300", "h100", "h200",
                                   "h20",  "h800", "gh200", "a100",  "a800",  "a30",  "a40",
                                   "a10",  "a10g", "l4",    "l40",   "l40s",  "v100", "t4",
                                   "p100", "p4",   "k80",   "m60"};

// Words before the model in product and accelerator names.
constexpr const char* kVendorWords[] = {"nvidia", "tesla"};

// Instance-type prefixes (lower case) of the clouds' GPU families.
struct Family {
  const char* prefix;
  const char* model;
};
constexpr Family kFamilies[] = {
    // AWS (EC2 accelerated computing)
    {"p6e-gb200.", "gb200"},
    {"p6-b200.", "b200"},
    {"p5en.", "h200"},
    {"p5e.", "h200"},
    {"p5.", "h100"},
    {"p4de.", "a100"},
    {"p4d.", "a100"},
    {"p3dn.", "v100"},
    {"p3.", "v100"},
    {"g6e.", "l40s"},
    {"g6.", "l4"},
    {"g5.", "a10g"},
    {"g4dn.", "t4"},
    // Google Cloud (accelerator-optimized and G2)
    {"a4x-highgpu-", "gb200"},
    {"a4-highgpu-", "b200"},
    {"a3-ultragpu-", "h200"},
    {"a3-megagpu-", "h100"},
    {"a3-highgpu-", "h100"},
    {"a3-edgegpu-", "h100"},
    {"a2-ultragpu-", "a100"},
    {"a2-megagpu-", "a100"},
    {"a2-highgpu-", "a100"},
    {"g2-standard-", "l4"},
    // Azure sizes that do not name their GPU (the others carry it: *_H100_v5, ...)
    {"standard_nd96asr_v4", "a100"},
    {"standard_nd40rs_v2", "v100"},
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == '-' || c == '_' || c == ' ' || c == '.') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool IsModel(const std::string& w) {
  return std::any_of(std::begin(kModels), std::end(kModels), [&](const char* m) { return w == m; });
}

std::string Label(const Json& labels, const char* key) {
  if (!labels.is_object()) return "";
  auto it = labels.find(key);
  return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::string GpuModelFromName(const std::string& name) {
  for (const std::string& w : Words(Lower(name))) {
    if (std::any_of(std::begin(kVendorWords), std::end(kVendorWords),
                    [&](const char* v) { return w == v; })) {
      continue;
    }
    return IsModel(w) ? w : "";  // the first word after the vendor names the model
  }
  return "";
}

std::string GpuModelFromInstanceType(const std::string& instance_type) {
  const std::string t = Lower(instance_type);
  for (const Family& f : kFamilies) {
    if (t.rfind(f.prefix, 0) == 0) return f.model;
  }
  if (t.rfind("standard_", 0) == 0) {  // Azure: Standard_ND96isr_H100_v5, Standard_NC24ads_A100_v4
    std::vector<std::string> w = Words(t);
    for (size_t i = 2; i < w.size(); ++i) {
      if (IsModel(w[i])) return w[i];
    }
  }
  return "";
}

GpuTypeGuess GpuTypeFromLabels(const Json& labels) {
  GpuTypeGuess g;
  if (std::string v = Label(labels, "bulwark.dev/gpu-type"); !v.empty()) {
    g.type = v;
    g.source = "bulwark.dev/gpu-type";
    return g;
  }
  // Labels that name the GPU, in precedence order; the first unknown one is remembered.
  constexpr const char* kNameLabels[] = {
      "nvidia.com/gpu.product", "cloud.google.com/gke-accelerator",
      "karpenter.k8s.aws/instance-gpu-name", "eks.amazonaws.com/instance-gpu-name"};
  GpuTypeGuess unknown;
  for (const char* key : kNameLabels) {
    const std::string v = Label(labels, key);
    if (v.empty()) continue;
    if (std::string m = GpuModelFromName(v); !m.empty()) {
      g.type = m;
      g.source = key;
      return g;
    }
    if (unknown.type.empty()) {
      unknown.type = Lower(v);
      unknown.source = key;
      unknown.note = std::string(key) + "=" + v + " names no GPU model Bulwark knows: the node's " +
                     "GPU type is \"" + unknown.type + "\" (jobs must ask for that gpuType), " +
                     "or label the node bulwark.dev/gpu-type (docs/kubernetes.md, \"GPU types\")";
    }
  }
  for (const char* key : {"node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type"}) {
    const std::string v = Label(labels, key);
    if (v.empty()) continue;
    if (std::string m = GpuModelFromInstanceType(v); !m.empty()) {
      g.type = m;
      g.source = key;
      return g;
    }
  }
  return unknown;
}

}  // namespace bulwark::op
