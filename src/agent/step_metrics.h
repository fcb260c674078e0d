// The optional measurements of an SDK step report (docs/protocol.md section 2,
// docs/monitoring.md) as the agent forwards them: a value that is not a finite number
// in its field's range is dropped, never forwarded, and named so the agent can warn.
// Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/json_util.h"

namespace bulwark {

// Copies the optional step fields of `in` that are numbers within their bounds into
// `out` (samples ≤ 1e12; lr ≤ 1e3; grad_norm ≤ 1e30; data_wait, compute, optimizer,
// busy in seconds ≤ 1e6; all ≥ 0), `inferred` when true, and the replay digests `rng` and
// `data` when each is 16 lowercase hex digits. Each field present but refused is
// appended to `refused` as "field (got VALUE): why".
void CopyStepMetrics(const Json& in, Json* out, std::vector<std::string>* refused);

// True for a 64-bit digest as the wire carries it: a string of 16 lowercase hex digits.
bool IsDigestHex(const Json& v);

}  // namespace bulwark
