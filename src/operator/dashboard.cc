#include "operator/dashboard.h"

#include "common/markup.h"
#include "controller/dashboard_api.h"
#include "ui/assets.h"

namespace bulwark::op {

std::optional<metrics::HttpResponse> DashboardRoute(const JobStatusSource& jobs,
                                                    const std::string& path,
                                                    const std::string& query, double now) {
  const std::string prefix = "/jobs/";
  if (path == "/" || path == "/jobs" || path == prefix) {
    std::string body =
        "<!doctype html><html><head><meta charset=utf-8><title>Bulwark</title></head>"
        "<body style=\"font-family:sans-serif\"><h1>Bulwark TrainJobs</h1><ul>";
    for (const std::string& key : jobs.keys()) {
      auto s = jobs.status(key);
      body += "<li><a href=\"/jobs/" + XmlEscape(key) + "/\">" + XmlEscape(key) + "</a>";
      if (s) {
        char ettr[32];
        std::snprintf(ettr, sizeof ettr, "%.3f", s->ledger.ettr());
        body += " &mdash; " + XmlEscape(JobPhaseName(s->phase)) + ", step " +
                std::to_string(s->current_step) + ", ETTR " + ettr;
      }
      body += "</li>";
    }
    body += "</ul></body></html>";
    return metrics::HttpResponse{200, "text/html; charset=utf-8", body};
  }
  if (path.rfind(prefix, 0) != 0) return std::nullopt;
  // /jobs/NS/NAME[/rest]
  const std::string rest = path.substr(prefix.size());
  const size_t a = rest.find('/');
  if (a == std::string::npos) return std::nullopt;
  const size_t b = rest.find('/', a + 1);
  const std::string key = rest.substr(0, b);
  if (b == std::string::npos) {  // "/jobs/NS/NAME": the page's relative paths want a '/'
    return metrics::HttpResponse{404, "text/plain", "open /jobs/" + key + "/\n"};
  }
  const std::string sub = rest.substr(b);  // "/", "/app.js", "/api/status", ...
  if (sub.rfind("/api/", 0) == 0) {
    auto s = jobs.status(key);
    if (!s) {
      return metrics::HttpResponse{404, "application/json",
                                   "{\"error\":\"no TrainJob " + key + " runs here\"}"};
    }
    return DashboardApi(*s, key.substr(a + 1), 0, sub, query, now);
  }
  return ui::ServeAsset(sub);
}

}  // namespace bulwark::op
