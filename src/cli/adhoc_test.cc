#include "cli/adhoc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark::cli {
namespace {

using ::testing::HasSubstr;

TEST(AdhocTest, JobNamesAreDns1123) {
  EXPECT_EQ(JobNameFromScript("train.py"), "train");
  EXPECT_EQ(JobNameFromScript("/a/b/train_GPT 2.py"), "train-gpt-2");
  EXPECT_EQ(JobNameFromScript("pkg.train"), "pkg");  // a module: its first component
  EXPECT_EQ(JobNameFromScript("3d_unet.py"), "job-3d-unet");
  EXPECT_EQ(JobNameFromScript("___.py"), "job");
  EXPECT_EQ(JobNameFromScript(std::string(100, 'a') + ".py").size(), 63u);
}

TEST(AdhocTest, FlagsBecomeTheSpecFields) {
  AdhocFlags f;
  f.script = "train.py";
  f.args = {"--lr", "3e-4", "true"};
  f.nnodes = "1:4";
  f.nproc_per_node = 8;
  f.max_restarts = 3;
  f.standby = 1;
  f.checkpoint_every = 50;
  auto m = AdhocManifest(f, "/work/dir");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const JobSpec& s = m->job.job;
  EXPECT_EQ(s.name, "train");
  EXPECT_EQ(s.nodes, 4);
  EXPECT_EQ(s.procs_per_node, 8);
  EXPECT_EQ(s.command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(s.args, (std::vector<std::string>{"--lr", "3e-4", "true"}));  // strings stay strings
  EXPECT_EQ(s.workdir, "/work/dir");
  EXPECT_EQ(s.checkpoint.dir, "/work/dir/checkpoints/train");
  EXPECT_EQ(s.checkpoint.interval_steps, 50);
  EXPECT_EQ(s.fault_policy.restart_budget, 3);
  EXPECT_EQ(s.fault_policy.spare_nodes, 1);
  EXPECT_EQ(s.elastic.min_nodes, 1);
}

TEST(AdhocTest, ModulesAndExecutables) {
  AdhocFlags f;
  f.script = "pkg.train";
  f.module = true;
  auto m = AdhocManifest(f, "/w");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->job.job.command, (std::vector<std::string>{"python3", "-m", "pkg.train"}));
  f.module = false;
  f.script = "./run.sh";
  m = AdhocManifest(f, "/w");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->job.job.command, (std::vector<std::string>{"./run.sh"}));
}

TEST(AdhocTest, BadFlagsNameTheFlag) {
  AdhocFlags f;
  f.script = "train.py";
  for (const char* bad : {"0", "x", "2:1", ":3", "1:", "99999999"}) {
    f.nnodes = bad;
    auto y = AdhocSpecYaml(f);
    ASSERT_FALSE(y.ok()) << bad;
    EXPECT_THAT(y.status().message(), HasSubstr("--nnodes")) << bad;
  }
  f.nnodes = "1";
  f.nproc_per_node = 0;
  EXPECT_THAT(AdhocSpecYaml(f).status().message(), HasSubstr("--nproc-per-node"));
  f.nproc_per_node = 1;
  f.name = "Bad_Name";
  auto m = AdhocManifest(f, "/w");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("name"));
  EXPECT_THAT(m.status().message(), HasSubstr("from the flags of `bulwark run`"));
  f.script = "";
  EXPECT_FALSE(AdhocSpecYaml(f).ok());
}

}  // namespace
}  // namespace bulwark::cli
