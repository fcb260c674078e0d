// ConfigParser: the YAML -> SimConfig walker behind ParseSimConfig. Internal to
// src/sim; split over config.cc (top level, sim), config_cluster.cc (cluster,
// scheduler, queues, failures, faults) and config_workload.cc (strategies, workload).
// Errors accumulate in the SpecReader; never throws itself (yaml-cpp may; the caller
// catches). Not thread-safe; one parser per parse.
#pragma once

#include <yaml-cpp/yaml.h>

#include <climits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/config_schema.h"
#include "sim/sim.h"
#include "spec/spec_reader.h"

namespace bulwark::sim {

class ConfigParser {
 public:
  explicit ConfigParser(std::string source) : r_(std::move(source)) {}
  void Parse(const YAML::Node& root);
  void ParseScheduling(const YAML::Node& root);  // scheduler + queues only
  spec_internal::SpecReader& reader() { return r_; }
  SimConfig& config() { return c_; }

 private:
  using Fields = std::map<std::string, spec_internal::Entry>;
  // Typed optional reads: false when absent or invalid (invalid is reported).
  bool Num(Fields& f, const char* key, double lo, bool excl, double hi, double* out,
           double scale = 1);
  bool Int(Fields& f, const char* key, long lo, long hi, int* out);
  bool Str(Fields& f, const char* key, std::string* out);
  bool Bool(Fields& f, const char* key, bool* out);
  bool IsAuto(Fields& f, const char* key);  // the scalar `auto`
  bool ReadList(const spec_internal::Entry& e, std::vector<YAML::Node>* items);
  static std::string Item(const std::string& path, size_t i);
  // An Entry for list item / map value `n` at `path`.
  static spec_internal::Entry Sub(const YAML::Node& n, int line, const std::string& path,
                                  const std::string& hint) {
    spec_internal::Entry e;
    e.value = n;
    e.line = spec_internal::SpecReader::LineOf(n, line);
    e.path = path;
    e.hint = hint;
    return e;
  }

  void ParseSim(const spec_internal::Entry& e);
  void ParseCluster(const spec_internal::Entry& e);
  void ParseShape(const spec_internal::Entry& e);
  void ParseNodes(const spec_internal::Entry& e);
  void ParseScheduler(const spec_internal::Entry& e);
  void ParsePools(const spec_internal::Entry& e, std::vector<sched::Pool>* out);
  void ParseQueues(const spec_internal::Entry& e);
  void ParseGpuMap(const spec_internal::Entry& e, std::map<std::string, int>* out);
  void ParseStrategies(const spec_internal::Entry& e);
  void ParseStrategy(const spec_internal::Entry& e, Strategy* s);
  void ParseFailures(const spec_internal::Entry& e);
  void ParseFaults(const spec_internal::Entry& e);
  void ParseWorkload(const spec_internal::Entry& e);
  void ParseJob(const YAML::Node& n, int line, const std::string& path, const Job& defaults,
                std::set<std::string>* ids);
  void ParseGenerator(const spec_internal::Entry& e, const Job& defaults);
  // Resolves references; report at `line`/`path` when unknown. -1 when unknown.
  int StrategyIndex(const std::string& name, int line, const std::string& path);
  bool CheckQueue(const std::string& name, int line, const std::string& path);
  bool CheckGang(const std::string& gpu_type, int nodes, int line, const std::string& path);

  spec_internal::SpecReader r_;
  SimConfig c_;
  std::map<std::string, int> queue_line_;  // queue name -> line
};

}  // namespace bulwark::sim
