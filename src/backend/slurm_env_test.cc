// The Slurm environment reader (slurm_env.h): hostlists and allocations against their
// rules, and against a real Slurm (the test cluster of testing/slurm_cluster.h) as the
// oracle: `scontrol show hostnames` expands the same expressions, and srun tasks'
// own environments parse to the cluster's nodes.
#include "backend/slurm_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "backend/testing/slurm_cluster.h"

namespace bulwark::slurm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Expand(const std::string& e) {
  auto r = ExpandHostlist(e);
  EXPECT_TRUE(r.ok()) << e << ": " << r.status().ToString();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(HostlistTest, RangesListsPaddingAndProducts) {
  EXPECT_THAT(Expand("node1"), ElementsAre("node1"));
  EXPECT_THAT(Expand("gpu[01-03,07],login1"),
              ElementsAre("gpu01", "gpu02", "gpu03", "gpu07", "login1"));
  EXPECT_THAT(Expand("n[8-11]"), ElementsAre("n8", "n9", "n10", "n11"));
  EXPECT_THAT(Expand("n[098-101]"), ElementsAre("n098", "n099", "n100", "n101"));
  EXPECT_THAT(Expand("r[1-2]n[1-2]-ib"), ElementsAre("r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"));
  EXPECT_THAT(Expand("a,b[3],c"), ElementsAre("a", "b3", "c"));
  EXPECT_EQ(Expand("x[0-65535]").size(), 65536u);
}

TEST(HostlistTest, MalformedExpressionsNameThePositionAndTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"gpu[01-03", "'[' is never closed at character 4"},
      {"gpu01]", "']' without '['"},
      {"gpu[3-1]", "range \"3-1\" goes down"},
      {"gpu[a-b]", "\"a-b\" is not a number"},
      {"gpu[]", "\"\" is not a number"},
      {"gpu[1,]", "\"\" is not a number"},
      {"a,,b", "an empty name at character 3"},
      {"a,", "a trailing ','"},
      {"a b", "a space or control character"},
      {"x[[1]]", "brackets nest"},
      {"x[0-65536]", "more than 65536 names"},
      {"x[1-300]y[1-300]", "more than 65536 names"},
      {"", "hostlist is empty"},
  };
  for (const auto& [expr, want] : cases) {
    auto r = ExpandHostlist(expr);
    ASSERT_FALSE(r.ok()) << expr;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << expr;
    EXPECT_THAT(r.status().message(), HasSubstr(want)) << expr;
  }
}

TEST(AllocationTest, ReadsABatchScriptsAndATasksEnvironment) {
  auto outside = AllocationFromEnv({{"HOME", "/root"}});
  EXPECT_EQ(outside.status().code(), Code::kNotFound);
  EXPECT_THAT(outside.status().message(), HasSubstr("not inside a Slurm allocation"));
  auto a = AllocationFromEnv({{"SLURM_JOB_ID", "4242"},
                              {"SLURM_JOB_NODELIST", "gpu[01-03]"},
                              {"SLURM_JOB_NUM_NODES", "3"},
                              {"SLURM_JOB_PARTITION", "train"},
                              {"SLURM_CPUS_ON_NODE", "96"},
                              {"SLURM_NODEID", "2"},
                              {"SLURM_PROCID", "2"},
                              {"SLURM_NTASKS", "3"}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->job_id, "4242");
  EXPECT_THAT(a->nodes, ElementsAre("gpu01", "gpu02", "gpu03"));
  EXPECT_EQ(a->partition, "train");
  EXPECT_EQ(a->cpus_on_node, 96);
  EXPECT_EQ(a->node_id, 2);
  EXPECT_EQ(a->proc_id, 2);
  EXPECT_EQ(a->ntasks, 3);
  auto batch = AllocationFromEnv({{"SLURM_JOBID", "7"}, {"SLURM_NODELIST", "n1"}});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->node_id, -1);  // the batch script's shell is no task
}

TEST(AllocationTest, MalformedVariablesAreNamed) {
  const std::map<std::string, std::string> base = {{"SLURM_JOB_ID", "1"},
                                                   {"SLURM_JOB_NODELIST", "n[1-2]"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto env = base;
    env[k] = v;
    return AllocationFromEnv(env);
  };
  EXPECT_THAT(with("SLURM_JOB_NUM_NODES", "3").status().message(),
              HasSubstr("SLURM_JOB_NUM_NODES=3 but SLURM_JOB_NODELIST names 2 nodes"));
  EXPECT_THAT(with("SLURM_NODEID", "2").status().message(),
              HasSubstr("SLURM_NODEID=2 is outside the 2 nodes"));
  EXPECT_THAT(with("SLURM_NTASKS", "-1").status().message(),
              HasSubstr("SLURM_NTASKS=\"-1\" is not a non-negative integer"));
  EXPECT_THAT(with("SLURM_JOB_NODELIST", "n[1-").status().message(),
              HasSubstr("SLURM_JOB_NODELIST"));
  EXPECT_THAT(with("SLURM_JOB_ID", "abc").status().message(), HasSubstr("not a Slurm job id"));
  auto no_list = AllocationFromEnv({{"SLURM_JOB_ID", "1"}});
  EXPECT_THAT(no_list.status().message(), HasSubstr("SLURM_JOB_NODELIST is not set"));
}

// Real Slurm as the oracle.
class SlurmOracleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::SlurmClusterOptions o;
    o.nodes = 3;
    auto c = testing::SlurmCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value().release();
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << "the cluster did not start (above)"; }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static testing::SlurmCluster* cluster_;
};
testing::SlurmCluster* SlurmOracleTest::cluster_ = nullptr;

TEST_F(SlurmOracleTest, HostlistsExpandAsScontrolExpandsThem) {
  ASSERT_NE(cluster_, nullptr);
  for (const std::string expr :
       {"gpu[01-03,07],login1", "n[098-101]", "r[1-2]n[1-3]", "a,b[3],c", "x[7]", "node1"}) {
    auto r = cluster_->Run({"scontrol", "show", "hostnames", expr});
    ASSERT_TRUE(r.ok() && r->exit.ok()) << (r.ok() ? r->output : r.status().ToString());
    std::vector<std::string> want;
    std::istringstream lines(r->output);
    for (std::string l; std::getline(lines, l);) {
      if (!l.empty()) want.push_back(l);
    }
    EXPECT_EQ(Expand(expr), want) << expr;
  }
}

TEST_F(SlurmOracleTest, EachSrunTasksEnvironmentParsesToTheClustersNodes) {
  ASSERT_NE(cluster_, nullptr);
  // Each task prints its environment, one variable per line, prefixed by srun -l.
  auto r = cluster_->Run({"srun", "-N3", "--ntasks-per-node=1", "-l", "env"}, 60);
  ASSERT_TRUE(r.ok() && r->exit.ok()) << (r.ok() ? r->output : r.status().ToString());
  std::map<int, std::map<std::string, std::string>> envs;
  std::istringstream lines(r->output);
  for (std::string l; std::getline(lines, l);) {
    const size_t colon = l.find(": ");
    const size_t eq = l.find('=', colon == std::string::npos ? 0 : colon);
    if (colon == std::string::npos || eq == std::string::npos) continue;
    const std::string task = l.substr(0, colon);
    if (task.empty() || task.find_first_not_of(" 0123456789") != std::string::npos) continue;
    envs[std::stoi(task)][l.substr(colon + 2, eq - colon - 2)] = l.substr(eq + 1);
  }
  ASSERT_EQ(envs.size(), 3u) << r->output;
  std::set<int> node_ids;
  for (const auto& [task, env] : envs) {
    auto a = AllocationFromEnv(env);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->nodes, cluster_->node_names());
    EXPECT_EQ(a->proc_id, task);
    EXPECT_EQ(a->ntasks, 3);
    EXPECT_EQ(a->partition, cluster_->partition());
    node_ids.insert(a->node_id);
    // Each task runs on the node its SLURM_NODEID names.
    EXPECT_EQ(env.at("SLURMD_NODENAME"), a->nodes.at(a->node_id));
  }
  EXPECT_EQ(node_ids, (std::set<int>{0, 1, 2}));
}

}  // namespace
}  // namespace bulwark::slurm
