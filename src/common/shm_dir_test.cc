#include "common/shm_dir.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace bulwark {
namespace {

namespace fs = std::filesystem;

class ShmDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("bw-shm-dir-test-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }

  // A child process that takes the directory and dies with SIGKILL, as a lost agent.
  void DieOwning(const std::string& name) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FakeClock c;
      auto lease = AcquireShmDir(root(), name, &c, 0);
      if (!lease.ok()) ::_exit(1);
      std::ofstream(lease->path + "/replica.bin") << std::string(4096, 'x');
      char b = 1;
      if (::write(ready[1], &b, 1) != 1) ::_exit(2);
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char b = 0;
    ASSERT_EQ(::read(ready[0], &b, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  }

  fs::path root_;
  FakeClock clock_;
};

TEST_F(ShmDirTest, NameIsStableAndPerRunAndNode) {
  EXPECT_EQ(ShmDirName("/runs/a", "node-0"), ShmDirName("/runs/a", "node-0"));
  EXPECT_NE(ShmDirName("/runs/a", "node-0"), ShmDirName("/runs/b", "node-0"));
  EXPECT_NE(ShmDirName("/runs/a", "node-0"), ShmDirName("/runs/a", "node-1"));
  EXPECT_EQ(ShmDirName("/runs/a", "node-0").rfind("bulwark-", 0), 0u);
  EXPECT_EQ(ShmDirName("", "n"),
            "bulwark-" + std::to_string(1469598103934665603ull % 1000000007ull) + "-n");
}

TEST_F(ShmDirTest, ASecondOwnerWaitsItsBudgetThenFailsNamingTheDirectory) {
  auto a = AcquireShmDir(root(), "bulwark-1-node-0", &clock_, 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(fs::exists(a->path + "/.owner"));
  const double t0 = clock_.NowMono();
  auto b = AcquireShmDir(root(), "bulwark-1-node-0", &clock_, 2);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(b.status().message().find(a->path), std::string::npos) << b.status().ToString();
  EXPECT_GE(clock_.NowMono() - t0, 2.0);  // it waited, on the injected clock
  // Released: the next owner takes the same directory with its contents.
  std::ofstream(a->path + "/kept") << "x";
  a->lock.Reset();
  auto c = AcquireShmDir(root(), "bulwark-1-node-0", &clock_, 0);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(fs::exists(c->path + "/kept"));
  ASSERT_TRUE(c->Remove().ok());
  EXPECT_FALSE(fs::exists(c->path));
}

TEST_F(ShmDirTest, SweepRemovesTheDirectoryOfAKilledOwnerOnly) {
  DieOwning("bulwark-7-node-0");
  auto live = AcquireShmDir(root(), "bulwark-7-node-1", &clock_, 0);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  fs::create_directories(root_ / "other-program");  // not ours: other names

  ASSERT_TRUE(fs::exists(root_ / "bulwark-7-node-0/replica.bin"));
  EXPECT_EQ(SweepAbandonedShmDirs(root(), &clock_), 1);
  EXPECT_FALSE(fs::exists(root_ / "bulwark-7-node-0"));
  EXPECT_TRUE(fs::exists(root_ / "bulwark-7-node-1/.owner"));
  EXPECT_TRUE(fs::exists(root_ / "other-program"));

  for (const auto& e : fs::directory_iterator(root_)) {
    EXPECT_EQ(e.path().filename().string().rfind(".bulwark-trash-", 0), std::string::npos);
  }
  EXPECT_EQ(SweepAbandonedShmDirs(root(), &clock_), 0);
}

TEST_F(ShmDirTest, UnownedDirectoriesWaitAnHourAndTrashIsAlwaysRemoved) {
  fs::create_directories(root_ / "bulwark-3-node-0");  // an older version's, or being made
  fs::create_directories(root_ / "bulwark-fuzz-0");    // other programs' names
  fs::create_directories(root_ / "bulwark-12-");
  fs::create_directories(root_ / ".bulwark-trash-1-0-bulwark-2-node-0/sub");
  EXPECT_EQ(SweepAbandonedShmDirs(root(), &clock_), 1);
  EXPECT_TRUE(fs::exists(root_ / "bulwark-3-node-0"));
  EXPECT_FALSE(fs::exists(root_ / ".bulwark-trash-1-0-bulwark-2-node-0"));
  struct stat st;
  ASSERT_EQ(::stat((root_ / "bulwark-3-node-0").c_str(), &st), 0);
  FakeClock later(0, static_cast<double>(st.st_mtime) + 3601);
  EXPECT_EQ(SweepAbandonedShmDirs(root(), &later), 1);
  EXPECT_FALSE(fs::exists(root_ / "bulwark-3-node-0"));
  EXPECT_TRUE(fs::exists(root_ / "bulwark-fuzz-0"));
  EXPECT_TRUE(fs::exists(root_ / "bulwark-12-"));
}

// The race the protocol is for: owners taking and releasing one name while sweepers
// run. Whenever an owner holds its lease, the file it locked is the directory's
// .owner (nobody swept the directory from under it).
TEST_F(ShmDirTest, ASweepNeverRemovesADirectoryWhileItsOwnerHoldsIt) {
  std::atomic<bool> stop{false};
  std::thread sweeper([&] {
    FakeClock c;
    while (!stop) SweepAbandonedShmDirs(root(), &c);
  });
  // The owner waits on the real clock: a sweeper descheduled while it holds .owner's lock
  // (a loaded machine) must not exhaust the wait in no time, as a fake clock's sleeps do.
  const Clock* real = SystemClock::Get();
  int swept_under = 0;
  for (int i = 0; i < 300; ++i) {
    auto lease = AcquireShmDir(root(), "bulwark-9-node-0", real, 10);
    if (!lease.ok()) {
      ADD_FAILURE() << lease.status().ToString();
      break;  // the sweeper is stopped and joined below
    }
    std::ofstream(lease->path + "/data") << i;
    struct stat a, b;
    if (::fstat(lease->lock.get(), &a) != 0) {
      ADD_FAILURE() << "fstat of the lease's lock: " << std::strerror(errno);
      break;
    }
    if (::stat((lease->path + "/.owner").c_str(), &b) != 0 || a.st_ino != b.st_ino) ++swept_under;
    std::ifstream in(lease->path + "/data");
    int got = -1;
    in >> got;
    if (got != i) ++swept_under;
  }
  stop = true;
  sweeper.join();
  EXPECT_EQ(swept_under, 0);
}

}  // namespace
}  // namespace bulwark
