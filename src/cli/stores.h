// Where `bulwark get` and `describe` find jobs: every store a `bulwark run` used is
// remembered in the store registry, ${XDG_STATE_HOME:-$HOME/.local/state}/bulwark/stores
// (one absolute path per line), so they work from any directory, as kubectl does.
// Thread-compatible; the registry file is updated under flock(2) and replaced
// atomically (write a temporary file, rename), so concurrent runs lose no entry.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::cli {

// The registry file for this environment ($XDG_STATE_HOME, else $HOME/.local/state).
std::string StoreRegistryPath();

// Adds `store` (made absolute) to the registry at `registry`, dropping entries whose
// file no longer exists.
Status RememberStore(const std::string& registry, const std::string& store);

// The stores to read: ./.bulwark/bulwark.db if it exists, then the registry's entries
// that still exist, each once (by canonical path), in that order.
std::vector<std::string> KnownStores(const std::string& registry);

}  // namespace bulwark::cli
