// ParseSchedulingConfig / LoadSchedulingConfig: the `scheduler` and `queues` sections on
// their own, every error with file:line, field path, the value and a fix.
#include "sched/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace bulwark::sched {
namespace {

std::string Err(const std::string& yaml) {
  auto c = ParseSchedulingConfig(yaml, "q.yaml");
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(SchedulingConfig, SchedulerAndQueuesParse) {
  auto c = ParseSchedulingConfig(
      "scheduler: {preemption: false, restockStandby: false, productionPools: [on-demand],\n"
      "            requeueBackoffBaseSeconds: 5, requeueBackoffCapSeconds: 60}\n"
      "queues:\n  - {name: research, cohort: c, nominalGpus: {h100: 64}}\n"
      "  - {name: prod, cohort: c, nominalGpus: {h100: 128}, weight: 2,\n"
      "     borrowingLimitGpus: {h100: 16}, lendingLimitGpus: {h100: 0}}\n",
      "q.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->scheduler.preemption);
  EXPECT_FALSE(c->scheduler.restock_standby);
  EXPECT_EQ(c->scheduler.production_pools, std::vector<Pool>{Pool::kOnDemand});
  EXPECT_EQ(c->scheduler.research_pools, SchedulerConfig().research_pools);
  EXPECT_EQ(c->scheduler.requeue_backoff_base_s, 5);
  EXPECT_EQ(c->scheduler.requeue_backoff_cap_s, 60);
  ASSERT_EQ(c->queues.size(), 2u);
  EXPECT_EQ(c->queues[0].name, "research");
  EXPECT_EQ(c->queues[0].cohort, "c");
  EXPECT_EQ(c->queues[1].nominal_gpus.at("h100"), 128);
  EXPECT_EQ(c->queues[1].borrowing_limit.at("h100"), 16);
  EXPECT_EQ(c->queues[1].lending_limit.at("h100"), 0);
  EXPECT_EQ(c->queues[1].weight, 2);
}

TEST(SchedulingConfig, BothSectionsAreOptional) {
  auto c = ParseSchedulingConfig("queues:\n  - {name: q}\n", "q.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->scheduler.preemption);  // the defaults
  ASSERT_EQ(c->queues.size(), 1u);
  c = ParseSchedulingConfig("scheduler: {preemption: true}\n", "q.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->queues.empty());
}

TEST(SchedulingConfig, OtherSectionsAreUnknownFields) {
  const std::string m = Err("queues: []\ncluster: {}\n");
  EXPECT_NE(m.find("q.yaml:1: queues: must not be empty (got an empty list)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("q.yaml:2: cluster: unknown field (got cluster); remove it; valid fields "
                   "here: scheduler, queues"),
            std::string::npos)
      << m;
  EXPECT_NE(Err("queus: []\n")
                .find("q.yaml:1: queus: unknown field (got queus); did you mean "
                      "\"queues\"?"),
            std::string::npos);
}

TEST(SchedulingConfig, ErrorsNameLineFieldValueAndFix) {
  const std::string m =
      Err("scheduler:\n"
          "  preemption: maybe\n"
          "  researchPools: [spot, gold]\n"
          "  requeueBackoffCapSeconds: -1\n"
          "queues:\n"
          "  - {name: a, nominalGPUs: {h100: 8}}\n"
          "  - {name: a, nominalGpus: {h100: -1}, weight: 0}\n"
          "  - {cohort: c}\n"
          "  - {name: b, lendingLimitGpus: 8}\n");
  const std::vector<std::string> want = {
      "q.yaml:2: scheduler.preemption: must be true or false (got maybe); set preemption to "
      "true or false",
      "q.yaml:3: scheduler.researchPools: unknown pool (got \"gold\"); set researchPools to a "
      "list of on-demand, spot, reserved",
      "q.yaml:4: scheduler.requeueBackoffCapSeconds: must be >= 0 (got -1); set "
      "requeueBackoffCapSeconds to a number >= 0",
      "q.yaml:6: queues[0].nominalGPUs: unknown field (got nominalGPUs); did you mean "
      "\"nominalGpus\"? valid fields here: name, cohort, nominalGpus, borrowingLimitGpus, "
      "lendingLimitGpus, weight",
      "q.yaml:7: queues[1].nominalGpus.h100: must be >= 0 (got -1); set nominalGpus to a "
      "mapping gpuType: GPUs, e.g. {h100: 8000}",
      "q.yaml:7: queues[1].weight: must be > 0 (got 0); set weight to a fair-share weight > 0",
      "q.yaml:7: queues[1].name: duplicate queue name (got a; the first is at line 6); give "
      "every queue a unique name",
      "q.yaml:8: queues[2].name: required field is missing (got nothing); set name to a unique "
      "queue name",
      "q.yaml:9: queues[3].lendingLimitGpus: must be a mapping gpuType: GPUs (got 8); set "
      "lendingLimitGpus to a mapping gpuType: GPUs",
  };
  for (const std::string& w : want) EXPECT_NE(m.find(w), std::string::npos) << w << "\n" << m;
}

TEST(SchedulingConfig, DocumentLevelErrors) {
  EXPECT_NE(Err("[1, 2]\n")
                .find("q.yaml:1: (top level): the config must be a YAML mapping (got "
                      "a list); start with scheduler: or queues:"),
            std::string::npos);
  EXPECT_NE(Err("queues: [\n").find("(yaml syntax)"), std::string::npos);
}

TEST(SchedulingConfig, LoadReadsTheFile) {
  const std::string path = ::testing::TempDir() + "/sched_config_test_queues.yaml";
  {
    std::ofstream out(path);
    out << "queues:\n  - {name: q, nominalGpus: {h100: 8}}\n  - {name: q}\n";
  }
  auto c = LoadSchedulingConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(path + ":3: queues[1].name: duplicate queue name"),
            std::string::npos)
      << c.status().message();
  std::remove(path.c_str());
  auto missing = LoadSchedulingConfig(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace bulwark::sched
