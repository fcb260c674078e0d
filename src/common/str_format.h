// printf-style formatting into a std::string (messages and reasons). Thread-safe.
#pragma once

#include <string>

namespace bulwark {

// The formatted text; any length (not truncated).
std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace bulwark
