#include "metrics/mfu.h"

#include <gtest/gtest.h>

namespace bulwark::metrics {
namespace {

TEST(PeakFlopsTest, NvmlNamesMapToTheDataSheet) {
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", "bf16"), 989e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 PCIe", ""), 756e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 NVL", "fp16"), 835e12);
  EXPECT_EQ(PeakFlops("NVIDIA H200", "bf16"), 989e12);
  EXPECT_EQ(PeakFlops("NVIDIA A100-SXM4-40GB", "bf16"), 312e12);
  EXPECT_EQ(PeakFlops("NVIDIA A100-SXM4-40GB", "tf32"), 156e12);
  EXPECT_EQ(PeakFlops("NVIDIA A100-SXM4-40GB", "fp8"), 0);  // no FP8 on Ampere
  EXPECT_EQ(PeakFlops("NVIDIA B200", "bf16"), 2.25e15);
  EXPECT_EQ(PeakFlops("NVIDIA GB200", "bf16"), 2.5e15);
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", "fp8"), 1979e12);
  EXPECT_EQ(PeakFlops("NVIDIA L4", "bf16"), 121e12);
  EXPECT_EQ(PeakFlops("NVIDIA L40S", "bf16"), 362e12);
  EXPECT_EQ(PeakFlops("Intel Xeon", "bf16"), 0);
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", "int4"), 0);
}

TEST(MfuTest, PalmRuleByHand) {
  // 124M-parameter GPT-2 (nanoGPT): 6N + 12·L·H·Q·T with L=12, H=12, Q=64, T=1024.
  const double fpt = 6 * 124e6 + 12.0 * 12 * 12 * 64 * 1024;
  // 8 × A100 at 1.2M tokens/s.
  EXPECT_NEAR(Mfu(fpt, 1.2e6, 8, 312e12), fpt * 1.2e6 / (8 * 312e12), 1e-12);
  EXPECT_NEAR(Mfu(fpt, 1.2e6, 8, 312e12), 0.4121, 1e-4);
  EXPECT_EQ(Mfu(0, 1e6, 8, 312e12), 0);
  EXPECT_EQ(Mfu(fpt, 1e6, 0, 312e12), 0);
  EXPECT_EQ(Mfu(fpt, 1e6, 8, 0), 0);
  EXPECT_EQ(Mfu(fpt, __builtin_nan(""), 8, 312e12), 0);
}

}  // namespace
}  // namespace bulwark::metrics
