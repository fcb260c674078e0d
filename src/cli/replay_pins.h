// What `bulwark ckpt gc` reads of replay bundles: the checkpoint steps they pin
// against retention. Thread-compatible (each call opens its stores).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/net.h"
#include "store/store.h"

namespace bulwark::cli {

// The checkpoint steps under `dir` that replay bundles pin, as the controller keeps them
// from retention (each job's newest kReplayPinnedCheckpoints distinct bundle
// checkpoints): step -> "the replay bundle of job J, incident N". Read from the jobs of
// `stores` (empty: the known stores, stores.h) whose bundles name `dir` (compared as
// absolute normalized paths); a store that cannot be read is skipped.
std::map<long, std::string> ReplayPinnedSteps(const std::string& dir,
                                              const std::vector<std::string>& stores);

}  // namespace bulwark::cli
