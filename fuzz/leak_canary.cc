// Not a reader of user input: the check that leak detection works under the options a
// fuzz run uses (scripts/fuzz.sh runs it before any target). An input that starts with
// "leak" loses the only pointer to a heap block, as a reader's leak would; every other
// input frees what it allocates. LeakSanitizer, run by libFuzzer after such an input or
// at exit, must report the block; under ASAN_OPTIONS=malloc_context_size=0 or 1 it
// reports nothing (it drops leaks whose allocation stack holds no caller's frame), which
// is how the campaign's leak detection was off unnoticed until 7 December 2026.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {

// Where the block lives until the input drops it: a global a compiler must write, so no
// stale copy of the pointer stays in a register or stack slot that LeakSanitizer scans.
char* volatile g_block = nullptr;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_block = new char[64];
  g_block[0] = 1;
  if (size >= 4 && std::memcmp(data, "leak", 4) == 0) {
    g_block = nullptr;  // the leak
    return 0;
  }
  delete[] g_block;
  g_block = nullptr;
  return 0;
}
