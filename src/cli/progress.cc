#include "cli/progress.h"

#include <cmath>
#include <cstdio>

namespace bulwark::cli {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string Si(double v) {
  if (v >= 1e9) return Fmt("%.1fG", v / 1e9);
  if (v >= 1e6) return Fmt("%.1fM", v / 1e6);
  if (v >= 1e3) return Fmt("%.1fk", v / 1e3);
  return Fmt("%.0f", v);
}

std::string Duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  const long t = std::lround(s);
  if (t >= 3600) return std::to_string(t / 3600) + "h" + Fmt("%02.0f", (t % 3600) / 60) + "m";
  if (t >= 60) return std::to_string(t / 60) + "m" + Fmt("%02.0f", t % 60) + "s";
  return std::to_string(t) + "s";
}

double NumOr(const Json& j, const char* k, double def) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : def;
}

}  // namespace

std::string FormatProgress(const Progress& p, int width) {
  std::string out = p.phase.empty() ? "Pending" : p.phase;
  if (p.step >= 0) {
    out += "  step " + std::to_string(p.step);
    if (p.total > 0) {
      out += "/" + std::to_string(p.total) +
             Fmt(" (%.0f%%)",
                 100.0 * std::min(1.0, static_cast<double>(p.step) / static_cast<double>(p.total)));
    }
  }
  if (std::isfinite(p.loss)) out += "  loss " + Fmt("%.4g", p.loss);
  if (p.tokens_per_s > 0) out += "  " + Si(p.tokens_per_s) + " tok/s";
  if (p.mfu > 0) out += "  MFU " + Fmt("%.1f%%", 100 * p.mfu);
  out += "  ETTR " + Fmt("%.3f", p.ettr);
  if (p.total > 0 && p.steps_per_s > 0 && p.step >= 0 && p.step < p.total) {
    out += "  ETA " + Duration(static_cast<double>(p.total - p.step) / p.steps_per_s);
  }
  if (p.ckpt_step >= 0) {
    out += "  ckpt " + std::to_string(p.ckpt_step) + " " + p.ckpt_tier;
    if (p.ckpt_age_s >= 0) out += " " + Duration(p.ckpt_age_s) + " ago";
  }
  if (p.cost > 0) out += "  $" + Fmt("%.2f", p.cost);
  if (p.restarts > 0) out += "  restarts " + std::to_string(p.restarts);
  if (width > 0 && static_cast<int>(out.size()) > width) out.resize(static_cast<size_t>(width));
  return out;
}

long TotalStepsFromArgs(const std::vector<std::string>& args) {
  static const char* kNames[] = {"--steps",       "--max-steps",   "--max_steps", "--total-steps",
                                 "--total_steps", "--train-steps", "--num-steps", "--iters"};
  for (size_t i = 0; i < args.size(); ++i) {
    for (const char* name : kNames) {
      const std::string n = name;
      std::string value;
      if (args[i] == n && i + 1 < args.size()) {
        value = args[i + 1];
      } else if (args[i].rfind(n + "=", 0) == 0) {
        value = args[i].substr(n.size() + 1);
      } else {
        continue;
      }
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (end != value.c_str() && *end == '\0' && v > 0) return v;
    }
  }
  return 0;
}

Progress ProgressFromReport(const Json& r, double now) {
  Progress p;
  if (r.contains("phase") && r["phase"].is_string()) p.phase = r["phase"].get<std::string>();
  p.step = static_cast<long>(NumOr(r, "last_step", -1));
  p.total = static_cast<long>(NumOr(r, "total_steps", 0));
  p.ettr = NumOr(r, "ettr", 0);
  p.restarts = static_cast<int>(NumOr(r, "restarts", 0));
  if (r.contains("metrics") && r["metrics"].is_object()) {
    const Json& m = r["metrics"];
    p.tokens_per_s = NumOr(m, "tokens_per_s", 0);
    p.mfu = NumOr(m, "mfu", 0);
    p.loss = NumOr(m, "loss", __builtin_nan(""));
    p.cost = NumOr(m, "cost_dollars", 0);
  }
  if (r.contains("last_checkpoint") && r["last_checkpoint"].is_object()) {
    const Json& c = r["last_checkpoint"];
    p.ckpt_step = static_cast<long>(NumOr(c, "step", -1));
    if (c.contains("tier") && c["tier"].is_string()) p.ckpt_tier = c["tier"].get<std::string>();
    const double t = NumOr(c, "time", 0);
    if (t > 0) p.ckpt_age_s = now - t;
  }
  return p;
}

}  // namespace bulwark::cli
