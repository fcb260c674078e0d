// Process seam: spawn a child in its own process group with its output on a pipe,
// signal its group, reap it. Every spawned child must eventually be passed to
// Reap()/WaitExit() by its owner; nothing here reaps implicitly. Thread-safe (no
// shared state), but a given pid should be reaped by one owner.
//
// The free functions act on the OS. Components that supervise processes (the agent,
// the local backend) take a `Processes*` instead (LevelDB's Env for processes), so
// unit tests drive them with FakeProcesses (common/testing/fake_processes.h).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark {

struct SpawnOptions {
  std::vector<std::string> argv;           // argv[0] is resolved via PATH if no '/'
  std::map<std::string, std::string> env;  // the child's complete environment
  std::string workdir;                     // "" = inherit
  bool new_process_group = true;           // setpgid(0, 0): the child leads its group
  bool die_with_parent = true;             // PR_SET_PDEATHSIG(SIGKILL)
  bool capture_output = true;              // stdout+stderr -> one pipe (else inherit)
  bool stdin_pipe = false;                 // stdin <- a pipe written through Child::input
  int control_fd = -1;                     // if >= 0: the child's fd 3 (e.g. a socketpair end)
};

struct Child {
  pid_t pid = -1;
  pid_t pgid = -1;
  Fd output;  // read end of the stdout/stderr pipe (non-blocking), if captured
  Fd input;   // write end of the stdin pipe (non-blocking), if stdin_pipe
};

Result<Child> Spawn(const SpawnOptions& opts);

// Asks a fork server (python/bulwark/zygote.py, which states the protocol) on the
// stream socket `server_fd` for a child: sends "fork\n" with the read end of a new
// stdin pipe and the write end of a new output pipe (SCM_RIGHTS) and reads "pid N\n"
// (or "error TEXT\n") within timeout_s. The child leads its own process group and,
// because the server double-forks, is a child of this process once the reply arrives
// (which must be a child subreaper, BecomeSubreaper) -- Reap it like a spawned one.
// On DEADLINE_EXCEEDED or a malformed reply the server's channel is out of step: kill
// the server. Not thread-safe for one server_fd.
Result<Child> ForkFromServer(int server_fd, double timeout_s);

// The calling process's environment as a map.
std::map<std::string, std::string> CurrentEnv();

// Exit status of a reaped child.
struct ExitInfo {
  int code = 0;    // exit code if exited normally
  int signal = 0;  // terminating signal, else 0
  bool ok() const { return signal == 0 && code == 0; }
  std::string Describe() const;  // "exit 0", "exit 3", "SIGKILL"
};

// Non-blocking reap: the ExitInfo if `pid` has exited (and is now reaped).
std::optional<ExitInfo> Reap(pid_t pid);
// Blocks up to timeout_s polling for the exit; nullopt on timeout.
std::optional<ExitInfo> WaitExit(pid_t pid, double timeout_s);
// Sends sig to every process in group pgid; OK if the group is already gone.
Status SignalGroup(pid_t pgid, int sig);
// True if any process of group pgid exists.
bool GroupAlive(pid_t pgid);
// SIGTERM the group, wait up to grace_s for `pid` to exit, then SIGKILL the group and
// reap `pid`. Returns its exit info (bounded: at most grace_s + 5 s).
ExitInfo TerminateGroup(pid_t pid, pid_t pgid, double grace_s);
// Reads everything currently available from a non-blocking fd; sets *eof on EOF.
std::string ReadAvailable(int fd, bool* eof);
// Process state letter from /proc/<pid>/stat ('R', 'S', 'T', ...), or '?' if gone.
char ProcState(pid_t pid);
// Makes this process a child subreaper: orphaned descendants are reparented to it.
Status BecomeSubreaper();
// Kills (SIGKILL) and reaps every remaining live child of this process. Returns how
// many were still alive (zombies are reaped but not counted).
int KillAndReapAllChildren();
// Reaps children that have already exited (zombies), except the pids in `keep`
// (whose owners reap them to read their status). Returns how many were reaped.
int ReapZombieChildren(const std::set<pid_t>& keep);
// Signal name: "SIGKILL".
std::string SignalName(int sig);

// The process seam. Real() forwards to the functions above; FakeProcesses scripts a
// process table for tests. Implementations are thread-safe.
class Processes {
 public:
  virtual ~Processes() = default;
  virtual Result<Child> Spawn(const SpawnOptions& opts) = 0;
  // A child from the fork server `server_pid`, whose channel is `server_fd`
  // (ForkFromServer).
  virtual Result<Child> ForkFrom(pid_t server_pid, int server_fd, double timeout_s) = 0;
  // Non-blocking reap of a child: its exit once it has exited (then it is gone).
  virtual std::optional<ExitInfo> Reap(pid_t pid) = 0;
  virtual Status Signal(pid_t pid, int sig) = 0;
  // Every process of group pgid; OK if the group is gone.
  virtual Status SignalGroup(pid_t pgid, int sig) = 0;
  virtual bool GroupAlive(pid_t pgid) = 0;
  // 'R', 'S', 'T', 'Z', ...; '?' if gone.
  virtual char State(pid_t pid) = 0;
  // Reaps exited children nobody tracks (descendants reparented to a subreaper),
  // except `keep`, whose owners reap them to read their status. Returns how many.
  virtual int ReapOrphans(const std::set<pid_t>& keep) = 0;
  // The OS; a process-wide singleton.
  static Processes* Real();
};

}  // namespace bulwark
