"""Tests of bulwark.checkpoint (tensor checkpoints of nested torch state) against the
real libbulwark.so, standalone (each save writes and commits its shard).

Run with /usr/bin/python3 (has torch) and BULWARK_LIB pointing at the built library;
ctest does this (sdk_python_checkpoint_test).
"""
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import torch  # noqa: E402

import bulwark  # noqa: E402
import bulwark.checkpoint as ckpt  # noqa: E402

_VARS = ["RANK", "WORLD_SIZE", "BULWARK_AGENT_SOCK", "BULWARK_RANK_SOCK",
         "BULWARK_RESUME_STEP", "BULWARK_CKPT_DIR", "BULWARK_STAGING_DIR"]


def model_and_optimizer(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(torch.randn(4, 8)).sum().backward()
    opt.step()
    return m, opt


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bw_py_ckpt.")
        for v in _VARS:
            os.environ.pop(v, None)
        os.environ["BULWARK_CKPT_DIR"] = os.path.join(self.dir, "ckpt")
        bulwark.init()

    def tearDown(self):
        for v in _VARS:
            os.environ.pop(v, None)
        bulwark.init()
        shutil.rmtree(self.dir, ignore_errors=True)

    def assert_state_equal(self, a, b):
        self.assertEqual(a.keys(), b.keys())
        for k in a:
            if torch.is_tensor(a[k]):
                self.assertTrue(torch.equal(a[k], b[k]), k)
            elif isinstance(a[k], dict):
                self.assert_state_equal(a[k], b[k])
            else:
                self.assertEqual(a[k], b[k], k)

    def test_stateful_objects_round_trip_in_place(self):
        m, opt = model_and_optimizer(1)
        ckpt.save({"model": m, "optim": opt, "progress": {"step": 7, "note": "hello"}}, 7)
        m2, opt2 = model_and_optimizer(2)  # different weights and moments
        weight = m2[0].weight
        target = {"model": m2, "optim": opt2, "progress": {"step": 0}}
        info = ckpt.load(target, 7)
        self.assertEqual((info.step, info.tier), (7, "disk"))
        self.assertGreaterEqual(info.seconds, 0)
        self.assertIs(target["model"], m2)  # the objects stay; their state is loaded
        self.assertIs(m2[0].weight, weight)  # ... into the same parameter tensors
        self.assertEqual(target["progress"], {"step": 7, "note": "hello"})
        self.assert_state_equal(m.state_dict(), m2.state_dict())
        self.assertTrue(torch.equal(opt.state_dict()["state"][0]["exp_avg"],
                                    opt2.state_dict()["state"][0]["exp_avg"]))
        # A module is stored as its state dict, never pickled whole.
        out = {}
        ckpt.load(out, 7)
        self.assertIsInstance(out["model"], dict)
        self.assertIn("0.weight", out["model"])

    def test_fresh_optimizer_state_is_created(self):
        m, opt = model_and_optimizer(3)
        ckpt.save({"model": m, "optim": opt}, 8)
        torch.manual_seed(3)
        m2 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-2)  # no state yet
        ckpt.load({"model": m2, "optim": opt2}, 8)
        self.assertTrue(torch.equal(opt.state_dict()["state"][0]["exp_avg_sq"],
                                    opt2.state_dict()["state"][0]["exp_avg_sq"]))

    def test_repeated_saves_reuse_the_layout_and_a_changed_layout_is_rebuilt(self):
        # Same layout twice (the argument arrays are reused; only data pointers change),
        # then a new tensor and a new shape: every step must hold its own values.
        a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        b = torch.ones(5, dtype=torch.int64)
        ckpt.save({"a": a, "b": b}, 1)
        a2, b2 = a * 2, b * 3
        ckpt.save({"a": a2, "b": b2}, 2)
        c = torch.full((2,), 9.0, dtype=torch.float64)
        ckpt.save({"a": a2[:2].clone(), "b": b2, "c": c}, 3)
        one = {}
        ckpt.load(one, 1)
        self.assertTrue(torch.equal(one["a"], a))
        self.assertTrue(torch.equal(one["b"], b))
        two = {}
        ckpt.load(two, 2)
        self.assertTrue(torch.equal(two["a"], a2))
        self.assertTrue(torch.equal(two["b"], b2))
        three = {}
        ckpt.load(three, 3)
        self.assertEqual(tuple(three["a"].shape), (2, 4))
        self.assertTrue(torch.equal(three["a"], a2[:2]))
        self.assertTrue(torch.equal(three["c"], c))

    def test_non_contiguous_and_empty_tensors(self):
        t = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()  # not contiguous
        e = torch.zeros(0, 3)
        ckpt.save({"t": t, "e": e, "nested": [t[0], (e,)]}, 4)
        out = {}
        ckpt.load(out, 4)
        self.assertTrue(torch.equal(out["t"], t))
        self.assertEqual(tuple(out["e"].shape), (0, 3))
        self.assertTrue(torch.equal(out["nested"][0], t[0]))
        self.assertIsInstance(out["nested"][1], tuple)
        # A strided target is filled through a copy.
        strided = torch.zeros(4, 5).t()
        target = {"t": strided, "e": torch.zeros(0, 3), "nested": None}
        ckpt.load(target, 4)
        self.assertIs(target["t"], strided)
        self.assertTrue(torch.equal(strided, t))
        # A target of another shape is replaced, not written into.
        other = {"t": torch.zeros(3), "e": None, "nested": None}
        ckpt.load(other, 4)
        self.assertEqual(tuple(other["t"].shape), (5, 4))

    def test_async_save_of_cpu_tensors_is_staged_before_it_returns(self):
        a = torch.arange(6, dtype=torch.float32)
        fut = ckpt.async_save({"a": a}, 9)
        a.add_(100)  # after the call: the snapshot must hold the values at the call
        self.assertIsNone(fut.result(timeout=30))
        out = {}
        ckpt.load(out, 9)
        self.assertTrue(torch.equal(out["a"], torch.arange(6, dtype=torch.float32)))

    def test_bad_input_is_a_clear_error(self):
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.save({"x": torch.zeros(2, dtype=torch.complex64)}, 5)
        self.assertIn("'x'", str(cm.exception))
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.save({"a": {"b": torch.zeros(1)}, "a/b": torch.zeros(1)}, 5)
        self.assertIn("same name", str(cm.exception))
        with self.assertRaises(ckpt.CheckpointError):
            ckpt.load({}, 99)
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.load(None)
        self.assertIn("must be a dict", str(cm.exception))
        self.assertIsNone(ckpt.load({}))  # no resume step: a fresh start


if __name__ == "__main__":
    unittest.main()
