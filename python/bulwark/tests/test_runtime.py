"""Tests of bulwark.run (generations), the warm rank and the store server against the
real libbulwark.so, with the test playing the node agent on a datagram socket.

Run with /usr/bin/python3 (has torch) and BULWARK_LIB pointing at the built library;
ctest does this (sdk_python_runtime_test).
"""
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_PARENT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, PKG_PARENT)

import bulwark  # noqa: E402
from bulwark import checkpoint  # noqa: E402
from bulwark._runtime import _RUNTIME  # noqa: E402

_VARS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "BULWARK_AGENT_SOCK", "BULWARK_RANK_SOCK",
         "BULWARK_RESUME_STEP", "BULWARK_CKPT_DIR", "BULWARK_ATTEMPT", "BULWARK_STORE_ADDR",
         "BULWARK_STORE_PORT", "BULWARK_GENERATION_WAIT_S", "BULWARK_STAGING_DIR",
         "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"]


class FakeAgent:
    """The agent's end of the SDK datagram protocol (docs/protocol.md section 2)."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "agent.sock")
        self.rank_path = os.path.join(directory, "rank-0.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(10.0)

    def recv_type(self, kind):
        """The next datagram of type `kind` (others are skipped)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = json.loads(self.sock.recv(65536).decode())
            if m["type"] == kind:
                return m
        raise AssertionError(f"no {kind} datagram within 10 s")

    def send(self, msg):
        self.sock.sendto(json.dumps(msg).encode(), self.rank_path)

    def close(self):
        self.sock.close()


class RuntimeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bw_py_runtime.")
        for v in _VARS:
            os.environ.pop(v, None)
        self.agent = FakeAgent(self.dir)
        os.environ.update({"BULWARK_AGENT_SOCK": self.agent.path,
                           "BULWARK_RANK_SOCK": self.agent.rank_path,
                           "BULWARK_ATTEMPT": "0", "RANK": "0", "WORLD_SIZE": "1",
                           "BULWARK_CKPT_DIR": os.path.join(self.dir, "ckpt"),
                           "TORCHELASTIC_RUN_ID": "test-run"})

    def tearDown(self):
        self.agent.close()
        for v in _VARS:
            os.environ.pop(v, None)
        bulwark.init()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_an_abort_ends_the_generation_and_the_next_runs_in_the_same_process(self):
        calls = []

        def train():
            g = bulwark.generation()
            calls.append((g.number, g.resume_step, g.restarted, os.getpid()))
            if g.number == 0:
                self.agent.send({"type": "abort", "attempt": 0})
                for _ in bulwark.steps(1):  # the first safe point raises Restart
                    pass
                self.fail("Restart was not raised")
            return "trained"

        # The agent's side runs after the park: it answers with the next generation.
        def agent_side():
            parked = self.agent.recv_type("parked")
            self.assertEqual((parked["rank"], parked["attempt"], parked["aborted"]), (0, 0, True))
            self.agent.send({"type": "generation", "attempt": 1,
                             "env": {"BULWARK_ATTEMPT": "1", "BULWARK_RESUME_STEP": "41"}})

        import threading
        t = threading.Thread(target=agent_side)
        t.start()
        self.assertEqual(bulwark.run(train, backend=None), "trained")
        t.join()
        self.assertEqual(calls, [(0, -1, False, os.getpid()), (1, 41, True, os.getpid())])
        hello = self.agent.recv_type("hello")  # the second generation's hello
        self.assertTrue(hello.get("in_process"))
        self.assertEqual(bulwark.resume_step(), 41)

    def test_a_failed_collective_parks_on_its_own_and_other_errors_propagate(self):
        def broken_peer():
            if bulwark.generation().number == 0:
                raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] "
                                   "Connection closed by peer [127.0.0.1]:41000")
            return 7

        def agent_side():
            parked = self.agent.recv_type("parked")
            self.assertFalse(parked["aborted"])
            self.assertIn("Connection closed by peer", parked["error"])
            self.agent.send({"type": "generation", "attempt": 1, "env": {"BULWARK_ATTEMPT": "1"}})

        import threading
        t = threading.Thread(target=agent_side)
        t.start()
        self.assertEqual(bulwark.run(broken_peer, backend=None), 7)
        t.join()

        def bug():
            raise ValueError("a bug in the training loop")
        with self.assertRaises(ValueError):
            bulwark.run(bug, backend=None)  # not a peer's fault: the rank crashes

    def test_no_next_generation_is_a_clear_error_not_a_hang(self):
        os.environ["BULWARK_GENERATION_WAIT_S"] = "1"

        def train():
            raise bulwark.Restart()
        t0 = time.monotonic()
        with self.assertRaises(bulwark.BulwarkError) as cm:
            bulwark.run(train, backend=None)
        self.assertIn("no next generation", str(cm.exception))
        self.assertLess(time.monotonic() - t0, 30)

    def test_checkpoint_calls_out_of_order_are_clear_errors(self):
        _RUNTIME.active, _RUNTIME.state = True, "parked"
        try:
            with self.assertRaises(bulwark.BulwarkError) as cm:
                checkpoint.save({"x": 1}, 3)
            self.assertIn("bulwark.checkpoint.save called while this rank is parked", str(cm.exception))
            _RUNTIME.state = "forming"
            with self.assertRaises(bulwark.BulwarkError) as cm:
                checkpoint.load({"x": 1})
            self.assertIn("forming", str(cm.exception))
        finally:
            _RUNTIME.active, _RUNTIME.state = False, "idle"
        with self.assertRaises(bulwark.BulwarkError) as cm:
            checkpoint.save([1, 2], 3)
        self.assertIn("must be a dict", str(cm.exception))

    def _store_server(self):
        """A `bulwark.store_server` child and its port, named in this process's env as the
        long-lived store (BULWARK_STORE_ADDR/PORT)."""
        server = subprocess.Popen([sys.executable, "-m", "bulwark.store_server"],
                                  stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONPATH=PKG_PARENT))
        line = server.stdout.readline()
        if not line.startswith("bulwark-store: listening on port "):
            server.kill()
            server.wait()
            self.fail(f"the store server did not start: {line!r}")
        port = int(line.rsplit(" ", 1)[1])
        os.environ.update({"BULWARK_STORE_ADDR": "127.0.0.1", "BULWARK_STORE_PORT": str(port)})
        return server, port

    def test_generations_re_form_the_process_group_on_the_long_lived_store(self):
        import torch
        import torch.distributed as dist
        server, port = self._store_server()
        try:
            seen = []

            def train():
                g = bulwark.generation()
                t = torch.ones(3) * (g.number + 1)
                dist.all_reduce(t)
                seen.append((g.number, dist.get_world_size(), t.tolist()))
                if g.number == 0:
                    raise bulwark.Restart()
                return t.tolist()

            def agent_side():
                self.agent.recv_type("parked")
                self.agent.send({"type": "generation", "attempt": 1,
                                 "env": {"BULWARK_ATTEMPT": "1"}})

            import threading
            th = threading.Thread(target=agent_side)
            th.start()
            out = bulwark.run(train, backend="gloo", timeout=datetime.timedelta(seconds=30))
            th.join()
            self.assertEqual(seen, [(0, 1, [1.0, 1.0, 1.0]), (1, 1, [2.0, 2.0, 2.0])])
            self.assertEqual(out, [2.0, 2.0, 2.0])
            self.assertFalse(dist.is_initialized())  # run destroyed its group at the end
        finally:
            server.kill()
            server.wait()

    def test_a_generation_without_the_long_lived_store_lets_go_of_it(self):
        # Slot 0's agent, which served the store, was replaced: the next generation
        # rendezvouses on the master port. The client of the dead store must go (torch
        # 1.13's spins a thread at 100% CPU on its closed socket while it lives).
        import torch
        import torch.distributed as dist
        server, port = self._store_server()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                master_port = s.getsockname()[1]
            seen = []

            def train():
                g = bulwark.generation()
                t = torch.ones(2)
                dist.all_reduce(t)
                seen.append((g.number, sorted(_remote_ports())))
                if g.number == 0:
                    raise bulwark.Restart()
                return g.number

            def agent_side():
                self.agent.recv_type("parked")
                server.kill()
                server.wait()
                self.agent.send({"type": "generation", "attempt": 1,
                                 "env": {"BULWARK_ATTEMPT": "1", "BULWARK_STORE_PORT": "0",
                                         "MASTER_ADDR": "127.0.0.1",
                                         "MASTER_PORT": str(master_port)}})

            import threading
            th = threading.Thread(target=agent_side)
            th.start()
            self.assertEqual(bulwark.run(train, backend="gloo",
                                         timeout=datetime.timedelta(seconds=30)), 1)
            th.join()
            self.assertIn(port, seen[0][1])  # generation 0 used the long-lived store
            self.assertNotIn(port, seen[1][1], seen)
        finally:
            server.kill()
            server.wait()


def _remote_ports():
    """The remote ports of this process's connected TCP sockets (Linux /proc)."""
    from bulwark._runtime import _tcp_sockets
    ports = set()
    for fd, _ in _tcp_sockets():
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                ports.add(s.getpeername()[1])
        except OSError:
            continue
    return ports


class WedgedDestroyTest(unittest.TestCase):
    def test_a_park_whose_group_will_not_destroy_leaves_the_process_at_once(self):
        # destroy_process_group blocking (a wedged gloo work thread on torch 2.x): the
        # rank cannot form another group, so it exits 75 after 2 s instead of waiting
        # for the agent's park deadline.
        code = (
            "import time, torch.distributed as dist\n"
            "from bulwark import _runtime\n"
            "dist.is_initialized = lambda: True\n"
            "dist.destroy_process_group = lambda *a, **k: time.sleep(3600)\n"
            "rt = _runtime._RUNTIME\n"
            "rt._backend = 'gloo'\n"
            "rt._park('Connection closed by peer')\n"
            "print('parked: not expected', flush=True)\n")
        env = dict(os.environ, PYTHONPATH=PKG_PARENT)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 75, p.stdout + p.stderr)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertIn("destroy_process_group did not return within 2 s", p.stderr)
        self.assertNotIn("parked: not expected", p.stdout)


class GroupSocketsTest(unittest.TestCase):
    """Parking shuts the group's connections so a peer blocked in a collective with this
    rank fails at once (torch 2.x gloo keeps a failed group's sockets open)."""

    def test_parking_shuts_the_groups_connections_and_nothing_else(self):
        from bulwark import _runtime
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        other = socket.create_connection(lst.getsockname())  # e.g. the long-lived store
        other_peer, _ = lst.accept()
        before = _runtime._tcp_sockets()
        group_listener = socket.socket()
        group_listener.bind(("127.0.0.1", 0))
        group_listener.listen()
        mine = socket.create_connection(lst.getsockname())
        peer, _ = lst.accept()
        group = _runtime._tcp_sockets() - before
        self.assertIn(mine.fileno(), {fd for fd, _ in group})
        self.assertNotIn(group_listener.fileno(), {fd for fd, _ in group})
        self.assertNotIn(other.fileno(), {fd for fd, _ in group})
        group = {(fd, ino) for fd, ino in group if fd == mine.fileno()}
        _runtime._shutdown_sockets(group)
        peer.settimeout(10)
        self.assertEqual(peer.recv(1), b"")  # the peer sees the close at once
        other.sendall(b"x")  # untouched
        other_peer.settimeout(10)
        self.assertEqual(other_peer.recv(1), b"x")
        # A closed fd whose number is reused is left alone (inode check).
        fd = mine.fileno()
        mine.close()
        reuse = socket.create_connection(lst.getsockname())
        reuse_peer, _ = lst.accept()
        _runtime._shutdown_sockets({(fd, ino) for _, ino in group})
        reuse.sendall(b"y")
        reuse_peer.settimeout(10)
        self.assertEqual(reuse_peer.recv(1), b"y")
        for s in (lst, other, other_peer, group_listener, peer, reuse, reuse_peer):
            s.close()


class WarmRankTest(unittest.TestCase):
    def test_a_warm_rank_becomes_the_rank_it_is_given(self):
        d = tempfile.mkdtemp(prefix="bw_py_warm.")
        try:
            agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            agent.bind(os.path.join(d, "agent.sock"))
            agent.settimeout(120)
            script = os.path.join(d, "job", "train.py")
            os.makedirs(os.path.dirname(script))
            with open(script, "w") as f:
                # torch is imported after the print: it is there already only if the
                # warm rank imported it ahead (it does: the script imports torch).
                f.write("import json, os, sys\n"
                        "print(json.dumps({'argv': sys.argv, 'rank': os.environ['RANK'],\n"
                        "  'cwd': os.getcwd(), 'path0': sys.path[0], 'name': __name__,\n"
                        "  'torch': 'torch' in sys.modules}))\n"
                        "import torch  # noqa: E402\n"
                        "sys.exit(int(os.environ['EXIT_WITH']))\n")
            env = dict(os.environ, PYTHONPATH=PKG_PARENT, BULWARK_WARM_TARGET=script,
                       BULWARK_AGENT_SOCK=os.path.join(d, "agent.sock"))
            p = subprocess.Popen([sys.executable, "-m", "bulwark.warm"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env, cwd="/")
            ready = json.loads(agent.recv(65536).decode())
            self.assertEqual(ready, {"type": "warm_ready", "pid": p.pid})
            job = {"argv": [sys.executable, "-u", script, "--steps", "3"],
                   "env": {"RANK": "5", "EXIT_WITH": "4", "PYTHONPATH": PKG_PARENT},
                   "cwd": d}
            out, _ = p.communicate(json.dumps(job) + "\n", timeout=120)
            self.assertEqual(p.returncode, 4)
            got = json.loads(out.strip().splitlines()[-1])
            self.assertEqual(got, {"argv": [script, "--steps", "3"], "rank": "5", "cwd": d,
                                   "path0": os.path.dirname(script), "name": "__main__",
                                   "torch": True})
            agent.close()
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_a_full_agent_socket_does_not_block_the_warm_rank(self):
        from bulwark import warm
        d = tempfile.mkdtemp(prefix="bw_py_warm.")
        agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        old = os.environ.get("BULWARK_AGENT_SOCK")
        try:
            path = os.path.join(d, "agent.sock")
            agent.bind(path)  # an agent that reads nothing (stopped, wedged)
            os.environ["BULWARK_AGENT_SOCK"] = path
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            filler.setblocking(False)
            queued = 0
            while True:  # fill its queue until the kernel refuses one more
                try:
                    filler.sendto(b"{}", path)
                    queued += 1
                except BlockingIOError:
                    break
                self.assertLess(queued, 100000)
            filler.close()
            result = []
            t = threading.Thread(target=lambda: result.append(warm.send_agent({"type": "x"})),
                                 daemon=True)
            t.start()
            t.join(timeout=60)  # bounded: a send that blocks for good fails here
            self.assertFalse(t.is_alive(), "send_agent blocked on a full agent socket")
            self.assertEqual(result, [False])
            agent.recv(65536)  # room for one: the next send goes through
            self.assertTrue(warm.send_agent({"type": "warm_ready", "pid": 1}))
        finally:
            if old is None:
                os.environ.pop("BULWARK_AGENT_SOCK", None)
            else:
                os.environ["BULWARK_AGENT_SOCK"] = old
            agent.close()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
