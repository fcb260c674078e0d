// The agent's reader of SDK -> agent datagrams (docs/protocol.md §2: hello, step,
// ckpt, staged, model, parked, finished, zygote_ready, warm_ready, and anything else):
// the input is datagrams separated by newlines (the SDK's JSON never holds a raw
// newline), sent to the agent's socket while it runs attempt 0 with ranks 0 and 1,
// then read by the agent's HandleDatagram. See agent_fixture.h for the set-up.
// Contracts checked beyond "no crash": the agent keeps running, and everything it
// forwards to the controller is a JSON object with a string `type`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/agent_fixture.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bulwark::fuzz::Silence quiet(/*out=*/false, /*err=*/true);  // the agent's warnings
  static auto* fixture = new bulwark::fuzz::AgentFixture();
  const std::string text(reinterpret_cast<const char*>(data), size);
  fixture->Get(/*ranks=*/true);
  size_t pos = 0;
  int sent = 0;
  while (pos <= text.size() && sent < 64) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (nl > pos) {
      fixture->SendDatagram(text.substr(pos, nl - pos));
      ++sent;
    }
    pos = nl + 1;
  }
  for (int i = 0; i < 3 && fixture->Turn(); ++i) {
  }
  return 0;
}
