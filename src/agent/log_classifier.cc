#include "agent/log_classifier.h"

#include <array>
#include <regex>

namespace bulwark {
namespace {

struct Rule {
  const char* subtype;
  std::regex re;
};

const std::vector<Rule>& Rules() {
  static const std::vector<Rule>* rules = [] {
    auto* r = new std::vector<Rule>;
    auto add = [&](const char* subtype, const char* pattern) {
      r->push_back(
          Rule{subtype, std::regex(pattern, std::regex::ECMAScript | std::regex::optimize)});
    };
    add("nccl_timeout", R"(Watchdog caught collective operation timeout)");
    add("nccl_timeout", R"(ProcessGroupNCCL.*timed out)");
    add("nccl_timeout", R"(NCCL.*([Tt]imeout|timed out))");
    add("oom", R"(CUDA out of memory|OutOfMemoryError|Cannot allocate memory)");
    add("ecc", R"(\bECC error\b|uncorrectable ECC)");
    add("xid", R"(\bXid\b)");
    add("cuda_error", R"(\bCUDA error\b|\bcudaError[A-Za-z]*|CUBLAS_STATUS_(?!SUCCESS)[A-Z_]+)");
    // A checkpoint (or any) write that found its disk full: the node's disk is tested.
    add("disk_full", R"(No space left on device|\[Errno 28\]|\bENOSPC\b)");
    return r;
  }();
  return *rules;
}

// Cheap substring prefilter: a line containing none of these cannot match any rule.
bool MayMatch(std::string_view line) {
  static constexpr std::array<std::string_view, 10> kHints = {
      "NCCL", "Watchdog", "memory",   "OutOfMemory", "ECC",
      "Xid",  "CU",       "No space", "Errno 28",    "ENOSPC"};
  for (auto h : kHints) {
    if (line.find(h) != std::string_view::npos) return true;
  }
  return line.find("cuda") != std::string_view::npos;
}

}  // namespace

std::optional<std::string> ClassifyLogLine(std::string_view line) {
  if (line.size() > 4096) line = line.substr(0, 4096);  // bound regex cost on huge lines
  if (!MayMatch(line)) return std::nullopt;
  const bool nccl_info = line.find("NCCL INFO") != std::string_view::npos;
  for (const Rule& rule : Rules()) {
    if (nccl_info && std::string_view(rule.subtype) == "nccl_timeout") continue;
    if (std::regex_search(line.begin(), line.end(), rule.re)) return std::string(rule.subtype);
  }
  return std::nullopt;
}

}  // namespace bulwark
