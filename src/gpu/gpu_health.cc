#include "gpu/gpu_health.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace bulwark::gpu {
namespace {

// XIDs that name the hardware (NVIDIA's XID catalogue), not the program.
bool HardwareXid(unsigned long long xid) {
  static const std::set<unsigned long long> kXids = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120};
  return kXids.count(xid) > 0;
}

std::string Device(const GpuSample& s) {
  return "GPU " + std::to_string(s.index) + (s.name.empty() ? "" : " (" + s.name + ")");
}

}  // namespace

GpuHealth JudgeGpuHealth(const std::vector<GpuSample>& samples,
                         const std::vector<GpuEvent>& events) {
  GpuHealth h;
  if (samples.empty()) {
    h.evidence = "NVML lists no GPU on this node: nothing to test";
    return h;
  }
  std::vector<std::string> bad, fine;
  for (const GpuSample& s : samples) {
    std::vector<std::string> why;
    for (const std::string& p : s.problems) {
      if (p.rfind("device:", 0) == 0 || p.find("GPU is lost") != std::string::npos) {
        why.push_back(p);
      }
    }
    if (s.Has("ecc_dbe_volatile") && s.ecc_dbe_volatile > 0) {
      why.push_back(std::to_string(s.ecc_dbe_volatile) + " uncorrected ECC error(s)");
    }
    if (s.Has("temp_c") && s.temp_c >= 95 && s.thermal_throttle) {
      char b[64];
      std::snprintf(b, sizeof b, "%.0f C and thermally throttled", s.temp_c);
      why.push_back(b);
    }
    for (const GpuEvent& e : events) {
      if (e.index != s.index) continue;
      if (e.kind == "ecc_dbe") why.push_back("a double-bit ECC event");
      if (e.kind == "xid" && HardwareXid(e.value)) {
        why.push_back("XID " + std::to_string(e.value));
      }
    }
    if (!why.empty()) {
      std::string w;
      for (const std::string& x : why) w += (w.empty() ? "" : ", ") + x;
      bad.push_back(Device(s) + ": " + w);
    } else {
      char b[96];
      std::snprintf(b, sizeof b, ": %s, %llu uncorrected ECC",
                    std::isnan(s.temp_c)
                        ? "temperature unknown"
                        : (std::to_string(static_cast<int>(s.temp_c)) + " C").c_str(),
                    s.ecc_dbe_volatile);
      fine.push_back(Device(s) + b);
    }
  }
  std::vector<unsigned long long> program_xids;
  for (const GpuEvent& e : events) {
    if (e.kind == "xid" && !HardwareXid(e.value)) program_xids.push_back(e.value);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : "; ") + x;
    return s;
  };
  h.ok = bad.empty();
  h.evidence = h.ok ? std::to_string(samples.size()) + " GPU(s) healthy: " + join(fine) : join(bad);
  if (!program_xids.empty()) {
    std::string x;
    for (auto v : program_xids) x += (x.empty() ? "" : ", ") + std::to_string(v);
    h.evidence += "; program XID(s) " + x + " (the program's, not the machine's)";
  }
  return h;
}

GpuHealth CheckGpuHealth(const std::string& library) {
  GpuHealth h;
  auto nvml = Nvml::Open(library);
  if (!nvml.ok()) {
    h.ok = nvml.status().code() == Code::kUnavailable;
    std::string why = nvml.status().message();
    const std::string tail = "; GPU metrics off";
    if (why.size() > tail.size() && why.compare(why.size() - tail.size(), tail.size(), tail) == 0) {
      why.resize(why.size() - tail.size());
    }
    h.evidence = h.ok ? why + ": no GPU to test" : "NVML failed: " + why;
    return h;
  }
  auto samples = (*nvml)->Poll();
  if (!samples.ok()) {
    h.ok = false;
    h.evidence = "NVML cannot list the GPUs: " + samples.status().message();
    return h;
  }
  std::vector<GpuEvent> events;
  for (int i = 0; i < 4; ++i) {
    std::vector<GpuEvent> more = (*nvml)->DrainEvents();
    events.insert(events.end(), more.begin(), more.end());
    if (static_cast<int>(more.size()) < Nvml::kMaxEventsPerDrain) break;
  }
  return JudgeGpuHealth(*samples, events);
}

}  // namespace bulwark::gpu
