// Matrix products on NVIDIA GPUs for the `matmul` self-test (diag/diag.h): the CUDA
// runtime and cuBLAS, loaded at run time (dlopen), never linked, so every binary runs on
// a machine without them and the check falls back to the CPU. Tests load a fake library
// (testing/fake_cuda.cc) exporting both APIs at the same seam.
// Thread-compatible: one CudaBlas per thread (the CUDA current device is per thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::gpu {

class CudaBlas {
 public:
  // The libraries searched when none is named: CUDA 12, then 11, then the unversioned
  // names (a toolkit's development links).
  static const std::vector<std::string>& DefaultRuntimes();
  static const std::vector<std::string>& DefaultBlas();

  // Loads the runtime and cuBLAS (each the first of its list that loads; a list of one
  // to name a library) and counts the devices. Unavailable, with the reason in one
  // line, when a library is not found, the driver is missing or too old, or there is
  // no device: the caller tests on the CPU instead. FailedPrecondition for a library
  // that loads but lacks a symbol; Internal for any other CUDA error.
  static Result<std::unique_ptr<CudaBlas>> Open(const std::vector<std::string>& runtimes,
                                                const std::vector<std::string>& blas);
  ~CudaBlas();
  CudaBlas(const CudaBlas&) = delete;
  CudaBlas& operator=(const CudaBlas&) = delete;

  int device_count() const;
  // "libcudart.so.12 + libcublas.so.12": the libraries that loaded.
  const std::string& libraries() const;

  // c = a * b for row-major n x n float matrices, on `device`, with cuBLAS's SGEMM in
  // pedantic fp32 (no TF32). Internal with CUDA's or cuBLAS's error otherwise; `c` is
  // then unspecified. Device memory is released on every path.
  Status Product(int device, const std::vector<float>& a, const std::vector<float>& b, int n,
                 std::vector<float>* c);

 private:
  struct Impl;
  explicit CudaBlas(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bulwark::gpu
