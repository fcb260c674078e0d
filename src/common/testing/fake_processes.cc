#include "common/testing/fake_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace bulwark::testing {

FakeProcesses::Proc* FakeProcesses::Find(pid_t pid) {
  auto it = procs_.find(pid);
  return it == procs_.end() ? nullptr : &it->second;
}

const FakeProcesses::Proc* FakeProcesses::Find(pid_t pid) const {
  auto it = procs_.find(pid);
  return it == procs_.end() ? nullptr : &it->second;
}

void FakeProcesses::Die(Proc& p, ExitInfo e) {
  if (p.state == 'Z' || p.state == '?') return;
  p.state = 'Z';
  p.exit = e;
  p.out_w.Reset();  // the output pipe reaches EOF, as when a real process dies
}

Result<Child> FakeProcesses::Spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return InvalidArgument("spawn: empty command");
  std::lock_guard<std::mutex> l(mu_);
  Proc p;
  p.pid = next_pid_++;
  p.opts = opts;
  Child c;
  c.pid = p.pid;
  c.pgid = p.pid;
  int fds[2];
  if (opts.capture_output) {
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe", errno);
    c.output.Reset(fds[0]);
    p.out_w.Reset(fds[1]);
  }
  if (opts.stdin_pipe) {
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe", errno);
    p.in_r.Reset(fds[0]);
    c.input.Reset(fds[1]);
  }
  order_.push_back(p.pid);
  const pid_t pid = p.pid;
  procs_.emplace(pid, std::move(p));
  return c;
}

Result<Child> FakeProcesses::ForkFrom(pid_t server_pid, int server_fd, double timeout_s) {
  (void)server_fd;
  (void)timeout_s;
  {
    std::lock_guard<std::mutex> l(mu_);
    const Proc* server = Find(server_pid);
    if (!server || server->state == 'Z' || server->state == '?') {
      return Unavailable("fork server: closed its channel (it exited)");
    }
    if (failing_servers_.count(server_pid)) return Unavailable("fork server: scripted failure");
  }
  SpawnOptions opts;
  opts.argv = {"fork-of", std::to_string(server_pid)};
  opts.stdin_pipe = true;
  return Spawn(opts);
}

void FakeProcesses::FailForks(pid_t server_pid) {
  std::lock_guard<std::mutex> l(mu_);
  failing_servers_.insert(server_pid);
}

std::optional<ExitInfo> FakeProcesses::Reap(pid_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  Proc* p = Find(pid);
  if (!p || p->state != 'Z') return std::nullopt;
  p->state = '?';
  return p->exit;
}

Status FakeProcesses::Signal(pid_t pid, int sig) {
  std::lock_guard<std::mutex> l(mu_);
  Proc* p = Find(pid);
  if (!p || p->state == 'Z' || p->state == '?') return Status::Ok();
  p->signals.push_back(sig);
  ExitInfo killed;
  killed.signal = sig;
  killed.code = 128 + sig;
  switch (sig) {
    case SIGKILL:
      Die(*p, killed);
      break;
    case SIGTERM:
      if (!p->ignore_term) Die(*p, killed);
      break;
    case SIGSTOP:
      p->state = 'T';
      break;
    case SIGCONT:
      if (p->state == 'T') p->state = 'R';
      break;
    default:
      break;  // SIGUSR1 and the like: handled by the process
  }
  return Status::Ok();
}

bool FakeProcesses::GroupAlive(pid_t pgid) {
  std::lock_guard<std::mutex> l(mu_);
  const Proc* p = Find(pgid);
  return p && p->state != 'Z' && p->state != '?';
}

char FakeProcesses::State(pid_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  const Proc* p = Find(pid);
  return p ? p->state : '?';
}

std::vector<pid_t> FakeProcesses::Spawned() const {
  std::lock_guard<std::mutex> l(mu_);
  return order_;
}

SpawnOptions FakeProcesses::Options(pid_t pid) const {
  std::lock_guard<std::mutex> l(mu_);
  const Proc* p = Find(pid);
  return p ? p->opts : SpawnOptions{};
}

std::vector<int> FakeProcesses::Signals(pid_t pid) const {
  std::lock_guard<std::mutex> l(mu_);
  const Proc* p = Find(pid);
  return p ? p->signals : std::vector<int>{};
}

bool FakeProcesses::Exit(pid_t pid, int code) {
  std::lock_guard<std::mutex> l(mu_);
  Proc* p = Find(pid);
  if (!p || p->state == 'Z' || p->state == '?') return false;
  ExitInfo e;
  e.code = code;
  Die(*p, e);
  return true;
}

void FakeProcesses::IgnoreTerm(pid_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  if (Proc* p = Find(pid)) p->ignore_term = true;
}

bool FakeProcesses::Print(pid_t pid, const std::string& text) {
  std::lock_guard<std::mutex> l(mu_);
  Proc* p = Find(pid);
  if (!p || !p->out_w.valid()) return false;
  return ::write(p->out_w.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::string FakeProcesses::ReadStdin(pid_t pid) {
  std::lock_guard<std::mutex> l(mu_);
  Proc* p = Find(pid);
  if (!p || !p->in_r.valid()) return "";
  bool eof = false;
  stdin_[pid] += ReadAvailable(p->in_r.get(), &eof);
  return stdin_[pid];
}

bool FakeProcesses::Alive(pid_t pid) const {
  std::lock_guard<std::mutex> l(mu_);
  const Proc* p = Find(pid);
  return p && p->state != 'Z' && p->state != '?';
}

}  // namespace bulwark::testing
