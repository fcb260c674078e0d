#include "common/timers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "common/net.h"
#include "common/testing/fake_processes.h"

namespace bulwark {
namespace {

TEST(Timers, ExpireInDeadlineOrderAndPaceTheWait) {
  FakeClock clock(100);
  Timers t(&clock);
  t.Arm("late", 5);
  t.Arm("early", 1);
  t.ArmIfIdle("early", 10);  // already armed: the earlier deadline stays
  EXPECT_DOUBLE_EQ(t.Until(60), 1);
  EXPECT_DOUBLE_EQ(t.Remaining("late"), 5);
  EXPECT_EQ(t.Remaining("none"), -1);
  EXPECT_TRUE(t.TakeExpired().empty());
  clock.Advance(6);
  EXPECT_EQ(t.TakeExpired(), (std::vector<std::string>{"early", "late"}));
  EXPECT_FALSE(t.Armed("early"));
  EXPECT_DOUBLE_EQ(t.Until(0.25), 0.25);  // nothing armed: the cap
  t.Arm("x", 2);
  EXPECT_FALSE(t.TakeIfExpired("x"));
  clock.SleepFor(2);
  EXPECT_TRUE(t.TakeIfExpired("x"));
  EXPECT_FALSE(t.TakeIfExpired("x"));
  t.Arm("y", 1);
  t.Disarm("y");
  EXPECT_FALSE(t.Armed("y"));
}

TEST(FakeClock, WaitReadableAdvancesOnlyWhenNothingIsReady) {
  FakeClock clock(10);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  Fd r(p[0]), w(p[1]);
  EXPECT_TRUE(clock.WaitReadable({r.get()}, 3).empty());
  EXPECT_DOUBLE_EQ(clock.NowMono(), 13);
  ASSERT_EQ(write(w.get(), "x", 1), 1);
  EXPECT_EQ(clock.WaitReadable({r.get()}, 3), std::vector<int>{r.get()});
  EXPECT_DOUBLE_EQ(clock.NowMono(), 13);  // something was ready: no time passed
}

TEST(FakeProcesses, SignalsActLikeTheKernelAndReapReportsOnce) {
  testing::FakeProcesses procs;
  SpawnOptions o;
  o.argv = {"python3", "train.py"};
  o.stdin_pipe = true;
  auto c = procs.Spawn(o);
  ASSERT_TRUE(c.ok());
  EXPECT_GE(c->pid, 900000);
  EXPECT_EQ(c->pgid, c->pid);
  ASSERT_TRUE(procs.Print(c->pid, "hello\n"));
  bool eof = false;
  EXPECT_EQ(ReadAvailable(c->output.get(), &eof), "hello\n");
  ASSERT_EQ(write(c->input.get(), "{}\n", 3), 3);
  EXPECT_EQ(procs.ReadStdin(c->pid), "{}\n");
  ASSERT_TRUE(procs.Signal(c->pid, SIGSTOP).ok());
  EXPECT_EQ(procs.State(c->pid), 'T');
  ASSERT_TRUE(procs.Signal(c->pid, SIGCONT).ok());
  EXPECT_EQ(procs.State(c->pid), 'R');
  procs.IgnoreTerm(c->pid);
  ASSERT_TRUE(procs.SignalGroup(c->pgid, SIGTERM).ok());
  EXPECT_TRUE(procs.GroupAlive(c->pgid));
  EXPECT_FALSE(procs.Reap(c->pid).has_value());
  ASSERT_TRUE(procs.SignalGroup(c->pgid, SIGKILL).ok());
  EXPECT_FALSE(procs.GroupAlive(c->pgid));
  auto e = procs.Reap(c->pid);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_FALSE(procs.Reap(c->pid).has_value());
  EXPECT_EQ(procs.State(c->pid), '?');
  EXPECT_EQ(procs.Signals(c->pid), (std::vector<int>{SIGSTOP, SIGCONT, SIGTERM, SIGKILL}));
  auto d = procs.Spawn(o);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(procs.Exit(d->pid, 3));
  ReadAvailable(d->output.get(), &eof);
  EXPECT_TRUE(eof);  // a dead process's output reaches EOF
  EXPECT_EQ(procs.Reap(d->pid)->code, 3);
  EXPECT_EQ(procs.Spawned(), (std::vector<pid_t>{c->pid, d->pid}));
}

TEST(ResultTest, ReadingTheValueOfAnErrorAbortsWithTheStatus) {
  Result<int> ok = 7;
  EXPECT_EQ(*ok, 7);
  Result<std::string> bad = NotFound("no such thing");
  EXPECT_FALSE(bad.ok());
  EXPECT_DEATH((void)bad.value(), "value of an error Result was read.*NOT_FOUND.*no such thing");
  EXPECT_DEATH((void)bad->size(), "no such thing");
}

}  // namespace
}  // namespace bulwark
