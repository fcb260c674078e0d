// Whether a node's GPUs are fit to train on, from NVML (stop-diagnose's `gpu` check,
// docs/diagnosis.md). JudgeGpuHealth is pure; CheckGpuHealth loads NVML through the same
// run-time seam as the agent's metrics (nvml.h) and degrades to "nothing to test" on a
// machine without an NVIDIA driver. Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "gpu/nvml.h"

namespace bulwark::gpu {

struct GpuHealth {
  bool ok = true;
  std::string evidence;  // one line: each device's state, or what failed
};

// A device fails when it has uncorrected (double-bit) ECC errors since the driver
// loaded, when NVML cannot reach it (no handle, "GPU is lost"), when it is at 95 C or
// more and thermally throttled, or when it raised a hardware XID: 48 (double-bit ECC),
// 63/64 (row remapping), 74 (NVLink), 79 (fallen off the bus), 92 (high single-bit ECC
// rate), 94/95 (contained/uncontained ECC), 119/120 (GSP). XIDs a program causes (13,
// 31, 43, 45, ...) fail nothing: they name the program, not the machine. No devices:
// ok, with that said.
GpuHealth JudgeGpuHealth(const std::vector<GpuSample>& samples,
                         const std::vector<GpuEvent>& events);

// Opens NVML at `library`, samples every device, drains the pending events (at most 4
// drains) and judges. Without an NVIDIA driver (NVML UNAVAILABLE): ok, "no NVIDIA
// driver (...): no GPU to test". A driver that fails to initialise fails the check.
GpuHealth CheckGpuHealth(const std::string& library = Nvml::kDefaultLibrary);

}  // namespace bulwark::gpu
