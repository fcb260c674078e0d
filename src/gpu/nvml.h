// GPU health from NVML, the NVIDIA driver's management library, for the node agent.
//
// libnvidia-ml is loaded at run time (dlopen), never linked: a machine without an
// NVIDIA driver runs every binary, and Nvml::Open tells it, in one line, that GPU
// metrics are off. Nothing here needs NVIDIA's headers (nvml_abi.h declares the subset
// used). Tests load a scripted fake library (testing/fake_nvml.cc) at the same seam.
//
// DcgmExposition renders samples as Prometheus text under dcgm-exporter's metric and
// label names, so dashboards built for dcgm-exporter read Bulwark's agents unchanged.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::gpu {

// One device, one poll. A field the device does not report is NaN (a double) or 0 (a
// count) and its name is listed in `unsupported`: NVML answered NOT_SUPPORTED, or
// another error, or a value out of physical range (utilisation above 100 %, memory used
// above total or a total of 0, temperature above 200 C, power above 10 kW, SM clock
// above 10 GHz). For every cause but NOT_SUPPORTED, `problems` says what happened.
struct GpuSample {
  static constexpr double kAbsent = std::numeric_limits<double>::quiet_NaN();

  int index = -1;             // NVML device index (the `gpu` label)
  std::string uuid;           // "GPU-…"
  std::string name;           // e.g. "NVIDIA H100 80GB HBM3"
  double util_pct = kAbsent;  // share of the last sample period a kernel ran, 0..100
  double mem_used_bytes = kAbsent;
  double mem_total_bytes = kAbsent;
  double temp_c = kAbsent;  // GPU die
  double power_w = kAbsent;
  double sm_clock_mhz = kAbsent;
  unsigned long long throttle_reasons = 0;  // nvmlClocksThrottleReasons bitmask
  bool thermal_throttle = false;            // SW or HW thermal slowdown bit set
  bool power_throttle = false;              // SW power cap or HW power brake bit set
  unsigned long long ecc_sbe_volatile = 0;  // corrected errors since the driver loaded
  unsigned long long ecc_dbe_volatile = 0;  // uncorrected errors since the driver loaded
  // Names of the fields above without a value this poll: "name", "uuid", "util_pct",
  // "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w", "sm_clock_mhz",
  // "throttle_reasons" (the two flags follow it), "ecc_sbe_volatile", "ecc_dbe_volatile".
  std::vector<std::string> unsupported;
  // "<field>: <why>" for each absent field whose cause was not NOT_SUPPORTED, e.g.
  // "power_w: GPU is lost (NVML error 15)", "temp_c: absurd value 10000 C dropped";
  // "device: …" when the device handle itself could not be obtained (every field absent).
  std::vector<std::string> problems;

  bool Has(const std::string& field) const;  // not listed in `unsupported`
};

// An asynchronous NVML event. kind "xid": value is the XID (NVML reports 999 for an
// unknown one). kind "ecc_dbe": a double-bit ECC error; value is NVML's event data (0).
struct GpuEvent {
  int index = -1;  // -1 if the event names a device handle Poll/Open did not see
  std::string uuid;
  std::string kind;
  unsigned long long value = 0;
};

// A loaded and initialised NVML. Not thread-safe: one poller owns it and calls Poll and
// DrainEvents from one thread (NVML itself may be used by other Nvml instances).
class Nvml {
 public:
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";
  static constexpr int kMaxDevices = 64;         // a larger device count is clamped
  static constexpr int kMaxEventsPerDrain = 64;  // DrainEvents' bound per call

  // dlopen(path), resolves every symbol used (the _v2 variants nvml.h maps its names to;
  // nvmlDeviceGetCurrentClocksEventReasons, or its older name ...ThrottleReasons),
  // nvmlInit_v2, then registers each device for XID and double-bit ECC events, as far as
  // the device supports them (failing that, it reports no events; Open still succeeds).
  // Errors, each one line ending "; GPU metrics off":
  //   UNAVAILABLE: the library is absent ("no NVIDIA driver: <path> not found; …") or
  //     cannot be loaded (the loader's reason);
  //   FAILED_PRECONDITION: the library lacks a symbol (named), or nvmlInit_v2 or
  //     nvmlDeviceGetCount_v2 fails (NVML's error string and code).
  static Result<std::unique_ptr<Nvml>> Open(const std::string& path = kDefaultLibrary);

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  // Frees the event set, nvmlShutdown, dlclose.
  ~Nvml();

  // Samples every device, in index order. Makes only non-blocking NVML queries. Errors:
  // UNAVAILABLE when the device count cannot be read; a per-device failure is not an
  // error, it shows in that sample's `unsupported` and `problems`.
  Result<std::vector<GpuSample>> Poll();

  // The pending XID and double-bit ECC events, oldest first, without waiting (NVML wait
  // with timeout 0). At most kMaxEventsPerDrain per call: call again while the result is
  // full. An NVML error ends the call early; the next call tries again.
  std::vector<GpuEvent> DrainEvents();

 private:
  struct Impl;
  explicit Nvml(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Prometheus text exposition (# HELP / # TYPE, then one line per device) of `samples`
// under dcgm-exporter's names and units: DCGM_FI_DEV_SM_CLOCK (MHz), _GPU_TEMP (C),
// _POWER_USAGE (W), _GPU_UTIL (%), _XID_ERRORS (the last XID of the device in
// `last_xid`, 0 if none), _FB_FREE and _FB_USED (MiB, rounded down),
// _ECC_SBE_VOL_TOTAL, _ECC_DBE_VOL_TOTAL, _CLOCK_THROTTLE_REASONS (the bitmask), each
// labelled gpu, UUID, modelName and Hostname (Hostname left out when `hostname` is
// empty, as dcgm-exporter does); then bulwark_gpu_throttled{gpu,UUID,reason="thermal"|
// "power"} 0/1. A field a sample lacks (GpuSample::Has) has no line (nor does the XID
// of a device without a UUID); a family with no line has no HELP/TYPE either. Label
// values are escaped (\\, \", \n). `extra_labels` (e.g. Bulwark's job and node) are
// appended to every line's labels. Pure.
std::string DcgmExposition(
    const std::vector<GpuSample>& samples, const std::map<int, unsigned long long>& last_xid,
    const std::string& hostname,
    const std::vector<std::pair<std::string, std::string>>& extra_labels = {});

}  // namespace bulwark::gpu
