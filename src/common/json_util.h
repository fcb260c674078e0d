// Typed field access for protocol messages. A missing or wrongly typed field yields
// InvalidArgument naming the message type and the field, so a bad peer message is
// logged and dropped, never crashes the receiver. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark {

Result<long> JInt(const Json& j, const char* field);
Result<double> JNum(const Json& j, const char* field);  // accepts ints; null -> NaN
Result<std::string> JStr(const Json& j, const char* field);
Result<std::vector<std::string>> JStrList(const Json& j, const char* field);
Result<std::map<std::string, std::string>> JStrMap(const Json& j, const char* field);
// Optional variants return `def` when the field is absent (still an error if mistyped).
Result<long> JIntOr(const Json& j, const char* field, long def);
Result<double> JNumOr(const Json& j, const char* field, double def);
Result<std::string> JStrOr(const Json& j, const char* field, const std::string& def);
// A list of integers; an absent field is an empty list.
Result<std::vector<long>> JIntListOr(const Json& j, const char* field);

// A 64-bit digest as the wire carries it (the alignment check's `digest`, a step
// report's `rng`/`data`): 16 lowercase hex digits.
std::string DigestHex(uint64_t digest);
// True, with *out set, when `v` is such a string.
bool ParseDigestHex(const Json& v, uint64_t* out);

// `j` as text (dump(indent)), with string bytes that are not UTF-8 replaced by U+FFFD
// instead of dump()'s exception: for output holding what a file or a peer said.
std::string DumpText(const Json& j, int indent = -1);

}  // namespace bulwark
