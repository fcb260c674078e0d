// Which failed checkpoint writes are their node's fault (policy/ckpt_fault.h).
#include "policy/ckpt_fault.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

TEST(CkptFault, AFullLocalDiskIsTheNodesFault) {
  CkptWriteVerdict v = ClassifyCheckpointWriteError(
      "disk",
      "write /ck/step-000000000010/shard-00001-of-00002.bws.tmp.9: No space left on "
      "device");
  EXPECT_TRUE(v.node_fault);
  EXPECT_EQ(v.subtype, "disk_full");
}

TEST(CkptFault, ASharedVolumeOrAnotherErrorIsNot) {
  EXPECT_FALSE(ClassifyCheckpointWriteError("shared", "No space left on device").node_fault);
  EXPECT_FALSE(ClassifyCheckpointWriteError("object", "No space left on device").node_fault);
  EXPECT_FALSE(ClassifyCheckpointWriteError("disk", "Input/output error").node_fault);
  EXPECT_FALSE(ClassifyCheckpointWriteError("disk", "").node_fault);
}

}  // namespace
}  // namespace bulwark
