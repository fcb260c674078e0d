#include "agent/log_classifier.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

std::string Cls(const std::string& line) { return ClassifyLogLine(line).value_or("none"); }

TEST(LogClassifier, CudaErrors) {
  EXPECT_EQ(Cls("RuntimeError: CUDA error: device-side assert triggered"), "cuda_error");
  EXPECT_EQ(Cls("RuntimeError: CUDA error: an illegal memory access was encountered"),
            "cuda_error");
  EXPECT_EQ(Cls("terminate called after throwing an instance of 'c10::CUDAError' what(): "
                "cudaErrorLaunchFailure"),
            "cuda_error");
  EXPECT_EQ(Cls("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                "`cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`"),
            "cuda_error");
  EXPECT_EQ(Cls("cuBLAS call failed: CUBLAS_STATUS_NOT_INITIALIZED"), "cuda_error");
}

TEST(LogClassifier, NcclTimeouts) {
  EXPECT_EQ(Cls("[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
                "1800575 milliseconds before timing out."),
            "nccl_timeout");
  EXPECT_EQ(Cls("[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out."),
            "nccl_timeout");
  EXPECT_EQ(Cls("RuntimeError: NCCL communicator was aborted on rank 3. Original reason for "
                "failure was: NCCL error: Timeout"),
            "nccl_timeout");
}

TEST(LogClassifier, OutOfMemory) {
  EXPECT_EQ(Cls("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                "(GPU 0; 79.15 GiB total capacity; 75.01 GiB already allocated)"),
            "oom");
  EXPECT_EQ(Cls("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB"), "oom");
  EXPECT_EQ(Cls("OSError: [Errno 12] Cannot allocate memory"), "oom");
}

TEST(LogClassifier, DiskFull) {
  EXPECT_EQ(Cls("RuntimeError: write /ck/step-000000000010/shard-00002-of-00004.bws.tmp.77: "
                "No space left on device"),
            "disk_full");
  EXPECT_EQ(Cls("OSError: [Errno 28] No space left on device: '/ck/x'"), "disk_full");
  EXPECT_EQ(Cls("write failed: ENOSPC"), "disk_full");
  EXPECT_EQ(Cls("there is space left on the device"), "none");
}

TEST(LogClassifier, XidAndEcc) {
  EXPECT_EQ(Cls("NVRM: Xid (PCI:0000:3b:00): 79, pid=2323, GPU has fallen off the bus."), "xid");
  EXPECT_EQ(Cls("NVRM: Xid (PCI:0000:65:00): 48, pid=1, An uncorrectable double bit error (DBE) "
                "has been detected"),
            "xid");
  EXPECT_EQ(Cls("RuntimeError: CUDA error: uncorrectable ECC error encountered"), "ecc");
  EXPECT_EQ(Cls("GPU 3: ECC error detected in L2 cache"), "ecc");
}

TEST(LogClassifier, OrdinaryLinesAreNotFatal) {
  EXPECT_EQ(Cls("step 100 loss 2.3411 tokens/s 51234"), "none");
  EXPECT_EQ(Cls(""), "none");
  EXPECT_EQ(Cls("NCCL INFO Setting socket timeout to 30 s"), "none");
  EXPECT_EQ(Cls("NCCL version 2.18.1+cuda12.1"), "none");
  EXPECT_EQ(Cls("Using CUDA device 0; no CUDA errors so far"), "none");
  EXPECT_EQ(Cls("cuBLAS returned CUBLAS_STATUS_SUCCESS"), "none");
  EXPECT_EQ(Cls("ECC errors: 0 corrected, 0 uncorrected"), "none");
  EXPECT_EQ(Cls("Loaded dataset from /data/xidian_corpus"), "none");
  EXPECT_EQ(Cls("memory allocated: 12.5 GiB, reserved 14.0 GiB"), "none");
  EXPECT_EQ(Cls("torch.cuda.is_available() = True"), "none");
}

TEST(LogClassifier, HugeLineIsBounded) {
  std::string line(1 << 20, 'x');
  EXPECT_EQ(Cls(line), "none");
  EXPECT_EQ(Cls("CUDA error: boom " + line), "cuda_error");
}

}  // namespace
}  // namespace bulwark
