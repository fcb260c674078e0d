#include "cli/progress.h"

#include <gtest/gtest.h>

namespace bulwark::cli {
namespace {

TEST(ProgressTest, FullLineAndEta) {
  Progress p;
  p.phase = "Running";
  p.step = 1234;
  p.total = 1600;
  p.loss = 2.3123;
  p.tokens_per_s = 12345;
  p.mfu = 0.4123;
  p.ettr = 0.9531;
  p.steps_per_s = 2;
  p.restarts = 2;
  p.ckpt_step = 1230;
  p.ckpt_tier = "disk";
  p.ckpt_age_s = 4.2;
  EXPECT_EQ(FormatProgress(p),
            "Running  step 1234/1600 (77%)  loss 2.312  12.3k tok/s  MFU 41.2%  ETTR 0.953  "
            "ETA 3m03s  ckpt 1230 disk 4s ago  restarts 2");
  EXPECT_EQ(FormatProgress(p, 20), "Running  step 1234/1");
}

TEST(ProgressTest, UnknownValuesAreLeftOut) {
  Progress p;
  EXPECT_EQ(FormatProgress(p), "Pending  ETTR 0.000");
  p.phase = "Running";
  p.step = 5;
  p.steps_per_s = 1;  // no total: no ETA
  EXPECT_EQ(FormatProgress(p), "Running  step 5  ETTR 0.000");
}

TEST(ProgressTest, TotalStepsFromTheTrainersArguments) {
  EXPECT_EQ(TotalStepsFromArgs({"--steps", "1600", "--snapshot-every", "2"}), 1600);
  EXPECT_EQ(TotalStepsFromArgs({"--lr=3e-4", "--max_steps=500"}), 500);
  EXPECT_EQ(TotalStepsFromArgs({"--steps", "many"}), 0);
  EXPECT_EQ(TotalStepsFromArgs({"--steps"}), 0);
  EXPECT_EQ(TotalStepsFromArgs({"--stepsize", "3"}), 0);
}

TEST(ProgressTest, FromAControllersReport) {
  const Json r = Json::parse(R"({"phase": "Restarting", "last_step": 40, "total_steps": 100,
      "ettr": 0.5, "restarts": 1, "metrics": {"tokens_per_s": 900, "mfu": 0, "loss": 1.5},
      "last_checkpoint": {"step": 30, "tier": "memory", "time": 100.0}})");
  const Progress p = ProgressFromReport(r, 110);
  EXPECT_EQ(FormatProgress(p),
            "Restarting  step 40/100 (40%)  loss 1.5  900 tok/s  ETTR 0.500  ckpt 30 memory "
            "10s ago  restarts 1");
  EXPECT_EQ(FormatProgress(ProgressFromReport(Json::object(), 0)), "Pending  ETTR 0.000");
}

}  // namespace
}  // namespace bulwark::cli
