#include "cli/adhoc.h"

#include <cctype>
#include <filesystem>

#include "trainjob/yaml_json.h"

namespace bulwark::cli {
namespace {

// A positive int from `text` ("" or junk: -1).
int PositiveInt(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  const int v = std::stoi(text);
  return v > 0 ? v : -1;
}

}  // namespace

bool IsAdhocRun(const std::string& arg, bool torchrun_flags) {
  return torchrun_flags || (arg.size() > 3 && arg.compare(arg.size() - 3, 3, ".py") == 0);
}

std::string JobNameFromScript(const std::string& script) {
  std::string stem = std::filesystem::path(script).stem().string();
  if (stem.empty()) stem = script;  // a module name such as pkg.train
  std::string out;
  for (char c : stem) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) && u < 0x80) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 63) out.resize(63);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty() || !std::isalpha(static_cast<unsigned char>(out[0]))) out = "job-" + out;
  while (out.back() == '-') out.pop_back();
  return out;
}

Result<std::string> AdhocSpecYaml(const AdhocFlags& f) {
  if (f.script.empty()) {
    return InvalidArgument(
        "give the script to run: bulwark run [--nnodes N] "
        "[--nproc-per-node P] train.py [-- ARGS]");
  }
  int nodes = 0, min_nodes = 0;
  if (const size_t colon = f.nnodes.find(':'); colon != std::string::npos) {
    min_nodes = PositiveInt(f.nnodes.substr(0, colon));
    nodes = PositiveInt(f.nnodes.substr(colon + 1));
    if (min_nodes < 0 || nodes < 0 || min_nodes > nodes) {
      return InvalidArgument("--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX (got \"" +
                             f.nnodes + "\"), e.g. --nnodes 2 or --nnodes 1:4");
    }
  } else {
    nodes = PositiveInt(f.nnodes);
    if (nodes < 0) {
      return InvalidArgument("--nnodes: expected a positive number of nodes (got \"" + f.nnodes +
                             "\"), e.g. --nnodes 2");
    }
  }
  if (f.nproc_per_node < 1) {
    return InvalidArgument("--nproc-per-node: expected >= 1 (got " +
                           std::to_string(f.nproc_per_node) + ")");
  }
  Json spec;
  spec["name"] = f.name.empty() ? JobNameFromScript(f.script) : f.name;
  spec["nodes"] = nodes;
  spec["procsPerNode"] = f.nproc_per_node;
  if (f.module) {
    spec["command"] = {f.python, "-m", f.script};
  } else if (f.script.size() > 3 && f.script.compare(f.script.size() - 3, 3, ".py") == 0) {
    spec["command"] = {f.python, f.script};
  } else {
    spec["command"] = {f.script};
  }
  if (!f.args.empty()) spec["args"] = f.args;
  Json policy = Json::object();
  if (f.max_restarts >= 0) policy["restartBudget"] = f.max_restarts;
  if (f.standby > 0) policy["spareNodes"] = f.standby;
  if (!policy.empty()) spec["faultPolicy"] = policy;
  if (min_nodes > 0 && min_nodes < nodes) spec["elastic"] = {{"minNodes", min_nodes}};
  if (!f.checkpoint_dir.empty()) spec["checkpoint"]["dir"] = f.checkpoint_dir;
  if (f.checkpoint_every > 0) spec["checkpoint"]["intervalSteps"] = f.checkpoint_every;
  return trainjob::EmitYaml({spec});
}

Result<trainjob::LoadedManifest> AdhocManifest(const AdhocFlags& f, const std::string& workdir) {
  BW_ASSIGN_OR_RETURN(const std::string yaml, AdhocSpecYaml(f));
  auto m =
      trainjob::ParseManifest(yaml, "the command line's job", workdir, trainjob::Target::kLocal);
  if (!m.ok()) {
    // The generated spec's lines mean nothing to the user; the field names do.
    return InvalidArgument(m.status().message() +
                           " (from the flags of `bulwark run`; write a "
                           "job spec to set more: `bulwark run --help`)");
  }
  return m;
}

}  // namespace bulwark::cli
