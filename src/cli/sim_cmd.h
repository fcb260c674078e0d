// `bulwark sim CONFIG.yaml [--json OUT] [--csv OUT] [--seed N]`: run the cluster
// simulator (src/sim/sim.h, docs/simulator.md) and print a summary table.
//
// SimRun writes the summary to `out` and errors to `err` and returns the exit code:
// 0 success, 1 the simulation failed or an output file could not be written, 2 a
// usage error (missing or unreadable config, bad --seed, config errors; each names
// the field/line and the fix). Stateless; thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <ostream>
#include <string>

#include "cli/command_filter.h"

namespace bulwark::cli {

struct SimFlags {
  std::string config;
  std::string json;  // write the full result as JSON here ("-": stdout instead of the table)
  std::string csv;   // write the time series here
  std::string seed;  // overrides sim.seed when non-empty (an integer >= 0)
};
int SimRun(const SimFlags& f, std::ostream& out, std::ostream& err);

// Registers `sim` on `app` (only its name and description unless filter.Full("sim")).
// After app.parse, if the returned subcommand was given, *exit_code holds the command's
// exit code.
CLI::App* AddSimCommand(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                        std::ostream& err = std::cerr, const CommandFilter& filter = {});

}  // namespace bulwark::cli
