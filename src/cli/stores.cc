#include "cli/stores.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/net.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Canonical form of an existing file, or "" if it does not exist.
std::string Existing(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  fs::path c = fs::canonical(path, ec);
  return ec ? "" : c.string();
}

}  // namespace

std::string StoreRegistryPath() {
  const char* state = getenv("XDG_STATE_HOME");
  if (state && *state == '/') return std::string(state) + "/bulwark/stores";
  const char* home = getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state/bulwark/stores";
}

Status RememberStore(const std::string& registry, const std::string& store) {
  std::error_code ec;
  const std::string mine = fs::absolute(store, ec).lexically_normal().string();
  if (ec) return InvalidArgument("store path " + store + ": " + ec.message());
  fs::create_directories(fs::path(registry).parent_path(), ec);
  if (ec) return ErrnoStatus("create " + fs::path(registry).parent_path().string(), ec.value());
  Fd lock(::open((registry + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock.valid()) return ErrnoStatus("open " + registry + ".lock", errno);
  if (::flock(lock.get(), LOCK_EX) != 0) return ErrnoStatus("lock " + registry, errno);
  std::vector<std::string> keep;
  std::set<std::string> seen;
  for (const std::string& line : ReadLines(registry)) {
    if (line == mine || !fs::exists(line, ec) || !seen.insert(line).second) continue;
    keep.push_back(line);
  }
  keep.push_back(mine);  // the newest last
  const std::string tmp = registry + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const std::string& p : keep) out << p << "\n";
    if (!out.flush()) return ErrnoStatus("write " + tmp, errno);
  }
  if (::rename(tmp.c_str(), registry.c_str()) != 0) return ErrnoStatus("rename " + tmp, errno);
  return Status::Ok();
}

std::vector<std::string> KnownStores(const std::string& registry) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::vector<std::string> candidates = {".bulwark/bulwark.db"};
  for (const std::string& line : ReadLines(registry)) candidates.push_back(line);
  for (const std::string& c : candidates) {
    const std::string canon = Existing(c);
    if (!canon.empty() && seen.insert(canon).second) out.push_back(c);
  }
  return out;
}

}  // namespace bulwark::cli
