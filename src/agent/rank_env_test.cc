#include "agent/rank_env.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

Json StartMsg() {
  return Json{{"type", "start"},
              {"attempt", 2},
              {"run_id", "job-1"},
              {"job", "demo"},
              {"command", {"/bin/true"}},
              {"env", {{"FOO", "bar"}}},
              {"workdir", "/tmp"},
              {"log_dir", "/tmp/logs"},
              {"master_addr", "127.0.0.1"},
              {"master_port", 29500},
              {"nnodes", 2},
              {"group_rank", 1},
              {"nproc_per_node", 2},
              {"world_size", 4},
              {"restart_count", 2},
              {"max_restarts", 10},
              {"resume_step", 40},
              {"ckpt_dir", "/ck"},
              {"ckpt_interval_steps", 10},
              {"skip_from", -1},
              {"skip_to", -1},
              {"hang_floor_s", 30},
              {"hang_multiplier", 10},
              {"startup_timeout_s", 300},
              {"stop_grace_s", 5}};
}

TEST(RankEnv, ParsesStartAndBuildsTorchrunEnv) {
  auto spec = ParseStartMessage(StartMsg());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  AgentPaths p{"node-1", "/r/node-1/agent.sock", "/r/node-1", "/py", "/lib/libbulwark.so", "", ""};
  auto env = BuildRankEnv(*spec, 1, p, {{"PYTHONPATH", "/old"}, {"FOO", "base"}, {"HOME", "/h"}});
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["ROLE_RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "4");
  EXPECT_EQ(env["BULWARK_MAX_WORLD_SIZE"], "4");  // not elastic: the world size
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "10");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job-1");
  EXPECT_EQ(env["FOO"], "bar") << "spec env overrides the agent's";
  EXPECT_EQ(env["HOME"], "/h");
  EXPECT_EQ(env["BULWARK_ATTEMPT"], "2");
  EXPECT_EQ(env["BULWARK_JOB"], "demo");
  EXPECT_EQ(env["BULWARK_RESUME_STEP"], "40");
  EXPECT_EQ(env["BULWARK_RANK_SOCK"], "/r/node-1/rank-3.sock");
  EXPECT_EQ(env["BULWARK_AGENT_SOCK"], "/r/node-1/agent.sock");
  EXPECT_EQ(env["BULWARK_STACK_FILE"], "/tmp/logs/stacks/attempt-2-rank-3.txt");
  EXPECT_EQ(env["BULWARK_LIB"], "/lib/libbulwark.so");
  EXPECT_EQ(env.count("BULWARK_CKPT_PERSIST"), 0u);  // the SDK follows the interval
  EXPECT_EQ(spec->cadence_steps, 0);
  EXPECT_EQ(env["PYTHONPATH"], "/py:/py/bulwark/sitecustomize_dir:/old");
  EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
}

// Where the node dir is too long for socket paths the agent puts its sockets elsewhere
// (agent.cc): the ranks' socket follows sock_dir.
TEST(RankEnv, TheRankSocketLivesInTheSocketDir) {
  auto spec = ParseStartMessage(StartMsg());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  AgentPaths p{"node-1", "/dev/shm/b-1/agent.sock", "/r/node-1", "", "", "", "/dev/shm/b-1"};
  auto env = BuildRankEnv(*spec, 1, p, {});
  EXPECT_EQ(env["BULWARK_RANK_SOCK"], "/dev/shm/b-1/rank-3.sock");
  EXPECT_EQ(env["BULWARK_AGENT_SOCK"], "/dev/shm/b-1/agent.sock");
  EXPECT_EQ(RankSockPath(p, 0), "/dev/shm/b-1/rank-0.sock");
}

// As torchrun: one OpenMP/OpenBLAS thread per rank when a node runs several, unless the
// job or the agent's environment says how many.
TEST(RankEnv, SeveralRanksOnANodeGetOneOmpThreadUnlessSetElsewhere) {
  Json m = StartMsg();
  AgentPaths p{"node-1", "/r/node-1/agent.sock", "/r/node-1", "", "", "", ""};
  auto spec = ParseStartMessage(m);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(BuildRankEnv(*spec, 0, p, {})["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(BuildRankEnv(*spec, 0, p, {{"OMP_NUM_THREADS", "6"}})["OMP_NUM_THREADS"], "6");
  m["env"]["OMP_NUM_THREADS"] = "4";
  spec = ParseStartMessage(m);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(BuildRankEnv(*spec, 0, p, {{"OMP_NUM_THREADS", "6"}})["OMP_NUM_THREADS"], "4");
  m = StartMsg();
  m["nproc_per_node"] = 1;
  m["world_size"] = 2;
  spec = ParseStartMessage(m);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(BuildRankEnv(*spec, 0, p, {}).count("OMP_NUM_THREADS"), 0u);  // one rank: its own
}

TEST(RankEnv, AnElasticWorldNamesTheSizeItGrowsBackTo) {
  Json m = StartMsg();
  m["max_world_size"] = 8;
  auto spec = ParseStartMessage(m);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  AgentPaths p{"node-1", "/r/node-1/agent.sock", "/r/node-1", "", "", "", ""};
  EXPECT_EQ(BuildRankEnv(*spec, 0, p, {})["BULWARK_MAX_WORLD_SIZE"], "8");
  m["max_world_size"] = 2;  // below world_size 4
  auto bad = ParseStartMessage(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'max_world_size' (2) must be 0 or >= world_size (4)"),
            std::string::npos)
      << bad.status().message();
}

TEST(RankEnv, AutoCadenceHandsPersistenceToTheAgent) {
  Json m = StartMsg();
  m["persist_by_agent"] = true;
  m["ckpt_interval_steps"] = 1;
  m["cadence_steps"] = 40;
  m["cadence_from_step"] = 120;
  auto spec = ParseStartMessage(m);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->persist_by_agent);
  EXPECT_EQ(spec->cadence_steps, 40);
  EXPECT_EQ(spec->cadence_from_step, 120);
  AgentPaths p{"node-1", "/r/node-1/agent.sock", "/r/node-1", "/py", "", "", ""};
  auto env = BuildRankEnv(*spec, 1, p, {});
  EXPECT_EQ(env["BULWARK_CKPT_PERSIST"], "agent");
  EXPECT_EQ(env["BULWARK_CKPT_INTERVAL_STEPS"], "1");
  m["cadence_steps"] = "forty";
  auto bad = ParseStartMessage(m);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cadence_steps"), std::string::npos);
}

TEST(RankEnv, BadStartNamesTheField) {
  Json m = StartMsg();
  m["nproc_per_node"] = "two";
  auto r = ParseStartMessage(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nproc_per_node"), std::string::npos);

  m = StartMsg();
  m.erase("command");
  r = ParseStartMessage(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("command"), std::string::npos);

  m = StartMsg();
  m["group_rank"] = 2;
  r = ParseStartMessage(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("group_rank"), std::string::npos);

  m = StartMsg();
  m["world_size"] = 3;
  r = ParseStartMessage(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("world_size"), std::string::npos);
}

}  // namespace
}  // namespace bulwark
