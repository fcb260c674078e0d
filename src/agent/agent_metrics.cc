// The agent's /metrics (docs/monitoring.md, "Agent metrics") and GPU health: NVML
// polled every kGpuPollS, XID and double-bit ECC events reported as incidents.
//
// Threading: the counters and the GPU state belong to the agent's thread; the HTTP
// port's threads read only metrics_text_, which RefreshMetrics re-renders under
// metrics_mu_ once per heartbeat interval.
#include <unistd.h>

#include "agent/agent.h"
#include "agent/agent_internal.h"

namespace bulwark {

using agent_internal::HostName;
using agent_internal::Warn;

namespace {

constexpr double kGpuPollS = 5;

}  // namespace

void Agent::StartMetrics() {
  if (!opts_.nvml_library.empty()) {
    auto nvml = gpu::Nvml::Open(opts_.nvml_library);
    if (nvml.ok()) {
      nvml_ = std::move(*nvml);
    } else {
      Warn(nvml.status().message());  // one line: "no NVIDIA driver: …; GPU metrics off"
    }
  }
  PollGpus();
  if (opts_.metrics_addr.empty()) return;
  metrics::HttpEndpointHandlers h;
  h.healthy = [] { return true; };
  h.ready = [] { return true; };
  h.metrics = [this] {
    std::lock_guard<std::mutex> l(metrics_mu_);
    return metrics_text_;
  };
  auto http = metrics::HttpEndpoint::Start(opts_.metrics_addr, h);
  if (!http.ok()) {
    Warn("metrics port " + opts_.metrics_addr + " not served: " + http.status().message());
    return;
  }
  http_ = std::move(*http);
  RefreshMetrics();
}

int Agent::metrics_port() const { return http_ ? http_->port() : 0; }

void Agent::PollGpus() {
  if (!nvml_) return;
  const double now = clock_->NowMono();
  if (gpu_polled_at_ >= 0 && now - gpu_polled_at_ < kGpuPollS) return;
  gpu_polled_at_ = now;
  auto samples = nvml_->Poll();
  if (samples.ok()) {
    gpus_ = std::move(*samples);
  } else {
    WarnLimited("NVML poll failed: " + samples.status().message());
  }
  for (const gpu::GpuEvent& e : nvml_->DrainEvents()) {
    if (e.kind == "xid") last_xid_[e.index] = e.value;
    DetectedFault f;
    f.kind = FaultKind::kFatalLog;
    f.subtype = e.kind == "xid" ? "xid" : "ecc_dbe";
    f.rank = -1;
    f.fault_time = f.detect_time = clock_->NowWall();
    f.detail = e.kind == "xid" ? "NVML: XID " + std::to_string(e.value) + " on GPU " +
                                     std::to_string(e.index) + " (" + e.uuid + ") of " + opts_.node
                               : "NVML: double-bit ECC error on GPU " + std::to_string(e.index) +
                                     " (" + e.uuid + ") of " + opts_.node;
    Warn(f.detail);
    ++faults_detected_[f.subtype == "xid" ? "gpu_xid" : "gpu_ecc"];
    SendIncident(f, nullptr);
  }
}

std::vector<std::string> Agent::GpuNames() const {
  std::vector<std::string> names;
  for (const gpu::GpuSample& g : gpus_) names.push_back(g.name);
  return names;
}

void Agent::RefreshMetrics() {
  PollGpus();
  if (!http_) return;
  metrics::Exposition e;
  const metrics::Labels base = {{"job", job_}, {"node", opts_.node}};
  auto with = [&](const char* k, const std::string& v) {
    metrics::Labels l = base;
    l.emplace_back(k, v);
    return l;
  };
  int running = 0, parked = 0, warm = 0;
  for (const Rank& r : ranks_) {
    if (!r.alive) continue;
    if (r.parked) {
      ++parked;
    } else {
      ++running;
    }
  }
  for (const WarmRank& w : warm_) warm += w.pid > 0 ? 1 : 0;
  e.Family("bulwark_agent_ranks", "gauge", "rank processes by state");
  e.Sample("bulwark_agent_ranks", with("state", "running"), running);
  e.Sample("bulwark_agent_ranks", with("state", "parked"), parked);
  e.Sample("bulwark_agent_ranks", with("state", "warm"), warm);
  e.Family("bulwark_agent_rank_step_duration_seconds", "histogram",
           "step time of this node's ranks");
  e.HistogramSamples("bulwark_agent_rank_step_duration_seconds", base, step_hist_);
  e.Family("bulwark_agent_faults_detected_total", "counter", "faults this agent detected");
  for (const auto& [kind, n] : faults_detected_) {
    e.Sample("bulwark_agent_faults_detected_total", with("kind", kind), static_cast<double>(n));
  }
  e.Counter("bulwark_agent_reports_total", "SDK datagrams received", base,
            static_cast<double>(reports_total_));
  e.Family("bulwark_agent_reports_dropped_total", "counter", "SDK datagrams dropped, by reason");
  for (const char* why : {"malformed", "bad_value", "no_rank", "flood"}) {
    auto it = reports_dropped_.find(why);
    e.Sample("bulwark_agent_reports_dropped_total", with("reason", why),
             it == reports_dropped_.end() ? 0 : static_cast<double>(it->second));
  }
  e.Gauge("bulwark_agent_gpus", "devices NVML reports (0: no NVIDIA driver)", base,
          static_cast<double>(gpus_.size()));
  std::string text = e.Take();
  if (!gpus_.empty()) {
    text +=
        gpu::DcgmExposition(gpus_, last_xid_, HostName(), {{"job", job_}, {"node", opts_.node}});
  }
  std::lock_guard<std::mutex> l(metrics_mu_);
  metrics_text_ = std::move(text);
}

}  // namespace bulwark
