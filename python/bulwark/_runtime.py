"""Generations: in-process recovery for `bulwark.run(train_fn)` (docs/sdk.md).

A rank runs its training function in generations. Generation N is formed from the
rank environment: the process group is created on the job's long-lived store under the
prefix `bulwark/<run id>/gen<N>/` (or, before the store exists, on MASTER_ADDR:PORT),
then `train_fn` runs. When a fault happens anywhere in the job the node agent asks this
rank to abandon the generation (an `abort` datagram); the next safe point
(`bulwark.steps`, `report_step`, `checkpoint.save`) raises `Restart`, or a collective
fails at once because a peer died. Either way the function unwinds, the process group
is destroyed, the rank reports `parked` and waits for the agent's `generation`
message, which carries its new environment (resume step, attempt, store, ...). Then
the next generation is formed and `train_fn` runs again in the same process; it loads
the agreed step with `bulwark.checkpoint.load` (from this node's memory in a few ms).

State machine of a rank (only `running` allows checkpoint calls):
    idle -> forming -> running -> (done | parked -> forming -> running ...)
Outside an agent (torchrun, or no launcher at all) `run` forms the group once with
env:// and calls the function once; errors propagate as usual.

Thread-safety: `run` is called once, from the main thread.
"""
from __future__ import annotations

import ctypes
import datetime
import gc
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, TypeVar

from bulwark import _lib, _stacks
from bulwark._lib import BulwarkError

T = TypeVar("T")

# Messages of collective failures caused by a peer that died or left (gloo, NCCL, the
# store), which a survivor recovers from by parking.
_PEER_GONE = re.compile(
    r"gloo|nccl|connection (closed|reset|refused)|broken pipe|timed out waiting|"
    r"socket timeout|store_based_barrier", re.IGNORECASE)


class Restart(BaseException):
    """Raised at a safe point when Bulwark ends the current generation (a fault
    elsewhere in the job). `bulwark.run` catches it and re-runs the training function
    in the next generation. Derives from BaseException so `except Exception` in the
    training loop does not swallow it."""


@dataclass(frozen=True)
class Generation:
    """What the current generation of this rank is."""
    number: int        # the job's attempt number (0 for the first launch)
    rank: int
    world_size: int
    local_rank: int
    resume_step: int   # the step to restore, -1 = start fresh
    restarted: bool    # this process ran an earlier generation (it was kept)
    # Elastic jobs: the world size the job runs at when it has all its nodes. A
    # generation may have fewer ranks (world_size < max_world_size); a trainer that keeps
    # its global batch accumulates max_world_size / world_size times as many micro-batches.
    max_world_size: int = 0

    @staticmethod
    def from_env(restarted: bool) -> "Generation":
        e = os.environ
        return Generation(number=int(e.get("BULWARK_ATTEMPT", "0") or 0),
                          rank=int(e.get("RANK", "0") or 0),
                          world_size=int(e.get("WORLD_SIZE", "1") or 1),
                          local_rank=int(e.get("LOCAL_RANK", "0") or 0),
                          resume_step=int(e.get("BULWARK_RESUME_STEP", "-1") or -1),
                          restarted=restarted,
                          max_world_size=max(int(e.get("BULWARK_MAX_WORLD_SIZE", "0") or 0),
                                             int(e.get("WORLD_SIZE", "1") or 1)))


class _Runtime:
    def __init__(self) -> None:
        self.state = "idle"          # idle, forming, running, parked, done
        self.active = False          # inside bulwark.run
        self.in_process = False      # the agent can give us a next generation
        self.generation: Optional[Generation] = None
        self._store = None           # (host, port, TCPStore client), long-lived
        self._group_sockets: set = set()  # (fd, inode) of the current group's connections
        self._watcher: Optional[threading.Thread] = None
        self._backend: Optional[str] = None
        self._timeout = datetime.timedelta(seconds=300)
        self._buf = ctypes.create_string_buffer(1 << 16)

    # ---- safe points
    def check(self) -> None:
        """Raises Restart when the agent asked this rank to leave its generation."""
        if self.in_process and self.state == "running" and _lib.lib().bw_abort_requested() == 1:
            raise Restart()

    def require_running(self, what: str) -> None:
        if self.active and self.state != "running":
            raise BulwarkError(
                f"bulwark.{what} called while this rank is {self.state} (generation "
                f"{self.generation.number if self.generation else '?'} is being "
                "re-formed); call it from the training function passed to bulwark.run")

    # ---- the process group of a generation
    def _form(self) -> None:
        self.state = "forming"
        self._group_sockets = set()
        if self._backend is not None:
            import torch.distributed as dist
            g = self.generation
            host = os.environ.get("BULWARK_STORE_ADDR", "")
            port = int(os.environ.get("BULWARK_STORE_PORT", "0") or 0)
            if self.in_process and host and port > 0:
                if self._store is None or self._store[:2] != (host, port):
                    self._store = (host, port, dist.TCPStore(host, port, None, False,
                                                             self._timeout))
                run_id = os.environ.get("TORCHELASTIC_RUN_ID", "job")
                store = dist.PrefixStore(f"bulwark/{run_id}/gen{g.number}/", self._store[2])
                before = _tcp_sockets()  # the long-lived store's connection is not the group's
                dist.init_process_group(self._backend, store=store, rank=g.rank,
                                        world_size=g.world_size, timeout=self._timeout)
                self._group_sockets = _tcp_sockets() - before
            else:  # env:// (the first generation): its store is the group's own
                # A long-lived store of an earlier generation is not this one's: its
                # agent may be gone (slot 0 replaced), and torch's client of a server
                # that closed spins a thread on the dead socket until it is destroyed.
                self._store = None
                if g.rank != 0:
                    _wait_listening(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                    int(os.environ.get("MASTER_PORT", "0") or 0),
                                    self._timeout.total_seconds())
                before = _tcp_sockets()
                dist.init_process_group(self._backend, init_method="env://", rank=g.rank,
                                        world_size=g.world_size, timeout=self._timeout)
                self._group_sockets = _tcp_sockets() - before
        self.state = "running"

    def _destroy(self) -> bool:
        """Destroys the process group; False if that did not return within
        _DESTROY_TIMEOUT_S (a collective wedged inside the backend: torch 2.x gloo can
        wait on its work threads; the helper thread is then left behind)."""
        if self._backend is None:
            return True
        import torch.distributed as dist
        done = threading.Event()

        def destroy() -> None:
            try:
                if dist.is_initialized():
                    dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group is what we are leaving
                pass
            finally:
                done.set()

        threading.Thread(target=destroy, name="bulwark-destroy", daemon=True).start()
        return done.wait(_DESTROY_TIMEOUT_S)

    def _watch_aborts(self) -> None:
        """Daemon thread: when the agent asks this rank to leave while it is blocked in a
        collective (inside C++, the GIL released, no safe point reached), shuts the
        group's connections down so the collective fails at once and the rank parks.
        While a generation runs it sleeps in bw_wait_abort, which wakes on the abort
        itself (a datagram, or one the training thread took from the socket), not on a
        timer; between generations, and once it shut a group's connections, it checks
        every 50 ms. The sticky abort flag is cleared by the park."""
        lib = _lib.lib()
        done = None  # the group whose connections it shut
        while True:
            socks = self._group_sockets
            if not socks or self.state != "running" or socks is done:
                time.sleep(0.05)
                continue
            try:
                aborted = lib.bw_wait_abort(1.0) == 1
            except Exception:  # noqa: BLE001 - the watcher must never die noisily
                aborted = False
                time.sleep(0.05)
            if aborted and socks is self._group_sockets:
                _shutdown_sockets(socks)
                done = socks

    # ---- leaving and rejoining
    def _recoverable(self, e: BaseException) -> Optional[str]:
        """Why `e` ends only this generation, or None if it must propagate."""
        if isinstance(e, Restart):
            return ""
        if not self.in_process or isinstance(e, (KeyboardInterrupt, SystemExit)):
            return None
        if _lib.lib().bw_abort_requested() == 1:
            return f"{type(e).__name__}: {e}"
        names = {c.__name__ for c in type(e).__mro__}
        if names & {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}:
            return f"{type(e).__name__}: {e}"
        if isinstance(e, RuntimeError) and _PEER_GONE.search(str(e)):
            return f"{type(e).__name__}: {e}"
        return None

    def _park(self, error: str) -> None:
        self.state = "parked"
        # Close this rank's side of every connection of the group first: a peer still
        # blocked in a collective with us fails at once instead of at the collective
        # timeout. destroy_process_group alone does not close them while a failed
        # collective's work still holds the group (torch 2.x gloo).
        _shutdown_sockets(self._group_sockets)
        self._group_sockets = set()
        # The step this rank reached, staged so that a replaced rank need not go back
        # to an older snapshot (checkpoint._save_at_park; before bw_park, so the
        # agent's inventory of this stop has it).
        ck = sys.modules.get("bulwark.checkpoint")
        if ck is not None:
            try:
                staged = ck._save_at_park()
                if staged is not None:
                    g = self.generation
                    print(f"bulwark: rank {g.rank if g else '?'} parked after step {staged}; "
                          f"its state is staged as that step", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - the park itself must go on
                print(f"bulwark: no snapshot of the live state at park: "
                      f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if not self._destroy():
            # This process cannot form another group (the old one is still the default):
            # leave now, so the agent replaces it at once instead of at the park deadline.
            # The threads' stacks say where it is wedged (the rank's log keeps them).
            print(f"bulwark: destroy_process_group did not return within "
                  f"{_DESTROY_TIMEOUT_S:.0f} s; leaving this process so the agent replaces "
                  f"it; its threads:", file=sys.stderr, flush=True)
            try:
                import faulthandler
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            except Exception:  # noqa: BLE001 - the exit below must happen regardless
                pass
            os._exit(_EXIT_WEDGED)
        gc.collect()
        _lib.check(_lib.lib().bw_park(error.encode("utf-8", "replace")), "run (park)")

    def _await(self) -> None:
        wait_s = float(os.environ.get("BULWARK_GENERATION_WAIT_S", "600") or 600)
        deadline = time.monotonic() + wait_s
        lib = _lib.lib()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BulwarkError(f"bulwark.run: no next generation from the agent within "
                                   f"{wait_s:.0f} s (BULWARK_GENERATION_WAIT_S)")
            rc = lib.bw_wait_generation(min(1.0, left), self._buf, len(self._buf))
            if rc >= 0:
                msg = json.loads(self._buf.value.decode("utf-8", "replace"))
                break
            if rc == _lib.ERR_DEADLINE_EXCEEDED:
                continue
            if rc == _lib.ERR_INVALID_ARGUMENT and len(self._buf) < (1 << 24):
                self._buf = ctypes.create_string_buffer(len(self._buf) * 4)
                continue
            _lib.check(rc, "run (waiting for the next generation)")
        env = msg.get("env")
        if not isinstance(env, dict):
            raise BulwarkError(f"bulwark.run: the agent's generation message has no env: {msg!r}")
        for k, v in env.items():
            os.environ[str(k)] = str(v)
        _stacks.register_stack_dump()  # this attempt's stack file
        _lib.check(lib.bw_init(), "run (next generation)")
        if self.in_process:
            _lib.check(lib.bw_declare_in_process(int(self._backend is not None)), "run")
        self.generation = Generation.from_env(restarted=True)

    # ---- the loop
    def run(self, fn: Callable[..., T], args: tuple, kwargs: dict, backend: Optional[str],
            timeout: Optional[datetime.timedelta]) -> T:
        if self.active:
            raise BulwarkError("bulwark.run is already running in this process; call it once")
        lib = _lib.lib()
        _stacks.register_stack_dump()
        _lib.check(lib.bw_init(), "init")
        self._backend = _pick_backend(backend)
        if timeout is not None:
            self._timeout = timeout
        # Recoverable in process only under an agent that can address this rank.
        self.in_process = bool(os.environ.get("BULWARK_AGENT_SOCK") and
                               os.environ.get("BULWARK_RANK_SOCK"))
        if self.in_process:
            _lib.check(lib.bw_declare_in_process(int(self._backend is not None)), "run")
            if self._backend is not None and self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_aborts, daemon=True,
                                                 name="bulwark-abort-watch")
                self._watcher.start()
        self.active = True
        self.generation = Generation.from_env(restarted=False)
        # What the process made before training (imports, the script's setup) lives as
        # long as it does: out of the collector's scans (gc.freeze), so the collection at
        # each park, and those Python runs during training, cost what the training
        # function allocates, not the 330,000 objects of torch's imports (155 ms each).
        gc.freeze()
        try:
            while True:
                error = None
                try:
                    self._form()
                    result = fn(*args, **kwargs)
                except BaseException as e:  # noqa: BLE001 - classified below
                    error = self._recoverable(e)
                    if error is None:
                        raise
                if error is None:
                    self.state = "done"
                    self._destroy()
                    if self.in_process:
                        lib.bw_finished()  # best effort: the exit may take seconds
                    return result
                # Outside the except block: the traceback (and the training function's
                # frames, its model and DDP) are released before the group is destroyed.
                self._park(error)
                self._await()
        finally:
            if self.state != "done":
                self.state = "idle"
            self.active = False


_RUNTIME = _Runtime()


_DESTROY_TIMEOUT_S = 2.0
_EXIT_WEDGED = 75  # a parking rank whose process group could not be destroyed


def _tcp_sockets() -> set:
    """(fd, inode) of this process's connected TCP sockets, listeners left out (Linux
    /proc; empty elsewhere)."""
    import socket
    out = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(fd))) as s:
                if s.family in (socket.AF_INET, socket.AF_INET6) and \
                        s.type == socket.SOCK_STREAM and \
                        not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    out.add((int(fd), os.fstat(int(fd)).st_ino))
        except OSError:
            continue
    return out


def _wait_listening(host: str, port: int, timeout_s: float) -> None:
    """Returns once host:port accepts a connection (polled every 10 ms), or after
    timeout_s (init_process_group then reports the failure). torch's TCPStore client
    waits a whole second before it retries a refused connection, so a rank that
    reaches the rendezvous before rank 0 listens would lose that second."""
    import socket
    if port <= 0:
        return
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.01)


def _shutdown_sockets(socks: set) -> None:
    """shutdown(2)s the sockets of `socks` still open under the same fd and inode (the
    fds stay open: their owner closes them); never raises."""
    import socket
    for fd, ino in socks:
        try:
            if os.fstat(fd).st_ino != ino:
                continue  # closed, and the number reused by something else
            with socket.socket(fileno=os.dup(fd)) as s:
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            continue


def _pick_backend(backend: Optional[str]) -> Optional[str]:
    if backend is None:
        return None
    if backend != "auto":
        return backend
    try:
        import torch
    except ImportError:
        return None
    return "nccl" if torch.cuda.is_available() else "gloo"


def run(fn: Callable[..., T], *args: Any, backend: Optional[str] = "auto",
        timeout: Optional[datetime.timedelta] = None, **kwargs: Any) -> T:
    """Runs `fn(*args, **kwargs)` in generations and returns its result.

    Before each call the default process group is initialised (`backend`: "auto" =
    nccl with CUDA else gloo; None = no process group, for trainers without
    torch.distributed) with `timeout` as its collective timeout. Under the Bulwark agent
    a fault anywhere in the job makes `fn` unwind (`Restart` at a safe point, or a
    failed collective), and it is called again in the same process for the next
    generation, after `bulwark.generation()` and the resume step were updated. Outside
    the agent it is called once. Create the model, the optimizer and DDP inside `fn`:
    objects kept from an earlier generation hold the destroyed process group."""
    return _RUNTIME.run(fn, args, kwargs, backend, timeout)


def generation() -> Generation:
    """The current generation of this rank (also valid outside bulwark.run)."""
    return _RUNTIME.generation or Generation.from_env(restarted=False)


def check() -> None:
    """A safe point: raises `Restart` if this rank must leave its generation."""
    _RUNTIME.check()


def steps(start: int, stop: Optional[int] = None) -> Iterator[int]:
    """range(start, stop) (endless without stop) with a safe point before each step.
    The first step's time (what report_step measures) starts at its first iteration."""
    step = start
    first = True
    while stop is None or step < stop:
        _RUNTIME.check()
        if first:
            _lib.lib().bw_mark_step_start()
            first = False
        yield step
        step += 1
