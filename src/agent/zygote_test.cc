// The fork protocol between ForkFromServer (src/common/proc.cc) and the real
// python/bulwark/zygote.py, with a real interpreter: this test process plays the agent
// (a child subreaper with the agent socket). Waits poll with deadlines.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/clock.h"
#include "common/json_util.h"
#include "common/net.h"
#include "common/proc.h"

namespace bulwark {
namespace {

namespace fs = std::filesystem;

pid_t ParentOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(f, s)) return -1;
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  char state;
  pid_t ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

class ZygoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(BecomeSubreaper().ok());
    char tmpl[] = "/tmp/bw_zygote.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto sock = UnixDgramBind(dir_ + "/agent.sock");
    ASSERT_TRUE(sock.ok());
    agent_sock_ = std::move(*sock);
    auto pair = UnixStreamPair();
    ASSERT_TRUE(pair.ok());
    SpawnOptions so;
    so.argv = {"/usr/bin/python3", "-u", "-m", "bulwark.zygote"};
    so.env = {{"PATH", "/usr/bin:/bin"},
              {"PYTHONPATH", BULWARK_PYTHON_DIR},
              {"BULWARK_AGENT_SOCK", dir_ + "/agent.sock"},
              {"BULWARK_WARM_TARGET", ""}};
    so.control_fd = pair->second.get();
    auto child = Spawn(so);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    zygote_ = std::move(*child);
    control_ = std::move(pair->first);
  }

  void TearDown() override {
    if (zygote_.pid > 0) TerminateGroup(zygote_.pid, zygote_.pgid, 1);
    KillAndReapAllChildren();
    fs::remove_all(dir_);
  }

  // Whether the agent socket got a datagram of `type` from `pid` (waits up to 30 s).
  bool Heard(const std::string& type, pid_t pid) {
    const double deadline = SystemClock::Get()->NowMono() + 30;
    while (true) {
      for (const Json& m : heard_) {
        if (m.value("type", "") == type && m.value("pid", -1) == pid) return true;
      }
      if (SystemClock::Get()->NowMono() >= deadline) return false;
      PollReadable({agent_sock_.get()}, 0.1);
      for (const std::string& d : UnixDgramRecvAll(agent_sock_.get())) {
        Json m = Json::parse(d, nullptr, false);
        if (m.is_object()) heard_.push_back(std::move(m));
      }
    }
  }

  // Everything `fd` yields until EOF, within 30 s.
  static std::string ReadToEof(int fd) {
    std::string out;
    bool eof = false;
    const double deadline = SystemClock::Get()->NowMono() + 30;
    while (!eof && SystemClock::Get()->NowMono() < deadline) {
      PollReadable({fd}, 0.1);
      out += ReadAvailable(fd, &eof);
    }
    return out;
  }

  std::string dir_;
  Fd agent_sock_;
  Child zygote_;
  Fd control_;
  std::vector<Json> heard_;
};

TEST_F(ZygoteTest, ForksWarmRanksThatAreOurChildrenAndBecomeTheAssignedScript) {
  ASSERT_TRUE(Heard("zygote_ready", zygote_.pid));
  auto a = ForkFromServer(control_.get(), 10);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = ForkFromServer(control_.get(), 10);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->pid, b->pid);
  for (const Child* c : {&*a, &*b}) {
    // By the reply the double fork is done: the new process is ours to reap, and it
    // leads its own group (what the agent signals).
    EXPECT_EQ(ParentOf(c->pid), getpid());
    EXPECT_EQ(getpgid(c->pid), c->pid);
    EXPECT_TRUE(Heard("warm_ready", c->pid));
  }

  std::ofstream(dir_ + "/script.py")
      << "import os, sys\n"
         "print('argv', sys.argv[1:], 'env', os.environ.get('FOO'), 'cwd', os.getcwd())\n"
         "print('to stderr', file=sys.stderr)\n"
         "sys.exit(3)\n";
  const Json job = {{"argv", {"/usr/bin/python3", "script.py", "x"}},
                    {"env", {{"FOO", "bar"}, {"PATH", "/usr/bin:/bin"}}},
                    {"cwd", dir_}};
  const std::string line = job.dump() + "\n";
  ASSERT_EQ(write(a->input.get(), line.data(), line.size()), static_cast<ssize_t>(line.size()));
  a->input.Reset();
  const std::string out = ReadToEof(a->output.get());
  EXPECT_NE(out.find("argv ['x'] env bar cwd " + fs::canonical(dir_).string()), std::string::npos)
      << out;
  EXPECT_NE(out.find("to stderr"), std::string::npos) << out;
  auto ea = WaitExit(a->pid, 30);
  ASSERT_TRUE(ea);
  EXPECT_EQ(ea->code, 3);

  ASSERT_TRUE(SignalGroup(b->pgid, SIGKILL).ok());
  auto eb = WaitExit(b->pid, 30);
  ASSERT_TRUE(eb);
  EXPECT_EQ(eb->signal, SIGKILL);
  EXPECT_FALSE(Reap(zygote_.pid));  // the zygote is unaffected

  // A request without the two descriptors is answered with an error, not a process.
  ASSERT_EQ(send(control_.get(), "fork\n", 5, MSG_NOSIGNAL), 5);
  std::string reply;
  const double deadline = SystemClock::Get()->NowMono() + 30;
  while (reply.find('\n') == std::string::npos && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({control_.get()}, 0.1);
    char buf[256];
    const ssize_t n = recv(control_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) reply.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(reply.rfind("error bad request", 0), 0u) << reply;

  // The agent closing the channel ends the zygote.
  control_.Reset();
  auto ez = WaitExit(zygote_.pid, 30);
  ASSERT_TRUE(ez);
  EXPECT_TRUE(ez->ok()) << ez->Describe();
  zygote_.pid = -1;
}

TEST_F(ZygoteTest, AForkRequestToADeadServerFailsAtOnce) {
  ASSERT_TRUE(Heard("zygote_ready", zygote_.pid));
  // The zygote gone: a fork request fails at once rather than waiting for a reply.
  ASSERT_TRUE(SignalGroup(zygote_.pgid, SIGKILL).ok());
  ASSERT_TRUE(WaitExit(zygote_.pid, 30));
  zygote_.pid = -1;
  auto c = ForkFromServer(control_.get(), 10);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable) << c.status().ToString();
}

}  // namespace
}  // namespace bulwark
