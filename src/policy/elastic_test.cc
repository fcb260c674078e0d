#include "policy/elastic.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

TEST(ElasticTest, ASlotIsDroppedOnlyAfterItsWait) {
  const std::vector<SlotCapacity> slots = {{}, {true, 100}, {}};
  EXPECT_TRUE(PlanShrink(slots, 2, 30, 129.9).empty());
  EXPECT_EQ(PlanShrink(slots, 2, 30, 130), (std::vector<int>{1}));
  EXPECT_EQ(PlanShrink(slots, 2, 0, 100), (std::vector<int>{1}));
}

TEST(ElasticTest, NeverBelowMinNodesEarliestWaitersFirst) {
  // Four slots, three waiting; minNodes 2: the two that waited longest go.
  const std::vector<SlotCapacity> slots = {{true, 50}, {}, {true, 10}, {true, 20}};
  EXPECT_EQ(PlanShrink(slots, 2, 5, 100), (std::vector<int>{2, 3}));
  EXPECT_TRUE(PlanShrink(slots, 4, 5, 100).empty());
  EXPECT_TRUE(PlanShrink(slots, 0, 5, 100).empty());  // not elastic
  EXPECT_EQ(PlanShrink(slots, 1, 5, 100), (std::vector<int>{0, 2, 3}));
}

TEST(ElasticTest, GrowsWithAStandbyBeyondTheSparesWhenNothingElseRestarts) {
  EXPECT_TRUE(ShouldGrow({.nodes = 2, .max_nodes = 3, .standbys_ready = 1, .spare_nodes = 0}));
  EXPECT_FALSE(ShouldGrow({.nodes = 3, .max_nodes = 3, .standbys_ready = 1, .spare_nodes = 0}));
  EXPECT_FALSE(ShouldGrow({.nodes = 2, .max_nodes = 3, .standbys_ready = 1, .spare_nodes = 1}));
  EXPECT_TRUE(ShouldGrow({.nodes = 2, .max_nodes = 3, .standbys_ready = 2, .spare_nodes = 1}));
  EXPECT_FALSE(ShouldGrow(
      {.nodes = 2, .max_nodes = 3, .standbys_ready = 1, .spare_nodes = 0, .busy = true}));
}

}  // namespace
}  // namespace bulwark
