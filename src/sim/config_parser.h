// ConfigParser: the YAML -> SimConfig walker behind ParseSimConfig. Internal to
// src/sim; split over config.cc (top level, sim), config_cluster.cc (cluster,
// failures, faults) and config_workload.cc (strategies, workload); the scheduler and
// queues sections are the scheduler's own parser (sched/config_sections.h). Errors
// accumulate in the reader(); never throws itself (yaml-cpp may; ParseDocument
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
#include "spec/field_reader.h"
#include "spec/spec_reader.h"

namespace bulwark::sim {

class ConfigParser : public spec_internal::FieldReader {
 public:
  explicit ConfigParser(std::string source) : FieldReader(std::move(source)) {}
  void Parse(const YAML::Node& root);
  SimConfig& config() { return c_; }

 private:
  void ParseSim(const spec_internal::Entry& e);
  void ParseCluster(const spec_internal::Entry& e);
  void ParseShape(const spec_internal::Entry& e);
  void ParseNodes(const spec_internal::Entry& e);
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

  SimConfig c_;
  std::map<std::string, int> queue_line_;  // queue name -> line
};

}  // namespace bulwark::sim
