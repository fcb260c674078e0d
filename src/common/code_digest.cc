#include "common/code_digest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace bulwark {
namespace {

namespace fs = std::filesystem;

std::string Hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

bool IsCode(const fs::path& p) {
  static const char* const kExt[] = {".py",  ".pyx", ".c",   ".cc",   ".cpp", ".cu",
                                     ".h",   ".hpp", ".sh",  ".yaml", ".yml", ".toml",
                                     ".cfg", ".ini", ".lua", ".jl",   ".rs",  ".go"};
  const std::string name = p.filename().string();
  if (name == "Dockerfile" || name == "Makefile") return true;
  const std::string ext = p.extension().string();
  return std::any_of(std::begin(kExt), std::end(kExt), [&](const char* e) { return ext == e; });
}

}  // namespace

Result<CodeDigest> DigestCode(const std::string& dir, const std::vector<std::string>& exclude,
                              size_t max_files, size_t max_file_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound("no directory " + dir);
  const fs::path root = fs::weakly_canonical(dir, ec);
  std::vector<fs::path> skip;
  for (const std::string& e : exclude) skip.push_back(fs::weakly_canonical(e, ec));
  std::map<std::string, fs::path> files;  // relative path -> path, sorted
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    std::error_code e2;
    if (it->is_directory(e2)) {
      if (name == ".git" || name == ".bulwark" || name == "__pycache__" ||
          std::find(skip.begin(), skip.end(), p) != skip.end()) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!it->is_regular_file(e2) || !IsCode(p) || it->file_size(e2) > max_file_bytes) continue;
    files[fs::relative(p, root, e2).string()] = p;
    if (files.size() >= max_files) break;
  }
  XXH3_state_t* all = XXH3_createState();
  XXH3_64bits_reset(all);
  CodeDigest out;
  std::string buf(1 << 16, '\0');
  for (const auto& [rel, path] : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;  // gone since it was listed
    XXH3_state_t* one = XXH3_createState();
    XXH3_64bits_reset(one);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      XXH3_64bits_update(one, buf.data(), static_cast<size_t>(in.gcount()));
    }
    const std::string h = Hex(XXH3_64bits_digest(one));
    XXH3_freeState(one);
    XXH3_64bits_update(all, rel.data(), rel.size() + 1);  // with its NUL: an unambiguous join
    XXH3_64bits_update(all, h.data(), h.size());
    out.per_file.emplace_back(rel, h);
  }
  out.hash = Hex(XXH3_64bits_digest(all));
  XXH3_freeState(all);
  out.files = static_cast<int>(out.per_file.size());
  return out;
}

std::vector<std::string> ChangedFiles(const CodeDigest& a, const CodeDigest& b, size_t limit) {
  std::map<std::string, std::string> x(a.per_file.begin(), a.per_file.end());
  std::map<std::string, std::string> y(b.per_file.begin(), b.per_file.end());
  std::vector<std::string> out;
  for (const auto& [k, v] : x) {
    auto it = y.find(k);
    if (it == y.end()) {
      out.push_back(k + " (removed)");
    } else if (it->second != v) {
      out.push_back(k + " (changed)");
    }
  }
  for (const auto& [k, v] : y) {
    if (!x.count(k)) out.push_back(k + " (added)");
  }
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace bulwark
