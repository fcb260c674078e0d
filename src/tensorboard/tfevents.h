// TensorBoard event files, written natively (no protobuf or TensorFlow library), so
// `tensorboard --logdir DIR` shows a Bulwark run's scalars and text.
//
// File format (TensorFlow's TFRecord framing): each record is
//   uint64 length (little endian) | uint32 MaskedCrc32c(length bytes) | data |
//   uint32 MaskedCrc32c(data)
// and each record's data is one serialized `tensorboard.Event` message
// (tensorboard/compat/proto/event.proto): the first record carries
// file_version "brain.Event:2", every later one a Summary with one Value. Scalars are
// `simple_value`; text is a rank-0 DT_STRING tensor with the "text" plugin's metadata
// and data_class DATA_CLASS_TENSOR (what TensorBoard's dataclass_compat gives text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/status.h"

namespace bulwark::tensorboard {

// A tag longer than this is rejected (INVALID_ARGUMENT): tags name time series, so
// truncating one could silently merge two series.
inline constexpr size_t kMaxTagBytes = 256;
// Text longer than this is cut, at a UTF-8 character boundary, to at most this many
// bytes in all, ending in a marker
// "[truncated by bulwark: the text has N bytes; the limit is 65536]".
inline constexpr size_t kMaxTextBytes = 64 * 1024;
// The largest wall_time (Unix seconds, year 5138) accepted; beyond it, or negative or
// NaN -> INVALID_ARGUMENT (a clock never gives those; a garbage one would).
inline constexpr double kMaxWallTime = 1e11;

// Appends events to one new event file. Not thread-safe: one owner calls it (callers
// sharing a writer serialize their calls).
//
// Records are appended with buffered I/O: they reach the file when the buffer fills,
// on Flush(), or on destruction. After any write or flush error the writer is broken
// for good: that call and every later one return the error (naming the path), nothing
// more is appended and the destructor drops what is still buffered, so the file stays
// whole records (perhaps ending in one cut record, which readers treat as not yet
// written). Records accepted since the last successful Flush() may be lost then. Open
// a new writer (a new file) to go on.
class EventWriter {
 public:
  // Creates `dir` (like mkdir -p) and in it, exclusively, the file
  // events.out.tfevents.<floor(wall_time)>.<hostname>.<pid>.bulwark (should that name
  // exist already -- a second writer of this process in the same second and directory
  // -- ".<pid>.<n>.bulwark" with the first free n in 1..99), then writes the
  // file_version record. `wall_time` is Unix seconds (see kMaxWallTime). Errors name
  // the path and the errno text.
  static Result<std::unique_ptr<EventWriter>> Open(const std::string& dir, double wall_time);

  // Appends a scalar at `step`. The value is stored as float32 (`simple_value`):
  // about 7 significant digits; a finite double beyond float range becomes +-Inf.
  // NaN and +-Inf are written as they are (TensorBoard plots them as such).
  // INVALID_ARGUMENT (naming the tag) for an empty tag, one longer than kMaxTagBytes or
  // one that is not valid UTF-8, and for a wall_time outside [0, kMaxWallTime].
  Status Scalar(const std::string& tag, int64_t step, double value, double wall_time);

  // Appends `text` (shown by TensorBoard's text plugin, as Markdown) at `step`.
  // Invalid UTF-8 bytes become U+FFFD; text over kMaxTextBytes is cut as described at
  // kMaxTextBytes. Tag and wall_time rules as for Scalar.
  Status Text(const std::string& tag, int64_t step, const std::string& text, double wall_time);

  // Hands every buffered record to the OS (fflush; no fsync), then checks that the file
  // is still the one at path() -- a removed or replaced file makes later records
  // unreachable, so that is an error (NOT_FOUND/DATA_LOSS naming the path).
  Status Flush();

  // The event file's path: <dir>/events.out.tfevents....
  const std::string& path() const { return path_; }

  // Flushes and closes; errors then are dropped (call Flush() first to see them).
  ~EventWriter();

  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

 private:
  EventWriter(std::string path, std::FILE* file);

  // Frames `data` as one record and appends it (buffered).
  Status WriteRecord(const std::string& data);
  // Records `st` as the writer's sticky error and returns it.
  Status Fail(Status st);

  std::string path_;
  std::FILE* file_;  // owned; closed by the destructor
  Status error_;     // the first write/flush error; once set every call returns it
};

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes at `data`.
uint32_t Crc32c(const void* data, size_t n);
// TensorFlow's masked form of Crc32c: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskedCrc32c(const void* data, size_t n);

}  // namespace bulwark::tensorboard
