// What Slurm tells a batch script or an srun task about its allocation, read from the
// environment (sbatch(1) and srun(1), "OUTPUT ENVIRONMENT VARIABLES"): the first
// building block of the Slurm backend (issue 18, docs/slurm.md when it lands).
// Pure: the environment is a parameter; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::slurm {

// Expands a Slurm hostlist expression into host names, in order, as `scontrol show
// hostnames` does: "gpu[01-03,07],login1" -> gpu01 gpu02 gpu03 gpu07 login1; a range
// keeps the zero padding of its lower bound; several bracket groups in one name form
// their product ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). InvalidArgument naming the
// position and the problem for a malformed expression (an unclosed or nested bracket,
// an empty or reversed range, a non-digit bound); at most 65,536 names.
Result<std::vector<std::string>> ExpandHostlist(const std::string& expr);

struct Allocation {
  std::string job_id;              // SLURM_JOB_ID
  std::vector<std::string> nodes;  // SLURM_JOB_NODELIST, expanded
  std::string partition;           // SLURM_JOB_PARTITION ("" when unset)
  int cpus_on_node = 0;            // SLURM_CPUS_ON_NODE (0 when unset)
  // Set inside an srun task (-1 / 0 when not: a batch script's own shell).
  int node_id = -1;  // SLURM_NODEID: this task's node, an index into `nodes`
  int proc_id = -1;  // SLURM_PROCID: this task's rank among the step's tasks
  int ntasks = 0;    // SLURM_NTASKS (or SLURM_NPROCS)
};

// NotFound "not inside a Slurm allocation" when SLURM_JOB_ID is unset. InvalidArgument
// naming the variable for a malformed value: a non-numeric id or count, a node list
// that does not expand, a SLURM_JOB_NUM_NODES that disagrees with it, a SLURM_NODEID
// outside it.
Result<Allocation> AllocationFromEnv(const std::map<std::string, std::string>& env);

}  // namespace bulwark::slurm
