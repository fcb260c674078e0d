// `bulwark run SCRIPT` without a YAML spec, for torchrun users:
//   bulwark run --nnodes 2 --nproc-per-node 2 train.py -- --lr 3e-4
// The flags become a job spec (the same parser, defaults and checks as a file), so the
// job is exactly what `bulwark run` of that spec would run. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "trainjob/trainjob.h"

namespace bulwark::cli {

struct AdhocFlags {
  std::string script;             // a .py file, or with `module` a module name
  std::vector<std::string> args;  // after `--`
  std::string nnodes = "1";       // N, or MIN:MAX (torchrun's elastic form)
  int nproc_per_node = 1;
  std::string name;                // "" = from the script's name
  bool module = false;             // python -m SCRIPT
  int max_restarts = -1;           // faultPolicy.restartBudget (-1 = the spec default)
  int standby = 0;                 // faultPolicy.spareNodes
  std::string checkpoint_dir;      // "" = the spec default
  int checkpoint_every = 0;        // checkpoint.intervalSteps (0: the spec default, none)
  std::string python = "python3";  // the interpreter of a .py script or module
};

// Whether `run`'s argument is a script rather than a spec: it ends in .py, or a torchrun
// flag (--nnodes, --nproc-per-node, -m) was given.
bool IsAdhocRun(const std::string& arg, bool torchrun_flags);

// A DNS-1123 job name from a script path: "train_GPT.py" -> "train-gpt".
std::string JobNameFromScript(const std::string& script);

// The job spec's YAML for `f`, to be parsed as the spec of a file in `workdir`.
// InvalidArgument names the flag and the fix (--nnodes "x", --nproc-per-node 0, ...).
Result<std::string> AdhocSpecYaml(const AdhocFlags& f);

// The job spec for `f` as a manifest, parsed with relative paths against `workdir`.
Result<trainjob::LoadedManifest> AdhocManifest(const AdhocFlags& f, const std::string& workdir);

}  // namespace bulwark::cli
