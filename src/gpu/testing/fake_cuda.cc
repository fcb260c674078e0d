// A scripted stand-in for the CUDA runtime and cuBLAS, for tests only: one shared
// library exporting the functions of gpu/cuda_abi.h with the same C signatures, whose
// "device memory" is host memory and whose SGEMM is a plain loop, so the matmul
// self-test's GPU path (gpu/cuda_blas.h, diag/diag.h) runs at its real seam (dlopen/
// dlsym) on a machine without a GPU. Both CudaBlas libraries are this one file.
//
// Environment, read at every call:
//   BULWARK_FAKE_CUDA_DEVICES=N        devices (default 1)
//   BULWARK_FAKE_CUDA_COUNT_ERROR=N    cudaGetDeviceCount answers error N
//   BULWARK_FAKE_CUDA_MALLOC_ERROR=1   cudaMalloc answers cudaErrorMemoryAllocation
//   BULWARK_FAKE_CUDA_SDC=K            device K computes wrong: one element of every
//                                      product is off by about one part in a thousand
//   BULWARK_FAKE_CUDA_SDC=K:flaky      device K's second and later products are wrong
// bw_fake_cuda_live_allocations() (not a CUDA function) counts cudaMalloc'd buffers not
// yet freed, and bw_fake_cuda_products() the SGEMMs run, so a test checks for leaks.
// Thread-safe for what the tests do: the current device is per thread, like CUDA's.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/cuda_abi.h"

struct cublasContext {
  int device;
};

namespace {

thread_local int current_device = 0;
std::atomic<long> live{0};
std::atomic<long> products{0};
std::atomic<long> products_on[64];

long EnvLong(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

}  // namespace

extern "C" {

long bw_fake_cuda_live_allocations() { return live.load(); }
long bw_fake_cuda_products() { return products.load(); }

cudaError_t cudaGetDeviceCount(int* count) {
  const long err = EnvLong("BULWARK_FAKE_CUDA_COUNT_ERROR", 0);
  if (err != 0) return static_cast<cudaError_t>(err);
  *count = static_cast<int>(EnvLong("BULWARK_FAKE_CUDA_DEVICES", 1));
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= EnvLong("BULWARK_FAKE_CUDA_DEVICES", 1) || device >= 64) {
    return 101;  // cudaErrorInvalidDevice
  }
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (EnvLong("BULWARK_FAKE_CUDA_MALLOC_ERROR", 0) != 0) return cudaErrorMemoryAllocation;
  *ptr = std::malloc(bytes);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  ++live;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr != nullptr) --live;
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    default:
      return "unknown error";
  }
}

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext{current_device};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

// Column-major C = alpha A B + beta C, no transposes (all Bulwark asks for).
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (transa != CUBLAS_OP_N || transb != CUBLAS_OP_N) return 7;  // CUBLAS_STATUS_INVALID_VALUE
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {  // beta 0: C is not read (it may hold garbage), as in BLAS
      float& x = c[i + static_cast<long>(j) * ldc];
      x = *beta == 0.0f ? 0.0f : x * *beta;
    }
    for (int l = 0; l < k; ++l) {
      const float blj = *alpha * b[l + static_cast<long>(j) * ldb];
      for (int i = 0; i < m; ++i) {
        c[i + static_cast<long>(j) * ldc] += a[i + static_cast<long>(l) * lda] * blj;
      }
    }
  }
  ++products;
  const int dev = handle->device;
  const long nth = dev >= 0 && dev < 64 ? ++products_on[dev] : 0;
  const char* sdc = std::getenv("BULWARK_FAKE_CUDA_SDC");
  if (sdc != nullptr && *sdc != '\0' && std::strtol(sdc, nullptr, 10) == dev) {
    const bool flaky = std::strstr(sdc, ":flaky") != nullptr;
    if (!flaky || nth >= 2) {
      float& x = c[(m / 2) + static_cast<long>(n / 2) * ldc];
      x += 1e-3f * (x < 0 ? -x : x) + 1e-3f;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
