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

    def test_nested_state_round_trips_in_place(self):
        m, opt = model_and_optimizer(1)
        ckpt.save({"model": m.state_dict(), "optim": opt.state_dict(), "step": 7,
                   "note": "hello"}, 7)
        m2, opt2 = model_and_optimizer(2)  # different weights and moments
        target = {"model": m2.state_dict(), "optim": opt2.state_dict(), "step": 0}
        info = {}
        out = ckpt.load(target, step=7, info=info)
        self.assertEqual(info, {"tier": "disk", "step": 7})
        self.assertEqual(out["step"], 7)
        self.assertEqual(out["note"], "hello")
        m2.load_state_dict(out["model"])
        opt2.load_state_dict(out["optim"])
        self.assert_state_equal(m.state_dict(), m2.state_dict())
        self.assertTrue(torch.equal(opt.state_dict()["state"][0]["exp_avg"],
                                    opt2.state_dict()["state"][0]["exp_avg"]))

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
        one = ckpt.load(step=1)
        self.assertTrue(torch.equal(one["a"], a))
        self.assertTrue(torch.equal(one["b"], b))
        two = ckpt.load(step=2)
        self.assertTrue(torch.equal(two["a"], a2))
        self.assertTrue(torch.equal(two["b"], b2))
        three = ckpt.load(step=3)
        self.assertEqual(tuple(three["a"].shape), (2, 4))
        self.assertTrue(torch.equal(three["a"], a2[:2]))
        self.assertTrue(torch.equal(three["c"], c))

    def test_non_contiguous_and_empty_tensors(self):
        t = torch.arange(20, dtype=torch.float32).reshape(4, 5).t()  # not contiguous
        e = torch.zeros(0, 3)
        ckpt.save({"t": t, "e": e, "nested": [t[0], (e,)]}, 4)
        out = ckpt.load(step=4)
        self.assertTrue(torch.equal(out["t"], t))
        self.assertEqual(tuple(out["e"].shape), (0, 3))
        self.assertTrue(torch.equal(out["nested"][0], t[0]))
        self.assertIsInstance(out["nested"][1], tuple)

    def test_bad_input_is_a_clear_error(self):
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.save({"x": torch.zeros(2, dtype=torch.complex64)}, 5)
        self.assertIn("'x'", str(cm.exception))
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.save({"a": {"b": torch.zeros(1)}, "a/b": torch.zeros(1)}, 5)
        self.assertIn("same name", str(cm.exception))
        with self.assertRaises(ckpt.CheckpointError):
            ckpt.load(step=99)


if __name__ == "__main__":
    unittest.main()
