// Internal: the byte-level shard format and file helpers shared by the writer,
// reader and committer. Not part of the public API (see checkpoint.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::ckpt::internal {

inline constexpr char kHeaderMagic[8] = {'B', 'W', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr char kFooterMagic[8] = {'B', 'W', 'S', 'H', 'E', 'N', 'D', '1'};
inline constexpr uint64_t kHeaderSize = 64;
inline constexpr uint64_t kFooterSize = 32;
inline constexpr char kCommitName[] = "COMMIT";

// Fixed 64-byte little-endian header at offset 0.
struct Header {
  uint32_t version = 0;
  long step = 0;
  int rank = 0;
  int world = 0;
  uint64_t index_len = 0;
  uint64_t index_xxh3 = 0;
  uint64_t file_size = 0;
};

// Fixed 32-byte footer at file_size - 32.
struct Footer {
  uint64_t file_size = 0;
  uint64_t index_xxh3 = 0;
};

struct BlobEntry {
  std::string name;
  uint64_t offset = 0;  // relative to the start of the data region
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  std::vector<uint64_t> chunks;  // xxh3_64 per chunk
};

struct Index {
  std::vector<BlobEntry> blobs;
};

uint64_t Hash(const void* data, size_t n);
std::string Hex64(uint64_t v);
bool ParseHex64(const std::string& s, uint64_t* out);

void EncodeHeader(const Header& h, uint8_t out[kHeaderSize]);
// Checks magic, checksum and version; `what` names the file in errors.
Status DecodeHeader(const uint8_t in[kHeaderSize], const std::string& what, Header* h);
void EncodeFooter(const Footer& f, uint8_t out[kFooterSize]);
Status DecodeFooter(const uint8_t in[kFooterSize], const std::string& what, Footer* f);

std::string EncodeIndex(long step, int rank, int world, const Index& index);
// Parses the JSON index and checks that blobs are contiguous from offset 0, cover
// exactly `data_len` bytes and carry the right number of chunk checksums.
Status DecodeIndex(const std::string& json, uint64_t data_len, const std::string& what,
                   Index* index);

// File helpers; all return errno-derived Status naming the path.
Status WriteAll(int fd, const void* data, size_t n, const std::string& path);
Status PReadAll(int fd, void* buf, size_t n, uint64_t off, const std::string& path);
Status FsyncDir(const std::string& dir);
Status MkdirAll(const std::string& dir);
// Writes `content` to `dir/name` durably via "<name>.tmp.<pid>" -> fsync -> rename
// -> fsync dir.
Status WriteFileAtomic(const std::string& dir, const std::string& name, const std::string& content);
Result<std::string> ReadFile(const std::string& path);

// Opens a shard and verifies header, index, footer and file size against the
// expected (step, rank, world); with `full_data` also every chunk checksum. Fills
// `h` and `idx` (either may be null). Defined in shard_reader.cc.
Status CheckShardFile(const std::string& path, long step, int rank, int world, bool full_data,
                      Header* h, Index* idx);

}  // namespace bulwark::ckpt::internal
