// `bulwark diagnose`: this node's self-tests (diag/diag.h) — the compute check and a
// write/fsync/read check of each checkpoint directory, each in its own bulwark-agent
// process with a time budget — and the verdict. Exit 0 healthy, 1 unhealthy, 2 usage.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command_filter.h"

namespace bulwark::cli {

struct DiagnoseFlags {
  std::vector<std::string> checkpoint_dirs;
  double budget_s = 30;  // per check
  int matmul_n = 256;
  int disk_mib = 16;
  std::string output;  // "" (a table) or json
  std::string inject;  // chaos: hang | sdc (the compute check)
  std::string agent;   // bulwark-agent ("" = next to this executable)
  // The gpu check's NVML library ("" = no gpu check); without a driver it passes with
  // nothing to test.
  std::string nvml_library = "libnvidia-ml.so.1";
  // The matmul check's CUDA runtime and cuBLAS ("auto": the usual names; "": the CPU
  // only); without them it runs on the CPU.
  std::string cuda_runtime = "auto";
  std::string cublas = "auto";
};
int DiagnoseRun(const DiagnoseFlags& f, std::ostream& out, std::ostream& err);

// Registers `diagnose` on `app` (only its name and description unless
// filter.Full("diagnose")); after app.parse, if it was given, *exit_code holds its exit
// code.
CLI::App* AddDiagnoseCommand(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                             std::ostream& err = std::cerr, const CommandFilter& filter = {});

}  // namespace bulwark::cli
