// SlurmCluster: a real Slurm cluster on loopback for tests -- one slurmctld and N
// slurmd of Debian's slurm-wlm 22.05 (installed by scripts/setup.sh), in the manner of
// k8s/testing/control_plane.h. Nothing here is product code.
//
// How it runs on one machine: Debian builds Slurm with multiple-slurmd support
// (`scontrol show config` says MULTIPLE_SLURMD = Yes), so every slurmd runs as
// `slurmd -D -N <node>` for its own NodeName entry (NodeHostname=localhost,
// NodeAddr=127.0.0.1, a free Port each); SlurmdSpoolDir, SlurmdPidFile and
// SlurmdLogFile use %n so each node has its own. Authentication is auth/none with
// cred/none (both still exist in 22.05), so no munged runs. SlurmUser and SlurmdUser are
// the calling user: as root jobs may run as any user, otherwise only as the caller.
// Config, state, spool, pid files and logs live in the fixture's working directory;
// nothing reads or writes /etc/slurm, and no system service is used.
//
// Contracts:
//  * Start() returns once `sinfo` shows every node idle (polled, bounded by
//    start_timeout_s), or an error naming the daemon that failed with its log's tail.
//    Slurm not installed: FAILED_PRECONDITION naming the packages and scripts/setup.sh.
//    Ports are picked below the ephemeral range (PickFixturePort); a daemon that still
//    finds its port taken (another test's server) makes Start() try again on new ports
//    in a new working directory, at most 3 times.
//  * Every daemon is spawned in its own process group with PR_SET_PDEATHSIG. Stop()
//    (also run by the destructor) SIGKILLs every slurmstepd of this cluster with the job
//    processes under it, terminates and reaps every daemon, and removes the working
//    directory (kept when BULWARK_KEEP_SLURM_CLUSTER is set). Every wait is bounded.
//  * slurmctld reads SchedulerParameters at its first scheduling pass, about 3 s after
//    it starts; a batch job submitted before then waits for that pass (an srun
//    allocation does not). After it, jobs start at submission (batch_sched_delay=0).
//  * A slurmd that stops answering makes its node NOT_RESPONDING, then DOWN, within
//    seconds (measured at the default slurmd_timeout_s 3: NOT_RESPONDING after 3.7-7.4 s,
//    DOWN after 7.7-8.5 s); a restarted slurmd returns its node to service
//    (ReturnToService=2).
//  * Not thread-safe: one owner.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/proc.h"
#include "common/status.h"

namespace bulwark::testing {

struct SlurmClusterOptions {
  int nodes = 3;              // slurmd daemons, named <node_prefix>1..N
  int cpus_per_node = 2;      // CPUs= of every node (SlurmdParameters=config_overrides)
  int real_memory_mb = 1024;  // RealMemory= of every node
  std::string node_prefix = "node";
  std::string partition = "debug";  // the one (default) partition, holding every node
  // SlurmdTimeout: how soon a silent slurmd is NOT_RESPONDING and then DOWN (see above).
  int slurmd_timeout_s = 3;
  int message_timeout_s = 2;  // MessageTimeout of every RPC
  double start_timeout_s = 30;
  std::string sbin_dir = "/usr/sbin";  // slurmctld, slurmd
  std::string bin_dir = "/usr/bin";    // srun, sbatch, scontrol, sinfo, scancel, squeue
  std::string work_dir;                // "" = a fresh directory under $TMPDIR (or /tmp)
  // Lines added to slurm.conf before the nodes (e.g. "MaxStepCount=1\n").
  std::string extra_config;
};

// A finished command: how it exited and its stdout and stderr, interleaved.
struct CommandResult {
  ExitInfo exit;
  std::string output;
};

// Runs argv (argv[0] without '/' is looked up in PATH) with exactly `env`, in `workdir`
// ("" = inherit), until it exits, up to timeout_s: then DEADLINE_EXCEEDED, its process
// group killed and it reaped. A non-zero exit is a result, not an error.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env, double timeout_s,
                                 const std::string& workdir = "");

class SlurmCluster {
 public:
  static Result<std::unique_ptr<SlurmCluster>> Start(SlurmClusterOptions opts = {});
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // The slurm.conf every client needs as SLURM_CONF.
  const std::string& conf_path() const { return conf_path_; }
  // The environment for a client command: this process's, minus every inherited SLURM_*
  // variable (an enclosing allocation's), plus SLURM_CONF.
  std::map<std::string, std::string> ClientEnv() const;
  const std::vector<std::string>& node_names() const { return node_names_; }
  const std::string& partition() const { return opts_.partition; }
  const std::string& bin_dir() const { return opts_.bin_dir; }
  const std::string& sbin_dir() const { return opts_.sbin_dir; }
  const std::string& work_dir() const { return opts_.work_dir; }
  int slurmctld_port() const { return ctld_port_; }
  // Wall-clock seconds Start() took, from the first spawn to every node idle.
  double startup_seconds() const { return startup_s_; }

  // RunCommand for a client command (argv[0] without '/' is taken from bin_dir) with
  // ClientEnv().
  Result<CommandResult> Run(const std::vector<std::string>& argv, double timeout_s = 30,
                            const std::string& workdir = "") const;

  // The node's State as `scontrol -o show node` reports it: "IDLE", "ALLOCATED",
  // "IDLE+NOT_RESPONDING", "DOWN+NOT_RESPONDING", ...
  Result<std::string> NodeState(const std::string& node) const;
  // Polls NodeState until one of its '+'-separated words is in `any_of` and returns that
  // state; DEADLINE_EXCEEDED with the last state after timeout_s.
  Result<std::string> WaitNodeState(const std::string& node, const std::vector<std::string>& any_of,
                                    double timeout_s) const;
  // A job's JobState from `scontrol -o show job` ("PENDING", "RUNNING", "COMPLETED", ...).
  Result<std::string> JobState(const std::string& job_id) const;

  // SIGKILLs the node's slurmd and reaps it; the jobs' processes on the node keep
  // running (a slurmd crash, or a network partition as slurmctld sees it).
  Status KillSlurmd(const std::string& node);
  // KillSlurmd plus SIGKILL of every slurmstepd of the node and every process under
  // them (the node's machine crashed). Either way Slurm marks the node NOT_RESPONDING,
  // then DOWN, and fails its jobs.
  Status CrashNode(const std::string& node);
  // Starts the node's slurmd again (FAILED_PRECONDITION if it runs) and returns once
  // the node is neither DOWN nor NOT_RESPONDING, bounded by start_timeout_s.
  Status StartSlurmd(const std::string& node);

  // "" when every daemon runs (but those KillSlurmd/CrashNode stopped), else which
  // exited how; reaps those that exited.
  std::string Check();
  // The pids of the daemons this cluster started and has not reaped.
  std::vector<pid_t> DaemonPids() const;
  // The pids of the live slurmstepd processes of `node` ("" = of every node).
  std::vector<pid_t> StepDaemonPids(const std::string& node = "") const;
  // The last `bytes` of a daemon's log ("slurmctld" or a node name).
  std::string LogTail(const std::string& daemon, size_t bytes = 4000) const;

  // Kills every job process and daemon (see the contract above). Idempotent.
  void Stop();

 private:
  static Result<std::unique_ptr<SlurmCluster>> StartOnce(SlurmClusterOptions opts);
  explicit SlurmCluster(SlurmClusterOptions opts) : opts_(std::move(opts)) {}
  struct Daemon {
    std::string name;  // "slurmctld" or the node name
    Child child;
    std::string exit;     // how it ended, once reaped; "" while it runs
    bool killed = false;  // by KillSlurmd/CrashNode: not reported by Check()
  };
  Status WriteConfig();
  Status Launch(const std::string& name);
  Status WaitAllIdle(double timeout_s);
  // `key`'s value in `scontrol --oneliner show <entity> <name>`.
  Result<std::string> ShowField(const std::string& entity, const std::string& name,
                                const std::string& key) const;
  Daemon* Find(const std::string& name);
  std::string LogPath(const std::string& name) const;
  // SIGKILLs the slurmstepd processes of `node` ("" = every node) and every process
  // under them, and waits (bounded) until they are gone.
  void KillSteps(const std::string& node);

  SlurmClusterOptions opts_;
  bool owns_work_dir_ = false;
  std::string conf_path_;
  int ctld_port_ = 0;
  std::vector<std::string> node_names_;
  std::map<std::string, int> node_ports_;
  std::vector<Daemon> daemons_;  // slurmctld first, then the nodes
  double startup_s_ = 0;
};

}  // namespace bulwark::testing
