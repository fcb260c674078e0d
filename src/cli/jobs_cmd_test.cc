#include "cli/jobs_cmd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli_main.h"
#include "common/net.h"
#include "store/store.h"

namespace bulwark::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class JobsCmdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bw_jobs_cmd.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    store_ = dir_ + "/.bulwark/bulwark.db";
    fs::create_directories(dir_ + "/.bulwark");
    auto s = Store::Open(store_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    JobRecord a;
    a.name = "alpha";
    a.spec_yaml = "name: alpha";
    a.spec_path = dir_ + "/alpha.yaml";
    a.phase = JobPhase::kSucceeded;
    a.attempt = 2;
    a.restarts = 2;
    a.high_water_step = 100;
    a.last_committed_step = 90;
    a.created = clock_.NowWall() - 3600;
    a.updated = clock_.NowWall() - 60;
    a.message = "finished";
    a.report_json = R"({"ettr": 0.912, "job": "alpha"})";
    a.run_dir = dir_ + "/runs/alpha";
    ASSERT_TRUE((*s)->PutJob(a).ok());
    JobRecord b = a;
    b.name = "beta";
    b.phase = JobPhase::kRunning;
    b.created = clock_.NowWall() - 30;
    b.report_json = "";
    b.message = "";
    b.run_dir = "";  // as a store older than the run_dir column reads
    ASSERT_TRUE((*s)->PutJob(b).ok());
    ASSERT_TRUE((*s)->AddEvent({a.created + 1.5, "alpha", "RankCrashed", "rank 1 exited"}).ok());
    ASSERT_TRUE((*s)->AddEvent({a.created - 100, "alpha", "Old", "an earlier run"}).ok());
    ASSERT_TRUE((*s)->AddIncident("alpha", 1, R"({"kind": "crash", "rank": 1})").ok());
    fs::create_directories(dir_ + "/runs/alpha/logs");
    for (int r = 0; r < 3; ++r) {
      std::ofstream(dir_ + "/runs/alpha/logs/rank-" + std::to_string(r) + ".log")
          << "r" << r << " line 1\nr" << r << " line 2\nr" << r << " line 3\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  FakeClock clock_{1000.0, 1.8e9};
  std::string dir_, store_;
  std::ostringstream out_, err_;
};

TEST_F(JobsCmdTest, GetPrintsAHeaderRowAndAges) {
  GetFlags f;
  f.store = store_;
  ASSERT_EQ(GetJobs(f, out_, err_, &clock_), 0) << err_.str();
  std::istringstream lines(out_.str());
  std::string header, alpha, beta;
  std::getline(lines, header);
  std::getline(lines, alpha);
  std::getline(lines, beta);
  EXPECT_THAT(header, HasSubstr("NAME"));
  EXPECT_THAT(header, HasSubstr("PHASE"));
  EXPECT_THAT(header, HasSubstr("AGE"));
  EXPECT_THAT(header, Not(HasSubstr("ETTR")));
  EXPECT_THAT(alpha, HasSubstr("Succeeded"));
  EXPECT_THAT(alpha, HasSubstr("60m"));
  EXPECT_THAT(beta, HasSubstr("Running"));
  EXPECT_THAT(beta, HasSubstr("30s"));
  // Columns line up: PHASE starts at the same offset on every row.
  EXPECT_EQ(header.find("PHASE"), alpha.find("Succeeded"));
  EXPECT_EQ(header.find("PHASE"), beta.find("Running"));
}

TEST_F(JobsCmdTest, GetWideNameAndOneJob) {
  GetFlags f;
  f.store = store_;
  f.output = "wide";
  f.names = {"alpha"};
  ASSERT_EQ(GetJobs(f, out_, err_, &clock_), 0);
  EXPECT_THAT(out_.str(), HasSubstr("ETTR"));
  EXPECT_THAT(out_.str(), HasSubstr("0.912"));
  EXPECT_THAT(out_.str(), HasSubstr(dir_ + "/runs/alpha"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("beta")));
  out_.str("");
  f.output = "name";
  f.names.clear();
  ASSERT_EQ(GetJobs(f, out_, err_, &clock_), 0);
  EXPECT_EQ(out_.str(), "job/alpha\njob/beta\n");
}

TEST_F(JobsCmdTest, GetJsonIsAListOrTheNamedObject) {
  GetFlags f;
  f.store = store_;
  f.output = "json";
  ASSERT_EQ(GetJobs(f, out_, err_, &clock_), 0);
  Json all = Json::parse(out_.str());
  EXPECT_EQ(all["kind"], "List");
  ASSERT_EQ(all["items"].size(), 2u);
  EXPECT_EQ(all["items"][0]["name"], "alpha");
  EXPECT_EQ(all["items"][0]["ettr"], 0.912);
  EXPECT_EQ(all["items"][0]["committedStep"], 90);
  // A store without run_dir: the default, <store dir>/<job>.
  EXPECT_EQ(all["items"][1]["runDir"], dir_ + "/.bulwark/beta");
  out_.str("");
  f.names = {"beta"};
  ASSERT_EQ(GetJobs(f, out_, err_, &clock_), 0);
  Json one = Json::parse(out_.str());
  EXPECT_EQ(one["kind"], "Job");
  EXPECT_EQ(one["phase"], "Running");
  out_.str("");
  f.output = "yaml";
  ASSERT_EQ(GetJobs(f, out_, err_, &clock_), 0);
  EXPECT_THAT(out_.str(), HasSubstr("phase: Running\n"));
}

TEST_F(JobsCmdTest, GetOfAnUnknownJobFailsNamingTheKnownOnes) {
  GetFlags f;
  f.store = store_;
  f.names = {"alpha", "gama"};
  EXPECT_EQ(GetJobs(f, out_, err_, &clock_), 1);
  EXPECT_THAT(out_.str(), HasSubstr("alpha"));  // the found one is still shown
  EXPECT_THAT(err_.str(), HasSubstr("job \"gama\" not found (jobs: alpha, beta)"));
}

TEST_F(JobsCmdTest, DescribeShowsThisRunsEventsAndJson) {
  DescribeFlags f;
  f.store = store_;
  f.name = "alpha";
  ASSERT_EQ(DescribeJob(f, out_, err_, &clock_), 0);
  EXPECT_THAT(out_.str(), HasSubstr("RankCrashed"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("an earlier run")));
  EXPECT_THAT(out_.str(), HasSubstr("Run dir:   " + dir_ + "/runs/alpha"));
  out_.str("");
  f.output = "json";
  ASSERT_EQ(DescribeJob(f, out_, err_, &clock_), 0);
  Json j = Json::parse(out_.str());
  ASSERT_EQ(j["events"].size(), 1u);
  EXPECT_EQ(j["events"][0]["reason"], "RankCrashed");
  EXPECT_DOUBLE_EQ(j["events"][0]["seconds"].get<double>(), 1.5);
  EXPECT_EQ(j["incidents"][0]["kind"], "crash");
  EXPECT_EQ(j["report"]["ettr"], 0.912);
}

TEST_F(JobsCmdTest, LogsOfARankTailAndAllRanks) {
  LogsFlags f;
  f.store = store_;
  f.name = "alpha";
  f.rank = 1;
  ASSERT_EQ(JobLogs(f, out_, err_, &clock_), 0) << err_.str();
  EXPECT_EQ(out_.str(), "r1 line 1\nr1 line 2\nr1 line 3\n");
  out_.str("");
  f.all_ranks = true;
  f.tail = 1;
  ASSERT_EQ(JobLogs(f, out_, err_, &clock_), 0);
  EXPECT_EQ(out_.str(), "[rank 0] r0 line 3\n[rank 1] r1 line 3\n[rank 2] r2 line 3\n");
  f.all_ranks = false;
  f.rank = 7;
  EXPECT_EQ(JobLogs(f, out_, err_, &clock_), 2);
  EXPECT_THAT(err_.str(), HasSubstr("no log of rank 7; it has ranks 0..2"));
}

// A clock whose sleeps are the passage of a running job: the first appends a line to
// rank 0's log, the second ends the job (its controller removes controller.addr).
class ScriptedClock : public FakeClock {
 public:
  explicit ScriptedClock(std::string run_dir) : run_dir_(std::move(run_dir)) {}
  void SleepFor(double s) const override {
    FakeClock::SleepFor(s);
    if (++sleeps_ == 1) {
      std::ofstream(run_dir_ + "/logs/rank-0.log", std::ios::app) << "new line\npartial";
    } else if (sleeps_ == 2) {
      fs::remove(run_dir_ + "/controller.addr");
    }
  }
  mutable int sleeps_ = 0;

 private:
  std::string run_dir_;
};

TEST_F(JobsCmdTest, FollowPrintsNewLinesUntilTheControllerIsGone) {
  const std::string run_dir = dir_ + "/runs/alpha";
  std::ofstream(run_dir + "/controller.addr") << "127.0.0.1:1\n";
  ScriptedClock clock(run_dir);
  LogsFlags f;
  f.store = store_;
  f.name = "alpha";
  f.follow = true;
  f.tail = 0;
  ASSERT_EQ(JobLogs(f, out_, err_, &clock), 0);
  EXPECT_EQ(out_.str(), "new line\npartial\n");
  EXPECT_GE(clock.sleeps_, 3);  // one more look after the controller was gone
}

TEST_F(JobsCmdTest, CancelSaysWhyItCannot) {
  CancelFlags f;
  f.store = store_;
  f.name = "alpha";
  EXPECT_EQ(CancelJob(f, out_, err_, &clock_), 1);
  EXPECT_THAT(err_.str(), HasSubstr("is not running (phase Succeeded)"));
  err_.str("");
  f.name = "beta";  // Running in its store, but no controller: its run was killed
  EXPECT_EQ(CancelJob(f, out_, err_, &clock_), 1);
  EXPECT_THAT(err_.str(), HasSubstr("no controller is running for it"));
  EXPECT_THAT(err_.str(), HasSubstr("resumes it"));
}

// `bulwark ARGS...` in process: its exit status.
int RunMain(std::vector<std::string> args) {
  args.insert(args.begin(), "bulwark");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return Main(static_cast<int>(argv.size()), argv.data());
}

TEST_F(JobsCmdTest, TheCommandLineRoutesGetAndValidatesOutput) {
  EXPECT_EQ(RunMain({"get", "-o", "xml", "--store", store_}), 2);
  EXPECT_EQ(RunMain({"logs", "--store", store_}), 2);  // no job name
  EXPECT_EQ(RunMain({"get", "nope", "--store", store_}), 1);
}

TEST(FormatAgeTest, KubectlStyle) {
  EXPECT_EQ(FormatAge(-5), "0s");
  EXPECT_EQ(FormatAge(59), "59s");
  EXPECT_EQ(FormatAge(119), "119s");
  EXPECT_EQ(FormatAge(600), "10m");
  EXPECT_EQ(FormatAge(3 * 3600), "3h");
  EXPECT_EQ(FormatAge(5 * 86400), "5d");
}

}  // namespace
}  // namespace bulwark::cli
