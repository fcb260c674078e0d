// The job spec schema: limits, the known fields of every YAML mapping with their
// fix hints, and value predicates. Internal to the spec component; the reference
// for users is docs/job-spec.md (keep the two in sync).
#pragma once

#include <cctype>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "spec/job_spec.h"
#include "spec/spec_reader.h"

namespace bulwark::spec_internal {

inline constexpr int kMaxNodes = 1024;
inline constexpr int kMaxProcsPerNode = 256;
inline constexpr double kMaxSeconds = 1e9;  // keeps every duration representable in int64 ns
inline constexpr size_t kMaxNameLen = 63;
inline constexpr size_t kMaxSpecBytes = 1 << 20;

inline constexpr FieldDef kTopFields[] = {
    {"name",
     "set name to a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
     "with a letter or digit, at most 63 characters (e.g. name: gpt-char)"},
    {"nodes", "set nodes to the number of machines, an integer from 1 to 1024"},
    {"procsPerNode", "set procsPerNode to the number of ranks per node, an integer from 1 to 256"},
    {"command",
     "set command to a non-empty list of strings, e.g. command: [\"/usr/bin/python3\", "
     "\"train.py\"]"},
    {"args", "set args to a list of strings, e.g. args: [\"--steps\", \"600\"]"},
    {"env", "set env to a mapping of NAME: value, e.g. env: {OMP_NUM_THREADS: \"1\"}"},
    {"workdir",
     "set workdir to a directory path (relative paths resolve against the spec file's "
     "directory) or omit it"},
    {"checkpoint",
     "set checkpoint to a mapping with any of: dir, intervalSteps, intervalSeconds, keep, "
     "memorySlots, sharedDir, goldenEvery, objectStore, objectIntervalSteps, peerReplication"},
    {"faultPolicy",
     "set faultPolicy to a mapping with any of: restartBudget, backoff, hangTimeout, spareNodes, "
     "failureRatePerNodeDay, replacementLeadSeconds, heartbeat, stopGraceSeconds, "
     "maxSameFaultWithoutProgress"},
    {"chaos",
     "set chaos to a list of faults, e.g. chaos: [{kind: kill_rank, atSeconds: 30, rank: 1}]"},
};

inline constexpr FieldDef kCheckpointFields[] = {
    {"dir", "set checkpoint.dir to a directory path (relative paths resolve against workdir)"},
    {"intervalSteps",
     "set checkpoint.intervalSteps to an integer >= 0 (0 = no step trigger) or auto (the "
     "controller picks it from checkpoint cost and failure rate)"},
    {"intervalSeconds",
     "set checkpoint.intervalSeconds to a number of seconds >= 0 (0 = no time trigger)"},
    {"keep", "set checkpoint.keep to how many committed checkpoints to retain (an integer >= 1)"},
    {"memorySlots",
     "set checkpoint.memorySlots to the staging ring size per rank, 0 (off) or 2 to 62"},
    {"sharedDir", "set checkpoint.sharedDir to a directory path for the shared tier"},
    {"goldenEvery",
     "set checkpoint.goldenEvery to an integer >= 0: steps divisible by it are kept forever"},
    {"objectStore",
     "set checkpoint.objectStore to an S3 URL, s3://bucket/prefix[?endpoint=URL&region=R]"},
    {"objectIntervalSteps",
     "set checkpoint.objectIntervalSteps to an integer >= 0: upload every N-th step "
     "(0 = every persisted step)"},
    {"peerReplication",
     "set checkpoint.peerReplication to true or false (copy memory snapshots to a peer node)"},
};

inline constexpr FieldDef kFaultFields[] = {
    {"restartBudget", "set faultPolicy.restartBudget to the maximum restarts, an integer >= 0"},
    {"backoff", "set faultPolicy.backoff to a mapping {baseSeconds: 1, capSeconds: 30}"},
    {"hangTimeout",
     "set faultPolicy.hangTimeout to a mapping {floorSeconds: 30, multiplier: 10, "
     "startupSeconds: 300}"},
    {"spareNodes",
     "set faultPolicy.spareNodes to the number of warm standby nodes, 0 to 1024, or auto "
     "(the P99 of node failures within replacementLeadSeconds)"},
    {"failureRatePerNodeDay",
     "set faultPolicy.failureRatePerNodeDay to the expected node failures per node-day, "
     ">= 0 (default 0.0038, Llama 3's rate)"},
    {"replacementLeadSeconds",
     "set faultPolicy.replacementLeadSeconds to the seconds it takes to get a new node, > 0"},
    {"heartbeat", "set faultPolicy.heartbeat to a mapping {intervalSeconds: 1, misses: 3}"},
    {"stopGraceSeconds",
     "set faultPolicy.stopGraceSeconds to the seconds between SIGTERM and SIGKILL, >= 0"},
    {"maxSameFaultWithoutProgress",
     "set faultPolicy.maxSameFaultWithoutProgress to an integer >= 1"},
};

inline constexpr FieldDef kBackoffFields[] = {
    {"baseSeconds", "set faultPolicy.backoff.baseSeconds to the first backoff in seconds, > 0"},
    {"capSeconds",
     "set faultPolicy.backoff.capSeconds to the backoff ceiling in seconds, >= baseSeconds"},
};

inline constexpr FieldDef kHangFields[] = {
    {"floorSeconds",
     "set faultPolicy.hangTimeout.floorSeconds to the minimum hang timeout in seconds, > 0"},
    {"multiplier",
     "set faultPolicy.hangTimeout.multiplier to k in max(floor, k * p99 step time), >= 1"},
    {"startupSeconds",
     "set faultPolicy.hangTimeout.startupSeconds to the launch-to-first-step limit, > 0"},
};

inline constexpr FieldDef kHeartbeatFields[] = {
    {"intervalSeconds", "set faultPolicy.heartbeat.intervalSeconds to a number of seconds > 0"},
    {"misses", "set faultPolicy.heartbeat.misses to an integer >= 1"},
};

inline constexpr FieldDef kChaosFields[] = {
    {"kind", "set kind to one of: kill_rank, hang_rank, nan_loss, kill_agent"},
    {"atSeconds", "set atSeconds to seconds since job start (>= 0), or use atStep instead"},
    {"atStep", "set atStep to a training step (an integer >= 0), or use atSeconds instead"},
    {"rank", "set rank to a global rank from 0 to world size - 1"},
    {"node", "set node to a node index from 0 to nodes - 1"},
};

inline constexpr ChaosKind kAllKinds[] = {ChaosKind::kKillRank, ChaosKind::kHangRank,
                                          ChaosKind::kNanLoss, ChaosKind::kKillAgent};

// Set by the agent for every rank (docs/protocol.md section 3); a spec may not
// override them.
inline constexpr const char* kReservedEnv[] = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
};

// The fix hint of `key` in `fields` ("" if absent).
inline const char* HintFor(std::span<const FieldDef> fields, std::string_view key) {
  for (const FieldDef& f : fields) {
    if (key == f.key) return f.hint;
  }
  return "";
}

inline bool IsReservedEnv(const std::string& s) {
  if (s.rfind("BULWARK_", 0) == 0) return true;
  for (const char* r : kReservedEnv) {
    if (s == r) return true;
  }
  return false;
}

inline bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > kMaxNameLen) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : s) {
    if (!alnum(c) && c != '-') return false;
  }
  return alnum(s.front()) && alnum(s.back());
}

inline bool IsEnvName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    bool ok = c == '_' || (c < 0x80 && std::isalpha(c)) || (i > 0 && c < 0x80 && std::isdigit(c));
    if (!ok) return false;
  }
  return true;
}

// Lexically normalizes and drops a trailing separator ("/a/b/" -> "/a/b").
inline std::string CleanPath(const std::filesystem::path& p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace bulwark::spec_internal
