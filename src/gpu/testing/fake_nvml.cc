// A scripted stand-in for libnvidia-ml, for tests only: a shared library exporting the
// NVML functions of gpu/nvml_abi.h with the same C signatures, whose devices and
// failures come from a JSON state file, so bulwark::gpu::Nvml is tested at its real
// seam (dlopen/dlsym) on a machine without a GPU.
//
// The state file is named by $BULWARK_FAKE_NVML_STATE and re-read by every call that
// needs it, so a test changes it between polls. A missing or malformed file makes every
// call answer NVML_ERROR_UNKNOWN. Its fields (all optional):
//   "init_error": N          nvmlInit_v2 returns N (nvmlReturn_t) instead of success
//   "count_error": N         nvmlDeviceGetCount_v2 returns N
//   "devices": [{            device i = element i (at most 64)
//     "name", "uuid",        strings (default "Fake GPU", "GPU-fake-<i>")
//     "util": %, "mem_used", "mem_total": bytes, "temp": C, "power_mw": mW,
//     "sm_clock": MHz, "throttle": mask, "ecc_sbe", "ecc_dbe": volatile counts,
//       numbers stored into NVML's unsigned fields as C would (-5 wraps around)
//     "event_types": mask    nvmlDeviceGetSupportedEventTypes (default XID|SBE|DBE)
//     "not_supported": [..]  fields answering NVML_ERROR_NOT_SUPPORTED
//     "errors": {field: N}   fields answering code N; fields: "handle", "name", "uuid",
//                            "util", "memory", "temp", "power", "sm_clock", "throttle",
//                            "ecc", "events" (supported types and registration)
//   }],
//   "pending_events": [{"device": i, "type": "xid"|"dbe"|"sbe", "data": N}]
//     delivered oldest first by nvmlEventSetWait_v2 to a set registered for that device
//     and type; a delivered event is removed from the file (it is rewritten).
// If $BULWARK_FAKE_NVML_LOG names a file, the calls that change state are appended to it
// one per line: "nvmlInit_v2", "nvmlShutdown", "nvmlEventSetCreate",
// "nvmlDeviceRegisterEvents <i> <mask hex>", "nvmlEventSetFree".
//
// Like NVML, every call but nvmlInit_v2 and nvmlErrorString answers
// NVML_ERROR_UNINITIALIZED outside an nvmlInit_v2/nvmlShutdown pair. Only what Bulwark
// asks for is modelled: the GPU temperature sensor, the SM clock, volatile ECC counts
// (other arguments answer NVML_ERROR_INVALID_ARGUMENT). nvmlEventSetWait_v2 never waits.
//
// Variants, built from this file with a define, lack one symbol:
//   BW_FAKE_NVML_WITHOUT_COUNT_V2: nvmlDeviceGetCount_v2 (Open must refuse the library);
//   BW_FAKE_NVML_WITHOUT_CLOCKS_EVENT_REASONS: the R535 name of the throttle reasons
//   query (Open must fall back to nvmlDeviceGetCurrentClocksThrottleReasons).
// Thread-safe (one lock), though Nvml calls it from one thread.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "gpu/nvml_abi.h"

struct nvmlDevice_st {
  unsigned index;
};

struct nvmlEventSet_st {
  unsigned long long registered[64];  // event types, by device index
};

namespace {

using json = nlohmann::json;

constexpr unsigned kMaxDevices = 64;

std::mutex g_mu;
int g_init_count = 0;  // nvmlInit_v2 minus nvmlShutdown
nvmlDevice_st g_devices[kMaxDevices];

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool LoadState(json* state) {
  std::ifstream in(Env("BULWARK_FAKE_NVML_STATE"));
  if (!in) return false;
  *state = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return !state->is_discarded() && state->is_object();
}

void SaveState(const json& state) {
  const std::string path = Env("BULWARK_FAKE_NVML_STATE");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << state.dump(2);
  }
  std::rename(tmp.c_str(), path.c_str());
}

void Log(const std::string& line) {
  const std::string path = Env("BULWARK_FAKE_NVML_LOG");
  if (path.empty()) return;
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

// A number of the state converted as C converts to T (so -5 wraps for unsigned T).
template <typename T>
T Num(const json& obj, const char* key, T dflt) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return dflt;
  if (it->is_number_unsigned()) return static_cast<T>(it->get<unsigned long long>());
  if (it->is_number_integer()) return static_cast<T>(it->get<long long>());
  return static_cast<T>(it->get<double>());
}

// The scripted answer of `field` of device `dev`: NOT_SUPPORTED, an error, or success.
nvmlReturn_t FieldStatus(const json& dev, const char* field) {
  auto ns = dev.find("not_supported");
  if (ns != dev.end() && ns->is_array()) {
    for (const json& f : *ns) {
      if (f.is_string() && f.get<std::string>() == field) return NVML_ERROR_NOT_SUPPORTED;
    }
  }
  auto errs = dev.find("errors");
  if (errs != dev.end() && errs->is_object()) {
    auto e = errs->find(field);
    if (e != errs->end() && e->is_number_integer()) {
      return static_cast<nvmlReturn_t>(e->get<int>());
    }
  }
  return NVML_SUCCESS;
}

unsigned DeviceCount(const json& state) {
  auto it = state.find("devices");
  if (it == state.end() || !it->is_array()) return 0;
  return it->size() < kMaxDevices ? static_cast<unsigned>(it->size()) : kMaxDevices;
}

// Everything a device query starts with: initialised, state readable, handle valid, and
// the field's scripted answer. On success `*dev` is the device's object.
nvmlReturn_t Begin(nvmlDevice_t device, const char* field, json* state, json* dev) {
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!LoadState(state)) return NVML_ERROR_UNKNOWN;
  const auto addr = reinterpret_cast<std::uintptr_t>(device);
  const auto first = reinterpret_cast<std::uintptr_t>(&g_devices[0]);
  if (addr < first || addr >= first + sizeof g_devices || device->index >= DeviceCount(*state)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *dev = (*state)["devices"][device->index];
  if (!dev->is_object()) *dev = json::object();
  return FieldStatus(*dev, field);
}

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t ClockReasons(nvmlDevice_t device, unsigned long long* reasons) {
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "throttle", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = Num<unsigned long long>(dev, "throttle", 0);
  return NVML_SUCCESS;
}

unsigned long long EventType(const std::string& type) {
  if (type == "xid") return nvmlEventTypeXidCriticalError;
  if (type == "dbe") return nvmlEventTypeDoubleBitEccError;
  if (type == "sbe") return nvmlEventTypeSingleBitEccError;
  return 0;
}

}  // namespace

// Exceptions (nlohmann::json's) must not cross the C ABI.
#define FAKE_NVML_GUARD_BEGIN try {
#define FAKE_NVML_GUARD_END    \
  }                            \
  catch (...) {                \
    return NVML_ERROR_UNKNOWN; \
  }

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state;
  if (!LoadState(&state)) return NVML_ERROR_UNKNOWN;
  const int err = Num<int>(state, "init_error", 0);
  if (err != NVML_SUCCESS) return static_cast<nvmlReturn_t>(err);
  for (unsigned i = 0; i < kMaxDevices; ++i) g_devices[i].index = i;
  ++g_init_count;
  Log("nvmlInit_v2");
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlShutdown(void) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  Log("nvmlShutdown");
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_UNKNOWN:
      return "Unknown Error";
  }
  return "fake NVML: unlisted error";
}

#ifndef BW_FAKE_NVML_WITHOUT_COUNT_V2
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  json state;
  if (!LoadState(&state)) return NVML_ERROR_UNKNOWN;
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int err = Num<int>(state, "count_error", 0);
  if (err != NVML_SUCCESS) return static_cast<nvmlReturn_t>(err);
  *deviceCount = DeviceCount(state);
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}
#endif

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  json state;
  if (!LoadState(&state)) return NVML_ERROR_UNKNOWN;
  if (device == nullptr || index >= DeviceCount(state)) return NVML_ERROR_INVALID_ARGUMENT;
  const json& dev = state["devices"][index];
  const nvmlReturn_t rc = dev.is_object() ? FieldStatus(dev, "handle") : NVML_SUCCESS;
  if (rc != NVML_SUCCESS) return rc;
  *device = &g_devices[index];
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "name", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  return CopyString(dev.value("name", std::string("Fake GPU")), name, length);
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "uuid", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  const std::string dflt = "GPU-fake-" + std::to_string(device->index);
  return CopyString(dev.value("uuid", dflt), uuid, length);
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "util", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  utilization->gpu = Num<unsigned int>(dev, "util", 0);
  utilization->memory = 0;
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "memory", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = Num<unsigned long long>(dev, "mem_total", 0);
  memory->used = Num<unsigned long long>(dev, "mem_used", 0);
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int* temp) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "temp", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (temp == nullptr || sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *temp = Num<unsigned int>(dev, "temp", 0);
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "power", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *power = Num<unsigned int>(dev, "power_mw", 0);
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int* clock) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "sm_clock", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (clock == nullptr || type != NVML_CLOCK_SM) return NVML_ERROR_INVALID_ARGUMENT;
  *clock = Num<unsigned int>(dev, "sm_clock", 0);
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

#ifndef BW_FAKE_NVML_WITHOUT_CLOCKS_EVENT_REASONS
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long* clocksEventReasons) {
  FAKE_NVML_GUARD_BEGIN
  return ClockReasons(device, clocksEventReasons);
  FAKE_NVML_GUARD_END
}
#endif

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long* clocksThrottleReasons) {
  FAKE_NVML_GUARD_BEGIN
  return ClockReasons(device, clocksThrottleReasons);
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long* eccCounts) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "ecc", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (eccCounts == nullptr || counterType != NVML_VOLATILE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
  if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED) {
    *eccCounts = Num<unsigned long long>(dev, "ecc_sbe", 0);
  } else if (errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) {
    *eccCounts = Num<unsigned long long>(dev, "ecc_dbe", 0);
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new nvmlEventSet_st{};
  Log("nvmlEventSetCreate");
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "events", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *eventTypes =
      Num<unsigned long long>(dev, "event_types",
                              nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError |
                                  nvmlEventTypeDoubleBitEccError);
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

// As NVML: a mask with any unsupported type registers nothing and answers NOT_SUPPORTED.
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  json state, dev;
  nvmlReturn_t rc = Begin(device, "events", &state, &dev);
  if (rc != NVML_SUCCESS) return rc;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned long long supported =
      Num<unsigned long long>(dev, "event_types",
                              nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError |
                                  nvmlEventTypeDoubleBitEccError);
  if ((eventTypes & ~supported) != 0) return NVML_ERROR_NOT_SUPPORTED;
  set->registered[device->index] |= eventTypes;
  char mask[32];
  std::snprintf(mask, sizeof mask, "0x%llx", eventTypes);
  Log("nvmlDeviceRegisterEvents " + std::to_string(device->index) + " " + mask);
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                 unsigned int /*timeoutms*/) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  json state;
  if (!LoadState(&state)) return NVML_ERROR_UNKNOWN;
  auto pending = state.find("pending_events");
  if (pending == state.end() || !pending->is_array()) return NVML_ERROR_TIMEOUT;
  for (auto it = pending->begin(); it != pending->end(); ++it) {
    const unsigned index = Num<unsigned>(*it, "device", kMaxDevices);
    const unsigned long long type = EventType(it->value("type", std::string()));
    if (index >= kMaxDevices || (set->registered[index] & type) == 0) continue;
    data->device = &g_devices[index];
    data->eventType = type;
    data->eventData =
        type == nvmlEventTypeXidCriticalError ? Num<unsigned long long>(*it, "data", 0) : 0;
    data->gpuInstanceId = 0xFFFFFFFFu;
    data->computeInstanceId = 0xFFFFFFFFu;
    pending->erase(it);
    SaveState(state);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;
  FAKE_NVML_GUARD_END
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  FAKE_NVML_GUARD_BEGIN
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  Log("nvmlEventSetFree");
  return NVML_SUCCESS;
  FAKE_NVML_GUARD_END
}

}  // extern "C"
