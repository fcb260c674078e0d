#include "ui/assets.h"

#include <string_view>

#include "ui/embedded.h"

namespace bulwark::ui {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string ContentType(std::string_view name) {
  if (EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (EndsWith(name, ".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

}  // namespace

std::optional<metrics::HttpResponse> ServeAsset(const std::string& path) {
  // Only the embedded names are answered, compared whole: nothing is looked up on disk,
  // so no path (.., %2e%2e, //, a query) can reach anything else.
  const std::string_view name =
      path == "/" ? std::string_view("index.html")
                  : (path.size() > 1 && path[0] == '/' ? std::string_view(path).substr(1)
                                                       : std::string_view());
  if (name.empty()) return std::nullopt;
  for (size_t i = 0; i < internal::kEmbeddedAssetCount; ++i) {
    const internal::EmbeddedAsset& a = internal::kEmbeddedAssets[i];
    if (name != a.name) continue;
    return metrics::HttpResponse{200, ContentType(name),
                                 std::string(reinterpret_cast<const char*>(a.data), a.size)};
  }
  return std::nullopt;
}

}  // namespace bulwark::ui
