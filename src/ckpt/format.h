// Internal: the byte-level shard format (version 2) shared by the writer, reader,
// committer and staging ring. Not part of the public API (see checkpoint.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "common/status.h"

namespace bulwark::ckpt::internal {

inline constexpr char kHeaderMagic[8] = {'B', 'W', 'S', 'H', 'A', 'R', 'D', '2'};
inline constexpr char kFooterMagic[8] = {'B', 'W', 'S', 'H', 'E', 'N', 'D', '2'};
inline constexpr uint64_t kHeaderSize = 64;
inline constexpr uint64_t kFooterSize = 32;
inline constexpr char kCommitName[] = "COMMIT";
inline constexpr char kManifestName[] = "MANIFEST";

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

uint64_t Hash(const void* data, size_t n);
// Copies n bytes from src to dst and returns Hash(dst, n): one pass, each block hashed
// while it is still in the cache the copy put it in.
uint64_t CopyAndHash(void* dst, const void* src, size_t n);
// "[2,3]": shapes and offsets in error messages.
std::string Dims(const std::vector<int64_t>& v);
std::string Hex64(uint64_t v);
bool ParseHex64(const std::string& s, uint64_t* out);
void Put64(uint8_t* p, uint64_t v);
uint64_t Get64(const uint8_t* p);

void EncodeHeader(const Header& h, uint8_t out[kHeaderSize]);
// Checks magic, checksum and version; `what` names the file in errors.
Status DecodeHeader(const uint8_t in[kHeaderSize], const std::string& what, Header* h);
void EncodeFooter(const Footer& f, uint8_t out[kFooterSize]);
Status DecodeFooter(const uint8_t in[kFooterSize], const std::string& what, Footer* f);

// JSON index of a shard (or of a staging slot, where chunks may be absent).
std::string EncodeIndex(const ShardIndex& index);
// Parses and validates: tensor metas are well formed, every tensor has
// ceil(nbytes / chunk_size) chunks, local chunks lie inside [0, data_len) without
// overlap and cover exactly data_len bytes. `what` names the file in errors.
Status DecodeIndex(const std::string& json, uint64_t data_len, const std::string& what,
                   ShardIndex* index);
// JSON of one tensor's metadata (no chunks), and its inverse.
void MetaToJson(const TensorMeta& m, void* json_out);  // json_out: nlohmann::json*
Status MetaFromJson(const void* json_in, const std::string& what, TensorMeta* m);

// MANIFEST and COMMIT records (commit.cc), shared by the file and object tiers so
// both verify COMMIT -> MANIFEST identically. Each record is one JSON line followed
// by "xxh3 <16 hex digits of that line>\n". `what` names the file or key in errors;
// every decoding failure is DATA_LOSS.
struct CommitPin {
  uint64_t manifest_size = 0;
  uint64_t manifest_xxh3 = 0;
};
std::string EncodeManifest(const Manifest& m);
// COMMIT bytes pinning `manifest` (the exact MANIFEST bytes) for `step`.
std::string EncodeCommit(long step, const std::string& manifest);
// Checks COMMIT's checksum line, format and step; returns its pin.
Result<CommitPin> DecodeCommit(const std::string& content, long step, const std::string& what);
// Checks MANIFEST bytes against `pin` (size and xxh3), then its checksum line,
// format, step, and that it lists exactly `world` shards named ShardFileName(r,
// world) in rank order. Does not look at the shards themselves.
Result<Manifest> DecodeManifest(const std::string& content, long step, const CommitPin& pin,
                                const std::string& what);

// Number of chunks of an `nbytes` tensor.
inline uint64_t ChunkCount(uint64_t nbytes, uint64_t chunk_size) {
  return (nbytes + chunk_size - 1) / chunk_size;
}

// Opens a shard and verifies header, index, footer and file size against the
// expected (step, rank, world) (-1 = any). Fills `h` and `idx` (either may be
// null). Chunk data is not read.
Status CheckShardFile(Env* env, const std::string& path, long step, int rank, int world, Header* h,
                      ShardIndex* idx);

// Reads every local chunk of an opened shard and checks its xxh3.
Status VerifyLocalChunks(Env* env, const std::string& path, const ShardIndex& idx, const Header& h);

// Rank owning chunk `chunk` of replicated tensor `name` (dedup: written once,
// spread over ranks).
int ReplicaOwner(const std::string& name, uint64_t chunk, int world);

}  // namespace bulwark::ckpt::internal
