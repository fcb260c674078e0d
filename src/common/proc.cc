#include "common/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/clock.h"

extern char** environ;

namespace bulwark {
namespace {

ExitInfo FromWaitStatus(int st) {
  ExitInfo e;
  if (WIFEXITED(st)) e.code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) {
    e.signal = WTERMSIG(st);
    e.code = 128 + e.signal;
  }
  return e;
}

}  // namespace

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string ExitInfo::Describe() const {
  if (signal) return SignalName(signal);
  return "exit " + std::to_string(code);
}

std::map<std::string, std::string> CurrentEnv() {
  std::map<std::string, std::string> m;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

Result<Child> Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return InvalidArgument("spawn: empty command");
  // Everything the child needs is prepared before fork: only async-signal-safe calls after.
  std::vector<std::string> envs;
  for (const auto& [k, v] : opts.env) envs.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = opts.argv[0];
  std::vector<std::string> candidates;
  if (exe.find('/') != std::string::npos) {
    candidates.push_back(exe);
  } else {
    auto it = opts.env.find("PATH");
    std::string path = it != opts.env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (!dir.empty()) candidates.push_back(dir + "/" + exe);
    }
  }
  bool found = false;
  for (const auto& c : candidates) found = found || access(c.c_str(), X_OK) == 0;
  if (!found) {
    return NotFound("spawn: command '" + exe +
                    "' not found or not executable; give an absolute path or fix PATH");
  }
  int pipefd[2] = {-1, -1};
  if (opts.capture_output && pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  Fd out_r(pipefd[0]), out_w(pipefd[1]);  // closed on every early return
  int inpipe[2] = {-1, -1};
  if (opts.stdin_pipe && pipe2(inpipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  Fd in_r(inpipe[0]), in_w(inpipe[1]);
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(errpipe[0]);
    close(errpipe[1]);
    return ErrnoStatus("fork", e);
  }
  if (pid == 0) {
    if (opts.new_process_group) setpgid(0, 0);
    if (opts.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int s = 1; s < 32; ++s) {
      if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    }
    if (opts.capture_output) {
      dup2(pipefd[1], 1);
      dup2(pipefd[1], 2);
    }
    if (opts.stdin_pipe) dup2(inpipe[0], 0);
    int errfd = errpipe[1];
    if (opts.control_fd >= 0) {
      if (errfd == 3) errfd = fcntl(errfd, F_DUPFD_CLOEXEC, 4);
      if (opts.control_fd == 3) {
        fcntl(3, F_SETFD, 0);
      } else {
        dup2(opts.control_fd, 3);
      }
    }
    if (!opts.workdir.empty() && chdir(opts.workdir.c_str()) != 0) {
      int e = errno;
      (void)!write(errfd, &e, sizeof(e));
      _exit(127);
    }
    for (const auto& c : candidates) execve(c.c_str(), argv.data(), envp.data());
    int e = errno;
    (void)!write(errfd, &e, sizeof(e));
    _exit(127);
  }
  if (opts.new_process_group) setpgid(pid, pid);  // close the race with the child's setpgid
  close(errpipe[1]);
  int child_errno = 0;
  ssize_t n = read(errpipe[0], &child_errno, sizeof(child_errno));
  close(errpipe[0]);
  Child c;
  c.pid = pid;
  c.pgid = opts.new_process_group ? pid : getpgid(0);
  out_w.Reset();
  in_r.Reset();
  if (opts.capture_output) {
    fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
    c.output = std::move(out_r);
  }
  if (opts.stdin_pipe) {
    fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
    c.input = std::move(in_w);
  }
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    WaitExit(pid, 5);
    return ErrnoStatus("spawn '" + exe + "' in '" + opts.workdir + "'", child_errno);
  }
  return c;
}

Result<Child> ForkFromServer(int server_fd, double timeout_s) {
  int inpipe[2], outpipe[2];
  if (pipe2(inpipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  Fd in_r(inpipe[0]), in_w(inpipe[1]);
  if (pipe2(outpipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  Fd out_r(outpipe[0]), out_w(outpipe[1]);
  static const char kRequest[] = "fork\n";
  iovec iov{const_cast<char*>(kRequest), sizeof(kRequest) - 1};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {in_r.get(), out_w.get()};
  memcpy(CMSG_DATA(cm), fds, sizeof(fds));
  ssize_t sent;
  do {
    sent = sendmsg(server_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(iov.iov_len)) {
    return sent < 0 ? ErrnoStatus("send to the fork server", errno)
                    : Unavailable("fork server: short send");
  }
  in_r.Reset();  // the server holds its copies now
  out_w.Reset();
  const double deadline = SystemClock::Get()->NowMono() + timeout_s;
  std::string reply;
  while (reply.find('\n') == std::string::npos) {
    const double left = deadline - SystemClock::Get()->NowMono();
    if (left <= 0) {
      char what[96];
      snprintf(what, sizeof what, "fork server: no reply within %.1f s", timeout_s);
      return DeadlineExceeded(what);
    }
    pollfd p{server_fd, POLLIN, 0};
    const int pr = poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (pr < 0 && errno != EINTR) return ErrnoStatus("poll the fork server", errno);
    if (pr <= 0) continue;
    char buf[256];
    const ssize_t n = recv(server_fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return Unavailable("fork server: closed its channel (it exited)");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus("read from the fork server", errno);
    }
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() > 4096) return DataLoss("fork server: reply without a newline");
  }
  reply.resize(reply.find('\n'));
  if (reply.rfind("error ", 0) == 0) return Unavailable("fork server: " + reply.substr(6));
  char* end = nullptr;
  const long pid = reply.rfind("pid ", 0) == 0 ? std::strtol(reply.c_str() + 4, &end, 10) : 0;
  if (pid <= 1 || !end || *end != '\0') {
    return DataLoss("fork server: malformed reply '" + reply + "' (want 'pid N')");
  }
  fcntl(out_r.get(), F_SETFL, O_NONBLOCK);
  fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  Child c;
  c.pid = static_cast<pid_t>(pid);
  c.pgid = c.pid;
  c.output = std::move(out_r);
  c.input = std::move(in_w);
  return c;
}

std::optional<ExitInfo> Reap(pid_t pid) {
  int st = 0;
  pid_t r = waitpid(pid, &st, WNOHANG);
  if (r == pid) return FromWaitStatus(st);
  if (r < 0 && errno == ECHILD) return ExitInfo{0, 0};  // already reaped elsewhere
  return std::nullopt;
}

std::optional<ExitInfo> WaitExit(pid_t pid, double timeout_s) {
  double deadline = SystemClock::Get()->NowMono() + timeout_s;
  while (true) {
    auto e = Reap(pid);
    if (e) return e;
    if (SystemClock::Get()->NowMono() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status SignalGroup(pid_t pgid, int sig) {
  if (pgid <= 1) return InvalidArgument("refusing to signal process group " + std::to_string(pgid));
  if (kill(-pgid, sig) != 0 && errno != ESRCH)
    return ErrnoStatus("kill -" + std::to_string(pgid), errno);
  return Status::Ok();
}

bool GroupAlive(pid_t pgid) { return pgid > 1 && (kill(-pgid, 0) == 0 || errno == EPERM); }

ExitInfo TerminateGroup(pid_t pid, pid_t pgid, double grace_s) {
  IgnoreError(SignalGroup(pgid, SIGTERM), "the process may be gone already");
  IgnoreError(SignalGroup(pgid, SIGCONT),
              "the process may be gone already");  // a stopped process must run to see SIGTERM
  auto e = WaitExit(pid, grace_s);
  IgnoreError(SignalGroup(pgid, SIGKILL),
              "the process may be gone already");  // also the leader's stragglers
  if (!e) e = WaitExit(pid, 5);
  return e.value_or(ExitInfo{137, SIGKILL});
}

std::string ReadAvailable(int fd, bool* eof) {
  std::string out;
  char buf[16384];
  if (eof) *eof = false;
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      if (out.size() > (1u << 20)) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && eof) *eof = true;
    break;
  }
  return out;
}

char ProcState(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(f, s)) return '?';
  size_t rp = s.rfind(')');
  if (rp == std::string::npos || rp + 2 >= s.size()) return '?';
  return s[rp + 2];
}

Status BecomeSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    return ErrnoStatus("prctl(PR_SET_CHILD_SUBREAPER)", errno);
  return Status::Ok();
}

namespace {

// Children of this process as (pid, state letter), from /proc.
std::vector<std::pair<pid_t, char>> ListChildren() {
  std::vector<std::pair<pid_t, char>> kids;
  pid_t self = getpid();
  DIR* d = opendir("/proc");
  if (!d) return kids;
  while (dirent* de = readdir(d)) {
    pid_t p = static_cast<pid_t>(atoi(de->d_name));
    if (p <= 0) continue;
    std::ifstream f(std::string("/proc/") + de->d_name + "/stat");
    std::string s;
    if (!std::getline(f, s)) continue;
    size_t rp = s.rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream rest(s.substr(rp + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == self) kids.emplace_back(p, state);
  }
  closedir(d);
  return kids;
}

}  // namespace

int ReapZombieChildren(const std::set<pid_t>& keep) {
  // The usual case costs one syscall: waitid(WNOWAIT) names an exited child without
  // reaping it, and one nobody keeps is reaped. Only when the child it names is kept
  // (the kernel would name it again and again) are the others found by a /proc scan,
  // which costs a read per process on the machine.
  int n = 0;
  for (int peeks = 0; peeks < 4096; ++peeks) {  // bounded: a child another thread reaps first
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return n;
    if (keep.count(info.si_pid)) break;
    if (waitpid(info.si_pid, nullptr, WNOHANG) == info.si_pid) ++n;
  }
  for (auto [pid, state] : ListChildren()) {
    if (state == 'Z' && !keep.count(pid) && waitpid(pid, nullptr, WNOHANG) == pid) ++n;
  }
  return n;
}

int KillAndReapAllChildren() {
  int killed = 0;
  ReapZombieChildren({});  // already dead: not leftovers
  for (int round = 0; round < 50; ++round) {
    std::vector<pid_t> kids;
    for (auto [pid, state] : ListChildren()) {
      if (state != 'Z') kids.push_back(pid);
    }
    if (kids.empty()) break;
    for (pid_t k : kids) {
      if (kill(k, SIGKILL) == 0) ++killed;
    }
    for (pid_t k : kids) WaitExit(k, 2);
  }
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return killed;
}

namespace {

class RealProcesses : public Processes {
 public:
  Result<Child> Spawn(const SpawnOptions& opts) override { return bulwark::Spawn(opts); }
  Result<Child> ForkFrom(pid_t server_pid, int server_fd, double timeout_s) override {
    (void)server_pid;
    return ForkFromServer(server_fd, timeout_s);
  }
  std::optional<ExitInfo> Reap(pid_t pid) override { return bulwark::Reap(pid); }
  Status Signal(pid_t pid, int sig) override {
    if (::kill(pid, sig) == 0 || errno == ESRCH) return Status::Ok();
    return ErrnoStatus("kill " + std::to_string(pid), errno);
  }
  Status SignalGroup(pid_t pgid, int sig) override { return bulwark::SignalGroup(pgid, sig); }
  bool GroupAlive(pid_t pgid) override { return bulwark::GroupAlive(pgid); }
  char State(pid_t pid) override { return ProcState(pid); }
  int ReapOrphans(const std::set<pid_t>& keep) override { return ReapZombieChildren(keep); }
};

}  // namespace

Processes* Processes::Real() {
  static RealProcesses* p = new RealProcesses();
  return p;
}

}  // namespace bulwark
