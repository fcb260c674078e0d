// The link check (issue 17, stop-diagnose; docs/diagnosis.md "The link check"): the
// nodes of a diagnosis run a small ring all-reduce among themselves over TCP and measure
// every directed link of the ring, so a slow or broken link -- a bad NIC, a bad cable --
// is found and its node named.
//
// Each member i of a ring of n (2..kMaxLinkMembers) holds a listening socket its agent
// bound (passed to `bulwark-agent diagnose --check link` as fd 3), connects to member
// (i+1) % n and accepts member (i-1+n) % n, then:
//   1. latency: 5 pings on its outgoing connection, each echoed by the successor; the
//      median round trip is the outgoing link's rtt;
//   2. correctness: a ring all-reduce (reduce-scatter, then all-gather) of a
//      deterministic float32 buffer whose sums are exact, so every chunk it receives is
//      checked bit for bit against the partial sum it must hold, and the result against
//      the full sum: a link that delivers wrong bytes is named, not only "a wrong sum";
//   3. bandwidth: it streams a pattern (1 MiB chunks, each stamped with its number) to
//      its successor -- and in a ring of three or more back to its predecessor too, so
//      every directed link between neighbours is measured (in a ring of two or three,
//      every directed link) -- while it receives from both, each stream independent of
//      the others, for stream_cap_s (or `bytes`); it checks every chunk and divides what
//      came in by the time from the phase's start to its last byte.
// It reports its incoming links (bandwidth, correctness) and its outgoing one (rtt).
// Every socket operation has a deadline within the budget: a peer that never connects
// or stops sending fails the link, never hangs the check.
//
// JudgeLinks, the verdict over every member's reports, is pure (what a controller calls
// once the ring's reports are in); see its contract below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark::diag {

inline constexpr int kMaxLinkMembers = 16;
// A link slower than this fraction of the median of the ring's links is slow.
inline constexpr double kSlowLinkFraction = 0.25;

// One directed link's measurement, as one end saw it. The receiver reports bandwidth
// and correctness (mib_s, correct), the sender the round trip (rtt_ms); -1 = not
// measured. `error`: what failed on this link ("" = nothing).
struct LinkSample {
  int from = -1;  // ring index of the sender
  int to = -1;    // ring index of the receiver
  double mib_s = -1;
  double rtt_ms = -1;
  bool correct = true;    // every byte received was the expected one
  bool connected = true;  // false: the connection never formed (the ring did not)
  std::string error;
  bool operator==(const LinkSample&) const = default;
};
Json ToJson(const LinkSample& s);
// InvalidArgument naming the field for a malformed sample.
Result<LinkSample> LinkSampleFromJson(const Json& j);

struct LinkPeer {
  std::string host;  // IPv4 address
  int port = 0;
};

struct LinkOptions {
  int index = 0;                // this member's place in the ring
  std::vector<LinkPeer> peers;  // every member, in ring order (this one included)
  int listen_fd = -1;           // this member's listening socket (not owned)
  uint64_t session = 0;         // the same on every member: a stray connection is refused
  // The bandwidth phase streams up to `bytes` on each link for at most stream_cap_s:
  // by default a time window (1.5 s), long enough that a process descheduled for a
  // moment does not make a healthy link look 4x slower than its peers.
  size_t bytes = size_t{1} << 30;
  double stream_cap_s = 1.5;
  size_t reduce_floats = 64 << 10;  // the all-reduce's buffer, float32 elements
  double budget_s = 20;             // every socket op finishes by then
  // Chaos slow_link: this member's sends are paced to this many MiB/s (a bad NIC's
  // transmit side). 0 = not throttled.
  double throttle_mib_s = 0;
};

struct LinkCheckOutput {
  bool ok = false;                // this member's part finished and every byte was right
  std::string evidence;           // one line
  std::vector<LinkSample> links;  // its incoming links and its outgoing one
};
// Runs this member's part of the ring (blocking, at most about budget_s).
LinkCheckOutput LinkSelfTest(const LinkOptions& o);

// Parses "host:port,host:port,..." (ring order). InvalidArgument names what is wrong.
Result<std::vector<LinkPeer>> ParseLinkPeers(const std::string& text);

struct LinkVerdict {
  std::vector<int> at_fault;  // ring indices of the nodes the links single out
  // Per link: bad. Links i-1 -> i at index i; in a ring of 3+, i+1 -> i at n + i.
  std::vector<bool> link_bad;
  double median_mib_s = 0;  // over the links whose bandwidth was measured
  std::string evidence;     // every link: "a->b 812 MiB/s 0.05 ms; ..."
  std::string summary;      // what is wrong and who is named, or "all n links ..."
};

// The verdict over a ring's reports: `names` per ring index, `samples` from every
// member, merged by (from, to) onto the ring's links (i-1 -> i, and in a ring of 3+
// i+1 -> i; other samples are ignored; a link its receiver did not report counts as
// failed), `suspects`
// the ring indices under test (the others are reference peers believed healthy),
// `silent` the ring indices that sent no report at all (their incoming links count as
// not reported, whatever their senders said of them).
// A link is bad when it delivered a wrong byte, carried less than kSlowLinkFraction x
// the median bandwidth of the measured links, or failed -- but when some link never
// connected (or was not reported), only those are bad: the others' later failures are
// their consequences (every member waits for the ring). A link not reported names the
// member that did not report it; each other bad link names
// one end: the end that is also on another bad link (a node whose links are all slow);
// else the one under test when exactly one end is; else both ("one of"). Pure.
LinkVerdict JudgeLinks(const std::vector<std::string>& names,
                       const std::vector<LinkSample>& samples, const std::vector<int>& suspects,
                       const std::vector<int>& silent = {});

}  // namespace bulwark::diag
