// `bulwark sim`: usage errors exit 2 with a message naming the problem and the fix;
// a good config prints the summary and writes JSON and CSV.
#include "cli/sim_cmd.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

class SimCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw-simcmd-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  int Run(const SimFlags& f) {
    out_.str("");
    err_.str("");
    return SimRun(f, out_, err_);
  }
  std::string dir_;
  std::ostringstream out_, err_;
};

SimFlags F(std::string config, std::string json = "", std::string csv = "", std::string seed = "") {
  SimFlags f;
  f.config = std::move(config);
  f.json = std::move(json);
  f.csv = std::move(csv);
  f.seed = std::move(seed);
  return f;
}

const char* kGood = R"(sim: {days: 1, seed: 1, sampleMinutes: 60}
cluster: {shape: {zones: 1, blocksPerZone: 1, racksPerBlock: 2, nodesPerRack: 4}}
queues: [{name: q, nominalGpus: {h100: 64}}]
workload: {jobs: [{id: a, queue: q, nodes: 4, workHours: 3}]}
failures: {preset: llama3, scale: 10}
)";

TEST_F(SimCmdTest, BadArgumentsExitTwoWithAFix) {
  EXPECT_EQ(Run({}), 2);
  EXPECT_NE(err_.str().find("give the simulation config"), std::string::npos);
  EXPECT_EQ(Run(F(dir_ + "/missing.yaml")), 2);
  EXPECT_NE(err_.str().find("cannot read config"), std::string::npos) << err_.str();
  const std::string good = Write("good.yaml", kGood);
  EXPECT_EQ(Run(F(good, "", "", "abc")), 2);
  EXPECT_NE(err_.str().find("--seed must be an integer"), std::string::npos);
  const std::string bad = Write("bad.yaml", std::string(kGood) + "sim2: 1\n");
  EXPECT_EQ(Run(F(bad)), 2);
  EXPECT_NE(err_.str().find("bad.yaml:6: sim2: unknown field"), std::string::npos) << err_.str();
  EXPECT_EQ(Run(F(good, dir_ + "/no/such/dir/out.json")), 1);
  EXPECT_NE(err_.str().find("could not write"), std::string::npos);
}

TEST_F(SimCmdTest, RunsAndWritesJsonAndCsv) {
  const std::string good = Write("good.yaml", kGood);
  ASSERT_EQ(Run(F(good, dir_ + "/r.json", dir_ + "/r.csv", "5")), 0) << err_.str();
  EXPECT_NE(out_.str().find("cluster ETTR"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("(seed 5)"), std::string::npos);
  std::ifstream csv(dir_ + "/r.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("time_h,running_jobs,pending_jobs,busy_gpus", 0), 0u);
  EXPECT_GT(fs::file_size(dir_ + "/r.json"), 100u);
}

TEST_F(SimCmdTest, ADashSendsCsvToStdoutAndNoFileNamedDashIsWritten) {
  const std::string good = Write("good.yaml", kGood);
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  const int rc = Run(F(good, "", "-"));
  const int both = Run(F(good, "-", "-"));
  fs::current_path(cwd);
  ASSERT_EQ(rc, 0) << err_.str();
  EXPECT_FALSE(fs::exists(dir_ + "/-"));
  EXPECT_EQ(both, 2);
  EXPECT_NE(err_.str().find("would both write to stdout"), std::string::npos) << err_.str();
  ASSERT_EQ(Run(F(good, "", "-")), 0);
  EXPECT_EQ(out_.str().rfind("time_h,running_jobs,pending_jobs,busy_gpus", 0), 0u) << out_.str();
}

TEST_F(SimCmdTest, CommandIsRegisteredOnTheApp) {
  CLI::App app;
  int rc = -1;
  auto* cmd = AddSimCommand(app, &rc, out_, err_);
  const std::string good = Write("good.yaml", kGood);
  std::vector<std::string> args = {"--json=-", good, "sim"};  // CLI11 parses reversed
  app.parse(args);
  EXPECT_TRUE(*cmd);
  EXPECT_EQ(rc, 0) << err_.str();
  EXPECT_EQ(out_.str().rfind("{", 0), 0u);
}

}  // namespace
}  // namespace bulwark::cli
