// The web dashboard's static files (ui/), embedded in the binary at build time.
#pragma once

#include <optional>
#include <string>

#include "metrics/http_endpoint.h"

namespace bulwark::ui {

// The embedded file for `path` ("/" = index.html), or nullopt.
std::optional<metrics::HttpResponse> ServeAsset(const std::string& path);

}  // namespace bulwark::ui
