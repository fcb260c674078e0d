#include "cli/diagnose_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(DiagnoseCmdTest, ABadOutputFormatIsAUsageError) {
  DiagnoseFlags f;
  f.output = "yaml";
  Out r = Diagnose(f);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("-o must be json"));
}

}  // namespace
}  // namespace bulwark::cli
