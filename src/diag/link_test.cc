// The link check (diag/link.h): the pure verdict, and real rings of threads over
// loopback TCP -- healthy, one member throttled, one member that never comes.
#include "diag/link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "diag/diag.h"

namespace bulwark::diag {
namespace {

const std::vector<std::string> kNames3 = {"node-0", "node-1", "node-2"};

LinkSample In(int from, int to, double mib_s, bool correct = true, std::string error = "") {
  return {from, to, mib_s, -1, correct, error.empty(), std::move(error)};
}

// A ring's reports: fwd[i] MiB/s on i-1 -> i and, for 3+ members, rev[i] on i+1 -> i.
std::vector<LinkSample> Ring(const std::vector<double>& fwd, const std::vector<double>& rev = {}) {
  const int n = static_cast<int>(fwd.size());
  std::vector<LinkSample> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(In((i + n - 1) % n, i, fwd[i]));
    if (!rev.empty()) out.push_back(In((i + 1) % n, i, rev[i]));
  }
  return out;
}

TEST(DiagLinkJudge, AllLinksAlikeNameNobody) {
  LinkVerdict v = JudgeLinks(kNames3, Ring({900, 1000, 1100}, {950, 1050, 1000}), {1});
  EXPECT_TRUE(v.at_fault.empty());
  EXPECT_EQ(v.median_mib_s, 1000);
  EXPECT_EQ(v.summary, "all 6 links bit-exact, median 1000.0 MiB/s");
  EXPECT_EQ(v.evidence,
            "node-2->node-0 900.0 MiB/s; node-0->node-1 1000.0 MiB/s; "
            "node-1->node-2 1100.0 MiB/s; node-1->node-0 950.0 MiB/s; "
            "node-2->node-1 1050.0 MiB/s; node-0->node-2 1000.0 MiB/s");
}

TEST(DiagLinkJudge, ASlowSenderIsNamedByItsTwoSlowLinks) {
  // node-1's transmit side is slow: node-1 -> node-2 and node-1 -> node-0 are. It is
  // named as the end of both, whoever is under test.
  for (std::vector<int> suspects : {std::vector<int>{1}, std::vector<int>{0}, std::vector<int>{}}) {
    LinkVerdict v = JudgeLinks(kNames3, Ring({900, 1000, 2}, {3, 1050, 1000}), suspects);
    EXPECT_EQ(v.at_fault, std::vector<int>{1}) << v.summary;
    EXPECT_EQ(v.link_bad, (std::vector<bool>{false, false, true, true, false, false}));
    EXPECT_EQ(v.summary,
              "link node-1->node-2 slow: 2.0 MiB/s < 0.25 x the median 950.0 MiB/s (node-1); "
              "link node-1->node-0 slow: 3.0 MiB/s < 0.25 x the median 950.0 MiB/s (node-1)");
  }
}

TEST(DiagLinkJudge, OneSlowLinkNamesTheEndUnderTest) {
  // Only node-1 -> node-2 is slow (a cable, or either NIC): node-1 is under test.
  LinkVerdict v = JudgeLinks(kNames3, Ring({900, 1000, 2}, {950, 1050, 1000}), {1});
  EXPECT_EQ(v.at_fault, std::vector<int>{1}) << v.summary;
  v = JudgeLinks(kNames3, Ring({900, 1000, 2}, {950, 1050, 1000}), {0});
  EXPECT_EQ(v.at_fault, (std::vector<int>{1, 2})) << v.summary;  // "one of" them
  EXPECT_NE(v.summary.find("(one of node-1 or node-2)"), std::string::npos) << v.summary;
}

TEST(DiagLinkJudge, TwoMembersTheSuspectIsNamedAgainstItsReferencePeer) {
  const std::vector<std::string> names = {"node-1", "node-2"};
  LinkVerdict v = JudgeLinks(names, {In(1, 0, 800), In(0, 1, 2)}, {0});
  EXPECT_EQ(v.at_fault, std::vector<int>{0});
  EXPECT_NE(v.summary.find("link node-1->node-2 slow: 2.0 MiB/s"), std::string::npos) << v.summary;
  // Two links, one 7x slower than the other: not slow (the median is their mean).
  v = JudgeLinks(names, {In(1, 0, 700), In(0, 1, 101)}, {0});
  EXPECT_TRUE(v.at_fault.empty()) << v.summary;
}

TEST(DiagLinkJudge, WrongDataAndFailedOrMissingLinks) {
  std::vector<LinkSample> ring = Ring({900, 1000, 1100}, {950, 1050, 1000});
  ring[2].correct = false;  // node-0 -> node-1 delivered a wrong byte
  LinkVerdict v = JudgeLinks(kNames3, ring, {});
  EXPECT_EQ(v.at_fault, (std::vector<int>{0, 1}));  // nobody under test: one of the two
  EXPECT_NE(v.summary.find("delivered wrong data (one of node-0 or node-1)"), std::string::npos)
      << v.summary;
  EXPECT_NE(v.evidence.find("WRONG DATA"), std::string::npos);
  // node-2 never answered: its incoming link is unknown, its outgoing failed at node-0.
  v = JudgeLinks(kNames3, {In(2, 0, -1, true, "member 2 never connected"), In(0, 1, 1000)}, {2},
                 {2});
  EXPECT_EQ(v.at_fault, std::vector<int>{2}) << v.summary;
  EXPECT_NE(v.summary.find("failed: member 2 never connected"), std::string::npos) << v.summary;
  EXPECT_NE(v.summary.find("not reported"), std::string::npos) << v.summary;
}

TEST(DiagLinkJudge, SamplesThatAreNotRingLinksAreIgnored) {
  const std::vector<std::string> names = {"node-0", "node-1", "node-2", "node-3"};
  std::vector<LinkSample> ring = Ring({900, 1000, 1100, 1000}, {950, 1050, 1000, 1000});
  ring.push_back(In(0, 2, 1));  // not neighbours
  ring.push_back(In(7, 9, 1));
  LinkVerdict v = JudgeLinks(names, ring, {});
  EXPECT_TRUE(v.at_fault.empty()) << v.summary;
}

TEST(DiagLinkJudge, SamplesRoundTripThroughJson) {
  LinkSample s{3, 4, 812.5, 0.05, false, false, "oops"};
  auto back = LinkSampleFromJson(ToJson(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);
  auto bad = LinkSampleFromJson(Json{{"from", 1}, {"to", "x"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"to\""), std::string::npos);
  bad = LinkSampleFromJson(Json{{"from", 1}, {"to", 2}, {"mib_s", -3}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"mib_s\""), std::string::npos);
}

TEST(DiagLinkJudge, ACheckResultCarriesItsLinks) {
  CheckResult r{"link", true, 2.5, "member 0 of 2", {{1, 0, 800, -1, true, true, ""}}};
  auto back = CheckResultFromJson(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->links.size(), 1u);
  EXPECT_EQ(back->links[0], r.links[0]);
  EXPECT_FALSE(ToJson(CheckResult{"matmul", true, 1, "fine"}).contains("links"));
  Json bad = ToJson(r);
  bad["links"] = "fast";
  auto err = CheckResultFromJson(bad);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("\"links\""), std::string::npos);
  bad["links"] = Json::array({Json{{"from", 0}, {"to", 1}, {"correct", "yes"}}});
  err = CheckResultFromJson(bad);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("\"correct\""), std::string::npos);
}

TEST(DiagLinkJudge, ParsesPeers) {
  auto p = ParseLinkPeers("127.0.0.1:5000,10.0.0.2:6000");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[1].host, "10.0.0.2");
  EXPECT_EQ((*p)[1].port, 6000);
  EXPECT_FALSE(ParseLinkPeers("127.0.0.1:5000").ok());  // a ring of one
  auto bad = ParseLinkPeers("127.0.0.1:5000,nohost");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'nohost'"), std::string::npos);
  EXPECT_FALSE(ParseLinkPeers("a:1,b:70000").ok());
}

// A ring of `n` members on loopback, each on its own thread; `absent` never starts.
std::vector<LinkCheckOutput> RunRing(int n, int throttled = -1, int absent = -1,
                                     double budget = 10) {
  std::vector<Fd> listeners;
  std::vector<LinkPeer> peers;
  for (int i = 0; i < n; ++i) {
    auto l = TcpListen("127.0.0.1", 0);
    EXPECT_TRUE(l.ok());
    peers.push_back({"127.0.0.1", *LocalPort(l->get())});
    listeners.push_back(std::move(*l));
  }
  std::vector<LinkCheckOutput> out(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    if (i == absent) continue;
    LinkOptions o;
    o.index = i;
    o.peers = peers;
    o.listen_fd = listeners[i].get();
    o.session = 42;
    o.stream_cap_s = 1;
    o.budget_s = budget;
    o.throttle_mib_s = i == throttled ? 4 : 0;
    threads.emplace_back([o, &out, i] { out[i] = LinkSelfTest(o); });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

std::vector<LinkSample> AllSamples(const std::vector<LinkCheckOutput>& outs) {
  std::vector<LinkSample> all;
  for (const LinkCheckOutput& o : outs) all.insert(all.end(), o.links.begin(), o.links.end());
  return all;
}

TEST(DiagLinkRing, AHealthyRingIsBitExactAndMeasuresEveryLink) {
  auto outs = RunRing(3);
  for (const LinkCheckOutput& o : outs) {
    EXPECT_TRUE(o.ok) << o.evidence;
    EXPECT_NE(o.evidence.find("bit-exact"), std::string::npos) << o.evidence;
    ASSERT_EQ(o.links.size(), 3u);  // in from both neighbours, out to the successor
    EXPECT_GT(o.links[0].mib_s, 0);
    EXPECT_GE(o.links[1].rtt_ms, 0);
  }
  LinkVerdict v = JudgeLinks(kNames3, AllSamples(outs), {});
  EXPECT_TRUE(v.at_fault.empty()) << v.summary << " | " << v.evidence;
}

TEST(DiagLinkRing, AThrottledMemberIsSingledOut) {
  auto outs = RunRing(3, /*throttled=*/1);
  for (const LinkCheckOutput& o : outs) EXPECT_TRUE(o.ok) << o.evidence;
  LinkVerdict v = JudgeLinks(kNames3, AllSamples(outs), {1});
  EXPECT_EQ(v.at_fault, std::vector<int>{1}) << v.summary << " | " << v.evidence;
  EXPECT_LT(outs[2].links[0].mib_s, 8) << outs[2].evidence;  // paced to 4 MiB/s
}

TEST(DiagLinkRing, AMemberThatNeverComesFailsTheRingAtTheDeadline) {
  const auto t0 = std::chrono::steady_clock::now();
  auto outs = RunRing(3, -1, /*absent=*/2, /*budget=*/2);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 3.0);
  EXPECT_FALSE(outs[0].ok);  // member 2 never connected to it
  EXPECT_NE(outs[0].evidence.find("member 2 never connected"), std::string::npos)
      << outs[0].evidence;
  EXPECT_FALSE(outs[1].ok);  // it connected to member 2's listener, which never answered
  LinkVerdict v = JudgeLinks(kNames3, AllSamples(outs), {2});
  EXPECT_EQ(v.at_fault, std::vector<int>{2}) << v.summary;
}

}  // namespace
}  // namespace bulwark::diag
