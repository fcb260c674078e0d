// printf-style formatting into a std::string (messages and reasons). Thread-safe.
#pragma once

#include <string>

namespace bulwark {

// The formatted text; any length (not truncated).
std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A finite number as a person writes it: the shortest text that reads back as the same
// double ("0.1", "3600", "1099511627776", "1e+300"). NaN and infinities come out as
// "nan", "inf" and "-inf"; callers with their own spelling check for them first.
std::string ShortestDecimal(double v);

}  // namespace bulwark
