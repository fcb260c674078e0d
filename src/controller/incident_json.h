// Conversions between Incident and its JSON form (agent `incident` messages, the
// store, and the report). Pure; thread-safe.
#pragma once

#include "common/net.h"
#include "policy/recovery_policy.h"

namespace bulwark {

// How many replay bundles' checkpoints (a job's newest, distinct) are kept from
// retention: by the controller, and by `bulwark ckpt gc`.
inline constexpr size_t kReplayPinnedCheckpoints = 4;

Result<FaultKind> ParseFaultKind(const std::string& s);
// Reads kind, subtype, rank, step, fault_time, detect_time, detail; names a bad field.
Result<Incident> IncidentFromJson(const Json& j);
Json IncidentToJson(const Incident& inc);

}  // namespace bulwark
