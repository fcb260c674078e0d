#include "tensorboard/tfevents.h"

#include <fcntl.h>
#include <stdio_ext.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

namespace bulwark::tensorboard {
namespace {

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

// Protobuf wire format: just what Event needs.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(std::string* out, uint32_t field, WireType type) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void PutFixedLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutBytesField(std::string* out, uint32_t field, const std::string& bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

void PutDoubleField(std::string* out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutKey(out, field, kFixed64);
  PutFixedLE(out, bits, 8);
}

void PutFloatField(std::string* out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutKey(out, field, kFixed32);
  PutFixedLE(out, bits, 4);
}

void PutVarintField(std::string* out, uint32_t field, uint64_t v) {
  PutKey(out, field, kVarint);
  PutVarint(out, v);
}

// Field numbers, from tensorboard/compat/proto/{event,summary,tensor,types}.proto.
constexpr uint32_t kEventWallTime = 1;         // double
constexpr uint32_t kEventStep = 2;             // int64
constexpr uint32_t kEventFileVersion = 3;      // string
constexpr uint32_t kEventSummary = 5;          // Summary
constexpr uint32_t kSummaryValue = 1;          // repeated Summary.Value
constexpr uint32_t kValueTag = 1;              // string
constexpr uint32_t kValueSimpleValue = 2;      // float
constexpr uint32_t kValueTensor = 8;           // TensorProto
constexpr uint32_t kValueMetadata = 9;         // SummaryMetadata
constexpr uint32_t kMetadataPluginData = 1;    // SummaryMetadata.PluginData
constexpr uint32_t kMetadataDataClass = 4;     // enum DataClass
constexpr uint32_t kPluginDataPluginName = 1;  // string
constexpr uint32_t kTensorDtype = 1;           // enum DataType
constexpr uint32_t kTensorShape = 2;           // TensorShapeProto
constexpr uint32_t kTensorStringVal = 8;       // repeated bytes
constexpr uint64_t kDtString = 7;              // DataType.DT_STRING
constexpr uint64_t kDataClassTensor = 2;       // DataClass.DATA_CLASS_TENSOR

// An Event with wall_time, step and a Summary of the one serialized Value `value`.
std::string SummaryEvent(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  PutBytesField(&summary, kSummaryValue, value);
  std::string event;
  PutDoubleField(&event, kEventWallTime, wall_time);
  PutVarintField(&event, kEventStep, static_cast<uint64_t>(step));
  PutBytesField(&event, kEventSummary, summary);
  return event;
}

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if none starts there
// (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, cut short).
size_t Utf8SequenceLength(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

bool IsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Appends `in` to *out as valid UTF-8 (each invalid byte -> U+FFFD) while *out stays
// within `cap` bytes. Returns whether all of `in` went in.
bool AppendSanitizedUtf8(const std::string& in, size_t cap, std::string* out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  for (size_t i = 0; i < in.size();) {
    const size_t n = Utf8SequenceLength(in, i);
    const size_t add = n == 0 ? 3 : n;
    if (out->size() + add > cap) return false;
    if (n == 0) {
      out->append(kReplacement, 3);
      i += 1;
    } else {
      out->append(in, i, n);
      i += n;
    }
  }
  return true;
}

// `text` as valid UTF-8 of at most kMaxTextBytes, ending in a marker if cut.
std::string BoundedText(const std::string& text) {
  std::string out;
  out.reserve(std::min(text.size(), kMaxTextBytes));
  if (AppendSanitizedUtf8(text, kMaxTextBytes, &out)) return out;
  const std::string marker = "\n\n[truncated by bulwark: the text has " +
                             std::to_string(text.size()) + " bytes; the limit is " +
                             std::to_string(kMaxTextBytes) + "]";
  out.clear();
  AppendSanitizedUtf8(text, kMaxTextBytes - marker.size(), &out);
  out += marker;
  return out;
}

// The tag for an error message: printable ASCII, other bytes as \xNN, at most 64 bytes.
std::string QuoteTag(const std::string& tag) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string q = "\"";
  for (size_t i = 0; i < tag.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(tag[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      q.push_back(static_cast<char>(c));
    } else {
      q += "\\x";
      q.push_back(kHex[c >> 4]);
      q.push_back(kHex[c & 0xf]);
    }
  }
  q += tag.size() > 64 ? "\"..." : "\"";
  return q;
}

Status CheckTag(const std::string& tag) {
  if (tag.empty()) return InvalidArgument("tensorboard: tag is empty; give every series a name");
  if (tag.size() > kMaxTagBytes) {
    return InvalidArgument("tensorboard: tag " + QuoteTag(tag) + " is " +
                           std::to_string(tag.size()) + " bytes; the limit is " +
                           std::to_string(kMaxTagBytes));
  }
  if (!IsValidUtf8(tag)) {
    return InvalidArgument("tensorboard: tag " + QuoteTag(tag) + " is not valid UTF-8");
  }
  return Status::Ok();
}

Status CheckWallTime(double wall_time) {
  if (!(wall_time >= 0 && wall_time <= kMaxWallTime)) {  // NaN fails too
    return InvalidArgument("tensorboard: wall_time " + std::to_string(wall_time) +
                           " is not a Unix time in [0, 1e11] seconds");
  }
  return Status::Ok();
}

// `v` as float32, rounded; finite values beyond float range become +-Inf (not UB).
float ToFloat(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (std::isfinite(v) && std::fabs(v) > kMax) {
    return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(v);
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h = buf;
  for (char& c : h) {
    if (c == '/') c = '_';
  }
  return h;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

Result<std::unique_ptr<EventWriter>> EventWriter::Open(const std::string& dir, double wall_time) {
  BW_RETURN_IF_ERROR(CheckWallTime(wall_time));
  if (dir.empty()) return InvalidArgument("tensorboard: event directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus("tensorboard: create directory " + dir, ec.value());
  const std::string stem = dir + "/events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(std::floor(wall_time))) + "." +
                           HostName() + "." + std::to_string(getpid());
  for (int n = 0; n < 100; ++n) {
    const std::string path = stem + (n == 0 ? "" : "." + std::to_string(n)) + ".bulwark";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return ErrnoStatus("tensorboard: create " + path, errno);
    std::FILE* f = fdopen(fd, "wb");
    if (f == nullptr) {
      const int err = errno;
      close(fd);
      return ErrnoStatus("tensorboard: fdopen " + path, err);
    }
    std::unique_ptr<EventWriter> w(new EventWriter(path, f));
    std::string event;
    PutDoubleField(&event, kEventWallTime, wall_time);
    PutBytesField(&event, kEventFileVersion, "brain.Event:2");
    BW_RETURN_IF_ERROR(w->WriteRecord(event));
    return w;
  }
  return ErrnoStatus("tensorboard: create " + stem + ".99.bulwark", EEXIST);
}

EventWriter::EventWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

EventWriter::~EventWriter() {
  // After an error, what is still buffered may belong after a lost or partial record:
  // dropping it keeps the file a run of whole records (plus at most one cut tail).
  if (!error_.ok()) __fpurge(file_);
  std::fclose(file_);
}

Status EventWriter::Fail(Status st) {
  error_ = st;
  return st;
}

Status EventWriter::WriteRecord(const std::string& data) {
  if (!error_.ok()) return error_;
  std::string header;
  PutFixedLE(&header, data.size(), 8);
  std::string record = header;
  PutFixedLE(&record, MaskedCrc32c(header.data(), header.size()), 4);
  record += data;
  PutFixedLE(&record, MaskedCrc32c(data.data(), data.size()), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return Fail(ErrnoStatus("tensorboard: write " + path_, errno));
  }
  return Status::Ok();
}

Status EventWriter::Scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  BW_RETURN_IF_ERROR(CheckTag(tag));
  BW_RETURN_IF_ERROR(CheckWallTime(wall_time));
  std::string v;
  PutBytesField(&v, kValueTag, tag);
  PutFloatField(&v, kValueSimpleValue, ToFloat(value));
  return WriteRecord(SummaryEvent(wall_time, step, v));
}

Status EventWriter::Text(const std::string& tag, int64_t step, const std::string& text,
                         double wall_time) {
  BW_RETURN_IF_ERROR(CheckTag(tag));
  BW_RETURN_IF_ERROR(CheckWallTime(wall_time));
  std::string tensor;
  PutVarintField(&tensor, kTensorDtype, kDtString);
  PutBytesField(&tensor, kTensorShape, "");  // rank 0
  PutBytesField(&tensor, kTensorStringVal, BoundedText(text));
  std::string plugin_data;
  PutBytesField(&plugin_data, kPluginDataPluginName, "text");
  std::string metadata;
  PutBytesField(&metadata, kMetadataPluginData, plugin_data);
  PutVarintField(&metadata, kMetadataDataClass, kDataClassTensor);
  std::string v;
  PutBytesField(&v, kValueTag, tag);
  PutBytesField(&v, kValueTensor, tensor);
  PutBytesField(&v, kValueMetadata, metadata);
  return WriteRecord(SummaryEvent(wall_time, step, v));
}

Status EventWriter::Flush() {
  if (!error_.ok()) return error_;
  if (std::fflush(file_) != 0) return Fail(ErrnoStatus("tensorboard: write " + path_, errno));
  struct stat open_st, path_st;
  if (fstat(fileno(file_), &open_st) != 0) {
    return Fail(ErrnoStatus("tensorboard: fstat " + path_, errno));
  }
  if (stat(path_.c_str(), &path_st) != 0) {
    if (errno != ENOENT) return Fail(ErrnoStatus("tensorboard: stat " + path_, errno));
    return Fail(
        NotFound("tensorboard: event file " + path_ + " was removed; later records would be lost"));
  }
  if (open_st.st_dev != path_st.st_dev || open_st.st_ino != path_st.st_ino) {
    return Fail(DataLoss("tensorboard: event file " + path_ +
                         " was replaced by another file; later records would be lost"));
  }
  return Status::Ok();
}

}  // namespace bulwark::tensorboard
