// Shard writer.
//
// WRITE PROTOCOL (crash-consistent; see docs/checkpoint-format.md for the analysis)
//   1. mkdir -p <dir>/step-<012d>/ and fsync <dir> so the step directory is durable.
//   2. If the step already has a COMMIT, unlink it and fsync the step directory: a
//      step whose shards are being replaced must not stay committed.
//   3. Hash every blob in chunks (xxh3_64), build the JSON index, then write
//      header | index | data | footer to "<shard>.tmp.<pid>".
//   4. fsync the tmp file, rename it onto "<shard>", fsync the step directory.
// Only after step 4 is the shard reported durable (`ckpt` datagram). A crash before
// the rename leaves a ".tmp.<pid>" file that readers ignore and Retain removes; a
// crash after it leaves a complete shard in an uncommitted step, which is never
// loaded until Commit (commit.cc) writes COMMIT the same tmp -> fsync -> rename ->
// fsync-dir way.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "common/clock.h"

namespace bulwark::ckpt {

using internal::kFooterSize;
using internal::kHeaderSize;

std::string StepDir(const std::string& dir, long step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%012ld", step);
  return dir + "/" + buf;
}

std::string ShardFileName(int rank, int world) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "shard-%05d-of-%05d.bws", rank, world);
  return buf;
}

namespace {

Status CheckArgs(long step, int rank, int world) {
  if (step < 0 || step > 999999999999L) {
    return InvalidArgument("checkpoint step " + std::to_string(step) +
                           " is out of range [0, 999999999999]");
  }
  if (world < 1 || world > 99999) {
    return InvalidArgument("world size " + std::to_string(world) + " is out of range [1, 99999]");
  }
  if (rank < 0 || rank >= world) {
    return InvalidArgument("rank " + std::to_string(rank) + " is out of range [0, " +
                           std::to_string(world) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status WriteShard(const std::string& dir, long step, int rank, int world,
                  const std::vector<Blob>& blobs, ShardStats* stats, const WriteOptions& opts) {
  double t0 = SystemClock::Get()->NowMono();
  BW_RETURN_IF_ERROR(CheckArgs(step, rank, world));
  if (opts.chunk_size == 0) return InvalidArgument("WriteOptions.chunk_size must be > 0");
  std::set<std::string> names;
  for (const Blob& b : blobs) {
    if (b.name.empty()) return InvalidArgument("blob name must not be empty");
    if (!names.insert(b.name).second) {
      return InvalidArgument("duplicate blob name '" + b.name + "'; blob names must be unique");
    }
    if (b.size > 0 && b.data == nullptr) {
      return InvalidArgument("blob '" + b.name + "' has size > 0 but null data");
    }
  }

  // Steps 1-2: durable step directory, stale COMMIT removed.
  BW_RETURN_IF_ERROR(internal::MkdirAll(dir));
  const std::string step_dir = StepDir(dir, step);
  BW_RETURN_IF_ERROR(internal::MkdirAll(step_dir));
  BW_RETURN_IF_ERROR(internal::FsyncDir(dir));
  const std::string commit_path = step_dir + "/" + internal::kCommitName;
  if (::unlink(commit_path.c_str()) == 0) {
    BW_RETURN_IF_ERROR(internal::FsyncDir(step_dir));
  } else if (errno != ENOENT) {
    return ErrnoStatus("unlink stale " + commit_path, errno);
  }

  // Step 3: checksums and index.
  internal::Index index;
  uint64_t data_len = 0;
  for (const Blob& b : blobs) {
    internal::BlobEntry e;
    e.name = b.name;
    e.offset = data_len;
    e.size = b.size;
    e.chunk_size = opts.chunk_size;
    const uint8_t* p = static_cast<const uint8_t*>(b.data);
    for (uint64_t off = 0; off < b.size; off += opts.chunk_size) {
      uint64_t n = std::min<uint64_t>(opts.chunk_size, b.size - off);
      e.chunks.push_back(internal::Hash(p + off, n));
    }
    data_len += b.size;
    index.blobs.push_back(std::move(e));
  }
  const std::string index_json = internal::EncodeIndex(step, rank, world, index);
  internal::Header h;
  h.version = kFormatVersion;
  h.step = step;
  h.rank = rank;
  h.world = world;
  h.index_len = index_json.size();
  h.index_xxh3 = internal::Hash(index_json.data(), index_json.size());
  h.file_size = kHeaderSize + index_json.size() + data_len + kFooterSize;
  uint8_t header[kHeaderSize];
  internal::EncodeHeader(h, header);
  uint8_t footer[kFooterSize];
  internal::EncodeFooter({h.file_size, h.index_xxh3}, footer);

  const std::string final_path = step_dir + "/" + ShardFileName(rank, world);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  Status st = internal::WriteAll(fd, header, kHeaderSize, tmp);
  if (st.ok()) st = internal::WriteAll(fd, index_json.data(), index_json.size(), tmp);
  for (size_t i = 0; st.ok() && i < blobs.size(); ++i) {
    st = internal::WriteAll(fd, blobs[i].data, blobs[i].size, tmp);
  }
  if (st.ok()) st = internal::WriteAll(fd, footer, kFooterSize, tmp);
  // Step 4: fsync, rename, fsync dir.
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("fsync " + tmp, errno);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    st = ErrnoStatus("rename " + tmp + " -> " + final_path, errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st.Annotate("write shard rank " + std::to_string(rank) + " step " +
                       std::to_string(step));
  }
  BW_RETURN_IF_ERROR(internal::FsyncDir(step_dir));
  if (stats != nullptr) {
    stats->path = final_path;
    stats->bytes = h.file_size;
    stats->write_s = SystemClock::Get()->NowMono() - t0;
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
