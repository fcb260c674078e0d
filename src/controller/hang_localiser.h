// Hang localisation: which rank of a hung job is the culprit, from every rank's stack
// and process state. Pure; thread-safe.
//
// Rules, in order: (1) a rank whose process was found stopped (state T); (2) a rank
// whose stack shows no collective or synchronisation frame while at least one peer's
// does — the peers wait in all_reduce/barrier/backward for the one that is elsewhere;
// (3) otherwise unknown (-1): every rank waits alike, e.g. a network fault.
#pragma once

#include <map>
#include <set>
#include <string>

namespace bulwark {

struct HangVerdict {
  int culprit = -1;    // global rank, -1 if the evidence does not single one out
  std::string reason;  // user-readable, e.g. "rank 2 was stopped (state T) ..."
};

// True if a stack (Python or native text) shows the thread waiting in a collective.
bool StackWaitsInCollective(const std::string& stack);

HangVerdict LocaliseHang(const std::map<int, std::string>& stacks, const std::set<int>& stopped);

}  // namespace bulwark
