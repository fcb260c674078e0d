// Bulwark on Slurm from the command line (docs/slurm.md):
//  * `bulwark run` inside an allocation: PrepareSlurmRun checks the allocation against
//    the job and creates the SlurmBackend (backend/slurm_backend.h);
//  * `bulwark slurm script SPEC [--partition P] [--account A] [--qos Q] [--time T]
//    [--constraint C] [--output PATTERN] [-- RUN FLAGS]`: prints an sbatch script that
//    allocates the job's nodes plus its warm standbys and runs `bulwark run SPEC` in the
//    allocation.
// Thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "backend/slurm_backend.h"
#include "cli/command_filter.h"
#include "spec/job_spec.h"

namespace bulwark::cli {

// Whether `bulwark run --backend FLAG` runs on Slurm: "slurm", or "auto" inside an
// allocation (SLURM_JOB_ID set in `env`). "local" never.
bool UseSlurm(const std::string& flag, const std::map<std::string, std::string>& env);

struct SlurmRun {
  std::unique_ptr<SlurmBackend> backend;
  // Where the controller listens and what agents dial: 127.0.0.1 when every host of
  // the allocation has a loopback NodeAddr (a cluster on one machine), else 0.0.0.0 and
  // this machine's host name; `advertise_host` overrides the latter.
  std::string bind_host;
  std::string advertise_host;
  std::string summary;  // one line: the job, its hosts and what they are for
};

// The allocation from `env` (slurm_env.h) checked against `spec`, and the backend.
// Errors, each naming the cause and the fix: INVALID_ARGUMENT when not inside an
// allocation, or when the job needs more hosts (nodes + faultPolicy.spareNodes) than
// the allocation has; SlurmBackend::Create's (Slurm not installed, the job not
// running, slurmctld not answering).
// `hosts`: only these hosts of the allocation, in this order (empty: all).
Result<SlurmRun> PrepareSlurmRun(const JobSpec& spec, const AgentCommand& agent,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& advertise_host,
                                 const std::vector<std::string>& hosts = {});

// Whether every one of `hosts` can read checkpoint `step` under `dir`: runs
// `<bulwark> ckpt verify DIR STEP` on each host as a job step of `job_id` (srun
// --overlap, bounded by `timeout_s` each). FAILED_PRECONDITION naming the first host
// that cannot and what verify said (a node-local directory this host wrote is the usual
// cause); UNAVAILABLE when srun cannot run there.
Status CheckCheckpointOnHosts(const std::string& job_id, const std::vector<std::string>& hosts,
                              const std::string& bulwark, const std::string& dir, long step,
                              const std::map<std::string, std::string>& env, double timeout_s = 60);

// Keeps a Slurm job's Comment (`squeue -o %k`, `scontrol show job`) at the run's
// progress, e.g. "bulwark: Running  step 264/400 (66%)  ETTR 0.877  restarts 3": a
// thread asks `status` every `interval_s` and runs `scontrol update jobid=J comment=...`
// (bounded by 10 s) when the text changed; a failing scontrol is reported once on
// stderr. Finish(text) stops the thread and sets a last comment. Nothing here blocks
// the controller. Finish and the destructor are called from one thread.
class SlurmJobComment {
 public:
  SlurmJobComment(std::string job_id, std::map<std::string, std::string> env,
                  std::function<std::string()> status, double interval_s);
  ~SlurmJobComment();
  SlurmJobComment(const SlurmJobComment&) = delete;
  SlurmJobComment& operator=(const SlurmJobComment&) = delete;
  void Finish(const std::string& last);

 private:
  void Set(const std::string& text);
  void Stop();

  const std::string job_id_;
  const std::map<std::string, std::string> env_;
  const std::function<std::string()> status_;
  const double interval_s_;
  std::string last_;
  bool warned_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: joined before the members it reads go
};

// What an allocation is asked for beyond the job's nodes (sbatch/salloc flags).
// What the allocation asks for. A flag given on the command line wins over the spec's
// `slurm:` value of the same name (WithSpecDefaults).
struct SlurmRequest {
  std::string partition, account, qos, time, constraint;
  bool empty() const {
    return partition.empty() && account.empty() && qos.empty() && time.empty() &&
           constraint.empty();
  }
};

// `flags` with each value it leaves empty taken from `spec.slurm`.
SlurmRequest WithSpecDefaults(const JobSpec& spec, SlurmRequest flags);

// Checks `req`'s values against what Slurm accepts (INVALID_ARGUMENT naming the flag),
// and, when scontrol (in `bin_dir`, "" = PATH) is there and answers, that the partition
// (given, or the cluster's default) exists and holds nodes + faultPolicy.spareNodes
// nodes (INVALID_ARGUMENT naming the partition, what it has and the fix); otherwise a
// note on `err` says that was not checked.
Status CheckSlurmRequest(const JobSpec& spec, const SlurmRequest& req, const std::string& bin_dir,
                         std::ostream& err);

// The sbatch/salloc options for `spec`: --job-name, --nodes (nodes + spares),
// --ntasks-per-node=1, --exclusive, --no-kill, then the request's (--partition,
// --account, --qos, --time, --constraint).
std::vector<std::string> AllocationOptions(const JobSpec& spec, const SlurmRequest& req);

// `bulwark run --allocate` outside an allocation: checks the request (`flags` over the
// spec's slurm section), then replaces
// this process with `salloc <AllocationOptions> -- <command>` (command: this run's own
// argv; inside the allocation it runs on Slurm). Returns only on error: the request's,
// FAILED_PRECONDITION when salloc is not on PATH, or exec's.
Status ExecUnderSalloc(const JobSpec& spec, const SlurmRequest& req,
                       const std::vector<std::string>& command);

struct SlurmScriptFlags {
  std::string spec;
  SlurmRequest request;
  std::string output = "bulwark-%x-%j.out";  // sbatch --output
  std::string bulwark;                // the bulwark executable the script runs ("" = this one)
  std::string bin_dir;                // where scontrol is ("" = PATH); for the partition check
  std::vector<std::string> run_args;  // after --: more `bulwark run` flags
};

// Writes the script to `out`, notes and errors to `err`. 0, or 2 for a bad spec or
// flag (each error names the flag or field and the fix). When scontrol is available
// and answers, the partition (given, or the cluster's default) must exist and have
// enough nodes; otherwise a note says that was not checked.
int SlurmScript(const SlurmScriptFlags& f, std::ostream& out, std::ostream& err);

// Registers `slurm script` (only `slurm`'s name and description unless
// filter.Full("slurm")). After app.parse, if the returned command was given, *exit_code
// holds its exit code.
CLI::App* AddSlurmCommand(CLI::App& app, int* exit_code, std::ostream& out = std::cout,
                          std::ostream& err = std::cerr, const CommandFilter& filter = {});

}  // namespace bulwark::cli
