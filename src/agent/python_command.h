// Recognises a rank command that starts a Python interpreter, for the agent's warm
// rank pool and the long-lived store server (docs/agent.md, "Warm ranks"). Pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace bulwark {

struct PythonCommand {
  std::string interpreter;           // argv[0] ("/usr/bin/python3", "python")
  std::vector<std::string> options;  // interpreter options before the target ("-u", "-X", "dev")
  std::string script;                // the script ("train.py"), or "" with -m
  std::string module;                // the module with -m ("pkg.train"), else ""
  std::vector<std::string> args;     // the script's or module's arguments
};

// argv = `python[3[.N]] [options] (SCRIPT | -m MODULE) [args...]`; nullopt for
// anything else (torchrun, a binary, `python -c ...`, options we do not know).
std::optional<PythonCommand> ParsePythonCommand(const std::vector<std::string>& argv);

// The argv that runs `module` (e.g. "bulwark.warm") with the same interpreter and
// interpreter options as `cmd`.
std::vector<std::string> PythonModuleArgv(const PythonCommand& cmd, const std::string& module);

}  // namespace bulwark
