#include "controller/hang_localiser.h"

#include <vector>

namespace bulwark {
namespace {

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

bool StackWaitsInCollective(const std::string& stack) {
  // Frames that mean "waiting for the other ranks": torch.distributed calls, DDP's
  // gradient all-reduce inside backward, gloo/NCCL waits in native stacks.
  static const char* kMarkers[] = {"all_reduce", "allreduce", "barrier",        "broadcast",
                                   "all_gather", "allgather", "reduce_scatter", "in backward",
                                   "gloo::",     "ncclGroup", "c10d::",         "wait_tensor"};
  for (const char* m : kMarkers) {
    if (stack.find(m) != std::string::npos) return true;
  }
  return false;
}

HangVerdict LocaliseHang(const std::map<int, std::string>& stacks, const std::set<int>& stopped) {
  HangVerdict v;
  if (!stopped.empty()) {
    v.culprit = *stopped.begin();
    std::vector<int> s(stopped.begin(), stopped.end());
    v.reason = "rank " + Join(s) + " was stopped (process state T) while its peers waited for it";
    return v;
  }
  std::vector<int> waiting, elsewhere;
  for (const auto& [rank, text] : stacks) {
    if (text.empty()) continue;
    (StackWaitsInCollective(text) ? waiting : elsewhere).push_back(rank);
  }
  if (!waiting.empty() && !elsewhere.empty()) {
    v.culprit = elsewhere.front();
    v.reason = "rank " + Join(elsewhere) + " is not in a collective while rank " + Join(waiting) +
               " wait in one (from their stacks)";
    return v;
  }
  v.reason = waiting.empty() ? "no stack shows a collective; the stacks do not single out a rank"
                             : "every rank waits in a collective (a network or peer-loss hang?)";
  return v;
}

}  // namespace bulwark
