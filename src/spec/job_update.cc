#include "spec/job_update.h"

namespace bulwark {
namespace {

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

std::string JobUpdate::Describe() const { return Join(fields, ", "); }

Result<JobUpdate> PlanJobUpdate(const JobSpec& running, const JobSpec& next) {
  std::vector<std::string> refused;
  auto refuse = [&](bool differs, const std::string& field, const std::string& was,
                    const std::string& now, const std::string& why) {
    if (differs) {
      refused.push_back(field + (was.empty() ? "" : ": " + was + " -> " + now) +
                        " cannot change in place: " + why);
    }
  };
  refuse(running.name != next.name, "name", running.name, next.name,
         "an update applies to the job of that name; update the job named " + running.name);
  refuse(running.nodes != next.nodes, "nodes", std::to_string(running.nodes),
         std::to_string(next.nodes),
         "the running gang is placed on its nodes; start a new job with the new size");
  refuse(running.procs_per_node != next.procs_per_node, "procsPerNode",
         std::to_string(running.procs_per_node), std::to_string(next.procs_per_node),
         "the world size and the checkpoints' shard layout follow it; start a new job");
  refuse(!(running.checkpoint == next.checkpoint), "checkpoint", "", "",
         "the job's checkpoints live where it says and are committed on its cadence; keep "
         "the section as it is, or start a new job");
  refuse(!(running.fault_policy == next.fault_policy), "faultPolicy", "", "",
         "the recovery in progress follows it; keep the section as it is, or start a new job");
  refuse(!(running.elastic == next.elastic), "elastic", "", "",
         "the job resizes within the bounds it runs with; start a new job with new bounds");
  refuse(!(running.monitoring == next.monitoring), "monitoring", "", "",
         "the job's metrics are judged by the thresholds it started with; start a new job");
  refuse(!(running.slurm == next.slurm), "slurm", "", "",
         "the job's allocation was requested with it; keep the section as it is, or start a "
         "new job");
  refuse(running.chaos != next.chaos, "chaos", "", "",
         "the fault schedule of a running job is fixed; inject faults with `bulwark chaos`");
  if (!refused.empty()) {
    return InvalidArgument("update refused: " + Join(refused, "; ") +
                           ". Only command, args, env and workdir change in place.");
  }
  JobUpdate u;
  if (running.command != next.command) u.fields.push_back("command");
  if (running.args != next.args) u.fields.push_back("args");
  if (running.env != next.env) u.fields.push_back("env");
  if (running.workdir != next.workdir) u.fields.push_back("workdir");
  if (u.fields.empty()) {
    return FailedPrecondition(
        "nothing to update: command, args, env and workdir are those the "
        "job runs with");
  }
  return u;
}

}  // namespace bulwark
