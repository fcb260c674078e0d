// main() for a fuzz target built without libFuzzer (GCC builds, CI's normal and
// ASan+UBSan halves): feeds the target every input of its checked-in corpus, then
// `--mutations N` inputs made from them by seeded random edits (bit flips, byte
// insertions and deletions, repeated chunks, splices of two inputs), each at most
// `--max-len` bytes. No coverage guidance: this is the corpus as a regression suite plus
// a bounded, reproducible smoke fuzz; coverage-guided runs are scripts/fuzz.sh
// (libFuzzer, clang). A contract violation aborts, naming the input (and saving a
// mutated one as ./fuzz-replay-crash-<target>).
//   usage: TARGET CORPUS_DIR [--mutations N] [--seed S] [--max-len BYTES]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

void IgnoreResult(ssize_t) {}  // a failed write of the crash file: the abort says enough

std::string g_current;     // what is being run, for the abort message
std::string g_input;       // a mutated input being run ("" for a corpus file)
std::string g_crash_path;  // where an aborting mutated input is saved

void OnAbort(int) {
  std::fprintf(stderr, "fuzz replay: the target aborted on %s\n", g_current.c_str());
  if (!g_input.empty()) {
    const int fd = ::open(g_crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      IgnoreResult(::write(fd, g_input.data(), g_input.size()));
      ::close(fd);
    }
  }
  std::signal(SIGABRT, SIG_DFL);
  std::abort();
}

std::string Mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng, size_t max_len) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  std::string s = corpus[pick(corpus.size())];
  const int edits = 1 + static_cast<int>(pick(8));
  for (int e = 0; e < edits; ++e) {
    switch (pick(6)) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case 1:  // insert a byte (often a YAML/JSON special character)
        s.insert(s.begin() + static_cast<long>(pick(s.size() + 1)),
                 pick(2) ? "{}[]:,-\"'\n #&*!|>%@`\\\0\xff"[pick(24)] : static_cast<char>(rng()));
        break;
      case 2:  // delete a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 3:  // repeat a chunk
        if (!s.empty()) {
          const size_t at = pick(s.size());
          const std::string chunk = s.substr(at, 1 + pick(32));
          s.insert(pick(s.size() + 1), chunk);
        }
        break;
      case 4: {  // splice with another input
        const std::string& o = corpus[pick(corpus.size())];
        s = s.substr(0, pick(s.size() + 1)) + o.substr(pick(o.size() + 1));
        break;
      }
      default:  // overwrite a byte with a boundary value
        if (!s.empty()) s[pick(s.size())] = "\x00\x01\x7f\x80\xff"[pick(5)];
        break;
    }
  }
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [--mutations N] [--seed S] [--max-len BYTES]\n",
                 argv[0]);
    return 2;
  }
  long mutations = 0;
  uint64_t seed = 1;
  size_t max_len = 16384;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mutations")) mutations = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--max-len")) max_len = std::strtoul(argv[i + 1], nullptr, 10);
  }
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::signal(SIGABRT, OnAbort);
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(argv[1], ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  if (ec || files.empty()) {
    std::fprintf(stderr, "fuzz replay: no corpus in %s\n", argv[1]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> corpus;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    g_current = f.string();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    corpus.push_back(std::move(data));
  }
  std::mt19937_64 rng(seed);
  g_crash_path = "fuzz-replay-crash-" + std::filesystem::path(argv[0]).filename().string();
  for (long m = 0; m < mutations; ++m) {
    g_input = Mutate(corpus, rng, max_len);
    g_current = "mutation " + std::to_string(m) + " (seed " + std::to_string(seed) +
                "), saved as ./" + g_crash_path;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(g_input.data()), g_input.size());
  }
  std::printf(
      "fuzz replay: %zu corpus inputs and %ld mutations (seed %llu): no contract "
      "broken\n",
      corpus.size(), mutations, static_cast<unsigned long long>(seed));
  return 0;
}
