// EventWriter: CRC-32C vectors, a byte-level round trip through a reader in this file
// (framing, both CRCs, the Event fields), bad input and write errors as Statuses, and
// TensorBoard's own EventAccumulator reading a written file (in the venv made by
// scripts/test-venv.sh; skipped without it). Waits on the child are bounded by deadlines.
#include "tensorboard/tfevents.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/net.h"
#include "common/proc.h"
#include "common/testing/test_venv.h"

namespace bulwark::tensorboard {
namespace {

namespace fs = std::filesystem;

constexpr double kInf = std::numeric_limits<double>::infinity();

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/bw_tfevents.XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- A minimal reader: TFRecord framing and protobuf wire format. ----

uint64_t LoadLE(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  }
  return v;
}

struct Records {
  std::vector<std::string> data;  // every complete record whose CRCs match
  std::string error;              // why reading stopped early ("" = clean end of file)
  bool truncated_tail = false;    // the file ends inside a record
};

Records ReadRecords(const std::string& path) {
  Records r;
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  size_t at = 0;
  while (at < s.size()) {
    if (s.size() - at < 12) {
      r.truncated_tail = true;
      break;
    }
    const uint64_t len = LoadLE(s, at, 8);
    if (LoadLE(s, at + 8, 4) != MaskedCrc32c(s.data() + at, 8)) {
      r.error = "length crc mismatch at offset " + std::to_string(at);
      break;
    }
    if (s.size() - at - 12 < len + 4) {
      r.truncated_tail = true;
      break;
    }
    const std::string data = s.substr(at + 12, len);
    if (LoadLE(s, at + 12 + len, 4) != MaskedCrc32c(data.data(), data.size())) {
      r.error = "data crc mismatch at offset " + std::to_string(at);
      break;
    }
    r.data.push_back(data);
    at += 12 + len + 4;
  }
  return r;
}

struct Field {
  uint32_t number = 0;
  uint32_t type = 0;
  uint64_t num = 0;   // varint, fixed32 or fixed64 payload
  std::string bytes;  // length-delimited payload
};

bool ReadVarint(const std::string& s, size_t* at, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *at < s.size(); shift += 7) {
    const unsigned char b = static_cast<unsigned char>(s[(*at)++]);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The fields of a serialized message, in order; empty plus a test failure if malformed.
std::vector<Field> ParseMessage(const std::string& s) {
  std::vector<Field> out;
  size_t at = 0;
  while (at < s.size()) {
    uint64_t key;
    Field f;
    bool ok = ReadVarint(s, &at, &key);
    f.number = static_cast<uint32_t>(key >> 3);
    f.type = static_cast<uint32_t>(key & 7);
    if (ok && f.type == 0) {
      ok = ReadVarint(s, &at, &f.num);
    } else if (ok && (f.type == 1 || f.type == 5)) {
      const int n = f.type == 1 ? 8 : 4;
      ok = s.size() - at >= static_cast<size_t>(n);
      if (ok) f.num = LoadLE(s, at, n);
      at += n;
    } else if (ok && f.type == 2) {
      uint64_t len = 0;
      ok = ReadVarint(s, &at, &len) && s.size() - at >= len;
      if (ok) f.bytes = s.substr(at, len);
      at += len;
    } else {
      ok = false;
    }
    if (!ok) {
      ADD_FAILURE() << "malformed protobuf message";
      return {};
    }
    out.push_back(std::move(f));
  }
  return out;
}

// The one field `number` of `fields`; a test failure (and an empty field) if it is not
// there exactly once with wire type `type`.
Field One(const std::vector<Field>& fields, uint32_t number, uint32_t type) {
  const Field* found = nullptr;
  for (const Field& f : fields) {
    if (f.number != number) continue;
    EXPECT_EQ(found, nullptr) << "field " << number << " repeated";
    EXPECT_EQ(f.type, type) << "field " << number;
    found = &f;
  }
  EXPECT_NE(found, nullptr) << "field " << number << " missing";
  return found ? *found : Field{};
}

bool Has(const std::vector<Field>& fields, uint32_t number) {
  for (const Field& f : fields) {
    if (f.number == number) return true;
  }
  return false;
}

double AsDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

float AsFloat(uint64_t bits) {
  const uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// One decoded Event of this writer: file_version, or a Summary with one Value.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::string tag;
  bool is_scalar = false;
  float value = 0;
  bool is_text = false;
  std::string text;
};

Event DecodeEvent(const std::string& data) {
  Event e;
  const std::vector<Field> ev = ParseMessage(data);
  e.wall_time = AsDouble(One(ev, 1, 1).num);
  if (Has(ev, 3)) {
    e.file_version = One(ev, 3, 2).bytes;
    EXPECT_FALSE(Has(ev, 5));
    return e;
  }
  e.step = static_cast<int64_t>(One(ev, 2, 0).num);
  const std::vector<Field> summary = ParseMessage(One(ev, 5, 2).bytes);
  const std::vector<Field> value = ParseMessage(One(summary, 1, 2).bytes);
  e.tag = One(value, 1, 2).bytes;
  if (Has(value, 2)) {
    e.is_scalar = true;
    e.value = AsFloat(One(value, 2, 5).num);
    EXPECT_FALSE(Has(value, 8));
    EXPECT_FALSE(Has(value, 9));
    return e;
  }
  e.is_text = true;
  const std::vector<Field> tensor = ParseMessage(One(value, 8, 2).bytes);
  EXPECT_EQ(One(tensor, 1, 0).num, 7u);    // dtype DT_STRING
  EXPECT_EQ(One(tensor, 2, 2).bytes, "");  // tensor_shape: rank 0
  e.text = One(tensor, 8, 2).bytes;        // string_val
  const std::vector<Field> md = ParseMessage(One(value, 9, 2).bytes);
  const std::vector<Field> plugin = ParseMessage(One(md, 1, 2).bytes);
  EXPECT_EQ(One(plugin, 1, 2).bytes, "text");  // plugin_name
  EXPECT_EQ(One(md, 4, 0).num, 2u);            // data_class DATA_CLASS_TENSOR
  return e;
}

std::vector<Event> ReadEvents(const std::string& path) {
  const Records r = ReadRecords(path);
  EXPECT_EQ(r.error, "") << path;
  EXPECT_FALSE(r.truncated_tail) << path;
  std::vector<Event> events;
  for (const std::string& d : r.data) events.push_back(DecodeEvent(d));
  return events;
}

// Independent of the writer's: whether `s` is well-formed UTF-8 (no overlongs,
// surrogates or code points past U+10FFFF).
bool WellFormedUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// ---- 1. CRC-32C ----

TEST(Crc32cTest, KnownVectorsAndMaskedForm) {
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  // RFC 3720 (iSCSI), appendix B.4.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, as tensorboard's own masked_crc32c gives.
  EXPECT_EQ(MaskedCrc32c("123456789", 9), 0xC78AB0E5u);
  EXPECT_EQ(MaskedCrc32c(zeros.data(), zeros.size()), 0x0FD7FFFAu);
}

// ---- 2. Round trip through the reader above ----

TEST(EventWriterTest, RoundTripScalarsAndText) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/run";  // created like mkdir -p
  const double t0 = 1700000000.75;
  auto w = EventWriter::Open(dir, t0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string path = (*w)->path();
  EXPECT_EQ(path, dir + "/events.out.tfevents.1700000000." + HostName() + "." +
                      std::to_string(getpid()) + ".bulwark");
  EXPECT_TRUE(fs::is_regular_file(path));

  EXPECT_TRUE((*w)->Scalar("loss", 1, 2.5, t0 + 1).ok());
  EXPECT_TRUE((*w)->Scalar("loss", 2, 0.1, t0 + 2).ok());
  EXPECT_TRUE((*w)->Scalar("train/lr", 2, 3e-4, t0 + 2).ok());
  EXPECT_TRUE((*w)->Scalar("nonfinite", 3, std::nan(""), t0 + 3).ok());
  EXPECT_TRUE((*w)->Scalar("nonfinite", 4, kInf, t0 + 4).ok());
  EXPECT_TRUE((*w)->Scalar("nonfinite", 5, -kInf, t0 + 5).ok());
  EXPECT_TRUE((*w)->Scalar("nonfinite", 6, 1e300, t0 + 6).ok());  // beyond float: +Inf
  EXPECT_TRUE((*w)->Scalar("big_step", int64_t{1} << 40, -1.0, t0 + 7).ok());
  EXPECT_TRUE((*w)->Scalar("negative_step", -3, 7.0, t0 + 8).ok());
  const std::string text = "## run\nnode-1 **lost**; ünïcode ✓";
  EXPECT_TRUE((*w)->Text("incidents", 9, text, t0 + 9).ok());
  EXPECT_TRUE((*w)->Text("empty_text", 10, "", t0 + 10).ok());
  ASSERT_TRUE((*w)->Flush().ok());

  const std::vector<Event> ev = ReadEvents(path);
  ASSERT_EQ(ev.size(), 12u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[0].wall_time, t0);
  struct Want {
    std::string tag;
    int64_t step;
    float value;
  };
  const std::vector<Want> scalars = {{"loss", 1, 2.5f},
                                     {"loss", 2, 0.1f},
                                     {"train/lr", 2, 3e-4f},
                                     {"nonfinite", 3, std::nanf("")},
                                     {"nonfinite", 4, std::numeric_limits<float>::infinity()},
                                     {"nonfinite", 5, -std::numeric_limits<float>::infinity()},
                                     {"nonfinite", 6, std::numeric_limits<float>::infinity()},
                                     {"big_step", int64_t{1} << 40, -1.0f},
                                     {"negative_step", -3, 7.0f}};
  for (size_t i = 0; i < scalars.size(); ++i) {
    const Event& e = ev[1 + i];
    SCOPED_TRACE("scalar " + std::to_string(i));
    EXPECT_TRUE(e.is_scalar);
    EXPECT_EQ(e.tag, scalars[i].tag);
    EXPECT_EQ(e.step, scalars[i].step);
    if (std::isnan(scalars[i].value)) {
      EXPECT_TRUE(std::isnan(e.value));
    } else {
      EXPECT_EQ(e.value, scalars[i].value);
    }
  }
  EXPECT_EQ(ev[1].wall_time, t0 + 1);
  EXPECT_TRUE(ev[10].is_text);
  EXPECT_EQ(ev[10].tag, "incidents");
  EXPECT_EQ(ev[10].step, 9);
  EXPECT_EQ(ev[10].text, text);
  EXPECT_EQ(ev[10].wall_time, t0 + 9);
  EXPECT_TRUE(ev[11].is_text);
  EXPECT_EQ(ev[11].text, "");
}

TEST(EventWriterTest, DestructorFlushesBufferedRecords) {
  TempDir tmp;
  std::string path;
  {
    auto w = EventWriter::Open(tmp.path(), 100);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    path = (*w)->path();
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE((*w)->Scalar("x", i, i * 0.5, 100 + i).ok());
  }
  const std::vector<Event> ev = ReadEvents(path);
  ASSERT_EQ(ev.size(), 1001u);
  EXPECT_EQ(ev[1000].step, 999);
  EXPECT_EQ(ev[1000].value, 499.5f);
}

TEST(EventWriterTest, SecondWriterInTheSameSecondGetsItsOwnFile) {
  TempDir tmp;
  auto a = EventWriter::Open(tmp.path(), 5.0);
  auto b = EventWriter::Open(tmp.path(), 5.9);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ((*b)->path(), tmp.path() + "/events.out.tfevents.5." + HostName() + "." +
                              std::to_string(getpid()) + ".1.bulwark");
  ASSERT_TRUE((*a)->Scalar("x", 1, 1, 6).ok());
  ASSERT_TRUE((*b)->Scalar("x", 1, 2, 6).ok());
  ASSERT_TRUE((*a)->Flush().ok());
  ASSERT_TRUE((*b)->Flush().ok());
  EXPECT_EQ(ReadEvents((*a)->path()).at(1).value, 1.0f);
  EXPECT_EQ(ReadEvents((*b)->path()).at(1).value, 2.0f);
}

TEST(EventWriterTest, TextIsCutAtACharacterBoundaryWithAMarker) {
  TempDir tmp;
  auto w = EventWriter::Open(tmp.path(), 1);
  ASSERT_TRUE(w.ok());
  std::string big;
  while (big.size() < 3 * kMaxTextBytes) big += "ab€";  // 5 bytes, a 3-byte character
  const std::string exact(kMaxTextBytes, 'x');
  ASSERT_TRUE((*w)->Text("big", 1, big, 2).ok());
  ASSERT_TRUE((*w)->Text("exact", 2, exact, 2).ok());
  // A stray 0xff, a 3-byte sequence cut after 2 bytes, an overlong '/' (0xc0 0xaf).
  const std::string invalid = std::string("a\xff") + "b\xe2\x82" + "c\xc0\xaf";
  ASSERT_TRUE((*w)->Text("invalid", 3, invalid, 2).ok());
  ASSERT_TRUE((*w)->Flush().ok());
  const std::vector<Event> ev = ReadEvents((*w)->path());
  ASSERT_EQ(ev.size(), 4u);

  const std::string& cut = ev[1].text;
  EXPECT_LE(cut.size(), kMaxTextBytes);
  EXPECT_GT(cut.size(), kMaxTextBytes - 100);
  EXPECT_TRUE(WellFormedUtf8(cut));
  const std::string marker = "\n\n[truncated by bulwark: the text has " +
                             std::to_string(big.size()) + " bytes; the limit is 65536]";
  ASSERT_GE(cut.size(), marker.size());
  EXPECT_EQ(cut.substr(cut.size() - marker.size()), marker);
  EXPECT_EQ(cut.substr(0, 10), big.substr(0, 10));

  EXPECT_EQ(ev[2].text, exact);  // at the limit: kept whole
  // Each invalid byte becomes U+FFFD.
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(ev[3].text, "a" + r + "b" + r + r + "c" + r + r);
}

// ---- 3. Bad input and write errors: Statuses that name the culprit, no crash ----

TEST(EventWriterTest, BadArgumentsAreInvalidArgumentAndWriteNothing) {
  TempDir tmp;
  auto w = EventWriter::Open(tmp.path(), 1);
  ASSERT_TRUE(w.ok());

  Status st = (*w)->Scalar("", 1, 1.0, 2);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tag is empty"), std::string::npos) << st.message();
  st = (*w)->Text("", 1, "x", 2);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);

  st = (*w)->Scalar(std::string(kMaxTagBytes + 1, 't'), 1, 1.0, 2);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("the limit is " + std::to_string(kMaxTagBytes)), std::string::npos)
      << st.message();
  EXPECT_TRUE((*w)->Scalar(std::string(kMaxTagBytes, 't'), 1, 1.0, 2).ok());

  st = (*w)->Scalar("loss\xff", 1, 1.0, 2);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("\"loss\\xff\" is not valid UTF-8"), std::string::npos)
      << st.message();

  EXPECT_EQ((*w)->Scalar("x", 1, 1.0, std::nan("")).code(), Code::kInvalidArgument);
  EXPECT_EQ((*w)->Text("x", 1, "t", -kInf).code(), Code::kInvalidArgument);
  EXPECT_EQ(EventWriter::Open(tmp.path(), std::nan("")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EventWriter::Open(tmp.path(), -1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(EventWriter::Open(tmp.path(), 1e300).status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*w)->Scalar("x", 1, 1.0, kMaxWallTime * 2).code(), Code::kInvalidArgument);
  EXPECT_EQ(EventWriter::Open("", 1).status().code(), Code::kInvalidArgument);

  // The writer still works, and only the valid records are in the file.
  ASSERT_TRUE((*w)->Scalar("ok", 7, 1.0, 2).ok());
  ASSERT_TRUE((*w)->Flush().ok());
  const std::vector<Event> ev = ReadEvents((*w)->path());
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2].tag, "ok");
}

TEST(EventWriterTest, OpenUnderARegularFileNamesThePath) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain-file";
  std::ofstream(file) << "not a directory";
  const std::string dir = file + "/logs";
  auto w = EventWriter::Open(dir, 1);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(dir), std::string::npos) << w.status().ToString();
  EXPECT_NE(w.status().message().find(std::strerror(ENOTDIR)), std::string::npos)
      << w.status().ToString();
}

TEST(EventWriterTest, RemovedFileIsAnErrorOnFlushAndStaysOne) {
  TempDir tmp;
  auto w = EventWriter::Open(tmp.path(), 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Flush().ok());
  ASSERT_TRUE(fs::remove((*w)->path()));
  ASSERT_TRUE((*w)->Scalar("x", 1, 1.0, 2).ok());  // buffered
  const Status st = (*w)->Flush();
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find((*w)->path()), std::string::npos) << st.ToString();
  EXPECT_EQ((*w)->Scalar("x", 2, 1.0, 3).ToString(), st.ToString());
  EXPECT_EQ((*w)->Flush().ToString(), st.ToString());
}

TEST(EventWriterTest, ReplacedFileIsAnErrorOnFlush) {
  TempDir tmp;
  auto w = EventWriter::Open(tmp.path(), 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(fs::remove((*w)->path()));
  std::ofstream((*w)->path()) << "someone else's file";
  const Status st = (*w)->Flush();
  EXPECT_EQ(st.code(), Code::kDataLoss);
  EXPECT_NE(st.message().find((*w)->path()), std::string::npos) << st.ToString();
}

// Lowers this process's file-size limit (RLIMIT_FSIZE) so writes past `bytes` fail with
// EFBIG, like a full disk; SIGXFSZ is ignored meanwhile. Restores both when destroyed.
class FileSizeCap {
 public:
  explicit FileSizeCap(rlim_t bytes) {
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    if (getrlimit(RLIMIT_FSIZE, &saved_) != 0) return;
    rlimit cap = saved_;
    cap.rlim_cur = bytes;
    active_ = setrlimit(RLIMIT_FSIZE, &cap) == 0;
  }
  ~FileSizeCap() {
    if (active_) setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }
  bool active() const { return active_; }

 private:
  rlimit saved_{};
  bool active_ = false;
  sighandler_t old_handler_;
};

TEST(EventWriterTest, WriteErrorNamesThePathIsStickyAndLeavesValidRecords) {
  TempDir tmp;
  std::string path;
  Status first;
  {
    auto w = EventWriter::Open(tmp.path(), 1);
    ASSERT_TRUE(w.ok());
    path = (*w)->path();
    FileSizeCap cap(4096);
    ASSERT_TRUE(cap.active());
    for (int i = 0; i < 10000 && first.ok(); ++i) first = (*w)->Scalar("x", i, i, 2);
    if (first.ok()) first = (*w)->Flush();
    ASSERT_FALSE(first.ok()) << "no write error past the file size limit";
    EXPECT_NE(first.message().find(path), std::string::npos) << first.ToString();
    EXPECT_NE(first.message().find(std::strerror(EFBIG)), std::string::npos) << first.ToString();
    EXPECT_EQ((*w)->Scalar("x", 1, 1, 2).ToString(), first.ToString());
    EXPECT_EQ((*w)->Text("t", 1, "t", 2).ToString(), first.ToString());
    EXPECT_EQ((*w)->Flush().ToString(), first.ToString());
  }  // the limit is gone by now: the destructor must not append after the failure
  const Records r = ReadRecords(path);
  EXPECT_EQ(r.error, "");  // complete records all verify; at most the tail is cut
  EXPECT_GT(r.data.size(), 10u);
  EXPECT_LE(fs::file_size(path), 4096u);
}

// ---- 4. TensorBoard's own reader ----

using ::bulwark::testing::TestVenv;

constexpr char kReadWithTensorBoard[] = R"(
import json, os, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

run = sys.argv[1]
acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
out = {"file_version": acc.file_version, "scalars": {}, "texts": {}, "events": 0}
for name in os.listdir(run):
    # CRC or framing errors end a file's events early (silently): count them all.
    out["events"] += len(list(event_file_loader.EventFileLoader(os.path.join(run, name)).Load()))
for tag in acc.Tags()["scalars"]:
    out["scalars"][tag] = [[e.step, repr(e.value), repr(e.wall_time)] for e in acc.Scalars(tag)]
for tag in acc.Tags()["tensors"]:
    md = acc.SummaryMetadata(tag)
    out["texts"][tag] = {
        "plugin": md.plugin_data.plugin_name,
        "data_class": int(md.data_class),
        "events": [[e.step, int(e.tensor_proto.dtype),
                    tensor_util.make_ndarray(e.tensor_proto).item().decode("utf-8")]
                   for e in acc.Tensors(tag)],
    }
print("RESULT " + json.dumps(out))
)";

struct ChildRun {
  std::string output;
  std::optional<ExitInfo> exit;  // nullopt: killed at the deadline
};

// Runs argv with its output captured, for at most timeout_s.
ChildRun RunBounded(const std::vector<std::string>& argv, double timeout_s) {
  ChildRun run;
  SpawnOptions so;
  so.argv = argv;
  so.env = {{"PATH", "/usr/bin:/bin"}, {"PYTHONDONTWRITEBYTECODE", "1"}, {"LC_ALL", "C.UTF-8"}};
  if (const char* home = std::getenv("HOME")) so.env["HOME"] = home;
  auto child = Spawn(so);
  if (!child.ok()) {
    run.output = child.status().ToString();
    run.exit = ExitInfo{127, 0};
    return run;
  }
  const double deadline = SystemClock::Get()->NowMono() + timeout_s;
  bool eof = false;
  while (!eof && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({child->output.get()}, 0.2);
    run.output += ReadAvailable(child->output.get(), &eof);
  }
  if (eof) {
    run.exit = WaitExit(child->pid, std::max(1.0, deadline - SystemClock::Get()->NowMono()));
  }
  if (!run.exit) TerminateGroup(child->pid, child->pgid, 1);
  return run;
}

// Where `repr` is Python's repr of a float ("0.5", "nan", "-inf").
double ParseRepr(const std::string& repr) { return std::strtod(repr.c_str(), nullptr); }

TEST(TensorBoardReaderTest, EventAccumulatorReadsScalarsAndText) {
  const std::string venv = TestVenv();
  const std::string python = venv + "/bin/python";
  if (access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "no test venv at " << venv
                 << " (BULWARK_TEST_VENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/bulwark/"
                    "test-venv): run scripts/test-venv.sh to create it";
  }
  TempDir tmp;
  const std::string run = tmp.path() + "/run";
  const double t0 = 1700000000.5;
  struct Point {
    std::string tag;
    int64_t step;
    double value;
  };
  const std::vector<Point> points = {{"loss", 0, 2.75},         {"loss", 1, 2.1234567891},
                                     {"loss", 2, std::nan("")}, {"loss", 3, 1.5},
                                     {"train/lr", 0, 3e-4},     {"train/lr", 100, kInf},
                                     {"ettr", 1 << 20, 0.93},   {"ettr", (1 << 20) + 1, -kInf}};
  const std::string note = "## incident 1\nnode-2 **lost** at step 3 — ünïcode ✓\n";
  const std::string big(kMaxTextBytes + 10, 'z');
  {
    auto w = EventWriter::Open(run, t0);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (size_t i = 0; i < points.size(); ++i) {
      const Point& p = points[i];
      ASSERT_TRUE((*w)->Scalar(p.tag, p.step, p.value, t0 + i).ok());
    }
    ASSERT_TRUE((*w)->Text("incidents", 3, note, t0 + 10).ok());
    ASSERT_TRUE((*w)->Text("incidents", 7, "second", t0 + 11).ok());
    ASSERT_TRUE((*w)->Text("big", 8, big, t0 + 12).ok());
    ASSERT_TRUE((*w)->Flush().ok());
  }

  const ChildRun r = RunBounded({python, "-c", kReadWithTensorBoard, run}, 120);
  ASSERT_TRUE(r.exit.has_value()) << "python timed out after 120 s:\n" << r.output;
  ASSERT_TRUE(r.exit->ok()) << r.exit->Describe() << ":\n" << r.output;
  const size_t at = r.output.find("RESULT ");
  ASSERT_NE(at, std::string::npos) << r.output;
  Json out = Json::parse(r.output.substr(at + 7), nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.output;

  EXPECT_EQ(out["file_version"], 2.0);
  EXPECT_EQ(out["events"], 1 + points.size() + 3);  // every record's CRCs held
  for (const std::string tag : {"loss", "train/lr", "ettr"}) {
    ASSERT_TRUE(out["scalars"].contains(tag)) << out.dump();
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    SCOPED_TRACE(p.tag + " step " + std::to_string(p.step));
    const Json& got = out["scalars"][p.tag].at(seen[p.tag]++);
    EXPECT_EQ(got[0].get<int64_t>(), p.step);
    const float v = static_cast<float>(ParseRepr(got[1].get<std::string>()));
    if (std::isnan(p.value)) {
      EXPECT_TRUE(std::isnan(v)) << got.dump();
    } else {
      EXPECT_EQ(v, static_cast<float>(p.value)) << got.dump();
    }
    EXPECT_EQ(ParseRepr(got[2].get<std::string>()), t0 + i);
  }
  EXPECT_EQ(out["scalars"]["loss"].size(), 4u);

  Json& texts = out["texts"];
  ASSERT_TRUE(texts.contains("incidents")) << out.dump();
  ASSERT_TRUE(texts.contains("big")) << out.dump();
  EXPECT_EQ(texts["incidents"]["plugin"], "text");
  EXPECT_EQ(texts["incidents"]["data_class"], 2);  // DATA_CLASS_TENSOR
  ASSERT_EQ(texts["incidents"]["events"].size(), 2u);
  EXPECT_EQ(texts["incidents"]["events"][0], (Json{3, 7, note}));  // step, DT_STRING, text
  EXPECT_EQ(texts["incidents"]["events"][1], (Json{7, 7, "second"}));
  const std::string big_read = texts["big"]["events"][0][2].get<std::string>();
  EXPECT_LE(big_read.size(), kMaxTextBytes);
  EXPECT_NE(big_read.find("[truncated by bulwark: "), std::string::npos);
}

}  // namespace
}  // namespace bulwark::tensorboard
