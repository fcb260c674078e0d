#include "spec/job_update.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

JobSpec Job() {
  auto s = ParseJobSpec(
      "name: gpt\nnodes: 2\nprocsPerNode: 2\ncommand: [python3, train.py]\nargs: [--lr, '1e-3']\n"
      "env: {A: '1'}\ncheckpoint: {intervalSteps: 10}\n"
      "chaos: [{kind: kill_rank, atStep: 5, rank: 1}]\n",
      "job.yaml", "/w");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

TEST(PlanJobUpdate, TheCodeAndItsEnvironmentChangeInPlace) {
  JobSpec next = Job();
  next.args = {"--lr", "5e-4"};
  next.env["B"] = "2";
  auto u = PlanJobUpdate(Job(), next);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->Describe(), "args, env");
  next.command = {"python3", "train_v2.py"};
  next.workdir = "/w/v2";
  EXPECT_EQ(PlanJobUpdate(Job(), next)->Describe(), "command, args, env, workdir");
}

TEST(PlanJobUpdate, TheShapeAndTheStateOfTheJobAreRefusedWithTheFieldAndWhy) {
  JobSpec next = Job();
  next.nodes = 3;
  next.checkpoint.keep = 9;
  next.args = {"--lr", "5e-4"};  // allowed, but not together with the rest
  auto u = PlanJobUpdate(Job(), next);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), Code::kInvalidArgument);
  const std::string m = u.status().message();
  EXPECT_NE(m.find("nodes: 2 -> 3 cannot change in place: the running gang is placed on its "
                   "nodes"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("checkpoint cannot change in place"), std::string::npos) << m;
  EXPECT_NE(m.find("Only command, args, env and workdir change in place."), std::string::npos);
  JobSpec other = Job();
  other.fault_policy.restart_budget = 3;
  other.chaos.clear();
  other.name = "gpt2";
  other.slurm.grow_nodes = 2;
  const std::string m2 = PlanJobUpdate(Job(), other).status().message();
  EXPECT_NE(m2.find("name: gpt -> gpt2"), std::string::npos) << m2;
  EXPECT_NE(m2.find("faultPolicy cannot change in place"), std::string::npos) << m2;
  EXPECT_NE(m2.find("chaos cannot change in place"), std::string::npos) << m2;
  EXPECT_NE(m2.find("slurm cannot change in place: the job's allocation was requested with it"),
            std::string::npos)
      << m2;
}

TEST(PlanJobUpdate, NothingToUpdateIsAPreconditionFailure) {
  auto u = PlanJobUpdate(Job(), Job());
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(u.status().message().find("nothing to update"), std::string::npos);
}

}  // namespace
}  // namespace bulwark
