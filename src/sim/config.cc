// ParseSimConfig: YAML -> SimConfig with the job spec's error machinery (FieldReader:
// every problem "<source>:<line>: <field.path>: <problem> (got X); <fix>", all collected
// in one pass); the scheduler and queues sections by the scheduler's own parser
// (sched/config_sections.h). Cross-references (queue, strategy, node names) are
// checked here so the errors carry line numbers; the scheduler re-validates at
// RunSimulation.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "sched/config_sections.h"
#include "sim/config_parser.h"
#include "sim/presets.h"
#include "sim/sim.h"

namespace bulwark::sim {

using spec_internal::Entry;
using spec_internal::SpecReader;

void ConfigParser::Parse(const YAML::Node& root) {
  const int line = SpecReader::LineOf(root, 1);
  auto f = reader().Fields(root, line, "", "", kTopFields);
  if (auto it = f.find("sim"); it != f.end()) ParseSim(it->second);
  if (auto it = f.find("cluster"); it == f.end()) {
    reader().Error(line, "cluster", "required field is missing", "nothing", kTopFields[1].hint);
  } else {
    ParseCluster(it->second);
  }
  if (auto it = f.find("scheduler"); it != f.end()) {
    sched::internal::ParseSchedulerSection(*this, it->second, &c_.scheduler);
  }
  if (auto it = f.find("queues"); it == f.end()) {
    reader().Error(line, "queues", "required field is missing", "nothing", kTopFields[3].hint);
  } else {
    sched::internal::ParseQueuesSection(*this, it->second, &c_.queues, &queue_line_);
  }
  if (auto it = f.find("strategies"); it != f.end()) ParseStrategies(it->second);
  if (c_.strategies.empty()) {
    Strategy s;
    s.name = "default";
    s.policy.restart_budget = 1000000;
    c_.strategies.push_back(s);
  }
  if (auto it = f.find("failures"); it != f.end()) ParseFailures(it->second);
  if (auto it = f.find("workload"); it == f.end()) {
    reader().Error(line, "workload", "required field is missing", "nothing", kTopFields[5].hint);
  } else {
    ParseWorkload(it->second);
  }
  if (auto it = f.find("faults"); it != f.end()) ParseFaults(it->second);
}

void ConfigParser::ParseSim(const Entry& e) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kSimFields);
  Num(f, "days", 0, true, 3650, &c_.duration_s, 86400.0);
  if (auto it = f.find("seed"); it != f.end()) {
    long v = 0;
    if (reader().ReadInt(it->second, 0, LONG_MAX, &v)) c_.seed = static_cast<uint64_t>(v);
  }
  Num(f, "sampleMinutes", 0, false, 1e7, &c_.sample_s, 60.0);
}

Result<SimConfig> ParseSimConfig(const std::string& text, const std::string& source_name) {
  if (text.size() > (64u << 20)) {
    return InvalidArgument(source_name + ":1: (top level): config larger than 64 MiB (got " +
                           std::to_string(text.size()) + " bytes); split the job trace");
  }
  ConfigParser p(source_name);
  BW_RETURN_IF_ERROR(p.ParseDocument(text, "start with cluster:, queues:, workload:",
                                     [&p](const YAML::Node& root) { p.Parse(root); }));
  SimConfig c = std::move(p.config());
  c.source = source_name;
  return c;
}

Result<SimConfig> LoadSimConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("open " + path, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParseSimConfig(ss.str(), path);
}

}  // namespace bulwark::sim
