#include "store/store.h"

#include <sqlite3.h>
#include <unistd.h>

namespace bulwark {
namespace {

// RAII prepared statement with typed binds; errors carry SQLite's message.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Status status() const {
    return rc_ == SQLITE_OK ? Status::Ok()
                            : Internal(std::string("sqlite: ") + sqlite3_errmsg(db_));
  }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, long v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, int v) { return Bind(i, static_cast<long>(v)); }
  // SQLITE_ROW -> true, SQLITE_DONE -> false; errors -> status.
  Result<bool> Step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Internal(std::string("sqlite: ") + sqlite3_errmsg(db_));
  }
  std::string Text(int c) {
    auto p = sqlite3_column_text(s_, c);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  long Int(int c) { return static_cast<long>(sqlite3_column_int64(s_, c)); }
  double Real(int c) { return sqlite3_column_double(s_, c); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  name TEXT PRIMARY KEY, spec_yaml TEXT NOT NULL, spec_path TEXT, phase TEXT NOT NULL,
  run_id TEXT, attempt INTEGER, restarts INTEGER, high_water_step INTEGER,
  last_committed_step INTEGER, created REAL, updated REAL, message TEXT, report_json TEXT,
  run_dir TEXT);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT, t REAL, reason TEXT, message TEXT);
CREATE TABLE IF NOT EXISTS incidents (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT, attempt INTEGER, json TEXT);
CREATE TABLE IF NOT EXISTS checkpoints (
  job TEXT, step INTEGER, t REAL, PRIMARY KEY (job, step));
CREATE TABLE IF NOT EXISTS agents (
  job TEXT, node TEXT, slot INTEGER, host TEXT, adopt_port INTEGER, pid INTEGER,
  PRIMARY KEY (job, node));
)sql";

}  // namespace

const char* JobPhaseName(JobPhase p) {
  switch (p) {
    case JobPhase::kPending:
      return "Pending";
    case JobPhase::kRunning:
      return "Running";
    case JobPhase::kRestarting:
      return "Restarting";
    case JobPhase::kSucceeded:
      return "Succeeded";
    case JobPhase::kFailed:
      return "Failed";
    case JobPhase::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

Result<JobPhase> ParseJobPhase(const std::string& s) {
  for (JobPhase p : {JobPhase::kPending, JobPhase::kRunning, JobPhase::kRestarting,
                     JobPhase::kSucceeded, JobPhase::kFailed, JobPhase::kCancelled}) {
    if (s == JobPhaseName(p)) return p;
  }
  return InvalidArgument("unknown job phase '" + s + "' in store");
}

namespace {

// sqlite3_open_v2 with `flags`, the busy timeout set; the error names `path`.
Result<sqlite3*> OpenDb(const std::string& path, int flags, const std::string& how) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Unavailable("open store " + path + how + ": " + msg);
  }
  sqlite3_busy_timeout(db, 5000);
  return db;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  BW_ASSIGN_OR_RETURN(sqlite3 * db, OpenDb(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, ""));
  std::unique_ptr<Store> s(new Store(db));
  Status st = s->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  if (st.ok()) st = s->Exec(kSchema);
  if (!st.ok()) return st.Annotate("store " + path + " (is it a Bulwark store?)");
  // Stores made before the run_dir column get it (NULL, read as "").
  auto has = s->HasColumn("jobs", "run_dir");
  if (!has.ok()) return has.status().Annotate("store " + path);
  if (!*has) BW_RETURN_IF_ERROR(s->Exec("ALTER TABLE jobs ADD COLUMN run_dir TEXT"));
  return s;
}

Result<std::unique_ptr<Store>> Store::OpenReadOnly(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return NotFound("no store at " + path);
  BW_ASSIGN_OR_RETURN(sqlite3 * db, OpenDb(path, SQLITE_OPEN_READONLY, " read-only"));
  std::unique_ptr<Store> s(new Store(db));
  if (!s->Exec("SELECT name FROM jobs LIMIT 1").ok()) {
    return InvalidArgument("store " + path + ": not a Bulwark store (it has no jobs table)");
  }
  auto has = s->HasColumn("jobs", "run_dir");
  if (!has.ok()) return has.status().Annotate("store " + path);
  s->has_run_dir_ = *has;
  return s;
}

Store::~Store() { sqlite3_close(db_); }

Result<bool> Store::HasColumn(const std::string& table, const std::string& column) {
  Stmt s(db_, ("SELECT name FROM pragma_table_info('" + table + "')").c_str());
  BW_RETURN_IF_ERROR(s.status());
  while (true) {
    BW_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return false;
    if (s.Text(0) == column) return true;
  }
}

Status Store::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown";
    sqlite3_free(err);
    return Internal("sqlite: " + m);
  }
  return Status::Ok();
}

Status Store::PutJob(const JobRecord& j) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO jobs (name, spec_yaml, spec_path, phase, run_id, attempt, "
         "restarts, high_water_step, last_committed_step, created, updated, message, report_json, "
         "run_dir) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, j.name)
      .Bind(2, j.spec_yaml)
      .Bind(3, j.spec_path)
      .Bind(4, std::string(JobPhaseName(j.phase)));
  s.Bind(5, j.run_id).Bind(6, j.attempt).Bind(7, j.restarts).Bind(8, j.high_water_step);
  s.Bind(9, j.last_committed_step).Bind(10, j.created).Bind(11, j.updated).Bind(12, j.message);
  s.Bind(13, j.report_json).Bind(14, j.run_dir);
  BW_ASSIGN_OR_RETURN(bool row, s.Step());
  (void)row;
  return Status::Ok();
}

namespace {
Result<JobRecord> RowToJob(Stmt& s) {
  JobRecord j;
  j.name = s.Text(0);
  j.spec_yaml = s.Text(1);
  j.spec_path = s.Text(2);
  BW_ASSIGN_OR_RETURN(j.phase, ParseJobPhase(s.Text(3)));
  j.run_id = s.Text(4);
  j.attempt = static_cast<int>(s.Int(5));
  j.restarts = static_cast<int>(s.Int(6));
  j.high_water_step = s.Int(7);
  j.last_committed_step = s.Int(8);
  j.created = s.Real(9);
  j.updated = s.Real(10);
  j.message = s.Text(11);
  j.report_json = s.Text(12);
  j.run_dir = s.Text(13);
  return j;
}
// The jobs columns RowToJob reads; `run_dir` false: a store without that column.
std::string JobCols(bool run_dir) {
  return std::string(
             "SELECT name, spec_yaml, spec_path, phase, run_id, attempt, restarts, "
             "high_water_step, last_committed_step, created, updated, message, report_json, ") +
         (run_dir ? "run_dir" : "''") + " FROM jobs";
}
}  // namespace

Result<std::optional<JobRecord>> Store::GetJob(const std::string& name) {
  Stmt s(db_, (JobCols(has_run_dir_) + " WHERE name = ?1").c_str());
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, name);
  BW_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<JobRecord>();
  BW_ASSIGN_OR_RETURN(JobRecord j, RowToJob(s));
  return std::optional<JobRecord>(std::move(j));
}

Result<std::vector<JobRecord>> Store::ListJobs() {
  Stmt s(db_, (JobCols(has_run_dir_) + " ORDER BY created").c_str());
  BW_RETURN_IF_ERROR(s.status());
  std::vector<JobRecord> out;
  while (true) {
    BW_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    BW_ASSIGN_OR_RETURN(JobRecord j, RowToJob(s));
    out.push_back(std::move(j));
  }
  return out;
}

Status Store::AddEvent(const EventRecord& e) {
  Stmt s(db_, "INSERT INTO events (job, t, reason, message) VALUES (?1, ?2, ?3, ?4)");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, e.job).Bind(2, e.t).Bind(3, e.reason).Bind(4, e.message);
  return s.Step().status();
}

Result<std::vector<EventRecord>> Store::ListEvents(const std::string& job) {
  Stmt s(db_, "SELECT t, job, reason, message FROM events WHERE job = ?1 ORDER BY id");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job);
  std::vector<EventRecord> out;
  while (true) {
    BW_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(EventRecord{s.Real(0), s.Text(1), s.Text(2), s.Text(3)});
  }
  return out;
}

Result<int64_t> Store::AddIncident(const std::string& job, int attempt, const std::string& json) {
  Stmt s(db_, "INSERT INTO incidents (job, attempt, json) VALUES (?1, ?2, ?3)");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job).Bind(2, attempt).Bind(3, json);
  BW_RETURN_IF_ERROR(s.Step().status());
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Status Store::UpdateIncident(const std::string& job, int64_t id, const std::string& json) {
  Stmt s(db_, "UPDATE incidents SET json = ?1 WHERE job = ?2 AND id = ?3");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, json).Bind(2, job).Bind(3, id);
  BW_RETURN_IF_ERROR(s.Step().status());
  if (sqlite3_changes(db_) == 0) {
    return NotFound("job " + job + " has no incident row " + std::to_string(id));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> Store::ListIncidents(const std::string& job) {
  Stmt s(db_, "SELECT json FROM incidents WHERE job = ?1 ORDER BY id");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job);
  std::vector<std::string> out;
  while (true) {
    BW_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(s.Text(0));
  }
  return out;
}

Status Store::AddCheckpoint(const std::string& job, long step, double t) {
  Stmt s(db_, "INSERT OR REPLACE INTO checkpoints (job, step, t) VALUES (?1, ?2, ?3)");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job).Bind(2, step).Bind(3, t);
  return s.Step().status();
}

Result<std::vector<long>> Store::ListCheckpoints(const std::string& job) {
  Stmt s(db_, "SELECT step FROM checkpoints WHERE job = ?1 ORDER BY step");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job);
  std::vector<long> out;
  while (true) {
    BW_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(s.Int(0));
  }
  return out;
}

Status Store::PutAgent(const AgentRecord& a) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO agents (job, node, slot, host, adopt_port, pid) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, a.job).Bind(2, a.node).Bind(3, a.slot).Bind(4, a.host).Bind(5, a.adopt_port);
  s.Bind(6, a.pid);
  return s.Step().status();
}

Status Store::DeleteAgent(const std::string& job, const std::string& node) {
  Stmt s(db_, "DELETE FROM agents WHERE job = ?1 AND node = ?2");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job).Bind(2, node);
  return s.Step().status();
}

Result<std::vector<AgentRecord>> Store::ListAgents(const std::string& job) {
  Stmt s(db_, "SELECT node, slot, host, adopt_port, pid FROM agents WHERE job = ?1 ORDER BY node");
  BW_RETURN_IF_ERROR(s.status());
  s.Bind(1, job);
  std::vector<AgentRecord> out;
  while (true) {
    BW_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({job, s.Text(0), static_cast<int>(s.Int(1)), s.Text(2),
                   static_cast<int>(s.Int(3)), static_cast<int>(s.Int(4))});
  }
  return out;
}

}  // namespace bulwark
