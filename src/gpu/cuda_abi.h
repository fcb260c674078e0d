// The subset of the CUDA runtime and cuBLAS C APIs that gpu/cuda_blas.cc resolves at run
// time, declared here so nothing needs NVIDIA's headers: the same names, types and
// values as cuda_runtime_api.h and cublas_api.h (CUDA 11 and 12). Also what the test
// fake (testing/fake_cuda.cc) exports.
#pragma once

#include <cstddef>

extern "C" {

typedef int cudaError_t;  // cudaSuccess = 0
enum : int {
  cudaSuccess = 0,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
};
typedef int cudaMemcpyKind;
enum : int { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaDeviceSynchronize(void);
const char* cudaGetErrorString(cudaError_t error);

typedef struct cublasContext* cublasHandle_t;
typedef int cublasStatus_t;  // CUBLAS_STATUS_SUCCESS = 0
typedef int cublasOperation_t;
typedef int cublasMath_t;
enum : int { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1 };
enum : int { CUBLAS_OP_N = 0 };
// Pedantic: no reduced-precision (TF32) shortcuts, so the product is judged as fp32.
enum : int { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2 };

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc);

}  // extern "C"
