#include "gpu/nvml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

// The fake libnvidia-ml builds (testing/fake_nvml.cc), by path; see CMakeLists.txt.
#ifndef BW_FAKE_NVML
#error "BW_FAKE_NVML (path of the fake NVML library) must be defined by the build"
#endif

namespace bulwark::gpu {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr unsigned long long kMiB = 1024ULL * 1024;
constexpr unsigned long long kH100Total = 81559 * kMiB;  // as an H100 80GB reports it
constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";
constexpr const char* kUuid0 = "GPU-6a3c1f0e-1b2c-4d5e-8f90-0123456789ab";
constexpr const char* kUuid1 = "GPU-7b4d2a1f-2c3d-4e6f-9a01-123456789abc";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int CountPrefix(const std::vector<std::string>& lines, const std::string& prefix) {
  int n = 0;
  for (const auto& l : lines) n += l.rfind(prefix, 0) == 0;
  return n;
}

json Device0() {
  return {
      {"name", kH100},           {"uuid", kUuid0}, {"util", 87},         {"mem_used", 43008 * kMiB},
      {"mem_total", kH100Total}, {"temp", 64},     {"power_mw", 512345}, {"sm_clock", 1980},
      {"throttle", 0},           {"ecc_sbe", 3},   {"ecc_dbe", 0}};
}

json Device1() {
  return {
      {"name", kH100},           {"uuid", kUuid1}, {"util", 0},         {"mem_used", 512 * kMiB},
      {"mem_total", kH100Total}, {"temp", 31},     {"power_mw", 71000}, {"sm_clock", 345},
      {"throttle", 1},           {"ecc_sbe", 0},   {"ecc_dbe", 0}};
}

// Each test gets its own fake state file and call log, named to the fake through the
// environment.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/gpu_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    state_ = dir_ + "/state.json";
    log_ = dir_ + "/calls.log";
    ::setenv("BULWARK_FAKE_NVML_STATE", state_.c_str(), 1);
    ::setenv("BULWARK_FAKE_NVML_LOG", log_.c_str(), 1);
    Write({{"devices", {Device0(), Device1()}}});
  }
  void TearDown() override {
    ::unsetenv("BULWARK_FAKE_NVML_STATE");
    ::unsetenv("BULWARK_FAKE_NVML_LOG");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Write(const json& state) { std::ofstream(state_, std::ios::trunc) << state.dump(); }
  json Read() {
    std::ifstream in(state_);
    return json::parse(in);
  }
  // The state-changing calls the fake saw, in order.
  std::vector<std::string> Calls() {
    std::ifstream in(log_);
    std::vector<std::string> calls;
    for (std::string line; std::getline(in, line);) calls.push_back(line);
    return calls;
  }
  std::unique_ptr<Nvml> Open(const char* lib = BW_FAKE_NVML) {
    auto r = Nvml::Open(lib);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  std::string dir_, state_, log_;
};

TEST_F(GpuTest, MissingLibraryIsUnavailableWithOneLineReason) {
  auto r = Nvml::Open("/nonexistent-bulwark/libnvidia-ml.so.1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(),
            "no NVIDIA driver: /nonexistent-bulwark/libnvidia-ml.so.1 not found; GPU metrics off");

  r = Nvml::Open("libbulwark-no-such-nvml.so.1");  // searched for, as the default is
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "no NVIDIA driver: libbulwark-no-such-nvml.so.1 not found; GPU metrics off");

  // The default library: absent on a machine without the NVIDIA driver (as here).
  r = Nvml::Open();
  if (r.ok()) GTEST_SKIP() << "an NVIDIA driver is installed";
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(), "no NVIDIA driver: libnvidia-ml.so.1 not found; GPU metrics off");
}

TEST_F(GpuTest, AFileThatIsNoLibraryIsUnavailableWithTheLoadersReason) {
  const std::string path = dir_ + "/libnvidia-ml.so.1";
  std::ofstream(path) << "not an ELF file\n";
  auto r = Nvml::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("no NVIDIA driver: " + path + " cannot be loaded ("));
  EXPECT_THAT(r.status().message(), HasSubstr("); GPU metrics off"));
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
}

TEST_F(GpuTest, MissingSymbolIsFailedPreconditionNamingIt) {
  auto r = Nvml::Open(BW_FAKE_NVML_NO_COUNT_V2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            std::string(BW_FAKE_NVML_NO_COUNT_V2) +
                " has no symbol nvmlDeviceGetCount_v2 (an NVIDIA driver too old for Bulwark?); "
                "GPU metrics off");
  EXPECT_THAT(Calls(), IsEmpty());  // refused before nvmlInit_v2
}

TEST_F(GpuTest, InitFailureIsFailedPreconditionWithNvmlsErrorString) {
  Write({{"init_error", 9}, {"devices", {Device0()}}});
  auto r = Nvml::Open(BW_FAKE_NVML);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9); GPU metrics off");
  EXPECT_THAT(Calls(), IsEmpty());  // not initialised, so not shut down either
}

TEST_F(GpuTest, DeviceCountFailureAtOpenShutsNvmlDownAgain) {
  Write({{"count_error", 999}, {"devices", {Device0()}}});
  auto r = Nvml::Open(BW_FAKE_NVML);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            "nvmlDeviceGetCount_v2 failed: Unknown Error (NVML error 999); GPU metrics off");
  EXPECT_THAT(Calls(), ElementsAre("nvmlInit_v2", "nvmlShutdown"));
}

TEST_F(GpuTest, TwoDevicesArePolledWithValuesInTheirUnits) {
  auto nvml = Open();
  ASSERT_NE(nvml, nullptr);
  auto r = nvml->Poll();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);

  const GpuSample& a = (*r)[0];
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(a.uuid, kUuid0);
  EXPECT_EQ(a.name, kH100);
  EXPECT_DOUBLE_EQ(a.util_pct, 87);
  EXPECT_DOUBLE_EQ(a.mem_used_bytes, 43008.0 * kMiB);
  EXPECT_DOUBLE_EQ(a.mem_total_bytes, 81559.0 * kMiB);
  EXPECT_DOUBLE_EQ(a.temp_c, 64);
  EXPECT_DOUBLE_EQ(a.power_w, 512.345);  // NVML reports milliwatts
  EXPECT_DOUBLE_EQ(a.sm_clock_mhz, 1980);
  EXPECT_EQ(a.throttle_reasons, 0u);
  EXPECT_FALSE(a.thermal_throttle);
  EXPECT_FALSE(a.power_throttle);
  EXPECT_EQ(a.ecc_sbe_volatile, 3u);
  EXPECT_EQ(a.ecc_dbe_volatile, 0u);
  EXPECT_THAT(a.unsupported, IsEmpty());
  EXPECT_THAT(a.problems, IsEmpty());

  const GpuSample& b = (*r)[1];
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(b.uuid, kUuid1);
  EXPECT_DOUBLE_EQ(b.util_pct, 0);
  EXPECT_DOUBLE_EQ(b.mem_used_bytes, 512.0 * kMiB);
  EXPECT_DOUBLE_EQ(b.temp_c, 31);
  EXPECT_DOUBLE_EQ(b.power_w, 71);
  EXPECT_DOUBLE_EQ(b.sm_clock_mhz, 345);
  EXPECT_EQ(b.throttle_reasons, 1u);  // GPU idle: no throttle
  EXPECT_FALSE(b.thermal_throttle);
  EXPECT_FALSE(b.power_throttle);
  EXPECT_THAT(b.unsupported, IsEmpty());

  // The library is re-read on every poll: the next poll sees the change.
  json d0 = Device0();
  d0["temp"] = 83;
  d0["ecc_dbe"] = 2;
  Write({{"devices", {d0, Device1()}}});
  r = nvml->Poll();
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ((*r)[0].temp_c, 83);
  EXPECT_EQ((*r)[0].ecc_dbe_volatile, 2u);

  nvml.reset();
  EXPECT_THAT(Calls(),
              ElementsAre("nvmlInit_v2", "nvmlEventSetCreate", "nvmlDeviceRegisterEvents 0 0xa",
                          "nvmlDeviceRegisterEvents 1 0xa", "nvmlEventSetFree", "nvmlShutdown"));
}

TEST_F(GpuTest, PollFailsOnlyWhenTheDeviceCountCannotBeRead) {
  auto nvml = Open();
  ASSERT_NE(nvml, nullptr);
  Write({{"count_error", 15}, {"devices", {Device0()}}});
  auto r = nvml->Poll();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(), "nvmlDeviceGetCount_v2 failed: GPU is lost (NVML error 15)");
}

TEST_F(GpuTest, ThrottleReasonsAreDecodedFromTheMask) {
  struct Case {
    unsigned long long mask;
    bool thermal, power;
  };
  const std::vector<Case> cases = {
      {0x0, false, false},  // none
      {0x1, false, false},  // GPU idle
      {0x8, false, false},  // HW slowdown alone: neither named cause
      {0x20, true, false},  // SW thermal slowdown
      {0x40, true, false},  // HW thermal slowdown
      {0x4, false, true},   // SW power cap
      {0x80, false, true},  // HW power brake
      {0x44, true, true},   // SW power cap + HW thermal
  };
  json devices = json::array();
  for (const Case& c : cases) {
    json d = Device0();
    d["throttle"] = c.mask;
    devices.push_back(d);
  }
  Write({{"devices", devices}});
  // The R535 query, and the older library that only has ...ThrottleReasons.
  for (const char* lib : {BW_FAKE_NVML, BW_FAKE_NVML_LEGACY}) {
    SCOPED_TRACE(lib);
    auto nvml = Open(lib);
    ASSERT_NE(nvml, nullptr);
    auto r = nvml->Poll();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].mask);
      EXPECT_EQ((*r)[i].throttle_reasons, cases[i].mask);
      EXPECT_EQ((*r)[i].thermal_throttle, cases[i].thermal);
      EXPECT_EQ((*r)[i].power_throttle, cases[i].power);
    }
    const auto lines = Lines(DcgmExposition(*r, {}, ""));
    const std::string labels7 = "{gpu=\"7\",UUID=\"" + std::string(kUuid0) + "\",reason=";
    EXPECT_THAT(lines, ::testing::Contains("bulwark_gpu_throttled" + labels7 + "\"thermal\"} 1"));
    EXPECT_THAT(lines, ::testing::Contains("bulwark_gpu_throttled" + labels7 + "\"power\"} 1"));
    const std::string labels2 = "{gpu=\"2\",UUID=\"" + std::string(kUuid0) + "\",reason=";
    EXPECT_THAT(lines, ::testing::Contains("bulwark_gpu_throttled" + labels2 + "\"thermal\"} 0"));
  }
}

TEST_F(GpuTest, UnsupportedFieldsAreListedAndLeftOutOfTheExposition) {
  json d0 = Device0();
  d0["not_supported"] = {"temp", "power", "ecc"};
  json d1 = Device1();
  d1["errors"] = {{"power", 15}};
  json d2 = Device1();
  d2["uuid"] = "GPU-lost";
  d2["errors"] = {{"handle", 15}};
  Write({{"devices", {d0, d1, d2}}});
  auto nvml = Open();
  ASSERT_NE(nvml, nullptr);
  auto r = nvml->Poll();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);

  const GpuSample& a = (*r)[0];
  EXPECT_TRUE(std::isnan(a.temp_c));
  EXPECT_TRUE(std::isnan(a.power_w));
  EXPECT_EQ(a.ecc_sbe_volatile, 0u);
  EXPECT_EQ(a.ecc_dbe_volatile, 0u);
  EXPECT_DOUBLE_EQ(a.util_pct, 87);  // the rest is there
  EXPECT_THAT(a.unsupported,
              ElementsAre("temp_c", "power_w", "ecc_sbe_volatile", "ecc_dbe_volatile"));
  EXPECT_THAT(a.problems, IsEmpty());  // NOT_SUPPORTED is no problem
  EXPECT_FALSE(a.Has("temp_c"));
  EXPECT_TRUE(a.Has("util_pct"));

  const GpuSample& b = (*r)[1];  // another error: absent, and said why
  EXPECT_TRUE(std::isnan(b.power_w));
  EXPECT_THAT(b.unsupported, ElementsAre("power_w"));
  EXPECT_THAT(b.problems, ElementsAre("power_w: GPU is lost (NVML error 15)"));

  const GpuSample& c = (*r)[2];  // no handle: nothing but the index
  EXPECT_EQ(c.index, 2);
  EXPECT_EQ(c.uuid, "");
  EXPECT_EQ(c.unsupported.size(), 11u);
  EXPECT_THAT(c.problems, ElementsAre("device: GPU is lost (NVML error 15)"));

  const auto lines = Lines(DcgmExposition(*r, {}, "node-3"));
  EXPECT_EQ(CountPrefix(lines, "DCGM_FI_DEV_POWER_USAGE"), 0);
  EXPECT_EQ(CountPrefix(lines, "# HELP DCGM_FI_DEV_POWER_USAGE"), 0);  // no family at all
  EXPECT_EQ(CountPrefix(lines, "DCGM_FI_DEV_GPU_TEMP{"), 1);
  EXPECT_EQ(CountPrefix(lines, "DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), 1);
  EXPECT_EQ(CountPrefix(lines, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{"), 1);
  EXPECT_EQ(CountPrefix(lines, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"1\""), 1);
  EXPECT_EQ(CountPrefix(lines, "DCGM_FI_DEV_GPU_UTIL{"), 2);
  for (const auto& l : lines) {
    EXPECT_EQ(l.find("gpu=\"2\""), std::string::npos) << l;  // the lost device: no line
    EXPECT_EQ(l.find("nan"), std::string::npos) << l;
  }
}

TEST_F(GpuTest, XidAndDoubleBitEccEventsAreDrainedOnce) {
  json d1 = Device1();
  d1["event_types"] = 0x8;  // ECC off: XID events only
  Write({{"devices", {Device0(), d1}}});
  auto nvml = Open();
  ASSERT_NE(nvml, nullptr);
  EXPECT_THAT(Calls(),
              ElementsAre("nvmlInit_v2", "nvmlEventSetCreate", "nvmlDeviceRegisterEvents 0 0xa",
                          "nvmlDeviceRegisterEvents 1 0x8"));
  EXPECT_THAT(nvml->DrainEvents(), IsEmpty());

  json state = Read();
  state["pending_events"] = {
      {{"device", 1}, {"type", "xid"}, {"data", 79}},
      {{"device", 0}, {"type", "dbe"}},
      {{"device", 1}, {"type", "dbe"}},  // not registered on device 1
      {{"device", 0}, {"type", "xid"}, {"data", 13}},
      {{"device", 0}, {"type", "sbe"}},  // not asked for
  };
  Write(state);
  const auto events = nvml->DrainEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].index, 1);
  EXPECT_EQ(events[0].uuid, kUuid1);
  EXPECT_EQ(events[0].kind, "xid");
  EXPECT_EQ(events[0].value, 79u);
  EXPECT_EQ(events[1].index, 0);
  EXPECT_EQ(events[1].uuid, kUuid0);
  EXPECT_EQ(events[1].kind, "ecc_dbe");
  EXPECT_EQ(events[1].value, 0u);
  EXPECT_EQ(events[2].index, 0);
  EXPECT_EQ(events[2].kind, "xid");
  EXPECT_EQ(events[2].value, 13u);
  EXPECT_THAT(nvml->DrainEvents(), IsEmpty());  // delivered once
  EXPECT_EQ(Read()["pending_events"].size(), 2u);

  // The caller keeps the last XID per device for the exposition.
  std::map<int, unsigned long long> last_xid;
  for (const auto& e : events) {
    if (e.kind == "xid") last_xid[e.index] = e.value;
  }
  auto r = nvml->Poll();
  ASSERT_TRUE(r.ok());
  const auto lines = Lines(DcgmExposition(*r, last_xid, "node-3"));
  const std::string tail = "\",modelName=\"" + std::string(kH100) + "\",Hostname=\"node-3\"}";
  EXPECT_THAT(lines, ::testing::Contains("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"" +
                                         std::string(kUuid0) + tail + " 13"));
  EXPECT_THAT(lines, ::testing::Contains("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\",UUID=\"" +
                                         std::string(kUuid1) + tail + " 79"));
}

TEST_F(GpuTest, DrainEventsIsBoundedPerCall) {
  auto nvml = Open();
  ASSERT_NE(nvml, nullptr);
  json state = Read();
  state["pending_events"] = json::array();
  for (int i = 0; i < 100; ++i) {
    state["pending_events"].push_back({{"device", 0}, {"type", "xid"}, {"data", 100 + i}});
  }
  Write(state);
  auto first = nvml->DrainEvents();
  ASSERT_EQ(first.size(), static_cast<size_t>(Nvml::kMaxEventsPerDrain));
  EXPECT_EQ(first.front().value, 100u);
  auto second = nvml->DrainEvents();
  ASSERT_EQ(second.size(), 36u);
  EXPECT_EQ(second.back().value, 199u);
  EXPECT_THAT(nvml->DrainEvents(), IsEmpty());
}

TEST_F(GpuTest, AbsurdValuesAreDroppedAndListed) {
  json d0 = Device0();
  d0["util"] = 250;
  d0["temp"] = 10000;
  d0["power_mw"] = 4294967295ULL;  // UINT_MAX mW
  d0["sm_clock"] = 99999;
  d0["mem_used"] = 2 * kH100Total;
  json d1 = Device1();
  d1["temp"] = -5;  // wraps around in NVML's unsigned int
  d1["mem_used"] = 0;
  d1["mem_total"] = 0;
  Write({{"devices", {d0, d1}}});
  auto nvml = Open();
  ASSERT_NE(nvml, nullptr);
  auto r = nvml->Poll();
  ASSERT_TRUE(r.ok());

  const GpuSample& a = (*r)[0];
  EXPECT_TRUE(std::isnan(a.util_pct));
  EXPECT_TRUE(std::isnan(a.temp_c));
  EXPECT_TRUE(std::isnan(a.power_w));
  EXPECT_TRUE(std::isnan(a.sm_clock_mhz));
  EXPECT_TRUE(std::isnan(a.mem_used_bytes));
  EXPECT_TRUE(std::isnan(a.mem_total_bytes));
  EXPECT_THAT(a.unsupported, UnorderedElementsAre("util_pct", "mem_used_bytes", "mem_total_bytes",
                                                  "temp_c", "power_w", "sm_clock_mhz"));
  EXPECT_THAT(a.problems, ::testing::Contains("temp_c: absurd value 10000 C dropped"));
  EXPECT_THAT(a.problems, ::testing::Contains("util_pct: absurd value 250 % dropped"));
  EXPECT_THAT(a.problems, ::testing::Contains("power_w: absurd value 4294967295 mW dropped"));
  EXPECT_THAT(a.problems, ::testing::Contains("sm_clock_mhz: absurd value 99999 MHz dropped"));

  const GpuSample& b = (*r)[1];
  EXPECT_TRUE(std::isnan(b.temp_c));
  EXPECT_THAT(b.problems, ::testing::Contains("temp_c: absurd value 4294967291 C dropped"));
  EXPECT_THAT(b.unsupported, UnorderedElementsAre("temp_c", "mem_used_bytes", "mem_total_bytes"));
  EXPECT_DOUBLE_EQ(b.power_w, 71);  // the sane fields stay

  const std::string text = DcgmExposition(*r, {}, "");
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_GPU_TEMP")));
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_FB_")));
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_SM_CLOCK{gpu=\"0\"")));
  EXPECT_THAT(text, Not(HasSubstr("nan")));
  EXPECT_THAT(text, Not(HasSubstr("inf")));
}

TEST(DcgmExposition, LineByLineWithDcgmExporterNamesUnitsAndEscapedLabels) {
  GpuSample a;
  a.index = 0;
  a.uuid = "GPU-aaaa";
  a.name = kH100;
  a.util_pct = 87;
  a.mem_used_bytes = 43008.0 * kMiB;
  a.mem_total_bytes = 81559.0 * kMiB;
  a.temp_c = 64;
  a.power_w = 512.345;
  a.sm_clock_mhz = 1980;
  a.throttle_reasons = 0x44;
  a.thermal_throttle = true;
  a.power_throttle = true;
  a.ecc_sbe_volatile = 3;
  a.ecc_dbe_volatile = 1;

  GpuSample b;  // label values that need escaping; ECC unsupported
  b.index = 1;
  b.uuid = "GPU-b\"b\\";
  b.name = "Weird \"GPU\" \\n\nline2";  // a quote, a backslash and a newline
  b.util_pct = 0;
  b.mem_used_bytes = 1.5 * kMiB;  // MiB are rounded down
  b.mem_total_bytes = 81559.0 * kMiB;
  b.temp_c = 31;
  b.power_w = 71;
  b.sm_clock_mhz = 345;
  b.throttle_reasons = 1;
  b.unsupported = {"ecc_sbe_volatile", "ecc_dbe_volatile"};

  const std::string la =
      R"({gpu="0",UUID="GPU-aaaa",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-7"})";
  const std::string lb =
      R"({gpu="1",UUID="GPU-b\"b\\",modelName="Weird \"GPU\" \\n\nline2",Hostname="gpu-node-7"})";
  const std::vector<std::string> want = {
      "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
      "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
      "DCGM_FI_DEV_SM_CLOCK" + la + " 1980",
      "DCGM_FI_DEV_SM_CLOCK" + lb + " 345",
      "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
      "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
      "DCGM_FI_DEV_GPU_TEMP" + la + " 64",
      "DCGM_FI_DEV_GPU_TEMP" + lb + " 31",
      "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).",
      "# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
      "DCGM_FI_DEV_POWER_USAGE" + la + " 512.345",
      "DCGM_FI_DEV_POWER_USAGE" + lb + " 71",
      "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
      "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
      "DCGM_FI_DEV_GPU_UTIL" + la + " 87",
      "DCGM_FI_DEV_GPU_UTIL" + lb + " 0",
      "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
      "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
      "DCGM_FI_DEV_XID_ERRORS" + la + " 0",
      "DCGM_FI_DEV_XID_ERRORS" + lb + " 79",
      "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).",
      "# TYPE DCGM_FI_DEV_FB_FREE gauge",
      "DCGM_FI_DEV_FB_FREE" + la + " 38551",
      "DCGM_FI_DEV_FB_FREE" + lb + " 81557",
      "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
      "# TYPE DCGM_FI_DEV_FB_USED gauge",
      "DCGM_FI_DEV_FB_USED" + la + " 43008",
      "DCGM_FI_DEV_FB_USED" + lb + " 1",
      "# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL Total number of single-bit volatile ECC errors.",
      "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter",
      "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" + la + " 3",
      "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.",
      "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter",
      "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" + la + " 1",
      "# HELP DCGM_FI_DEV_CLOCK_THROTTLE_REASONS Current clock throttle reasons (bitmask of "
      "nvmlClocksThrottleReasons).",
      "# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge",
      "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" + la + " 68",
      "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" + lb + " 1",
      "# HELP bulwark_gpu_throttled Whether a thermal or power limit holds the GPU's clocks "
      "down (1) or not (0), from its clock throttle reasons.",
      "# TYPE bulwark_gpu_throttled gauge",
      R"(bulwark_gpu_throttled{gpu="0",UUID="GPU-aaaa",reason="thermal"} 1)",
      R"(bulwark_gpu_throttled{gpu="0",UUID="GPU-aaaa",reason="power"} 1)",
      R"(bulwark_gpu_throttled{gpu="1",UUID="GPU-b\"b\\",reason="thermal"} 0)",
      R"(bulwark_gpu_throttled{gpu="1",UUID="GPU-b\"b\\",reason="power"} 0)",
  };
  const std::string text = DcgmExposition({a, b}, {{1, 79}}, "gpu-node-7");
  EXPECT_EQ(Lines(text), want);
  EXPECT_EQ(text.back(), '\n');
}

TEST(DcgmExposition, NoHostnameNoHostnameLabelAndNoSamplesNoText) {
  GpuSample a;
  a.index = 3;
  a.uuid = "GPU-c";
  a.name = "N";
  a.temp_c = 40;
  a.unsupported = {"util_pct",     "mem_used_bytes",   "mem_total_bytes",  "power_w",
                   "sm_clock_mhz", "throttle_reasons", "ecc_sbe_volatile", "ecc_dbe_volatile"};
  EXPECT_EQ(Lines(DcgmExposition({a}, {}, "")),
            (std::vector<std::string>{
                "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
                "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
                R"(DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-c",modelName="N"} 40)",
                "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
                "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
                R"(DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-c",modelName="N"} 0)",
            }));
  EXPECT_EQ(DcgmExposition({}, {}, "h"), "");
  // Bulwark's agent adds its job and node to every line.
  a.unsupported.erase(a.unsupported.begin() + 5);  // throttle_reasons
  a.throttle_reasons = 0;
  const auto lines = Lines(DcgmExposition({a}, {}, "", {{"job", "g\"pt"}, {"node", "node-1"}}));
  EXPECT_EQ(lines[2], R"(DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-c",modelName="N",job="g\"pt",)"
                      R"(node="node-1"} 40)");
  EXPECT_EQ(lines.back(), R"(bulwark_gpu_throttled{gpu="3",UUID="GPU-c",job="g\"pt",)"
                          R"(node="node-1",reason="power"} 0)");
}

}  // namespace
}  // namespace bulwark::gpu
