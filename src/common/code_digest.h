// A digest of a job's code: the files of its working directory (replay bundles,
// docs/diagnosis.md). Not thread-compatible with writers of the directory: files that
// change while it is read give a digest of neither version.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark {

struct CodeDigest {
  std::string hash;  // 16 hex digits (XXH3-64 of every file's relative path and bytes)
  int files = 0;     // how many files it covers
  // Relative path -> 16 hex digits of that file (for telling which files changed).
  std::vector<std::pair<std::string, std::string>> per_file;
};

// Reads the code files under `dir` in path order: sources, scripts and configuration by
// their extension (.py .pyx .c .cc .cpp .cu .h .hpp .sh .yaml .yml .toml .cfg .ini .lua
// .jl .rs .go; Dockerfile, Makefile), not outputs (checkpoints, logs, data, reports:
// JSON and text files are left out, as runs write them).
// Skips the directories `.git`, `.bulwark`, `__pycache__` and any in `exclude`
// (absolute paths, e.g. the checkpoint directory), files over `max_file_bytes`, and
// everything past `max_files`.
// NOT_FOUND when `dir` does not exist.
Result<CodeDigest> DigestCode(const std::string& dir, const std::vector<std::string>& exclude,
                              size_t max_files = 5000, size_t max_file_bytes = 64 << 20);

// The files whose digests differ between `a` and `b` (added, removed or changed),
// at most `limit` of them.
std::vector<std::string> ChangedFiles(const CodeDigest& a, const CodeDigest& b, size_t limit = 10);

}  // namespace bulwark
