// The web dashboard's read-only JSON API (docs/monitoring.md, "Web dashboard"), built
// from a controller's status snapshot: /api/status, /api/series, /api/incidents,
// /api/ranks, /api/checkpoints and /api/stacks?incident=N. Pure apart from
// /api/stacks, which reads the incident's stacks file (at most 256 KiB).
// Thread-safe: no shared state.
#pragma once

#include <optional>
#include <string>

#include "controller/controller.h"
#include "metrics/http_endpoint.h"

namespace bulwark {

// The response for `path` (with its `query`), or nullopt if `path` is not an API path.
// `ettr_target`: the spec's monitoring.ettrTarget (the ETTR chart's target line).
std::optional<metrics::HttpResponse> DashboardApi(const ControllerStatus& s, const std::string& job,
                                                  double ettr_target, const std::string& path,
                                                  const std::string& query, double now);

}  // namespace bulwark
