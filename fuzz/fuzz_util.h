// Helpers shared by the fuzz targets: contract checks that abort (a crash the fuzzer
// records, with the input as its artifact) when a reader returns a wrong answer.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

// The sanitizers' report file descriptor (sanitizer/common_interface_defs.h): weak, so the
// replay builds without a sanitizer link; null there.
extern "C" void __sanitizer_set_report_fd(void* fd) __attribute__((weak));

namespace bulwark::fuzz {

// The stderr the fuzzer's reports go to while a Silence lives (2 otherwise).
inline int& RealStderr() {
  static int fd = 2;
  return fd;
}

// While one lives, what the code under test writes to stdout and/or stderr goes to
// /dev/null: the agent warns about every bad datagram, gigabytes of log over a 10 M
// campaign, and the writes cost time. Check and the sanitizers' reports still go to the
// real stderr (fuzz/canary.cc checks the latter before every run of scripts/fuzz.sh);
// libFuzzer's own lines (a timeout's ALARM, an OOM, the artifact's name) do not, and
// scripts/fuzz.sh writes the artifacts a run left into its log instead. Not thread-safe:
// the fuzz loop's thread only.
class Silence {
 public:
  Silence(bool out, bool err) : out_(out), err_(err) {
    std::fflush(stdout);
    std::fflush(stderr);
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (out_) {
      saved_out_ = ::dup(1);
      ::dup2(null, 1);
    }
    if (err_) {
      saved_err_ = ::dup(2);
      RealStderr() = saved_err_;
      if (__sanitizer_set_report_fd != nullptr) {
        __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(saved_err_)));
      }
      ::dup2(null, 2);
    }
    ::close(null);
  }
  ~Silence() {
    std::fflush(stdout);
    std::fflush(stderr);
    if (out_) {
      ::dup2(saved_out_, 1);
      ::close(saved_out_);
    }
    if (err_) {
      ::dup2(saved_err_, 2);
      if (__sanitizer_set_report_fd != nullptr) {
        __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(2)));
      }
      ::close(saved_err_);
      RealStderr() = 2;
    }
  }
  Silence(const Silence&) = delete;
  Silence& operator=(const Silence&) = delete;

 private:
  bool out_, err_;
  int saved_out_ = -1, saved_err_ = -1;
};

// Aborts with `what` (and `detail`) unless `ok`.
inline void Check(bool ok, const char* what, const std::string& detail = "") {
  if (ok) return;
  dprintf(RealStderr(), "fuzz contract broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// A new directory $TMPDIR/NAME.XXXXXX (/tmp when TMPDIR is unset or empty), removed with
// all in it when the process exits normally; a failed Check keeps it. scripts/fuzz.sh
// points TMPDIR into the run's scratch directory, which it removes, so an interrupted
// run leaves nothing behind either. Not thread-safe: the fuzz loop's thread only.
inline std::string ScratchDir(const char* name) {
  static auto* dirs = new std::vector<std::string>;
  if (dirs->empty()) {
    std::atexit([] {
      std::error_code ec;
      for (const std::string& d : *dirs) std::filesystem::remove_all(d, ec);
    });
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + name + ".XXXXXX";
  Check(::mkdtemp(tmpl.data()) != nullptr, "harness: mkdtemp", tmpl);
  dirs->push_back(tmpl);
  return tmpl;
}

// The contract of every YAML reader's error: a non-OK Status whose message has one
// or more lines, each starting with the source's name ("<source>:<line>: <field>: ...",
// or "<source> (converted ...): <field>: ..." for text that has no lines of its own),
// none empty.
inline void CheckErrorLines(const Status& st, const std::string& source) {
  Check(!st.ok(), "error expected");
  const std::string& msg = st.message();
  Check(!msg.empty(), "error without a message");
  size_t pos = 0;
  while (pos <= msg.size()) {
    size_t nl = msg.find('\n', pos);
    std::string_view line(msg.data() + pos, (nl == std::string::npos ? msg.size() : nl) - pos);
    Check(line.substr(0, source.size()) == source, "error line does not name the source", msg);
    Check(line.find(": ", source.size()) != std::string_view::npos,
          "error line names no line or field", msg);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
}

}  // namespace bulwark::fuzz
