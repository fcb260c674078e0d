#include "controller/hang_localiser.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

const char* kInBackward =
    "Current thread 0x1 (most recent call first):\n"
    "  File \"/usr/lib/python3/dist-packages/torch/autograd/__init__.py\", line 197 in backward\n"
    "  File \"train.py\", line 311 in main\n";
const char* kInAllReduce =
    "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1320 in "
    "all_reduce\n  File \"train.py\", line 200 in evaluate\n";
const char* kInDataLoader =
    "  File \"train.py\", line 120 in get_batch\n  File \"train.py\", line 300 in main\n";

TEST(HangLocaliser, StoppedRankWins) {
  auto v = LocaliseHang({{0, kInBackward}, {1, kInBackward}, {2, ""}, {3, kInBackward}}, {2});
  EXPECT_EQ(v.culprit, 2);
  EXPECT_NE(v.reason.find("stopped"), std::string::npos);
}

TEST(HangLocaliser, RankOutsideCollectiveIsTheCulprit) {
  auto v =
      LocaliseHang({{0, kInBackward}, {1, kInAllReduce}, {2, kInDataLoader}, {3, kInBackward}}, {});
  EXPECT_EQ(v.culprit, 2);
  EXPECT_NE(v.reason.find("rank 2 is not in a collective while rank 0, 1, 3"), std::string::npos)
      << v.reason;
}

TEST(HangLocaliser, AllWaitingOrNoStacksIsUnknown) {
  EXPECT_EQ(LocaliseHang({{0, kInBackward}, {1, kInAllReduce}}, {}).culprit, -1);
  EXPECT_EQ(LocaliseHang({{0, kInDataLoader}, {1, kInDataLoader}}, {}).culprit, -1);
  EXPECT_EQ(LocaliseHang({}, {}).culprit, -1);
  EXPECT_EQ(LocaliseHang({{0, ""}, {1, kInBackward}}, {}).culprit, -1);
}

TEST(HangLocaliser, CollectiveMarkers) {
  EXPECT_TRUE(StackWaitsInCollective(kInBackward));
  EXPECT_TRUE(StackWaitsInCollective(kInAllReduce));
  EXPECT_TRUE(StackWaitsInCollective("#3 gloo::transport::tcp::UnboundBuffer::waitRecv"));
  EXPECT_FALSE(StackWaitsInCollective(kInDataLoader));
}

}  // namespace
}  // namespace bulwark
