#include "spec/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>
#include <system_error>

#include "spec/job_fields.h"
#include "spec/job_spec_schema.h"
#include "spec/spec_reader.h"
#include "spec/yaml_document.h"

namespace bulwark {
namespace spec_internal {
namespace {

namespace fs = std::filesystem;

class Parser {
 public:
  Parser(SpecReader& r, const JobFieldsOptions& o, JobSpec* spec) : r_(r), o_(o), spec_(*spec) {}

  // Fills spec_ from the mapping; errors accumulate in r_.
  std::map<std::string, Entry> Parse(const YAML::Node& root, int line) {
    std::vector<FieldDef> fields;
    std::span<const FieldDef> base =
        o_.name.empty() ? TopFields() : std::span<const FieldDef>(kJobFields);
    fields.assign(base.begin(), base.end());
    fields.insert(fields.end(), o_.extra_fields.begin(), o_.extra_fields.end());
    auto f = r_.Fields(root, line, o_.root_path, "", fields);
    // Entries must point into the static tables, not into the local `fields`.
    for (auto& [key, entry] : f) {
      for (std::span<const FieldDef> table : {base, o_.extra_fields}) {
        for (const FieldDef& d : table) {
          if (key == d.key) entry.def = &d;
        }
      }
    }
    ParseIdentity(f, line);
    ParseWorkdir(f);
    if (auto it = f.find("checkpoint"); it != f.end()) ParseCheckpoint(it->second);
    if (spec_.checkpoint.dir.empty() && o_.paths == PathMode::kResolve) {
      spec_.checkpoint.dir = CleanPath(fs::path(spec_.workdir) / "checkpoints" / spec_.name);
    }
    if (auto it = f.find("faultPolicy"); it != f.end()) ParseFaultPolicy(it->second);
    if (auto it = f.find("elastic"); it != f.end()) ParseElastic(it->second);
    if (auto it = f.find("monitoring"); it != f.end()) ParseMonitoring(it->second);
    if (auto it = f.find("slurm"); it != f.end()) ParseSlurm(it->second);
    if (auto it = f.find("chaos"); it != f.end()) ParseChaos(it->second);
    return f;
  }

 private:
  // The path of `rel` in messages, under the mapping's own path.
  std::string P(const std::string& rel) const {
    return o_.root_path.empty() ? rel : o_.root_path + "." + rel;
  }

  void Missing(int line, const std::string& path, const char* hint) {
    r_.Error(line, path, "required field is missing", "nothing", hint);
  }

  void ParseIdentity(std::map<std::string, Entry>& f, int line) {
    if (!o_.name.empty()) {
      spec_.name = o_.name;
    } else if (auto it = f.find("name"); it == f.end()) {
      Missing(line, P("name"), kNameField.hint);
    } else if (r_.ReadString(it->second, &spec_.name) && !IsDnsLabel(spec_.name)) {
      std::string problem = spec_.name.size() > kMaxNameLen
                                ? "must be at most 63 characters"
                                : "must be a DNS-1123 label (lowercase letters, digits, '-')";
      r_.Error(it->second.line, it->second.path, problem, SpecReader::Describe(it->second.value),
               it->second.hint);
    }
    long nodes = 1, ppn = 1;
    bool nodes_ok = true, ppn_ok = true;
    if (auto it = f.find("nodes"); it != f.end()) nodes_ok = r_.ReadInt(it->second, &nodes);
    if (auto it = f.find("procsPerNode"); it != f.end()) ppn_ok = r_.ReadInt(it->second, &ppn);
    spec_.nodes = static_cast<int>(nodes);
    spec_.procs_per_node = static_cast<int>(ppn);
    world_ok_ = nodes_ok && ppn_ok;
    nodes_ok_ = nodes_ok;

    if (auto it = f.find("command"); it == f.end()) {
      if (!o_.command_optional) Missing(line, P("command"), HintFor(kJobFields, "command"));
    } else if (r_.ReadStringList(it->second, &spec_.command)) {
      if (spec_.command.empty()) {
        r_.Error(it->second.line, it->second.path, "must not be empty", "an empty list",
                 it->second.hint);
      } else if (spec_.command[0].empty()) {
        r_.Error(SpecReader::LineOf(it->second.value[0], it->second.line), P("command[0]"),
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
    // yaml-cpp iterators yield pairs by value; `it->first` would dangle.
    for (const auto& kv : e.value) {
      const YAML::Node k = kv.first;
      const YAML::Node v = kv.second;
      const int kl = SpecReader::LineOf(k, e.line);
      if (!k.IsScalar()) {
        r_.Error(kl, e.path, "variable names must be strings", SpecReader::Describe(k), e.hint);
        continue;
      }
      const std::string key = k.Scalar();
      const std::string path = e.path + "." + key;
      if (!IsEnvName(key)) {
        r_.Error(kl, path, "invalid environment variable name", SpecReader::Describe(k),
                 "use letters, digits and '_', not starting with a digit (e.g. MY_VAR)");
        continue;
      }
      if (IsReservedEnv(key)) {
        r_.Error(kl, path, "reserved: the agent sets it for every rank", SpecReader::Describe(k),
                 "remove it (see docs/protocol.md, Environment of a rank)");
        continue;
      }
      if (auto [pos, fresh] = first_line.emplace(key, kl); !fresh) {
        r_.Error(kl, path, "duplicate key",
                 "a second definition; the first is at line " + std::to_string(pos->second),
                 "keep only one \"" + key + "\"");
        continue;
      }
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
    const bool container = o_.paths == PathMode::kContainer;
    std::error_code ec;
    fs::path base;
    if (!container) {
      base = o_.base_dir.empty() ? fs::current_path(ec) : fs::path(o_.base_dir);
      if (!base.is_absolute()) base = fs::absolute(base, ec);
    }
    fs::path wd = base;
    if (auto it = f.find("workdir"); it != f.end()) {
      std::string s;
      if (r_.ReadString(it->second, &s)) {
        if (s.empty()) {
          r_.Error(it->second.line, it->second.path, "must not be empty", "\"\"",
                   container ? "omit workdir to use the image's working directory, or set a path"
                             : "omit workdir to use the spec file's directory, or set a path");
        } else {
          wd = fs::path(s).is_absolute() ? fs::path(s) : base / s;
        }
      }
    }
    spec_.workdir = wd.empty() ? "" : CleanPath(wd);
  }

  // A checkpoint path: relative ones resolve against workdir (kept relative inside a
  // container whose workdir is the image's).
  std::string ResolveUnderWorkdir(const std::string& s) const {
    fs::path p(s);
    if (p.is_absolute() || spec_.workdir.empty()) return CleanPath(p);
    return CleanPath(fs::path(spec_.workdir) / p);
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
          c.dir = ResolveUnderWorkdir(s);
        }
      }
    }
    if (auto it = f.find("intervalSteps"); it != f.end()) {
      if (IsAuto(it->second)) {
        c.interval_auto = true;
        auto slots = f.find("memorySlots");
        if (slots != f.end() && slots->second.value.IsScalar() &&
            slots->second.value.Scalar() == "0") {
          r_.Error(it->second.line, it->second.path, "auto needs the memory tier",
                   "auto with memorySlots: 0",
                   "set memorySlots to 2 or more, or give intervalSteps a number");
        }
      } else {
        r_.ReadInt(it->second, &c.interval_steps);
      }
    }
    if (auto it = f.find("intervalSeconds"); it != f.end()) {
      r_.ReadNumber(it->second, &c.interval_seconds);
    }
    ReadIntField(f, "keep", &c.keep);
    if (auto it = f.find("memorySlots"); it != f.end()) {
      long v = 0;
      if (r_.ReadInt(it->second, &v)) {
        if (v == 1) {
          r_.Error(it->second.line, it->second.path, "must be 0 or at least 2", "1",
                   "use 0 to turn the memory tier off, or 2..62 snapshots");
        } else {
          c.memory_slots = static_cast<int>(v);
        }
      }
    }
    if (auto it = f.find("sharedDir"); it != f.end()) {
      std::string s;
      if (r_.ReadString(it->second, &s) && !s.empty()) c.shared_dir = ResolveUnderWorkdir(s);
    }
    if (auto it = f.find("goldenEvery"); it != f.end()) {
      r_.ReadInt(it->second, &c.golden_every);
    }
    if (auto it = f.find("objectStore"); it != f.end()) {
      std::string s;
      if (r_.ReadString(it->second, &s)) {
        const bool s3 = s.rfind("s3://", 0) == 0;
        const std::string rest = s3 ? s.substr(5) : "";
        const std::string bucket = rest.substr(0, rest.find_first_of("/?"));
        if (!s3 || bucket.empty()) {
          r_.Error(it->second.line, it->second.path, "is not an S3 URL", "\"" + s + "\"",
                   "use s3://bucket/prefix, with ?endpoint=http://host:port for a non-AWS "
                   "server; credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY");
        } else {
          c.object_store = s;
        }
      }
    }
    if (auto it = f.find("objectIntervalSteps"); it != f.end()) {
      r_.ReadInt(it->second, &c.object_interval_steps);
    }
    ReadBoolField(f, "peerReplication", &c.peer_replication);
    ReadNumberField(f, "peerPushShare", &c.peer_push_share);
  }

  // `auto` as a plain scalar (quoted "auto" too: it cannot be a number either way).
  static bool IsAuto(const Entry& e) { return e.value.IsScalar() && e.value.Scalar() == "auto"; }

  void ReadBoolField(std::map<std::string, Entry>& f, const char* key, bool* out) {
    auto it = f.find(key);
    std::string s;
    if (it == f.end() || !r_.ReadString(it->second, &s)) return;
    if (s == "true" || s == "false") {
      *out = s == "true";
    } else {
      r_.Error(it->second.line, it->second.path, "must be true or false", s,
               std::string("write ") + key + ": true or " + key + ": false");
    }
  }

  void ReadIntField(std::map<std::string, Entry>& f, const char* key, int* out) {
    long v = 0;
    if (auto it = f.find(key); it != f.end() && r_.ReadInt(it->second, &v)) {
      *out = static_cast<int>(v);
    }
  }

  void ReadNumberField(std::map<std::string, Entry>& f, const char* key, double* out) {
    if (auto it = f.find(key); it != f.end()) r_.ReadNumber(it->second, out);
  }

  void ParseFaultPolicy(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kFaultFields);
    FaultPolicySpec& p = spec_.fault_policy;
    ReadIntField(f, "restartBudget", &p.restart_budget);
    if (auto it = f.find("backoff"); it != f.end()) {
      auto b = r_.Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                         kBackoffFields);
      ReadNumberField(b, "baseSeconds", &p.backoff_base_seconds);
      ReadNumberField(b, "capSeconds", &p.backoff_cap_seconds);
      if (p.backoff_cap_seconds < p.backoff_base_seconds) {
        auto cap = b.find("capSeconds");
        const Entry& at = cap != b.end() ? cap->second : it->second;
        std::ostringstream got;
        got << "capSeconds " << p.backoff_cap_seconds << " < baseSeconds "
            << p.backoff_base_seconds;
        r_.Error(at.line, it->second.path + ".capSeconds", "must be >= baseSeconds", got.str(),
                 "raise capSeconds or lower baseSeconds");
      }
    }
    if (auto it = f.find("hangTimeout"); it != f.end()) {
      auto h = r_.Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                         kHangFields);
      ReadNumberField(h, "floorSeconds", &p.hang_timeout_floor_seconds);
      ReadNumberField(h, "multiplier", &p.hang_timeout_multiplier);
      ReadNumberField(h, "startupSeconds", &p.startup_timeout_seconds);
    }
    if (auto it = f.find("spareNodes"); it != f.end()) {
      long v = 0;
      if (IsAuto(it->second)) {
        p.spare_nodes_auto = true;
      } else if (r_.ReadInt(it->second, &v)) {
        p.spare_nodes = static_cast<int>(v);
      }
    }
    ReadNumberField(f, "failureRatePerNodeDay", &p.failures_per_node_day);
    ReadNumberField(f, "replacementLeadSeconds", &p.replacement_lead_seconds);
    if (auto it = f.find("heartbeat"); it != f.end()) {
      auto h = r_.Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                         kHeartbeatFields);
      ReadNumberField(h, "intervalSeconds", &p.heartbeat_interval_seconds);
      ReadIntField(h, "misses", &p.heartbeat_misses);
    }
    ReadNumberField(f, "stopGraceSeconds", &p.stop_grace_seconds);
    ReadIntField(f, "maxSameFaultWithoutProgress", &p.max_same_fault_without_progress);
    ReadBoolField(f, "inProcessRestart", &p.in_process_restart);
    ReadBoolField(f, "diagnoseSuspectNodes", &p.diagnose_suspect_nodes);
    ReadNumberField(f, "parkTimeoutSeconds", &p.park_timeout_seconds);
    if (auto it = f.find("warmRanks"); it != f.end()) {
      long v = 0;
      if (IsAuto(it->second)) {
        p.warm_ranks = -1;
      } else if (r_.ReadInt(it->second, &v)) {
        p.warm_ranks = static_cast<int>(v);
      }
    }
  }

  void ParseElastic(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kElasticFields);
    ReadIntField(f, "minNodes", &spec_.elastic.min_nodes);
    ReadNumberField(f, "waitSeconds", &spec_.elastic.wait_seconds);
    auto it = f.find("minNodes");
    if (it == f.end() && e.value.IsMap()) {
      Missing(e.line, e.path + ".minNodes", kElasticFields[0].hint);
    }
    if (it != f.end() && nodes_ok_ && spec_.elastic.min_nodes > spec_.nodes) {
      r_.Error(it->second.line, it->second.path, "must be at most nodes",
               std::to_string(spec_.elastic.min_nodes) + " > nodes " + std::to_string(spec_.nodes),
               "lower elastic.minNodes or raise nodes (the size the job grows back to)");
    }
  }

  void ParseMonitoring(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kMonitoringFields);
    MonitoringSpec& m = spec_.monitoring;
    ReadNumberField(f, "peakFlops", &m.peak_flops);
    if (auto it = f.find("dtype"); it != f.end() && r_.ReadString(it->second, &m.dtype)) {
      bool known = false;
      for (const char* d : kDtypeNames) known = known || m.dtype == d;
      if (!known) {
        r_.Error(it->second.line, it->second.path, "unknown dtype", m.dtype, it->second.hint);
        m.dtype = "bf16";
      }
    }
    ReadNumberField(f, "pricePerGpuHour", &m.price_per_gpu_hour);
    ReadNumberField(f, "ettrTarget", &m.ettr_target);
    ReadNumberField(f, "stragglerThreshold", &m.straggler_threshold);
    ReadNumberField(f, "dataWaitThreshold", &m.data_wait_threshold);
    ReadNumberField(f, "lossSpikeFactor", &m.loss_spike_factor);
    if (auto it = f.find("totalSteps"); it != f.end()) r_.ReadInt(it->second, &m.total_steps);
    ReadBoolField(f, "lossSpikeRollback", &m.loss_spike_rollback);
  }

  void ParseSlurm(const Entry& e) {
    auto f = r_.Fields(e.value, e.line, e.path, e.hint, kSlurmFields);
    SlurmSpec& s = spec_.slurm;
    for (auto [key, out] : {std::pair{"partition", &s.partition},
                            {"account", &s.account},
                            {"qos", &s.qos},
                            {"time", &s.time},
                            {"constraint", &s.constraint}}) {
      auto it = f.find(key);
      if (it == f.end() || !r_.ReadString(it->second, out)) continue;
      std::string problem = out->empty() ? "must not be empty" : SlurmValueProblem(key, *out);
      if (problem.empty()) continue;
      if (!out->empty()) problem = "not " + problem;
      r_.Error(it->second.line, it->second.path, problem, SpecReader::Describe(it->second.value),
               it->second.hint);
      out->clear();
    }
    ReadIntField(f, "growNodes", &s.grow_nodes);
  }

  void ParseChaos(const Entry& e) {
    if (e.value.IsNull()) return;
    if (!e.value.IsSequence()) {
      r_.Error(e.line, e.path, "must be a list of faults", SpecReader::Describe(e.value), e.hint);
      return;
    }
    if (e.def->max_items > 0 && e.value.size() > static_cast<size_t>(e.def->max_items)) {
      r_.Error(e.line, e.path, "too many faults", std::to_string(e.value.size()) + " faults",
               "inject at most " + std::to_string(e.def->max_items) + " faults per job");
      return;
    }
    int i = 0;
    for (const YAML::Node& item : e.value) {
      const std::string path = e.path + "[" + std::to_string(i++) + "]";
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
      r_.Error(line, path + ".kind", "required field is missing", "nothing",
               HintFor(kChaosFields, "kind"));
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
    if (at_s != f.end()) r_.ReadNumber(at_s->second, &fault.at_seconds);
    if (at_step != f.end()) r_.ReadInt(at_step->second, &fault.at_step);
    ReadNumberField(f, "factor", &fault.factor);
    ReadNumberField(f, "delaySeconds", &fault.delay_seconds);
    if (kind_ok) {
      const bool wants_factor = fault.kind == ChaosKind::kSlowRank ||
                                fault.kind == ChaosKind::kSlowLink ||
                                fault.kind == ChaosKind::kLossSpike;
      const bool wants_delay = fault.kind == ChaosKind::kSlowData;
      for (const auto& [key, wanted] :
           {std::pair<const char*, bool>{"factor", wants_factor}, {"delaySeconds", wants_delay}}) {
        auto it = f.find(key);
        if (it != f.end() && !wanted) {
          r_.Error(it->second.line, it->second.path,
                   std::string("does not apply to kind ") + ChaosKindName(fault.kind),
                   SpecReader::Describe(it->second.value),
                   "factor goes with slow_rank, slow_link and loss_spike, delaySeconds with "
                   "slow_data");
        }
      }
      if (fault.factor == 0 &&
          (fault.kind == ChaosKind::kSlowRank || fault.kind == ChaosKind::kSlowLink)) {
        fault.factor = 3;
      }
      if (fault.factor == 0 && fault.kind == ChaosKind::kLossSpike) fault.factor = 20;
      if (fault.delay_seconds == 0 && wants_delay) fault.delay_seconds = 0.2;
    }

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
                 by_node ? HintFor(kChaosFields, "node") : HintFor(kChaosFields, "rank"));
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

  SpecReader& r_;
  const JobFieldsOptions& o_;
  JobSpec& spec_;
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

Result<JobSpec> ParseNodeImpl(const YAML::Node& root, const std::string& source,
                              const JobFieldsOptions& o) {
  SpecReader hints(source);
  if (root.IsNull()) {
    hints.Error(1, "", "the spec is empty", "an empty document",
                "add at least name and command; see docs/job-spec.md");
    return JoinErrors(hints.SortedErrors());
  }
  if (!root.IsMap()) {
    hints.Error(SpecReader::LineOf(root, 1), "", "the spec must be a mapping of fields",
                SpecReader::Describe(root),
                "start the file with fields such as name: my-job and command: [...]");
    return JoinErrors(hints.SortedErrors());
  }
  SpecReader r(source);
  JobSpec spec;
  ParseJobFields(r, root, SpecReader::LineOf(root, 1), o, &spec);
  if (r.has_errors()) return JoinErrors(r.SortedErrors());
  return spec;
}

Result<JobSpec> ParseImpl(const std::string& text, const std::string& source,
                          const JobFieldsOptions& o) {
  if (text.size() > kMaxSpecBytes) {
    SpecReader hints(source);
    hints.Error(1, "", "the spec is too large", std::to_string(text.size()) + " bytes",
                "a job spec should be a few KiB of YAML (limit 1 MiB)");
    return JoinErrors(hints.SortedErrors());
  }
  Result<YAML::Node> doc = LoadSingleDocument(text, source);
  if (!doc.ok()) return doc.status();
  return ParseNodeImpl(*doc, source, o);
}

// Converts what escapes the field readers (yaml-cpp's conversions, bad_alloc) to one
// top-level error.
template <typename F>
Result<JobSpec> Guarded(const std::string& source, F&& parse) {
  try {
    return parse();
  } catch (const std::exception& e) {
    return InvalidArgument(source + ":1: (top level): could not be parsed (got " +
                           std::string(e.what()) + "); check the file against docs/job-spec.md");
  } catch (...) {
    return InvalidArgument(source +
                           ":1: (top level): could not be parsed (got an unknown error); check "
                           "the file against docs/job-spec.md");
  }
}

}  // namespace

Result<JobSpec> ParseJobSpecText(const std::string& text, const std::string& source,
                                 const JobFieldsOptions& o) {
  return Guarded(source, [&] { return ParseImpl(text, source, o); });
}

Result<JobSpec> ParseJobSpecNode(const YAML::Node& root, const std::string& source,
                                 const JobFieldsOptions& o) {
  return Guarded(source, [&] { return ParseNodeImpl(root, source, o); });
}

Result<std::string> ReadSpecFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
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
  return text;
}

std::map<std::string, Entry> ParseJobFields(SpecReader& r, const YAML::Node& map, int line,
                                            const JobFieldsOptions& o, JobSpec* spec) {
  return Parser(r, o, spec).Parse(map, line);
}

}  // namespace spec_internal

std::string SlurmValueProblem(const std::string& key, const std::string& value) {
  static const std::regex name_re("[A-Za-z0-9_.+-]+");
  static const std::regex time_re(
      "[0-9]+|[0-9]+:[0-9]{1,2}|[0-9]+:[0-9]{1,2}:[0-9]{1,2}|[0-9]+-[0-9]+|"
      "[0-9]+-[0-9]+:[0-9]{1,2}|[0-9]+-[0-9]+:[0-9]{1,2}:[0-9]{1,2}|UNLIMITED|INFINITE");
  static const std::regex constraint_re("[A-Za-z0-9_.*:,&|!()\\[\\]-]+");
  struct Form {
    const char* key;
    const std::regex* re;
    const char* expect;
  };
  static const Form kForms[] = {
      {"partition", &name_re, "a partition name (letters, digits, _.+-)"},
      {"account", &name_re, "an account name (letters, digits, _.+-)"},
      {"qos", &name_re, "a QOS name (letters, digits, _.+-)"},
      {"time", &time_re,
       "a Slurm time limit: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"},
      {"constraint", &constraint_re,
       "a Slurm constraint (features joined by & | , without spaces)"},
  };
  for (const Form& f : kForms) {
    if (key != f.key) continue;
    return value.empty() || std::regex_match(value, *f.re) ? "" : f.expect;
  }
  return "a Slurm option this check does not know (" + key + ")";
}

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
    case ChaosKind::kSlowRank:
      return "slow_rank";
    case ChaosKind::kSlowData:
      return "slow_data";
    case ChaosKind::kLossSpike:
      return "loss_spike";
    case ChaosKind::kSdc:
      return "sdc";
    case ChaosKind::kSlowLink:
      return "slow_link";
  }
  return "unknown";
}

Result<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& source_name,
                             const std::string& base_dir) {
  spec_internal::JobFieldsOptions o;
  o.base_dir = base_dir;
  return spec_internal::ParseJobSpecText(yaml_text, source_name, o);
}

Result<JobSpec> LoadJobSpec(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return InvalidArgument("spec path " + path + ": " + ec.message());
  Result<std::string> text = spec_internal::ReadSpecFile(path);
  if (!text.ok()) return text.status();
  Result<JobSpec> r = ParseJobSpec(*text, path, abs.parent_path().string());
  if (r.ok()) r->source_path = spec_internal::CleanPath(abs);
  return r;
}

}  // namespace bulwark
