// ConfigParser: cluster, failures and the injected fault trace.
#include <cmath>
#include <set>

#include "sim/config_parser.h"
#include "sim/presets.h"

namespace bulwark::sim {

using spec_internal::Entry;
using spec_internal::SpecReader;

namespace {

const char* kPoolKeys[3] = {"onDemand", "spot", "reserved"};  // sched::Pool order

}  // namespace

void ConfigParser::ParseCluster(const Entry& e) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kClusterFields);
  auto shape = f.find("shape");
  auto nodes = f.find("nodes");
  if (shape != f.end() && nodes != f.end()) {
    reader().Error(nodes->second.line, "cluster.nodes", "give either shape or nodes, not both",
                   "both", "remove one of cluster.shape and cluster.nodes");
  } else if (shape != f.end()) {
    ParseShape(shape->second);
  } else if (nodes != f.end()) {
    ParseNodes(nodes->second);
  } else {
    reader().Error(e.line, "cluster", "needs shape or nodes", "neither", e.hint);
  }
}

void ConfigParser::ParseShape(const Entry& e) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kShapeFields);
  int zones = 1, blocks = 1, racks = 1, per_rack = 1, gpus = 8;
  std::string gpu_type = "h100";
  Int(f, "zones", 1, 1000, &zones);
  Int(f, "blocksPerZone", 1, 10000, &blocks);
  Int(f, "racksPerBlock", 1, 10000, &racks);
  Int(f, "nodesPerRack", 1, 10000, &per_rack);
  Int(f, "gpusPerNode", 1, 64, &gpus);
  Str(f, "gpuType", &gpu_type);
  std::array<double, 3> mix = {1, 0, 0}, price = {0, 0, 0};
  if (auto it = f.find("pools"); it != f.end()) {
    auto pf = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                              kPoolFields);
    mix = {0, 0, 0};
    for (int p = 0; p < 3; ++p) Num(pf, kPoolKeys[p], 0, false, 1, &mix[p]);
    const double sum = mix[0] + mix[1] + mix[2];
    if (std::fabs(sum - 1) > 1e-6) {
      reader().Error(it->second.line, it->second.path, "fractions must sum to 1",
                     std::to_string(sum), it->second.hint);
      return;  // no split of the nodes exists (all 0 would loop forever below)
    }
  }
  if (auto it = f.find("pricePerGpuHour"); it != f.end()) {
    auto pf = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                              kPoolFields);
    for (int p = 0; p < 3; ++p) Num(pf, kPoolKeys[p], 0, false, 1e6, &price[p]);
  }
  const long total = static_cast<long>(zones) * blocks * racks * per_rack;
  if (total > 1000000) {
    reader().Error(e.line, e.path, "more than 1,000,000 nodes", std::to_string(total),
                   "shrink the shape");
    return;
  }
  // Pools by a deterministic largest-remainder split: node i belongs to the first pool
  // whose cumulative quota exceeds it, so a rack holds one pool where possible.
  std::array<long, 3> quota{};
  long assigned = 0;
  for (int p = 0; p < 3; ++p) {
    quota[p] = static_cast<long>(std::floor(mix[p] * total));
    assigned += quota[p];
  }
  for (int p = 0; assigned < total; p = (p + 1) % 3) {
    if (mix[p] > 0) {
      ++quota[p];
      ++assigned;
    }
  }
  c_.nodes.reserve(c_.nodes.size() + total);
  long i = 0;
  for (int z = 0; z < zones; ++z) {
    const std::string zone = "z" + std::to_string(z);
    for (int b = 0; b < blocks; ++b) {
      const std::string block = "b" + std::to_string(b);
      for (int r = 0; r < racks; ++r) {
        const std::string rack = "r" + std::to_string(r);
        const std::string prefix = zone + "-" + block + "-" + rack + "-n";
        for (int n = 0; n < per_rack; ++n, ++i) {
          sched::NodeSpec s;
          s.zone = zone;
          s.block = block;
          s.rack = rack;
          s.name = prefix + std::to_string(n);
          s.gpu_type = gpu_type;
          s.gpus = gpus;
          int p = 0;
          for (long acc = quota[0]; p < 2 && i >= acc; acc += quota[++p]) {
          }
          s.pool = static_cast<sched::Pool>(p);
          s.price_per_gpu_hour = price[p];
          c_.nodes.push_back(std::move(s));
        }
      }
    }
  }
}

void ConfigParser::ParseNodes(const Entry& e) {
  std::vector<YAML::Node> items;
  if (!ReadList(e, &items)) return;
  if (items.empty()) reader().Error(e.line, e.path, "must not be empty", "an empty list", e.hint);
  std::map<std::string, int> names;
  for (size_t i = 0; i < items.size(); ++i) {
    Entry it = Sub(items[i], e.line, Item(e.path, i), e.hint);
    auto f = reader().Fields(it.value, it.line, it.path, it.hint, kNodeFields);
    sched::NodeSpec s;
    s.name = "node-" + std::to_string(i);
    s.zone = "z0";
    s.block = "b0";
    s.rack = "r0";
    Str(f, "name", &s.name);
    Str(f, "zone", &s.zone);
    Str(f, "block", &s.block);
    Str(f, "rack", &s.rack);
    Str(f, "gpuType", &s.gpu_type);
    Int(f, "gpus", 1, 64, &s.gpus);
    Num(f, "pricePerGpuHour", 0, false, 1e6, &s.price_per_gpu_hour);
    if (auto p = f.find("pool"); p != f.end()) {
      std::string v;
      if (reader().ReadString(p->second, &v)) {
        auto pool = sched::ParsePool(v);
        if (pool.ok()) {
          s.pool = *pool;
        } else {
          reader().Error(p->second.line, p->second.path, "unknown pool",
                         SpecReader::Describe(p->second.value), p->second.hint);
        }
      }
    }
    if (auto [pos, fresh] = names.emplace(s.name, it.line); !fresh) {
      reader().Error(it.line, it.path + ".name", "duplicate node name",
                     s.name + "; the first is at line " + std::to_string(pos->second),
                     "give every node a unique name");
    }
    c_.nodes.push_back(std::move(s));
  }
}

void ConfigParser::ParseFailures(const Entry& e) {
  auto f = reader().Fields(e.value, e.line, e.path, e.hint, kFailureFields);
  FailureModel& m = c_.failures;
  if (auto it = f.find("preset"); it != f.end()) {
    std::string name;
    if (reader().ReadString(it->second, &name)) {
      if (name == "none") {
        m.preset = name;
      } else if (const FailurePreset* p = FindPreset(name)) {
        m.preset = name;
        m.per_node_day = PresetRates(*p);
      } else {
        reader().Error(it->second.line, it->second.path, "unknown preset", "\"" + name + "\"",
                       "use one of: " + PresetNames());
      }
    }
  }
  if (auto it = f.find("ratesPer1000NodeDays"); it != f.end()) {
    auto rf = reader().Fields(it->second.value, it->second.line, it->second.path, it->second.hint,
                              kRateFields);
    bool any = false;
    for (int t = 0; t < kFaultTypes; ++t) {
      any |= Num(rf, kRateFields[t].key, 0, false, 1e6, &m.per_node_day[t], 1e-3);
    }
    if (any) m.preset = m.preset == "none" ? "custom" : m.preset + " (modified)";
  }
  double scale = 1;
  if (Num(f, "scale", 0, false, 1e6, &scale)) {
    for (double& r : m.per_node_day) r *= scale;
  }
  if (auto it = f.find("distribution"); it != f.end()) {
    std::string d;
    if (reader().ReadString(it->second, &d)) {
      if (d == "weibull" || d == "exponential") {
        m.weibull = d == "weibull";
      } else {
        reader().Error(it->second.line, it->second.path, "unknown distribution", "\"" + d + "\"",
                       it->second.hint);
      }
    }
  }
  Num(f, "weibullShape", 0.05, false, 20, &m.weibull_shape);
  Num(f, "repairHours", 0, false, 1e6, &m.repair_s, 3600.0);
  Num(f, "spotReturnHours", 0, false, 1e6, &m.spot_return_s, 3600.0);
}

void ConfigParser::ParseFaults(const Entry& e) {
  std::vector<YAML::Node> items;
  if (!ReadList(e, &items)) return;
  std::map<std::string, int> by_name;
  for (size_t i = 0; i < c_.nodes.size(); ++i) by_name.emplace(c_.nodes[i].name, i);
  for (size_t i = 0; i < items.size(); ++i) {
    Entry it = Sub(items[i], e.line, Item(e.path, i), e.hint);
    auto f = reader().Fields(it.value, it.line, it.path, it.hint, kFaultFields);
    InjectedFault fault;
    if (!Num(f, "atSeconds", 0, false, 1e10, &fault.at_s) &&
        !Num(f, "atHours", 0, false, 1e7, &fault.at_s, 3600.0) && f.find("atSeconds") == f.end() &&
        f.find("atHours") == f.end()) {
      reader().Error(it.line, it.path + ".atSeconds", "required field is missing", "nothing",
                     kFaultFields[0].hint);
    }
    if (auto n = f.find("node"); n == f.end()) {
      reader().Error(it.line, it.path + ".node", "required field is missing", "nothing",
                     kFaultFields[2].hint);
    } else {
      const std::string s = n->second.value.IsScalar() ? n->second.value.Scalar() : "";
      long idx = -1;
      if (auto found = by_name.find(s); found != by_name.end()) {
        idx = found->second;
      } else if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos &&
                 s.size() < 9) {
        idx = std::stol(s);
      }
      if (idx < 0 || idx >= static_cast<long>(c_.nodes.size())) {
        reader().Error(n->second.line, n->second.path, "no such node",
                       SpecReader::Describe(n->second.value),
                       "use a node index 0.." + std::to_string(c_.nodes.size()) +
                           " (exclusive) or a "
                           "node name from cluster");
      } else {
        fault.node = static_cast<int>(idx);
      }
    }
    if (auto t = f.find("type"); t == f.end()) {
      reader().Error(it.line, it.path + ".type", "required field is missing", "nothing",
                     kFaultFields[3].hint);
    } else {
      std::string s;
      bool found = false;
      if (reader().ReadString(t->second, &s)) {
        for (int k = 0; k < kFaultTypes; ++k) {
          if (s == FaultTypeName(static_cast<FaultType>(k))) {
            fault.type = static_cast<FaultType>(k);
            found = true;
          }
        }
        if (!found) {
          reader().Error(t->second.line, t->second.path, "unknown fault type", "\"" + s + "\"",
                         t->second.hint);
        }
      }
    }
    c_.faults.push_back(fault);
  }
}

}  // namespace bulwark::sim
