// Test-only helper: the contents of a fixture file ("" when unreadable, which the
// test's parse then reports).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace bulwark::trainjob::testing {

inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace bulwark::trainjob::testing
