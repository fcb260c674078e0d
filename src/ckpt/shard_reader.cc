// Shard reader and verifier. Every check failure is a DATA_LOSS Status naming the
// file and what did not match; a missing file is NOT_FOUND.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"

namespace bulwark::ckpt {

using internal::kFooterSize;
using internal::kHeaderSize;

namespace {

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Verifies header/index/footer of an open shard; fills h and idx.
Status CheckStructure(int fd, const std::string& path, long step, int rank, int world,
                      internal::Header* h, internal::Index* idx) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat " + path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderSize + kFooterSize) {
    return DataLoss(path + ": file has " + std::to_string(size) +
                    " bytes, smaller than header + footer (truncated)");
  }
  uint8_t hb[kHeaderSize];
  BW_RETURN_IF_ERROR(internal::PReadAll(fd, hb, kHeaderSize, 0, path));
  BW_RETURN_IF_ERROR(internal::DecodeHeader(hb, path, h));
  if (h->file_size != size) {
    return DataLoss(path + ": header records " + std::to_string(h->file_size) +
                    " bytes but the file has " + std::to_string(size) + " (truncated or extended)");
  }
  if (h->step != step || h->rank != rank || h->world != world) {
    return DataLoss(path + ": header says step " + std::to_string(h->step) + " rank " +
                    std::to_string(h->rank) + " of " + std::to_string(h->world) +
                    ", expected step " + std::to_string(step) + " rank " + std::to_string(rank) +
                    " of " + std::to_string(world));
  }
  if (h->index_len > size - kHeaderSize - kFooterSize) {
    return DataLoss(path + ": index length exceeds the file");
  }
  uint8_t fb[kFooterSize];
  BW_RETURN_IF_ERROR(internal::PReadAll(fd, fb, kFooterSize, size - kFooterSize, path));
  internal::Footer f;
  BW_RETURN_IF_ERROR(internal::DecodeFooter(fb, path, &f));
  if (f.file_size != size || f.index_xxh3 != h->index_xxh3) {
    return DataLoss(path + ": footer does not match header");
  }
  std::string index_json(h->index_len, '\0');
  BW_RETURN_IF_ERROR(internal::PReadAll(fd, index_json.data(), h->index_len, kHeaderSize, path));
  if (internal::Hash(index_json.data(), index_json.size()) != h->index_xxh3) {
    return DataLoss(path + ": index checksum mismatch");
  }
  const uint64_t data_len = size - kHeaderSize - h->index_len - kFooterSize;
  return internal::DecodeIndex(index_json, data_len, path, idx);
}

// Reads one blob's bytes into `out` (if non-null) or a scratch buffer, checking
// every chunk checksum.
Status ReadBlob(int fd, const std::string& path, uint64_t data_start, const internal::BlobEntry& e,
                std::vector<uint8_t>* out) {
  std::vector<uint8_t> scratch;
  if (out != nullptr) {
    out->resize(e.size);
  } else {
    scratch.resize(std::min<uint64_t>(e.chunk_size, e.size));
  }
  for (size_t c = 0; c < e.chunks.size(); ++c) {
    const uint64_t off = c * e.chunk_size;
    const uint64_t n = std::min<uint64_t>(e.chunk_size, e.size - off);
    uint8_t* dst = out != nullptr ? out->data() + off : scratch.data();
    BW_RETURN_IF_ERROR(internal::PReadAll(fd, dst, n, data_start + e.offset + off, path));
    if (internal::Hash(dst, n) != e.chunks[c]) {
      return DataLoss(path + ": blob '" + e.name + "' chunk " + std::to_string(c) +
                      " checksum mismatch (bytes " + std::to_string(off) + ".." +
                      std::to_string(off + n) + ")");
    }
  }
  return Status::Ok();
}

Result<std::string> ShardPath(const std::string& dir, long step, int rank, int world) {
  if (rank < 0 || world < 1 || rank >= world || step < 0) {
    return InvalidArgument("invalid shard address step " + std::to_string(step) + " rank " +
                           std::to_string(rank) + " of " + std::to_string(world));
  }
  return StepDir(dir, step) + "/" + ShardFileName(rank, world);
}

}  // namespace

namespace internal {

Status CheckShardFile(const std::string& path, long step, int rank, int world, bool full_data,
                      Header* h, Index* idx) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus("open shard " + path, errno);
  Header hh;
  Index ii;
  BW_RETURN_IF_ERROR(CheckStructure(fd.get(), path, step, rank, world, &hh, &ii));
  if (full_data) {
    const uint64_t data_start = kHeaderSize + hh.index_len;
    for (const BlobEntry& e : ii.blobs) {
      BW_RETURN_IF_ERROR(ReadBlob(fd.get(), path, data_start, e, nullptr));
    }
  }
  if (h != nullptr) *h = hh;
  if (idx != nullptr) *idx = std::move(ii);
  return Status::Ok();
}

}  // namespace internal

Result<std::vector<OwnedBlob>> ReadShard(const std::string& dir, long step, int rank, int world) {
  BW_ASSIGN_OR_RETURN(std::string path, ShardPath(dir, step, rank, world));
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus("open shard " + path, errno);
  internal::Header h;
  internal::Index idx;
  BW_RETURN_IF_ERROR(CheckStructure(fd.get(), path, step, rank, world, &h, &idx));
  std::vector<OwnedBlob> out;
  out.reserve(idx.blobs.size());
  const uint64_t data_start = kHeaderSize + h.index_len;
  for (const internal::BlobEntry& e : idx.blobs) {
    OwnedBlob b;
    b.name = e.name;
    BW_RETURN_IF_ERROR(ReadBlob(fd.get(), path, data_start, e, &b.data));
    out.push_back(std::move(b));
  }
  return out;
}

Status VerifyShard(const std::string& dir, long step, int rank, int world, bool full_data) {
  BW_ASSIGN_OR_RETURN(std::string path, ShardPath(dir, step, rank, world));
  return internal::CheckShardFile(path, step, rank, world, full_data, nullptr, nullptr);
}

}  // namespace bulwark::ckpt
