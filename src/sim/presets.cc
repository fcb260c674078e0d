#include "sim/presets.h"

namespace bulwark::sim {
namespace {

constexpr FailurePreset kPresets[] = {
    {"meta-rsc1", 6.50,
     "Meta RSC-1 (16k A100), arXiv 2410.21680: r_f = 6.50 failures per 1000 node-days"},
    {"meta-rsc2", 2.34,
     "Meta RSC-2 (8k A100), arXiv 2410.21680: r_f = 2.34 failures per 1000 node-days"},
    {"llama3", 1000.0 * 419.0 / (54.0 * 2048.0),
     "Llama 3 405B pre-training, arXiv 2407.21783: 419 unexpected interruptions in 54 days "
     "on 16,384 H100 (2,048 nodes)"},
};

}  // namespace

const char* FaultTypeName(FaultType t) {
  switch (t) {
    case FaultType::kCrash:
      return "crash";
    case FaultType::kHang:
      return "hang";
    case FaultType::kNan:
      return "nan";
    case FaultType::kHardware:
      return "hardware";
    case FaultType::kSpotReclaim:
      return "spot_reclaim";
  }
  return "unknown";
}

const FailurePreset* FindPreset(const std::string& name) {
  for (const FailurePreset& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::array<double, kFaultTypes> PresetRates(const FailurePreset& p) {
  std::array<double, kFaultTypes> r{};
  for (int i = 0; i < kFaultTypes; ++i) {
    r[i] = p.per_1000_node_days / 1000.0 * kLlama3Counts[i] / kLlama3Total;
  }
  return r;
}

std::string PresetNames() {
  std::string s = "none";
  for (const FailurePreset& p : kPresets) s += std::string(", ") + p.name;
  return s;
}

}  // namespace bulwark::sim
