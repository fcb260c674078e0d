#include "gpu/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include "gpu/nvml_abi.h"
#include "metrics/exposition.h"

namespace bulwark::gpu {

// The resolved library. Owns the dlopen handle, the NVML initialisation and the event
// set; the destructor releases them in reverse order.
struct Nvml::Impl {
  void* lib = nullptr;
  bool initialized = false;
  nvmlEventSet_t event_set = nullptr;
  // Per device index, as of the last Open/Poll; the UUIDs also name the device of an event.
  struct Device {
    nvmlDevice_t handle = nullptr;  // nullptr if NVML refused it (handle_rc)
    nvmlReturn_t handle_rc = NVML_SUCCESS;
    std::string uuid;  // "" if NVML refused it (uuid_rc)
    nvmlReturn_t uuid_rc = NVML_SUCCESS;
  };
  std::vector<Device> devices;

  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlShutdown) shutdown = nullptr;
  decltype(&::nvmlErrorString) error_string = nullptr;
  decltype(&::nvmlDeviceGetCount_v2) get_count = nullptr;
  decltype(&::nvmlDeviceGetHandleByIndex_v2) get_handle = nullptr;
  decltype(&::nvmlDeviceGetName) get_name = nullptr;
  decltype(&::nvmlDeviceGetUUID) get_uuid = nullptr;
  decltype(&::nvmlDeviceGetUtilizationRates) get_utilization = nullptr;
  decltype(&::nvmlDeviceGetMemoryInfo) get_memory = nullptr;
  decltype(&::nvmlDeviceGetTemperature) get_temperature = nullptr;
  decltype(&::nvmlDeviceGetPowerUsage) get_power = nullptr;
  decltype(&::nvmlDeviceGetClockInfo) get_clock = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons, or ...ThrottleReasons on older drivers.
  decltype(&::nvmlDeviceGetCurrentClocksEventReasons) get_clock_reasons = nullptr;
  decltype(&::nvmlDeviceGetTotalEccErrors) get_ecc = nullptr;
  decltype(&::nvmlEventSetCreate) event_set_create = nullptr;
  decltype(&::nvmlDeviceRegisterEvents) register_events = nullptr;
  decltype(&::nvmlDeviceGetSupportedEventTypes) get_supported_events = nullptr;
  decltype(&::nvmlEventSetWait_v2) event_set_wait = nullptr;
  decltype(&::nvmlEventSetFree) event_set_free = nullptr;

  ~Impl() {
    if (event_set != nullptr) event_set_free(event_set);
    if (initialized) shutdown();
    if (lib != nullptr) dlclose(lib);
  }

  // "GPU is lost (NVML error 15)".
  std::string Error(nvmlReturn_t rc) const {
    const char* s = error_string(rc);
    return std::string(s != nullptr ? s : "unknown error") + " (NVML error " +
           std::to_string(static_cast<int>(rc)) + ")";
  }

  // Re-reads the handle and UUID of devices 0..count-1.
  void RefreshDevices(unsigned count);
  // Registers every known device for XID and DBE events, as far as it supports them.
  void RegisterEvents();
  void Sample(unsigned index, GpuSample* s);
  int IndexOf(nvmlDevice_t device) const;
};

namespace {

constexpr unsigned long long kWantedEvents =
    nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError;
constexpr unsigned long long kThermalReasons =
    nvmlClocksEventReasonSwThermalSlowdown | nvmlClocksThrottleReasonHwThermalSlowdown;
constexpr unsigned long long kPowerReasons =
    nvmlClocksEventReasonSwPowerCap | nvmlClocksThrottleReasonHwPowerBrakeSlowdown;

// Physical bounds past which a reading is garbage (see GpuSample).
constexpr double kMaxUtilPct = 100;
constexpr double kMaxTempC = 200;
constexpr double kMaxPowerW = 10000;
constexpr double kMaxSmClockMhz = 10000;

constexpr double kMiB = 1024.0 * 1024.0;

std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// Binds `*fn` to the library's `name`; FAILED_PRECONDITION naming it if absent.
template <typename F>
Status Resolve(void* lib, const std::string& path, const char* name, F* fn) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    return FailedPrecondition(path + " has no symbol " + name +
                              " (an NVIDIA driver too old for Bulwark?); GPU metrics off");
  }
  *fn = reinterpret_cast<F>(p);
  return Status::Ok();
}

void MarkAbsent(GpuSample* s, const std::string& field, const std::string& problem) {
  s->unsupported.push_back(field);
  if (!problem.empty()) s->problems.push_back(field + ": " + problem);
}

}  // namespace

bool GpuSample::Has(const std::string& field) const {
  return std::find(unsupported.begin(), unsupported.end(), field) == unsupported.end();
}

void Nvml::Impl::RefreshDevices(unsigned count) {
  devices.assign(count, Device{});
  for (unsigned i = 0; i < count; ++i) {
    Device& d = devices[i];
    d.handle_rc = get_handle(i, &d.handle);
    if (d.handle_rc != NVML_SUCCESS) {
      d.handle = nullptr;
      continue;
    }
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    d.uuid_rc = get_uuid(d.handle, buf, sizeof buf - 1);
    if (d.uuid_rc == NVML_SUCCESS) d.uuid = buf;
  }
}

void Nvml::Impl::RegisterEvents() {
  if (event_set_create(&event_set) != NVML_SUCCESS) {
    event_set = nullptr;
    return;
  }
  for (const Device& d : devices) {
    nvmlDevice_t h = d.handle;
    if (h == nullptr) continue;
    unsigned long long supported = kWantedEvents;  // unknown: let registration decide
    if (get_supported_events(h, &supported) != NVML_SUCCESS) supported = kWantedEvents;
    const unsigned long long mask = supported & kWantedEvents;
    if (mask == 0 || register_events(h, mask, event_set) == NVML_SUCCESS) continue;
    // A refused mask registers nothing: try each type on its own.
    for (unsigned long long bit :
         {static_cast<unsigned long long>(nvmlEventTypeXidCriticalError),
          static_cast<unsigned long long>(nvmlEventTypeDoubleBitEccError)}) {
      if (mask & bit) (void)register_events(h, bit, event_set);
    }
  }
}

int Nvml::Impl::IndexOf(nvmlDevice_t device) const {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].handle != nullptr && devices[i].handle == device) return static_cast<int>(i);
  }
  return -1;
}

void Nvml::Impl::Sample(unsigned index, GpuSample* s) {
  s->index = static_cast<int>(index);
  const Device& d = devices[index];
  nvmlDevice_t h = d.handle;
  // A problem only when the cause is not NOT_SUPPORTED.
  auto absent = [&](const std::string& field, nvmlReturn_t rc) {
    MarkAbsent(s, field, rc == NVML_ERROR_NOT_SUPPORTED ? "" : Error(rc));
  };
  auto absurd = [&](const std::string& field, const std::string& got) {
    MarkAbsent(s, field, "absurd value " + got + " dropped");
  };
  if (h == nullptr) {
    s->problems.push_back("device: " + Error(d.handle_rc));
    for (const char* f :
         {"name", "uuid", "util_pct", "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w",
          "sm_clock_mhz", "throttle_reasons", "ecc_sbe_volatile", "ecc_dbe_volatile"}) {
      s->unsupported.push_back(f);
    }
    return;
  }

  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  nvmlReturn_t rc = get_name(h, name, sizeof name - 1);
  if (rc == NVML_SUCCESS) {
    s->name = name;
  } else {
    absent("name", rc);
  }
  if (d.uuid_rc == NVML_SUCCESS) {
    s->uuid = d.uuid;
  } else {
    absent("uuid", d.uuid_rc);
  }

  nvmlUtilization_t util{};
  rc = get_utilization(h, &util);
  if (rc != NVML_SUCCESS) {
    absent("util_pct", rc);
  } else if (util.gpu > kMaxUtilPct) {
    absurd("util_pct", std::to_string(util.gpu) + " %");
  } else {
    s->util_pct = util.gpu;
  }

  nvmlMemory_t mem{};
  rc = get_memory(h, &mem);
  if (rc != NVML_SUCCESS) {
    absent("mem_used_bytes", rc);
    absent("mem_total_bytes", rc);
  } else if (mem.total == 0 || mem.used > mem.total) {
    const std::string got =
        "used " + std::to_string(mem.used) + " of " + std::to_string(mem.total) + " bytes";
    absurd("mem_used_bytes", got);
    absurd("mem_total_bytes", got);
  } else {
    s->mem_used_bytes = static_cast<double>(mem.used);
    s->mem_total_bytes = static_cast<double>(mem.total);
  }

  unsigned int temp = 0;
  rc = get_temperature(h, NVML_TEMPERATURE_GPU, &temp);
  if (rc != NVML_SUCCESS) {
    absent("temp_c", rc);
  } else if (temp > kMaxTempC) {  // also a negative reading wrapped to unsigned
    absurd("temp_c", std::to_string(temp) + " C");
  } else {
    s->temp_c = temp;
  }

  unsigned int power_mw = 0;
  rc = get_power(h, &power_mw);
  if (rc != NVML_SUCCESS) {
    absent("power_w", rc);
  } else if (power_mw / 1000.0 > kMaxPowerW) {
    absurd("power_w", std::to_string(power_mw) + " mW");
  } else {
    s->power_w = power_mw / 1000.0;
  }

  unsigned int clock = 0;
  rc = get_clock(h, NVML_CLOCK_SM, &clock);
  if (rc != NVML_SUCCESS) {
    absent("sm_clock_mhz", rc);
  } else if (clock > kMaxSmClockMhz) {
    absurd("sm_clock_mhz", std::to_string(clock) + " MHz");
  } else {
    s->sm_clock_mhz = clock;
  }

  unsigned long long reasons = 0;
  rc = get_clock_reasons(h, &reasons);
  if (rc != NVML_SUCCESS) {
    absent("throttle_reasons", rc);
  } else {
    s->throttle_reasons = reasons;
    s->thermal_throttle = (reasons & kThermalReasons) != 0;
    s->power_throttle = (reasons & kPowerReasons) != 0;
  }

  unsigned long long sbe = 0;
  rc = get_ecc(h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &sbe);
  if (rc != NVML_SUCCESS) {
    absent("ecc_sbe_volatile", rc);
  } else {
    s->ecc_sbe_volatile = sbe;
  }
  unsigned long long dbe = 0;
  rc = get_ecc(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &dbe);
  if (rc != NVML_SUCCESS) {
    absent("ecc_dbe_volatile", rc);
  } else {
    s->ecc_dbe_volatile = dbe;
  }
}

Nvml::Nvml(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Nvml::~Nvml() = default;

Result<std::unique_ptr<Nvml>> Nvml::Open(const std::string& path) {
  dlerror();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    const std::string why = e != nullptr ? OneLine(e) : "";
    // glibc: "<path as given>: cannot open shared object file: No such file or directory";
    // the same words naming another file mean a dependency of the library is missing.
    if (why.empty() || why.rfind(path + ": cannot open shared object file", 0) == 0) {
      return Unavailable("no NVIDIA driver: " + path + " not found; GPU metrics off");
    }
    return Unavailable("no NVIDIA driver: " + path + " cannot be loaded (" + why +
                       "); GPU metrics off");
  }
  auto impl = std::make_unique<Impl>();
  impl->lib = lib;

  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlErrorString", &impl->error_string));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlInit_v2", &impl->init));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlShutdown", &impl->shutdown));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetCount_v2", &impl->get_count));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetHandleByIndex_v2", &impl->get_handle));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetName", &impl->get_name));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetUUID", &impl->get_uuid));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetUtilizationRates", &impl->get_utilization));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetMemoryInfo", &impl->get_memory));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetTemperature", &impl->get_temperature));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetPowerUsage", &impl->get_power));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetClockInfo", &impl->get_clock));
  if (!Resolve(lib, path, "nvmlDeviceGetCurrentClocksEventReasons", &impl->get_clock_reasons)
           .ok()) {
    BW_RETURN_IF_ERROR(
        Resolve(lib, path, "nvmlDeviceGetCurrentClocksThrottleReasons", &impl->get_clock_reasons));
  }
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceGetTotalEccErrors", &impl->get_ecc));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlEventSetCreate", &impl->event_set_create));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlDeviceRegisterEvents", &impl->register_events));
  BW_RETURN_IF_ERROR(
      Resolve(lib, path, "nvmlDeviceGetSupportedEventTypes", &impl->get_supported_events));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlEventSetWait_v2", &impl->event_set_wait));
  BW_RETURN_IF_ERROR(Resolve(lib, path, "nvmlEventSetFree", &impl->event_set_free));

  nvmlReturn_t rc = impl->init();
  if (rc != NVML_SUCCESS) {
    return FailedPrecondition("nvmlInit_v2 failed: " + impl->Error(rc) + "; GPU metrics off");
  }
  impl->initialized = true;
  unsigned count = 0;
  rc = impl->get_count(&count);
  if (rc != NVML_SUCCESS) {
    return FailedPrecondition("nvmlDeviceGetCount_v2 failed: " + impl->Error(rc) +
                              "; GPU metrics off");
  }
  impl->RefreshDevices(std::min<unsigned>(count, kMaxDevices));
  impl->RegisterEvents();
  return std::unique_ptr<Nvml>(new Nvml(std::move(impl)));
}

Result<std::vector<GpuSample>> Nvml::Poll() {
  unsigned count = 0;
  const nvmlReturn_t rc = impl_->get_count(&count);
  if (rc != NVML_SUCCESS) {
    return Unavailable("nvmlDeviceGetCount_v2 failed: " + impl_->Error(rc));
  }
  count = std::min<unsigned>(count, kMaxDevices);
  impl_->RefreshDevices(count);
  std::vector<GpuSample> samples(count);
  for (unsigned i = 0; i < count; ++i) impl_->Sample(i, &samples[i]);
  return samples;
}

std::vector<GpuEvent> Nvml::DrainEvents() {
  std::vector<GpuEvent> events;
  if (impl_->event_set == nullptr) return events;
  for (int n = 0; n < kMaxEventsPerDrain; ++n) {
    nvmlEventData_t data{};
    // TIMEOUT: nothing pending. Any other error: give up until the next call.
    if (impl_->event_set_wait(impl_->event_set, &data, 0) != NVML_SUCCESS) break;
    GpuEvent e;
    if (data.eventType & nvmlEventTypeXidCriticalError) {
      e.kind = "xid";
    } else if (data.eventType & nvmlEventTypeDoubleBitEccError) {
      e.kind = "ecc_dbe";
    } else {
      continue;  // not registered for; still counts towards the bound
    }
    e.value = data.eventData;
    e.index = impl_->IndexOf(data.device);
    if (e.index >= 0) {
      e.uuid = impl_->devices[e.index].uuid;
    } else {
      char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      if (impl_->get_uuid(data.device, buf, sizeof buf - 1) == NVML_SUCCESS) e.uuid = buf;
    }
    events.push_back(std::move(e));
  }
  return events;
}

std::string DcgmExposition(const std::vector<GpuSample>& samples,
                           const std::map<int, unsigned long long>& last_xid,
                           const std::string& hostname,
                           const std::vector<std::pair<std::string, std::string>>& extra_labels) {
  using Xids = std::map<int, unsigned long long>;
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    const char* field;  // the GpuSample field without which a device has no line
    double (*value)(const GpuSample&, const Xids&);  // for a sample that has `field`
  };
  // dcgm-exporter's names, types and help texts (etc/default-counters.csv; the throttle
  // reasons field is DCGM's DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, NVML's bits).
  static const Family kFamilies[] = {
      {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz",
       [](const GpuSample& s, const Xids&) { return s.sm_clock_mhz; }},
      {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp_c",
       [](const GpuSample& s, const Xids&) { return s.temp_c; }},
      {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w",
       [](const GpuSample& s, const Xids&) { return s.power_w; }},
      {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util_pct",
       [](const GpuSample& s, const Xids&) { return s.util_pct; }},
      {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "uuid",
       [](const GpuSample& s, const Xids& xids) {
         auto it = xids.find(s.index);
         return static_cast<double>(it == xids.end() ? 0ULL : it->second);
       }},
      {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "mem_total_bytes",
       [](const GpuSample& s, const Xids&) {
         return std::floor((s.mem_total_bytes - s.mem_used_bytes) / kMiB);
       }},
      {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "mem_used_bytes",
       [](const GpuSample& s, const Xids&) { return std::floor(s.mem_used_bytes / kMiB); }},
      {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
       "Total number of single-bit volatile ECC errors.", "ecc_sbe_volatile",
       [](const GpuSample& s, const Xids&) { return static_cast<double>(s.ecc_sbe_volatile); }},
      {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
       "Total number of double-bit volatile ECC errors.", "ecc_dbe_volatile",
       [](const GpuSample& s, const Xids&) { return static_cast<double>(s.ecc_dbe_volatile); }},
      {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
       "Current clock throttle reasons (bitmask of nvmlClocksThrottleReasons).", "throttle_reasons",
       [](const GpuSample& s, const Xids&) { return static_cast<double>(s.throttle_reasons); }},
  };
  // A field is usable when not listed as unsupported and, for a double, not NaN.
  auto has = [](const GpuSample& s, const std::string& field) {
    if (!s.Has(field)) return false;
    if (field == "mem_total_bytes" || field == "mem_used_bytes") {
      return s.Has("mem_used_bytes") && s.Has("mem_total_bytes") && !std::isnan(s.mem_used_bytes) &&
             !std::isnan(s.mem_total_bytes);
    }
    if (field == "sm_clock_mhz") return !std::isnan(s.sm_clock_mhz);
    if (field == "temp_c") return !std::isnan(s.temp_c);
    if (field == "power_w") return !std::isnan(s.power_w);
    if (field == "util_pct") return !std::isnan(s.util_pct);
    return true;
  };

  // A family's HELP and TYPE come with its first sample: none without samples.
  metrics::Exposition out;
  for (const Family& f : kFamilies) {
    for (const GpuSample& s : samples) {
      if (!has(s, f.field)) continue;
      metrics::Labels l = {
          {"gpu", std::to_string(s.index)}, {"UUID", s.uuid}, {"modelName", s.name}};
      if (!hostname.empty()) l.emplace_back("Hostname", hostname);
      l.insert(l.end(), extra_labels.begin(), extra_labels.end());
      out.Family(f.name, f.type, f.help);
      out.Sample(f.name, l, f.value(s, last_xid));
    }
  }
  for (const GpuSample& s : samples) {
    if (!has(s, "throttle_reasons")) continue;
    out.Family("bulwark_gpu_throttled", "gauge",
               "Whether a thermal or power limit holds the GPU's clocks down (1) or not (0), "
               "from its clock throttle reasons.");
    for (const auto& [reason, on] : {std::pair<const char*, bool>{"thermal", s.thermal_throttle},
                                     {"power", s.power_throttle}}) {
      metrics::Labels l = {{"gpu", std::to_string(s.index)}, {"UUID", s.uuid}};
      l.insert(l.end(), extra_labels.begin(), extra_labels.end());
      l.emplace_back("reason", reason);
      out.Sample("bulwark_gpu_throttled", l, on ? 1 : 0);
    }
  }
  return out.Take();
}

}  // namespace bulwark::gpu
