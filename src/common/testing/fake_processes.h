// FakeProcesses: a scripted process table for unit tests of process supervisors (the
// agent). Spawn records the request and returns a fake pid (>= 900000, never a real
// process) whose output is a real pipe the test writes to and whose stdin, when asked
// for, is a real pipe the test reads. Signals act as the kernel would on a process
// with default handlers: SIGKILL (and SIGTERM, unless the test made the process
// ignore it) kills, SIGSTOP stops, SIGCONT resumes. Reap reports a death once.
//
// Thread-safe. Each fake process leads its own group (pgid == pid).
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/proc.h"

namespace bulwark::testing {

class FakeProcesses : public Processes {
 public:
  struct Proc {
    pid_t pid = -1;
    SpawnOptions opts;
    char state = 'R';  // 'R', 'T' (stopped), 'Z' (dead, not reaped), '?' (reaped)
    ExitInfo exit;
    bool ignore_term = false;
    std::vector<int> signals;  // every signal delivered, in order
    Fd out_w;                  // the test's end of the output pipe
    Fd in_r;                   // the test's end of the stdin pipe
  };

  Result<Child> Spawn(const SpawnOptions& opts) override;
  // A new process as Spawn with stdin_pipe makes, recorded with argv {"fork-of", "<server
  // pid>"}; UNAVAILABLE when the server is not alive or the test made its forks fail.
  Result<Child> ForkFrom(pid_t server_pid, int server_fd, double timeout_s) override;
  std::optional<ExitInfo> Reap(pid_t pid) override;
  Status Signal(pid_t pid, int sig) override;
  Status SignalGroup(pid_t pgid, int sig) override { return Signal(pgid, sig); }
  bool GroupAlive(pid_t pgid) override;
  char State(pid_t pid) override;
  int ReapOrphans(const std::set<pid_t>& keep) override {
    (void)keep;
    return 0;
  }

  // Test controls. Unknown pids are ignored (false / empty).
  std::vector<pid_t> Spawned() const;  // in spawn order
  // The argv/env of a spawned process.
  SpawnOptions Options(pid_t pid) const;
  std::vector<int> Signals(pid_t pid) const;
  // The process exits by itself with `code`.
  bool Exit(pid_t pid, int code);
  void IgnoreTerm(pid_t pid);
  // ForkFrom(pid, ...) fails from now on.
  void FailForks(pid_t server_pid);
  // Writes `text` to the process's output pipe (as if it printed it).
  bool Print(pid_t pid, const std::string& text);
  // Everything written to the process's stdin so far (non-blocking read).
  std::string ReadStdin(pid_t pid);
  bool Alive(pid_t pid) const;

 private:
  Proc* Find(pid_t pid);
  const Proc* Find(pid_t pid) const;
  void Die(Proc& p, ExitInfo e);

  mutable std::mutex mu_;
  pid_t next_pid_ = 900000;
  std::map<pid_t, Proc> procs_;
  std::vector<pid_t> order_;
  std::map<pid_t, std::string> stdin_;
  std::set<pid_t> failing_servers_;
};

}  // namespace bulwark::testing
