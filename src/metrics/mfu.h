// Model FLOPs utilisation (docs/monitoring.md, "MFU"): the peak-FLOPS table keyed by a
// GPU's name and the training dtype, and MFU itself. Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace bulwark::metrics {

// Dense peak FLOPS of one device for `dtype` ("bf16", "fp16", "fp8", "tf32", "fp32";
// empty = bf16), from the vendor's data sheet; `gpu_name` as NVML reports it ("NVIDIA
// H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", …; case and separators do not matter).
// 0 when the device or dtype is not in the table (the spec's monitoring.peakFlops
// then supplies it; on CPU it always does).
double PeakFlops(std::string_view gpu_name, std::string_view dtype);
// The table's rows, for docs and errors ("A100 bf16 312e12, …").
std::string PeakFlopsTable();

// MFU = flops_per_token × tokens_per_s ÷ (devices × peak_flops_per_device); 0 when any
// input is missing (≤ 0 or not finite).
double Mfu(double flops_per_token, double tokens_per_s, int devices, double peak_flops);

}  // namespace bulwark::metrics
