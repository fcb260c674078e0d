// CudaBlas against the fake CUDA runtime + cuBLAS (testing/fake_cuda.cc), loaded through
// the real dlopen seam.
#include "gpu/cuda_blas.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

namespace bulwark::gpu {
namespace {

using ::testing::HasSubstr;

class CudaBlasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"BULWARK_FAKE_CUDA_DEVICES", "BULWARK_FAKE_CUDA_COUNT_ERROR",
                          "BULWARK_FAKE_CUDA_MALLOC_ERROR", "BULWARK_FAKE_CUDA_SDC"}) {
      unsetenv(v);
    }
    lib_ = dlopen(BW_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);  // the fake's counters
    ASSERT_NE(lib_, nullptr) << dlerror();
    live_ = reinterpret_cast<long (*)()>(dlsym(lib_, "bw_fake_cuda_live_allocations"));
    ASSERT_NE(live_, nullptr);
  }
  void TearDown() override {
    if (lib_ != nullptr) dlclose(lib_);
  }
  static Result<std::unique_ptr<CudaBlas>> OpenFake() {
    return CudaBlas::Open({BW_FAKE_CUDA}, {BW_FAKE_CUDA});
  }
  void* lib_ = nullptr;
  long (*live_)() = nullptr;
};

TEST_F(CudaBlasTest, ProductIsRowMajorAB) {
  setenv("BULWARK_FAKE_CUDA_DEVICES", "2", 1);
  auto cuda = OpenFake();
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  EXPECT_EQ((*cuda)->device_count(), 2);
  EXPECT_EQ((*cuda)->libraries(), std::string(BW_FAKE_CUDA) + " + " + BW_FAKE_CUDA);
  // A = [[1,2],[3,4]], B = [[5,6],[7,8]]: A B = [[19,22],[43,50]] (B A would differ).
  std::vector<float> c;
  ASSERT_TRUE((*cuda)->Product(1, {1, 2, 3, 4}, {5, 6, 7, 8}, 2, &c).ok());
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
  EXPECT_EQ(live_(), 0);  // every device buffer freed
}

TEST_F(CudaBlasTest, ErrorsAreStatusesAndFreeTheDeviceMemory) {
  auto cuda = OpenFake();
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  std::vector<float> c;
  const Status bad_device = (*cuda)->Product(3, {1}, {1}, 1, &c);
  EXPECT_EQ(bad_device.code(), Code::kInvalidArgument);
  EXPECT_THAT(bad_device.message(), HasSubstr("device 3 of 1"));
  EXPECT_EQ((*cuda)->Product(0, {1, 2}, {1}, 1, &c).code(), Code::kInvalidArgument);
  setenv("BULWARK_FAKE_CUDA_MALLOC_ERROR", "1", 1);
  const Status oom = (*cuda)->Product(0, {1}, {2}, 1, &c);
  EXPECT_EQ(oom.code(), Code::kInternal);
  EXPECT_THAT(oom.message(), HasSubstr("cudaMalloc: out of memory (CUDA error 2)"));
  EXPECT_EQ(live_(), 0);
}

TEST_F(CudaBlasTest, NoLibraryNoDriverOrNoDeviceIsUnavailable) {
  auto missing =
      CudaBlas::Open({"/nonexistent-bulwark/libcudart.so.12", "libcudart-nope.so"}, {BW_FAKE_CUDA});
  EXPECT_EQ(missing.status().code(), Code::kUnavailable);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("no CUDA runtime (/nonexistent-bulwark/libcudart.so.12 not found; "
                        "libcudart-nope.so not found)"));
  auto no_blas = CudaBlas::Open({BW_FAKE_CUDA}, {"/nonexistent-bulwark/libcublas.so.12"});
  EXPECT_EQ(no_blas.status().code(), Code::kUnavailable);
  EXPECT_THAT(no_blas.status().message(), HasSubstr("no cuBLAS"));
  setenv("BULWARK_FAKE_CUDA_COUNT_ERROR", "100", 1);
  auto no_device = OpenFake();
  EXPECT_EQ(no_device.status().code(), Code::kUnavailable);
  EXPECT_THAT(no_device.status().message(),
              HasSubstr("no usable GPU: no CUDA-capable device is detected (CUDA error 100)"));
  setenv("BULWARK_FAKE_CUDA_COUNT_ERROR", "999", 1);
  EXPECT_EQ(OpenFake().status().code(), Code::kInternal);
  unsetenv("BULWARK_FAKE_CUDA_COUNT_ERROR");
  setenv("BULWARK_FAKE_CUDA_DEVICES", "0", 1);
  EXPECT_EQ(OpenFake().status().code(), Code::kUnavailable);
}

TEST_F(CudaBlasTest, ALibraryWithoutTheSymbolsIsRefused) {
  // libnvidia-ml's fake loads, but is no CUDA runtime.
  auto wrong = CudaBlas::Open({BW_FAKE_NVML}, {BW_FAKE_CUDA});
  EXPECT_EQ(wrong.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(wrong.status().message(), HasSubstr("has no symbol cudaGetErrorString"));
}

}  // namespace
}  // namespace bulwark::gpu
