#include "common/flag_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>

#include "common/str_format.h"

namespace bulwark::flags {
namespace {

// The value of `text` when all of it is a finite number.
std::optional<double> ParseNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

// A validator named `desc` that accepts a number for which `ok` holds, else says
// "must be <rule> (got <text>)".
CLI::Validator Numeric(std::string desc, std::string rule, std::function<bool(double)> ok) {
  return CLI::Validator(
      [rule = std::move(rule), ok = std::move(ok)](std::string& text) -> std::string {
        const std::optional<double> v = ParseNumber(text);
        if (!v) return "must be a number " + rule + " (got \"" + text + "\")";
        if (!ok(*v)) return "must be " + rule + " (got " + text + ")";
        return std::string();
      },
      std::move(desc));
}

}  // namespace

CLI::Validator InRange(double lo, double hi) {
  const std::string lo_s = ShortestDecimal(lo), hi_s = ShortestDecimal(hi);
  return Numeric("[" + lo_s + ", " + hi_s + "]", "between " + lo_s + " and " + hi_s,
                 [lo, hi](double v) { return v >= lo && v <= hi; });
}

CLI::Validator AtLeast(double lo) {
  const std::string lo_s = ShortestDecimal(lo);
  return Numeric(lo == 0 ? "NONNEGATIVE" : ">= " + lo_s, ">= " + lo_s,
                 [lo](double v) { return v >= lo; });
}

CLI::Validator Positive() {
  return Numeric("POSITIVE", "> 0", [](double v) { return v > 0; });
}

}  // namespace bulwark::flags
