// The agent's reader of controller -> agent messages (docs/protocol.md §1): the input
// is bytes on the controller's connection (newline-delimited JSON: start, stop, chaos,
// capture_stacks, cadence, prepare, welcome, shutdown, and anything else), read by
// the agent's JsonLineConn and HandleController. See agent_fixture.h for the set-up.
// Contracts checked beyond "no crash": the agent keeps running or exits with a
// documented code, and everything it sends back is a JSON object with a string `type`
// (on a line of its own).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/agent_fixture.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bulwark::fuzz::Silence quiet(/*out=*/false, /*err=*/true);  // the agent's warnings
  static auto* fixture = new bulwark::fuzz::AgentFixture();
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Even inputs reach an idle agent, odd ones an agent running two ranks.
  fixture->Get(size % 2 == 1);
  std::string out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = fixture->Sanitise(text.substr(pos, nl - pos));
    if (!line.empty()) out += line + "\n";
    pos = nl + 1;
  }
  fixture->SendRaw(out);
  for (int i = 0; i < 4 && fixture->Turn(); ++i) {
  }
  return 0;
}
