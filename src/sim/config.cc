// ParseSimConfig: YAML -> SimConfig with the job spec's error machinery (SpecReader:
// every problem "<source>:<line>: <field.path>: <problem> (got X); <fix>", all collected
// in one pass). Cross-references (queue, strategy, node names) are checked here so the
// errors carry line numbers; the scheduler re-validates at RunSimulation.
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "sim/config_parser.h"
#include "sim/presets.h"
#include "sim/sim.h"
#include "spec/yaml_document.h"

namespace bulwark::sim {

using spec_internal::Entry;
using spec_internal::SpecReader;

void ConfigParser::Parse(const YAML::Node& root) {
  const int line = SpecReader::LineOf(root, 1);
  auto f = r_.Fields(root, line, "", "", kTopFields);
  if (auto it = f.find("sim"); it != f.end()) ParseSim(it->second);
  if (auto it = f.find("cluster"); it == f.end()) {
    r_.Error(line, "cluster", "required field is missing", "nothing", kTopFields[1].hint);
  } else {
    ParseCluster(it->second);
  }
  if (auto it = f.find("scheduler"); it != f.end()) ParseScheduler(it->second);
  if (auto it = f.find("queues"); it == f.end()) {
    r_.Error(line, "queues", "required field is missing", "nothing", kTopFields[3].hint);
  } else {
    ParseQueues(it->second);
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
    r_.Error(line, "workload", "required field is missing", "nothing", kTopFields[5].hint);
  } else {
    ParseWorkload(it->second);
  }
  if (auto it = f.find("faults"); it != f.end()) ParseFaults(it->second);
}

void ConfigParser::ParseScheduling(const YAML::Node& root) {
  auto f = r_.Fields(root, SpecReader::LineOf(root, 1), "", "", kSchedulingTopFields);
  if (auto it = f.find("scheduler"); it != f.end()) ParseScheduler(it->second);
  if (auto it = f.find("queues"); it != f.end()) ParseQueues(it->second);
}

bool ConfigParser::Num(std::map<std::string, Entry>& f, const char* key, double lo, bool excl,
                       double hi, double* out, double scale) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  double v = 0;
  if (!r_.ReadNumber(it->second, lo, excl, hi, &v)) return false;
  *out = v * scale;
  return true;
}

bool ConfigParser::Int(std::map<std::string, Entry>& f, const char* key, long lo, long hi,
                       int* out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  long v = 0;
  if (!r_.ReadInt(it->second, lo, hi, &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool ConfigParser::Str(std::map<std::string, Entry>& f, const char* key, std::string* out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  std::string s;
  if (!r_.ReadString(it->second, &s)) return false;
  if (s.empty()) {
    r_.Error(it->second.line, it->second.path, "must not be empty", "\"\"", it->second.hint);
    return false;
  }
  *out = s;
  return true;
}

bool ConfigParser::Bool(std::map<std::string, Entry>& f, const char* key, bool* out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  const Entry& e = it->second;
  const std::string s = e.value.IsScalar() ? e.value.Scalar() : "";
  if (s == "true" || s == "false") {
    *out = s == "true";
    return true;
  }
  r_.Error(e.line, e.path, "must be true or false", SpecReader::Describe(e.value), e.hint);
  return false;
}

bool ConfigParser::IsAuto(std::map<std::string, Entry>& f, const char* key) {
  auto it = f.find(key);
  return it != f.end() && it->second.value.IsScalar() && it->second.value.Scalar() == "auto";
}

bool ConfigParser::ReadList(const Entry& e, std::vector<YAML::Node>* items) {
  items->clear();
  if (e.value.IsNull()) return true;
  if (!e.value.IsSequence()) {
    r_.Error(e.line, e.path, "must be a list", SpecReader::Describe(e.value), e.hint);
    return false;
  }
  for (const YAML::Node& n : e.value) items->push_back(n);
  return true;
}

std::string ConfigParser::Item(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void ConfigParser::ParseSim(const Entry& e) {
  auto f = r_.Fields(e.value, e.line, e.path, e.hint, kSimFields);
  Num(f, "days", 0, true, 3650, &c_.duration_s, 86400.0);
  if (auto it = f.find("seed"); it != f.end()) {
    long v = 0;
    if (r_.ReadInt(it->second, 0, LONG_MAX, &v)) c_.seed = static_cast<uint64_t>(v);
  }
  Num(f, "sampleMinutes", 0, false, 1e7, &c_.sample_s, 60.0);
}

namespace {

Result<SimConfig> ParseWith(const std::string& text, const std::string& source_name,
                            bool scheduling_only) {
  if (text.size() > (64u << 20)) {
    return InvalidArgument(source_name + ":1: (top level): config larger than 64 MiB (got " +
                           std::to_string(text.size()) + " bytes); split the job trace");
  }
  auto doc = spec_internal::LoadSingleDocument(text, source_name);
  if (!doc.ok()) return doc.status();
  ConfigParser p(source_name);
  try {
    if (!doc->IsMap()) {
      p.reader().Error(1, "", "the config must be a YAML mapping", SpecReader::Describe(*doc),
                       scheduling_only ? "start with scheduler: or queues:"
                                       : "start with cluster:, queues:, workload:");
    } else {
      if (scheduling_only) {
        p.ParseScheduling(*doc);
      } else {
        p.Parse(*doc);
      }
    }
  } catch (const std::exception& ex) {
    p.reader().Error(1, "", std::string("malformed YAML tree: ") + ex.what(), "an exception",
                     "check the document structure");
  }
  if (p.reader().has_errors()) {
    std::string msg;
    for (const std::string& line : p.reader().SortedErrors()) {
      if (!msg.empty()) msg += "\n";
      msg += line;
    }
    return InvalidArgument(msg);
  }
  SimConfig c = std::move(p.config());
  c.source = source_name;
  return c;
}

}  // namespace

Result<SimConfig> ParseSimConfig(const std::string& text, const std::string& source_name) {
  return ParseWith(text, source_name, false);
}

Result<SimConfig> ParseSchedulingConfig(const std::string& text, const std::string& source_name) {
  return ParseWith(text, source_name, true);
}

Result<SimConfig> LoadSimConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("open " + path, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParseSimConfig(ss.str(), path);
}

}  // namespace bulwark::sim
