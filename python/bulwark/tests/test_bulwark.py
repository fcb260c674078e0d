"""Tests of the bulwark Python module against the real libbulwark.so.

Run with /usr/bin/python3 (has torch) and BULWARK_LIB pointing at the built library;
ctest does this (sdk_python_test).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_PARENT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, PKG_PARENT)

import bulwark  # noqa: E402

_VARS = ["RANK", "WORLD_SIZE", "BULWARK_AGENT_SOCK", "BULWARK_RANK_SOCK",
         "BULWARK_RESUME_STEP", "BULWARK_CKPT_DIR", "BULWARK_CKPT_INTERVAL_STEPS",
         "BULWARK_SKIP_FROM", "BULWARK_SKIP_TO", "BULWARK_STACK_FILE", "BULWARK_ATTEMPT"]


class BulwarkTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bw_py_test.")
        for v in _VARS:
            os.environ.pop(v, None)
        self.agent = None

    def tearDown(self):
        if self.agent is not None:
            self.agent.close()
        for v in _VARS:
            os.environ.pop(v, None)
        bulwark.init()  # back to standalone; closes sockets
        shutil.rmtree(self.dir, ignore_errors=True)

    def bind_agent(self):
        path = os.path.join(self.dir, "agent.sock")
        self.agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.agent.bind(path)
        self.agent.settimeout(5.0)
        os.environ["BULWARK_AGENT_SOCK"] = path
        os.environ["BULWARK_RANK_SOCK"] = os.path.join(self.dir, "rank.sock")

    def recv(self):
        return json.loads(self.agent.recv(65536).decode())

    def test_fresh_start_and_skip_range(self):
        bulwark.init()
        self.assertEqual(bulwark.resume_step(), -1)
        self.assertIsNone(bulwark.skip_range())
        self.assertFalse(bulwark.should_checkpoint(10))
        bulwark.report_step(1, 0.5)  # goes nowhere, never fails
        os.environ["BULWARK_SKIP_FROM"] = "40"
        os.environ["BULWARK_SKIP_TO"] = "45"
        os.environ["BULWARK_CKPT_INTERVAL_STEPS"] = "10"
        bulwark.init()
        self.assertEqual(bulwark.skip_range(), (40, 45))
        self.assertTrue(bulwark.should_skip(44))
        self.assertFalse(bulwark.should_skip(45))
        self.assertTrue(bulwark.should_checkpoint(20))
        self.assertFalse(bulwark.should_checkpoint(21))

    def test_one_checkpoint_api(self):
        # The blob API of earlier versions is gone: bulwark.checkpoint is the only one.
        for old in ("save", "load", "commit"):
            self.assertFalse(hasattr(bulwark, old), old)
        self.assertIs(bulwark.checkpoint.save, __import__("bulwark.checkpoint").checkpoint.save)

    def test_datagram_reports(self):
        self.bind_agent()
        os.environ["BULWARK_CKPT_DIR"] = os.path.join(self.dir, "ckpt")
        os.environ["RANK"] = "1"
        os.environ["WORLD_SIZE"] = "2"
        bulwark.init()
        hello = self.recv()
        self.assertEqual(hello, {"type": "hello", "rank": 1, "pid": os.getpid()})
        os.environ["BULWARK_ATTEMPT"] = "2"
        bulwark.init()  # a new generation of the same rank: same socket, a new hello
        self.assertEqual(self.recv(), {"type": "hello", "rank": 1, "pid": os.getpid(),
                                       "attempt": 2})
        self.assertEqual(bulwark.rank(), 1)
        self.assertEqual(bulwark.world_size(), 2)

        bulwark.report_step(5, 1.25, tokens=512)
        m = self.recv()
        self.assertEqual(m["type"], "step")
        self.assertEqual((m["rank"], m["step"], m["loss"], m["tokens"]), (1, 5, 1.25, 512))
        self.assertGreaterEqual(m["step_time"], 0.0)
        self.assertEqual(m["ckpt_stall"], 0.0)
        self.assertGreater(m["t"], 1.6e9)

        bulwark.checkpoint.save({"w": b"x" * 100000}, 6)
        c = self.recv()
        self.assertEqual((c["type"], c["rank"], c["step"]), ("ckpt", 1, 6))
        self.assertGreater(c["bytes"], 100000)
        self.assertGreaterEqual(c["write_s"], 0.0)
        bulwark.report_step(6, float("nan"))
        m = self.recv()
        self.assertIsNone(m["loss"])
        self.assertEqual(m["ckpt_stall"], c["write_s"])

        self.assertFalse(bulwark.poll_injected_nan())
        self.agent.sendto(b'{"type":"inject_nan"}', os.environ["BULWARK_RANK_SOCK"])
        self.assertTrue(bulwark.poll_injected_nan())
        self.assertFalse(bulwark.poll_injected_nan())

    def test_sitecustomize_stack_dump(self):
        site_dir = os.path.join(PKG_PARENT, "bulwark", "sitecustomize_dir")
        stack_file = os.path.join(self.dir, "stacks.txt")
        code = ("import os, signal\n"
                "def marker_function():\n"
                "    os.kill(os.getpid(), signal.SIGUSR1)\n"
                "marker_function()\n")
        env = dict(os.environ, PYTHONPATH=site_dir, BULWARK_STACK_FILE=stack_file)
        for _ in range(2):  # appends
            subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
        with open(stack_file) as f:
            text = f.read()
        self.assertEqual(text.count("marker_function"), 2, text)
        # Harmless without the variable: SIGUSR1 keeps its default (terminate).
        env.pop("BULWARK_STACK_FILE")
        r = subprocess.run([sys.executable, "-c", "print('ok')"], env=env,
                           capture_output=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, b"ok"))

    def test_init_registers_stack_dump(self):
        stack_file = os.path.join(self.dir, "stacks2.txt")
        code = ("import os, signal, bulwark\n"
                "bulwark.init()\n"
                "def other_marker():\n"
                "    os.kill(os.getpid(), signal.SIGUSR1)\n"
                "other_marker()\n")
        env = dict(os.environ, PYTHONPATH=PKG_PARENT, BULWARK_STACK_FILE=stack_file)
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
        with open(stack_file) as f:
            self.assertIn("other_marker", f.read())

    def test_missing_library_error_is_clear(self):
        env = dict(os.environ, PYTHONPATH=PKG_PARENT, BULWARK_LIB="/nonexistent/libbulwark.so")
        r = subprocess.run([sys.executable, "-c", "import bulwark; bulwark.init()"], env=env,
                           capture_output=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"BULWARK_LIB=/nonexistent/libbulwark.so does not exist", r.stderr)


if __name__ == "__main__":
    unittest.main()
