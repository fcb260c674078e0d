// Test-only helpers: where the fixtures are, and a fixture's contents.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace bulwark::trainjob::testing {

#ifdef BW_TRAINJOB_TESTDATA_DIR
// src/trainjob/testdata (the test target defines BW_TRAINJOB_TESTDATA_DIR).
inline const std::string kTestdata = BW_TRAINJOB_TESTDATA_DIR;
#endif

// The contents of a fixture file ("" when unreadable, which the test's parse then
// reports).
inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace bulwark::trainjob::testing
