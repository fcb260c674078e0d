// The operator's web dashboard (docs/monitoring.md, "Web dashboard"): `/jobs/` lists the
// TrainJobs it runs; `/jobs/NAMESPACE/NAME/` serves the same page as `bulwark run --ui`
// for that job, its API under `/jobs/NAMESPACE/NAME/api/...`. Read-only. Thread-safe
// if the callbacks are.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "metrics/http_endpoint.h"

namespace bulwark::op {

struct JobStatusSource {
  std::function<std::vector<std::string>()> keys;  // "namespace/name"
  std::function<std::optional<ControllerStatus>(const std::string& key)> status;
};

// The response for `path`, or nullopt when it is not a dashboard path.
std::optional<metrics::HttpResponse> DashboardRoute(const JobStatusSource& jobs,
                                                    const std::string& path,
                                                    const std::string& query, double now);

}  // namespace bulwark::op
