#include "common/proc.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>

#include "common/clock.h"

namespace bulwark {
namespace {

std::string ReadAll(Child& c, double timeout_s) {
  std::string out;
  bool eof = false;
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (!eof && SystemClock::Get()->NowMono() < deadline) {
    PollReadable({c.output.get()}, 0.1);
    out += ReadAvailable(c.output.get(), &eof);
  }
  return out;
}

TEST(Proc, SpawnCapturesOutputEnvAndExitCode) {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo hello $FOO; pwd; echo err >&2; exit 3"};
  o.env = {{"FOO", "bar"}, {"PATH", "/usr/bin:/bin"}};
  o.workdir = "/tmp";
  auto c = Spawn(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string out = ReadAll(*c, 10);
  EXPECT_NE(out.find("hello bar"), std::string::npos);
  EXPECT_NE(out.find("/tmp"), std::string::npos);
  EXPECT_NE(out.find("err"), std::string::npos);
  auto e = WaitExit(c->pid, 10);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, 3);
  EXPECT_EQ(e->Describe(), "exit 3");
}

TEST(Proc, MissingCommandAndBadWorkdirAreErrors) {
  SpawnOptions o;
  o.argv = {"/no/such/binary"};
  EXPECT_EQ(Spawn(o).status().code(), Code::kNotFound);
  o.argv = {"/bin/true"};
  o.workdir = "/no/such/dir";
  auto r = Spawn(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/no/such/dir"), std::string::npos);
}

TEST(Proc, TerminateGroupKillsStoppedAndStubbornProcesses) {
  SpawnOptions o;
  // Ignores SIGTERM, and has a grandchild in the same group.
  o.argv = {"/bin/sh", "-c", "trap '' TERM; sleep 1000 & echo ready; while true; do sleep 1; done"};
  o.env = {{"PATH", "/usr/bin:/bin"}};
  auto c = Spawn(o);
  ASSERT_TRUE(c.ok());
  std::string out;
  double ready_deadline = SystemClock::Get()->NowMono() + 10;
  while (out.find("ready") == std::string::npos && SystemClock::Get()->NowMono() < ready_deadline) {
    PollReadable({c->output.get()}, 0.1);
    out += ReadAvailable(c->output.get(), nullptr);
  }
  ASSERT_NE(out.find("ready"), std::string::npos);
  ASSERT_TRUE(SignalGroup(c->pgid, SIGSTOP).ok());
  double deadline;
  ExitInfo e = TerminateGroup(c->pid, c->pgid, 0.2);
  EXPECT_EQ(e.signal, SIGKILL);
  deadline = SystemClock::Get()->NowMono() + 5;
  while (GroupAlive(c->pgid) && SystemClock::Get()->NowMono() < deadline) PollReadable({}, 0.01);
  EXPECT_FALSE(GroupAlive(c->pgid));
  EXPECT_EQ(ProcState(c->pid), '?');
}

TEST(Proc, SignalGroupRefusesDangerousGroups) {
  EXPECT_FALSE(SignalGroup(0, SIGTERM).ok());
  EXPECT_FALSE(SignalGroup(1, SIGTERM).ok());
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
}

// A child that exits at once, once it is a zombie (polled with a deadline).
pid_t ExitedChild() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  const double deadline = SystemClock::Get()->NowMono() + 10;
  while (ProcState(pid) != 'Z' && SystemClock::Get()->NowMono() < deadline) {
    SystemClock::Get()->SleepFor(0.001);
  }
  return pid;
}

// The reaper names one exited child at a time (waitid WNOWAIT): a kept one named first
// must not hide the others (they are then found by the /proc scan), and a kept one is
// never reaped, whichever order the children exited in.
TEST(Proc, ReapZombieChildrenReapsAllButTheKept) {
  for (const bool kept_first : {true, false}) {
    SCOPED_TRACE(kept_first ? "the kept child is the older" : "the kept child is the newer");
    const pid_t a = ExitedChild();
    const pid_t b = ExitedChild();
    const pid_t c = ExitedChild();
    const pid_t kept = kept_first ? a : c;
    ASSERT_EQ(ProcState(kept), 'Z');
    EXPECT_EQ(ReapZombieChildren({kept}), 2);
    EXPECT_EQ(ProcState(kept), 'Z');  // still there for its owner
    for (pid_t p : {a, b, c}) {
      if (p != kept) {
        EXPECT_EQ(::waitpid(p, nullptr, WNOHANG), -1) << "not reaped: " << p;
      }
    }
    EXPECT_EQ(::waitpid(kept, nullptr, 0), kept);
    EXPECT_EQ(ReapZombieChildren({}), 0);  // nothing left
  }
}

}  // namespace
}  // namespace bulwark
