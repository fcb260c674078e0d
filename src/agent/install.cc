// InstallAgentBundle (install.h).
#include "agent/install.h"

#include <elf.h>
#include <link.h>

#include <filesystem>
#include <vector>

#include "common/install_paths.h"
#include "common/run.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;

struct Loaded {
  std::string interpreter;          // PT_INTERP of the executable
  std::vector<std::string> shared;  // every other object with a file name
};

int Collect(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<Loaded*>(data);
  const std::string name = info->dlpi_name ? info->dlpi_name : "";
  if (name.empty()) {  // the executable: its interpreter
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      if (info->dlpi_phdr[i].p_type == PT_INTERP) {
        out->interpreter =
            reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
      }
    }
    return 0;
  }
  if (name.find('/') != std::string::npos) out->shared.push_back(name);  // not the vDSO
  return 0;
}

Status Copy(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  const fs::path real = fs::canonical(from, ec);
  if (ec) return Internal("resolve " + from.string() + ": " + ec.message());
  fs::copy_file(real, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return Internal("copy " + real.string() + " to " + to.string() + ": " + ec.message());
  return Status::Ok();
}

// The SDK package without its tests and byte code.
Status CopyPackage(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Internal("create " + to.string() + ": " + ec.message());
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    const std::string leaf = it->path().filename().string();
    if (it->is_directory() && (leaf == "__pycache__" || leaf == "tests")) {
      it.disable_recursion_pending();
      continue;
    }
    const fs::path target = to / fs::relative(it->path(), from);
    if (it->is_directory()) {
      fs::create_directories(target, ec);
    } else if (it->is_regular_file()) {
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing, ec);
    }
    if (ec) return Internal("copy " + it->path().string() + ": " + ec.message());
  }
  if (ec) return Internal("read " + from.string() + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status InstallAgentBundle(const InstallOptions& o, std::ostream& log) {
  if (o.dest.empty()) return InvalidArgument("install: DIR is required");
  const fs::path dest = o.dest;
  std::error_code ec;
  for (const char* sub : {"bin", "lib"}) {
    fs::create_directories(dest / sub, ec);
    if (ec) return Internal("create " + (dest / sub).string() + ": " + ec.message());
  }
  Loaded loaded;
  dl_iterate_phdr(Collect, &loaded);
  if (loaded.interpreter.empty()) {
    return FailedPrecondition(
        "install: this bulwark-agent has no dynamic loader (PT_INTERP); a static build "
        "needs no bundle: run it from the image directly");
  }
  BW_RETURN_IF_ERROR(Copy("/proc/self/exe", dest / "bin" / "bulwark-agent"));
  BW_RETURN_IF_ERROR(Copy(loaded.interpreter, dest / "lib" / "ld.so"));
  for (const std::string& lib : loaded.shared) {
    if (fs::path(lib).filename() == fs::path(loaded.interpreter).filename()) continue;
    BW_RETURN_IF_ERROR(Copy(lib, dest / "lib" / fs::path(lib).filename()));
  }
  log << "bulwark-agent install: " << dest.string() << "/bin/bulwark-agent, its loader and "
      << loaded.shared.size() << " shared libraries\n";
  if (!o.lib_path.empty() && fs::exists(o.lib_path, ec)) {
    BW_RETURN_IF_ERROR(Copy(o.lib_path, dest / "lib" / "libbulwark.so"));
    log << "bulwark-agent install: the SDK library from " << o.lib_path << "\n";
  } else {
    log << "bulwark-agent install: no SDK library ("
        << (o.lib_path.empty() ? "none given" : o.lib_path + " missing")
        << "): ranks run without step reports\n";
  }
  if (!o.python_dir.empty() && fs::exists(fs::path(o.python_dir) / "bulwark" / "__init__.py", ec)) {
    BW_RETURN_IF_ERROR(CopyPackage(fs::path(o.python_dir) / "bulwark",
                                   dest / "lib" / "bulwark" / "python" / "bulwark"));
    log << "bulwark-agent install: the SDK package from " << o.python_dir << "\n";
  } else {
    log << "bulwark-agent install: no SDK package at " << o.python_dir << "\n";
  }
  // The bundle must run on its own: its loader, its libraries, nothing of this system's.
  SpawnOptions so;
  so.argv = AgentBundleCommand(dest.string());
  so.argv.push_back("--version");
  so.env = {{"PATH", "/usr/bin:/bin"}};
  BW_ASSIGN_OR_RETURN(RunOutcome run, RunToEnd(so, 30));
  if (run.timed_out) {
    return DeadlineExceeded("install: the installed agent's --version did not finish in 30 s");
  }
  if (!run.exit.ok()) {
    return Internal("install: the installed agent does not run (" + run.exit.Describe() +
                    "): " + run.output);
  }
  log << "bulwark-agent install: checked: " << run.output;
  return Status::Ok();
}

}  // namespace bulwark
