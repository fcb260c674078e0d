#include "cli/replay_pins.h"

#include <algorithm>
#include <filesystem>

#include "cli/stores.h"
#include "controller/incident_json.h"
#include "controller/replay_bundle.h"

namespace bulwark::cli {

namespace fs = std::filesystem;

std::map<long, std::string> ReplayPinnedSteps(const std::string& dir,
                                              const std::vector<std::string>& stores) {
  auto norm = [](const std::string& p) {
    std::error_code ec;
    std::string s = fs::absolute(p, ec).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  const std::string want = norm(dir);
  std::map<long, std::string> pinned;
  for (const std::string& path : stores.empty() ? KnownStores(StoreRegistryPath()) : stores) {
    auto store = Store::OpenReadOnly(path);
    if (!store.ok()) continue;
    auto jobs = (*store)->ListJobs();
    if (!jobs.ok()) continue;
    for (const JobRecord& job : *jobs) {
      const std::vector<Json> incidents = RecordedIncidents(store->get(), job);
      // Newest first, as the controller keeps its newest pins.
      std::vector<long> kept;
      for (size_t i = incidents.size(); i-- > 0 && kept.size() < kReplayPinnedCheckpoints;) {
        const Json& inc = incidents[i];
        if (!inc.contains("replay") || !inc["replay"].is_object()) continue;
        const Json& b = inc["replay"];
        const auto cdir = b.find("checkpoint_dir");
        const auto cstep = b.find("checkpoint_step");
        if (cdir == b.end() || !cdir->is_string() || cstep == b.end() ||
            !cstep->is_number_integer()) {
          continue;
        }
        const long step = cstep->get<long>();
        if (step < 0 || norm(cdir->get<std::string>()) != want) continue;
        if (std::find(kept.begin(), kept.end(), step) != kept.end()) continue;
        kept.push_back(step);
        pinned.emplace(
            step, "the replay bundle of job " + job.name + ", incident " + std::to_string(i + 1));
      }
    }
  }
  return pinned;
}

}  // namespace bulwark::cli
