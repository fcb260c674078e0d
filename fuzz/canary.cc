// Not a reader of user input: the check that a fuzz run reports what it must, under the
// options and harness plumbing the targets get (scripts/fuzz.sh runs it before any
// target and runs nothing if a report is missing). Inputs:
//   "leak"      drops the only pointer to a heap block, as a reader's leak would.
//               LeakSanitizer (run by libFuzzer after such an input, and at exit) must
//               report it. Under ASAN_OPTIONS=malloc_context_size=0 or 1 it reports
//               nothing (it drops leaks whose allocation stack holds no caller's frame):
//               that is how the campaign's leak detection was off unnoticed until
//               7 December 2026.
//   "overflow"  reads past a heap block while a Silence (fuzz_util.h) sends stdout and
//               stderr to /dev/null, as four targets do around the code under test.
//               AddressSanitizer's report must still reach the run's log.
// Every other input frees what it allocates and returns.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz/fuzz_util.h"

namespace {

// Where the block lives until the input drops it: a global a compiler must write, so no
// stale copy of the pointer stays in a register or stack slot that LeakSanitizer scans.
char* volatile g_block = nullptr;

bool Is(const uint8_t* data, size_t size, const char* word) {
  return size == std::strlen(word) && std::memcmp(data, word, size) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_block = new char[64];
  g_block[0] = 1;
  if (Is(data, size, "leak")) {
    g_block = nullptr;  // the leak
    return 0;
  }
  if (Is(data, size, "overflow")) {
    const bulwark::fuzz::Silence quiet(/*out=*/true, /*err=*/true);
    const size_t past = 64 + size % 2;  // 64: one past the end, unknown to the compiler
    if (g_block[past] == 42) g_block[0] = 2;
  }
  delete[] g_block;
  g_block = nullptr;
  return 0;
}
