// `bulwark replay`'s planning: every way a bundle can be unusable says what is missing
// and the fix; a usable one gives a run redirected to its own directory.
#include "cli/replay_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "common/code_digest.h"
#include "store/store.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ReplayPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_replay_plan.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/train.py") << "print('train')\n";
    spec_ =
        "name: toy\nnodes: 1\nprocsPerNode: 2\ncommand: [\"/usr/bin/python3\", "
        "\"train.py\"]\ncheckpoint: {dir: " +
        dir_ + "/ck}\nchaos:\n  - {kind: nan_loss, atStep: 7, rank: 0}\n";
    std::ofstream(dir_ + "/job.yaml") << spec_;
    // A committed checkpoint of step 5 (2 ranks).
    std::vector<float> w = {1, 2, 3, 4};
    for (int r = 0; r < 2; ++r) {
      ckpt::TensorView t;
      t.meta.name = "w";
      t.meta.dtype = ckpt::DType::kF32;
      t.meta.shape = {4};
      t.data = w.data();
      ASSERT_TRUE(ckpt::WriteShard(ckpt::Env::Default(), dir_ + "/ck", 5, r, 2, {t}, {}).ok());
    }
    ASSERT_TRUE(ckpt::Commit(ckpt::Env::Default(), dir_ + "/ck", 5, 2).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The store holds job `toy` with one incident: a NaN of rank 0 at step 7 whose bundle
  // names checkpoint `ckpt_step` (no "replay" at all when `bundle` is false).
  void Record(long ckpt_step, bool bundle = true, bool from_scratch = false) {
    auto st = Store::Open(dir_ + "/bulwark.db");
    ASSERT_TRUE(st.ok());
    JobRecord j;
    j.name = "toy";
    j.spec_yaml = spec_;
    j.spec_path = dir_ + "/job.yaml";
    j.run_dir = dir_ + "/run";
    j.phase = JobPhase::kSucceeded;
    j.created = 1;
    ASSERT_TRUE((*st)->PutJob(j).ok());
    auto code = DigestCode(dir_, {dir_ + "/ck", dir_ + "/run"});
    ASSERT_TRUE(code.ok());
    Json inc = {{"kind", "nan"}, {"subtype", "nan"}, {"rank", 0}, {"node", 0}, {"step", 7}};
    if (bundle) {
      inc["replay"] = {{"fault_step", 7},
                       {"checkpoint_step", ckpt_step},
                       {"from_scratch", from_scratch},
                       {"checkpoint_dir", dir_ + "/ck"},
                       {"losses", {{"6", {{"0", 2.5}, {"1", 2.25}}}}},
                       {"spec_yaml", spec_},
                       {"spec_path", dir_ + "/job.yaml"},
                       {"code", {{"digest", code->hash}}},
                       {"world", 2},
                       {"procs_per_node", 2},
                       {"skip", {{"from", -1}, {"to", -1}}}};
    }
    ASSERT_TRUE((*st)->AddIncident("toy", 0, inc.dump()).ok());
  }
  Result<ReplayPlan> Plan(const std::string& job, int n, bool allow = false) {
    ReplayFlags f;
    f.job = job;
    f.incident = n;
    f.store = dir_ + "/bulwark.db";
    f.allow_code_change = allow;
    return PlanReplay(f);
  }
  std::string dir_, spec_;
};

TEST_F(ReplayPlanTest, AUsableBundleGivesARunOfItsOwn) {
  Record(5);
  auto p = Plan("toy", 1);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->spec.name, "toy-replay-1");
  EXPECT_TRUE(p->spec.chaos.empty()) << "injected faults are not replayed";
  EXPECT_EQ(p->spec.fault_policy.restart_budget, 0);
  EXPECT_EQ(p->spec.checkpoint.dir, p->run_dir + "/checkpoints");
  EXPECT_EQ(p->run_dir.rfind(dir_ + "/run/replay-1-", 0), 0u) << p->run_dir;
  EXPECT_EQ(p->replay.resume, 5);
  EXPECT_EQ(p->replay.fault.step, 7);
  EXPECT_EQ(p->replay.expected.at(6).at(1), 2.25);
  EXPECT_THAT(p->code_note, HasSubstr("unchanged"));
  // The checkpoint is linked, not moved: both directories hold it.
  auto linked = ckpt::ListCommitted(ckpt::Env::Default(), p->spec.checkpoint.dir);
  ASSERT_TRUE(linked.ok());
  EXPECT_EQ(*linked, std::vector<long>{5});
  EXPECT_EQ(*ckpt::ListCommitted(ckpt::Env::Default(), dir_ + "/ck"), std::vector<long>{5});
}

TEST_F(ReplayPlanTest, UnknownJobsAndIncidentNumbersAreNamed) {
  Record(5);
  auto p = Plan("nope", 1);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("no job named 'nope'"));
  p = Plan("toy", 3);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("job 'toy' has 1 incident(s), numbered 1 to 1"));
  p = Plan("toy", 0);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
}

TEST_F(ReplayPlanTest, AnIncompleteBundleSaysWhatIsMissing) {
  Record(5, /*bundle=*/false);
  auto p = Plan("toy", 1);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr("incident 1 of 'toy' (nan (nan) on rank 0 at step 7) has no replay "
                        "bundle"));
}

TEST_F(ReplayPlanTest, NoCheckpointBeforeTheFaultOrOneRetentionRemovedIsSaid) {
  Record(-1);
  auto p = Plan("toy", 1);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("no checkpoint was committed before the fault"));
  EXPECT_THAT(p.status().message(), HasSubstr("the losses of the last steps only"));
  fs::remove(dir_ + "/bulwark.db");
  Record(3);  // step 3 is not (or no longer) in the checkpoint directory
  p = Plan("toy", 1);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("its checkpoint, step 3, is not in " + dir_ +
                                              "/ck (committed there now: 5)"));
}

TEST_F(ReplayPlanTest, AJobThatFaultedBeforeItsFirstCheckpointIsReplayedFromScratch) {
  Record(-1, /*bundle=*/true, /*from_scratch=*/true);
  auto p = Plan("toy", 1);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->replay.resume, -1);
  auto linked = ckpt::ListCommitted(ckpt::Env::Default(), p->spec.checkpoint.dir);
  EXPECT_TRUE(!linked.ok() || linked->empty()) << "nothing to link: step 5 is not the job's";
  EXPECT_THAT(FormatReplay(*p, Json{{"fault_step", 7}}),
              HasSubstr("re-run from scratch (no checkpoint before the fault) up to step 7"));
}

TEST_F(ReplayPlanTest, ChangedCodeIsRefusedUnlessAllowed) {
  Record(5);
  std::ofstream(dir_ + "/train.py") << "print('changed')\n";
  auto p = Plan("toy", 1);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("the code in " + dir_ + " changed since"));
  EXPECT_THAT(p.status().message(), HasSubstr("--allow-code-change"));
  p = Plan("toy", 1, /*allow=*/true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_THAT(p->code_note, HasSubstr("CHANGED"));
}

TEST(CodeDigestTest, CoversCodeNotOutputsAndNamesChangedFiles) {
  char tmpl[] = "/tmp/bw_code_digest.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string d = tmpl;
  fs::create_directories(d + "/pkg/__pycache__");
  std::ofstream(d + "/pkg/model.py") << "x = 1\n";
  std::ofstream(d + "/pkg/__pycache__/model.pyc") << "bytes";
  std::ofstream(d + "/loss.log") << "step 1\n";
  auto a = DigestCode(d, {});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->files, 1);
  std::ofstream(d + "/loss.log") << "step 2\n";  // an output: not code
  EXPECT_EQ(DigestCode(d, {})->hash, a->hash);
  std::ofstream(d + "/pkg/model.py") << "x = 2\n";
  auto b = DigestCode(d, {});
  EXPECT_NE(b->hash, a->hash);
  EXPECT_EQ(ChangedFiles(*a, *b), std::vector<std::string>{"pkg/model.py (changed)"});
  EXPECT_EQ(DigestCode(d + "/missing", {}).status().code(), Code::kNotFound);
  fs::remove_all(d);
}

}  // namespace
}  // namespace bulwark::cli
