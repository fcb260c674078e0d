// SlurmBackend on a real Slurm 22.05 cluster (testing/slurm_cluster.h): placement by
// srun, capacity, the ends of a step (release, kill, teardown), a node whose slurmd
// dies, draining, and the errors. The agent is a stand-in script that says where it
// runs and waits for its stop file: what is tested is the backend, not the agent.
#include "backend/slurm_backend.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "backend/testing/slurm_cluster.h"
#include "common/clock.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;
using testing::SlurmCluster;

double Now() { return SystemClock::Get()->NowMono(); }

bool WaitFor(const std::function<bool()>& done, double timeout_s) {
  const double deadline = Now() + timeout_s;
  while (!done()) {
    if (Now() >= deadline) return false;
    PollReadable({}, 0.05);
  }
  return true;
}

constexpr const char* kFakeAgent = R"(#!/bin/sh
# A stand-in for bulwark-agent: says where it runs, then waits for its stop file.
while [ $# -gt 0 ]; do
  case "$1" in
    --node) node=$2; shift ;;
    --run-dir) dir=$2; shift ;;
    --peer-host) peer=$2; shift ;;
  esac
  shift
done
mkdir -p "$dir/$node"
echo "$SLURMD_NODENAME $SLURM_JOB_ID.$SLURM_STEP_ID $peer $$" > "$dir/$node/where.tmp"
mv "$dir/$node/where.tmp" "$dir/$node/where"
echo "fake agent $node on $SLURMD_NODENAME"
while [ ! -e "$dir/$node/stop" ]; do sleep 0.05; done
)";

void WriteExecutable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0755);
}

class SlurmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = SlurmCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
    dir_ = cluster_->work_dir() + "/backend-test";
    fs::create_directories(dir_ + "/run");
    agent_ = dir_ + "/fake-agent";
    WriteExecutable(agent_, kFakeAgent);
  }

  // A new allocation of `nodes` nodes that survives a node failure (--no-kill), without
  // a shell: its id.
  std::string Allocate(int nodes) {
    auto r = cluster_->Run(
        {"salloc", "--no-kill", "--no-shell", "-N", std::to_string(nodes), "--job-name=alloc"});
    EXPECT_TRUE(r.ok() && r->exit.ok()) << (r.ok() ? r->output : r.status().ToString());
    if (!r.ok()) return "";
    const std::string key = "Granted job allocation ";
    const size_t at = r->output.find(key);
    EXPECT_NE(at, std::string::npos) << r->output;
    if (at == std::string::npos) return "";
    return std::to_string(std::stol(r->output.substr(at + key.size())));
  }

  SlurmBackendOptions Options(const std::string& job) {
    SlurmBackendOptions o;
    o.agent.agent_binary = agent_;
    o.job_id = job;
    o.env = cluster_->ClientEnv();
    o.bin_dir = cluster_->bin_dir();
    o.poll_interval_s = 0.2;
    return o;
  }

  std::unique_ptr<SlurmBackend> Create(const std::string& job) { return Create(Options(job)); }
  std::unique_ptr<SlurmBackend> Create(const SlurmBackendOptions& o) {
    auto b = SlurmBackend::Create(o);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  NodeRequest Req(const std::string& id, int slot) {
    return NodeRequest{"t", id, "127.0.0.1:1", dir_ + "/run", slot};
  }

  // "HOST JOB.STEP PEER_HOST PID" of the fake agent of `node`, once it wrote it.
  std::vector<std::string> Where(const std::string& node) {
    std::vector<std::string> w;
    EXPECT_TRUE(WaitFor([&] { return fs::exists(dir_ + "/run/" + node + "/where"); }, 20))
        << node << " never started";
    std::ifstream in(dir_ + "/run/" + node + "/where");
    for (std::string s; in >> s;) w.push_back(s);
    if (w.size() != 4) ADD_FAILURE() << node << ": where holds " << w.size() << " words";
    w.resize(4);
    return w;
  }

  void Stop(const std::string& node) { std::ofstream(dir_ + "/run/" + node + "/stop") << "\n"; }

  static std::string Or(const Result<std::string>& r) {
    return r.ok() ? *r : r.status().ToString();
  }

  static bool Gone(pid_t pid) {
    const char st = ProcState(pid);
    return st == '?' || st == 'Z';
  }

  // Polls until a loss is reported (or timeout_s): the losses.
  static std::vector<NodeLoss> PollForLoss(SlurmBackend* b, double timeout_s) {
    std::vector<NodeLoss> lost;
    WaitFor(
        [&] {
          lost = b->Poll();
          return !lost.empty();
        },
        timeout_s);
    return lost;
  }

  // The job's steps that Slurm still lists, as "ID NAME" lines.
  std::string Steps(const std::string& job) {
    auto r = cluster_->Run({"squeue", "--steps", "--noheader", "--jobs=" + job, "--format=%i %j"});
    return r.ok() ? r->output : r.status().ToString();
  }

  std::unique_ptr<SlurmCluster> cluster_;
  std::string dir_, agent_;
};

TEST(SlurmStateTest, UnusableStates) {
  for (const char* s : {"DOWN", "DOWN+NOT_RESPONDING", "MIXED+DRAIN", "IDLE+DRAIN", "FAIL",
                        "ALLOCATED+NOT_RESPONDING", "IDLE+POWERED_DOWN"}) {
    EXPECT_TRUE(SlurmStateUnusable(s)) << s;
  }
  for (const char* s : {"IDLE", "MIXED", "ALLOCATED", "ALLOCATED+COMPLETING", "IDLE+CLOUD", ""}) {
    EXPECT_FALSE(SlurmStateUnusable(s)) << s;
  }
}

TEST(SlurmBackendNoSlurmTest, SlurmNotInstalledNamesTheProgramAndTheFix) {
  const std::string empty = ::testing::TempDir() + "/no-slurm-bin";
  fs::create_directories(empty);
  SlurmBackendOptions o;
  o.job_id = "1";
  o.bin_dir = empty;
  auto b = SlurmBackend::Create(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("Slurm is not installed here: " + empty + "/srun"),
            std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("--backend local"), std::string::npos);
  // On PATH: the same, naming PATH.
  o.bin_dir = "";
  o.env = {{"PATH", empty}};
  b = SlurmBackend::Create(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("srun is not on PATH"), std::string::npos)
      << b.status().message();
}

TEST_F(SlurmBackendTest, EachNodeOnItsOwnHostThenNoCapacityThenTeardownEndsEveryStep) {
  const std::string job = Allocate(3);
  ASSERT_FALSE(job.empty());
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->hosts().size(), 3u);
  for (const SlurmHost& h : b->hosts()) EXPECT_EQ(h.addr, "127.0.0.1") << h.name;
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  ASSERT_TRUE(b->StartNode(Req("node-1", 1)).ok());
  ASSERT_TRUE(b->StartNode(Req("node-2", -1)).ok());  // a warm standby takes a host too
  std::set<std::string> hosts;
  std::vector<pid_t> pids;
  for (const char* n : {"node-0", "node-1", "node-2"}) {
    const auto w = Where(n);
    EXPECT_EQ(w[0], b->HostOf(n)) << n << " runs where srun was told to put it";
    EXPECT_EQ(w[1].rfind(job + ".", 0), 0u) << w[1] << ": a step of the allocation";
    EXPECT_EQ(w[2], "127.0.0.1") << "--peer-host is the host's NodeAddr";
    hosts.insert(w[0]);
    pids.push_back(std::stoi(w[3]));
  }
  EXPECT_EQ(hosts, (std::set<std::string>{"node1", "node2", "node3"}));

  Status full = b->StartNode(Req("node-3", -1));
  EXPECT_EQ(full.code(), Code::kUnavailable) << full.ToString();
  EXPECT_NE(full.message().find("no capacity: every host of Slurm job " + job + " is in use"),
            std::string::npos)
      << full.message();
  EXPECT_NE(full.message().find(b->HostOf("node-0") + " runs node-0"), std::string::npos)
      << full.message();
  EXPECT_TRUE(b->Poll().empty());

  // The agents were not told to stop: Teardown's grace passes, then srun kills the steps.
  const double t0 = Now();
  EXPECT_TRUE(b->Teardown(1).ok());
  EXPECT_LT(Now() - t0, 10);
  for (pid_t p : pids) EXPECT_TRUE(WaitFor([&] { return Gone(p); }, 10)) << "agent " << p;
  EXPECT_TRUE(WaitFor([&] { return Steps(job).empty(); }, 10)) << Steps(job);
  EXPECT_TRUE(b->Poll().empty()) << "a torn-down node is no loss";
}

TEST_F(SlurmBackendTest, ReleaseWaitsForTheAgentAndFreesTheHost) {
  const std::string job = Allocate(1);
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  const pid_t pid = std::stoi(Where("node-0")[3]);
  Stop("node-0");  // what the controller's shutdown order does to a real agent
  const double t0 = Now();
  EXPECT_TRUE(b->ReleaseNode("node-0", 10).ok());
  EXPECT_LT(Now() - t0, 5) << "the agent stopped by itself: no waiting for the grace";
  EXPECT_TRUE(Gone(pid));
  EXPECT_TRUE(b->Poll().empty()) << "a released node is no loss";
  // Its host serves the next node at once.
  ASSERT_TRUE(b->StartNode(Req("node-1", 0)).ok());
  EXPECT_EQ(Where("node-1")[0], cluster_->node_names()[0]);
  Stop("node-1");
  EXPECT_TRUE(b->Teardown(10).ok());
}

TEST_F(SlurmBackendTest, KillNodeKillsTheStepAndPollReportsItOnce) {
  const std::string job = Allocate(2);
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  ASSERT_TRUE(b->StartNode(Req("node-1", -1)).ok());
  const auto w = Where("node-0");
  Where("node-1");
  const pid_t pid = std::stoi(w[3]);
  const double t0 = Now();
  ASSERT_TRUE(b->KillNode("node-0").ok());
  const auto lost = PollForLoss(b.get(), 10);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node_id, "node-0");
  EXPECT_NE(lost[0].reason.find("srun of node-0 on Slurm node " + w[0] + " ended"),
            std::string::npos)
      << lost[0].reason;
  EXPECT_NE(lost[0].reason.find("srun: "), std::string::npos)
      << "srun's own words: " << lost[0].reason;
  std::printf("KillNode to loss reported: %.2f s\n", Now() - t0);
  EXPECT_TRUE(WaitFor([&] { return Gone(pid); }, 10)) << "the step's process survived";
  // Not reported twice, and its host takes the next node once a probe has seen it.
  EXPECT_TRUE(b->Poll().empty());
  EXPECT_TRUE(WaitFor(
      [&] {
        EXPECT_TRUE(b->Poll().empty());  // the controller polls: the probes run
        return b->StartNode(Req("node-2", -1)).ok();
      },
      10));
  EXPECT_EQ(b->HostOf("node-2"), w[0]);
  EXPECT_TRUE(b->Teardown(1).ok());
}

TEST_F(SlurmBackendTest, ANodeWhoseSlurmdDiesIsLostAndItsHostNotReused) {
  const std::string job = Allocate(3);
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  ASSERT_TRUE(b->StartNode(Req("node-1", 1)).ok());
  ASSERT_TRUE(b->StartNode(Req("node-2", -1)).ok());
  for (const char* n : {"node-0", "node-1", "node-2"}) Where(n);
  const std::string host = b->HostOf("node-1");
  const double t0 = Now();
  ASSERT_TRUE(cluster_->KillSlurmd(host).ok());
  const auto lost = PollForLoss(b.get(), 30);
  const double detected = Now() - t0;
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node_id, "node-1");
  EXPECT_NE(lost[0].reason.find("Slurm node " + host), std::string::npos) << lost[0].reason;
  std::printf("slurmd killed to node loss reported: %.2f s (%s)\n", detected,
              lost[0].reason.c_str());
  ASSERT_TRUE(cluster_->WaitNodeState(host, {"DOWN"}, 30).ok());
  // Its host is not given out again; the others keep running, and the allocation too
  // (--no-kill).
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(b->Poll().empty());
    PollReadable({}, 0.1);
  }
  Status again = b->StartNode(Req("node-3", 1));
  EXPECT_EQ(again.code(), Code::kUnavailable) << again.ToString();
  EXPECT_NE(again.message().find(host + " "), std::string::npos) << again.message();
  EXPECT_EQ(Or(cluster_->JobState(job)), "RUNNING");
  EXPECT_TRUE(b->Teardown(1).ok());
}

// The machine of a node dies (CrashNode): its agent's connection drops at once, long
// before Slurm notices. The host must not be given out again in between: srun there
// fails ("Communication connection failure"), which makes it suspect.
TEST_F(SlurmBackendTest, ACrashedHostIsNotReusedBeforeSlurmNotices) {
  const std::string job = Allocate(2);
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  ASSERT_TRUE(b->StartNode(Req("node-1", -1)).ok());
  Where("node-0");
  Where("node-1");
  const std::string host = b->HostOf("node-1");
  ASSERT_TRUE(cluster_->CrashNode(host).ok());
  ASSERT_TRUE(b->KillNode("node-1").ok());  // as the controller does when the agent is gone
  const auto lost = PollForLoss(b.get(), 30);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node_id, "node-1");
  // Until Slurm shows the node down, every attempt to place a node says "no capacity".
  int attempts = 0;
  std::string last;
  ASSERT_TRUE(WaitFor(
      [&] {
        b->Poll();
        Status st = b->StartNode(Req("node-2", -1));
        EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
        last = st.message();
        ++attempts;
        return Or(cluster_->NodeState(host)).find("DOWN") != std::string::npos;
      },
      30));
  EXPECT_GT(attempts, 1);
  EXPECT_NE(last.find(host + " "), std::string::npos) << last;
  EXPECT_TRUE(b->Teardown(1).ok());
}

TEST_F(SlurmBackendTest, SrunRefusingIsAnErrorQuotingSrun) {
  const std::string job = Allocate(1);
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(cluster_->Run({"scancel", job}).ok());
  ASSERT_TRUE(WaitFor([&] { return Or(cluster_->JobState(job)) != "RUNNING"; }, 10));
  Status st = b->StartNode(Req("node-0", 0));
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("srun could not start node-0 on Slurm node node1 of job " + job),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("srun: error: "), std::string::npos) << st.message();
  // And a backend for an allocation that has ended is refused up front.
  auto ended = SlurmBackend::Create(Options(job));
  ASSERT_FALSE(ended.ok());
  EXPECT_EQ(ended.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(ended.status().message().find("Slurm job " + job + " is "), std::string::npos)
      << ended.status().message();
  auto missing = SlurmBackend::Create(Options("99999"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("Slurm job 99999 does not exist"), std::string::npos)
      << missing.status().message();
}

TEST_F(SlurmBackendTest, DrainNodeDrainsAndExcludesOrIsPermissionDenied) {
  const std::string job = Allocate(2);
  auto b = Create(job);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  const std::string host = Where("node-0")[0];
  ASSERT_TRUE(b->DrainNode(host, "bulwark test: failed diagnostics").ok());
  const auto lost = PollForLoss(b.get(), 10);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_NE(lost[0].reason.find("DRAIN"), std::string::npos) << lost[0].reason;
  EXPECT_NE(lost[0].reason.find("bulwark test: failed diagnostics"), std::string::npos)
      << lost[0].reason;
  ASSERT_TRUE(WaitFor(
      [&] {
        EXPECT_TRUE(b->Poll().empty());
        return b->StartNode(Req("node-1", 0)).ok();
      },
      10));
  EXPECT_NE(b->HostOf("node-1"), host) << "a drained host is not placed on";
  EXPECT_EQ(b->DrainNode("node9", "x").code(), Code::kNotFound);
  // The controller's stop-diagnose quarantines a node: its host is drained with the reason.
  const std::string second = b->HostOf("node-1");
  ASSERT_TRUE(b->QuarantineNode("node-1", "bulwark: failed diagnostics: matmul mismatch").ok());
  EXPECT_NE(Or(cluster_->NodeState(second)).find("DRAIN"), std::string::npos);
  auto show = cluster_->Run({"scontrol", "--oneliner", "show", "node", second});
  ASSERT_TRUE(show.ok());
  EXPECT_NE(show->output.find("Reason=bulwark: failed diagnostics: matmul mismatch"),
            std::string::npos)
      << show->output;
  EXPECT_EQ(b->QuarantineNode("node-7", "x").code(), Code::kNotFound);
  EXPECT_TRUE(b->Teardown(1).ok());
  ASSERT_TRUE(
      cluster_->Run({"scontrol", "update", "nodename=" + host + "," + second, "state=resume"})
          .ok());
  // Resumed nodes are NOT_RESPONDING until their slurmd answers slurmctld again.
  for (const std::string& h : {host, second}) {
    ASSERT_TRUE(WaitFor(
        [&] {
          const std::string st = Or(cluster_->NodeState(h));
          return st.find("NOT_RESPONDING") == std::string::npos &&
                 st.find("DRAIN") == std::string::npos;
        },
        30))
        << h << ": " << Or(cluster_->NodeState(h));
  }

  // A user without Slurm operator rights: scontrol as nobody (who needs a slurm.conf it
  // can read: the cluster's directory is private).
  const std::string bin = ::testing::TempDir() + "/bin-nobody-" + std::to_string(getpid());
  fs::remove_all(bin);
  fs::create_directories(bin);
  fs::copy_file(cluster_->conf_path(), bin + "/slurm.conf");
  fs::permissions(bin, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(bin + "/slurm.conf", fs::perms::owner_read | fs::perms::owner_write |
                                           fs::perms::group_read | fs::perms::others_read);
  for (const char* p : {"srun", "scancel"}) {
    fs::create_symlink(cluster_->bin_dir() + "/" + p, bin + "/" + p);
  }
  WriteExecutable(bin + "/scontrol", "#!/bin/sh\nSLURM_CONF=" + bin +
                                         "/slurm.conf exec setpriv --reuid=65534 --regid=65534 "
                                         "--clear-groups " +
                                         cluster_->bin_dir() + "/scontrol \"$@\"\n");
  SlurmBackendOptions o = Options(job);
  o.bin_dir = bin;
  auto nobody = SlurmBackend::Create(o);
  ASSERT_TRUE(nobody.ok()) << nobody.status().ToString();
  const std::string other =
      cluster_->node_names()[0] == host ? cluster_->node_names()[1] : cluster_->node_names()[0];
  Status placed = (*nobody)->StartNode(Req("node-8", 0));
  ASSERT_TRUE(placed.ok()) << placed.ToString();
  Status quarantine = (*nobody)->QuarantineNode("node-8", "x");
  EXPECT_EQ(quarantine.code(), Code::kPermissionDenied) << quarantine.ToString();
  EXPECT_TRUE((*nobody)->Teardown(1).ok());
  Status denied = (*nobody)->DrainNode(other, "x");
  EXPECT_EQ(denied.code(), Code::kPermissionDenied) << denied.ToString();
  EXPECT_NE(denied.message().find("operator or administrator rights"), std::string::npos)
      << denied.message();
  EXPECT_EQ(Or(cluster_->NodeState(other)).find("DRAIN"), std::string::npos);
  fs::remove_all(bin);
}

// The job state of Slurm job `job` ("" once Slurm no longer lists it).
std::string JobState(SlurmCluster* c, const std::string& job) {
  auto r = c->Run({"squeue", "--noheader", "--jobs=" + job, "--states=all", "--format=%T %j"});
  if (!r.ok() || !r->exit.ok()) return "";
  std::string out = r->output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST_F(SlurmBackendTest, GrowsOneNodeAllocationWhenNoHostIsFreeAndGivesItBack) {
  const std::string job = Allocate(1);
  ASSERT_FALSE(job.empty());
  SlurmBackendOptions o = Options(job);
  o.grow_nodes = 1;
  o.grow_idle_s = 1;
  auto created = Create(o);
  ASSERT_NE(created, nullptr);
  SlurmBackend* b = created.get();
  ASSERT_TRUE(b->StartNode(Req("node-0", 0)).ok());
  Status none = b->StartNode(Req("node-1", 1));
  ASSERT_EQ(none.code(), Code::kUnavailable) << none.ToString();
  EXPECT_NE(
      none.message().find("asked Slurm for one more node (" + cluster_->bin_dir() + "/salloc"),
      std::string::npos)
      << none.message();
  EXPECT_NE(none.message().find("--exclude=" + b->HostOf("node-0")), std::string::npos)
      << none.message() << ": a new machine, not one the job has";
  // The controller retries: once the grant is probed, node-1 goes there.
  Status st = none;
  ASSERT_TRUE(WaitFor(
      [&] {
        (void)b->Poll();
        st = b->StartNode(Req("node-1", 1));
        return st.ok();
      },
      30))
      << st.ToString();
  ASSERT_EQ(b->grown_jobs().size(), 1u);
  const std::string grown = b->grown_jobs()[0];
  EXPECT_NE(grown, job);
  const auto w = Where("node-1");
  EXPECT_NE(w[0], b->HostOf("node-0"));
  EXPECT_EQ(w[1].rfind(grown + ".", 0), 0u) << w[1] << ": a step of the grown allocation";
  EXPECT_EQ(JobState(cluster_.get(), grown), "RUNNING bulwark:t:grow");
  // The budget is one node.
  Status more = b->StartNode(Req("node-2", -1));
  EXPECT_EQ(more.code(), Code::kUnavailable);
  EXPECT_NE(more.message().find("slurm.growNodes: 1, all used"), std::string::npos)
      << more.message();
  // Released, the grown allocation is given back after grow_idle_s.
  Stop("node-1");
  ASSERT_TRUE(b->ReleaseNode("node-1", 10).ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        (void)b->Poll();
        return b->grown_jobs().empty() &&
               JobState(cluster_.get(), grown).rfind("RUNNING", 0) == std::string::npos;
      },
      30))
      << JobState(cluster_.get(), grown);
  EXPECT_EQ(JobState(cluster_.get(), job).rfind("RUNNING", 0), 0u) << "the job's own runs on";
  Stop("node-0");
  EXPECT_TRUE(b->Teardown(10).ok());
}

TEST_F(SlurmBackendTest, GrowRefusedBySlurmIsToldAndTeardownGivesBackWhatGrew) {
  // Two of the three hosts: one can be grown, then Slurm has none left to give.
  const std::string job = Allocate(2);
  ASSERT_FALSE(job.empty());
  SlurmBackendOptions o = Options(job);
  o.grow_nodes = 3;
  o.grow_retry_s = 60;
  auto created = Create(o);
  ASSERT_NE(created, nullptr);
  SlurmBackend* b = created.get();
  for (int i = 0; i < 3; ++i) {
    const std::string id = "node-" + std::to_string(i);
    Status st;
    ASSERT_TRUE(WaitFor(
        [&] {
          (void)b->Poll();
          st = b->StartNode(Req(id, i));
          return st.ok();
        },
        30))
        << id << ": " << st.ToString();
  }
  ASSERT_EQ(b->grown_jobs().size(), 1u);
  const std::string grown = b->grown_jobs()[0];
  // A fourth: every host of the cluster is this job's and excluded; salloc says so.
  Status st;
  EXPECT_TRUE(WaitFor(
      [&] {
        (void)b->Poll();
        st = b->StartNode(Req("node-3", -1));
        return st.message().find("Slurm refused one more node") != std::string::npos;
      },
      30))
      << st.ToString();
  EXPECT_NE(st.message().find("Requested node configuration is not available"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("asking again in 60 s"), std::string::npos) << st.ToString();
  // Teardown ends the steps and gives the grown allocation back.
  for (int i = 0; i < 3; ++i) Stop("node-" + std::to_string(i));
  EXPECT_TRUE(b->Teardown(10).ok());
  EXPECT_TRUE(WaitFor(
      [&] { return JobState(cluster_.get(), grown).rfind("RUNNING", 0) == std::string::npos; }, 20))
      << JobState(cluster_.get(), grown);
}

}  // namespace
}  // namespace bulwark
