#include "ckpt/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace bulwark::ckpt {
namespace {

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write " + path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
      size_ += static_cast<uint64_t>(w);
    }
    StartWriteback();
    return Status::Ok();
  }
  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    if (offset > size_ || n > size_ - offset) {
      return InvalidArgument("write " + path_ + ": WriteAt past the appended end");
    }
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write " + path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }
  // Starts writeback of each full window as data arrives, so the disk works
  // while the writer computes, and waits for the window two back, so dirty
  // pages stay bounded. Best effort: errors surface at Sync (fdatasync).
  void StartWriteback() {
    while (size_ - kicked_ >= kWindow) {
      (void)::sync_file_range(fd_, static_cast<off_t>(kicked_), kWindow, SYNC_FILE_RANGE_WRITE);
      if (kicked_ >= 2 * kWindow) {
        (void)::sync_file_range(
            fd_, static_cast<off_t>(kicked_ - 2 * kWindow), kWindow,
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      }
      kicked_ += kWindow;
    }
  }
  Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fsync " + path_, errno);
    return Status::Ok();
  }
  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return ErrnoStatus("close " + path_, errno);
    return Status::Ok();
  }

 private:
  static constexpr uint64_t kWindow = 8ull << 20;
  int fd_;
  std::string path_;
  uint64_t size_ = 0;    // bytes appended
  uint64_t kicked_ = 0;  // writeback started for [0, kicked_)
};

class PosixReadableFile : public ReadableFile {
 public:
  PosixReadableFile(int fd, std::string path, uint64_t size)
      : fd_(fd), path_(std::move(path)), size_(size) {}
  ~PosixReadableFile() override { ::close(fd_); }
  Status ReadAt(uint64_t off, void* dst, size_t n) override {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("read " + path_, errno);
      }
      if (r == 0) return DataLoss(path_ + ": unexpected end of file (truncated)");
      p += r;
      n -= static_cast<size_t>(r);
      off += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }
  uint64_t Size() const override { return size_; }

 private:
  int fd_;
  std::string path_;
  uint64_t size_;
};

class PosixEnv : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("create " + path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path));
  }
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return NotFound(path + " does not exist");
      return ErrnoStatus("open " + path, errno);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus("stat " + path, err);
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return std::unique_ptr<ReadableFile>(
        new PosixReadableFile(fd, path, static_cast<uint64_t>(st.st_size)));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus("rename " + from + " -> " + to, errno);
    }
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink " + path, errno);
    return Status::Ok();
  }
  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("rmdir " + path, errno);
    return Status::Ok();
  }
  Status MkdirAll(const std::string& dir) override {
    if (dir.empty()) return InvalidArgument("checkpoint directory is empty");
    size_t pos = 0;
    while (pos != std::string::npos) {
      pos = dir.find('/', pos + 1);
      std::string cur = dir.substr(0, pos);
      if (cur.empty()) continue;
      if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoStatus("mkdir " + cur, errno);
      }
    }
    if (!IsDir(dir)) return FailedPrecondition(dir + " exists and is not a directory");
    return Status::Ok();
  }
  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open directory " + dir, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoStatus("fsync directory " + dir, err);
    return Status::Ok();
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    std::vector<std::string> out;
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) return out;
      return ErrnoStatus("open directory " + path, errno);
    }
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      out.emplace_back(e->d_name);
    }
    ::closedir(d);
    return out;
  }
  Result<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return NotFound(path + " does not exist");
      return ErrnoStatus("stat " + path, errno);
    }
    return static_cast<uint64_t>(st.st_size);
  }
  bool IsDir(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  void DropCache(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

Result<std::string> ReadWholeFile(Env* env, const std::string& path) {
  BW_ASSIGN_OR_RETURN(auto f, env->OpenReadable(path));
  std::string out(f->Size(), '\0');
  if (!out.empty()) BW_RETURN_IF_ERROR(f->ReadAt(0, out.data(), out.size()));
  return out;
}

Status WriteFileAtomic(Env* env, const std::string& dir, const std::string& name,
                       const std::string& content) {
  const std::string tmp = dir + "/" + name + ".tmp." + std::to_string(::getpid());
  const std::string final_path = dir + "/" + name;
  Status st;
  {
    BW_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
    st = f->Append(content.data(), content.size());
    if (st.ok()) st = f->Sync();
    if (st.ok()) st = f->Close();
  }
  if (st.ok()) st = env->Rename(tmp, final_path);
  if (!st.ok()) {
    IgnoreError(env->RemoveFile(tmp),
                "cleanup after the error that is returned; a stale temporary file is overwritten");
    return st;
  }
  return env->SyncDir(dir);
}

Status RemoveTree(Env* env, const std::string& path) {
  if (!env->IsDir(path)) return env->RemoveFile(path);
  BW_ASSIGN_OR_RETURN(auto names, env->ListDir(path));
  for (const std::string& n : names) BW_RETURN_IF_ERROR(RemoveTree(env, path + "/" + n));
  return env->RemoveDir(path);
}

}  // namespace bulwark::ckpt
