#include "spec/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "spec/job_spec_schema.h"
#include "spec/spec_reader.h"

namespace bulwark {
namespace {

using ::testing::HasSubstr;

const char kTestdata[] = BW_SPEC_TESTDATA_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Every error line must follow "<source>:<line>: <path>: <problem> (got <v>); <fix>".
void ExpectWellFormed(const std::string& msg) {
  static const std::regex kForm(R"(^[^:]+:[0-9]+: .+: .+ \(got .*\); .+$)");
  ASSERT_FALSE(msg.empty());
  for (const std::string& l : Lines(msg)) {
    EXPECT_TRUE(std::regex_match(l, kForm)) << "malformed error line: " << l;
  }
}

TEST(JobSpecTest, FullSpecRoundTrips) {
  auto r = ParseJobSpec(ReadFile(std::string(kTestdata) + "/full.yaml"), "full.yaml", "/jobs/a");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobSpec& s = *r;
  EXPECT_EQ(s.name, "gpt-char");
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.procs_per_node, 2);
  EXPECT_EQ(s.world_size(), 4);
  EXPECT_EQ(s.command, (std::vector<std::string>{"/usr/bin/python3", "train.py"}));
  EXPECT_EQ(s.args, (std::vector<std::string>{"--steps", "600"}));
  EXPECT_EQ(s.env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(s.env.at("RUN_NAME"), "demo run");
  EXPECT_EQ(s.workdir, "/jobs/a");
  EXPECT_EQ(s.checkpoint.dir, "/jobs/a/ckpt");
  EXPECT_EQ(s.checkpoint.interval_steps, 20);
  EXPECT_EQ(s.checkpoint.interval_seconds, 0);
  EXPECT_EQ(s.checkpoint.keep, 3);
  EXPECT_EQ(s.fault_policy.restart_budget, 10);
  EXPECT_EQ(s.fault_policy.backoff_base_seconds, 1);
  EXPECT_EQ(s.fault_policy.backoff_cap_seconds, 30);
  EXPECT_EQ(s.fault_policy.hang_timeout_floor_seconds, 30);
  EXPECT_EQ(s.fault_policy.hang_timeout_multiplier, 10);
  EXPECT_EQ(s.fault_policy.startup_timeout_seconds, 300);
  EXPECT_EQ(s.fault_policy.heartbeat_interval_seconds, 1);
  EXPECT_EQ(s.fault_policy.heartbeat_misses, 3);
  EXPECT_EQ(s.fault_policy.stop_grace_seconds, 5);
  EXPECT_EQ(s.fault_policy.max_same_fault_without_progress, 3);
  EXPECT_TRUE(s.fault_policy.in_process_restart);
  EXPECT_EQ(s.fault_policy.park_timeout_seconds, 5);
  EXPECT_EQ(s.fault_policy.WarmRanks(s.procs_per_node), s.procs_per_node);
  ASSERT_EQ(s.chaos.size(), 4u);
  EXPECT_EQ(s.chaos[0].kind, ChaosKind::kKillRank);
  EXPECT_EQ(s.chaos[0].at_seconds, 30);
  EXPECT_EQ(s.chaos[0].at_step, -1);
  EXPECT_EQ(s.chaos[0].rank, 1);
  EXPECT_EQ(s.chaos[1].kind, ChaosKind::kHangRank);
  EXPECT_EQ(s.chaos[1].at_step, 200);
  EXPECT_EQ(s.chaos[1].at_seconds, -1);
  EXPECT_EQ(s.chaos[1].rank, 3);
  EXPECT_EQ(s.chaos[2].kind, ChaosKind::kNanLoss);
  EXPECT_EQ(s.chaos[3].kind, ChaosKind::kKillAgent);
  EXPECT_EQ(s.chaos[3].node, 1);
  EXPECT_EQ(s.source_path, "");
}

// Found by fuzz_trainjob: valid UTF-8 text whose escape "\N" yaml-cpp decodes to the
// single byte 0x85, which made every JSON of the spec throw (render, submit, the store).
TEST(JobSpecTest, EscapesThatDecodeToBytesOtherThanUtf8AreRefused) {
  for (const char* esc : {"\\N", "\\_"}) {
    const std::string text = std::string("name: a\nnodes: 1\ncommand: [\"x\"]\n") +
                             "env: {NCCL_DEBUG: \"WA" + esc + "\"}\n";
    auto r = ParseJobSpec(text, "job.yaml", "/jobs/a");
    ASSERT_FALSE(r.ok()) << esc;
    EXPECT_EQ(r.status().message(),
              "job.yaml:4: (encoding): this string decodes to bytes that are not UTF-8 (the "
              "YAML escapes \\N and \\_); write the character itself, or as \\u0085 or "
              "\\u00a0")
        << esc;
  }
  // The same characters written as \u escapes are UTF-8 (and yaml-cpp encodes \L and \P
  // right); an alias bomb is walked once per node, not per expansion.
  EXPECT_TRUE(
      ParseJobSpec("name: a\nnodes: 1\ncommand: [\"\\u0085\\u00a0\\L\\P\"]\n", "j", "/").ok());
  std::string bomb = "name: a\nnodes: 1\ncommand: [x]\nlabels: {a: &a [\"x\", \"x\"]";
  for (int i = 0; i < 30; ++i) {
    bomb += ", " + std::string(1, 'b' + i % 20) + std::to_string(i) + ": &n" + std::to_string(i) +
            " [*" + (i == 0 ? std::string("a") : "n" + std::to_string(i - 1)) + ", *" +
            (i == 0 ? std::string("a") : "n" + std::to_string(i - 1)) + "]";
  }
  bomb += "}\n";
  EXPECT_FALSE(ParseJobSpec(bomb, "j", "/").ok());  // returns: `labels` is no job field
}

TEST(JobSpecTest, InvalidUtf8IsRefusedWithTheLineAndColumn) {
  // Raw bytes, not an escape: once parsed they would make every JSON written from the
  // spec (render, submit, the store) throw.
  const std::string text =
      "name: a\nnodes: 1\ncommand: [\"x\"]\nenv: {X: \"ok\\u00ff\", Y: \"\xff\"}\n";
  auto r = ParseJobSpec(text, "job.yaml", "/jobs/a");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "job.yaml:4: (encoding): byte 0xff at column 26 is not valid UTF-8; save the file "
            "as UTF-8 text (YAML, JSON and Kubernetes manifests are UTF-8), or write the "
            "character as an escape in a double-quoted string (\"\\u00ff\")");
  for (const std::string bad : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    EXPECT_FALSE(ParseJobSpec("name: " + bad + "\nnodes: 1\ncommand: [x]\n", "j", "/").ok())
        << "overlong, surrogate, above U+10FFFF or truncated";
  }
  auto ok = ParseJobSpec("name: a\nnodes: 1\ncommand: [\"\xc3\xbf\xe2\x82\xac\xf0\x9f\x98\x80\"]\n",
                         "j", "/");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(JobSpecTest, NonDefaultValuesAreRead) {
  auto r = ParseJobSpec(
      "name: j\ncommand: [x]\nfaultPolicy:\n  restartBudget: 0\n  spareNodes: 2\n"
      "  backoff: {baseSeconds: 0.5, capSeconds: 0.5}\n  hangTimeout: {multiplier: 2.5}\n"
      "  stopGraceSeconds: 0\n  inProcessRestart: false\n  parkTimeoutSeconds: 2.5\n"
      "  warmRanks: 0\ncheckpoint: {intervalSeconds: 12.5, keep: 7, objectStore: "
      "\"s3://b/p?endpoint=http://127.0.0.1:9\", objectIntervalSteps: 50, peerReplication: "
      "false, peerPushShare: 0.25}\n",
      "s", "/b");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fault_policy.restart_budget, 0);
  EXPECT_EQ(r->fault_policy.spare_nodes, 2);
  EXPECT_EQ(r->fault_policy.backoff_base_seconds, 0.5);
  EXPECT_EQ(r->fault_policy.backoff_cap_seconds, 0.5);
  EXPECT_EQ(r->fault_policy.hang_timeout_multiplier, 2.5);
  EXPECT_EQ(r->fault_policy.hang_timeout_floor_seconds, 30);
  EXPECT_EQ(r->fault_policy.stop_grace_seconds, 0);
  EXPECT_EQ(r->checkpoint.interval_seconds, 12.5);
  EXPECT_EQ(r->checkpoint.keep, 7);
  EXPECT_EQ(r->checkpoint.object_store, "s3://b/p?endpoint=http://127.0.0.1:9");
  EXPECT_EQ(r->checkpoint.object_interval_steps, 50);
  EXPECT_FALSE(r->checkpoint.peer_replication);
  EXPECT_EQ(r->checkpoint.peer_push_share, 0.25);
  EXPECT_FALSE(r->fault_policy.in_process_restart);
  EXPECT_EQ(r->fault_policy.park_timeout_seconds, 2.5);
  EXPECT_EQ(r->fault_policy.WarmRanks(8), 0);
}

TEST(JobSpecTest, SlurmSectionIsReadAndCheckedAsSlurmWouldTakeIt) {
  auto r = ParseJobSpec(
      "name: j\ncommand: [x]\nslurm:\n  partition: gpu-a\n  account: ml.team\n  qos: high\n"
      "  time: 1-12:00:00\n  constraint: a100&ib\n  growNodes: 2\n",
      "s", "/b");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->slurm.partition, "gpu-a");
  EXPECT_EQ(r->slurm.account, "ml.team");
  EXPECT_EQ(r->slurm.qos, "high");
  EXPECT_EQ(r->slurm.time, "1-12:00:00");
  EXPECT_EQ(r->slurm.constraint, "a100&ib");
  EXPECT_EQ(r->slurm.grow_nodes, 2);
  auto plain = ParseJobSpec("name: j\ncommand: [x]\n", "s", "/b");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->slurm, SlurmSpec{});
  // Every problem, each naming its line and field: what a shell would read, a time Slurm
  // does not take, an empty value, a typo, a negative count.
  auto bad = ParseJobSpec(
      "name: j\ncommand: [x]\nslurm:\n  partition: \"gpu; rm -rf /\"\n  time: 2h\n"
      "  account: \"\"\n  constrant: a100\n  growNodes: -1\n",
      "job.yaml", "/b");
  ASSERT_FALSE(bad.ok());
  const std::string m = bad.status().message();
  for (const char* want :
       {"job.yaml:4: slurm.partition: not a partition name (letters, digits, _.+-) (got \"gpu; "
        "rm -rf /\"); set slurm.partition to a partition of the cluster",
        "job.yaml:5: slurm.time: not a Slurm time limit: MINUTES, MM:SS, HH:MM:SS",
        "job.yaml:6: slurm.account: must not be empty",
        "job.yaml:7: slurm.constrant: unknown field (got constrant); did you mean \"constraint\"?",
        "job.yaml:8: slurm.growNodes:"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
  EXPECT_EQ(SlurmValueProblem("time", "UNLIMITED"), "");
  EXPECT_EQ(SlurmValueProblem("constraint", "[rack1*2&rack2*4]"), "");
  EXPECT_NE(SlurmValueProblem("qos", "a b"), "");
}

TEST(JobSpecTest, InProcessFieldsNameTheFieldAndTheFix) {
  auto r = ParseJobSpec(
      "name: j\ncommand: [x]\nfaultPolicy:\n  inProcessRestart: maybe\n"
      "  parkTimeoutSeconds: 0\n  warmRanks: 65\n",
      "job.yaml", "/b");
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("job.yaml:4: faultPolicy.inProcessRestart: must be true or false (got maybe); "
                   "write inProcessRestart: true or inProcessRestart: false"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("job.yaml:5: faultPolicy.parkTimeoutSeconds"), std::string::npos) << m;
  EXPECT_NE(m.find("job.yaml:6: faultPolicy.warmRanks"), std::string::npos) << m;
  auto ok = ParseJobSpec("name: j\ncommand: [x]\nprocsPerNode: 3\nfaultPolicy: {warmRanks: auto}\n",
                         "s", "/b");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->fault_policy.WarmRanks(ok->procs_per_node), 3);
}

TEST(JobSpecTest, ElasticBoundsAreReadAndChecked) {
  auto r = ParseJobSpec(
      "name: j\ncommand: [x]\nnodes: 4\nelastic: {minNodes: 2, waitSeconds: 30}\n", "s", "/b");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->elastic.enabled());
  EXPECT_EQ(r->elastic.min_nodes, 2);
  EXPECT_EQ(r->elastic.wait_seconds, 30);
  auto fixed = ParseJobSpec("name: j\ncommand: [x]\nnodes: 4\n", "s", "/b");
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->elastic.enabled());
  auto big =
      ParseJobSpec("name: j\ncommand: [x]\nnodes: 2\nelastic:\n  minNodes: 3\n", "job.yaml", "/b");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("job.yaml:5: elastic.minNodes: must be at most nodes (got "
                                        "3 > nodes 2); lower elastic.minNodes or raise nodes"),
            std::string::npos)
      << big.status().message();
  auto bad = ParseJobSpec("name: j\ncommand: [x]\nelastic: {waitSeconds: -1, minNode: 1}\n",
                          "job.yaml", "/b");
  ASSERT_FALSE(bad.ok());
  const std::string m = bad.status().message();
  EXPECT_NE(m.find("elastic.waitSeconds"), std::string::npos) << m;
  EXPECT_NE(m.find("elastic.minNode: unknown field (got minNode); did you mean \"minNodes\"?"),
            std::string::npos)
      << m;
  auto missing =
      ParseJobSpec("name: j\ncommand: [x]\nelastic: {waitSeconds: 5}\n", "job.yaml", "/b");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("elastic.minNodes"), std::string::npos)
      << missing.status().message();
}

TEST(JobSpecTest, AutoCadenceAndStandby) {
  auto r = ParseJobSpec(
      "name: j\ncommand: [x]\ncheckpoint: {intervalSteps: auto}\nfaultPolicy:\n"
      "  spareNodes: auto\n  failureRatePerNodeDay: 0.02\n  replacementLeadSeconds: 900\n",
      "s", "/b");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->checkpoint.interval_auto);
  EXPECT_EQ(r->checkpoint.interval_steps, 0);
  EXPECT_TRUE(r->fault_policy.spare_nodes_auto);
  EXPECT_EQ(r->fault_policy.spare_nodes, 0);
  EXPECT_EQ(r->fault_policy.failures_per_node_day, 0.02);
  EXPECT_EQ(r->fault_policy.replacement_lead_seconds, 900);
  // Defaults: fixed cadence and standby, Llama 3's failure rate.
  auto d = ParseJobSpec("name: j\ncommand: [x]\n", "s", "/b");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->checkpoint.interval_auto);
  EXPECT_FALSE(d->fault_policy.spare_nodes_auto);
  EXPECT_NEAR(d->fault_policy.failures_per_node_day, 0.00379, 1e-5);
}

TEST(JobSpecTest, MinimalSpecGetsDefaults) {
  auto r = ParseJobSpec(ReadFile(std::string(kTestdata) + "/minimal.yaml"), "m", "/base");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobSpec& s = *r;
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.procs_per_node, 1);
  EXPECT_TRUE(s.args.empty());
  EXPECT_TRUE(s.env.empty());
  EXPECT_TRUE(s.chaos.empty());
  EXPECT_EQ(s.workdir, "/base");
  EXPECT_EQ(s.checkpoint.dir, "/base/checkpoints/hello");
  EXPECT_EQ(s.checkpoint.keep, 3);
  FaultPolicySpec defaults;
  EXPECT_EQ(s.fault_policy.restart_budget, defaults.restart_budget);
  EXPECT_EQ(s.fault_policy.hang_timeout_floor_seconds, defaults.hang_timeout_floor_seconds);
}

TEST(JobSpecTest, RelativePathsResolve) {
  auto r = ParseJobSpec("name: j\ncommand: [x]\nworkdir: sub/../w/\ncheckpoint: {dir: ./ck/}\n",
                        "s", "/base/dir");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->workdir, "/base/dir/w");
  EXPECT_EQ(r->checkpoint.dir, "/base/dir/w/ck");

  r = ParseJobSpec("name: j\ncommand: [x]\nworkdir: /abs/wd\ncheckpoint: {dir: /data/ck}\n", "s",
                   "/base/dir");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->workdir, "/abs/wd");
  EXPECT_EQ(r->checkpoint.dir, "/data/ck");

  r = ParseJobSpec("name: j\ncommand: [x]\nworkdir: w\n", "s", "/base");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checkpoint.dir, "/base/w/checkpoints/j");

  // A relative base_dir is made absolute against the current directory.
  r = ParseJobSpec("name: j\ncommand: [x]\n", "s", "rel");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->workdir, (std::filesystem::current_path() / "rel").string());
}

TEST(JobSpecTest, LoadJobSpecUsesFileDirectory) {
  auto r = LoadJobSpec(std::string(kTestdata) + "/full.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string dir = std::filesystem::path(kTestdata).lexically_normal().string();
  EXPECT_EQ(r->workdir, dir);
  EXPECT_EQ(r->checkpoint.dir, dir + "/ckpt");
  EXPECT_EQ(r->source_path, dir + "/full.yaml");
}

TEST(JobSpecTest, LoadJobSpecMissingFile) {
  auto r = LoadJobSpec("/nonexistent/dir/job.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/dir/job.yaml"));
}

TEST(JobSpecTest, BadExampleReportsEveryError) {
  const std::string path = std::string(kTestdata) + "/bad.yaml";
  auto r = LoadJobSpec(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string& m = r.status().message();
  ExpectWellFormed(m);
  EXPECT_THAT(m, HasSubstr(path + ":2: name: "));
  EXPECT_THAT(m, HasSubstr(path + ":3: nodes: must be >= 1 (got 0)"));
  EXPECT_THAT(m, HasSubstr(path + ":4: procsPerNod: unknown field"));
  EXPECT_THAT(m, HasSubstr(path + ":5: command: must be a list of strings"));
  EXPECT_THAT(m, HasSubstr(path + ":7: checkpoint.keep: must be a whole number (got 1.5)"));
  EXPECT_THAT(m, HasSubstr(path + ":9: chaos[0].kind: unknown chaos kind"));
  EXPECT_EQ(Lines(m).size(), 6u) << m;
  // Errors are ordered by line even though unknown keys are found first.
  int prev = 0;
  for (const std::string& l : Lines(m)) {
    const int line = std::stoi(l.substr(path.size() + 1));
    EXPECT_GE(line, prev) << m;
    prev = line;
  }
}

TEST(JobSpecTest, LoadJobSpecDirectoryIsAnError) {
  auto r = LoadJobSpec(kTestdata);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(kTestdata));
}

struct BadCase {
  const char* label;
  std::string yaml;  // appended after kPrefix unless `full`
  int line;
  std::string path;
  std::string problem;
  std::string fix;
  bool full = false;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.label; }

// Two valid lines; cases start on line 3.
const char kPrefix[] = "name: j\ncommand: [x]\n";

class BadSpecTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadSpecTest, ReportsFieldLineAndFix) {
  const BadCase& c = GetParam();
  const std::string text = c.full ? c.yaml : kPrefix + c.yaml;
  auto r = ParseJobSpec(text, "job.yaml", "/base");
  ASSERT_FALSE(r.ok()) << c.label;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string& m = r.status().message();
  ExpectWellFormed(m);
  EXPECT_THAT(m, HasSubstr("job.yaml:" + std::to_string(c.line) + ": " + c.path + ": ")) << c.label;
  EXPECT_THAT(m, HasSubstr(c.problem)) << c.label;
  EXPECT_THAT(m, HasSubstr(c.fix)) << c.label;
}

const BadCase kBadCases[] = {
    {"typo", "procsPerNod: 2\n", 3, "procsPerNod", "unknown field",
     "did you mean \"procsPerNode\"?"},
    {"snake_case", "procs_per_node: 2\n", 3, "procs_per_node", "unknown field",
     "did you mean \"procsPerNode\"?"},
    {"far_unknown", "zzzzzz: 1\n", 3, "zzzzzz", "unknown field", "remove it; valid fields here:"},
    {"nodes_word", "nodes: two\n", 3, "nodes", "must be an integer (got two)", "1 to 1024"},
    {"nodes_zero", "nodes: 0\n", 3, "nodes", "must be >= 1 (got 0)", "number of machines"},
    {"nodes_huge", "nodes: 2000\n", 3, "nodes", "must be <= 1024", "1 to 1024"},
    {"nodes_overflow", "nodes: 99999999999999999999999\n", 3, "nodes", "out of range", "1 to 1024"},
    {"nodes_quoted", "nodes: \"2\"\n", 3, "nodes", "not a quoted string", "remove the quotes"},
    {"nodes_null", "nodes:\n", 3, "nodes", "must be an integer (got null)", "1 to 1024"},
    {"ppn_list", "procsPerNode: [1]\n", 3, "procsPerNode", "(got a list)", "1 to 256"},
    {"keep_float", "checkpoint:\n  keep: 1.5\n", 4, "checkpoint.keep", "whole number (got 1.5)",
     "committed checkpoints to retain"},
    {"keep_zero", "checkpoint:\n  keep: 0\n", 4, "checkpoint.keep", "must be >= 1 (got 0)",
     "committed checkpoints to retain"},
    {"interval_1e400", "checkpoint: {intervalSeconds: 1e400}\n", 3, "checkpoint.intervalSeconds",
     "out of range", ">= 0"},
    {"interval_neg", "checkpoint: {intervalSteps: -5}\n", 3, "checkpoint.intervalSteps",
     "must be >= 0 (got -5)", "integer >= 0"},
    {"interval_nan", "checkpoint: {intervalSeconds: .nan}\n", 3, "checkpoint.intervalSeconds",
     "finite number", ">= 0"},
    {"interval_word", "checkpoint: {intervalSteps: often}\n", 3, "checkpoint.intervalSteps",
     "must be an integer (got often)", "or auto"},
    {"interval_auto_no_memory", "checkpoint: {intervalSteps: auto, memorySlots: 0}\n", 3,
     "checkpoint.intervalSteps", "auto needs the memory tier", "set memorySlots to 2"},
    {"spare_word", "faultPolicy: {spareNodes: many}\n", 3, "faultPolicy.spareNodes",
     "must be an integer", "or auto"},
    {"rate_neg", "faultPolicy: {failureRatePerNodeDay: -1}\n", 3,
     "faultPolicy.failureRatePerNodeDay", "must be >= 0", "failures per node-day"},
    {"lead_zero", "faultPolicy: {replacementLeadSeconds: 0}\n", 3,
     "faultPolicy.replacementLeadSeconds", "must be > 0", "new node"},
    {"object_not_s3", "checkpoint: {objectStore: /tmp/x}\n", 3, "checkpoint.objectStore",
     "is not an S3 URL", "s3://bucket/prefix"},
    {"object_no_bucket", "checkpoint: {objectStore: \"s3://?endpoint=x\"}\n", 3,
     "checkpoint.objectStore", "is not an S3 URL", "s3://bucket/prefix"},
    {"peer_not_bool", "checkpoint: {peerReplication: yes please}\n", 3,
     "checkpoint.peerReplication", "must be true or false", "peerReplication: false"},
    {"push_share_zero", "checkpoint: {peerPushShare: 0}\n", 3, "checkpoint.peerPushShare",
     "must be > 0", "a number in (0, 1]"},
    {"push_share_big", "checkpoint: {peerPushShare: 1.5}\n", 3, "checkpoint.peerPushShare",
     "must be <= 1", "1 = push every snapshot"},
    {"object_interval_neg", "checkpoint: {objectIntervalSteps: -1}\n", 3,
     "checkpoint.objectIntervalSteps", "must be >= 0 (got -1)", "upload every N-th step"},
    {"checkpoint_scalar", "checkpoint: 5\n", 3, "checkpoint", "must be a mapping of fields (got 5)",
     "dir, intervalSteps"},
    {"command_string", "name: j\ncommand: python train.py\n", 2, "command",
     "must be a list of strings, not a single string", "command: [\"python\", \"train.py\"]", true},
    {"command_empty", "name: j\ncommand: []\n", 2, "command", "must not be empty", "non-empty list",
     true},
    {"command_nested", "name: j\ncommand:\n  - x\n  - [y]\n", 4, "command[1]",
     "list items must be strings (got a list)", "quote the item", true},
    {"missing_name", "command: [x]\nnodes: 1\n", 1, "name", "required field is missing", "DNS-1123",
     true},
    {"missing_command", "name: j\n", 1, "command", "required field is missing",
     "non-empty list of strings", true},
    {"bad_name", "name: My_Job\ncommand: [x]\n", 1, "name", "must be a DNS-1123 label",
     "lowercase letters", true},
    {"long_name", "name: " + std::string(64, 'a') + "\ncommand: [x]\n", 1, "name",
     "at most 63 characters", "DNS-1123", true},
    {"duplicate", "nodes: 1\nnodes: 2\n", 4, "nodes", "duplicate key", "keep only one \"nodes\""},
    {"env_bad_name", "env:\n  1BAD: x\n", 4, "env.1BAD", "invalid environment variable name",
     "letters, digits and '_'"},
    {"env_reserved", "env:\n  OK: 1\n  WORLD_SIZE: 8\n", 5, "env.WORLD_SIZE",
     "reserved: the agent sets it", "remove it"},
    {"env_reserved_prefix", "env: {BULWARK_JOB: x}\n", 3, "env.BULWARK_JOB", "reserved",
     "remove it"},
    {"env_list_value", "env:\n  A: [1, 2]\n", 4, "env.A", "value must be a string",
     "quote the value"},
    {"env_null_value", "env:\n  A:\n", 4, "env.A", "missing value", "A: \"\""},
    {"env_not_map", "env: [A=1]\n", 3, "env", "must be a mapping", "NAME: value"},
    {"args_map", "args: {a: b}\n", 3, "args", "must be a list of strings (got a mapping)",
     "args: [\"--steps\""},
    {"backoff_cap", "faultPolicy:\n  backoff: {baseSeconds: 10, capSeconds: 5}\n", 4,
     "faultPolicy.backoff.capSeconds", "must be >= baseSeconds", "raise capSeconds"},
    {"backoff_zero", "faultPolicy:\n  backoff:\n    baseSeconds: 0\n", 5,
     "faultPolicy.backoff.baseSeconds", "must be > 0 (got 0)", "first backoff"},
    {"multiplier", "faultPolicy:\n  hangTimeout: {multiplier: 0.5}\n", 4,
     "faultPolicy.hangTimeout.multiplier", "must be >= 1 (got 0.5)", "p99"},
    {"nested_typo", "faultPolicy:\n  heartbeat:\n    mises: 3\n", 5, "faultPolicy.heartbeat.mises",
     "unknown field", "did you mean \"misses\"?"},
    {"misses_overflow", "faultPolicy:\n  heartbeat: {misses: 3000000000}\n", 4,
     "faultPolicy.heartbeat.misses", "must be <= 2147483647", "integer >= 1"},
    {"fault_typo", "faultPolicy:\n  restartBudgt: 3\n", 4, "faultPolicy.restartBudgt",
     "unknown field", "did you mean \"restartBudget\"?"},
    {"chaos_rank_world",
     "nodes: 2\nprocsPerNode: 2\nchaos:\n  - {kind: kill_rank, atSeconds: 1, "
     "rank: 4}\n",
     6, "chaos[0].rank", "must be <= 3 (got 4)", "world size"},
    {"chaos_node", "nodes: 2\nchaos:\n  - kind: kill_agent\n    atStep: 5\n    node: 2\n", 7,
     "chaos[0].node", "must be <= 1 (got 2)", "nodes - 1"},
    {"chaos_kind", "chaos:\n  - {kind: explode, atStep: 1, rank: 0}\n", 4, "chaos[0].kind",
     "unknown chaos kind (got explode)",
     "kill_rank, hang_rank, nan_loss, kill_agent, slow_rank, slow_data, loss_spike, sdc"},
    {"chaos_both", "chaos:\n  - {kind: nan_loss, atStep: 1, atSeconds: 2, rank: 0}\n", 4,
     "chaos[0]", "both atSeconds and atStep", "exactly one"},
    {"chaos_neither", "chaos:\n  - {kind: nan_loss, rank: 0}\n", 4, "chaos[0]", "needs a trigger",
     "add atSeconds"},
    {"chaos_negative", "chaos:\n  - {kind: hang_rank, atSeconds: -1, rank: 0}\n", 4,
     "chaos[0].atSeconds", "must be >= 0 (got -1)", "seconds since job start"},
    {"chaos_missing_rank", "chaos:\n  - {kind: hang_rank, atSeconds: 1}\n", 4, "chaos[0].rank",
     "required field is missing", "global rank"},
    {"chaos_wrong_target", "chaos:\n  - {kind: kill_agent, atSeconds: 1, node: 0, rank: 1}\n", 4,
     "chaos[0].rank", "does not apply to kind kill_agent", "use node"},
    {"chaos_scalar_item", "chaos:\n  - kill_rank\n", 4, "chaos[0]", "must be a mapping",
     "{kind: kill_rank"},
    {"chaos_map", "chaos: {kind: kill_rank}\n", 3, "chaos", "must be a list of faults",
     "chaos: [{kind"},
    {"chaos_typo", "chaos:\n  - {kind: kill_rank, atSecond: 1, rank: 0}\n", 4, "chaos[0].atSecond",
     "unknown field", "did you mean \"atSeconds\"?"},
    {"empty", "", 1, "(top level)", "the spec is empty", "add at least name and command", true},
    {"comment_only", "# nothing\n", 1, "(top level)", "the spec is empty", "name and command",
     true},
    {"top_list", "- a\n- b\n", 1, "(top level)", "must be a mapping of fields (got a list)",
     "name: my-job", true},
    {"top_scalar", "hello\n", 1, "(top level)", "must be a mapping of fields (got hello)",
     "name: my-job", true},
    {"multi_doc", "name: a\n---\nname: b\n", 2, "(top level)", "single YAML document",
     "remove the extra '---'", true},
    // yaml-cpp reports where it gave up: the ':' after the unclosed '['.
    {"syntax", "name: j\ncommand: [x\nnodes: 1\n", 3, "(yaml syntax)", "(got invalid YAML",
     "check indentation", true},
    // yaml-cpp 0.7 loops forever on a stray ',' in block context unless caught.
    {"stray_comma", "# c\n,ame: gpt\nnodes: 2\n", 2, "(yaml syntax)", "unexpected character ','",
     "fix the YAML syntax", true},
    {"stray_comma_after_list", "- a\n,\n", 2, "(yaml syntax)", "unexpected character ','",
     "fix the YAML syntax", true},
    {"syntax_indent", "name: j\n  nodes: 1\n bad\n", 2, "(yaml syntax)", "(got invalid YAML",
     "fix the YAML syntax", true},
};

INSTANTIATE_TEST_SUITE_P(All, BadSpecTest, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.label); });

// Found by fuzz/fuzz_job_spec: yaml-cpp's message quoted a control byte of the input
// (here the NUL), which split the error over two lines.
TEST(JobSpecTest, SyntaxErrorsQuoteControlBytesOnOneLine) {
  using namespace std::string_literals;
  const std::string text = "name: hello\ncom\0\nnd: [\"x\"]\n"s;
  auto r = ParseJobSpec(text, "j.yaml", "/b");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::StartsWith("j.yaml:"));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("(yaml syntax)"));
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
}

// Found by fuzz/fuzz_job_spec: a key holding a newline was part of the field path
// verbatim, which split the error over two lines.
TEST(JobSpecTest, KeysInFieldPathsAreQuotedOnOneLine) {
  auto r = ParseJobSpec("name: j\ncommand: [x]\nenv: {\"A\\nB\": \"1\"}\n", "j.yaml", "/b");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::StartsWith("j.yaml:3: env.A\\x0aB: "));
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
}

// OneLine escapes the C0 controls and DEL wherever they stand and keeps every other byte
// (UTF-8 included) as it is.
TEST(JobSpecTest, OneLineEscapesControlBytesAndKeepsTheRest) {
  using namespace std::string_literals;
  using spec_internal::OneLine;
  EXPECT_EQ(OneLine(""), "");
  EXPECT_EQ(OneLine("plain text"), "plain text");
  EXPECT_EQ(OneLine("\na\tb\x7f"), "\\x0aa\\x09b\\x7f");
  EXPECT_EQ(OneLine("\0\0"s), "\\x00\\x00");
  EXPECT_EQ(OneLine("caf\xc3\xa9 ~\x1f"), "caf\xc3\xa9 ~\\x1f");
  const std::string long_run(5000, 'k');
  EXPECT_EQ(OneLine(long_run + "\r" + long_run), long_run + "\\x0d" + long_run);
}

// The edit distance counts single-byte insertions, deletions and substitutions,
// ignoring case, in either order of its arguments.
TEST(JobSpecTest, EditDistanceCountsSingleByteEditsIgnoringCase) {
  using spec_internal::EditDistance;
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("sitting", "kitten"), 3);
  EXPECT_EQ(EditDistance("Checkpoint", "cHECKPOINT"), 0);
  EXPECT_EQ(EditDistance("flaw", "lawn"), 2);
  EXPECT_EQ(EditDistance("nodes", "ndoes"), 2);  // a transposition is two edits
  EXPECT_EQ(EditDistance("procsPerNode", "procs_per_node"), 2);
}

// A suggestion is the closest field within a small edit distance (at most 3, and at most
// a third of the field's length), whatever the lengths: a key of 16 KiB gets none.
TEST(JobSpecTest, SuggestionsAreCloseFieldsWhateverTheKeysLength) {
  const std::vector<std::string> names = {"checkpoint", "nodes", "procsPerNode"};
  EXPECT_EQ(spec_internal::SuggestKey("PROCS_per-node", names), "procsPerNode");
  EXPECT_EQ(spec_internal::SuggestKey("checkpointxyz", names), "checkpoint");  // 3 added
  EXPECT_EQ(spec_internal::SuggestKey("chckpoint", names), "checkpoint");      // 1 dropped
  EXPECT_EQ(spec_internal::SuggestKey("checkpointwxyz", names), "");           // 4 added
  EXPECT_EQ(spec_internal::SuggestKey("chkpnt", names), "");                   // 4 dropped
  EXPECT_EQ(spec_internal::SuggestKey("node", names), "nodes");
  EXPECT_EQ(spec_internal::SuggestKey("nodesab", names), "");  // 2 > 5 / 3
  EXPECT_EQ(spec_internal::SuggestKey(std::string(16384, 'n'), names), "");
  EXPECT_EQ(spec_internal::SuggestKey("", names), "");
  EXPECT_EQ(spec_internal::SuggestKey("-CheckPoint_", names), "checkpoint");  // normalised
  EXPECT_EQ(spec_internal::SuggestKey("N-o_D-e-S", names), "nodes");          // normalised
}

TEST(JobSpecTest, AllErrorsAreCollected) {
  auto r = ParseJobSpec(std::string(kPrefix) + "nodes: 0\nprocsPerNode: x\ncheckpoint: {keep: 0}\n",
                        "j.yaml", "/b");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(Lines(r.status().message()).size(), 3u) << r.status().message();
}

TEST(JobSpecTest, MonitoringAndTheMetricChaosKinds) {
  auto ok = ParseJobSpec(std::string(kPrefix) +
                             "monitoring: {peakFlops: 989e12, dtype: fp8, pricePerGpuHour: 2.5, "
                             "lossSpikeRollback: true, totalSteps: 100}\n"
                             "chaos: [{kind: slow_rank, atStep: 3, rank: 0},\n"
                             "        {kind: slow_data, atStep: 3, rank: 0, delaySeconds: 0.5},\n"
                             "        {kind: loss_spike, atStep: 9, rank: 0, factor: 50},\n"
                             "        {kind: slow_link, atStep: 4, rank: 0}]\n",
                         "j.yaml", "/b");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->monitoring.peak_flops, 989e12);
  EXPECT_EQ(ok->monitoring.dtype, "fp8");
  EXPECT_TRUE(ok->monitoring.loss_spike_rollback);
  EXPECT_EQ(ok->monitoring.total_steps, 100);
  EXPECT_EQ(ok->chaos[0].factor, 3);  // the defaults
  EXPECT_EQ(ok->chaos[1].delay_seconds, 0.5);
  EXPECT_EQ(ok->chaos[2].factor, 50);
  EXPECT_EQ(ok->chaos[3].kind, ChaosKind::kSlowLink);
  EXPECT_EQ(ok->chaos[3].factor, 3);  // slowed like slow_rank by default
  auto bad = ParseJobSpec(std::string(kPrefix) +
                              "monitoring: {dtype: bf8, ettrTarget: 2}\n"
                              "chaos: [{kind: kill_rank, atStep: 3, rank: 0, factor: 2}]\n",
                          "j.yaml", "/b");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("monitoring.dtype: unknown dtype (got bf8); set monitoring.dtype to the "
                        "training dtype: bf16, fp16, fp8, tf32 or fp32"));
  EXPECT_THAT(bad.status().message(), HasSubstr("monitoring.ettrTarget: must be <= 1 (got 2)"));
  EXPECT_THAT(bad.status().message(),
              HasSubstr("chaos[0].factor: does not apply to kind kill_rank (got 2)"));
}

TEST(JobSpecTest, ChaosKindNames) {
  EXPECT_STREQ(ChaosKindName(ChaosKind::kKillRank), "kill_rank");
  EXPECT_STREQ(ChaosKindName(ChaosKind::kHangRank), "hang_rank");
  EXPECT_STREQ(ChaosKindName(ChaosKind::kNanLoss), "nan_loss");
  EXPECT_STREQ(ChaosKindName(ChaosKind::kKillAgent), "kill_agent");
  EXPECT_STREQ(ChaosKindName(ChaosKind::kSlowLink), "slow_link");
}

// Caps the address space while a fuzz test runs so a parser memory blow-up fails
// the test (bad_alloc -> error Status) instead of taking down the machine.
// Skipped under ASan, which reserves terabytes of shadow memory.
class MemoryCap {
 public:
  MemoryCap() {
#ifndef __SANITIZE_ADDRESS__
    if (getrlimit(RLIMIT_AS, &saved_) == 0) {
      rlimit cap = saved_;
      const rlim_t limit = rlim_t{4} << 30;
      if (cap.rlim_cur == RLIM_INFINITY || cap.rlim_cur > limit) cap.rlim_cur = limit;
      active_ = setrlimit(RLIMIT_AS, &cap) == 0;
    }
#endif
  }
  ~MemoryCap() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
  }

 private:
  rlimit saved_{};
  bool active_ = false;
};

// A refused input: InvalidArgument with a "fuzz.yaml:<line>:" message (never a wrong OK).
void ExpectRefused(const std::string& text, const std::string& what) {
  auto r = ParseJobSpec(text, "fuzz.yaml", "/b");
  ASSERT_FALSE(r.ok()) << what << ": parsed as a valid spec";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << what;
  EXPECT_EQ(r.status().message().rfind("fuzz.yaml:", 0), 0u)
      << what << ": " << r.status().message();
}

TEST(JobSpecFuzzTest, PathologicalInputsDoNotCrash) {
  MemoryCap cap;
  ExpectRefused(std::string(100000, '['), "deep flow list");
  ExpectRefused(std::string(50000, '{'), "deep flow map");
  std::string deep_block;
  for (int i = 0; i < 3000; ++i) deep_block += std::string(i, ' ') + "a:\n";
  ExpectRefused(deep_block, "deep block map");
  std::string nested = "name: j\ncommand: [x]\nchaos: ";
  for (int i = 0; i < 5000; ++i) nested += "[";
  ExpectRefused(nested, "deep chaos");
  ExpectRefused("name: j\ncommand: [x]\nnodes: 1e400\n", "1e400 int");
  ExpectRefused(
      "name: j\ncommand: [x]\nchaos: [{kind: kill_rank, atStep: "
      "99999999999999999999999999, rank: 0}]\n",
      "step overflow");
  ExpectRefused("&a [*a]", "self alias");
  ExpectRefused("a: &x {b: *x}\n", "recursive alias");
  ExpectRefused("name: j\ncommand: [x]\nenv: {? [a]: b}\n", "complex key");
  ExpectRefused("? [a]\n: b\n", "complex top key");
  ExpectRefused(std::string("name: j\0\xff\xfe", 11), "binary");
  ExpectRefused("!!binary AAAA", "tag");
  ExpectRefused("name: !<tag:yaml.org,2002:int> j\ncommand: !!map {}\n", "tags");
  ExpectRefused("%YAML 1.2\n%YAML 1.2\n---\na: 1\n", "directives");
  ExpectRefused(",", "lone comma");
  ExpectRefused("[a],", "comma after flow list");
  ExpectRefused("name: j\ncommand: [x]\n...\n,\n", "comma after document end");
  ExpectRefused("[[:", "issue 793");
  ExpectRefused("{:", "issue 499");
  ExpectRefused(std::string(2 << 20, 'a'), "oversized");
  // A byte-order mark in front of a valid spec is valid YAML: parsed, name and all.
  auto bom = ParseJobSpec("\xef\xbb\xbfname: j\ncommand: [x]\n", "fuzz.yaml", "/b");
  ASSERT_TRUE(bom.ok()) << bom.status().ToString();
  EXPECT_EQ(bom->name, "j");
}

TEST(JobSpecFuzzTest, RandomBytesAndMutationsDoNotCrash) {
  MemoryCap cap;
  const std::string valid = ReadFile(std::string(kTestdata) + "/full.yaml");
  ASSERT_FALSE(valid.empty());
  const std::string alphabet = ":-[]{}#&*!|>'\"%@`,? \n\t0123456789.eE+abcxyz\\";
  std::mt19937_64 rng(20240521);
  int oks = 0, errs = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = valid;
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      const size_t pos = rng() % (t.size() + 1);
      switch (rng() % 6) {
        case 0:  // replace a byte
          if (!t.empty()) t[pos % t.size()] = alphabet[rng() % alphabet.size()];
          break;
        case 1:  // insert a byte
          t.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 2:  // delete a span
          t.erase(pos, rng() % 8);
          break;
        case 3:  // random raw byte
          if (!t.empty()) t[pos % t.size()] = static_cast<char>(rng() & 0xff);
          break;
        case 4:  // truncate
          t.resize(pos);
          break;
        case 5: {  // duplicate a span (duplicate keys, repeated structure)
          const size_t len = rng() % 40;
          t.insert(pos, t.substr(pos, len));
          break;
        }
      }
    }
    auto r = ParseJobSpec(t, "fuzz.yaml", "/b");
    if (r.ok()) {
      ++oks;
      EXPECT_FALSE(r->name.empty());
      EXPECT_GE(r->world_size(), 1);
    } else {
      ++errs;
      ASSERT_FALSE(r.status().message().empty()) << t;
    }
  }
  EXPECT_GT(oks, 0);
  EXPECT_GT(errs, 0);

  for (int iter = 0; iter < 500; ++iter) {
    std::string t(rng() % 200, '\0');
    for (char& c : t) c = static_cast<char>(rng() & 0xff);
    auto r = ParseJobSpec(t, "rand.yaml", "");
    if (!r.ok()) {
      ASSERT_FALSE(r.status().message().empty());
    }
  }
}

// The CRD's enum of chaos kinds is every kind the parser knows, in the same order.
TEST(JobSpecTest, ChaosKindNamesAreTheCrdEnum) {
  using spec_internal::kAllKinds;
  using spec_internal::kChaosKindNames;
  for (size_t i = 0; i < std::size(kAllKinds); ++i) {
    EXPECT_STREQ(kChaosKindNames[i], ChaosKindName(kAllKinds[i]));
  }
}

}  // namespace
}  // namespace bulwark
