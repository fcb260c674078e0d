// ConfigParser: strategies and the workload (job trace, generator).
#include <set>

#include "sim/config_parser.h"

namespace bulwark::sim {

using spec_internal::Entry;
using spec_internal::SpecReader;

void ConfigParser::ParseStrategies(const Entry& e) {
  if (!e.value.IsMap()) {
    reader().Error(e.line, e.path, "must be a mapping of name: {...}",
                   SpecReader::Describe(e.value), e.hint);
    return;
  }
  for (const auto& kv : e.value) {
    const YAML::Node k = kv.first;
    const YAML::Node v = kv.second;
    const int line = SpecReader::LineOf(k, e.line);
    if (!k.IsScalar() || k.Scalar().empty()) {
      reader().Error(line, e.path, "strategy names must be non-empty strings",
                     SpecReader::Describe(k), e.hint);
      continue;
    }
    Strategy s;
    s.name = k.Scalar();
    s.policy.restart_budget = 1000000;  // a month at scale restarts hundreds of times
    for (const Strategy& o : c_.strategies) {
      if (o.name == s.name) {
        reader().Error(line, e.path + "." + s.name, "duplicate strategy", s.name,
                       "give every strategy a unique name");
      }
    }
    ParseStrategy(Sub(v, line, e.path + "." + s.name, e.hint), &s);
    c_.strategies.push_back(std::move(s));
  }
}

void ConfigParser::ParseStrategy(const Entry& e, Strategy* s) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kStrategyFields);
  constexpr double kMax = 1e8;
  if (auto it = f.find("detectionSeconds"); it != f.end()) {
    auto d = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                             kDetectionFields);
    for (int t = 0; t < kFaultTypes; ++t) {
      const char* key = kDetectionFields[t].key;
      if (t == static_cast<int>(FaultType::kHang) && IsAuto(d, key)) {
        s->hang_auto = true;
        continue;
      }
      Num(d, key, 0, false, kMax, &s->detect_s[t]);
    }
  }
  Num(f, "restartSeconds", 0, false, kMax, &s->restart_s);
  Num(f, "checkpointLoadSeconds", 0, false, kMax, &s->ckpt_load_s);
  Num(f, "checkpointWriteSeconds", 0, false, kMax, &s->ckpt_write_s);
  Num(f, "persistSeconds", 0, false, kMax, &s->persist_s);
  if (IsAuto(f, "checkpointIntervalSeconds")) {
    s->interval_auto = true;
  } else {
    Num(f, "checkpointIntervalSeconds", 0, true, kMax, &s->interval_s);
  }
  Num(f, "priorNodeDays", 0, false, 1e12, &s->prior_node_days);
  if (IsAuto(f, "standby")) {
    s->standby_auto = true;
  } else {
    Int(f, "standby", 0, 100000, &s->standby);
  }
  if (auto it = f.find("standbyQuantile"); it != f.end()) {
    double q = 0;
    if (reader().ReadNumber(it->second, 0, true, 1, &q)) {
      if (q >= 1) {
        reader().Error(it->second.line, it->second.path, "must be < 1",
                       SpecReader::Describe(it->second.value), it->second.hint);
      } else {
        s->standby_quantile = q;
      }
    }
  }
  Bool(f, "inMemoryCheckpoints", &s->in_memory);
  Num(f, "snapshotStallSeconds", 0, false, kMax, &s->snapshot_stall_s);
  Bool(f, "peerReplication", &s->peer_replication);
  Num(f, "replacementLeadSeconds", 0, false, kMax, &s->replacement_lead_s);
  if (auto it = f.find("faultPolicy"); it != f.end()) {
    auto p = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                             kPolicyFields);
    FaultPolicySpec& fp = s->policy;
    Int(p, "restartBudget", 0, INT_MAX, &fp.restart_budget);
    Num(p, "backoffBaseSeconds", 0, false, kMax, &fp.backoff_base_seconds);
    Num(p, "backoffCapSeconds", 0, false, kMax, &fp.backoff_cap_seconds);
    Num(p, "hangTimeoutFloorSeconds", 0, false, kMax, &fp.hang_timeout_floor_seconds);
    Num(p, "hangTimeoutMultiplier", 0, false, kMax, &fp.hang_timeout_multiplier);
    Int(p, "maxSameFaultWithoutProgress", 0, INT_MAX, &fp.max_same_fault_without_progress);
  }
}

int ConfigParser::StrategyIndex(const std::string& name, int line, const std::string& path) {
  for (size_t i = 0; i < c_.strategies.size(); ++i) {
    if (c_.strategies[i].name == name) return static_cast<int>(i);
  }
  std::string known;
  for (const Strategy& s : c_.strategies) known += (known.empty() ? "" : ", ") + s.name;
  reader().Error(line, path, "unknown strategy", "\"" + name + "\"",
                 "use one of the names under strategies: " + known);
  return -1;
}

bool ConfigParser::CheckQueue(const std::string& name, int line, const std::string& path) {
  if (queue_line_.count(name)) return true;
  std::string known;
  for (const auto& [q, l] : queue_line_) known += (known.empty() ? "" : ", ") + q;
  reader().Error(line, path, "unknown queue", "\"" + name + "\"",
                 "use one of the queues defined under queues: " + known);
  return false;
}

bool ConfigParser::CheckGang(const std::string& gpu_type, int nodes, int line,
                             const std::string& path) {
  int have = 0;
  for (const sched::NodeSpec& n : c_.nodes) have += n.gpu_type == gpu_type;
  if (nodes <= have) return true;
  reader().Error(line, path, "gang larger than the cluster's " + gpu_type + " nodes",
                 std::to_string(nodes) + " nodes; the cluster has " + std::to_string(have),
                 "lower nodes or add " + gpu_type + " nodes to cluster");
  return false;
}

void ConfigParser::ParseWorkload(const Entry& e) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kWorkloadFields);
  Job d;  // defaults
  d.queue = c_.queues.empty() ? "" : c_.queues[0].name;
  if (auto it = f.find("defaults"); it != f.end()) {
    auto df = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                              kJobFields);
    if (Str(df, "queue", &d.queue)) CheckQueue(d.queue, df["queue"].line, df["queue"].path);
    std::string st;
    if (Str(df, "strategy", &st)) {
      d.strategy = std::max(0, StrategyIndex(st, df["strategy"].line, df["strategy"].path));
    }
    Int(df, "priority", INT_MIN, INT_MAX, &d.priority);
    Str(df, "gpuType", &d.gpu_type);
    Num(df, "stepSeconds", 0, true, 1e6, &d.step_s);
    if (auto t = df.find("tier"); t != df.end()) {
      std::string s;
      if (reader().ReadString(t->second, &s)) {
        if (s == "research") {
          d.tier = sched::Tier::kResearch;
        } else if (s != "production") {
          reader().Error(t->second.line, t->second.path, "unknown tier", "\"" + s + "\"",
                         t->second.hint);
        }
      }
    }
  }
  const bool has_jobs = f.count("jobs") > 0, has_gen = f.count("generator") > 0;
  if (!has_jobs && !has_gen) {
    reader().Error(e.line, e.path, "needs jobs or generator", "neither", e.hint);
  }
  if (has_jobs) {
    std::vector<YAML::Node> items;
    if (ReadList(f["jobs"], &items)) {
      std::set<std::string> ids;
      for (size_t i = 0; i < items.size(); ++i) {
        ParseJob(items[i], f["jobs"].line, Item(f["jobs"].path, i), d, &ids);
      }
    }
  }
  if (has_gen) ParseGenerator(f["generator"], d);
}

void ConfigParser::ParseJob(const YAML::Node& n, int line, const std::string& path,
                            const Job& defaults, std::set<std::string>* ids) {
  Entry it = Sub(n, line, path, kWorkloadFields[1].hint);
  auto f = reader().Fields(it.value, it.line, it.path, it.hint, kJobFields);
  Job j = defaults;
  j.id = "job-" + std::to_string(c_.jobs.size());
  if (Str(f, "id", &j.id) && !ids->insert(j.id).second) {
    reader().Error(f["id"].line, f["id"].path, "duplicate job id", "\"" + j.id + "\"",
                   "give every job a unique id");
  }
  if (Str(f, "queue", &j.queue)) CheckQueue(j.queue, f["queue"].line, f["queue"].path);
  Num(f, "submitHours", 0, false, 1e7, &j.submit_s, 3600.0);
  Int(f, "nodes", 1, 1000000, &j.nodes);
  Str(f, "gpuType", &j.gpu_type);
  Int(f, "priority", INT_MIN, INT_MAX, &j.priority);
  if (!Num(f, "workHours", 0, true, 1e7, &j.work_s, 3600.0) && !f.count("workHours")) {
    reader().Error(it.line, it.path + ".workHours", "required field is missing", "nothing",
                   kJobFields[8].hint);
  }
  Num(f, "stepSeconds", 0, true, 1e6, &j.step_s);
  std::string st;
  if (Str(f, "strategy", &st)) {
    j.strategy = std::max(0, StrategyIndex(st, f["strategy"].line, f["strategy"].path));
  }
  if (auto t = f.find("tier"); t != f.end()) {
    std::string s;
    if (reader().ReadString(t->second, &s)) {
      if (s == "research" || s == "production") {
        j.tier = s == "research" ? sched::Tier::kResearch : sched::Tier::kProduction;
      } else {
        reader().Error(t->second.line, t->second.path, "unknown tier", "\"" + s + "\"",
                       t->second.hint);
      }
    }
  }
  if (auto t = f.find("topology"); t != f.end()) {
    std::string s;
    if (reader().ReadString(t->second, &s)) {
      const char* names[] = {"rack", "block", "zone", "any"};
      bool ok = false;
      for (int k = 0; k < 4; ++k) {
        if (s == names[k]) {
          j.required_level = static_cast<sched::TopologyLevel>(k);
          ok = true;
        }
      }
      if (!ok)
        reader().Error(t->second.line, t->second.path, "unknown level", "\"" + s + "\"",
                       t->second.hint);
    }
  }
  if (j.queue.empty()) {
    reader().Error(it.line, it.path + ".queue", "required field is missing", "nothing",
                   kJobFields[1].hint);
  }
  CheckGang(j.gpu_type, j.nodes, f.count("nodes") ? f["nodes"].line : it.line, it.path + ".nodes");
  c_.jobs.push_back(std::move(j));
}

void ConfigParser::ParseGenerator(const Entry& e, const Job& d) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kGeneratorFields);
  Generator g;
  g.gpu_type = d.gpu_type;
  g.step_s = d.step_s;
  g.strategy = d.strategy;
  g.production_share = d.tier == sched::Tier::kProduction ? 1.0 : 0.0;
  g.priorities = {{d.priority, 1.0}};
  if (!d.queue.empty()) g.queues = {{d.queue, 1.0}};
  Int(f, "count", 0, 10000000, &g.count);
  Num(f, "arrivalsPerHour", 0, true, 1e7, &g.arrivals_per_hour);
  Num(f, "startHours", 0, false, 1e7, &g.start_s, 3600.0);
  Num(f, "productionShare", 0, false, 1, &g.production_share);
  Str(f, "gpuType", &g.gpu_type);
  Num(f, "stepSeconds", 0, true, 1e6, &g.step_s);
  std::string st;
  if (Str(f, "strategy", &st)) {
    g.strategy = std::max(0, StrategyIndex(st, f["strategy"].line, f["strategy"].path));
  }
  if (auto it = f.find("workHours"); it != f.end()) {
    auto wf = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                              kWorkHoursFields);
    Num(wf, "median", 0, true, 1e7, &g.work_median_h);
    Num(wf, "sigma", 0, false, 10, &g.work_sigma);
    Num(wf, "max", 0, true, 1e7, &g.work_max_h);
  }
  // Weighted lists: sizes {nodes, weight}, queues {name, weight}, priorities {priority, weight}.
  auto weighted = [&](const char* key, const char* what, auto&& take) {
    auto it = f.find(key);
    if (it == f.end()) return;
    std::vector<YAML::Node> items;
    if (!ReadList(it->second, &items)) return;
    if (items.empty()) {
      reader().Error(it->second.line, it->second.path, "must not be empty", "an empty list",
                     it->second.hint);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Entry sub = Sub(items[i], it->second.line, Item(it->second.path, i), it->second.hint);
      auto wf = reader().Fields(sub.value, sub.line, sub.path, sub.hint, kWeightedFields);
      double w = 1;
      Num(wf, "weight", 0, true, 1e12, &w);
      if (!wf.count(what)) {
        reader().Error(sub.line, sub.path + "." + what, "required field is missing", "nothing",
                       sub.hint);
        continue;
      }
      take(wf, w);
    }
  };
  weighted("sizes", "nodes", [&](auto& wf, double w) {
    int n = 1;
    if (Int(wf, "nodes", 1, 1000000, &n) &&
        CheckGang(g.gpu_type, n, wf["nodes"].line, wf["nodes"].path)) {
      g.sizes.emplace_back(n, w);
    }
  });
  if (f.count("queues")) g.queues.clear();
  weighted("queues", "name", [&](auto& wf, double w) {
    std::string q;
    if (Str(wf, "name", &q) && CheckQueue(q, wf["name"].line, wf["name"].path)) {
      g.queues.emplace_back(q, w);
    }
  });
  if (f.count("priorities")) g.priorities.clear();
  weighted("priorities", "priority", [&](auto& wf, double w) {
    int p = 0;
    if (Int(wf, "priority", INT_MIN, INT_MAX, &p)) g.priorities.emplace_back(p, w);
  });
  if (g.sizes.empty()) g.sizes = {{1, 1.0}};
  if (g.queues.empty()) {
    reader().Error(e.line, e.path + ".queues", "no queue to submit to", "nothing",
                   kGeneratorFields[5].hint);
  }
  c_.generator = g;
}

}  // namespace bulwark::sim
