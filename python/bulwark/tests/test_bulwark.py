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
        bulwark._deterministic = False  # deterministic() holds for the process

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

    def test_check_alignment_reports_digests_and_sdc_perturbs_once(self):
        import torch
        self.bind_agent()
        os.environ["RANK"] = "0"
        os.environ["WORLD_SIZE"] = "2"
        bulwark.init()
        self.recv()  # hello
        torch.manual_seed(7)
        model = torch.nn.Linear(4, 3)
        torch.manual_seed(7)
        twin = torch.nn.Linear(4, 3)
        clean = bulwark.parameter_digest(model)
        self.assertEqual(clean, bulwark.parameter_digest(twin))
        bulwark.check_alignment(5, model, every=10)  # not due: nothing is sent
        bulwark.check_alignment(10, model, every=10, group="dp0")
        m = self.recv()
        self.assertEqual(m, {"type": "digest", "rank": 0, "step": 10,
                             "digest": format(clean, "016x"), "group": "dp0"})
        # Chaos sdc: one element moves by a part in a thousand, once; no NaN.
        self.agent.sendto(b'{"type":"inject_sdc"}', os.environ["BULWARK_RANK_SOCK"])
        bulwark.check_alignment(11, model, every=10)
        bad = bulwark.parameter_digest(model)
        self.assertNotEqual(bad, clean)
        self.assertTrue(all(torch.isfinite(p).all() for p in model.parameters()))
        delta = (model.weight - twin.weight).abs().max().item()
        self.assertGreater(delta, 0)
        self.assertLess(delta, 0.01)
        bulwark.check_alignment(20, model, every=10)
        self.assertEqual(self.recv()["digest"], format(bad, "016x"))
        self.assertEqual(bulwark.parameter_digest(model), bad)  # perturbed once only

    def test_batch_indices_are_a_function_of_the_step(self):
        # Every sample of an epoch exactly once across the ranks' batches, and the same
        # indices whenever a step is asked for again (a resumed run, a replay).
        n, b, w = 10, 2, 2
        epoch0 = [i for s in range(0, 3) for r in range(w)
                  for i in bulwark.batch_indices(s, b, n, seed=7, rank=r, world_size=w)][:n]
        self.assertEqual(sorted(epoch0), list(range(n)))
        self.assertEqual(bulwark.batch_indices(5, b, n, seed=7, rank=1, world_size=w),
                         bulwark.batch_indices(5, b, n, seed=7, rank=1, world_size=w))
        self.assertNotEqual(bulwark.batch_indices(0, 5, 100, seed=7),
                            bulwark.batch_indices(0, 5, 100, seed=8))
        with self.assertRaises(ValueError):
            bulwark.batch_indices(0, 2, 10, seed=1, rank=2, world_size=2)

    def test_seed_step_repeats_a_steps_random_numbers(self):
        import random
        bulwark.seed_step(3, 40)
        a = [random.random() for _ in range(3)]
        random.random()
        bulwark.seed_step(3, 40)
        self.assertEqual([random.random() for _ in range(3)], a)
        bulwark.seed_step(3, 41)
        self.assertNotEqual([random.random() for _ in range(3)], a)
        gaps = bulwark.deterministic(3)
        self.assertIsInstance(gaps, list)
        self.assertTrue(all(isinstance(g, str) and g for g in gaps))

    def test_step_reports_carry_rng_and_data_digests_for_replay(self):
        import random
        import torch
        self.bind_agent()
        bulwark.init()
        self.recv()  # hello
        bulwark.report_step(1, 0.5, data=[1, 2])
        m = self.recv()
        self.assertNotIn("rng", m)  # no determinism asked for: no RNG digest
        self.assertEqual(m["data"], format(bulwark.data_digest([1, 2]), "016x"))
        bulwark.deterministic(5)
        bulwark.seed_step(5, 7)
        torch.rand(3)
        bulwark.report_step(7, 0.5, data=torch.arange(6).reshape(2, 3))
        first = self.recv()
        self.assertRegex(first["rng"], "^[0-9a-f]{16}$")
        bulwark.seed_step(5, 7)  # the same step again: the same random numbers
        torch.rand(3)
        bulwark.report_step(7, 0.5, data=torch.arange(6).reshape(2, 3))
        again = self.recv()
        self.assertEqual(again["rng"], first["rng"])
        self.assertEqual(again["data"], first["data"])
        bulwark.seed_step(5, 7)
        torch.rand(4)  # one more draw: another state
        random.random()
        bulwark.report_step(7, 0.5)
        self.assertNotEqual(self.recv()["rng"], first["rng"])
        # Data digests: type, shape and bits count; nothing else is accepted.
        t = torch.arange(6)
        self.assertNotEqual(bulwark.data_digest(t), bulwark.data_digest(t.reshape(2, 3)))
        self.assertNotEqual(bulwark.data_digest(t), bulwark.data_digest(t.float()))
        self.assertNotEqual(bulwark.data_digest([1, 2]), bulwark.data_digest([1.0, 2.0]))
        self.assertEqual(bulwark.data_digest(torch.ones(2, dtype=torch.bfloat16)),
                         bulwark.data_digest(torch.ones(2, dtype=torch.bfloat16)))
        with self.assertRaisesRegex(TypeError, "not object"):
            bulwark.data_digest(object())

    def test_check_alignment_of_plain_buffers(self):
        self.bind_agent()
        os.environ["RANK"] = "1"
        os.environ["WORLD_SIZE"] = "2"
        bulwark.init()
        self.recv()  # hello

        class Model:
            def __init__(self):
                self.buf = bytearray(b"\x02" * 8)

            def parameters(self):
                return [self.buf]

        m, twin = Model(), Model()
        self.assertEqual(bulwark.parameter_digest(m), bulwark.parameter_digest(twin))
        self.agent.sendto(b'{"type":"inject_sdc"}', os.environ["BULWARK_RANK_SOCK"])
        bulwark.check_alignment(3, m, every=3)
        self.assertEqual(m.buf, bytearray(b"\x03" + b"\x02" * 7))  # the lowest bit
        d = self.recv()
        self.assertEqual((d["type"], d["rank"], d["step"]), ("digest", 1, 3))
        self.assertEqual(d["digest"], format(bulwark.parameter_digest(m), "016x"))
        self.assertNotEqual(bulwark.parameter_digest(m), bulwark.parameter_digest(twin))

    def test_step_metrics_and_model_flops(self):
        from bulwark import metrics
        self.bind_agent()
        os.environ["RANK"] = "0"
        bulwark.init()
        self.recv()  # hello
        metrics.set_model_flops(1.5e9)
        self.assertEqual(self.recv(), {"type": "model", "rank": 0, "flops_per_token": 1.5e9})
        with self.assertRaisesRegex(ValueError, "finite number > 0"):
            metrics.set_model_flops(float("inf"))
        with metrics.phase("compute"):
            pass
        for _ in metrics.timed([1, 2]):
            pass
        bulwark.report_step(3, 0.5, tokens=64, samples=2, lr=3e-4, grad_norm=1.5,
                            optimizer=0.25)
        m = self.recv()
        self.assertEqual((m["samples"], m["lr"], m["grad_norm"], m["optimizer"]),
                         (2.0, 3e-4, 1.5, 0.25))
        self.assertGreaterEqual(m["data_wait"], 0.0)
        self.assertGreaterEqual(m["compute"], 0.0)
        self.assertNotIn("inferred", m)
        bulwark.report_step(4, 0.5, lr=-1.0, grad_norm=float("nan"))  # not sent
        m = self.recv()
        for k in ("lr", "grad_norm", "data_wait", "compute", "samples"):
            self.assertNotIn(k, m)
        with self.assertRaisesRegex(ValueError, "unknown phase 'fwd'"):
            with metrics.phase("fwd"):
                pass
        bulwark.init()  # the declared FLOPs are re-sent with every hello
        self.assertEqual(self.recv()["flops_per_token"], 1.5e9)

    def _run_unmodified(self, script_text, extra_env=None):
        """Runs `script_text` as an unmodified script with Bulwark's sitecustomize on its
        path (as the agent starts ranks); returns the datagrams it sent."""
        if self.agent is None:
            self.bind_agent()
        script = os.path.join(self.dir, "train.py")
        with open(script, "w") as f:
            f.write(script_text)
        env = dict(os.environ)
        env["PYTHONPATH"] = (PKG_PARENT + ":" +
                             os.path.join(PKG_PARENT, "bulwark", "sitecustomize_dir"))
        env["RANK"] = "0"
        env.update(extra_env or {})
        out = subprocess.run([sys.executable, script], env=env, capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        msgs = []
        self.agent.settimeout(0.5)
        try:
            while True:
                msgs.append(json.loads(self.agent.recv(65536).decode()))
        except socket.timeout:
            pass
        return [m for m in msgs if m["type"] == "step"], out

    _TORCH_SCRIPT = (
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.Adam(m.parameters(), lr=0.1)\n"
        "ids = torch.randint(0, 10, (12, 4))\n"
        "data = DataLoader(TensorDataset(ids.float(), torch.zeros(12, 1)), batch_size=3)\n"
        "for i, (x, y) in enumerate(data):\n"
        "    loss = ((m(x) - y) ** 2).mean() * (float('nan') if i == 3 else 1.0)\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n"
        "tok = DataLoader(TensorDataset(ids), batch_size=4)\n"
        "for (x,) in tok:\n"
        "    loss = m(x.float()).sum(); loss.backward(); opt.step()\n")

    def test_unmodified_script_steps_loss_and_data_wait_are_inferred(self):
        steps, _ = self._run_unmodified(self._TORCH_SCRIPT)
        self.assertEqual([m["step"] for m in steps], [1, 2, 3, 4, 5, 6, 7])  # Adam's count
        for m in steps:
            self.assertTrue(m["inferred"])
            self.assertGreaterEqual(m["data_wait"], 0.0)
            self.assertGreaterEqual(m["optimizer"], 0.0)
        self.assertIsNone(steps[3]["loss"])  # the NaN loss: a NaN fault for the agent
        self.assertGreater(steps[0]["loss"], 0.0)
        self.assertEqual(steps[0]["samples"], 3.0)
        self.assertEqual(steps[0]["tokens"], 0)  # float features: no token ids
        self.assertEqual(steps[4]["tokens"], 16)  # a 4x4 integer batch: token ids
        self.assertEqual(steps[4]["samples"], 4.0)
        self.assertIn("compute", steps[1])

    def test_instrumentation_stands_down_for_sdk_scripts_and_when_off(self):
        sdk = "import bulwark  # the trainer reports its own steps\n" + self._TORCH_SCRIPT
        steps, _ = self._run_unmodified(sdk)
        self.assertEqual(steps, [])
        steps, _ = self._run_unmodified(self._TORCH_SCRIPT, {"BULWARK_AUTO_METRICS": "0"})
        self.assertEqual(steps, [])
        # A script that reports through the SDK mid-run switches it off from then on.
        mixed = self._TORCH_SCRIPT.replace(
            "tok = DataLoader", "__import__('bulwark').report_step(100, 1.0)\ntok = DataLoader")
        steps, _ = self._run_unmodified(mixed)
        self.assertEqual([m["step"] for m in steps], [1, 2, 3, 4, 100])
        self.assertNotIn("inferred", steps[-1])

    def test_mfu_of_the_example_model_by_hand(self):
        import torch
        from bulwark import metrics
        sys.path.insert(0, os.path.join(PKG_PARENT, "..", "examples", "pytorch-ddp"))
        try:
            import train as example
        finally:
            sys.path.pop(0)
        vocab, d, n_layer, n_head, context = 96, 64, 2, 4, 32
        model = example.GPT(vocab, d, n_layer, n_head, context)
        # By hand: per block ln1, ln2 (2·2d), qkv (d·3d + 3d), proj (d² + d),
        # mlp (d·4d + 4d + 4d·d + d); then ln_f (2d) and head (d·vocab + vocab).
        # Embeddings (tok vocab·d, pos context·d) are lookups, left out.
        block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (8 * d * d + 5 * d)
        n = n_layer * block + 2 * d + d * vocab + vocab
        fpt = 6 * n + 12 * n_layer * n_head * (d // n_head) * context
        self.assertEqual(metrics.flops_per_token(model, n_layers=n_layer, n_heads=n_head,
                                                 head_dim=d // n_head, seq_len=context), fpt)
        all_params = sum(p.numel() for p in model.parameters())
        self.assertEqual(metrics.flops_per_token(model, n_layers=n_layer, n_heads=n_head,
                                                 head_dim=d // n_head, seq_len=context,
                                                 exclude_embeddings=False),
                         6 * all_params + 12 * n_layer * n_head * (d // n_head) * context)
        self.assertEqual(all_params - n, (vocab + context) * d)
        # 4 ranks on CPUs of 1 TFLOPS each at 20 000 tokens/s.
        self.assertAlmostEqual(metrics.mfu(fpt, 20000, 4, 1e12), fpt * 20000 / 4e12)
        self.assertEqual(metrics.peak_flops("NVIDIA H100 80GB HBM3"), 989e12)
        self.assertEqual(metrics.peak_flops("NVIDIA A100-SXM4-80GB", "tf32"), 156e12)
        self.assertEqual(metrics.peak_flops("a CPU"), 0.0)
        with self.assertRaisesRegex(ValueError, "seq_len must be a positive integer"):
            metrics.flops_per_token(model, n_layers=2, n_heads=4, head_dim=16, seq_len=0)
        del torch

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
