#include "controller/dashboard_api.h"

#include <cmath>
#include <fstream>

namespace bulwark {
namespace {

Json Num(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json StatusJson(const ControllerStatus& s, const std::string& job, double ettr_target, double now) {
  const JobMetricsSnapshot& m = s.metrics;
  Json seconds = Json::object();
  for (const auto& [c, v] : s.ledger.seconds) seconds[TimeCategoryName(c)] = v;
  Json straggler = Json::object();
  for (const auto& [rank, v] : m.straggler_score) straggler[std::to_string(rank)] = v;
  Json j = {{"job", job},
            {"stage", s.stage},
            {"phase", JobPhaseName(s.phase)},
            {"attempt", s.attempt},
            {"restarts", s.restarts},
            {"step", s.current_step},
            {"start_time", s.start_time},
            {"end_time", s.end_time},
            {"now", now},
            {"message", s.message},
            {"slot_nodes", s.slot_nodes},
            {"spare_nodes", s.spare_nodes},
            {"ettr", s.ledger.ettr()},
            {"ettr_target", ettr_target},
            {"incident_count", s.incidents.size() + s.observations.size()},
            {"wall_s", s.ledger.wall_s},
            {"seconds", seconds},
            {"steps_completed", s.ledger.steps_completed},
            {"steps_reworked", s.ledger.steps_reworked}};
  j["last_checkpoint"] = s.last_committed_step >= 0 ? Json{{"step", s.last_committed_step},
                                                           {"tier", s.last_committed_tier},
                                                           {"time", s.last_committed_time}}
                                                    : Json(nullptr);
  j["metrics"] = {{"loss", Num(m.loss)},
                  {"lr", Num(m.lr)},
                  {"grad_norm", Num(m.grad_norm)},
                  {"tokens_per_s", m.tokens_per_s},
                  {"mfu", m.mfu},
                  {"flops_per_token", m.flops_per_token},
                  {"peak_flops", m.peak_flops},
                  {"devices", m.devices},
                  {"tokens_total", m.tokens_total},
                  {"samples_total", m.samples_total},
                  {"cost_total", m.cost_total},
                  {"cost_per_productive_gpu_hour", m.cost_per_productive_gpu_hour},
                  {"cost_per_million_tokens", m.cost_per_million_tokens},
                  {"data_wait_ratio", m.data_wait_ratio},
                  {"inferred_steps", m.inferred_steps},
                  {"ckpt_bytes", m.ckpt_bytes},
                  {"ckpt_seconds", m.ckpt_seconds},
                  {"straggler_score", straggler}};
  return j;
}

Json SecondsJson(const std::array<double, kTimeCategoryCount>& seconds) {
  Json j = Json::object();
  for (size_t i = 0; i < seconds.size(); ++i) {
    j[TimeCategoryName(static_cast<TimeCategory>(i))] = seconds[i];
  }
  return j;
}

Json Series(const ControllerStatus& s) {
  Json points = Json::array();
  for (const SeriesPoint& p : s.metrics.series) {
    points.push_back({{"t", p.t},
                      {"step", p.step},
                      {"loss", Num(p.loss)},
                      {"tokens_per_s", p.tokens_per_s},
                      {"mfu", p.mfu},
                      {"ettr", p.ettr},
                      {"seconds", SecondsJson(p.seconds)}});
  }
  return {{"points", points}};
}

Json Incidents(const ControllerStatus& s) {
  Json costs = Json::array();
  for (const IncidentRow& r : s.ledger.incidents) {
    costs.push_back({{"kind", FaultKindName(r.incident.kind)},
                     {"action", r.action},
                     {"detection_s", r.detection_s},
                     {"restart_s", r.restart_s},
                     {"reinit_s", r.reinit_s},
                     {"rework_s", r.rework_s},
                     {"diagnosis_s", r.diagnosis_s},
                     {"rework_steps", r.rework_steps},
                     {"resumed_from_step", r.resumed_from_step}});
  }
  Json incidents = s.incidents;
  for (Json& i : incidents) {  // stacks come from /api/stacks, not with every poll
    if (i.contains("stacks_file") || i.contains("stacks")) i["has_stacks"] = true;
    i.erase("stacks");
    i.erase("log_tail");
    if (i.contains("replay") && i["replay"].is_object()) {  // its losses and spec: not per poll
      i["replay"].erase("losses");
      i["replay"].erase("spec_yaml");
    }
  }
  return {{"incidents", incidents}, {"costs", costs}, {"observations", s.observations}};
}

Json Ranks(const JobMetricsSnapshot& m) {
  Json ranks = Json::object(), busy = Json::object(), score = Json::object();
  for (const auto& [rank, steps] : m.rank_steps) {
    Json a = Json::array();
    for (const auto& [step, t] : steps) a.push_back({step, t});
    ranks[std::to_string(rank)] = a;
  }
  for (const auto& [rank, v] : m.rank_busy_median) busy[std::to_string(rank)] = v;
  for (const auto& [rank, v] : m.straggler_score) score[std::to_string(rank)] = v;
  return {{"ranks", ranks}, {"busy_median", busy}, {"straggler_score", score}};
}

Json Checkpoints(const ControllerStatus& s) {
  return {{"committed_steps", s.committed_steps},   {"last_step", s.last_committed_step},
          {"last_tier", s.last_committed_tier},     {"last_time", s.last_committed_time},
          {"bytes_by_tier", s.metrics.ckpt_bytes},  {"seconds_by_tier", s.metrics.ckpt_seconds},
          {"interval_s", s.metrics.ckpt_interval_s}};
}

metrics::HttpResponse JsonResponse(const Json& j, int code = 200) {
  return {code, "application/json", j.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

// /api/stacks?incident=N: the stacks file of the N-th incident (0-based).
metrics::HttpResponse Stacks(const ControllerStatus& s, const std::string& query) {
  constexpr size_t kMaxBytes = 256 * 1024;
  long n = -1;
  const std::string key = "incident=";
  const size_t at = query.find(key);
  if (at != std::string::npos) {
    try {
      n = std::stol(query.substr(at + key.size()));
    } catch (...) {
      n = -1;
    }
  }
  if (n < 0 || n >= static_cast<long>(s.incidents.size())) {
    return JsonResponse({{"error", "incident=N: N must be 0.." +
                                       std::to_string(s.incidents.size()) + " (exclusive)"}},
                        400);
  }
  const Json& inc = s.incidents[static_cast<size_t>(n)];
  if (!inc.contains("stacks_file") || !inc["stacks_file"].is_string()) {
    return JsonResponse({{"incident", n}, {"stacks", nullptr}});
  }
  std::ifstream f(inc["stacks_file"].get<std::string>(), std::ios::binary);
  std::string text(kMaxBytes, '\0');
  f.read(text.data(), static_cast<std::streamsize>(kMaxBytes));
  text.resize(static_cast<size_t>(f.gcount()));
  if (text.size() == kMaxBytes) text += "\n[... cut at 256 KiB]";
  return JsonResponse({{"incident", n}, {"stacks", text}});
}

}  // namespace

std::optional<metrics::HttpResponse> DashboardApi(const ControllerStatus& s, const std::string& job,
                                                  double ettr_target, const std::string& path,
                                                  const std::string& query, double now) {
  if (path == "/api/status") return JsonResponse(StatusJson(s, job, ettr_target, now));
  if (path == "/api/series") return JsonResponse(Series(s));
  if (path == "/api/incidents") return JsonResponse(Incidents(s));
  if (path == "/api/ranks") return JsonResponse(Ranks(s.metrics));
  if (path == "/api/checkpoints") return JsonResponse(Checkpoints(s));
  if (path == "/api/stacks") return Stacks(s, query);
  return std::nullopt;
}

}  // namespace bulwark
