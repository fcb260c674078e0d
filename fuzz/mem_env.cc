#include "fuzz/mem_env.h"

#include <cstring>

namespace bulwark::fuzz {

class MemWritable : public ckpt::WritableFile {
 public:
  MemWritable(MemEnv* env, std::string path) : env_(env), path_(std::move(path)) {}
  ~MemWritable() override { IgnoreError(Close(), "Close of a memory file cannot fail"); }
  Status Append(const void* data, size_t n) override {
    buf_.append(static_cast<const char*>(data), n);
    return Status::Ok();
  }
  Status WriteAt(uint64_t offset, const void* data, size_t n) override {
    if (offset > buf_.size() || n > buf_.size() - offset) {
      return InvalidArgument("WriteAt past the end of " + path_);
    }
    std::memcpy(buf_.data() + offset, data, n);
    return Status::Ok();
  }
  Status Sync() override {
    env_->Store(path_, buf_);
    return Status::Ok();
  }
  Status Close() override {
    if (!closed_) env_->Store(path_, buf_);
    closed_ = true;
    return Status::Ok();
  }

 private:
  MemEnv* env_;
  std::string path_;
  std::string buf_;
  bool closed_ = false;
};

namespace {

class MemReadable : public ckpt::ReadableFile {
 public:
  MemReadable(std::shared_ptr<std::string> data, std::string path)
      : data_(std::move(data)), path_(std::move(path)) {}
  Status ReadAt(uint64_t offset, void* dst, size_t n) override {
    if (offset > data_->size() || n > data_->size() - offset) {
      return DataLoss("read past the end of " + path_);
    }
    std::memcpy(dst, data_->data() + offset, n);
    return Status::Ok();
  }
  uint64_t Size() const override { return data_->size(); }

 private:
  std::shared_ptr<std::string> data_;
  std::string path_;
};

std::string Parent(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos || s == 0 ? "/" : p.substr(0, s);
}

}  // namespace

void MemEnv::Reset(std::map<std::string, std::string> files) {
  std::lock_guard<std::mutex> l(mu_);
  files_.clear();
  dirs_.clear();
  for (auto& [p, c] : files) {
    files_[p] = std::make_shared<std::string>(std::move(c));
    for (std::string d = Parent(p); d != "/"; d = Parent(d)) dirs_.insert(d);
  }
}

std::map<std::string, std::string> MemEnv::Files() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, std::string> out;
  for (const auto& [p, c] : files_) out[p] = *c;
  return out;
}

void MemEnv::Store(const std::string& path, std::string content) {
  std::lock_guard<std::mutex> l(mu_);
  files_[path] = std::make_shared<std::string>(std::move(content));
  for (std::string d = Parent(path); d != "/"; d = Parent(d)) dirs_.insert(d);
}

Result<std::unique_ptr<ckpt::WritableFile>> MemEnv::NewWritableFile(const std::string& path) {
  Store(path, "");
  return std::unique_ptr<ckpt::WritableFile>(new MemWritable(this, path));
}

Result<std::unique_ptr<ckpt::ReadableFile>> MemEnv::OpenReadable(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFound("open " + path + ": No such file or directory");
  return std::unique_ptr<ckpt::ReadableFile>(new MemReadable(it->second, path));
}

Status MemEnv::Rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return NotFound("rename " + from + ": No such file or directory");
  auto data = it->second;
  files_.erase(it);
  files_[to] = data;
  return Status::Ok();
}

Status MemEnv::RemoveFile(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(path);
  return Status::Ok();
}

Status MemEnv::RemoveDir(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  dirs_.erase(path);
  return Status::Ok();
}

Status MemEnv::MkdirAll(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  for (std::string d = path; d != "/" && !d.empty(); d = Parent(d)) dirs_.insert(d);
  return Status::Ok();
}

Status MemEnv::SyncDir(const std::string&) { return Status::Ok(); }

Result<std::vector<std::string>> MemEnv::ListDir(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> names;
  const std::string prefix = path + "/";
  for (const auto& [p, c] : files_) {
    if (p.rfind(prefix, 0) != 0) continue;
    std::string rest = p.substr(prefix.size());
    names.insert(rest.substr(0, rest.find('/')));
  }
  for (const std::string& d : dirs_) {
    if (d.rfind(prefix, 0) != 0) continue;
    std::string rest = d.substr(prefix.size());
    names.insert(rest.substr(0, rest.find('/')));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

Result<uint64_t> MemEnv::FileSize(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFound("stat " + path + ": No such file or directory");
  return static_cast<uint64_t>(it->second->size());
}

bool MemEnv::IsDir(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  if (dirs_.count(path)) return true;
  const std::string prefix = path + "/";
  auto it = files_.lower_bound(prefix);
  return it != files_.end() && it->first.rfind(prefix, 0) == 0;
}

}  // namespace bulwark::fuzz
