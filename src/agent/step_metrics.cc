#include "agent/step_metrics.h"

#include <cmath>

namespace bulwark {

bool IsDigestHex(const Json& v) {
  uint64_t ignored = 0;
  return ParseDigestHex(v, &ignored);
}

void CopyStepMetrics(const Json& in, Json* out, std::vector<std::string>* refused) {
  struct Bound {
    const char* key;
    double max;
    const char* unit;
  };
  static constexpr Bound kBounds[] = {{"samples", 1e12, ""},   {"lr", 1e3, ""},
                                      {"grad_norm", 1e30, ""}, {"data_wait", 1e6, " s"},
                                      {"compute", 1e6, " s"},  {"optimizer", 1e6, " s"},
                                      {"busy", 1e6, " s"}};
  for (const Bound& b : kBounds) {
    if (!in.contains(b.key)) continue;
    const Json& v = in[b.key];
    if (!v.is_number()) {
      refused->push_back(std::string(b.key) + " (got " + v.dump() + "): not a number");
      continue;
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0 || d > b.max) {
      refused->push_back(std::string(b.key) + " (got " + v.dump() + "): must be in [0, " +
                         Json(b.max).dump() + "]" + b.unit);
      continue;
    }
    (*out)[b.key] = d;
  }
  if (in.contains("inferred") && in["inferred"].is_boolean() && in["inferred"].get<bool>()) {
    (*out)["inferred"] = true;
  }
  for (const char* key : {"rng", "data"}) {
    if (!in.contains(key)) continue;
    const Json& v = in[key];
    if (!IsDigestHex(v)) {
      refused->push_back(std::string(key) + " (got " + v.dump().substr(0, 40) +
                         "): must be 16 lowercase hex digits");
      continue;
    }
    (*out)[key] = v;
  }
  if (in.contains("sums")) {
    const Json& v = in["sums"];
    if (v == "ordered" || v == "unordered") {
      (*out)["sums"] = v;
    } else {
      refused->push_back("sums (got " + v.dump().substr(0, 40) +
                         "): must be \"ordered\" or \"unordered\"");
    }
  }
}

}  // namespace bulwark
