// The `bulwark` command line (cli_main.cc lists the commands). main() is only a call to
// Main, so tests and the CLI fuzz target can run a command line in process.
#pragma once

#include "cli/command_filter.h"

namespace bulwark::cli {

// Parses `argv` and runs the command it names. Returns the exit status: 0 success,
// 1 failure, 2 usage error (--help and --version: 0), 130 for a run cancelled by a
// signal. Writes to stdout/stderr. Not thread-safe: `run` installs signal handlers and
// commands use process-wide state (the working directory, the environment).
int Main(int argc, char** argv);

// Main with the given filter of which subcommands are built in full (Main's own:
// CommandFilter::FromArgv). Tests run a command line with every subcommand built
// (CommandFilter{}) to show that Main's filter changes no output and no exit status.
int MainWithFilter(int argc, char** argv, const CommandFilter& filter);

}  // namespace bulwark::cli
