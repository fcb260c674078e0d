// The node self-tests, run as the agent runs them (real bulwark-agent processes).
#include "diag/diag.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>

namespace bulwark::diag {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class DiagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bw-diag-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (mounted_) ::umount2(small_.c_str(), MNT_DETACH);
    fs::remove_all(dir_);
  }
  // A 1 MiB tmpfs: a checkpoint disk that is full after 1 MiB. Skips without the right.
  bool MountSmallDisk() {
    small_ = (dir_ / "small").string();
    fs::create_directories(small_);
    mounted_ = ::mount("tmpfs", small_.c_str(), "tmpfs", 0, "size=1m") == 0;
    return mounted_;
  }
  RunOptions Opts() const {
    RunOptions o;
    o.agent_binary = BULWARK_AGENT_BIN;
    o.matmul_n = 128;
    o.disk_bytes = 4 << 20;
    return o;
  }
  fs::path dir_;
  std::string small_;
  bool mounted_ = false;
};

TEST_F(DiagTest, AHealthyNodePassesEveryCheck) {
  const std::vector<CheckResult> r =
      RunChecks({{"matmul", "", 30, ""}, {"disk", dir_.string(), 30, ""}}, Opts());
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].ok) << r[0].evidence;
  EXPECT_THAT(r[0].evidence, HasSubstr("bitwise repeatable"));
  EXPECT_TRUE(r[1].ok) << r[1].evidence;
  EXPECT_EQ(r[1].name, "disk:" + dir_.string());
  EXPECT_THAT(r[1].evidence, HasSubstr("4 MiB written, fsynced and read back"));
  const Verdict v = Judge(r);
  EXPECT_TRUE(v.healthy) << v.summary;
  EXPECT_EQ(v.summary, "healthy: matmul; disk:" + dir_.string() + " passed");
  EXPECT_TRUE(fs::is_empty(dir_));  // the probe file is gone
}

// The GPU path, against the fake CUDA runtime + cuBLAS (gpu/testing/fake_cuda.cc).
class DiagGpuTest : public DiagTest {
 protected:
  void SetUp() override {
    DiagTest::SetUp();
    for (const char* v : {"BULWARK_FAKE_CUDA_DEVICES", "BULWARK_FAKE_CUDA_COUNT_ERROR",
                          "BULWARK_FAKE_CUDA_MALLOC_ERROR", "BULWARK_FAKE_CUDA_SDC"}) {
      unsetenv(v);
    }
  }
  static MatmulOptions Fake(int n = 48) {
    MatmulOptions o;
    o.n = n;
    o.cuda_runtimes = {BW_FAKE_CUDA};
    o.cublas = {BW_FAKE_CUDA};
    return o;
  }
};

TEST_F(DiagGpuTest, EveryDeviceRunsTheProductAndIsJudged) {
  setenv("BULWARK_FAKE_CUDA_DEVICES", "3", 1);
  const CheckResult r = MatmulSelfTest(Fake());
  EXPECT_TRUE(r.ok) << r.evidence;
  EXPECT_THAT(r.evidence, HasSubstr(std::string(BW_FAKE_CUDA) + " + " + BW_FAKE_CUDA + ", n=48"));
  for (const char* d : {"gpu0: max error", "; gpu1: max error", "; gpu2: max error"}) {
    EXPECT_THAT(r.evidence, HasSubstr(d));
  }
  EXPECT_THAT(r.evidence, Not(HasSubstr("cpu")));
}

TEST_F(DiagGpuTest, AWrongOrFlakyDeviceFailsTheCheckAndIsNamed) {
  setenv("BULWARK_FAKE_CUDA_DEVICES", "2", 1);
  setenv("BULWARK_FAKE_CUDA_SDC", "1", 1);  // device 1 is always a little wrong
  CheckResult r = MatmulSelfTest(Fake());
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.evidence, HasSubstr("gpu0: max error"));
  EXPECT_THAT(r.evidence, HasSubstr("; gpu1: wrong result: max error"));
  setenv("BULWARK_FAKE_CUDA_SDC", "0:flaky", 1);  // device 0 answers differently the 2nd time
  r = MatmulSelfTest(Fake());
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.evidence, HasSubstr("gpu0: max error"));
  EXPECT_THAT(r.evidence, HasSubstr("two runs of the same product differ"));
}

TEST_F(DiagGpuTest, ACudaErrorFailsTheCheckAndNoGpuFallsBackToTheCpu) {
  setenv("BULWARK_FAKE_CUDA_MALLOC_ERROR", "1", 1);
  CheckResult r = MatmulSelfTest(Fake());
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.evidence, HasSubstr("gpu0: CUDA failed: cudaMalloc: out of memory"));
  unsetenv("BULWARK_FAKE_CUDA_MALLOC_ERROR");
  setenv("BULWARK_FAKE_CUDA_COUNT_ERROR", "100", 1);  // a driver, no device
  r = MatmulSelfTest(Fake());
  EXPECT_TRUE(r.ok) << r.evidence;
  EXPECT_THAT(r.evidence, HasSubstr("cpu, n=48: max error"));
  EXPECT_THAT(r.evidence, HasSubstr("(no usable GPU: no CUDA-capable device is detected"));
  // A "CUDA runtime" that loads but is not one: broken install, the check fails.
  MatmulOptions wrong = Fake();
  wrong.cuda_runtimes = {BW_FAKE_NVML};
  r = MatmulSelfTest(wrong);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.evidence, HasSubstr("GPU path: " + std::string(BW_FAKE_NVML) + " has no symbol"));
}

TEST_F(DiagGpuTest, TheAgentProcessRunsTheGpuPath) {
  setenv("BULWARK_FAKE_CUDA_DEVICES", "2", 1);  // inherited by bulwark-agent diagnose
  setenv("BULWARK_FAKE_CUDA_SDC", "1", 1);
  CheckSpec c{"matmul", "", 30, ""};
  c.cuda_runtime = BW_FAKE_CUDA;
  c.cublas = BW_FAKE_CUDA;
  std::vector<CheckResult> r = RunChecks({c}, Opts());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_THAT(r[0].evidence, HasSubstr("gpu1: wrong result"));
  c.cuda_runtime = "";  // the CPU only
  r = RunChecks({c}, Opts());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].ok) << r[0].evidence;
  EXPECT_THAT(r[0].evidence, HasSubstr("cpu, n=128"));
}

TEST_F(DiagTest, SilentlyWrongComputeFailsTheMatmulCheck) {
  const CheckResult bad = MatmulSelfTest(64, /*inject_sdc=*/true);
  EXPECT_FALSE(bad.ok);
  EXPECT_THAT(bad.evidence, HasSubstr("two runs of the same product differ"));
  const std::vector<CheckResult> r = RunChecks({{"matmul", "", 30, "sdc"}}, Opts());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  const Verdict v = Judge(r);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.failed, std::vector<std::string>{"matmul"});
  EXPECT_THAT(v.summary, HasSubstr("unhealthy: matmul: "));
}

TEST_F(DiagTest, AFullCheckpointDiskFailsTheDiskCheckNamingIt) {
  if (!MountSmallDisk()) GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  const std::vector<CheckResult> r = RunChecks({{"disk", small_, 30, ""}}, Opts());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_THAT(r[0].evidence, HasSubstr("No space left on device")) << r[0].evidence;
  EXPECT_THAT(r[0].evidence, HasSubstr(small_)) << r[0].evidence;
  EXPECT_TRUE(fs::is_empty(small_));  // the partial probe file is removed
  const CheckResult missing = DiskSelfTest((dir_ / "nope").string(), 1024);
  EXPECT_FALSE(missing.ok);
  EXPECT_THAT(missing.evidence, HasSubstr("No such file or directory"));
}

TEST_F(DiagTest, AHungCheckIsKilledAtItsBudgetAndTheOthersStillRun) {
  const std::vector<CheckResult> r =
      RunChecks({{"matmul", "", 1, "hang"}, {"disk", dir_.string(), 30, ""}}, Opts());
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_THAT(r[0].evidence, HasSubstr("did not finish within its budget of 1 s (killed)"));
  EXPECT_TRUE(r[1].ok) << r[1].evidence;
  EXPECT_FALSE(Judge(r).healthy);
}

TEST_F(DiagTest, MalformedResultsAndMissingAgentAreFailedChecksNotCrashes) {
  EXPECT_FALSE(CheckResultFromJson(Json::parse(R"({"name": "x", "ok": "yes"})")).ok());
  EXPECT_THAT(CheckResultFromJson(Json::array()).status().message(), HasSubstr("JSON object"));
  RunOptions o = Opts();
  o.agent_binary = (dir_ / "no-such-agent").string();
  const std::vector<CheckResult> r = RunChecks({{"matmul", "", 5, ""}}, o);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].ok);
  EXPECT_THAT(r[0].evidence, HasSubstr("could not start"));
  EXPECT_EQ(Judge({}).summary, "healthy: no check was run");
}

}  // namespace
}  // namespace bulwark::diag
