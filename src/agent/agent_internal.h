// Helpers shared by agent.cc and agent_ranks.cc (the two halves of Agent). Not part of
// the agent's public interface.
#pragma once

#include <string>

namespace bulwark::agent_internal {

// Prints "bulwark-agent: MSG" to stderr. Thread-safe (one write per line).
void Warn(const std::string& msg);

}  // namespace bulwark::agent_internal
