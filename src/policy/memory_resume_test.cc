#include "policy/memory_resume.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

using Kind = MemorySource::Kind;

// Four ranks, two per node; each holds its own snapshots of steps 120..150 (portable,
// digest 7).
std::vector<RankMemory> FourRanks() {
  std::vector<RankMemory> ranks(4);
  for (int r = 0; r < 4; ++r) {
    ranks[r].node = r < 2 ? "node-0" : "node-1";
    for (long s : {120, 130, 140, 150}) {
      ranks[r].own.insert(s);
      ranks[r].portable[s] = 7;
    }
  }
  return ranks;
}

TEST(MemoryResumeTest, EveryRankFromItsOwnRing) {
  MemoryResume m = ChooseMemoryResume(FourRanks(), -1);
  EXPECT_EQ(m.step, 150);
  ASSERT_EQ(m.sources.size(), 4u);
  for (const MemorySource& s : m.sources) EXPECT_EQ(s.kind, Kind::kOwn);
  EXPECT_EQ(ChooseMemoryResume(FourRanks(), 135).step, 130);  // a NaN's bound
  EXPECT_EQ(ChooseMemoryResume(FourRanks(), 100).step, -1);
  EXPECT_EQ(ChooseMemoryResume({}, -1).step, -1);
}

// Rank 1 crashed at step 156: the survivors parked with a snapshot of step 155; rank 1's
// replacement takes rank 0's (same node) instead of resuming everyone from 150.
TEST(MemoryResumeTest, AReplacedRankTakesASurvivorsCopyOfTheStepTheyParkedAt) {
  std::vector<RankMemory> ranks = FourRanks();
  for (int r : {0, 2, 3}) {
    ranks[r].own.insert(155);
    ranks[r].portable[155] = 7;
  }
  MemoryResume m = ChooseMemoryResume(ranks, -1);
  EXPECT_EQ(m.step, 155);
  EXPECT_EQ(m.donated, 1);
  EXPECT_EQ(m.sources[1].kind, Kind::kDonor);
  EXPECT_EQ(m.sources[1].donor_rank, 0);  // on its own node, no network
  EXPECT_EQ(m.sources[1].node, "node-0");
  EXPECT_EQ(m.sources[2].kind, Kind::kOwn);
  // Without donors (or with them not allowed): 150, as before.
  EXPECT_EQ(ChooseMemoryResume(ranks, -1, /*allow_donors=*/false).step, 150);
}

// A lost node's ranks on a standby hold nothing; the survivors' copies serve them.
TEST(MemoryResumeTest, AStandbysRanksTakeTheOtherNodesCopies) {
  std::vector<RankMemory> ranks = FourRanks();
  for (int r : {2, 3}) {
    ranks[r] = RankMemory();
    ranks[r].node = "node-2";
  }
  for (int r : {0, 1}) {
    ranks[r].own.insert(1205);
    ranks[r].portable[1205] = 7;
  }
  MemoryResume m = ChooseMemoryResume(ranks, -1);
  EXPECT_EQ(m.step, 1205);
  EXPECT_EQ(m.donated, 2);
  for (int r : {2, 3}) {
    EXPECT_EQ(m.sources[r].kind, Kind::kDonor);
    EXPECT_EQ(m.sources[r].donor_rank, 0);
    EXPECT_EQ(m.sources[r].node, "node-0");
  }
  // A replica of the lost rank's own snapshot is preferred to a donor's copy.
  ranks[2].replica[1205] = "node-0";
  m = ChooseMemoryResume(ranks, -1);
  EXPECT_EQ(m.sources[2].kind, Kind::kReplica);
  EXPECT_EQ(m.sources[3].kind, Kind::kDonor);
}

// Not every rank's copy alike: no donor, whatever the step.
TEST(MemoryResumeTest, ARankSpecificStateIsNeverDonated) {
  std::vector<RankMemory> ranks = FourRanks();
  for (int r : {0, 2, 3}) ranks[r].own.insert(155);
  for (int r : {0, 2}) ranks[r].portable[155] = 7;
  // Rank 3's copy of 155 has tensors that are not replicated.
  EXPECT_EQ(ChooseMemoryResume(ranks, -1).step, 150);
  // Rank 3's is portable, but its non-tensor state differs (a per-rank RNG state, say).
  ranks[3].portable[155] = 8;
  EXPECT_EQ(ChooseMemoryResume(ranks, -1).step, 150);
  ranks[3].portable[155] = 7;
  EXPECT_EQ(ChooseMemoryResume(ranks, -1).step, 155);
}

}  // namespace
}  // namespace bulwark
