// The `gpu` self-test's verdict (pure) and the check through NVML's run-time seam: no
// driver passes with nothing to test; the fake libnvidia-ml (testing/fake_nvml.cc)
// plays a device with uncorrected ECC errors and a pending hardware XID.
#include "gpu/gpu_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace bulwark::gpu {
namespace {

using ::testing::HasSubstr;

GpuSample Healthy(int index) {
  GpuSample s;
  s.index = index;
  s.name = "NVIDIA H100 80GB HBM3";
  s.temp_c = 41;
  return s;
}

TEST(GpuHealthTest, HealthyDevicesPassAndProgramXidsFailNothing) {
  GpuHealth h = JudgeGpuHealth({Healthy(0), Healthy(1)}, {{0, "GPU-a", "xid", 13}});
  EXPECT_TRUE(h.ok) << h.evidence;
  EXPECT_THAT(h.evidence, HasSubstr("2 GPU(s) healthy: GPU 0 (NVIDIA H100 80GB HBM3): 41 C"));
  EXPECT_THAT(h.evidence, HasSubstr("program XID(s) 13 (the program's, not the machine's)"));
  EXPECT_TRUE(JudgeGpuHealth({}, {}).ok);
}

TEST(GpuHealthTest, EccHardwareXidsLostDevicesAndOverheatingFail) {
  GpuSample ecc = Healthy(0);
  ecc.ecc_dbe_volatile = 3;
  GpuSample lost = Healthy(1);
  lost.problems = {"power_w: GPU is lost (NVML error 15)"};
  GpuSample hot = Healthy(2);
  hot.temp_c = 97;
  hot.thermal_throttle = true;
  GpuHealth h = JudgeGpuHealth({ecc, lost, hot, Healthy(3)}, {{3, "GPU-d", "xid", 79}});
  EXPECT_FALSE(h.ok);
  EXPECT_THAT(h.evidence, HasSubstr("GPU 0 (NVIDIA H100 80GB HBM3): 3 uncorrected ECC error(s)"));
  EXPECT_THAT(h.evidence, HasSubstr("GPU 1 (NVIDIA H100 80GB HBM3): power_w: GPU is lost"));
  EXPECT_THAT(h.evidence, HasSubstr("GPU 2 (NVIDIA H100 80GB HBM3): 97 C and thermally throttled"));
  EXPECT_THAT(h.evidence, HasSubstr("GPU 3 (NVIDIA H100 80GB HBM3): XID 79"));
  // A hot device that is not throttled yet, or an ECC count NVML cannot read, passes.
  hot.thermal_throttle = false;
  GpuSample unknown = Healthy(4);
  unknown.ecc_dbe_volatile = 0;
  unknown.unsupported = {"ecc_dbe_volatile"};
  EXPECT_TRUE(JudgeGpuHealth({hot, unknown}, {}).ok);
}

TEST(GpuHealthTest, WithoutADriverThereIsNothingToTest) {
  GpuHealth h = CheckGpuHealth("/nonexistent-bulwark/libnvidia-ml.so.1");
  EXPECT_TRUE(h.ok);
  EXPECT_EQ(h.evidence,
            "no NVIDIA driver: /nonexistent-bulwark/libnvidia-ml.so.1 not found: no GPU to test");
}

TEST(GpuHealthTest, TheFakeDriversBadDeviceFailsTheCheck) {
  std::string dir = ::testing::TempDir() + "/gpu_health_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string state = dir + "/state.json";
  nlohmann::json dev = {{"name", "NVIDIA H100 80GB HBM3"},
                        {"uuid", "GPU-6a3c1f0e-1b2c-4d5e-8f90-0123456789ab"},
                        {"util", 0},
                        {"mem_used", 1},
                        {"mem_total", 2},
                        {"temp", 40},
                        {"power_mw", 70000},
                        {"sm_clock", 345},
                        {"throttle", 0},
                        {"ecc_sbe", 0},
                        {"ecc_dbe", 0}};
  nlohmann::json bad = dev;
  bad["uuid"] = "GPU-7b4d2a1f-2c3d-4e6f-9a01-123456789abc";
  bad["ecc_dbe"] = 2;
  std::ofstream(state) << nlohmann::json{{"devices", {dev, bad}},
                                         {"pending_events",
                                          {{{"device", 0}, {"type", "xid"}, {"data", 13}}}}}
                              .dump();
  ::setenv("BULWARK_FAKE_NVML_STATE", state.c_str(), 1);
  ::setenv("BULWARK_FAKE_NVML_LOG", (dir + "/calls.log").c_str(), 1);
  GpuHealth h = CheckGpuHealth(BW_FAKE_NVML);
  ::unsetenv("BULWARK_FAKE_NVML_STATE");
  ::unsetenv("BULWARK_FAKE_NVML_LOG");
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(h.ok) << h.evidence;
  EXPECT_THAT(h.evidence, HasSubstr("GPU 1 (NVIDIA H100 80GB HBM3): 2 uncorrected ECC error(s)"));
  EXPECT_THAT(h.evidence, HasSubstr("program XID(s) 13"));
}

}  // namespace
}  // namespace bulwark::gpu
