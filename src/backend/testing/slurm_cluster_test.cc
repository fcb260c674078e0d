// The Slurm test cluster itself: a real slurmctld and three slurmd on loopback run an
// srun across every node and an sbatch job to completion, a killed slurmd's node goes
// NOT_RESPONDING then DOWN and comes back when it restarts, a crashed node fails its job,
// and nothing of the cluster is left running after its destruction. Every wait polls
// with a deadline.
#include "backend/testing/slurm_cluster.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "common/clock.h"

namespace bulwark::testing {
namespace {

double Now() { return SystemClock::Get()->NowMono(); }

std::unique_ptr<SlurmCluster> StartCluster() {
  SlurmClusterOptions o;
  o.nodes = 3;
  auto c = SlurmCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return nullptr;
  std::cout << "slurm test cluster: " << (*c)->node_names().size() << " nodes idle in "
            << (*c)->startup_seconds() << " s\n";
  return std::move(c).value();
}

// `srun -l` lines "T: value" as task -> the values in order.
std::map<int, std::vector<std::string>> ByTask(const std::string& output) {
  std::map<int, std::vector<std::string>> out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(": ");
    if (colon == std::string::npos || colon == 0 || line.find_first_not_of(" 0123456789") < colon) {
      continue;
    }
    out[std::stoi(line.substr(0, colon))].push_back(line.substr(colon + 2));
  }
  return out;
}

// Submits `sbatch args --wrap cmd` and returns the job id.
std::string Submit(const SlurmCluster& c, std::vector<std::string> args, const std::string& cmd) {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--wrap", cmd});
  auto r = c.Run(argv);
  EXPECT_TRUE(r.ok() && r->exit.ok()) << (r.ok() ? r->output : r.status().ToString());
  if (!r.ok()) return "";
  std::string id = r->output.substr(0, r->output.find_first_of(";\n"));
  return id;
}

// Polls the job's state until it is not one of `passing` and returns it (or the error).
std::string WaitJobLeaves(const SlurmCluster& c, const std::string& id,
                          const std::set<std::string>& passing, double timeout_s) {
  const double deadline = Now() + timeout_s;
  std::string state;
  while (Now() < deadline) {
    auto s = c.JobState(id);
    state = s.ok() ? *s : s.status().ToString();
    if (s.ok() && passing.count(*s) == 0) return state;
    SystemClock::Get()->SleepFor(0.1);  // poll interval
  }
  return "still " + state + " after " + std::to_string(timeout_s) + " s";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SlurmCluster, MissingSlurmIsAFailedPreconditionThatNamesThePackages) {
  SlurmClusterOptions o;
  o.sbin_dir = "/nonexistent/sbin";
  auto c = SlurmCluster::Start(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kFailedPrecondition) << c.status().ToString();
  for (const char* word : {"/nonexistent/sbin/slurmctld", "bash scripts/setup.sh", "slurmctld",
                           "slurmd", "slurm-client"}) {
    EXPECT_NE(c.status().message().find(word), std::string::npos) << c.status().ToString();
  }
}

TEST(SlurmCluster, SrunRunsOneTaskOnEachOfThreeNodes) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->node_names(), (std::vector<std::string>{"node1", "node2", "node3"}));
  for (const std::string& node : c->node_names()) {
    auto state = c->NodeState(node);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    EXPECT_EQ(*state, "IDLE") << node;
  }
  auto r = c->Run({"srun", "--partition", c->partition(), "--nodes", "3", "--ntasks-per-node", "1",
                   "--label", "printenv", "SLURMD_NODENAME", "SLURM_NODEID"},
                  60);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->exit.ok()) << r->exit.Describe() << ": " << r->output;
  const auto tasks = ByTask(r->output);
  ASSERT_EQ(tasks.size(), 3u) << r->output;
  std::set<std::string> nodes;
  for (const auto& [task, values] : tasks) {
    ASSERT_EQ(values.size(), 2u) << r->output;
    nodes.insert(values[0]);
    EXPECT_EQ(values[1], std::to_string(task)) << r->output;  // one task per node, in order
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"node1", "node2", "node3"})) << r->output;
}

TEST(SlurmCluster, SbatchJobWithAStepOnTwoNodesCompletes) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string out = c->work_dir() + "/job-%j.out";
  const std::string id =
      Submit(*c, {"--nodes", "2", "--output", out}, "srun --label printenv SLURMD_NODENAME");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitJobLeaves(*c, id, {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"}, 60),
            "COMPLETED")
      << Slurp(c->work_dir() + "/job-" + id + ".out");
  const auto tasks = ByTask(Slurp(c->work_dir() + "/job-" + id + ".out"));
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_NE(tasks.at(0), tasks.at(1));
}

TEST(SlurmCluster, AKilledSlurmdsNodeGoesDownAndReturnsWhenItRestarts) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const double t0 = Now();
  ASSERT_TRUE(c->KillSlurmd("node2").ok());
  auto lost = c->WaitNodeState("node2", {"NOT_RESPONDING", "DOWN"}, 60);
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  const double not_responding_s = Now() - t0;
  auto down = c->WaitNodeState("node2", {"DOWN"}, 60);
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  std::cout << "node2: " << *lost << " after " << not_responding_s << " s, " << *down << " after "
            << Now() - t0 << " s\n";
  auto sinfo = c->Run({"sinfo", "--noheader", "--nodes", "node2", "--format=%t"});
  ASSERT_TRUE(sinfo.ok()) << sinfo.status().ToString();
  EXPECT_EQ(sinfo->output, "down*\n");
  // Only the killed daemon stopped; the others still run.
  EXPECT_EQ(c->Check(), "");
  EXPECT_EQ(c->DaemonPids().size(), 3u);

  EXPECT_EQ(c->StartSlurmd("node1").code(), Code::kFailedPrecondition);  // it runs
  ASSERT_TRUE(c->StartSlurmd("node2").ok()) << c->LogTail("node2");
  auto back = c->NodeState("node2");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "IDLE");
  auto r = c->Run({"srun", "--nodes", "3", "hostname"}, 60);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->exit.ok()) << r->exit.Describe() << ": " << r->output;
}

TEST(SlurmCluster, ACrashedNodeTakesItsJobProcessesAndFailsItsJob) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string id =
      Submit(*c, {"--nodes", "3", "--no-requeue", "--output", "/dev/null"}, "srun sleep 300");
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(WaitJobLeaves(*c, id, {"PENDING", "CONFIGURING"}, 60), "RUNNING");
  // The step's daemon on every node (the batch script's own on node1 as well).
  const double deadline = Now() + 30;
  while (c->StepDaemonPids("node3").empty() && Now() < deadline) {
    SystemClock::Get()->SleepFor(0.05);  // poll interval
  }
  ASSERT_FALSE(c->StepDaemonPids("node3").empty());
  ASSERT_TRUE(c->CrashNode("node3").ok());
  EXPECT_TRUE(c->StepDaemonPids("node3").empty());
  EXPECT_FALSE(c->StepDaemonPids("node1").empty());
  // Slurm ends the job NODE_FAIL once it declares the node down (SlurmdTimeout); srun can
  // see its step's node gone first and end the script, then the job is FAILED. Which
  // comes first depends on the machine's load (seen both ways); either is the failure.
  const std::string end = WaitJobLeaves(*c, id, {"RUNNING", "COMPLETING"}, 60);
  EXPECT_TRUE(end == "NODE_FAIL" || end == "FAILED") << end;
  auto state = c->NodeState("node3");
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_NE(state->find("DOWN"), std::string::npos) << *state;
}

// pgrep -f `pattern`: the pids of the live processes whose command line contains it.
std::string Pgrep(const std::string& pattern) {
  auto r = RunCommand({"pgrep", "-a", "-f", pattern}, CurrentEnv(), 10);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->output : "";
}

TEST(SlurmCluster, NothingOfTheClusterIsLeftRunningAfterItsDestruction) {
  auto c = StartCluster();
  ASSERT_NE(c, nullptr);
  const std::string dir = c->work_dir();
  // A running job: a batch script, an srun and a task with the working dir in their
  // command lines, under the slurmstepd of every node.
  const std::string id = Submit(*c, {"--nodes", "3", "--output", "/dev/null"},
                                "srun sh -c 'sleep 300' " + dir + "/task");
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(WaitJobLeaves(*c, id, {"PENDING", "CONFIGURING"}, 60), "RUNNING");
  const double deadline = Now() + 30;
  while (c->StepDaemonPids().size() < 4 && Now() < deadline) {
    SystemClock::Get()->SleepFor(0.05);  // poll interval
  }
  std::vector<pid_t> pids = c->DaemonPids();
  EXPECT_EQ(pids.size(), 4u);  // slurmctld and three slurmd
  const std::vector<pid_t> steps = c->StepDaemonPids();
  EXPECT_EQ(steps.size(), 4u);  // the batch step's and three of the srun's
  pids.insert(pids.end(), steps.begin(), steps.end());
  const std::string before = Pgrep(dir);
  EXPECT_NE(before.find("slurmctld"), std::string::npos) << before;
  EXPECT_NE(before.find("sleep 300"), std::string::npos) << before;

  c.reset();
  // Dead: reaped, or (the slurmstepds, children of init) a zombie until init reaps it.
  for (pid_t pid : pids) {
    const char st = ProcState(pid);
    EXPECT_TRUE(st == '?' || st == 'Z') << "pid " << pid << " is alive, state " << st;
  }
  EXPECT_EQ(Pgrep(dir), "");
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace bulwark::testing
