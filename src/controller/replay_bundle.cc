#include "controller/replay_bundle.h"

#include <algorithm>
#include <cstdlib>

#include "common/json_util.h"
#include "controller/incident_json.h"

namespace bulwark {
namespace {

template <typename T>
Result<T> Annotated(Result<T> r, const std::string& where) {
  if (!r.ok()) return r.status().Annotate(where);
  return r;
}

Result<LossTable> LossesFromJson(const Json& j) {
  LossTable t;
  if (!j.is_object()) return InvalidArgument("field 'losses' must be an object");
  for (const auto& [step, ranks] : j.items()) {
    char* end = nullptr;
    const long s = std::strtol(step.c_str(), &end, 10);
    if (step.empty() || *end != '\0' || !ranks.is_object()) {
      return InvalidArgument("field 'losses' holds a malformed step '" + step + "'");
    }
    for (const auto& [rank, loss] : ranks.items()) {
      const long r = std::strtol(rank.c_str(), &end, 10);
      if (rank.empty() || *end != '\0' || r < 0 || !loss.is_number()) {
        return InvalidArgument("field 'losses' holds a malformed loss of step " + step);
      }
      t[s][static_cast<int>(r)] = loss.get<double>();
    }
  }
  return t;
}

// The bundle's "digests" ({"step": {"rank": {"rng": HEX, "data": HEX, "sums": ORDER}}});
// absent = none (a bundle of a trainer that reported none, or of a Bulwark before them).
Result<DigestTable> DigestsFromJson(const Json& j) {
  DigestTable t;
  if (j.is_null()) return t;
  if (!j.is_object()) return InvalidArgument("field 'digests' must be an object");
  const auto hex = [](const Json& cell, const char* key, uint64_t* out) {
    return !cell.contains(key) || ParseDigestHex(cell[key], out);
  };
  for (const auto& [step, ranks] : j.items()) {
    char* end = nullptr;
    const long s = std::strtol(step.c_str(), &end, 10);
    if (step.empty() || *end != '\0' || !ranks.is_object()) {
      return InvalidArgument("field 'digests' holds a malformed step '" + step + "'");
    }
    for (const auto& [rank, cell] : ranks.items()) {
      const long r = std::strtol(rank.c_str(), &end, 10);
      StepDigests d;
      const bool has_sums = cell.is_object() && cell.contains("sums");
      if (has_sums && cell["sums"].is_string()) {
        d.sums = ParseSumOrder(cell["sums"].get<std::string>());
      }
      if (rank.empty() || *end != '\0' || r < 0 || !cell.is_object() || !hex(cell, "rng", &d.rng) ||
          !hex(cell, "data", &d.data) || (has_sums && d.sums == SumOrder::kUnknown)) {
        return InvalidArgument("field 'digests' holds a malformed entry of step " + step +
                               " (want {\"rng\": 16 hex digits, \"data\": 16 hex digits, "
                               "\"sums\": \"ordered\" or \"unordered\"})");
      }
      if (!d.empty()) t[s][static_cast<int>(r)] = d;
    }
  }
  return t;
}

}  // namespace

std::string DescribeIncident(const Json& inc) {
  if (!inc.is_object()) return "?";
  Result<std::string> kind = JStrOr(inc, "kind", "?");
  Result<std::string> subtype = JStrOr(inc, "subtype", "");
  Result<long> rank = JIntOr(inc, "rank", -1);
  std::string s = kind.ok() ? *kind : "?";
  if (subtype.ok() && !subtype->empty()) s += " (" + *subtype + ")";
  if (rank.ok() && *rank >= 0) s += " on rank " + std::to_string(*rank);
  return s;
}

std::vector<Json> RecordedIncidents(Store* store, const JobRecord& job) {
  std::vector<Json> out;
  Json report = Json::parse(job.report_json, nullptr, false);
  if (report.is_object() && report.contains("incidents") && report["incidents"].is_array()) {
    for (const Json& x : report["incidents"]) out.push_back(x);
    return out;
  }
  auto list = store->ListIncidents(job.name);
  if (!list.ok()) return out;
  for (const std::string& text : *list) {
    Json x = Json::parse(text, nullptr, false);
    if (x.is_object() && !x.value("secondary", false)) out.push_back(std::move(x));
  }
  return out;
}

std::string IncidentTitle(const Json& inc, int number, const std::string& job) {
  Result<long> step = inc.is_object() ? JIntOr(inc, "step", -1) : Result<long>(-1L);
  return "incident " + std::to_string(number) + " of '" + job + "' (" + DescribeIncident(inc) +
         " at step " + std::to_string(step.ok() ? *step : -1L) + ")";
}

std::string ReplayVerdictLines(const Json& o) {
  if (!o.is_object()) return "";
  const auto str = [&](const char* k) {
    Result<std::string> v = JStrOr(o, k, "");
    return v.ok() ? *v : std::string();
  };
  const auto flag = [&](const char* k) {
    return o.contains(k) && o[k].is_boolean() && o[k].get<bool>();
  };
  Result<long> fs = JIntOr(o, "fault_step", -1);
  const std::string step = std::to_string(fs.ok() ? *fs : -1L);
  std::string out;
  if (flag("fault_came_back")) {
    out = "  fault:  came back" +
          (o.contains("ended_by") ? ": " + DescribeIncident(o["ended_by"]) : std::string()) +
          " at step " + step + "\n";
  } else if (flag("passed")) {
    out = "  fault:  did not come back: step " + step + " completed\n";
  } else {
    out = "  fault:  not concluded: " + str("evidence") + "\n";
  }
  const std::string cause = str("cause");
  if (!cause.empty() && cause != "unknown") {
    out += "  cause:  " + cause + ": " + str("evidence") + "\n";
  }
  return out;
}

bool ReplayAllEqual(const Json& o) {
  Result<long> compared = o.is_object() ? JIntOr(o, "compared", 0) : Result<long>(0L);
  Result<long> equal = o.is_object() ? JIntOr(o, "equal", 0) : Result<long>(0L);
  return compared.ok() && equal.ok() && *compared > 0 && *equal == *compared;
}

Result<ReplayBundle> ReadReplayBundle(const Json& inc, const std::string& what) {
  if (!inc.is_object() || !inc.contains("replay") || !inc["replay"].is_object()) {
    return FailedPrecondition(what +
                              " has no replay bundle: it was recorded by a Bulwark "
                              "older than replay bundles, so nothing says what to re-run");
  }
  const Json& b = inc["replay"];
  const std::string in = what + ": its bundle";
  ReplayBundle out;
  BW_ASSIGN_OR_RETURN(out.fault_step, Annotated(JIntOr(b, "fault_step", -1), in));
  BW_ASSIGN_OR_RETURN(out.checkpoint_step, Annotated(JIntOr(b, "checkpoint_step", -1), in));
  const bool from_scratch =
      b.contains("from_scratch") && b["from_scratch"].is_boolean() && b["from_scratch"].get<bool>();
  // No checkpoint before the fault: the job ran from scratch, and so does the replay
  // if the bundle holds every loss from step 1.
  if (out.checkpoint_step < 0 && !from_scratch) {
    return FailedPrecondition(
        what + ": no checkpoint was committed before the fault's step " +
        std::to_string(out.fault_step) + ", and the bundle holds the losses of the last " +
        "steps only, so there is nothing to re-run from; a job that checkpoints more often " +
        "(checkpoint.intervalSteps) leaves a window to replay");
  }
  out.checkpoint_step = std::max(out.checkpoint_step, -1L);
  Result<LossTable> expected = LossesFromJson(b.contains("losses") ? b["losses"] : Json());
  if (!expected.ok()) return expected.status().Annotate(in);
  Result<DigestTable> digests = DigestsFromJson(b.contains("digests") ? b["digests"] : Json());
  if (!digests.ok()) return digests.status().Annotate(in);
  Result<Incident> fault = IncidentFromJson(inc);
  if (!fault.ok()) return fault.status().Annotate(what);
  out.replay.fault = *fault;
  out.replay.expected = std::move(*expected);
  out.replay.expected_digests = std::move(*digests);
  out.replay.resume = out.checkpoint_step;
  if (b.contains("skip")) {
    if (!b["skip"].is_object()) return InvalidArgument(in + ": field 'skip' must be an object");
    BW_ASSIGN_OR_RETURN(out.replay.skip_from, Annotated(JIntOr(b["skip"], "from", -1), in));
    BW_ASSIGN_OR_RETURN(out.replay.skip_to, Annotated(JIntOr(b["skip"], "to", -1), in));
  }
  BW_ASSIGN_OR_RETURN(out.checkpoint_dir, Annotated(JStrOr(b, "checkpoint_dir", ""), in));
  BW_ASSIGN_OR_RETURN(out.spec_yaml, Annotated(JStrOr(b, "spec_yaml", ""), in));
  BW_ASSIGN_OR_RETURN(out.spec_path, Annotated(JStrOr(b, "spec_path", ""), in));
  if (b.contains("code")) {
    if (!b["code"].is_object()) return InvalidArgument(in + ": field 'code' must be an object");
    out.code = b["code"];
  }
  BW_ASSIGN_OR_RETURN(long world, Annotated(JIntOr(b, "world", 0), in));
  BW_ASSIGN_OR_RETURN(long ppn, Annotated(JIntOr(b, "procs_per_node", 0), in));
  if (world < 0 || ppn < 0 || world > (1 << 20) || ppn > world) {
    return InvalidArgument(in + ": world " + std::to_string(world) + " and procs_per_node " +
                           std::to_string(ppn) + " do not describe a job");
  }
  out.world = static_cast<int>(world);
  out.procs_per_node = static_cast<int>(ppn);
  if (b.contains("nodes") && b["nodes"].is_array()) {
    for (const Json& n : b["nodes"]) {
      if (n.is_string()) out.nodes.push_back(n.get<std::string>());
    }
  }
  return out;
}

}  // namespace bulwark
