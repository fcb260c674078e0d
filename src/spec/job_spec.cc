#include "spec/job_spec.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "spec/spec_reader.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using spec_internal::Entry;
using spec_internal::FieldDef;
using spec_internal::SpecReader;

constexpr int kMaxNodes = 1024;
constexpr int kMaxProcsPerNode = 256;
constexpr double kMaxSeconds = 1e9;  // keeps every duration representable in int64 ns
constexpr size_t kMaxNameLen = 63;
constexpr size_t kMaxSpecBytes = 1 << 20;

constexpr FieldDef kTopFields[] = {
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
     "set checkpoint to a mapping with any of: dir, intervalSteps, intervalSeconds, keep"},
    {"faultPolicy",
     "set faultPolicy to a mapping with any of: restartBudget, backoff, hangTimeout, spareNodes, "
     "heartbeat, stopGraceSeconds, maxSameFaultWithoutProgress"},
    {"chaos",
     "set chaos to a list of faults, e.g. chaos: [{kind: kill_rank, atSeconds: 30, rank: 1}]"},
};

constexpr FieldDef kCheckpointFields[] = {
    {"dir", "set checkpoint.dir to a directory path (relative paths resolve against workdir)"},
    {"intervalSteps", "set checkpoint.intervalSteps to an integer >= 0 (0 = no step trigger)"},
    {"intervalSeconds",
     "set checkpoint.intervalSeconds to a number of seconds >= 0 (0 = no time trigger)"},
    {"keep", "set checkpoint.keep to how many committed checkpoints to retain (an integer >= 1)"},
};

constexpr FieldDef kFaultFields[] = {
    {"restartBudget", "set faultPolicy.restartBudget to the maximum restarts, an integer >= 0"},
    {"backoff", "set faultPolicy.backoff to a mapping {baseSeconds: 1, capSeconds: 30}"},
    {"hangTimeout",
     "set faultPolicy.hangTimeout to a mapping {floorSeconds: 30, multiplier: 10, "
     "startupSeconds: 300}"},
    {"spareNodes", "set faultPolicy.spareNodes to the number of warm standby nodes, 0 to 1024"},
    {"heartbeat", "set faultPolicy.heartbeat to a mapping {intervalSeconds: 1, misses: 3}"},
    {"stopGraceSeconds",
     "set faultPolicy.stopGraceSeconds to the seconds between SIGTERM and SIGKILL, >= 0"},
    {"maxSameFaultWithoutProgress",
     "set faultPolicy.maxSameFaultWithoutProgress to an integer >= 1"},
};

constexpr FieldDef kBackoffFields[] = {
    {"baseSeconds", "set faultPolicy.backoff.baseSeconds to the first backoff in seconds, > 0"},
    {"capSeconds",
     "set faultPolicy.backoff.capSeconds to the backoff ceiling in seconds, >= baseSeconds"},
};

constexpr FieldDef kHangFields[] = {
    {"floorSeconds",
     "set faultPolicy.hangTimeout.floorSeconds to the minimum hang timeout in seconds, > 0"},
    {"multiplier",
     "set faultPolicy.hangTimeout.multiplier to k in max(floor, k * p99 step time), >= 1"},
    {"startupSeconds",
     "set faultPolicy.hangTimeout.startupSeconds to the launch-to-first-step limit, > 0"},
};

constexpr FieldDef kHeartbeatFields[] = {
    {"intervalSeconds", "set faultPolicy.heartbeat.intervalSeconds to a number of seconds > 0"},
    {"misses", "set faultPolicy.heartbeat.misses to an integer >= 1"},
};

constexpr FieldDef kChaosFields[] = {
    {"kind", "set kind to one of: kill_rank, hang_rank, nan_loss, kill_agent"},
    {"atSeconds", "set atSeconds to seconds since job start (>= 0), or use atStep instead"},
    {"atStep", "set atStep to a training step (an integer >= 0), or use atSeconds instead"},
    {"rank", "set rank to a global rank from 0 to world size - 1"},
    {"node", "set node to a node index from 0 to nodes - 1"},
};

constexpr ChaosKind kAllKinds[] = {ChaosKind::kKillRank, ChaosKind::kHangRank, ChaosKind::kNanLoss,
                                   ChaosKind::kKillAgent};

// Set by the agent for every rank (docs/protocol.md section 3); a spec may not
// override them.
constexpr const char* kReservedEnv[] = {
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

bool IsReservedEnv(const std::string& s) {
  if (s.rfind("BULWARK_", 0) == 0) return true;
  for (const char* r : kReservedEnv) {
    if (s == r) return true;
  }
  return false;
}

bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > kMaxNameLen) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : s) {
    if (!alnum(c) && c != '-') return false;
  }
  return alnum(s.front()) && alnum(s.back());
}

bool IsEnvName(const std::string& s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    bool ok = c == '_' || (c < 0x80 && std::isalpha(c)) || (i > 0 && c < 0x80 && std::isdigit(c));
    if (!ok) return false;
  }
  return true;
}

// Lexically normalizes and drops a trailing separator ("/a/b/" -> "/a/b").
std::string CleanPath(const fs::path& p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

class Parser {
 public:
  Parser(const std::string& source, const std::string& base_dir)
      : r_(source), base_dir_(base_dir) {}

  // Fills spec_ from the root mapping; errors accumulate in r_.
  void Parse(const YAML::Node& root) {
    const int line = SpecReader::LineOf(root, 1);
    auto f = r_.Fields(root, line, "", "", kTopFields);
    ParseIdentity(f, line);
    ParseWorkdir(f);
    if (auto it = f.find("checkpoint"); it != f.end()) ParseCheckpoint(it->second);
    if (spec_.checkpoint.dir.empty()) {
      spec_.checkpoint.dir = CleanPath(fs::path(spec_.workdir) / "checkpoints" / spec_.name);
    }
    if (auto it = f.find("faultPolicy"); it != f.end()) ParseFaultPolicy(it->second);
    if (auto it = f.find("chaos"); it != f.end()) ParseChaos(it->second);
  }

  SpecReader& reader() { return r_; }
  JobSpec& spec() { return spec_; }

 private:
  void Missing(int line, const char* path, const char* hint) {
    r_.Error(line, path, "required field is missing", "nothing", hint);
  }

  void ParseIdentity(std::map<std::string, Entry>& f, int line) {
    if (auto it = f.find("name"); it == f.end()) {
      Missing(line, "name", kTopFields[0].hint);
    } else if (r_.ReadString(it->second, &spec_.name) && !IsDnsLabel(spec_.name)) {
      std::string problem = spec_.name.size() > kMaxNameLen
                                ? "must be at most 63 characters"
                                : "must be a DNS-1123 label (lowercase letters, digits, '-')";
      r_.Error(it->second.line, "name", problem, SpecReader::Describe(it->second.value),
               it->second.hint);
    }
    long nodes = 1, ppn = 1;
    bool nodes_ok = true, ppn_ok = true;
    if (auto it = f.find("nodes"); it != f.end()) {
      nodes_ok = r_.ReadInt(it->second, 1, kMaxNodes, &nodes);
    }
    if (auto it = f.find("procsPerNode"); it != f.end()) {
      ppn_ok = r_.ReadInt(it->second, 1, kMaxProcsPerNode, &ppn);
    }
    spec_.nodes = static_cast<int>(nodes);
    spec_.procs_per_node = static_cast<int>(ppn);
    world_ok_ = nodes_ok && ppn_ok;
    nodes_ok_ = nodes_ok;

    if (auto it = f.find("command"); it == f.end()) {
      Missing(line, "command", kTopFields[3].hint);
    } else if (r_.ReadStringList(it->second, &spec_.command)) {
      if (spec_.command.empty()) {
        r_.Error(it->second.line, "command", "must not be empty", "an empty list", it->second.hint);
      } else if (spec_.command[0].empty()) {
        r_.Error(SpecReader::LineOf(it->second.value[0], it->second.line), "command[0]",
                 "the program must not be empty", "\"\"", it->second.hint);
      }
    }
    if (auto it = f.find("args"); it != f.end()) r_.ReadStringList(it->second, &spec_.args);
    if (auto it = f.find("env"); it != f.end()) ParseEnv(it->second);
  }

  void ParseEnv(const Entry& e) {
    if (e.value.IsNull()) return;
    if (!e.value.IsMap()) {
      r_.Error(e.line, e.path, "must be a mapping of NAME: value", SpecReader::Describe(e.value),
               e.hint);
      return;
    }
    std::map<std::string, int> first_line;
    for (auto it = e.value.begin(); it != e.value.end(); ++it) {
      const int kl = SpecReader::LineOf(it->first, e.line);
      if (!it->first.IsScalar()) {
        r_.Error(kl, "env", "variable names must be strings", SpecReader::Describe(it->first),
                 e.hint);
        continue;
      }
      const std::string key = it->first.Scalar();
      const std::string path = "env." + key;
      if (!IsEnvName(key)) {
        r_.Error(kl, path, "invalid environment variable name", SpecReader::Describe(it->first),
                 "use letters, digits and '_', not starting with a digit (e.g. MY_VAR)");
        continue;
      }
      if (IsReservedEnv(key)) {
        r_.Error(kl, path, "reserved: the agent sets it for every rank",
                 SpecReader::Describe(it->first),
                 "remove it (see docs/protocol.md, Environment of a rank)");
        continue;
      }
      if (auto [pos, fresh] = first_line.emplace(key, kl); !fresh) {
        r_.Error(kl, path, "duplicate key",
                 "a second definition; the first is at line " + std::to_string(pos->second),
                 "keep only one \"" + key + "\"");
        continue;
      }
      const YAML::Node& v = it->second;
      if (v.IsScalar()) {
        spec_.env[key] = v.Scalar();
      } else if (v.IsNull()) {
        r_.Error(kl, path, "missing value", "null", "write " + key + ": \"\" for an empty value");
      } else {
        r_.Error(SpecReader::LineOf(v, kl), path, "value must be a string", SpecReader::Describe(v),
                 "quote the value, e.g. " + key + ": \"...\"");
      }
    }
  }

  void ParseWorkdir(std::map<std::string, Entry>& f) {
    std::error_code ec;
    fs::path base = base_dir_.empty() ? fs::current_path(ec) : fs::path(base_dir_);
    if (!base.is_absolute()) base = fs::absolute(base, ec);
    fs::path wd = base;
    if (auto it = f.find("workdir"); it != f.end()) {
      std::string s;
      if (r_.ReadString(it->second, &s)) {
        if (s.empty()) {
          r_.Error(it->second.line, "workdir", "must not be empty", "\"\"",
                   "omit workdir to use the spec file's directory, or set a path");
        } else {
          wd = fs::path(s).is_absolute() ? fs::path(s) : base / s;
        }
      }
    }
    spec_.workdir = CleanPath(wd);
  }

  void ParseCheckpoint(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kCheckpointFields);
    CheckpointSpec& c = spec_.checkpoint;
    if (auto it = f.find("dir"); it != f.end()) {
      std::string s;
      if (r_.ReadString(it->second, &s)) {
        if (s.empty()) {
          r_.Error(it->second.line, it->second.path, "must not be empty", "\"\"",
                   "omit dir to use <workdir>/checkpoints/<name>, or set a path");
        } else {
          fs::path p(s);
          c.dir = CleanPath(p.is_absolute() ? p : fs::path(spec_.workdir) / p);
        }
      }
    }
    if (auto it = f.find("intervalSteps"); it != f.end()) {
      r_.ReadInt(it->second, 0, LONG_MAX, &c.interval_steps);
    }
    if (auto it = f.find("intervalSeconds"); it != f.end()) {
      r_.ReadNumber(it->second, 0, false, kMaxSeconds, &c.interval_seconds);
    }
    ReadIntField(f, "keep", 1, INT_MAX, &c.keep);
  }

  void ReadIntField(std::map<std::string, Entry>& f, const char* key, long lo, long hi, int* out) {
    long v = 0;
    if (auto it = f.find(key); it != f.end() && r_.ReadInt(it->second, lo, hi, &v)) {
      *out = static_cast<int>(v);
    }
  }

  void ReadSecondsField(std::map<std::string, Entry>& f, const char* key, double lo,
                        bool lo_exclusive, double* out) {
    if (auto it = f.find(key); it != f.end()) {
      r_.ReadNumber(it->second, lo, lo_exclusive, kMaxSeconds, out);
    }
  }

  void ParseFaultPolicy(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kFaultFields);
    FaultPolicySpec& p = spec_.fault_policy;
    ReadIntField(f, "restartBudget", 0, INT_MAX, &p.restart_budget);
    if (auto it = f.find("backoff"); it != f.end()) {
      auto b = r_.Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                         kBackoffFields);
      ReadSecondsField(b, "baseSeconds", 0, true, &p.backoff_base_seconds);
      ReadSecondsField(b, "capSeconds", 0, true, &p.backoff_cap_seconds);
      if (p.backoff_cap_seconds < p.backoff_base_seconds) {
        auto cap = b.find("capSeconds");
        const Entry& at = cap != b.end() ? cap->second : it->second;
        std::ostringstream got;
        got << "capSeconds " << p.backoff_cap_seconds << " < baseSeconds "
            << p.backoff_base_seconds;
        r_.Error(at.line, "faultPolicy.backoff.capSeconds", "must be >= baseSeconds", got.str(),
                 "raise capSeconds or lower baseSeconds");
      }
    }
    if (auto it = f.find("hangTimeout"); it != f.end()) {
      auto h = r_.Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                         kHangFields);
      ReadSecondsField(h, "floorSeconds", 0, true, &p.hang_timeout_floor_seconds);
      if (auto m = h.find("multiplier"); m != h.end()) {
        r_.ReadNumber(m->second, 1, false, 1e6, &p.hang_timeout_multiplier);
      }
      ReadSecondsField(h, "startupSeconds", 0, true, &p.startup_timeout_seconds);
    }
    ReadIntField(f, "spareNodes", 0, kMaxNodes, &p.spare_nodes);
    if (auto it = f.find("heartbeat"); it != f.end()) {
      auto h = r_.Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                         kHeartbeatFields);
      ReadSecondsField(h, "intervalSeconds", 0, true, &p.heartbeat_interval_seconds);
      ReadIntField(h, "misses", 1, INT_MAX, &p.heartbeat_misses);
    }
    ReadSecondsField(f, "stopGraceSeconds", 0, false, &p.stop_grace_seconds);
    ReadIntField(f, "maxSameFaultWithoutProgress", 1, INT_MAX, &p.max_same_fault_without_progress);
  }

  void ParseChaos(const Entry& e) {
    if (e.value.IsNull()) return;
    if (!e.value.IsSequence()) {
      r_.Error(e.line, e.path, "must be a list of faults", SpecReader::Describe(e.value), e.hint);
      return;
    }
    int i = 0;
    for (const YAML::Node& item : e.value) {
      const std::string path = "chaos[" + std::to_string(i++) + "]";
      const int line = SpecReader::LineOf(item, e.line);
      if (!item.IsMap()) {
        r_.Error(line, path, "must be a mapping", SpecReader::Describe(item),
                 "write each fault as {kind: kill_rank, atSeconds: 30, rank: 1}");
        continue;
      }
      ParseFault(item, line, path);
    }
  }

  void ParseFault(const YAML::Node& item, int line, const std::string& path) {
    auto f = r_.Fields(item, line, path, "", kChaosFields);
    ChaosFault fault;
    bool kind_ok = false;
    if (auto it = f.find("kind"); it == f.end()) {
      r_.Error(line, path + ".kind", "required field is missing", "nothing", kChaosFields[0].hint);
    } else {
      std::string s;
      if (r_.ReadString(it->second, &s)) {
        for (ChaosKind k : kAllKinds) {
          if (s == ChaosKindName(k)) {
            fault.kind = k;
            kind_ok = true;
          }
        }
        if (!kind_ok) {
          r_.Error(it->second.line, it->second.path, "unknown chaos kind",
                   SpecReader::Describe(it->second.value), it->second.hint);
        }
      }
    }
    auto at_s = f.find("atSeconds");
    auto at_step = f.find("atStep");
    if (at_s != f.end() && at_step != f.end()) {
      r_.Error(at_step->second.line, path, "sets both atSeconds and atStep", "atSeconds and atStep",
               "keep exactly one trigger");
    } else if (at_s == f.end() && at_step == f.end()) {
      r_.Error(line, path, "needs a trigger", "neither atSeconds nor atStep",
               "add atSeconds: <seconds since start> or atStep: <step>");
    }
    if (at_s != f.end()) r_.ReadNumber(at_s->second, 0, false, kMaxSeconds, &fault.at_seconds);
    if (at_step != f.end()) r_.ReadInt(at_step->second, 0, LONG_MAX, &fault.at_step);

    if (kind_ok) {
      const bool by_node = fault.kind == ChaosKind::kKillAgent;
      const char* want = by_node ? "node" : "rank";
      const char* other = by_node ? "rank" : "node";
      if (auto it = f.find(other); it != f.end()) {
        r_.Error(it->second.line, it->second.path,
                 std::string("does not apply to kind ") + ChaosKindName(fault.kind),
                 SpecReader::Describe(it->second.value),
                 std::string("use ") + want + " for " + ChaosKindName(fault.kind));
      }
      auto it = f.find(want);
      if (it == f.end()) {
        r_.Error(line, path + "." + want, "required field is missing", "nothing",
                 by_node ? kChaosFields[4].hint : kChaosFields[3].hint);
      } else if (by_node) {
        long limit = nodes_ok_ ? spec_.nodes - 1 : kMaxNodes - 1;
        long v = 0;
        if (r_.ReadInt(it->second, 0, limit, &v)) fault.node = static_cast<int>(v);
      } else {
        long limit = world_ok_ ? spec_.world_size() - 1 : kMaxNodes * kMaxProcsPerNode - 1;
        long v = 0;
        if (r_.ReadInt(it->second, 0, limit, &v)) fault.rank = static_cast<int>(v);
      }
    }
    spec_.chaos.push_back(fault);
  }

  SpecReader r_;
  std::string base_dir_;
  JobSpec spec_;
  bool world_ok_ = true;
  bool nodes_ok_ = true;
};

Status JoinErrors(const std::vector<std::string>& errors) {
  std::string msg;
  for (const std::string& e : errors) {
    if (!msg.empty()) msg += "\n";
    msg += e;
  }
  return InvalidArgument(msg);
}

std::string SyntaxError(const std::string& source, const YAML::Mark& mark, const std::string& msg) {
  const int line = mark.line >= 0 ? mark.line + 1 : 1;
  const int col = mark.column >= 0 ? mark.column + 1 : 1;
  return source + ":" + std::to_string(line) + ": (yaml syntax): " + msg +
         " (got invalid YAML at column " + std::to_string(col) +
         "); fix the YAML syntax there (check indentation, quotes, brackets and the space "
         "after ':')";
}

// Records where each document starts; everything else is ignored.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& m) override { starts.push_back(m); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Syntax-checks the whole stream without building nodes and counts documents.
// yaml-cpp 0.7 neither rejects nor consumes a stray flow indicator such as ','
// in block context: it reports endless empty documents at the same position (and
// YAML::LoadAll then allocates until OOM). A document that starts where the
// previous one started is therefore reported as a syntax error here, and the
// document loop is capped. Throws YAML::Exception on other syntax errors.
Status ScanDocuments(const std::string& text, const std::string& source, int* count,
                     int* second_line) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts h;
  for (int i = 0; i < 3 && parser.HandleNextDocument(h); ++i) {
    const size_t n = h.starts.size();
    if (n >= 2 && h.starts[n - 1].pos == h.starts[n - 2].pos) {
      const YAML::Mark& m = h.starts[n - 1];
      std::string what = "unexpected character";
      if (m.pos >= 0 && static_cast<size_t>(m.pos) < text.size()) {
        what += std::string(" '") + text[static_cast<size_t>(m.pos)] + "'";
      }
      return InvalidArgument(SyntaxError(source, m, what));
    }
  }
  *count = static_cast<int>(h.starts.size());
  *second_line = h.starts.size() >= 2 && h.starts[1].line >= 0 ? h.starts[1].line + 1 : 1;
  return Status::Ok();
}

Result<JobSpec> ParseImpl(const std::string& text, const std::string& source,
                          const std::string& base_dir) {
  SpecReader hints(source);
  if (text.size() > kMaxSpecBytes) {
    hints.Error(1, "", "the spec is too large", std::to_string(text.size()) + " bytes",
                "a job spec should be a few KiB of YAML (limit 1 MiB)");
    return JoinErrors(hints.errors());
  }
  int count = 0, second_line = 1;
  YAML::Node root;
  try {
    BW_RETURN_IF_ERROR(ScanDocuments(text, source, &count, &second_line));
    if (count > 1) {
      hints.Error(second_line, "", "the spec must be a single YAML document",
                  "more than one document",
                  "remove the extra '---' documents or split them into separate files");
      return JoinErrors(hints.errors());
    }
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(SyntaxError(source, e.mark, e.msg));
  }
  if (count == 0 || root.IsNull()) {
    hints.Error(1, "", "the spec is empty", "an empty document",
                "add at least name and command; see docs/job-spec.md");
    return JoinErrors(hints.errors());
  }
  if (!root.IsMap()) {
    hints.Error(SpecReader::LineOf(root, 1), "", "the spec must be a mapping of fields",
                SpecReader::Describe(root),
                "start the file with fields such as name: my-job and command: [...]");
    return JoinErrors(hints.errors());
  }
  Parser p(source, base_dir);
  p.Parse(root);
  if (!p.reader().errors().empty()) return JoinErrors(p.reader().errors());
  return std::move(p.spec());
}

}  // namespace

const char* ChaosKindName(ChaosKind k) {
  switch (k) {
    case ChaosKind::kKillRank:
      return "kill_rank";
    case ChaosKind::kHangRank:
      return "hang_rank";
    case ChaosKind::kNanLoss:
      return "nan_loss";
    case ChaosKind::kKillAgent:
      return "kill_agent";
  }
  return "unknown";
}

Result<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& source_name,
                             const std::string& base_dir) {
  try {
    return ParseImpl(yaml_text, source_name, base_dir);
  } catch (const std::exception& e) {
    return InvalidArgument(source_name + ":1: (top level): could not be parsed (got " +
                           std::string(e.what()) + "); check the file against docs/job-spec.md");
  } catch (...) {
    return InvalidArgument(source_name +
                           ":1: (top level): could not be parsed (got an unknown error); check "
                           "the file against docs/job-spec.md");
  }
}

Result<JobSpec> LoadJobSpec(const std::string& path) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  if (ec) return InvalidArgument("spec path " + path + ": " + ec.message());
  std::FILE* f = std::fopen(abs.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus("open job spec " + path, errno);
  std::string text;
  char buf[64 * 1024];
  int read_errno = 0;
  while (true) {
    size_t n = std::fread(buf, 1, sizeof(buf), f);
    text.append(buf, n);
    if (text.size() > kMaxSpecBytes) break;
    if (n < sizeof(buf)) {
      if (std::ferror(f)) read_errno = errno;
      break;
    }
  }
  std::fclose(f);
  if (read_errno != 0) return ErrnoStatus("read job spec " + path, read_errno);
  if (text.size() > kMaxSpecBytes) {
    return InvalidArgument(path +
                           ":1: (top level): file too large (got more than 1 MiB); a "
                           "job spec should be a few KiB of YAML");
  }
  Result<JobSpec> r = ParseJobSpec(text, path, abs.parent_path().string());
  if (r.ok()) r->source_path = CleanPath(abs);
  return r;
}

}  // namespace bulwark
