#include "cli/sim_cmd.h"

#include <charconv>
#include <fstream>
#include <memory>

#include "sim/sim.h"

namespace bulwark::cli {
namespace {

int Usage(std::ostream& err, const std::string& msg) {
  err << "bulwark sim: " << msg << "\n";
  return 2;
}

// Writes via `write` to `path`; false (after reporting) when the file fails.
template <typename F>
bool WriteTo(const std::string& path, std::ostream& err, F&& write) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) write(f);
  f.flush();
  if (!f) {
    err << "bulwark sim: could not write " << path
        << "; check that the directory exists and is writable\n";
    return false;
  }
  return true;
}

}  // namespace

int SimRun(const SimFlags& f, std::ostream& out, std::ostream& err) {
  if (f.config.empty()) {
    return Usage(err, "give the simulation config: bulwark sim CONFIG.yaml (see examples/sim/)");
  }
  auto cfg = sim::LoadSimConfig(f.config);
  if (!cfg.ok()) {
    if (cfg.status().code() != Code::kInvalidArgument) {
      return Usage(err, "cannot read config " + f.config + ": " + cfg.status().message());
    }
    err << cfg.status().message() << "\n";
    return 2;
  }
  if (!f.seed.empty()) {
    uint64_t seed = 0;
    const char* b = f.seed.data();
    const char* e = b + f.seed.size();
    auto [p, ec] = std::from_chars(b, e, seed);
    if (ec != std::errc() || p != e) {
      return Usage(err, "--seed must be an integer >= 0 (got \"" + f.seed + "\")");
    }
    cfg->seed = seed;
  }
  if (f.json == "-" && f.csv == "-") {
    return Usage(err, "--json - and --csv - would both write to stdout; send one to a file");
  }
  auto r = sim::RunSimulation(*cfg);
  if (!r.ok()) {
    err << "bulwark sim: " << r.status().message() << "\n";
    return r.status().code() == Code::kInvalidArgument ? 2 : 1;
  }
  // '-' sends that output to stdout instead of the summary.
  if (f.json == "-") {
    sim::WriteJson(*r, out);
  } else if (f.csv == "-") {
    sim::WriteCsv(*r, out);
  } else {
    out << sim::FormatSummary(*r);
  }
  if (!f.json.empty() && f.json != "-" &&
      !WriteTo(f.json, err, [&](std::ostream& o) { sim::WriteJson(*r, o); })) {
    return 1;
  }
  if (!f.csv.empty() && f.csv != "-" &&
      !WriteTo(f.csv, err, [&](std::ostream& o) { sim::WriteCsv(*r, o); })) {
    return 1;
  }
  return 0;
}

CLI::App* AddSimCommand(CLI::App& app, int* exit_code, std::ostream& out, std::ostream& err,
                        const CommandFilter& filter) {
  auto flags = std::make_shared<SimFlags>();
  auto* cmd = app.add_subcommand(
      "sim", "simulate a cluster of jobs through faults with the real scheduler and policy");
  if (!filter.Full("sim")) return cmd;
  cmd->add_option("config", flags->config, "simulation config (YAML; see docs/simulator.md)");
  cmd->add_option("--json", flags->json, "write the full result as JSON ('-' for stdout)");
  cmd->add_option("--csv", flags->csv, "write the time series as CSV ('-' for stdout)");
  cmd->add_option("--seed", flags->seed, "override sim.seed");
  cmd->footer(
      "Example:\n  bulwark sim examples/sim/cluster-100k.yaml --json sim.json --csv sim.csv\n"
      "The config's format, presets and output: docs/simulator.md.");
  cmd->callback([=, &out, &err] { *exit_code = SimRun(*flags, out, err); });
  return cmd;
}

}  // namespace bulwark::cli
