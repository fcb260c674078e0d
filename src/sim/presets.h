// Failure-model presets from the literature (docs/simulator.md, "Failure presets").
// Internal to src/sim.
#pragma once

#include <array>
#include <string>

#include "sim/sim.h"

namespace bulwark::sim {

struct FailurePreset {
  const char* name;
  double per_1000_node_days;  // all unexpected job interruptions
  const char* source;
};

// Category shares used to split a preset's total rate into fault types: the Llama 3
// 54-day breakdown of 419 unexpected interruptions (arXiv 2407.21783, Table 5),
// mapped to our types:
//   hardware 315 = faulty GPU 148 + HBM3 72 + SRAM 19 + GPU system processor 17 +
//                  thermal 6 + NIC 7 + SSD 3 + PSU 3 + chassis 2 + IO board 2 + CPU 2 +
//                  system memory 2 + unplanned host maintenance 32
//   crash     91 = software bug 54 + dependency 2 + network switch/cable 35
//   hang       7 = NCCL watchdog timeouts
//   nan        6 = silent data corruption
inline constexpr std::array<double, kFaultTypes> kLlama3Counts = {91, 7, 6, 315, 0};
inline constexpr double kLlama3Total = 419;

// Known presets: "meta-rsc1" (6.50 / 1000 node-days, arXiv 2410.21680), "meta-rsc2"
// (2.34), "llama3" (419 / (54 d x 2048 nodes) = 3.79). Returns nullptr when unknown.
const FailurePreset* FindPreset(const std::string& name);
// Per-node-day rates by type: total split by kLlama3Counts shares (spot = 0).
std::array<double, kFaultTypes> PresetRates(const FailurePreset& p);
// "none, meta-rsc1, meta-rsc2, llama3".
std::string PresetNames();

}  // namespace bulwark::sim
