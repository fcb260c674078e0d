// TrainJobCrd(): the CustomResourceDefinition, its openAPIV3Schema generated from
// the parser's field tables (src/spec/job_spec_schema.h, trainjob_schema.h).
#include <climits>
#include <cmath>
#include <string_view>

#include "trainjob/render.h"
#include "trainjob/trainjob_schema.h"

namespace bulwark::trainjob {
namespace {

using internal::CelRule;
using internal::FieldDef;
using internal::FieldType;

Json Rules(std::span<const CelRule> rules) {
  Json out = Json::array();
  for (const CelRule& r : rules) out.push_back({{"rule", r.rule}, {"message", r.message}});
  return out;
}

// Integer bounds; limits beyond int32 make the field int64.
void IntBounds(const FieldDef& d, Json* s) {
  const double lo = d.min_exclusive ? d.min + 1 : d.min;
  if (std::isfinite(lo)) (*s)["minimum"] = static_cast<int64_t>(lo);
  if (std::isfinite(d.max)) (*s)["maximum"] = static_cast<int64_t>(d.max);
  const bool int32 = std::isfinite(lo) && std::isfinite(d.max) && lo >= INT_MIN && d.max <= INT_MAX;
  (*s)["format"] = int32 ? "int32" : "int64";
}

Json ObjectSchema(std::span<const FieldDef> fields, const std::string& description,
                  std::span<const CelRule> rules);

// An integer or a string. A structural schema's anyOf may hold nothing but these two
// types, so the caller's constraints sit beside it, where JSON Schema applies each to
// its own type: minimum/maximum to the integer, pattern to the string.
Json IntOrString() {
  return {{"x-kubernetes-int-or-string", true},
          {"anyOf", {{{"type", "integer"}}, {{"type", "string"}}}}};
}

Json FieldSchema(const FieldDef& d) {
  Json s;
  switch (d.type) {
    case FieldType::kString:
      s = {{"type", "string"}};
      if (!d.values.empty()) s["enum"] = std::vector<std::string>(d.values.begin(), d.values.end());
      break;
    case FieldType::kInt:
      s = {{"type", "integer"}};
      IntBounds(d, &s);
      break;
    case FieldType::kNumber:
      s = {{"type", "number"}};
      if (std::isfinite(d.min)) s["minimum"] = d.min;
      if (d.min_exclusive) s["exclusiveMinimum"] = true;
      if (std::isfinite(d.max)) s["maximum"] = d.max;
      break;
    case FieldType::kBool:
      s = {{"type", "boolean"}};
      break;
    case FieldType::kIntOrAuto:
      s = IntOrString();
      IntBounds(d, &s);
      s.erase("format");
      s["pattern"] = "^auto$";
      break;
    case FieldType::kQuantity:
      s = IntOrString();
      s["minimum"] = 0;
      s["pattern"] = internal::kQuantityPattern;
      break;
    case FieldType::kStringList:
      s = {{"type", "array"}, {"items", {{"type", "string"}}}};
      break;
    case FieldType::kStringMap:
      s = {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};
      break;
    case FieldType::kObject:
      return ObjectSchema(d.children, d.hint, d.rules);
    case FieldType::kObjectList:
      s = {{"type", "array"}, {"items", ObjectSchema(d.children, "", d.rules)}};
      if (d.max_items > 0) s["maxItems"] = d.max_items;
      s["description"] = d.hint;
      return s;
    case FieldType::kAnyObject:
      // Keys mapped to free-form objects (a VolumeSource's one key names the source).
      // A map, not an object that preserves unknown fields: CEL can size() a map but
      // sees none of an object's unknown fields.
      s = {{"type", "object"},
           {"additionalProperties",
            {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}};
      break;
    case FieldType::kAny:
      s = {{"x-kubernetes-preserve-unknown-fields", true}};
      break;
  }
  if (d.max_items > 0) s["maxItems"] = d.max_items;
  s["description"] = d.hint;
  if (!d.rules.empty()) s["x-kubernetes-validations"] = Rules(d.rules);
  return s;
}

Json ObjectSchema(std::span<const FieldDef> fields, const std::string& description,
                  std::span<const CelRule> rules) {
  Json props = Json::object();
  Json required = Json::array();
  for (const FieldDef& f : fields) {
    props[f.key] = FieldSchema(f);
    if (f.required) required.push_back(f.key);
  }
  Json s = {{"type", "object"}, {"properties", props}};
  if (!required.empty()) s["required"] = required;
  if (!description.empty()) s["description"] = description;
  if (!rules.empty()) s["x-kubernetes-validations"] = Rules(rules);
  return s;
}

Json SpecSchema() {
  std::vector<FieldDef> fields(std::begin(spec_internal::kJobFields),
                               std::end(spec_internal::kJobFields));
  fields.insert(fields.end(), std::begin(internal::kSpecExtraFields),
                std::end(internal::kSpecExtraFields));
  // A TrainJob without a command runs its image's ENTRYPOINT + CMD (docs/trainjob.md).
  for (FieldDef& f : fields) {
    if (std::string_view(f.key) == "command") f.required = false;
  }
  return ObjectSchema(fields,
                      "The job (the fields of a job spec, docs/job-spec.md, without name) and how "
                      "it runs on Kubernetes: scheduling, suspend and pod (docs/trainjob.md).",
                      spec_internal::kJobRules);
}

Json Str(const char* description) { return {{"type", "string"}, {"description", description}}; }
Json Int(const char* description) {
  return {{"type", "integer"}, {"format", "int64"}, {"description", description}};
}
Json Num(const char* description) { return {{"type", "number"}, {"description", description}}; }
Json Time(const char* description) {
  return {{"type", "string"}, {"format", "date-time"}, {"description", description}};
}
Json Names(const char* description) {
  return {{"type", "array"}, {"items", {{"type", "string"}}}, {"description", description}};
}

// The status the operator writes (docs/trainjob.md, Status).
Json StatusSchema() {
  Json condition = {
      {"type", "object"},
      {"required", {"type", "status", "lastTransitionTime", "reason", "message"}},
      {"properties",
       {{"type",
         {{"type", "string"},
          {"enum", {"Admitted", "Running", "Restarting", "Succeeded", "Failed"}},
          {"description", "Admitted, Running, Restarting, Succeeded or Failed"}}},
        {"status",
         {{"type", "string"},
          {"enum", {"True", "False", "Unknown"}},
          {"description", "True, False or Unknown"}}},
        {"reason",
         {{"type", "string"},
          {"pattern", "^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?)?$"},
          {"maxLength", 1024},
          {"description", "CamelCase reason of the last transition"}}},
        {"message",
         {{"type", "string"}, {"maxLength", 32768}, {"description", "what happened, for people"}}},
        {"lastTransitionTime", Time("when status last changed")},
        {"observedGeneration", Int("the spec generation the condition is about")}}}};
  Json lost = {{"type", "object"},
               {"description", "lost seconds by cause (docs/ettr.md)"},
               {"properties",
                {{"detection", Num("fault to detection")},
                 {"restart", Num("stopping and restarting ranks")},
                 {"reinit", Num("re-initialisation until the first step")},
                 {"rework", Num("steps recomputed since the last checkpoint")},
                 {"checkpoint", Num("training stalled by checkpoints")},
                 {"diagnosis", Num("the relaunch waiting for a suspect node's diagnostics")},
                 {"idle", Num("waiting: backoff, nodes, admission")}}}};
  return {{"type", "object"},
          {"description", "Written by the Bulwark operator."},
          {"properties",
           {{"phase",
             {{"type", "string"},
              {"enum", {"Pending", "Admitted", "Running", "Restarting", "Succeeded", "Failed"}},
              {"description", "Pending, Admitted, Running, Restarting, Succeeded or Failed"}}},
            {"message", Str("why the job is in this phase")},
            {"observedGeneration", Int("the spec generation last acted on")},
            {"conditions",
             {{"type", "array"},
              {"items", condition},
              {"x-kubernetes-list-type", "map"},
              {"x-kubernetes-list-map-keys", {"type"}},
              {"description", "Admitted, Running, Restarting, Succeeded, Failed"}}},
            {"restarts", Int("restarts so far")},
            {"currentStep", Int("the newest training step reported")},
            {"startTime", Time("when the job first ran")},
            {"completionTime", Time("when the job succeeded or failed")},
            {"lastCheckpoint",
             {{"type", "object"},
              {"description", "the newest committed checkpoint"},
              {"properties",
               {{"step", Int("its step")},
                {"tier", Str("the fastest tier holding it: memory, disk, shared or object")},
                {"time", Time("when it was committed")}}}}},
            {"admission",
             {{"type", "object"},
              {"description", "where the scheduler placed the gang"},
              {"properties",
               {{"nodes", Names("nodes running the job, by node slot")},
                {"standby", Names("warm standby nodes")},
                {"reason", Str("the scheduler's reason")}}}}},
            {"lastIncident",
             {{"type", "object"},
              {"description",
               "the newest fault and what was done about it (docs/diagnosis.md): what "
               "happened, the decision, what was tested and found, the cause a replay showed"},
              {"properties",
               {{"number", Int("its number, as `bulwark describe` and the report count them")},
                {"kind", Str("crash, hang, nan, fatal_log, node_lost or sdc")},
                {"step", Int("the step it came at")},
                {"rank", Int("the rank, -1 when node-level")},
                {"node", Str("the agent node it came from")},
                {"detail", Str("what happened")},
                {"action", Str("restart_in_place, replace_node, rollback or give_up")},
                {"reason", Str("why")},
                {"diagnosis", Str("what the node's self-tests found, and what became of it")},
                {"cause",
                 {{"type", "string"},
                  {"enum", {"data", "code", "hardware", "transient", "unknown"}},
                  {"description", "what a replay of the steps before it showed"}}},
                {"causeEvidence", Str("the replay's evidence")}}}}},
            {"replay",
             {{"type", "object"},
              {"description",
               "the outcome of a replay (spec.replayOf; docs/diagnosis.md), once it ended"},
              {"properties",
               {{"trainJob", Str("the TrainJob whose incident was replayed")},
                {"incident", Int("the incident's number")},
                {"resumeStep", Int("the checkpoint step the re-run resumed from; -1: scratch")},
                {"faultStep", Int("the step the fault came at")},
                {"code", Str("how the image compares with the incident's")},
                {"passed",
                 {{"type", "boolean"},
                  {"description",
                   "every compared loss equal bit for bit and the fault's step "
                   "completed"}}},
                {"faultCameBack",
                 {{"type", "boolean"}, {"description", "the same fault came back at its step"}}},
                {"cause",
                 {{"type", "string"},
                  {"enum", {"data", "code", "hardware", "transient", "unknown"}},
                  {"description", "what the re-run showed"}}},
                {"evidence", Str("the re-run's evidence")},
                {"summary", Str("the losses compared, in a sentence")},
                {"compared", Int("losses compared with the record")},
                {"equal", Int("losses equal bit for bit")},
                {"firstDifference",
                 {{"type", "object"},
                  {"description", "the first loss that differed"},
                  {"properties", {{"step", Int("its step")}, {"rank", Int("its rank")}}}}}}}}},
            {"ettr",
             {{"type", "object"},
              {"description", "effective training time ratio (docs/ettr.md)"},
              {"properties",
               {{"ratio", Num("productive / wall-clock time")},
                {"productiveSeconds", Num("productive training time")},
                {"wallSeconds", Num("wall-clock time")},
                {"lostSeconds", lost}}}}}}}};
}

Json Column(const char* name, const char* type, const char* path, const char* description) {
  return {{"name", name}, {"type", type}, {"jsonPath", path}, {"description", description}};
}

}  // namespace

Json TrainJobCrd() {
  Json schema = {{"type", "object"},
                 {"description",
                  "A distributed training job run by Bulwark: one pod per node, gang-placed, kept "
                  "training through faults (docs/trainjob.md)."},
                 {"required", {"spec"}},
                 {"properties",
                  {{"apiVersion", {{"type", "string"}}},
                   {"kind", {{"type", "string"}}},
                   {"metadata", {{"type", "object"}}},
                   {"spec", SpecSchema()},
                   {"status", StatusSchema()}}},
                 {"x-kubernetes-validations",
                  {{{"rule", "size(self.metadata.name) <= 63"},
                    {"message",
                     "metadata.name must be at most 63 characters (it is the pods' bulwark.dev/job "
                     "label)"}}}}};
  Json version = {
      {"name", kVersion},
      {"served", true},
      {"storage", true},
      {"subresources", {{"status", Json::object()}}},
      {"additionalPrinterColumns",
       {Column("Phase", "string", ".status.phase", "Pending, Admitted, Running, ..."),
        Column("Nodes", "integer", ".spec.nodes", "nodes (one pod each)"),
        Column("Step", "integer", ".status.currentStep", "newest training step"),
        Column("Restarts", "integer", ".status.restarts", "restarts so far"),
        Column("ETTR", "number", ".status.ettr.ratio", "effective training time ratio"),
        Column("Checkpoint", "integer", ".status.lastCheckpoint.step", "newest committed step"),
        Column("Age", "date", ".metadata.creationTimestamp", "")}},
      {"schema", {{"openAPIV3Schema", schema}}}};
  version["additionalPrinterColumns"].back().erase("description");
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata",
           {{"name", std::string(kPlural) + "." + kGroup},
            {"labels", {{"app.kubernetes.io/part-of", "bulwark"}}}}},
          {"spec",
           {{"group", kGroup},
            {"names",
             {{"kind", kKind},
              {"listKind", "TrainJobList"},
              {"plural", kPlural},
              {"singular", "trainjob"},
              {"shortNames", {"tj"}},
              {"categories", {"all"}}}},
            {"scope", "Namespaced"},
            {"versions", {version}}}}};
}

}  // namespace bulwark::trainjob
