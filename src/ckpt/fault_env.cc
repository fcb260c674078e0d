#include "ckpt/fault_env.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace bulwark::ckpt {

struct FaultEnv::FileRecord {
  std::atomic<uint64_t> size{0};    // bytes appended
  std::atomic<uint64_t> synced{0};  // `size` at the last successful Sync
};

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The coin of an all-or-nothing partial operation.
bool Coin(uint64_t draw) { return ((draw >> 29) & 1) != 0; }

}  // namespace

// Wraps a base file; every Append / WriteAt / Sync / Close is a counted operation.
class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultEnv* env, std::unique_ptr<WritableFile> base, std::string path,
                    std::shared_ptr<FaultEnv::FileRecord> rec)
      : env_(env), base_(std::move(base)), path_(std::move(path)), rec_(std::move(rec)) {}

  Status Append(const void* data, size_t n) override {
    uint64_t draw = 0;
    Status err;
    switch (env_->Next("Append", path_, n, &draw, &err)) {
      case FaultEnv::Action::kFail:
        return err;
      case FaultEnv::Action::kCrash:
        if (n > 0) {
          const size_t p = static_cast<size_t>(draw % n);
          if (p > 0 && base_->Append(data, p).ok()) rec_->size += p;
        }
        env_->Crash();
      case FaultEnv::Action::kProceed:
        break;
    }
    Status st = base_->Append(data, n);
    if (st.ok()) rec_->size += n;
    return st;
  }

  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    uint64_t draw = 0;
    Status err;
    switch (env_->Next("WriteAt", path_, n, &draw, &err)) {
      case FaultEnv::Action::kFail:
        return err;
      case FaultEnv::Action::kCrash:
        if (n > 0) {
          const size_t p = static_cast<size_t>(draw % n);
          if (p > 0) {
            IgnoreError(base_->WriteAt(offset, data, p),
                        "a torn write: the injected error is what the caller sees");
          }
        }
        env_->Crash();
      case FaultEnv::Action::kProceed:
        break;
    }
    return base_->WriteAt(offset, data, n);
  }

  Status Sync() override {
    uint64_t draw = 0;
    Status err;
    switch (env_->Next("Sync", path_, 0, &draw, &err)) {
      case FaultEnv::Action::kFail:
        return err;
      case FaultEnv::Action::kCrash:
        env_->Crash();
      case FaultEnv::Action::kProceed:
        break;
    }
    Status st = base_->Sync();
    if (st.ok()) rec_->synced = rec_->size.load();
    return st;
  }

  Status Close() override {
    uint64_t draw = 0;
    Status err;
    switch (env_->Next("Close", path_, 0, &draw, &err)) {
      case FaultEnv::Action::kFail:
        return err;
      case FaultEnv::Action::kCrash:
        env_->Crash();
      case FaultEnv::Action::kProceed:
        break;
    }
    return base_->Close();
  }

 private:
  FaultEnv* env_;
  std::unique_ptr<WritableFile> base_;
  std::string path_;
  std::shared_ptr<FaultEnv::FileRecord> rec_;
};

FaultEnv::FaultEnv(Env* base, uint64_t seed) : base_(base), seed_(seed) {}
FaultEnv::~FaultEnv() = default;

void FaultEnv::Arm(Mode mode, uint64_t op) {
  std::lock_guard<std::mutex> l(mu_);
  mode_ = op == 0 ? Mode::kNone : mode;
  fault_op_ = mode_ == Mode::kNone ? 0 : op;
}

uint64_t FaultEnv::ops() const {
  std::lock_guard<std::mutex> l(mu_);
  return ops_;
}

void FaultEnv::ResetCount() {
  std::lock_guard<std::mutex> l(mu_);
  ops_ = 0;
  error_fired_ = false;
  trace_.clear();
}

bool FaultEnv::error_fired() const {
  std::lock_guard<std::mutex> l(mu_);
  return error_fired_;
}

void FaultEnv::set_trace(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  trace_on_ = on;
}

std::vector<std::string> FaultEnv::trace() const {
  std::lock_guard<std::mutex> l(mu_);
  return trace_;
}

FaultEnv::Action FaultEnv::Next(const char* op, const std::string& path, uint64_t bytes,
                                uint64_t* draw, Status* error) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t n = ++ops_;
  if (trace_on_) {
    // Appended piece by piece: `"#" + std::to_string(n) + ...` trips a GCC 12
    // -Wrestrict false positive in Release builds.
    std::string line = "#";
    line += std::to_string(n);
    line += ' ';
    line += op;
    line += ' ';
    line += path;
    if (std::string(op) == "Append" || std::string(op) == "WriteAt") {
      line += ' ';
      line += std::to_string(bytes);
    }
    trace_.push_back(std::move(line));
  }
  if (mode_ == Mode::kNone || n < fault_op_) return Action::kProceed;
  if (mode_ == Mode::kError) {
    error_fired_ = true;
    *error = ErrnoStatus(
        "injected I/O error at op #" + std::to_string(n) + " (" + op + " " + path + ")", EIO);
    return Action::kFail;
  }
  if (n == fault_op_) {
    *draw = SplitMix64(seed_ ^ SplitMix64(n));
    return Action::kCrash;
  }
  return Action::kProceed;  // past a kill point: only reachable if the kill failed
}

void FaultEnv::Crash() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (mode_ == Mode::kPowerLoss) {
      for (const auto& [path, rec] : files_) {
        if (rec->size.load() > rec->synced.load()) {
          // Best effort: a file already gone has nothing left to lose.
          (void)::truncate(path.c_str(), static_cast<off_t>(rec->synced.load()));
        }
      }
    }
  }
  ::raise(SIGKILL);
  ::_exit(137);  // not reached: SIGKILL cannot be caught
}

std::shared_ptr<FaultEnv::FileRecord> FaultEnv::Track(const std::string& path) {
  auto rec = std::make_shared<FileRecord>();
  std::lock_guard<std::mutex> l(mu_);
  files_[path] = rec;
  return rec;
}

void FaultEnv::MoveRecord(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) {
    files_.erase(to);  // replaced by a file this Env did not write
    return;
  }
  std::shared_ptr<FileRecord> rec = it->second;
  files_.erase(it);
  files_[to] = std::move(rec);
}

void FaultEnv::DropRecord(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(path);
}

Result<std::unique_ptr<WritableFile>> FaultEnv::NewWritableFile(const std::string& path) {
  uint64_t draw = 0;
  Status err;
  switch (Next("NewWritableFile", path, 0, &draw, &err)) {
    case Action::kFail:
      return err;
    case Action::kCrash:
      if (Coin(draw)) {
        Result<std::unique_ptr<WritableFile>> f = base_->NewWritableFile(path);
        if (f.ok()) Track(path);
      }
      Crash();
    case Action::kProceed:
      break;
  }
  BW_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base_->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(
      new FaultWritableFile(this, std::move(f), path, Track(path)));
}

Result<std::unique_ptr<ReadableFile>> FaultEnv::OpenReadable(const std::string& path) {
  return base_->OpenReadable(path);
}

Status FaultEnv::Rename(const std::string& from, const std::string& to) {
  uint64_t draw = 0;
  Status err;
  switch (Next("Rename", from + " -> " + to, 0, &draw, &err)) {
    case Action::kFail:
      return err;
    case Action::kCrash:
      if (Coin(draw) && base_->Rename(from, to).ok()) MoveRecord(from, to);
      Crash();
    case Action::kProceed:
      break;
  }
  Status st = base_->Rename(from, to);
  if (st.ok()) MoveRecord(from, to);
  return st;
}

Status FaultEnv::RemoveFile(const std::string& path) {
  uint64_t draw = 0;
  Status err;
  switch (Next("RemoveFile", path, 0, &draw, &err)) {
    case Action::kFail:
      return err;
    case Action::kCrash:
      if (Coin(draw) && base_->RemoveFile(path).ok()) DropRecord(path);
      Crash();
    case Action::kProceed:
      break;
  }
  Status st = base_->RemoveFile(path);
  if (st.ok()) DropRecord(path);
  return st;
}

Status FaultEnv::RemoveDir(const std::string& path) {
  uint64_t draw = 0;
  Status err;
  switch (Next("RemoveDir", path, 0, &draw, &err)) {
    case Action::kFail:
      return err;
    case Action::kCrash:
      if (Coin(draw)) {
        IgnoreError(base_->RemoveDir(path), "a crash may or may not have happened to apply it");
      }
      Crash();
    case Action::kProceed:
      break;
  }
  return base_->RemoveDir(path);
}

Status FaultEnv::MkdirAll(const std::string& path) {
  uint64_t draw = 0;
  Status err;
  switch (Next("MkdirAll", path, 0, &draw, &err)) {
    case Action::kFail:
      return err;
    case Action::kCrash: {
      // A random proper prefix of the components: "/a/b/c" -> "", "/a" or "/a/b".
      std::vector<size_t> ends;  // end offset of each component
      for (size_t i = 1; i <= path.size(); ++i) {
        if ((i == path.size() || path[i] == '/') && path[i - 1] != '/') ends.push_back(i);
      }
      if (ends.size() > 1) {
        const size_t k = static_cast<size_t>(draw % ends.size());  // components to create
        if (k > 0) {
          IgnoreError(base_->MkdirAll(path.substr(0, ends[k - 1])),
                      "a crash midway: some parents made");
        }
      }
      Crash();
    }
    case Action::kProceed:
      break;
  }
  return base_->MkdirAll(path);
}

Status FaultEnv::SyncDir(const std::string& path) {
  uint64_t draw = 0;
  Status err;
  switch (Next("SyncDir", path, 0, &draw, &err)) {
    case Action::kFail:
      return err;
    case Action::kCrash:
      if (Coin(draw)) {
        IgnoreError(base_->SyncDir(path), "a crash may or may not have happened to apply it");
      }
      Crash();
    case Action::kProceed:
      break;
  }
  return base_->SyncDir(path);
}

Result<std::vector<std::string>> FaultEnv::ListDir(const std::string& path) {
  return base_->ListDir(path);
}

Result<uint64_t> FaultEnv::FileSize(const std::string& path) { return base_->FileSize(path); }

bool FaultEnv::IsDir(const std::string& path) { return base_->IsDir(path); }

void FaultEnv::DropCache(const std::string& path) { base_->DropCache(path); }

}  // namespace bulwark::ckpt
