// NaiveScheduler: the reference (oracle) implementation of the rules in
// src/sched/scheduler.h and docs/scheduler.md, written the way a controller with no
// incremental state would: every decision rescans every node and every job and
// re-sorts every queue. It exists for differential testing (sched_diff_test) and as
// the benchmark baseline (sched_bench); it is deliberately slow and shares no code
// with bw_sched beyond the public structs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sched/scheduler.h"

namespace bulwark::sched {

class NaiveScheduler {
 public:
  // Inputs are assumed valid (validate with Scheduler::Create).
  NaiveScheduler(SchedulerConfig config, std::vector<NodeSpec> nodes,
                 std::vector<QueueSpec> queues);

  Status Submit(const JobRequest& job, double now);
  Status Finish(const std::string& job_id, double now);
  CycleResult Schedule(double now, int max_admissions = 1 << 30);
  NodeFailureDecision OnNodeFailure(int node, double now);
  Status SetNodeHealth(int node, NodeHealth health);
  JobPhase Phase(const std::string& job_id) const;
  const Admission* Placement(const std::string& job_id) const;
  int PendingJobs() const;
  int RunningJobs() const;
  // Benchmark hook: Schedule() returns early once `stop()` is true (checked before each
  // decision) and stopped() reports it; such a cycle is incomplete.
  void set_stop(std::function<bool()> stop) { stop_ = std::move(stop); }
  bool stopped() const { return stopped_; }

 private:
  struct Job {
    JobRequest req;
    JobPhase phase = JobPhase::kPending;
    long seq = 0, admit_seq = 0;
    double backoff_until = -1;
    int requeues = 0;
    long preempted_cycle = -1;
    Admission adm;
  };
  struct Dom {      // a domain inside one (type, pool) slice
    int level = 3;  // 0 rack, 1 block, 2 zone, 3 any
    std::string name;
  };

  int Gpn(const std::string& type) const;
  long Used(int q, const std::string& type) const;
  // Whether the job's queue can take `nodes` more of its nodes (-1: its whole demand).
  bool QuotaFits(const Job& j, int nodes = -1) const;
  bool IsFree(int n) const;
  bool InDom(int n, const std::string& type, Pool pool, const Dom& d) const;
  int DomFree(const std::string& type, Pool pool, const Dom& d) const;
  std::string NameAt(int n, int level) const;
  int Order(int level, const std::string& name) const;
  bool FindPlacement(const Job& j, Pool* pool, Dom* dom) const;
  void Take(const std::string& type, Pool pool, const Dom& d, int k, std::vector<int>* out);
  void TakeOutward(const std::string& type, Pool pool, Dom d, int k, std::vector<int>* out);
  std::vector<int> FreeIn(const std::string& type, Pool pool, const Dom& d) const;
  void Admit(Job& j, Pool pool, const Dom& d);
  void SetLevel(Admission* a) const;  // narrowest domain holding every gang node
  void Release(Job& j);               // nodes back, running -> (caller sets phase)
  int Head(int q, double now) const;
  bool FindVictims(Job& j, std::vector<Job*>* victims);
  int ClosestFree(int node, TopologyLevel limit) const;
  void Restock(CycleResult* r);

  SchedulerConfig config_;
  std::vector<NodeSpec> nodes_;
  std::vector<int> owner_;  // job index or -1
  std::vector<char> standby_;
  std::vector<QueueSpec> queues_;
  std::vector<Job> jobs_;
  std::unordered_map<std::string, int> ids_;
  std::vector<char> released_;  // per job, during the preemption search
  long next_seq_ = 0, next_admit_ = 0, cycle_ = 0;
  std::function<bool()> stop_;
  bool stopped_ = false;
};

}  // namespace bulwark::sched
