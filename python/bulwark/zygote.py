"""The node's fork server ("zygote") for rank processes.

The node agent starts `python [options] -m bulwark.zygote` with the job's environment
and one end of a stream socketpair as fd 3 (docs/agent.md, "Warm ranks"). It imports
what a rank needs once (bulwark.warm.preimport: torch, the SDK, the script's top-level
imports), says `zygote_ready` on the agent socket, and then serves fork requests, so a
node imports torch once instead of once per rank, and a warm rank costs a fork.

Protocol (the agent's side is ForkFromServer in src/common/proc.cc):

  agent -> zygote   "fork\\n" with two descriptors (SCM_RIGHTS): the read end of the new
                    process's stdin pipe and the write end of its output pipe.
  zygote -> agent   "pid N\\n", or "error TEXT\\n" when no process was made.

One request at a time; the zygote answers each before reading the next. It exits when
the agent closes the channel (or with the agent: parent-death signal).

Each request is served by a double fork: the zygote forks an intermediate, which forks
the new process, makes it lead its own process group, writes its pid to the zygote and
exits. The new process is thereby orphaned and reparented to the agent, which is a
child subreaper; the zygote replies only after it has reaped the intermediate, so by the
time the agent reads "pid N", N is the agent's own child (waitpid works, and an early
exit leaves a zombie for the agent, never for anyone else). The new process points fd
0, 1 and 2 at the two descriptors, waits until its parent is the agent, asks for
SIGKILL when the agent dies (PR_SET_PDEATHSIG, which fork does not inherit), reseeds
NumPy's global generator (fork copies it; a new interpreter would have drawn fresh
entropy), says `warm_ready` and becomes a warm rank (bulwark.warm.become_assigned).

Fork safety: the zygote starts no thread of its own, store or process group and runs
no tensor operation; the only thread an import may have started is OpenBLAS's pool,
whose fork handlers make it safe. A new process gets only the forking thread.
"""
import ctypes
import os
import signal
import socket
import sys
import time

from bulwark import warm

CONTROL_FD = 3
_PR_SET_PDEATHSIG = 1
_REPARENT_TIMEOUT_S = 5.0


def _reply(ctl, text):
    try:
        ctl.sendall(text.encode())
    except OSError:
        sys.exit(0)  # the agent is gone


def _read_all(fd):
    data = b""
    while True:
        chunk = os.read(fd, 256)
        if not chunk:
            return data
        data += chunk


def serve(ctl):
    """Serves fork requests until the agent closes the channel (returns None there).

    Returns (stdin_fd, output_fd) in a new process, which then leaves the loop."""
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 64, 2)
        except OSError:
            return None
        if not msg:
            return None
        if msg != b"fork\n" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            _reply(ctl, f"error bad request {msg[:32]!r} with {len(fds)} descriptors\n")
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        try:
            mid = os.fork()
        except OSError as e:
            for fd in fds + [r, w]:
                os.close(fd)
            _reply(ctl, f"error fork: {e}\n")
            continue
        if mid == 0:  # the intermediate
            os.close(r)
            try:
                pid = os.fork()
            except OSError as e:
                os.write(w, f"error fork: {e}\n".encode())
                os._exit(1)
            if pid == 0:  # the new process
                os.close(w)
                return fds[0], fds[1]
            try:
                os.setpgid(pid, pid)
            except OSError:
                pass  # it did so itself already
            os.write(w, f"pid {pid}\n".encode())
            os._exit(0)
        os.close(w)
        for fd in fds:
            os.close(fd)
        answer = _read_all(r).decode(errors="replace").strip()
        os.close(r)
        os.waitpid(mid, 0)
        if not answer.startswith("pid ") and not answer.startswith("error "):
            answer = "error the intermediate process died without an answer"
        _reply(ctl, answer + "\n")


def _become_warm(ctl, agent, libc, stdin_fd, output_fd):
    os.dup2(stdin_fd, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.close(stdin_fd)
    os.close(output_fd)
    ctl.close()
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    deadline = time.monotonic() + _REPARENT_TIMEOUT_S
    while os.getppid() != agent:
        if time.monotonic() > deadline:
            print(f"bulwark.zygote: pid {os.getpid()} was not reparented to the agent "
                  f"(pid {agent}; parent now {os.getppid()}): is it a child subreaper?",
                  file=sys.stderr, flush=True)
            os._exit(1)
        time.sleep(0.0005)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != agent:
        os._exit(1)  # the agent died before the request took
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()
    warm.say_ready()
    return warm.become_assigned()


def main():
    agent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        ctl = socket.socket(fileno=CONTROL_FD)
    except OSError as e:
        print(f"bulwark.zygote: no control channel on fd {CONTROL_FD}: {e}", file=sys.stderr)
        return 2
    warm.preimport()
    warm.send_agent({"type": "zygote_ready", "pid": os.getpid()})
    child = serve(ctl)
    if child is None:
        return 0
    return _become_warm(ctl, agent, libc, *child)


if __name__ == "__main__":
    sys.exit(main())
