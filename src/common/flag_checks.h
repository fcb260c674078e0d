// Checks for numeric command-line flags (CLI11 validators) whose errors say what is
// allowed and what was given — "--rank: must be >= 0 (got -1)" — where CLI11's own
// NonNegativeNumber/PositiveNumber print a 300-digit upper bound ("Value -1 not in range
// 0.000000 to 179769313486231570814527...") and Range prints "0.100000 to 3600.000000".
// They check the text before CLI11 converts it: a value that is not a number fails
// here ("must be a number"), a fractional value for an integer flag fails CLI11's
// conversion after. Thread-compatible (the validators hold only their bounds).
#ifndef BULWARK_COMMON_FLAG_CHECKS_H_
#define BULWARK_COMMON_FLAG_CHECKS_H_

#include <CLI/CLI.hpp>
#include <string>

namespace bulwark::flags {

// lo <= value <= hi. Help shows "[lo, hi]".
CLI::Validator InRange(double lo, double hi);
// value >= lo. Help shows ">= lo" (NONNEGATIVE for 0).
CLI::Validator AtLeast(double lo);
// value > 0. Help shows POSITIVE.
CLI::Validator Positive();

}  // namespace bulwark::flags

#endif  // BULWARK_COMMON_FLAG_CHECKS_H_
