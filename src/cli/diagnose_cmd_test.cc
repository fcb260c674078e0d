#include "cli/diagnose_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "common/net.h"

namespace bulwark::cli {
namespace {

using ::testing::HasSubstr;

struct Out {
  int rc;
  std::string out, err;
};

Out Diagnose(DiagnoseFlags f) {
  f.agent = BULWARK_AGENT_BIN;
  f.matmul_n = 64;
  f.disk_mib = 1;
  std::ostringstream out, err;
  const int rc = DiagnoseRun(f, out, err);
  return {rc, out.str(), err.str()};
}

TEST(DiagnoseCmdTest, HealthyIsZeroWithATableUnhealthyIsOneNamingTheCheck) {
  DiagnoseFlags f;
  f.checkpoint_dirs = {::testing::TempDir()};
  Out ok = Diagnose(f);
  EXPECT_EQ(ok.rc, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("CHECK "));
  EXPECT_THAT(ok.out, HasSubstr("healthy: matmul; disk:"));
  f.inject = "sdc";
  f.output = "json";
  Out bad = Diagnose(f);
  EXPECT_EQ(bad.rc, 1) << bad.out;
  const Json j = Json::parse(bad.out);
  EXPECT_EQ(j["healthy"], false);
  EXPECT_EQ(j["checks"][0]["name"], "matmul");
  EXPECT_EQ(j["checks"][0]["ok"], false);
  EXPECT_EQ(j["checks"][1]["ok"], true);
}

TEST(DiagnoseCmdTest, AGpuWithUncorrectedEccErrorsFailsTheGpuCheck) {
  // The fake libnvidia-ml (src/gpu/testing) plays one GPU with two uncorrected errors.
  const std::string state = ::testing::TempDir() + "/diagnose_nvml_state.json";
  std::ofstream(state) << Json{
      {"devices",
       {{{"name", "NVIDIA H100 80GB HBM3"},
         {"uuid", "GPU-6a3c1f0e-1b2c-4d5e-8f90-0123456789ab"},
         {"temp", 40},
         {"ecc_sbe", 0},
         {"ecc_dbe", 2}}}}}.dump();
  ::setenv("BULWARK_FAKE_NVML_STATE", state.c_str(), 1);
  DiagnoseFlags f;
  f.nvml_library = BW_FAKE_NVML;
  f.output = "json";
  Out r = Diagnose(f);
  ::unsetenv("BULWARK_FAKE_NVML_STATE");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["checks"].size(), 2u) << r.out;
  EXPECT_EQ(j["checks"][1]["name"], "gpu");
  EXPECT_EQ(j["checks"][1]["ok"], false);
  EXPECT_THAT(j["checks"][1]["evidence"].get<std::string>(),
              HasSubstr("GPU 0 (NVIDIA H100 80GB HBM3): 2 uncorrected ECC error(s)"));
  // Without a driver the check has nothing to test and passes.
  f.nvml_library = "/nonexistent-bulwark/libnvidia-ml.so.1";
  Out none = Diagnose(f);
  EXPECT_EQ(none.rc, 0) << none.out;
  EXPECT_THAT(none.out, HasSubstr("no GPU to test"));
}

TEST(DiagnoseCmdTest, ABadOutputFormatIsAUsageError) {
  DiagnoseFlags f;
  f.output = "yaml";
  Out r = Diagnose(f);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("-o must be json"));
}

}  // namespace
}  // namespace bulwark::cli
