// The scheduler's YAML configuration: the `scheduler` and `queues` sections, on their
// own (ParseSchedulingConfig) or inside the simulator's config (the sections'
// functions). Errors accumulate in the FieldReader; nothing here throws itself.
#include "sched/config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>

#include "sched/config_sections.h"

namespace bulwark::sched {
namespace internal {

using spec_internal::Entry;
using spec_internal::FieldReader;
using spec_internal::SpecReader;

namespace {

void ParsePoolList(FieldReader& r, const Entry& e, std::vector<Pool>* out) {
  std::vector<std::string> names;
  if (!r.reader().ReadStringList(e, &names)) return;
  out->clear();
  for (const std::string& n : names) {
    auto p = ParsePool(n);
    if (!p.ok()) {
      r.reader().Error(e.line, e.path, "unknown pool", "\"" + n + "\"", e.hint);
      continue;
    }
    out->push_back(*p);
  }
}

void ParseGpuMap(FieldReader& r, const Entry& e, std::map<std::string, int>* out) {
  if (!e.value.IsMap()) {
    r.reader().Error(e.line, e.path, "must be a mapping gpuType: GPUs",
                     SpecReader::Describe(e.value), e.hint);
    return;
  }
  for (const auto& kv : e.value) {
    const YAML::Node k = kv.first;
    const YAML::Node v = kv.second;
    if (!k.IsScalar()) continue;
    Entry sub =
        FieldReader::Sub(v, SpecReader::LineOf(k, e.line), e.path + "." + k.Scalar(), e.hint);
    long n = 0;
    if (r.reader().ReadInt(sub, 0, 100000000, &n)) (*out)[k.Scalar()] = static_cast<int>(n);
  }
}

}  // namespace

void ParseSchedulerSection(FieldReader& r, const Entry& e, SchedulerConfig* out) {
  auto f = r.reader().Fields(e.value, e.line, e.path, e.hint, kSchedulerFields);
  r.Bool(f, "preemption", &out->preemption);
  if (auto it = f.find("productionPools"); it != f.end()) {
    ParsePoolList(r, it->second, &out->production_pools);
  }
  if (auto it = f.find("researchPools"); it != f.end()) {
    ParsePoolList(r, it->second, &out->research_pools);
  }
  r.Num(f, "requeueBackoffBaseSeconds", 0, false, 1e7, &out->requeue_backoff_base_s);
  r.Num(f, "requeueBackoffCapSeconds", 0, false, 1e7, &out->requeue_backoff_cap_s);
  r.Bool(f, "restockStandby", &out->restock_standby);
}

void ParseQueuesSection(FieldReader& r, const Entry& e, std::vector<QueueSpec>* out,
                        std::map<std::string, int>* lines) {
  std::vector<YAML::Node> items;
  if (!r.ReadList(e, &items)) return;
  if (items.empty()) {
    r.reader().Error(e.line, e.path, "must not be empty", "an empty list", e.hint);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Entry it = FieldReader::Sub(items[i], e.line, FieldReader::Item(e.path, i), e.hint);
    auto f = r.reader().Fields(it.value, it.line, it.path, it.hint, kQueueFields);
    QueueSpec q;
    if (!r.Str(f, "name", &q.name)) {
      if (f.find("name") == f.end()) {
        r.reader().Error(it.line, it.path + ".name", "required field is missing", "nothing",
                         kQueueFields[0].hint);
      }
      continue;
    }
    r.Str(f, "cohort", &q.cohort);
    if (auto g = f.find("nominalGpus"); g != f.end()) ParseGpuMap(r, g->second, &q.nominal_gpus);
    if (auto g = f.find("borrowingLimitGpus"); g != f.end()) {
      ParseGpuMap(r, g->second, &q.borrowing_limit);
    }
    if (auto g = f.find("lendingLimitGpus"); g != f.end()) {
      ParseGpuMap(r, g->second, &q.lending_limit);
    }
    r.Num(f, "weight", 0, true, 1e6, &q.weight);
    if (auto [pos, fresh] = lines->emplace(q.name, it.line); !fresh) {
      r.reader().Error(it.line, it.path + ".name", "duplicate queue name",
                       q.name + "; the first is at line " + std::to_string(pos->second),
                       "give every queue a unique name");
      continue;
    }
    out->push_back(std::move(q));
  }
}

}  // namespace internal

namespace {

constexpr spec_internal::FieldDef kSchedulingTopFields[] = {internal::kSchedulerSection,
                                                            internal::kQueuesSection};

}  // namespace

Result<SchedulingConfig> ParseSchedulingConfig(const std::string& text,
                                               const std::string& source_name) {
  if (text.size() > (64u << 20)) {
    return InvalidArgument(source_name + ":1: (top level): config larger than 64 MiB (got " +
                           std::to_string(text.size()) +
                           " bytes); keep only the scheduler: and queues: sections in it");
  }
  spec_internal::FieldReader r(source_name);
  SchedulingConfig c;
  std::map<std::string, int> queue_lines;
  BW_RETURN_IF_ERROR(
      r.ParseDocument(text, "start with scheduler: or queues:", [&](const YAML::Node& root) {
        auto f = r.reader().Fields(root, spec_internal::SpecReader::LineOf(root, 1), "", "",
                                   kSchedulingTopFields);
        if (auto it = f.find("scheduler"); it != f.end()) {
          internal::ParseSchedulerSection(r, it->second, &c.scheduler);
        }
        if (auto it = f.find("queues"); it != f.end()) {
          internal::ParseQueuesSection(r, it->second, &c.queues, &queue_lines);
        }
      }));
  return c;
}

Result<SchedulingConfig> LoadSchedulingConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("open the queue configuration " + path, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParseSchedulingConfig(ss.str(), path);
}

}  // namespace bulwark::sched
