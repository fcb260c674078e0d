#include "common/install_paths.h"

#include <filesystem>

namespace bulwark {

namespace fs = std::filesystem;

std::string ExeDir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

std::string DefaultPythonDir(const std::string& source_default) {
  std::error_code ec;
  const fs::path installed = fs::path(ExeDir()) / ".." / "lib" / "bulwark" / "python";
  if (fs::exists(installed / "bulwark" / "__init__.py", ec)) {
    return fs::weakly_canonical(installed, ec).string();
  }
  return source_default;
}

std::string DefaultSdkLib(const std::string& build_default) {
  std::error_code ec;
  const fs::path lib = fs::path(ExeDir()) / ".." / "lib" / "libbulwark.so";
  if (fs::exists(lib, ec)) return fs::weakly_canonical(lib, ec).string();
  return build_default;
}

std::vector<std::string> AgentBundleCommand(const std::string& dir) {
  return {dir + "/lib/ld.so", "--library-path", dir + "/lib", dir + "/bin/bulwark-agent"};
}

std::vector<std::string> SelfCommand() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {"/proc/self/exe"};
  // The binary was replaced while this process ran (an upgrade, a rebuild): the kernel
  // names the old file "<path> (deleted)". The new file at <path> is the program now.
  const std::string kDeleted = " (deleted)";
  std::string s = exe.string();
  if (s.size() > kDeleted.size() &&
      s.compare(s.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
    s.resize(s.size() - kDeleted.size());
    if (fs::exists(s, ec)) {
      exe = s;
    } else {
      return {"/proc/self/exe"};  // gone altogether: this process's own image still runs
    }
  }
  const fs::path bundle = exe.parent_path().parent_path();
  if (exe.filename() == "ld.so" && fs::exists(bundle / "bin" / "bulwark-agent", ec)) {
    return AgentBundleCommand(bundle.string());
  }
  return {exe.string()};
}

}  // namespace bulwark
