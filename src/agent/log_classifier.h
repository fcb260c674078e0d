// Classifies one line of a rank's output as a known fatal error.
//
// Pure function, thread-safe (the compiled patterns are immutable statics).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace bulwark {

// The fatal-log subtype of `line`, or nullopt for an ordinary line. Subtypes, checked
// in this order (the first match wins):
//   "nccl_timeout"  NCCL.*[Tt]imeout / timed out, "Watchdog caught collective operation
//                   timeout", "ProcessGroupNCCL.*timed out" (not on "NCCL INFO" lines)
//   "oom"           "CUDA out of memory", "OutOfMemoryError", "Cannot allocate memory"
//   "ecc"           "ECC error", "uncorrectable ECC"
//   "xid"           the word "Xid" (NVIDIA driver error reports)
//   "cuda_error"    "CUDA error", "cudaError...", "CUBLAS_STATUS_..." (except _SUCCESS)
//   "disk_full"     "No space left on device", "[Errno 28]", "ENOSPC"
std::optional<std::string> ClassifyLogLine(std::string_view line);

}  // namespace bulwark
