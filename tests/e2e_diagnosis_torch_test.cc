// End-to-end: silent data corruption in the PyTorch example (DDP over gloo, Debian's
// torch 1.13) with the real `bulwark` binary. Chaos `sdc` moves one of rank 3's
// parameters by a part in a thousand (no crash, no NaN); the bitwise alignment check
// (bulwark.check_alignment, every 10 steps) finds rank 3 out of line with ranks 0-2; the
// job resumes no later than the last verified step on the standby, while node-1 runs its
// self-tests, fails the compute check (chaos sdc makes its machine bad) and is
// quarantined. Not run under ASan, as e2e_inprocess_torch_test.
#include <gtest/gtest.h>

#include "e2e_inprocess_util.h"

namespace bulwark {
namespace {

using e2e::InProcessE2E;

// (A short name: the run directory holds socket paths, at most 107 bytes.)
TEST_F(InProcessE2E, SdcFoundNodeQuarantined) {
  std::ostringstream y;
  y << "name: sdc\nnodes: 2\nprocsPerNode: 2\n"
    << "command: [\"/usr/bin/python3\", \"" << src_ << "/examples/pytorch-ddp/train.py\"]\n"
    << "args: [\"--steps\", \"160\", \"--log-every\", \"40\", \"--val-every\", \"0\", "
       "\"--align-every\", \"10\"]\n"
    << "env: {BW_E2E_TAG: \"" << tag_ << "\"}\n"
    << "checkpoint: {dir: " << dir_ << "/ckpt, intervalSteps: 10, keep: 3, memorySlots: 4}\n"
    << "faultPolicy: {restartBudget: 4, backoff: {baseSeconds: 0.2, capSeconds: 2}, "
       "hangTimeout: {floorSeconds: 3, multiplier: 10, startupSeconds: 180}, spareNodes: 1, "
       "heartbeat: {intervalSeconds: 1, misses: 3}, stopGraceSeconds: 3}\n"
    << "chaos:\n  - {kind: sdc, atStep: 45, rank: 3}\n";
  const std::string spec = dir_ + "/job.yaml";
  std::ofstream(spec) << y.str();
  auto [code, out, report] = Run(spec, 600);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["phase"], "Succeeded");
  EXPECT_EQ(report["last_step"], 160);
  const Json& incs = report["incidents"];
  ASSERT_EQ(incs.size(), 1u) << report.dump(2);
  const Json& inc = incs[0];
  EXPECT_EQ(inc["kind"], "sdc") << inc.dump(2);
  EXPECT_EQ(inc["rank"], 3) << inc.dump(2);
  EXPECT_EQ(inc["node_id"], "node-1") << inc.dump(2);
  EXPECT_EQ(inc["chaos"], "sdc") << inc.dump(2);
  // Found at the first check after rank 3 got the injection (it reaches the rank a
  // step or more after step 45); resumed from the check before, which agreed.
  const long found = inc["step"].get<long>();
  EXPECT_GE(found, 50) << inc.dump(2);
  EXPECT_EQ(found % 10, 0) << inc.dump(2);
  EXPECT_EQ(inc["good_step"], found - 10) << inc.dump(2);
  EXPECT_EQ(inc["action"], "replace_node") << inc.dump(2);
  EXPECT_LE(inc["resumed_from_step"].get<long>(), found - 10) << inc.dump(2);
  const Json& d = inc["diagnosis"];
  EXPECT_EQ(d["node_id"], "node-1") << d.dump(2);
  EXPECT_EQ(d["verdict"], "unhealthy") << d.dump(2);
  EXPECT_EQ(d["action"], "quarantined") << d.dump(2);
  ASSERT_GE(d["checks"].size(), 1u) << d.dump(2);
  EXPECT_EQ(d["checks"][0]["name"], "matmul");
  EXPECT_EQ(d["checks"][0]["ok"], false) << d.dump(2);
  EXPECT_EQ(d["charged_s"], 0.0) << d.dump(2);  // the standby ran the job meanwhile
  EXPECT_NE(out.find("NodeQuarantined"), std::string::npos) << out;
  EXPECT_NE(out.find("StandbyPromoted"), std::string::npos) << out;
  EXPECT_NE(out.find("done: steps=160 final_loss="), std::string::npos) << out;
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
