// Store: the controller's durable job state in SQLite (WAL mode).
//
// Everything the controller needs to carry on after a restart lives here: the job
// spec, its phase, attempt and restart counters, committed checkpoints, incidents and
// events. Each Put/Add is one transaction. A Store is used from one thread at a time
// (it owns a single sqlite3 connection); separate processes may open the same file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

struct sqlite3;

namespace bulwark {

enum class JobPhase { kPending, kRunning, kRestarting, kSucceeded, kFailed, kCancelled };
const char* JobPhaseName(JobPhase p);  // "Pending", "Running", ...
Result<JobPhase> ParseJobPhase(const std::string& s);
inline bool IsTerminal(JobPhase p) {
  return p == JobPhase::kSucceeded || p == JobPhase::kFailed || p == JobPhase::kCancelled;
}

struct JobRecord {
  std::string name;
  std::string spec_yaml;
  std::string spec_path;
  JobPhase phase = JobPhase::kPending;
  std::string run_id;
  int attempt = -1;
  int restarts = 0;
  long high_water_step = -1;
  long last_committed_step = -1;
  double created = 0;
  double updated = 0;
  std::string message;      // last status message / diagnosis
  std::string report_json;  // the ETTR report when finished
  std::string run_dir;      // logs, controller.addr ("" in stores older than the column)
};

struct EventRecord {
  double t = 0;
  std::string job;
  std::string reason;  // CamelCase, e.g. "RankCrashed", "CheckpointCommitted"
  std::string message;
};

// An agent serving a job, as the controller last knew it: what a restarted controller
// needs to adopt it (docs/protocol.md, "Adoption").
struct AgentRecord {
  std::string job;
  std::string node;  // node id, e.g. "node-2"
  int slot = -1;     // the slot it serves; -1 = warm standby
  std::string host;  // where its adopt port listens (its peer host)
  int adopt_port = 0;
  int pid = 0;  // the agent's process id on `host`
};

class Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  // Opens an existing store for reading only (NOT_FOUND if there is no file): nothing
  // is created and the schema is not touched. Writes fail.
  static Result<std::unique_ptr<Store>> OpenReadOnly(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  Status PutJob(const JobRecord& job);  // insert or replace by name
  Result<std::optional<JobRecord>> GetJob(const std::string& name);
  Result<std::vector<JobRecord>> ListJobs();
  Status AddEvent(const EventRecord& e);
  Result<std::vector<EventRecord>> ListEvents(const std::string& job);
  // An incident's JSON; returns its row id, which UpdateIncident names. ListIncidents
  // lists a job's incidents in the order they were added (updates keep the order).
  Result<int64_t> AddIncident(const std::string& job, int attempt, const std::string& json);
  // Replaces the JSON of row `id` (NOT_FOUND when the job has no such row).
  Status UpdateIncident(const std::string& job, int64_t id, const std::string& json);
  Result<std::vector<std::string>> ListIncidents(const std::string& job);
  Status AddCheckpoint(const std::string& job, long step, double t);
  Result<std::vector<long>> ListCheckpoints(const std::string& job);
  // The agents of a job, by node id (insert or replace; delete one; all in node order).
  Status PutAgent(const AgentRecord& a);
  Status DeleteAgent(const std::string& job, const std::string& node);
  Result<std::vector<AgentRecord>> ListAgents(const std::string& job);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Exec(const std::string& sql);
  // Whether table `table` has column `column` (stores made by older versions lack some).
  Result<bool> HasColumn(const std::string& table, const std::string& column);
  sqlite3* db_;
  bool has_run_dir_ = true;  // false: an older read-only store, run_dir reads as ""
};

}  // namespace bulwark
