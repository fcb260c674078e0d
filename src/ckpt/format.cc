#include "ckpt/format.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace bulwark::ckpt::internal {
namespace {

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint64_t Hash(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool ParseHex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

void EncodeHeader(const Header& h, uint8_t out[kHeaderSize]) {
  std::memset(out, 0, kHeaderSize);
  std::memcpy(out, kHeaderMagic, 8);
  Put32(out + 8, h.version);
  Put32(out + 12, static_cast<uint32_t>(kHeaderSize));
  Put64(out + 16, static_cast<uint64_t>(h.step));
  Put32(out + 24, static_cast<uint32_t>(h.rank));
  Put32(out + 28, static_cast<uint32_t>(h.world));
  Put64(out + 32, h.index_len);
  Put64(out + 40, h.index_xxh3);
  Put64(out + 48, h.file_size);
  Put64(out + 56, Hash(out, 56));
}

Status DecodeHeader(const uint8_t in[kHeaderSize], const std::string& what, Header* h) {
  if (std::memcmp(in, kHeaderMagic, 8) != 0) {
    return DataLoss(what + ": bad header magic (not a Bulwark shard, or corrupted)");
  }
  if (Get64(in + 56) != Hash(in, 56)) return DataLoss(what + ": header checksum mismatch");
  h->version = Get32(in + 8);
  if (h->version != 1) {
    return DataLoss(what + ": unsupported shard format version " + std::to_string(h->version) +
                    " (this build reads version 1)");
  }
  if (Get32(in + 12) != kHeaderSize) return DataLoss(what + ": bad header size field");
  h->step = static_cast<long>(Get64(in + 16));
  h->rank = static_cast<int>(Get32(in + 24));
  h->world = static_cast<int>(Get32(in + 28));
  h->index_len = Get64(in + 32);
  h->index_xxh3 = Get64(in + 40);
  h->file_size = Get64(in + 48);
  return Status::Ok();
}

void EncodeFooter(const Footer& f, uint8_t out[kFooterSize]) {
  std::memcpy(out, kFooterMagic, 8);
  Put64(out + 8, f.file_size);
  Put64(out + 16, f.index_xxh3);
  Put64(out + 24, Hash(out, 24));
}

Status DecodeFooter(const uint8_t in[kFooterSize], const std::string& what, Footer* f) {
  if (std::memcmp(in, kFooterMagic, 8) != 0) {
    return DataLoss(what + ": bad footer magic (file truncated or corrupted)");
  }
  if (Get64(in + 24) != Hash(in, 24)) return DataLoss(what + ": footer checksum mismatch");
  f->file_size = Get64(in + 8);
  f->index_xxh3 = Get64(in + 16);
  return Status::Ok();
}

std::string EncodeIndex(long step, int rank, int world, const Index& index) {
  nlohmann::json j;
  j["format"] = 1;
  j["step"] = step;
  j["rank"] = rank;
  j["world"] = world;
  nlohmann::json blobs = nlohmann::json::array();
  for (const BlobEntry& b : index.blobs) {
    nlohmann::json chunks = nlohmann::json::array();
    for (uint64_t c : b.chunks) chunks.push_back(Hex64(c));
    blobs.push_back({{"name", b.name},
                     {"offset", b.offset},
                     {"size", b.size},
                     {"chunk_size", b.chunk_size},
                     {"chunks", std::move(chunks)}});
  }
  j["blobs"] = std::move(blobs);
  return j.dump();
}

Status DecodeIndex(const std::string& json, uint64_t data_len, const std::string& what,
                   Index* index) {
  index->blobs.clear();
  try {
    nlohmann::json j = nlohmann::json::parse(json);
    uint64_t expect_off = 0;
    for (const auto& b : j.at("blobs")) {
      BlobEntry e;
      e.name = b.at("name").get<std::string>();
      e.offset = b.at("offset").get<uint64_t>();
      e.size = b.at("size").get<uint64_t>();
      e.chunk_size = b.at("chunk_size").get<uint64_t>();
      if (e.chunk_size == 0) return DataLoss(what + ": blob '" + e.name + "' has chunk_size 0");
      if (e.offset != expect_off || e.size > data_len - expect_off) {
        return DataLoss(what + ": blob '" + e.name + "' range is outside the data region");
      }
      expect_off += e.size;
      uint64_t n_chunks = (e.size + e.chunk_size - 1) / e.chunk_size;
      const auto& chunks = b.at("chunks");
      if (chunks.size() != n_chunks) {
        return DataLoss(what + ": blob '" + e.name + "' lists " + std::to_string(chunks.size()) +
                        " chunk checksums, expected " + std::to_string(n_chunks));
      }
      for (const auto& c : chunks) {
        uint64_t v;
        if (!ParseHex64(c.get<std::string>(), &v)) {
          return DataLoss(what + ": blob '" + e.name + "' has a malformed chunk checksum");
        }
        e.chunks.push_back(v);
      }
      index->blobs.push_back(std::move(e));
    }
    if (expect_off != data_len) {
      return DataLoss(what + ": index covers " + std::to_string(expect_off) +
                      " data bytes but the data region has " + std::to_string(data_len));
    }
  } catch (const std::exception& e) {
    return DataLoss(what + ": malformed index JSON: " + e.what());
  }
  return Status::Ok();
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status PReadAll(int fd, void* buf, size_t n, uint64_t off, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path, errno);
    }
    if (r == 0) return DataLoss(path + ": unexpected end of file (truncated)");
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open directory " + dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync directory " + dir, err);
  return Status::Ok();
}

Status MkdirAll(const std::string& dir) {
  if (dir.empty()) return InvalidArgument("checkpoint directory is empty");
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir " + cur, errno);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(dir + " exists and is not a directory");
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& dir, const std::string& name,
                       const std::string& content) {
  std::string tmp = dir + "/" + name + ".tmp." + std::to_string(::getpid());
  std::string final_path = dir + "/" + name;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  Status st = WriteAll(fd, content.data(), content.size(), tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("fsync " + tmp, errno);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    st = ErrnoStatus("rename " + tmp + " -> " + final_path, errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncDir(dir);
}

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus("read " + path, err);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

}  // namespace bulwark::ckpt::internal
