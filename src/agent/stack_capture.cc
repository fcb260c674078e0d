#include "agent/stack_capture.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/proc.h"

namespace bulwark {
namespace {

constexpr size_t kMaxStackBytes = 64 * 1024;

long FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<long>(st.st_size) : 0;
}

std::string ReadFrom(const std::string& path, long offset) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(offset);
  std::string s(kMaxStackBytes, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

void Nap(const Clock* clock, const std::function<void()>& tick) {
  if (tick) tick();
  clock->SleepFor(0.02);
}

std::string StateName(char s) {
  switch (s) {
    case 'R':
      return "R (running)";
    case 'S':
      return "S (sleeping)";
    case 'D':
      return "D (uninterruptible I/O wait)";
    case 'T':
      return "T (stopped)";
    case 't':
      return "t (traced)";
    case 'Z':
      return "Z (zombie)";
    case '?':
      return "? (gone)";
    default:
      return std::string(1, s);
  }
}

// Runs gdb against `pid`, returning its output (or why there is none) by `deadline`.
std::string RunGdb(Processes* procs, const std::string& gdb, pid_t pid, double timeout_s,
                   const Clock* clock, const std::function<void()>& tick) {
  SpawnOptions o;
  o.argv = {gdb, "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt"};
  o.env = CurrentEnv();
  auto child = procs->Spawn(o);
  if (!child.ok()) return "gdb failed to start: " + child.status().message() + "\n";
  std::string out;
  bool eof = false;
  const double deadline = clock->NowMono() + timeout_s;
  while (!eof && clock->NowMono() < deadline) {
    out += ReadAvailable(child->output.get(), &eof);
    if (out.size() > kMaxStackBytes) break;
    if (!eof) Nap(clock, tick);
  }
  bool timed_out = !eof;
  IgnoreError(procs->SignalGroup(child->pgid, SIGKILL), "the process may be gone already");
  for (const double until = clock->NowMono() + 2;
       !procs->Reap(child->pid) && clock->NowMono() < until;) {
    clock->SleepFor(0.01);
  }
  if (out.size() > kMaxStackBytes) out.resize(kMaxStackBytes);
  if (timed_out) out += "\n[gdb killed after " + std::to_string(timeout_s) + " s]\n";
  return out;
}

}  // namespace

bool CatchesSignal(pid_t pid, int sig) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
    return (mask >> (sig - 1)) & 1ULL;
  }
  return false;
}

std::string ReadWchan(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/wchan");
  std::string s;
  std::getline(f, s);
  return s == "0" ? "" : s;
}

std::map<int, RankStack> CaptureStacks(const std::vector<StackTarget>& targets,
                                       const StackCaptureOptions& opts, const Clock* clock,
                                       const std::function<void()>& tick) {
  Processes* procs = opts.procs ? opts.procs : Processes::Real();
  const double start = clock->NowMono();
  struct Work {
    StackTarget t;
    long offset = 0;
    bool signalled = false;
    bool restopped = false;
    std::string header;
  };
  std::vector<Work> work;
  std::map<int, RankStack> out;
  for (const auto& t : targets) {
    Work w;
    w.t = t;
    RankStack& rs = out[t.rank];
    rs.state = procs->State(t.pid);
    std::ostringstream h;
    h << "pid " << t.pid << ", state " << StateName(rs.state);
    std::string wchan = ReadWchan(t.pid);
    if (!wchan.empty()) h << ", wchan " << wchan;
    h << "\n";
    w.offset = FileSize(t.stack_file);
    if (rs.state != '?' && rs.state != 'Z' && CatchesSignal(t.pid, SIGUSR1)) {
      w.signalled = procs->Signal(t.pid, SIGUSR1).ok();
      if (rs.state == 'T') {
        IgnoreError(procs->Signal(t.pid, SIGCONT), "the process may be gone already");
        h << "process was stopped (SIGSTOP); resumed to dump its stack, then stopped again\n";
      }
    } else if (rs.state == 'T') {
      h << "process is stopped (SIGSTOP)\n";
    }
    w.header = h.str();
    work.push_back(std::move(w));
  }
  // Wait for the faulthandler dumps: a file that grew and then held still for one poll.
  std::map<int, long> last_size;
  const double py_deadline = start + std::min(opts.python_wait_s, opts.budget_s);
  while (clock->NowMono() < py_deadline) {
    bool pending = false;
    for (auto& w : work) {
      if (!w.signalled) continue;
      long size = FileSize(w.t.stack_file);
      bool done = size > w.offset && last_size[w.t.rank] == size;
      last_size[w.t.rank] = size;
      if (done && out[w.t.rank].state == 'T' && !w.restopped) {
        IgnoreError(procs->Signal(w.t.pid, SIGSTOP), "the process may be gone already");
        w.restopped = true;
      }
      pending = pending || !done;
    }
    if (!pending) break;
    Nap(clock, tick);
  }
  for (auto& w : work) {
    RankStack& rs = out[w.t.rank];
    if (rs.state == 'T' && w.signalled && !w.restopped) {
      IgnoreError(procs->Signal(w.t.pid, SIGSTOP), "the process may be gone already");
    }
    std::string py = w.signalled ? ReadFrom(w.t.stack_file, w.offset) : "";
    rs.python_dump = !py.empty();
    rs.text = w.header;
    if (rs.python_dump) {
      rs.text += "--- Python stacks (faulthandler) ---\n" + py;
      continue;
    }
    rs.text += w.signalled ? "no Python stack dump within the wait (SIGUSR1 sent)\n"
                           : "no Python stack dump: the process does not handle SIGUSR1 "
                             "(not Python, or faulthandler not registered)\n";
    double left = opts.budget_s - (clock->NowMono() - start);
    if (opts.gdb_path.empty() || ::access(opts.gdb_path.c_str(), X_OK) != 0) {
      rs.text += "native stacks unavailable: gdb not installed\n";
    } else if (left < 0.3 || rs.state == '?' || rs.state == 'Z') {
      rs.text += "native stacks skipped: no time left in the capture budget\n";
    } else {
      rs.text +=
          "--- native stacks (gdb) ---\n" +
          RunGdb(procs, opts.gdb_path, w.t.pid, std::min(opts.gdb_timeout_s, left), clock, tick);
    }
  }
  return out;
}

}  // namespace bulwark
