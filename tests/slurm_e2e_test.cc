// End to end on a real Slurm 22.05 cluster (src/backend/testing/slurm_cluster.h): the
// real `bulwark` binary in an allocation (salloc, sbatch) places its agents with srun
// (docs/slurm.md). The bad inputs of `bulwark run` and `bulwark slurm script`, a small
// job through a node loss, the printed sbatch script accepted by sbatch, and the demo
// (examples/pytorch-ddp, 2 nodes x 2 ranks and a standby) through a killed rank, a
// hung rank, a NaN and a killed slurmd. Label slurm.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backend/testing/slurm_cluster.h"
#include "e2e_util.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using e2e::E2EBase;
using e2e::kFastPolicy;
using e2e::Now;
using e2e::RunProcess;
using testing::SlurmCluster;
using testing::SlurmClusterOptions;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SlurmE2E : public E2EBase {
 protected:
  void StartCluster(SlurmClusterOptions o = {}) {
    auto c = SlurmCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (cluster_) {
      if (HasFailure())
        std::printf("--- slurmctld log ---\n%s\n", cluster_->LogTail("slurmctld").c_str());
      cluster_->Stop();  // also the processes of a node whose slurmd was killed
    }
    E2EBase::TearDown();
  }

  std::string Bulwark() const { return build_ + "/bin/bulwark"; }
  std::map<std::string, std::string> SlurmEnv() const {
    return {{"SLURM_CONF", cluster_->conf_path()}, {"XDG_STATE_HOME", dir_ + "/state"}};
  }

  // A new allocation that survives a node failure, without a shell: its id.
  std::string Allocate(int nodes) {
    auto r = cluster_->Run({"salloc", "--no-kill", "--no-shell", "-N", std::to_string(nodes)});
    EXPECT_TRUE(r.ok() && r->exit.ok()) << (r.ok() ? r->output : r.status().ToString());
    if (!r.ok()) return "";
    std::smatch m;
    if (!std::regex_search(r->output, m, std::regex("Granted job allocation ([0-9]+)"))) {
      ADD_FAILURE() << r->output;
      return "";
    }
    return m[1];
  }

  // What an allocation's shell has: its id and nodes.
  std::map<std::string, std::string> InAllocation(const std::string& job, int nodes) {
    auto env = SlurmEnv();
    env["SLURM_JOB_ID"] = job;
    env["SLURM_JOB_NODELIST"] = "node[1-" + std::to_string(nodes) + "]";
    env["SLURM_JOB_NUM_NODES"] = std::to_string(nodes);
    return env;
  }

  std::vector<std::string> RunArgs(const std::string& spec) {
    return {Bulwark(),   "run",         spec,      "--report",          dir_ + "/report.json",
            "--run-dir", dir_ + "/run", "--store", dir_ + "/bulwark.db"};
  }

  // `bulwark run SPEC` (RunArgs) inside allocation `job` of `nodes` nodes, as a child.
  Child SpawnRun(const std::string& spec, const std::string& job, int nodes) {
    SpawnOptions so;
    so.argv = RunArgs(spec);
    so.env = CurrentEnv();
    for (const auto& [k, v] : InAllocation(job, nodes)) so.env[k] = v;
    auto child = Spawn(so);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    return child.ok() ? std::move(*child) : Child{};
  }

  // A new allocation of `nodes` nodes (*job) with `bulwark run SPEC` started in it.
  Child RunInNewAllocation(const std::string& spec, int nodes, std::string* job) {
    *job = Allocate(nodes);
    if (job->empty()) return Child{};
    return SpawnRun(spec, *job, nodes);
  }

  // Reads `c`'s output into *out to its end and reaps it; a failure unless it exited 0.
  static void FinishRun(const Child& c, std::string* out, bool* eof) {
    ReadUntil(c, out, eof, "\n=== never printed ===", 180);
    auto exit = WaitExit(c.pid, 30);
    ASSERT_TRUE(exit.has_value()) << *out;
    EXPECT_TRUE(exit->ok()) << exit->Describe() << "\n" << *out;
  }

  // Appends what `c` writes to *out until *out holds `what`, the output ends (*eof), or
  // timeout_s passes; whether it holds `what`.
  static bool ReadUntil(const Child& c, std::string* out, bool* eof, const std::string& what,
                        double timeout_s) {
    const double deadline = Now() + timeout_s;
    while (out->find(what) == std::string::npos && !*eof && Now() < deadline) {
      PollReadable({c.output.get()}, 0.2);
      *out += ReadAvailable(c.output.get(), eof);
    }
    return out->find(what) != std::string::npos;
  }

  Json Report() {
    const std::string text = ReadFile(dir_ + "/report.json");
    return text.empty() ? Json() : Json::parse(text, nullptr, false);
  }

  // The job's JobState ("" when scontrol cannot say).
  std::string State(const std::string& job) const {
    auto s = cluster_->JobState(job);
    return s.ok() ? *s : "";
  }

  // Polls the job's state until it is one of the final ones.
  std::string WaitJobDone(const std::string& job, double timeout_s) {
    std::string state;
    const double deadline = Now() + timeout_s;
    while (Now() < deadline) {
      auto s = cluster_->JobState(job);
      state = s.ok() ? *s : s.status().ToString();
      if (state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" ||
          state == "NODE_FAIL" || state == "TIMEOUT" || state == "OUT_OF_MEMORY") {
        return state;
      }
      PollReadable({}, 0.2);
    }
    return "still " + state;
  }

  std::unique_ptr<SlurmCluster> cluster_;
};

TEST_F(SlurmE2E, RunRefusesBadInputNamingTheCauseAndTheFix) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string spec = WriteSpec("bad", 2, 1, 20, kFastPolicy);  // 2 nodes + 1 spare

  fs::create_directories(dir_ + "/empty-bin");
  // Not in an allocation.
  auto [rc, out] = RunProcess({Bulwark(), "run", spec, "--backend", "slurm"}, SlurmEnv(), 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--backend slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset); "
                     "run it in one: `salloc --no-kill --nodes=3 bulwark run SPEC`"),
            std::string::npos)
      << out;

  // More nodes than the allocation has.
  const std::string two = Allocate(2);
  std::tie(rc, out) = RunProcess(RunArgs(spec), InAllocation(two, 2), 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("job 'bad' needs 3 Slurm nodes (nodes: 2 + faultPolicy.spareNodes: 1) but "
                     "Slurm job " +
                     two + " has 2 (node[1-2]); allocate 3"),
            std::string::npos)
      << out;

  // Slurm not installed (srun not on PATH).
  const std::string three = Allocate(3);
  auto env = InAllocation(three, 3);
  env["PATH"] = dir_ + "/empty-bin";
  std::tie(rc, out) = RunProcess(RunArgs(spec), env, 60);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("Slurm is not installed here: srun is not on PATH; install Slurm's client "
                     "commands"),
            std::string::npos)
      << out;

  // --allocate: an unknown partition, a partition too small, Slurm missing; and the
  // allocation flags without --allocate.
  std::tie(rc, out) =
      RunProcess({Bulwark(), "run", spec, "--allocate", "--partition", "gpu"}, SlurmEnv(), 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--partition gpu: no such partition on this cluster (it has: debug); pick "
                     "one of them"),
            std::string::npos)
      << out;
  const std::string big = WriteSpec("big", 4, 1, 20, kFastPolicy);  // 5 nodes > 3
  std::tie(rc, out) = RunProcess({Bulwark(), "run", big, "--allocate"}, SlurmEnv(), 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("partition debug has 3 nodes but job 'big' needs 5 (nodes: 4 + "
                     "faultPolicy.spareNodes: 1)"),
            std::string::npos)
      << out;
  WriteSpec("bad", 2, 1, 20, kFastPolicy);
  std::tie(rc, out) = RunProcess({Bulwark(), "run", spec, "--time", "10:00"}, SlurmEnv(), 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("describe the allocation --allocate requests: add --allocate"),
            std::string::npos)
      << out;
  auto no_slurm = SlurmEnv();
  no_slurm["PATH"] = dir_ + "/empty-bin";
  std::tie(rc, out) = RunProcess({Bulwark(), "run", spec, "--allocate"}, no_slurm, 60);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("Slurm is not installed here: salloc is not on PATH"), std::string::npos)
      << out;

  // A stale job id.
  std::tie(rc, out) = RunProcess(RunArgs(spec), InAllocation("4242", 3), 60);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("Slurm job 4242 does not exist (it ended, or SLURM_JOB_ID is stale)"),
            std::string::npos)
      << out;
  ExpectNoLeftovers();
}

TEST_F(SlurmE2E, SrunRefusingAStepIsShownInItsOwnWords) {
  SlurmClusterOptions o;
  o.extra_config = "MaxStepCount=1\n";  // the second step of any job is refused
  ASSERT_NO_FATAL_FAILURE(StartCluster(o));
  const std::string spec =
      WriteSpec("refused", 2, 1, 20,
                "faultPolicy: {restartBudget: 1, heartbeat: {intervalSeconds: 0.5, misses: 3}}\n");
  const std::string job = Allocate(2);
  auto [rc, out] = RunProcess(RunArgs(spec), InAllocation(job, 2), 120);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("srun could not start node-1 on Slurm node node2 of job " + job +
                     " (exit 1): srun: error: Unable to create step for job " + job +
                     ": Step limit reached for this job"),
            std::string::npos)
      << out;
  ExpectNoLeftovers();
}

TEST_F(SlurmE2E, SallocRunsTheJobOneAgentPerNodeThroughANodeLoss) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string spec =
      WriteSpec("alloc", 2, 2, 60,
                std::string(kFastPolicy) + "chaos: [{kind: kill_agent, atStep: 30, node: 1}]\n");
  std::vector<std::string> argv = {cluster_->bin_dir() + "/salloc", "--no-kill", "-N3"};
  for (const std::string& a : RunArgs(spec)) argv.push_back(a);
  auto [rc, out] = RunProcess(argv, SlurmEnv(), 180);
  ASSERT_EQ(rc, 0) << out;
  for (const char* placed :
       {"[bulwark] slurm: node-0 on node1 (step ", "[bulwark] slurm: node-1 on node2 (step ",
        "[bulwark] slurm: node-2 on node3 (step "}) {
    EXPECT_NE(out.find(placed), std::string::npos) << placed << "\n" << out;
  }
  EXPECT_NE(out.find("[bulwark] Slurm job "), std::string::npos) << out;
  const Json r = Report();
  EXPECT_EQ(r["phase"], "Succeeded") << out;
  EXPECT_EQ(r["last_step"], 60);
  const Json* lost = FirstIncident(r, "node_lost");
  ASSERT_NE(lost, nullptr) << r.dump(2);
  EXPECT_EQ((*lost)["action"], "replace_node") << lost->dump(2);
  EXPECT_NE(out.find("NodeLost: node-1 (slot 1)"), std::string::npos) << out;
  // The job's Comment in Slurm says how it ended (squeue -o %k shows it).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("Granted job allocation ([0-9]+)"))) << out;
  auto comment = cluster_->Run(
      {"squeue", "--noheader", "--states=all", "--jobs=" + std::string(m[1]), "--format=%k"});
  ASSERT_TRUE(comment.ok()) << comment.status().ToString();
  EXPECT_EQ(comment->output.rfind("bulwark: Succeeded  step 60  ETTR 0.", 0), 0u)
      << comment->output;
  ExpectNoLeftovers();
}

// `bulwark replay --nodes` inside an allocation: a NaN recorded by a job on this machine
// is re-run on the named Slurm host, which first shows it can read the checkpoint; and
// what it refuses: another number of hosts, a host outside the allocation, --nodes
// outside one, a host that cannot read a valid checkpoint.
TEST_F(SlurmE2E, ReplayOnNamedHost) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  // 80 steps: the NaN is injected when the controller sees step 25, through the agent,
  // so on a loaded machine it lands some steps later; it must land before the end.
  const std::string spec =
      WriteSpec("rps", 1, 2, 80,
                std::string(kFastPolicy) + "chaos: [{kind: nan_loss, atStep: 25, rank: 0}]\n");
  auto [rc, out] = RunProcess(RunArgs(spec), SlurmEnv(), 120);  // the local backend
  ASSERT_EQ(rc, 0) << out;
  // The NaN's incident and its number as `bulwark describe` lists them (a load-made
  // incident may come first).
  const Json report = Report();
  const Json incidents = report.is_object() ? report.value("incidents", Json::array()) : Json();
  ASSERT_TRUE(incidents.is_array()) << report.dump(2);
  int number = 0;
  long ck = -1;
  for (size_t i = 0; i < incidents.size() && number == 0; ++i) {
    const Json& inc = incidents[i];
    if (!inc.is_object() || inc.value("kind", "") != "nan") continue;
    ASSERT_TRUE(inc.contains("replay") && inc["replay"].is_object()) << inc.dump(2);
    number = static_cast<int>(i) + 1;
    ck = inc["replay"].value("checkpoint_step", -1L);
  }
  ASSERT_GT(number, 0) << "no NaN incident in the report:\n" << report.dump(2);
  ASSERT_GE(ck, 10) << report.dump(2);
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/ckpt/step-%012ld", ck);
  const std::string job = Allocate(3);
  ASSERT_FALSE(job.empty());
  const auto env = InAllocation(job, 3);
  const std::vector<std::string> replay = {
      Bulwark(), "replay", "rps", std::to_string(number), "--store", dir_ + "/bulwark.db"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = replay;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  auto [ok_rc, json] = RunProcess(with({"--nodes", "node2", "-o", "json"}), env, 120);
  ASSERT_EQ(ok_rc, 0) << json;
  // The outcome is the last thing printed, after the agents' lines (srun's output).
  const size_t at = json.rfind("\n{\n");
  const Json o = Json::parse(json.substr(at == std::string::npos ? 0 : at + 1), nullptr, false);
  ASSERT_TRUE(o.is_object()) << json;
  EXPECT_EQ(o["where"], "Slurm job " + job + " on node2") << json;
  EXPECT_GT(o["compared"].get<int>(), 0) << json;
  EXPECT_EQ(o["equal"], o["compared"]) << json;
  EXPECT_EQ(o["passed"], true) << json;
  EXPECT_EQ(o["cause"], "transient") << json;  // chaos is not replayed: the NaN stays away

  auto [n_rc, n_out] = RunProcess(with({"--nodes", "node1,node2"}), env, 30);
  EXPECT_EQ(n_rc, 2) << n_out;
  EXPECT_NE(n_out.find("ran on 1 node (node-0); name 1 host, one per node, not 2"),
            std::string::npos)
      << n_out;
  auto [h_rc, h_out] = RunProcess(with({"--nodes", "node9"}), env, 30);
  EXPECT_NE(h_rc, 0) << h_out;
  EXPECT_NE(h_out.find("host node9 is not in Slurm job " + job), std::string::npos) << h_out;
  auto [a_rc, a_out] = RunProcess(with({"--nodes", "node2"}), SlurmEnv(), 30);
  EXPECT_EQ(a_rc, 2) << a_out;
  EXPECT_NE(a_out.find("--nodes names hosts of a Slurm allocation"), std::string::npos) << a_out;

  // A checkpoint the host cannot read whole (a shard's bytes changed: what a host with a
  // stale or partial copy sees): refused before anything runs, naming the host.
  std::string shard;
  for (const auto& e : fs::recursive_directory_iterator(dir_ + step_dir)) {
    if (e.is_regular_file() && (shard.empty() || e.file_size() > fs::file_size(shard))) {
      shard = e.path().string();
    }
  }
  ASSERT_FALSE(shard.empty());
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.put('\x5a').put('\xa5');
  }
  auto [c_rc, c_out] = RunProcess(with({"--nodes", "node3"}), env, 120);
  EXPECT_NE(c_rc, 0) << c_out;
  EXPECT_NE(
      c_out.find("host node3 cannot read the replay's checkpoint, step " + std::to_string(ck)),
      std::string::npos)
      << c_out;
  auto cancel = cluster_->Run({"scancel", job});
  EXPECT_TRUE(cancel.ok() && cancel->exit.ok()) << (cancel.ok() ? cancel->output : "");
  ExpectNoLeftovers();
}

// slurm.growNodes: a two-node allocation for a job of two nodes and a standby. The
// standby's host is asked of Slurm (a one-node allocation beside the job's); once the
// standby is ready, the machine of slot 1 crashes (its slurmd, steps and processes
// killed), the standby on the grown host takes the slot, the job finishes, and the grown
// allocation is given back.
TEST_F(SlurmE2E, GrowsTheAllocationForItsStandby) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  // 600 steps of 30 ms: the standby is ready within a few seconds of the start.
  const std::string spec =
      WriteSpec("grow", 2, 2, 600, std::string(kFastPolicy) + "slurm: {growNodes: 1}\n", "",
                ", TINY_STEP_TIME: \"0.03\"");
  std::string job;
  Child child = RunInNewAllocation(spec, 2, &job);
  ASSERT_GT(child.pid, 0);
  std::string out;
  bool eof = false;
  auto read_until = [&](const std::string& what, double timeout_s) {
    return ReadUntil(child, &out, &eof, what, timeout_s);
  };
  ASSERT_TRUE(read_until("NodeReady: node-2 is a warm standby", 120)) << out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex("Slurm granted one more node \\(job ([0-9]+)\\)")))
      << out;
  const std::string grown = m[1];
  EXPECT_NE(out.find("[bulwark] slurm: grown allocation " + grown + " runs on node3"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[bulwark] slurm: node-2 on node3 (step " + grown + "."), std::string::npos)
      << out;
  EXPECT_EQ(State(grown), "RUNNING");
  ASSERT_NE(out.find("[bulwark] slurm: node-1 on node2 "), std::string::npos) << out;
  ASSERT_TRUE(cluster_->CrashNode("node2").ok());
  EXPECT_TRUE(read_until("StandbyPromoted: node-2 takes slot 1", 120)) << out;
  ASSERT_NO_FATAL_FAILURE(FinishRun(child, &out, &eof));
  const Json r = Report();
  EXPECT_EQ(r["phase"], "Succeeded") << out;
  EXPECT_EQ(r["last_step"], 600);
  const Json* lost = FirstIncident(r, "node_lost");
  ASSERT_NE(lost, nullptr) << r.dump(2);
  EXPECT_EQ((*lost)["action"], "replace_node") << lost->dump(2);
  // Given back: Slurm no longer runs it; the job's own allocation is the user's to end.
  EXPECT_NE(State(grown), "RUNNING");
  EXPECT_EQ(State(job), "RUNNING");
  auto cancel = cluster_->Run({"scancel", job});
  EXPECT_TRUE(cancel.ok() && cancel->exit.ok());
  ExpectNoLeftovers();
}

// elastic: a three-node job without standbys in a three-node allocation; the machine
// of node-2 crashes and no host is left (nor may the job grow), so after waitSeconds
// the job continues on two nodes and finishes there, without requeuing anything.
TEST_F(SlurmE2E, ElasticJobShrinksWhenItsNodeIsLost) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string spec =
      WriteSpec("shrink", 3, 1, 600,
                "faultPolicy: {restartBudget: 4, backoff: {baseSeconds: 0.1, capSeconds: 1}, "
                "hangTimeout: {floorSeconds: 3, multiplier: 5, startupSeconds: 60}, "
                "heartbeat: {intervalSeconds: 0.5, misses: 3}, stopGraceSeconds: 1}\n"
                "elastic: {minNodes: 2, waitSeconds: 1}\n",
                "", ", TINY_STEP_TIME: \"0.03\"");
  std::string job;
  Child child = RunInNewAllocation(spec, 3, &job);
  ASSERT_GT(child.pid, 0);
  std::string out;
  bool eof = false;
  ASSERT_TRUE(ReadUntil(child, &out, &eof, "CheckpointCommitted", 120)) << out;
  ASSERT_NE(out.find("[bulwark] slurm: node-2 on node3 "), std::string::npos) << out;
  ASSERT_TRUE(cluster_->CrashNode("node3").ok());
  EXPECT_TRUE(ReadUntil(child, &out, &eof, "Resized: continuing on 2 of 3", 120)) << out;
  ASSERT_NO_FATAL_FAILURE(FinishRun(child, &out, &eof));
  const Json r = Report();
  EXPECT_EQ(r["phase"], "Succeeded") << out;
  EXPECT_EQ(r["last_step"], 600);
  ASSERT_TRUE(r.contains("resizes")) << r.dump(2);
  EXPECT_EQ(r["resizes"][0]["from_nodes"], 3) << r.dump(2);
  EXPECT_EQ(r["resizes"][0]["to_nodes"], 2) << r.dump(2);
  EXPECT_EQ(State(job), "RUNNING") << "the allocation was not requeued or ended";
  auto cancel = cluster_->Run({"scancel", job});
  EXPECT_TRUE(cancel.ok() && cancel->exit.ok());
  ExpectNoLeftovers();
}

// `bulwark run` SIGKILLed (no chance to tear down): its sruns die with it
// (PR_SET_PDEATHSIG), and Slurm ends their steps, agents and ranks with them; the
// allocation it grew for its standby ends too (its held command watches the run).
TEST_F(SlurmE2E, AKilledRunLeavesNoStepRunning) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string spec =
      WriteSpec("killed", 2, 2, 100000, std::string(kFastPolicy) + "slurm: {growNodes: 1}\n");
  const std::string job = Allocate(2);
  Child child = SpawnRun(spec, job, 2);
  ASSERT_GT(child.pid, 0);
  std::string out;
  bool eof = false;
  ASSERT_TRUE(ReadUntil(child, &out, &eof, "CheckpointCommitted", 120)) << out;
  auto steps = [&] {
    auto r = cluster_->Run({"squeue", "--steps", "--noheader", "--jobs=" + job, "--format=%i %j"});
    return r.ok() ? r->output : r.status().ToString();
  };
  EXPECT_NE(steps().find("bulwark:killed:node-1"), std::string::npos) << steps();
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex("Slurm granted one more node \\(job ([0-9]+)\\)")))
      << out;
  const std::string grown = m[1];
  auto running = [&](const std::string& j) { return State(j) == "RUNNING"; };
  ASSERT_TRUE(running(grown));
  ::kill(child.pid, SIGKILL);
  ASSERT_TRUE(WaitExit(child.pid, 10).has_value());
  const double t0 = Now();
  while ((!steps().empty() || running(grown)) && Now() < t0 + 30) PollReadable({}, 0.2);
  EXPECT_EQ(steps(), "") << "steps outlived the killed bulwark run";
  EXPECT_FALSE(running(grown)) << "the grown allocation outlived the killed bulwark run";
  std::printf("bulwark run SIGKILLed: its steps and grown allocation gone after %.1f s\n",
              Now() - t0);
  ExpectNoLeftovers();
}

TEST_F(SlurmE2E, RunAllocateRequestsTheAllocationWithSalloc) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string spec = WriteSpec("allocated", 2, 2, 40, kFastPolicy);
  std::vector<std::string> argv = RunArgs(spec);
  argv.insert(argv.end(), {"--allocate", "--time", "10:00"});
  auto [rc, out] = RunProcess(argv, SlurmEnv(), 180);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[bulwark] requesting the allocation: " + cluster_->bin_dir() +
                     "/salloc --job-name=allocated --nodes=3 --ntasks-per-node=1 --exclusive "
                     "--no-kill --time=10:00 -- " +
                     Bulwark() + " run " + spec),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("salloc: Granted job allocation "), std::string::npos) << out;
  EXPECT_NE(out.find("[bulwark] slurm: node-2 on node3 (step "), std::string::npos) << out;
  EXPECT_EQ(Report()["phase"], "Succeeded") << out;
  ExpectNoLeftovers();
}

TEST_F(SlurmE2E, SlurmScriptIsCheckedAndRunsUnderSbatch) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const std::string spec = WriteSpec("scripted", 2, 2, 40, kFastPolicy);  // 3 nodes in all
  auto script = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {Bulwark(), "slurm", "script", spec};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunProcess(argv, SlurmEnv(), 60);
  };
  auto [rc, out] = script({"--partition", "gpu"});
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--partition gpu: no such partition on this cluster (it has: debug)"),
            std::string::npos)
      << out;
  std::tie(rc, out) = script({"--time", "two hours"});
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--time \"two hours\": not a Slurm time limit"), std::string::npos) << out;
  const std::string big = WriteSpec("big", 3, 1, 40, kFastPolicy);  // 4 nodes > 3
  std::tie(rc, out) = RunProcess({Bulwark(), "slurm", "script", big}, SlurmEnv(), 60);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("partition debug has 3 nodes but job 'big' needs 4 (nodes: 3 + "
                     "faultPolicy.spareNodes: 1)"),
            std::string::npos)
      << out;

  // The spec's slurm section: checked the same way, named as the spec's.
  WriteSpec("scripted", 2, 2, 40, std::string(kFastPolicy) + "slurm: {partition: gpu}\n");
  std::tie(rc, out) = script({});
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("the spec's slurm.partition gpu: no such partition on this cluster"),
            std::string::npos)
      << out;

  // The script, as printed, submitted with sbatch: the spec's values, a flag winning.
  WriteSpec("scripted", 2, 2, 40,
            std::string(kFastPolicy) + "slurm: {partition: debug, time: \"5:00\"}\n");
  std::tie(rc, out) = script({"--time", "10:00"});
  ASSERT_EQ(rc, 0) << out;
  for (const char* line : {"#!/bin/bash\n", "\n#SBATCH --nodes=3\n", "\n#SBATCH --no-kill\n",
                           "\n#SBATCH --job-name=scripted\n", "\n#SBATCH --partition=debug\n",
                           "\n#SBATCH --time=10:00\n", " run '"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
  std::ofstream(dir_ + "/job.sbatch") << out;
  auto sub = cluster_->Run({"sbatch", "--parsable", dir_ + "/job.sbatch"}, 30, dir_);
  ASSERT_TRUE(sub.ok() && sub->exit.ok()) << (sub.ok() ? sub->output : sub.status().ToString());
  const std::string job = std::to_string(std::stol(sub->output));
  const std::string state = WaitJobDone(job, 180);
  const std::string log = ReadFile(dir_ + "/bulwark-scripted-" + job + ".out");
  ASSERT_EQ(state, "COMPLETED") << log;
  EXPECT_NE(log.find("=== Bulwark ETTR report: job scripted — Succeeded ==="), std::string::npos)
      << log;
  EXPECT_NE(log.find("[bulwark] slurm: node-2 on node3 (step " + job + "."), std::string::npos)
      << log;
  ExpectNoLeftovers();
}

// The demo (examples/pytorch-ddp/train.py: DDP over gloo with Debian's torch) as a Slurm
// user runs it: the printed sbatch script, submitted with sbatch. 2 nodes x 2 ranks and
// a standby node; a rank killed and a rank hung from the spec's chaos, a NaN from a
// corrupt record in the data, and the
// slurmd of a node running a slot (not the batch host) killed by the test once the job
// is past the NaN: Slurm marks that node NOT_RESPONDING, then DOWN. Every fault is
// recovered and the job finishes with its ETTR report.
TEST_F(SlurmE2E, DemoUnderSbatch) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  std::ostringstream y;
  y << "name: demo\nnodes: 2\nprocsPerNode: 2\n"
    << "command: [\"/usr/bin/python3\", \"" << src_
    << "/examples/pytorch-ddp/train.py\"]\n"
    // The NaN comes from the data (a corrupt record in rank 0's batch of step 190): its
    // replay on the standby gives it again, so its batches are skipped and no host is
    // quarantined (a NaN of one node's hardware would take the allocation's third host).
    << "args: [\"--steps\", \"400\", \"--log-every\", \"20\", \"--val-every\", \"0\", "
       "\"--poison-batch\", \"190:0\"]\n"
    << "env: {BW_E2E_TAG: \"" << tag_ << "\"}\n"
    << "checkpoint: {dir: " << dir_ << "/ckpt, intervalSteps: 10, keep: 3, memorySlots: 4}\n"
    << "faultPolicy: {restartBudget: 6, backoff: {baseSeconds: 0.2, capSeconds: 2}, "
       "hangTimeout: {floorSeconds: 3, multiplier: 10, startupSeconds: 180}, spareNodes: 1, "
       "heartbeat: {intervalSeconds: 1, misses: 3}, stopGraceSeconds: 3}\n"
    << "chaos:\n"
       "  - {kind: kill_rank, atStep: 40, rank: 1}\n"
       "  - {kind: hang_rank, atStep: 110, rank: 2}\n";
  const std::string spec = dir_ + "/demo.yaml";
  std::ofstream(spec) << y.str();
  auto [rc, script] =
      RunProcess({Bulwark(), "slurm", "script", spec, "--", "--report", dir_ + "/report.json"},
                 SlurmEnv(), 60);
  ASSERT_EQ(rc, 0) << script;
  std::ofstream(dir_ + "/demo.sbatch") << script;
  auto sub = cluster_->Run({"sbatch", "--parsable", dir_ + "/demo.sbatch"}, 30, dir_);
  ASSERT_TRUE(sub.ok() && sub->exit.ok()) << (sub.ok() ? sub->output : sub.status().ToString());
  const std::string job = std::to_string(std::stol(sub->output));
  const std::string log_path = dir_ + "/bulwark-demo-" + job + ".out";

  // Past the NaN's rollback: kill the slurmd of the host running slot 1. That is node-1,
  // unless a standby took the slot meanwhile (stop-diagnose sends a hung rank's node to
  // its self-tests and promotes the standby).
  std::smatch m;
  std::string log;
  auto wait_log = [&](const std::regex& re, double timeout_s) {
    const double deadline = Now() + timeout_s;
    while (Now() < deadline) {
      log = ReadFile(log_path);
      if (std::regex_search(log, m, re)) return true;
      PollReadable({}, 0.1);
    }
    return false;
  };
  auto promotions = [&] {
    std::vector<std::string> ids;
    const std::regex re("StandbyPromoted: (node-[0-9]+) takes slot 1 ");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
         ++it) {
      ids.push_back((*it)[1]);
    }
    return ids;
  };
  // Rank 0 prints the steps, from whichever node serves slot 0 by then.
  ASSERT_TRUE(wait_log(std::regex("\\[node-[0-9]+/0\\] step +2[4-9][0-9] loss"), 300)) << log;
  const std::vector<std::string> before = promotions();
  const std::string slot1 = before.empty() ? "node-1" : before.back();
  ASSERT_TRUE(
      std::regex_search(log, m, std::regex("\\[bulwark\\] slurm: " + slot1 + " on (node[0-9]+) ")))
      << log;
  const std::string host = m[1];
  ASSERT_NE(host, "node1") << "node1 is the batch host";
  const double killed_at = Now();
  ASSERT_TRUE(cluster_->KillSlurmd(host).ok());
  ASSERT_TRUE(
      wait_log(std::regex("NodeLost: " + slot1 + " \\(slot 1\\): Slurm node " + host + " is"), 60))
      << log;
  const double lost_at = Now();
  // A standby takes slot 1.
  const double promote_deadline = Now() + 120;
  while (promotions().size() <= before.size() && Now() < promote_deadline) {
    PollReadable({}, 0.1);
    log = ReadFile(log_path);
  }
  ASSERT_GT(promotions().size(), before.size()) << log;
  const double promoted_at = Now();
  std::printf("slurmd of %s (%s, slot 1) killed -> NodeLost %.1f s -> %s promoted %.1f s\n",
              host.c_str(), slot1.c_str(), lost_at - killed_at, promotions().back().c_str(),
              promoted_at - killed_at);

  // While it runs, the job's Comment in Slurm carries its progress (every 30 s).
  std::string comment;
  const double comment_deadline = Now() + 45;
  while (Now() < comment_deadline) {
    auto c = cluster_->Run({"squeue", "--noheader", "--jobs=" + job, "--format=%k"});
    comment = c.ok() ? c->output : c.status().ToString();
    if (comment.rfind("bulwark: ", 0) == 0 && comment.find(" step ") != std::string::npos) break;
    PollReadable({}, 0.5);
  }
  EXPECT_NE(comment.find("/400 ("), std::string::npos) << comment;
  EXPECT_NE(comment.find("ETTR 0."), std::string::npos) << comment;

  const std::string state = WaitJobDone(job, 600);
  log = ReadFile(log_path);
  ASSERT_EQ(state, "COMPLETED") << log;
  EXPECT_NE(log.find("=== Bulwark ETTR report: job demo — Succeeded ==="), std::string::npos)
      << log;
  const Json r = Report();
  EXPECT_EQ(r["phase"], "Succeeded");
  EXPECT_EQ(r["last_step"], 400);
  std::vector<std::string> kinds;
  for (const auto& inc : r["incidents"]) kinds.push_back(inc.value("kind", "?"));
  EXPECT_EQ(kinds, (std::vector<std::string>{"crash", "hang", "nan", "nan", "node_lost"}))
      << r.dump(2);
  EXPECT_EQ(r["incidents"][3]["classification"]["cause"], "data") << r["incidents"][3].dump(2);
  const Json* lost = FirstIncident(r, "node_lost");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ((*lost)["action"], "replace_node");
  EXPECT_NE((*lost)["detail"].get<std::string>().find("Slurm node " + host + " is"),
            std::string::npos)
      << lost->dump(2);
  const double ettr = r["ettr"].get<double>();
  EXPECT_GT(ettr, 0.5);
  std::printf("demo on Slurm: ETTR %.3f, wall clock %.1f s\n", ettr, r.value("wall_s", 0.0));

  // Nothing of the job runs on, except on the node whose slurmd was killed: Slurm cannot
  // reach its step, and its agent ends its ranks on its own orphan timeout (as on a real
  // partitioned node). The fixture's Stop() ends those.
  const std::vector<pid_t> dead_steps = cluster_->StepDaemonPids(host);
  auto under_dead_node = [&](int pid) {
    for (int p = pid, hops = 0; p > 1 && hops < 64; ++hops) {
      if (std::find(dead_steps.begin(), dead_steps.end(), p) != dead_steps.end()) return true;
      std::ifstream st("/proc/" + std::to_string(p) + "/stat");
      std::string stat;
      std::getline(st, stat);
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos) return false;
      std::istringstream rest(stat.substr(paren + 2));
      char c;
      rest >> c >> p;
    }
    return false;
  };
  const double deadline = Now() + 10;
  std::vector<int> elsewhere;
  while (true) {
    elsewhere.clear();
    for (int pid : Leftovers()) {
      if (!under_dead_node(pid)) elsewhere.push_back(pid);
    }
    if (elsewhere.empty() || Now() >= deadline) break;
    PollReadable({}, 0.1);
  }
  EXPECT_TRUE(elsewhere.empty()) << elsewhere.size() << " processes of the job survived, first "
                                 << elsewhere[0];
  cluster_->Stop();
  ExpectNoLeftovers();
}

}  // namespace
}  // namespace bulwark
