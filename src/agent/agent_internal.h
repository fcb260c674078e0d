// Helpers shared by agent.cc and agent_ranks.cc (the two halves of Agent). Not part of
// the agent's public interface.
#pragma once

#include <string>

namespace bulwark::agent_internal {

// Prints "bulwark-agent: MSG" to stderr. Thread-safe (one write per line).
void Warn(const std::string& msg);
// This machine's host name ("unknown" if it cannot be read).
std::string HostName();

}  // namespace bulwark::agent_internal
