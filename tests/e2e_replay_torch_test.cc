// End-to-end: replay bundles, `bulwark replay` and the classification of faults by
// replay (docs/diagnosis.md), with the PyTorch example (DDP over gloo, Debian's torch
// 1.13) and the real `bulwark` binary:
//   * a NaN injected into one node's computation (chaos nan_loss) does not come back when
//     its steps run again on the standby: hardware, the node is quarantined; and
//     `bulwark replay` of the incident re-runs the steps from its checkpoint with every
//     loss equal bit for bit (the determinism test);
//   * a corrupt record in the data (--poison-batch) gives the same NaN again on the
//     standby: data, its batches are skipped and the job finishes;
//   * a bug (--raise-at-step) fails again at the same step after the same losses: code,
//     the job gives up with that diagnosis after one restart; so does a crash in native
//     code (--segfault-at-step: SIGSEGV), once its node passed its diagnostics.
// Not run under ASan, as e2e_inprocess_torch_test.
#include <gtest/gtest.h>

#include <algorithm>

#include "e2e_inprocess_util.h"

namespace bulwark {
namespace {

using e2e::InProcessE2E;
using e2e::RunProcess;

class ReplayE2E : public InProcessE2E {
 protected:
  // The demo job: 2 nodes x 2 ranks, 50 steps, a checkpoint every 10, `spares` standbys;
  // gradients summed in a fixed order (--exact-allreduce), so re-runs repeat bit for bit.
  std::string Spec(const std::string& name, const std::string& extra_args, int spares,
                   const std::string& chaos = "") {
    std::ostringstream y;
    y << "name: " << name << "\nnodes: 2\nprocsPerNode: 2\n"
      << "workdir: " << src_ << "/examples/pytorch-ddp\n"
      << "command: [\"/usr/bin/python3\", \"train.py\"]\n"
      << "args: [\"--steps\", \"50\", \"--log-every\", \"10\", \"--val-every\", \"0\", "
         "\"--d-model\", \"64\", \"--exact-allreduce\""
      << extra_args << "]\n"
      << "env: {BW_E2E_TAG: \"" << tag_ << "\"}\n"
      << "checkpoint: {dir: " << dir_ << "/ckpt, intervalSteps: 10, keep: 2, memorySlots: 4}\n"
      << "faultPolicy: {restartBudget: 4, backoff: {baseSeconds: 0.2, capSeconds: 2}, "
         "hangTimeout: {floorSeconds: 5, multiplier: 10, startupSeconds: 180}, spareNodes: "
      << spares << ", heartbeat: {intervalSeconds: 1, misses: 5}, stopGraceSeconds: 3}\n"
      << chaos;
    const std::string spec = dir_ + "/" + name + ".yaml";
    std::ofstream(spec) << y.str();
    return spec;
  }
};

TEST_F(ReplayE2E, NanOnOneNodeIsHardware) {
  const std::string spec =
      Spec("rhw", "", 1, "chaos:\n  - {kind: nan_loss, atStep: 25, rank: 0}\n");
  auto [code, out, report] = Run(spec, 600);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["last_step"], 50);
  ASSERT_EQ(report["incidents"].size(), 1u) << report.dump(2);
  const Json& inc = report["incidents"][0];
  EXPECT_EQ(inc["kind"], "nan");
  EXPECT_EQ(inc["action"], "replace_node") << inc.dump(2);
  EXPECT_EQ(inc["classification"]["cause"], "hardware") << inc.dump(2);
  EXPECT_EQ(inc["classification"]["action"], "quarantined") << inc.dump(2);
  EXPECT_NE(out.find("NodeQuarantined: node-0 computed wrong, a replay found: the NaN of rank 0"),
            std::string::npos)
      << out;
  const long fault_step = inc["replay"]["fault_step"].get<long>();
  const long ckpt = inc["replay"]["checkpoint_step"].get<long>();
  // A checkpoint of step 10 or 20, or none yet where the machine was too busy to commit
  // one before step 26 (the replay then runs from scratch, as the job did).
  ASSERT_TRUE(ckpt >= 10 || inc["replay"]["from_scratch"] == true) << out;
  EXPECT_LT(ckpt, fault_step);
  const long first = std::max(ckpt, 0L) + 1;  // the first step the replay runs

  // The recorded incident, replayed: every loss from its checkpoint up to the fault
  // equal bit for bit, and the NaN (injected, not the program's) does not come back.
  auto [rc, json] = RunProcess({build_ + "/bin/bulwark", "replay", "rhw", "1", "--store",
                                dir_ + "/bulwark.db", "-o", "json"},
                               {}, 300);
  ASSERT_EQ(rc, 0) << json;
  const Json r = Json::parse(json.substr(json.find("{\n")), nullptr, false);
  ASSERT_TRUE(r.is_object()) << json;
  EXPECT_EQ(r["resume_step"], ckpt);
  EXPECT_EQ(r["fault_step"], fault_step);
  EXPECT_TRUE(r["passed"].get<bool>()) << r.dump(2);
  EXPECT_FALSE(r["fault_came_back"].get<bool>()) << r.dump(2);
  EXPECT_GE(r["compared"].get<int>(), 4 * (fault_step - first)) << r.dump(2);
  EXPECT_EQ(r["equal"], r["compared"]) << r.dump(2);
  EXPECT_FALSE(r.contains("first_difference")) << r.dump(2);
  EXPECT_NE(r["code"].get<std::string>().find("unchanged"), std::string::npos) << r.dump(2);
  // Bad input: an incident the job does not have.
  auto [rc2, err] = RunProcess(
      {build_ + "/bin/bulwark", "replay", "rhw", "2", "--store", dir_ + "/bulwark.db"}, {}, 60);
  EXPECT_EQ(rc2, 1) << err;
  EXPECT_NE(err.find("job 'rhw' has 1 incident(s), numbered 1 to 1"), std::string::npos) << err;
  ExpectNoLeftovers();
}

TEST_F(ReplayE2E, PoisonedBatchIsData) {
  const std::string spec = Spec("rdata", ", \"--poison-batch\", \"27:1\"", 1);
  auto [code, out, report] = Run(spec, 600);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(report["last_step"], 50);
  const Json& incs = report["incidents"];
  ASSERT_EQ(incs.size(), 2u) << report.dump(2);
  EXPECT_EQ(incs[0]["kind"], "nan");
  EXPECT_EQ(incs[0]["rank"], 1);
  EXPECT_EQ(incs[0]["step"], 27);
  EXPECT_EQ(incs[0]["action"], "replace_node") << incs[0].dump(2);  // re-run elsewhere
  EXPECT_EQ(incs[0]["classification"]["cause"], "data") << incs[0].dump(2);
  EXPECT_EQ(incs[1]["step"], 27);
  EXPECT_EQ(incs[1]["action"], "rollback") << incs[1].dump(2);
  EXPECT_NE(incs[1]["decision"]["reason"].get<std::string>().find(
                "a replay shows it is the data: the NaN came back at step 27 on rank 1 on "
                "another node with the same data"),
            std::string::npos)
      << incs[1].dump(2);
  EXPECT_NE(incs[1]["decision"]["reason"].get<std::string>().find("skipping the data batches"),
            std::string::npos);
  EXPECT_EQ(incs[1]["classification"]["cause"], "data") << incs[1].dump(2);
  EXPECT_EQ(out.find("NodeQuarantined"), std::string::npos) << "the node was not at fault:\n"
                                                            << out;
  ExpectNoLeftovers();
}

// The job crashed with `subtype` (rank 0, step 27), was restarted once, crashed the same
// way at the same step, and gave up: a replay showed the program's own crash.
void ExpectGaveUpAsCode(int code, const std::string& out, const Json& report,
                        const std::string& subtype) {
  EXPECT_EQ(code, 1) << out;
  EXPECT_EQ(report["phase"], "Failed");
  const Json& incs = report["incidents"];
  ASSERT_EQ(incs.size(), 2u) << report.dump(2);
  for (const Json& inc : incs) {
    EXPECT_EQ(inc["kind"], "crash");
    EXPECT_EQ(inc["subtype"], subtype);
  }
  EXPECT_EQ(incs[1]["action"], "give_up") << incs[1].dump(2);
  EXPECT_EQ(incs[1]["classification"]["cause"], "code") << incs[1].dump(2);
  EXPECT_NE(
      incs[1]["decision"]["reason"].get<std::string>().find(
          "a replay shows it is the program: rank 0 failed again (" + subtype + ") at step 27"),
      std::string::npos)
      << incs[1].dump(2);
  EXPECT_EQ(report["restarts"], 1) << "one restart, not the whole budget";
}

TEST_F(ReplayE2E, BugGivesUpAsCode) {
  const std::string spec = Spec("rcode", ", \"--raise-at-step\", \"27\"", 0);
  auto [code, out, report] = Run(spec, 600);
  ExpectGaveUpAsCode(code, out, report, "exit 1");
  ExpectNoLeftovers();
}

TEST_F(ReplayE2E, SegfaultGivesUpAsCodeAfterTheNodePassesItsTests) {
  const std::string spec = Spec("rsegv", ", \"--segfault-at-step\", \"27\"", 0);
  auto [code, out, report] = Run(spec, 600);
  ExpectGaveUpAsCode(code, out, report, "SIGSEGV");
  // Bad memory raises SIGSEGV too: the node was tested before the re-run, and passed.
  ASSERT_FALSE(report["incidents"].empty());
  EXPECT_EQ(report["incidents"][0]["diagnosis"]["verdict"], "healthy")
      << report["incidents"][0].dump(2);
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
