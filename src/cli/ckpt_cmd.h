// `bulwark ckpt ls | inspect | verify | gc`: inspect and maintain a checkpoint
// directory (a tier root holding step-<012d>/ dirs, see ckpt/checkpoint.h). `ls` and
// `gc` also take an object tier, "s3://BUCKET[/PREFIX][?endpoint=URL]"
// (ckpt/object_tier.h; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
//
// Each command is a function writing its report to `out` and its errors to `err`
// and returning the process exit code: 0 success, 1 a problem found in the
// checkpoint (corrupt, uncommitted, failed verification, I/O error), 2 a usage
// error (missing or non-existent DIR, non-numeric STEP, keep < 1, ...). Arguments
// are taken as strings so that every usage error gets the same treatment (a message
// naming the argument and the fix, exit code 2). Nothing here throws or aborts on a
// corrupt checkpoint: corruption is reported.
//
// Thread-safety: the functions are stateless; the usual rules of ckpt/ apply to
// concurrent writers of the same directory (gc racing a commit is the caller's to
// avoid).
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "ckpt/env.h"
#include "cli/command_filter.h"
#include "common/status.h"

namespace bulwark::cli {

struct CkptLsFlags {
  std::string dir;
  bool all = false;  // also list uncommitted / invalid step directories
  bool json = false;
};
int CkptLs(ckpt::Env* env, const CkptLsFlags& f, std::ostream& out, std::ostream& err);

struct CkptInspectFlags {
  std::string dir;
  std::string step;
  std::string rank;  // empty: every rank
  bool json = false;
};
int CkptInspect(ckpt::Env* env, const CkptInspectFlags& f, std::ostream& out, std::ostream& err);

struct CkptVerifyFlags {
  std::string dir;
  std::string step;  // empty: every step
  bool all = false;  // explicit "every step" (the default without STEP)
  bool json = false;
};
int CkptVerify(ckpt::Env* env, const CkptVerifyFlags& f, std::ostream& out, std::ostream& err);

struct CkptGcFlags {
  std::string dir;
  std::string keep;  // required, >= 1
  std::string golden_every = "0";
  bool dry_run = false;
  bool json = false;
  // Where the replay bundles pinning steps of `dir` are read (ReplayPinnedSteps):
  // empty = the known stores. `ignore_replay_pins` removes pinned steps too.
  std::vector<std::string> stores;
  bool ignore_replay_pins = false;
};
int CkptGc(ckpt::Env* env, const CkptGcFlags& f, std::ostream& out, std::ostream& err);

// What ckpt::Retain removes, computed without removing anything (same rule: keep
// the newest `keep` committed steps, committed steps divisible by golden_every, and
// the dependency closure of those; remove every other step directory older than
// the newest committed step).
struct GcPlan {
  long newest = -1;                 // newest committed step; -1: none (nothing removed)
  std::vector<long> remove;         // ascending
  std::map<long, std::string> why;  // step in `remove` -> reason
  std::set<long> kept_newest, kept_golden, kept_deps;  // committed steps kept, by reason
  std::map<long, std::string> kept_pinned;  // committed steps a replay bundle needs -> whose
  std::vector<long> kept_other;             // uncommitted dirs at or after `newest` (never touched)
};
GcPlan ComputeGcPlan(ckpt::Env* env, const std::string& root, const std::vector<long>& step_dirs,
                     int keep, long golden_every, const std::map<long, std::string>& pinned = {});
// The same from what a tier scan found (pure): committed step -> its dependencies,
// uncommitted step -> why. `remove` is ckpt::PlanRetain's decision; the rest explains it.
GcPlan ComputeGcPlan(const std::map<long, std::vector<long>>& committed_deps,
                     const std::map<long, std::string>& uncommitted,
                     const std::vector<long>& step_dirs, int keep, long golden_every,
                     const std::map<long, std::string>& pinned = {});

// Step numbers of the "step-<12 digits>" directories under `root`, ascending.
Result<std::vector<long>> ListStepDirs(ckpt::Env* env, const std::string& root);

// Registers `ckpt` and its four subcommands on `app` (only its name and description
// unless filter.Full("ckpt")). After app.parse, if the returned subcommand was given,
// *exit_code holds the command's exit code.
CLI::App* AddCkptCommands(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                          std::ostream& err = std::cerr, const CommandFilter& filter = {});

}  // namespace bulwark::cli
