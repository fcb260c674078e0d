#include "store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <fstream>

namespace bulwark {
namespace {

std::string TmpPath(const std::string& name) {
  std::string p = "/tmp/bw-store-test-" + std::to_string(getpid()) + "-" + name;
  ::unlink(p.c_str());
  ::unlink((p + "-wal").c_str());
  ::unlink((p + "-shm").c_str());
  return p;
}

TEST(Store, JobsSurviveReopen) {
  std::string path = TmpPath("reopen.db");
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    JobRecord j;
    j.name = "gpt";
    j.spec_yaml = "name: gpt\n";
    j.phase = JobPhase::kRestarting;
    j.attempt = 3;
    j.restarts = 2;
    j.high_water_step = 120;
    j.message = "rank 1 crashed";
    ASSERT_TRUE((*s)->PutJob(j).ok());
    j.attempt = 4;  // replace
    ASSERT_TRUE((*s)->PutJob(j).ok());
    ASSERT_TRUE((*s)->AddEvent({1.0, "gpt", "RankCrashed", "rank 1 SIGKILL"}).ok());
    ASSERT_TRUE((*s)->AddCheckpoint("gpt", 100, 2.0).ok());
    ASSERT_TRUE((*s)->AddCheckpoint("gpt", 110, 3.0).ok());
    ASSERT_TRUE((*s)->AddIncident("gpt", 3, "{\"kind\":\"crash\"}").ok());
  }
  auto s = Store::Open(path);
  ASSERT_TRUE(s.ok());
  auto j = (*s)->GetJob("gpt");
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(j->has_value());
  EXPECT_EQ((*j)->attempt, 4);
  EXPECT_EQ((*j)->phase, JobPhase::kRestarting);
  EXPECT_EQ((*j)->high_water_step, 120);
  EXPECT_EQ((*j)->message, "rank 1 crashed");
  EXPECT_FALSE((*(*s)->GetJob("other")).has_value());
  EXPECT_EQ((*(*s)->ListJobs()).size(), 1u);
  auto ev = (*s)->ListEvents("gpt");
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].reason, "RankCrashed");
  EXPECT_EQ(*(*s)->ListCheckpoints("gpt"), (std::vector<long>{100, 110}));
  EXPECT_EQ((*(*s)->ListIncidents("gpt")).size(), 1u);
}

// An incident row is rewritten in place: the order stays, another job's row of the same
// id is not touched, a missing row is NOT_FOUND.
TEST(Store, IncidentsAreUpdatedInPlace) {
  auto s = Store::Open(TmpPath("incidents.db"));
  ASSERT_TRUE(s.ok());
  auto a = (*s)->AddIncident("gpt", 0, R"({"kind":"crash"})");
  auto b = (*s)->AddIncident("gpt", 0, R"({"kind":"hang"})");
  auto other = (*s)->AddIncident("bert", 0, R"({"kind":"nan"})");
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  EXPECT_NE(*a, *b);
  ASSERT_TRUE((*s)->UpdateIncident("gpt", *a, R"({"kind":"node_lost"})").ok());
  EXPECT_EQ(*(*s)->ListIncidents("gpt"),
            (std::vector<std::string>{R"({"kind":"node_lost"})", R"({"kind":"hang"})"}));
  Status wrong_job = (*s)->UpdateIncident("gpt", *other, "{}");
  EXPECT_EQ(wrong_job.code(), Code::kNotFound) << wrong_job.ToString();
  EXPECT_EQ(*(*s)->ListIncidents("bert"), (std::vector<std::string>{R"({"kind":"nan"})"}));
}

// A store written before the run_dir column: read-only readers see "" and a writer
// adds the column without losing the rows.
TEST(Store, StoresWithoutTheRunDirColumnAreReadAndUpgraded) {
  std::string path = TmpPath("old-schema.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE jobs (name TEXT PRIMARY KEY, spec_yaml TEXT NOT NULL, "
                           "spec_path TEXT, phase TEXT NOT NULL, run_id TEXT, attempt INTEGER, "
                           "restarts INTEGER, high_water_step INTEGER, last_committed_step "
                           "INTEGER, created REAL, updated REAL, message TEXT, report_json TEXT);"
                           "INSERT INTO jobs (name, spec_yaml, phase) VALUES ('old', 'x', "
                           "'Succeeded');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  {
    auto ro = Store::OpenReadOnly(path);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    auto jobs = (*ro)->ListJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ((*jobs)[0].run_dir, "");
  }
  auto s = Store::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  JobRecord j = **(*s)->GetJob("old");
  j.run_dir = "/runs/old";
  ASSERT_TRUE((*s)->PutJob(j).ok());
  EXPECT_EQ((**(*s)->GetJob("old")).run_dir, "/runs/old");
}

TEST(Store, AgentsAreKeptPerJobAndNode) {
  std::string path = TmpPath("agents.db");
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->PutAgent({"gpt", "node-1", 1, "10.0.0.2", 4001, 77}).ok());
    ASSERT_TRUE((*s)->PutAgent({"gpt", "node-0", 0, "10.0.0.1", 4000, 76}).ok());
    ASSERT_TRUE((*s)->PutAgent({"gpt", "node-2", -1, "10.0.0.3", 4002, 78}).ok());
    ASSERT_TRUE((*s)->PutAgent({"other", "node-0", 0, "10.0.0.9", 4009, 79}).ok());
    ASSERT_TRUE((*s)->PutAgent({"gpt", "node-2", 1, "10.0.0.3", 4003, 78}).ok());  // replaced
    ASSERT_TRUE((*s)->DeleteAgent("gpt", "node-1").ok());
  }
  auto s = Store::Open(path);  // survives a restart
  ASSERT_TRUE(s.ok());
  auto agents = (*s)->ListAgents("gpt");
  ASSERT_TRUE(agents.ok());
  ASSERT_EQ(agents->size(), 2u);
  EXPECT_EQ((*agents)[0].node, "node-0");
  EXPECT_EQ((*agents)[0].adopt_port, 4000);
  EXPECT_EQ((*agents)[1].node, "node-2");
  EXPECT_EQ((*agents)[1].slot, 1);
  EXPECT_EQ((*agents)[1].adopt_port, 4003);
  EXPECT_EQ((*agents)[1].pid, 78);
  EXPECT_EQ((*s)->ListAgents("other")->size(), 1u);
}

TEST(Store, GarbageFileIsAClearError) {
  std::string path = TmpPath("garbage.db");
  std::ofstream(path) << "this is not a database, just text that is long enough to matter....";
  auto s = Store::Open(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path), std::string::npos);
}

TEST(Store, UnknownPhaseIsRejected) {
  EXPECT_FALSE(ParseJobPhase("Exploded").ok());
  EXPECT_EQ(*ParseJobPhase("Failed"), JobPhase::kFailed);
}

}  // namespace
}  // namespace bulwark
