// Leader changes cost no training (docs/kubernetes.md, "Leader election and restarts"):
// a handover and a leader killed with SIGKILL, against the real control plane
// (operator/testing/e2e_fixture.h); every rank runs every step once, in one process.
#include "operator/testing/e2e_fixture.h"

namespace bulwark::op::e2e {
namespace {

// Every step of every rank ran once, in one process per rank (the trainer's
// TINY_STEP_LOG lines "rank step pid"); "" or what went wrong.
std::string StepsRanOnce(const std::string& log, int ranks, int steps) {
  std::ifstream in(log);
  std::map<int, std::vector<long>> seen;
  std::map<int, std::set<long>> pids;
  int rank = 0;
  long step = 0, pid = 0;
  while (in >> rank >> step >> pid) {
    seen[rank].push_back(step);
    pids[rank].insert(pid);
  }
  if (static_cast<int>(seen.size()) != ranks) {
    return std::to_string(seen.size()) + " ranks logged steps, expected " + std::to_string(ranks);
  }
  for (const auto& [r, s] : seen) {
    if (pids[r].size() != 1) {
      return "rank " + std::to_string(r) + " ran in " + std::to_string(pids[r].size()) +
             " processes: it was restarted";
    }
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != static_cast<long>(i + 1)) {
        return "rank " + std::to_string(r) + " ran step " + std::to_string(s[i]) + " where " +
               std::to_string(i + 1) + " was next: a step was repeated or skipped";
      }
    }
    if (static_cast<int>(s.size()) != steps) {
      return "rank " + std::to_string(r) + " ran " + std::to_string(s.size()) + " steps";
    }
  }
  return "";
}

// A leader handover (rolling upgrade: the leader stops, the next takes the Lease) costs
// no training: the old leader's controllers let go of their agents, which keep the
// ranks running; the new leader adopts the pods and their agents.
TEST_F(OperatorE2E, ANewLeaderAdoptsTheJobWithoutRestartingARank) {
  StartOperator("a");
  Json tj = TrainJob("gpt", 2, 300, "1");
  tj["spec"]["env"]["TINY_STEP_LOG"] = dir_ + "/steps.log";
  ASSERT_TRUE(admin_->Create(k8s::TrainJobs(), ns_, tj).ok());
  ASSERT_TRUE(WaitFor([&] { return Step("gpt") >= 60; }, 90)) << Describe("gpt");
  std::set<std::string> before;
  for (const Json& p : Pods()) before.insert(Str(p, {"metadata", "name"}));
  StopOperator();  // hands the lease over; the job keeps training
  EXPECT_EQ(Phase("gpt"), "Running");
  StartOperator("b");
  ASSERT_TRUE(WaitFor([&] { return Finished("gpt"); }, 180)) << Describe("gpt");
  EXPECT_EQ(Phase("gpt"), "Succeeded") << Describe("gpt");
  EXPECT_EQ(Str(Get("gpt"), {"status", "restarts"}), "0") << Describe("gpt");
  EXPECT_TRUE(HasEvent("TrainJob", "gpt", "Adopted", "no rank restarted")) << Describe("gpt");
  EXPECT_FALSE(HasEvent("TrainJob", "gpt", "AttemptStarted", "resuming")) << Describe("gpt");
  const std::string steps = StepsRanOnce(dir_ + "/steps.log", 2, 300);
  EXPECT_EQ(steps, "") << Describe("gpt");
  auto lease = admin_->Get(k8s::Leases(), kOperatorNamespace, "bulwark-operator-" + tag_);
  ASSERT_TRUE(lease.ok());
  EXPECT_THAT(Str(*lease, {"spec", "holderIdentity"}), HasSubstr("operator-b-"));
  EXPECT_EQ(before.size(), 3u);  // two workers and the standby, all kept
}

// The leader killed with SIGKILL mid-run (`bulwark operator`, a real process with the
// ServiceAccount's kubeconfig): its Lease expires, a second operator process takes it and
// adopts the running pods; no step is lost or repeated, no rank restarts.
TEST_F(OperatorE2E, AKilledLeaderLosesNoStep) {
  auto sa = cp_->ServiceAccountConfig(kOperatorNamespace, kOperatorAccount);
  ASSERT_TRUE(sa.ok()) << sa.status().ToString();
  const std::string kubeconfig = dir_ + "/operator.kubeconfig";
  ASSERT_TRUE(k8s::testing::ControlPlane::WriteKubeconfig(kubeconfig, *sa).ok());
  auto start_operator = [&](const std::string& identity) {
    SpawnOptions so;
    so.argv = {build_ + "/bin/bulwark",
               "operator",
               "--kubeconfig",
               kubeconfig,
               "--namespace",
               ns_,
               "--state-dir",
               dir_ + "/state-" + identity,
               "--bind",
               "127.0.0.1",
               "--advertise",
               "127.0.0.1",
               "--identity",
               identity,
               "--lease-namespace",
               kOperatorNamespace,
               "--metrics-addr",
               ""};
    so.env = CurrentEnv();
    so.capture_output = false;
    auto c = Spawn(so);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : Child{};
  };
  Child a = start_operator("killed-leader");
  ASSERT_GT(a.pid, 0);
  Json tj = TrainJob("gpt", 2, 400, "1");
  tj["spec"]["env"]["TINY_STEP_LOG"] = dir_ + "/steps.log";
  ASSERT_TRUE(admin_->Create(k8s::TrainJobs(), ns_, tj).ok());
  ASSERT_TRUE(WaitFor([&] { return Step("gpt") >= 60; }, 90)) << Describe("gpt");
  ASSERT_EQ(::kill(a.pid, SIGKILL), 0);
  ASSERT_TRUE(WaitExit(a.pid, 10).has_value());
  Child b = start_operator("next-leader");
  ASSERT_GT(b.pid, 0);
  const bool finished = WaitFor([&] { return Finished("gpt"); }, 240);
  TerminateGroup(b.pid, b.pgid, 10);
  ASSERT_TRUE(finished) << Describe("gpt");
  EXPECT_EQ(Phase("gpt"), "Succeeded") << Describe("gpt");
  EXPECT_EQ(Str(Get("gpt"), {"status", "restarts"}), "0") << Describe("gpt");
  EXPECT_TRUE(HasEvent("TrainJob", "gpt", "Adopted", "no rank restarted")) << Describe("gpt");
  EXPECT_EQ(StepsRanOnce(dir_ + "/steps.log", 2, 400), "") << Describe("gpt");
}

}  // namespace
}  // namespace bulwark::op::e2e
