// Where the tests find the venv scripts/test-venv.sh makes (third-party Python readers
// such as TensorBoard's): $BULWARK_TEST_VENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/
// bulwark/test-venv. Test-only; header-only.
#pragma once

#include <cstdlib>
#include <string>

namespace bulwark::testing {

inline std::string TestVenv() {
  const char* env = std::getenv("BULWARK_TEST_VENV");
  if (env != nullptr && *env != '\0') return env;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string cache = (xdg != nullptr && *xdg != '\0') ? std::string(xdg)
                            : home != nullptr                ? std::string(home) + "/.cache"
                                                             : std::string("/nonexistent");
  return cache + "/bulwark/test-venv";
}

}  // namespace bulwark::testing
