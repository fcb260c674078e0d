// SlurmBackend: every node is a `bulwark-agent` running as a one-task job step on one
// host of the Slurm allocation `bulwark run` runs in (docs/slurm.md).
//
// Placement. StartNode maps each node (slot or warm standby alike) to a free host of
// the allocation, in the allocation's order, and starts
//   srun --verbose --jobid=J --overlap --nodes=1 --ntasks=1 --nodelist=HOST
//        --input=none --job-name=bulwark:<job>:<node id> <agent command (agent_command.h)>
// Why these flags on Slurm 22.05: --overlap lets the agent's step share the host's CPUs
// with the batch step and with any other step (since 20.11 steps do not share
// resources by default, so a second step on a host would wait); one task on one named
// host is one agent per node; --input=none keeps srun off the controller's stdin;
// --jobid makes the allocation explicit rather than taken from SLURM_JOB_ID; the step
// name makes the step findable in `squeue --steps`; --verbose makes srun say which step
// it created and when the task started (those lines are read, not shown). StartNode
// returns once srun says the task started (bounded by command_timeout_s; a step still
// pending then is left to start), or FAILED_PRECONDITION quoting srun's own messages
// when srun exits first (it refused: "Unable to create step ...", an expired job). The
// agent gets --peer-host
// with the host's NodeAddr, so its ranks' rendezvous runs on a reachable address.
// --kill-on-bad-exit and --no-kill are not passed: with one task per step they change
// nothing. No host free (all run a node, or are lost): UNAVAILABLE "no capacity",
// naming the allocation and every host's use, so the controller waits.
//
// Output. srun's output (the agent's and its ranks' lines, and srun's own messages) is
// read by Poll and written to this process's stdout; lines from srun itself
// ("srun: ...") go to stderr and the last of them become part of the loss reason.
//
// Losses. Poll reports a node lost when its srun exits (the agent exited, the step was
// killed, srun failed to create the step: the reason quotes srun's last message), and
// when `scontrol show node` shows its host DOWN, DRAIN, FAIL, NOT_RESPONDING, powered
// down or rebooting, or the host has left the job (Slurm takes a failed node out of a
// job allocated with --no-kill). scontrol runs at most every `poll_interval_s`, as a
// child whose output Poll reads without blocking, killed after `command_timeout_s`.
// A lost host (and one whose srun just exited) is not placed on again until a probe
// that started after the loss shows it healthy and in the job: a host that went DOWN
// is never reused until it is back. A host whose slurmd did not answer srun ("Task
// launch ... Communication connection failure", "Timed out waiting for job step to
// complete": its machine died before Slurm noticed) is suspect: StartNode tries the
// next host, and the suspect one is placed on again only after Slurm has shown it
// unusable and then healthy.
//
// Ending. KillNode (chaos: the node dies) SIGTERMs the srun, which makes srun kill the
// step at once (SIGKILL to every process of it). ReleaseNode waits up to grace_s for
// the agent, which the controller has told to stop, to end the step; then SIGTERM; srun
// that outlives that by 5 s is SIGKILLed and its step cancelled with `scancel
// --signal=KILL J.S`. Teardown does that for every step at once; it is bounded
// (grace_s + about 10 s) and leaves no srun or scontrol child of this process. A step
// on a host that is DOWN cannot be reached by Slurm either: its agent ends its ranks
// when it loses the controller (its orphan timeout).
//
// Growing (SlurmBackendOptions::grow_nodes > 0, the spec's slurm.growNodes). When no
// host is free, StartNode (still UNAVAILABLE "no capacity") asks Slurm for one more node
// as a separate one-node allocation, in the background:
//   salloc --no-kill --nodes=1 --ntasks-per-node=1 --exclusive
//          --job-name=bulwark:<job>:grow [the job's --partition --account --qos
//          --constraint --time, as `scontrol show job` gave them] --exclude=<every host
//          this backend knows> -- /bin/sh -c 'tail --pid=<this pid> -f /dev/null;
//          exec scancel "$SLURM_JOB_ID"'
// One request at a time, at most grow_nodes over the backend's life (a refused or
// withdrawn one does not count). Once salloc says "Granted job allocation N", the next
// probe adds N's host, and StartNode places on it with --jobid=N. The held command ends
// the allocation if this process dies, even by SIGKILL (tail polls this pid each
// second). A request that no StartNode has wanted for grow_unwanted_s (the lost node
// came back) is withdrawn, and a granted allocation that runs no node for grow_idle_s is
// given back (SIGHUP makes salloc relinquish it; scancel if salloc does not end within
// 5 s); Teardown gives back all of them. salloc's refusal ("Invalid account", "Requested
// node configuration is not available") is printed once and shown in the capacity
// message; the next request waits grow_retry_s. Permissions: any user who may submit
// jobs to the partition.
//
// Threading: the controller's thread only, like every Backend; not thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/agent_command.h"
#include "backend/backend.h"
#include "backend/slurm_env.h"
#include "common/proc.h"

namespace bulwark {

struct SlurmBackendOptions {
  AgentCommand agent;  // peer_host is set per host (its NodeAddr)
  std::string job_id;  // the Slurm job (allocation) to place steps in
  // The environment of srun, scontrol and scancel (SLURM_CONF etc.); empty = this
  // process's.
  std::map<std::string, std::string> env;
  // Where srun, scontrol and scancel are ("" = looked up in env's PATH).
  std::string bin_dir;
  // Only these hosts of the allocation, in this order (`bulwark replay --nodes`); empty =
  // all of them. Create refuses a host the allocation does not have.
  std::vector<std::string> hosts;
  double poll_interval_s = 1;     // scontrol at most this often
  double command_timeout_s = 10;  // an scontrol or scancel that takes longer is killed
  // Growing (above): nodes that may be requested beyond the allocation; 0 = never.
  int grow_nodes = 0;
  double grow_idle_s = 60;      // a grown allocation running no node is given back after
  double grow_unwanted_s = 30;  // a pending request nobody wanted since is withdrawn
  double grow_retry_s = 30;     // after a refused request, the next one waits this long
};

// One host of the allocation as the last scontrol probe showed it.
struct SlurmHost {
  std::string name;    // NodeName
  std::string addr;    // NodeAddr
  std::string state;   // State, e.g. "MIXED", "DOWN+NOT_RESPONDING"
  std::string reason;  // Reason ("" when none)
  bool in_job = true;  // still part of the job's NodeList
  std::string job;     // the allocation it belongs to: the job's, or one grown
};

// Whether a node State ("IDLE", "MIXED+DRAIN", "DOWN+NOT_RESPONDING") means the node
// cannot run our work: one of its '+'-separated words is DOWN, DRAIN, DRAINED,
// DRAINING, FAIL, FAILING, NOT_RESPONDING, POWERED_DOWN, POWERING_DOWN, POWER_DOWN,
// REBOOT_ISSUED or FUTURE. Pure.
bool SlurmStateUnusable(const std::string& state);

class SlurmBackend : public Backend {
 public:
  // Checks that srun, scontrol and scancel can be run (FAILED_PRECONDITION "Slurm is
  // not installed" naming the missing program and the fix otherwise) and reads the
  // job's nodes (scontrol show job, show node; bounded by command_timeout_s):
  // FAILED_PRECONDITION naming the job when it is not running, UNAVAILABLE with
  // scontrol's message when slurmctld does not answer.
  static Result<std::unique_ptr<SlurmBackend>> Create(SlurmBackendOptions opts);
  ~SlurmBackend() override;
  SlurmBackend(const SlurmBackend&) = delete;
  SlurmBackend& operator=(const SlurmBackend&) = delete;

  const char* Name() const override { return "slurm"; }
  Status StartNode(const NodeRequest& req) override;
  Status KillNode(const std::string& node_id) override;
  Status ReleaseNode(const std::string& node_id, double grace_s) override;
  std::vector<NodeLoss> Poll() override;
  Status Teardown(double grace_s) override;
  // Drains the host node_id runs (or ran) on, with `reason` (DrainNode): the machine
  // failed its diagnostics. NOT_FOUND for a node this backend never placed; DrainNode's
  // errors (PERMISSION_DENIED without operator rights: the host is then excluded from
  // this job only).
  Status QuarantineNode(const std::string& node_id, const std::string& reason) override;

  // Marks `host` drained in Slurm (`scontrol update nodename=HOST state=drain
  // reason=REASON`, bounded) so no job gets it, and excludes it from this backend's
  // placements either way. PERMISSION_DENIED with scontrol's message when the user
  // may not (draining needs Slurm operator or administrator rights); NOT_FOUND for a
  // host outside the allocation. A node running on it is then reported lost by Poll
  // (its host is DRAIN).
  Status DrainNode(const std::string& host, const std::string& reason);

  // The hosts of the allocation, in order, as last seen. For tests and messages.
  const std::vector<SlurmHost>& hosts() const { return hosts_; }
  // The host node_id runs on, or "".
  std::string HostOf(const std::string& node_id) const;
  const std::string& job_id() const { return opts_.job_id; }
  // The allocations requested beyond the job's (granted, not yet given back), in order.
  std::vector<std::string> grown_jobs() const;

 private:
  struct Step {
    std::string node_id;
    std::string host;
    std::string name;                     // --job-name
    Child srun;                           // output captured: read by Drain()
    std::string partial;                  // an unfinished output line
    std::vector<std::string> srun_lines;  // srun's own last messages
    std::string step_id;                  // "J.S", from srun --verbose
    bool started = false;                 // srun said the task started
    double term_at = -1;                  // when SIGTERM was sent (-1 = not yet)
    bool reported = false;                // the loss went to the controller
    bool killed = false;                  // srun SIGKILLed after it ignored SIGTERM
    bool eof = false;
    std::optional<ExitInfo> exit;
  };
  struct Probe {  // a running `scontrol` round (show job, step, node)
    Child child;
    std::string output;
    double started = 0;
    double deadline = 0;
    bool eof = false;
  };

  struct Grow {  // a one-node allocation requested beyond the job's (salloc)
    Child salloc;
    std::string output;  // salloc's messages
    bool eof = false;
    std::string job_id;  // once granted
    double idle_since = 0;
    bool withdrawn = false;  // SIGHUP sent: withdrawn (pending) or given back (granted)
    double hup_at = -1;
    bool killed = false;
    std::optional<ExitInfo> exit;
  };

  explicit SlurmBackend(SlurmBackendOptions opts) : opts_(std::move(opts)) {}
  // Starts a grow request if growing is on, none is under way and the budget allows.
  void MaybeGrow();
  // Reads, reaps, withdraws and gives back grown allocations.
  void PollGrows(double now);
  // SIGHUPs salloc (it relinquishes the allocation or withdraws the request).
  void EndGrow(Grow& g, double now);
  // Reads the job's partition, account, QOS, features and time limit from its
  // `scontrol show job` line into grow_args_.
  void SetGrowArgs(const std::string& job_line);
  std::string Bin(const std::string& name) const;
  // Reads what srun wrote; forwards whole lines.
  void Drain(Step& s, bool flush);
  // Reaps s.srun if it exited; true when it has (and its output is read to the end).
  bool Finished(Step& s);
  // `scontrol show job; show step; show node HOSTS` as one child.
  SpawnOptions ProbeCommand() const;
  Status StartProbe();
  // srun on `host`; UNAVAILABLE when srun says the host does not answer (it is then
  // suspect), FAILED_PRECONDITION quoting srun when it refused otherwise.
  Status LaunchOn(const SlurmHost& host, const NodeRequest& req);
  // Whether srun's last messages say s.host's slurmd does not answer; if so the host
  // becomes suspect.
  bool MarkIfUnreachable(const Step& s);
  // Applies a finished probe's output; false if it was not understood.
  bool ApplyProbe(const std::string& output, double started, std::string* error);
  // Ends steps: SIGTERM, wait, SIGKILL + scancel; bounded; reaps.
  void EndSteps(std::vector<Step*> steps, double grace_s);
  std::string CapacityMessage() const;
  std::string SrunTail(const Step& s) const;

  SlurmBackendOptions opts_;
  std::vector<SlurmHost> hosts_;
  std::map<std::string, Step> steps_;  // by node id: sruns of live nodes
  std::vector<Step> ending_;           // sruns of lost or killed nodes, being reaped
  // Hosts not to place on: why, and since when (mono time); cleared by a healthy probe
  // that started later.
  std::map<std::string, std::pair<std::string, double>> blocked_;
  std::map<std::string, std::string> drained_;  // by DrainNode: host -> reason (kept)
  std::map<std::string, std::string> placed_;   // every node ever started -> its host
  // Hosts whose slurmd did not answer srun: srun's words, and whether Slurm has shown the
  // host unusable since (it is free again once Slurm shows it healthy after that).
  std::map<std::string, std::pair<std::string, bool>> suspect_;
  std::unique_ptr<Probe> probe_;
  std::vector<Child> helpers_;  // scancel children of Poll, reaped by Poll and Teardown
  double next_probe_ = 0;
  std::string probe_error_;  // the last probe failure reported (once per message)
  std::string job_state_ = "RUNNING";
  std::vector<std::unique_ptr<Grow>> grows_;
  int grow_used_ = 0;                   // requests that count against grow_nodes
  double last_wanted_ = -1e9;           // the last StartNode that found no host (mono)
  double next_grow_ = 0;                // no request before (after a refusal)
  std::string grow_note_;               // what growing does now, for the capacity message
  std::string job_name_;                // Bulwark's job, from the first NodeRequest
  std::vector<std::string> grow_args_;  // the job's --partition etc., for salloc
};

}  // namespace bulwark
