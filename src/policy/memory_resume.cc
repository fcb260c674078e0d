#include "policy/memory_resume.h"

#include <optional>

namespace bulwark {
namespace {

// The digest every holder of `step` agrees on, when every rank that holds `step` in its
// own ring holds it portably; nullopt otherwise (or when nobody holds it).
std::optional<uint64_t> CommonDigest(const std::vector<RankMemory>& ranks, long step) {
  std::optional<uint64_t> digest;
  for (const RankMemory& r : ranks) {
    if (!r.own.count(step)) continue;
    auto p = r.portable.find(step);
    if (p == r.portable.end()) return std::nullopt;  // a rank-specific copy
    if (digest && *digest != p->second) return std::nullopt;
    digest = p->second;
  }
  return digest;
}

}  // namespace

MemoryResume ChooseMemoryResume(const std::vector<RankMemory>& ranks, long max_step,
                                bool allow_donors) {
  MemoryResume out;
  if (ranks.empty()) return out;
  std::set<long> candidates;
  for (const RankMemory& r : ranks) {
    candidates.insert(r.own.begin(), r.own.end());
    for (const auto& [step, node] : r.replica) candidates.insert(step);
  }
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const long step = *it;
    if (max_step >= 0 && step > max_step) continue;
    const std::optional<uint64_t> portable =
        allow_donors ? CommonDigest(ranks, step) : std::nullopt;
    std::vector<MemorySource> sources;
    int donated = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const RankMemory& r = ranks[i];
      if (r.own.count(step)) {
        sources.push_back({MemorySource::Kind::kOwn, r.node, -1});
        continue;
      }
      if (auto rep = r.replica.find(step); rep != r.replica.end()) {
        sources.push_back({MemorySource::Kind::kReplica, rep->second, -1});
        continue;
      }
      if (!portable) break;
      int donor = -1;
      for (size_t d = 0; d < ranks.size(); ++d) {
        if (d == i || !ranks[d].own.count(step)) continue;
        if (donor < 0 || (ranks[d].node == r.node && ranks[donor].node != r.node)) {
          donor = static_cast<int>(d);
        }
      }
      if (donor < 0) break;
      sources.push_back({MemorySource::Kind::kDonor, ranks[donor].node, donor});
      ++donated;
    }
    if (sources.size() != ranks.size()) continue;
    out.step = step;
    out.sources = std::move(sources);
    out.donated = donated;
    return out;
  }
  return out;
}

}  // namespace bulwark
