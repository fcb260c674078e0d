// ReadReplayBundle: a recorded bundle back into what a re-run checks; a bundle that is
// missing, incomplete or malformed is named, never thrown on.
#include "controller/replay_bundle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bulwark {
namespace {

using ::testing::HasSubstr;

Json Incident(const Json& bundle) {
  Json inc = {{"kind", "nan"}, {"subtype", "nan"}, {"rank", 1}, {"node", 0}, {"step", 7}};
  if (!bundle.is_null()) inc["replay"] = bundle;
  return inc;
}

Json Bundle() {
  return {{"fault_step", 7},
          {"checkpoint_step", 5},
          {"checkpoint_dir", "/ck"},
          {"losses", {{"6", {{"0", 2.5}, {"1", 2.25}}}}},
          {"digests", {{"6", {{"1", {{"rng", "00000000000000ff"}, {"sums", "unordered"}}}}}}},
          {"spec_yaml", "name: toy\n"},
          {"code", {{"digest", "abc"}}},
          {"world", 2},
          {"procs_per_node", 2},
          {"nodes", {"node-0"}},
          {"skip", {{"from", 3}, {"to", 4}}}};
}

TEST(ReplayBundleTest, ReadsWhatTheReRunChecks) {
  const Json inc = Incident(Bundle());
  EXPECT_EQ(IncidentTitle(inc, 2, "toy"), "incident 2 of 'toy' (nan (nan) on rank 1 at step 7)");
  auto b = ReadReplayBundle(inc, "incident 2");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->fault_step, 7);
  EXPECT_EQ(b->checkpoint_step, 5);
  EXPECT_EQ(b->replay.resume, 5);
  EXPECT_EQ(b->replay.fault.rank, 1);
  EXPECT_EQ(b->replay.expected.at(6).at(1), 2.25);
  EXPECT_EQ(b->replay.expected_digests.at(6).at(1).rng, 0xffu);
  EXPECT_EQ(b->replay.expected_digests.at(6).at(1).sums, SumOrder::kUnordered);
  EXPECT_EQ(b->replay.skip_from, 3);
  EXPECT_EQ(b->replay.skip_to, 4);
  EXPECT_EQ(b->world, 2);
  EXPECT_EQ(b->nodes, std::vector<std::string>{"node-0"});
  EXPECT_EQ(b->code["digest"], "abc");
}

TEST(ReplayBundleTest, FromScratchOnlyWhenTheBundleSaysSo) {
  Json bundle = Bundle();
  bundle["checkpoint_step"] = -1;
  auto b = ReadReplayBundle(Incident(bundle), "incident 1");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("no checkpoint was committed before the fault"));
  bundle["from_scratch"] = true;
  b = ReadReplayBundle(Incident(bundle), "incident 1");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->replay.resume, -1);
}

TEST(ReplayBundleTest, MissingAndMalformedBundlesAreNamed) {
  auto b = ReadReplayBundle(Incident(Json()), "incident 1");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("incident 1 has no replay bundle"));
  const std::vector<std::pair<std::string, Json>> bad = {
      {"fault_step", "seven"},
      {"checkpoint_step", Json::array()},
      {"skip", 3},
      {"code", "abc"},
      {"world", "two"},
      {"spec_yaml", 5},
      {"losses", {{"x", 1}}},
      {"digests", {{"6", {{"1", {{"rng", "zz"}}}}}}},
      {"digests", {{"6", {{"1", {{"sums", "ring"}}}}}}},
      {"procs_per_node", 9}};
  for (const auto& [field, value] : bad) {
    Json bundle = Bundle();
    bundle[field] = value;
    b = ReadReplayBundle(Incident(bundle), "incident 1");
    ASSERT_FALSE(b.ok()) << field;
    EXPECT_THAT(b.status().message(), HasSubstr("incident 1")) << field;
  }
  Json inc = Incident(Bundle());
  inc["kind"] = 5;
  EXPECT_EQ(IncidentTitle(inc, 1, "toy"), "incident 1 of 'toy' (? (nan) on rank 1 at step 7)");
  EXPECT_FALSE(ReadReplayBundle(inc, "incident 1").ok());
}

TEST(ReplayBundleTest, VerdictLinesAndExitRule) {
  Json back = {{"fault_came_back", true},
               {"fault_step", 7},
               {"cause", "data"},
               {"evidence", "the NaN came back"},
               {"ended_by", {{"kind", "nan"}, {"rank", 1}}}};
  EXPECT_EQ(ReplayVerdictLines(back),
            "  fault:  came back: nan on rank 1 at step 7\n"
            "  cause:  data: the NaN came back\n");
  EXPECT_EQ(ReplayVerdictLines({{"passed", true}, {"fault_step", 7}, {"cause", "unknown"}}),
            "  fault:  did not come back: step 7 completed\n");
  EXPECT_EQ(ReplayVerdictLines({{"evidence", "ended early"}}),
            "  fault:  not concluded: ended early\n");
  EXPECT_TRUE(ReplayAllEqual({{"compared", 4}, {"equal", 4}}));
  EXPECT_FALSE(ReplayAllEqual({{"compared", 4}, {"equal", 3}}));
  EXPECT_FALSE(ReplayAllEqual({{"compared", 0}, {"equal", 0}}));
  EXPECT_FALSE(ReplayAllEqual({{"compared", "four"}, {"equal", 4}}));
}

}  // namespace
}  // namespace bulwark
