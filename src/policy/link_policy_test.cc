// The link check's incidents and the straggler trigger (policy/link_policy.h).
#include "policy/link_policy.h"

#include <gtest/gtest.h>

namespace bulwark {
namespace {

TEST(LinkPolicy, CollectiveFaultsTestTheLinks) {
  Incident inc;
  inc.kind = FaultKind::kHang;
  EXPECT_TRUE(WantsLinkCheck(inc));
  inc.kind = FaultKind::kCrash;
  inc.subtype = "collective_error";
  EXPECT_TRUE(WantsLinkCheck(inc));
  inc.subtype = "SIGSEGV";
  EXPECT_FALSE(WantsLinkCheck(inc));
  inc.kind = FaultKind::kFatalLog;
  inc.subtype = "nccl_timeout";
  EXPECT_TRUE(WantsLinkCheck(inc));
  inc.subtype = "xid";
  EXPECT_FALSE(WantsLinkCheck(inc));
  inc.kind = FaultKind::kSdc;
  EXPECT_FALSE(WantsLinkCheck(inc));
}

TEST(LinkPolicy, AStragglerIsTestedInPlaceNotRestartedOnAHunch) {
  StragglerFacts f;
  f.rank = 2;
  f.node = 1;
  f.score = 0.33;
  f.reference_peers = 1;
  StragglerDecision d = DecideStraggler(f);
  EXPECT_TRUE(d.test);
  EXPECT_NE(d.reason.find("the job runs at 33% of its pace"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("tested in place while the job goes on"), std::string::npos);
  EXPECT_NE(d.reason.find("swapped for a standby only if a check fails"), std::string::npos);
}

TEST(LinkPolicy, AStragglerIsNotTestedWithoutAPeerOrWhenTurnedOff) {
  StragglerFacts f;
  f.node = 0;
  f.score = 0.5;
  f.reference_peers = 0;
  StragglerDecision d = DecideStraggler(f);
  EXPECT_FALSE(d.test);
  EXPECT_NE(d.reason.find("no warm standby or other node"), std::string::npos) << d.reason;
  f.reference_peers = 2;
  f.diagnose_enabled = false;
  d = DecideStraggler(f);
  EXPECT_FALSE(d.test);
  EXPECT_NE(d.reason.find("diagnoseSuspectNodes is false"), std::string::npos) << d.reason;
  f.diagnose_enabled = true;
  f.node_testable = false;
  EXPECT_FALSE(DecideStraggler(f).test);
  f.node_testable = true;
  f.link_session_free = false;
  d = DecideStraggler(f);
  EXPECT_FALSE(d.test);
  EXPECT_NE(d.reason.find("another link check is running"), std::string::npos) << d.reason;
  f.link_session_free = true;
  f.node = -1;
  EXPECT_FALSE(DecideStraggler(f).test);
}

}  // namespace
}  // namespace bulwark
