// `bulwark get`, `describe`, `logs` and `cancel`: the local jobs that `bulwark run`
// recorded in its stores (stores.h finds them), in kubectl's conventions — a header
// row, `get NAME...`, `-o json|yaml|wide|name`, exit 0 ok / 1 failure / 2 usage.
// Stores are opened read-only; `cancel` talks to the job's controller (its run dir's
// controller.addr). Commands write to the given streams; not thread-safe.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command_filter.h"
#include "common/clock.h"

namespace bulwark::cli {

struct GetFlags {
  std::string store;               // "" = every store KnownStores finds
  std::vector<std::string> names;  // empty = every job
  std::string output;              // "" (table), wide, name, json, yaml
};

struct DescribeFlags {
  std::string store;
  std::string name;
  std::string output;  // "" (text), json, yaml
};

struct LogsFlags {
  std::string store;
  std::string name;
  int rank = 0;            // global rank whose log is shown
  bool all_ranks = false;  // every rank's log, each line prefixed "[rank N] "
  long tail = -1;          // only the last N lines of each log (-1 = all)
  bool follow = false;     // keep printing new lines until the job ends
  double poll_s = 0.2;     // follow: how often the files are checked
};

struct CancelFlags {
  std::string store;
  std::string name;
  double wait_s = 60;  // wait for the job to end Cancelled (0 = do not wait)
};

int GetJobs(const GetFlags& f, std::ostream& out, std::ostream& err, Clock* clock);
int DescribeJob(const DescribeFlags& f, std::ostream& out, std::ostream& err, Clock* clock);
int JobLogs(const LogsFlags& f, std::ostream& out, std::ostream& err, Clock* clock);
int CancelJob(const CancelFlags& f, std::ostream& out, std::ostream& err, Clock* clock);

// Adds get, describe, logs and cancel to `app`, each in full only if `filter` says so
// (else by name and description); the one that runs stores its exit status in
// *exit_code. Returns the four subcommands.
std::vector<CLI::App*> AddJobCommands(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                                      std::ostream& err = std::cerr,
                                      const CommandFilter& filter = {});

// "45s", "12m", "3h", "5d": kubectl's AGE column for `seconds` (negative: "0s").
std::string FormatAge(double seconds);

}  // namespace bulwark::cli
