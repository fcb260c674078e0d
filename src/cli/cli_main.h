// The `bulwark` command line (cli_main.cc lists the commands). main() is only a call to
// Main, so tests and the CLI fuzz target can run a command line in process.
#pragma once

namespace bulwark::cli {

// Parses `argv` and runs the command it names. Returns the exit status: 0 success,
// 1 failure, 2 usage error (--help and --version: 0), 130 for a run cancelled by a
// signal. Writes to stdout/stderr. Not thread-safe: `run` installs signal handlers and
// commands use process-wide state (the working directory, the environment).
int Main(int argc, char** argv);

}  // namespace bulwark::cli
