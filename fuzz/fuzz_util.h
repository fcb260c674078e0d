// Helpers shared by the fuzz targets: contract checks that abort (a crash the fuzzer
// records, with the input as its artifact) when a reader returns a wrong answer.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/status.h"

namespace bulwark::fuzz {

// Aborts with `what` (and `detail`) unless `ok`.
inline void Check(bool ok, const char* what, const std::string& detail = "") {
  if (ok) return;
  std::fprintf(stderr, "fuzz contract broken: %s\n%s\n", what, detail.c_str());
  std::abort();
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
    Check(line.substr(0, source.size()) == source,
          "error line does not name the source", msg);
    Check(line.find(": ", source.size()) != std::string_view::npos,
          "error line names no line or field", msg);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
}

}  // namespace bulwark::fuzz
