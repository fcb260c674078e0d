// AcquireShmDir, SweepAbandonedShmDirs (shm_dir.h, where the protocol is).
#include "common/shm_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace bulwark {
namespace {

constexpr const char* kOwnerFile = ".owner";
constexpr const char* kTrashPrefix = ".bulwark-trash-";
constexpr double kUnownedGraceS = 3600;  // a directory without .owner: an hour

bool SameFile(int fd, const std::string& path) {
  struct stat a, b;
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

// "bulwark-<digits>-<node>", as ShmDirName makes them.
bool IsShmDirName(const std::string& n) {
  constexpr size_t kAt = 8;  // strlen("bulwark-")
  if (n.rfind("bulwark-", 0) != 0) return false;
  size_t i = kAt;
  while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
  return i > kAt && i + 1 < n.size() && n[i] == '-';
}

void RemoveTreeQuietly(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // a concurrent sweep may remove parts first
}

}  // namespace

std::string ShmDirName(const std::string& run_dir, const std::string& node) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : run_dir) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return "bulwark-" + std::to_string(h % 1000000007ull) + "-" + node;
}

Status ShmDirLease::Remove() {
  if (path.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  lock.Reset();
  if (ec) return Internal("remove " + path + ": " + ec.message());
  return Status::Ok();
}

Result<ShmDirLease> AcquireShmDir(const std::string& root, const std::string& name,
                                  const Clock* clock, double timeout_s) {
  const std::string dir = root + "/" + name;
  const std::string owner = dir + "/" + kOwnerFile;
  const double deadline = clock->NowMono() + timeout_s;
  while (true) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus("create " + dir, errno);
    }
    Fd fd(::open(owner.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd.valid()) {
      if (errno == ENOENT) continue;  // a sweeper renamed the directory just now
      return ErrnoStatus("open " + owner, errno);
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return ErrnoStatus("lock " + owner, errno);
      if (clock->NowMono() >= deadline) {
        return FailedPrecondition(dir + " is in use by another live process (it holds " + owner +
                                  "); two agents of one run must not share a node name");
      }
      clock->SleepFor(0.05);
      continue;
    }
    if (SameFile(fd.get(), owner)) return ShmDirLease{dir, std::move(fd)};
    // Swept while we waited for the lock: the directory we locked is gone. Again.
  }
}

int SweepAbandonedShmDirs(const std::string& root, const Clock* clock) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (IsShmDirName(n) || n.rfind(kTrashPrefix, 0) == 0) names.push_back(n);
  }
  ::closedir(d);
  static std::atomic<int> seq{0};
  int removed = 0;
  for (const std::string& n : names) {
    const std::string dir = root + "/" + n;
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (n.rfind(kTrashPrefix, 0) == 0) {  // an interrupted sweep's
      RemoveTreeQuietly(dir);
      ++removed;
      continue;
    }
    Fd fd(::open((dir + "/" + kOwnerFile).c_str(), O_RDWR | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT && clock->NowWall() - static_cast<double>(st.st_mtime) > kUnownedGraceS) {
        RemoveTreeQuietly(dir);
        ++removed;
      }
      continue;
    }
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;    // owned by a live process
    if (!SameFile(fd.get(), dir + "/" + kOwnerFile)) continue;  // renamed under us
    const std::string trash = root + "/" + kTrashPrefix + std::to_string(::getpid()) + "-" +
                              std::to_string(seq.fetch_add(1)) + "-" + n;
    if (::rename(dir.c_str(), trash.c_str()) != 0) continue;
    fd.Reset();
    RemoveTreeQuietly(trash);
    ++removed;
  }
  return removed;
}

}  // namespace bulwark
