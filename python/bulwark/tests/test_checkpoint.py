"""Tests of bulwark.checkpoint (tensor checkpoints of nested torch state) against the
real libbulwark.so, standalone (each save writes its shard; world size 1 also commits it).
Pieces of sharded tensors are saved here through the module's internals, as plain
tensors with their global shapes and offsets (DTensor itself: test_sharded.py).

Run with /usr/bin/python3 (has torch) and BULWARK_LIB pointing at the built library;
ctest does this (sdk_python_checkpoint_test).
"""
import ctypes
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
from bulwark import _lib  # noqa: E402

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

    def test_rng_state_round_trips_through_a_checkpoint(self):
        import random
        import numpy
        torch.manual_seed(3)
        random.seed(3)
        numpy.random.seed(3)
        torch.rand(5)  # somewhere in the streams, not at a seed
        ckpt.save({"rng": bulwark.RngState(), "step": 4}, 4)
        first = (torch.rand(3), random.random(), numpy.random.rand())
        digest = bulwark.rng_digest()
        torch.manual_seed(99)
        random.seed(99)
        numpy.random.seed(99)
        ckpt.load({"rng": bulwark.RngState(), "step": 0}, 4)
        again = (torch.rand(3), random.random(), numpy.random.rand())
        self.assertTrue(torch.equal(first[0], again[0]))
        self.assertEqual(first[1:], again[1:])
        self.assertEqual(bulwark.rng_digest(), digest)

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

    def save_as_rank(self, rank, world, step, pieces):
        """Saves {name: local tensor} as `rank` of `world` with each tensor's place in its
        global tensor (pieces: name -> (local, global shape, offsets)), as a DTensor or a
        ShardedTensor is saved, without needing either (torch 1.13 has no DTensor)."""
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
        bulwark.init()
        tensors, none, blob = ckpt._prepare({n: p[0] for n, p in pieces.items()},
                                            "checkpoint.save")
        self.assertEqual(none, {})  # plain tensors: no pieces of their own
        ckpt._stage(step, tensors, blob, False,
                    {n: ckpt._Piece(p[1], p[2], False) for n, p in pieces.items()})

    def as_rank(self, rank, world):
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
        bulwark.init()

    def test_pieces_of_sharded_tensors_load_whole_in_another_world(self):
        # "w" {5, 4} split along dim 0 (3 + 2 rows) and "col" along dim 1 by 2 ranks.
        w = torch.arange(20, dtype=torch.float32).reshape(5, 4)
        col = torch.arange(20, dtype=torch.int64).reshape(5, 4) * 7
        self.save_as_rank(0, 2, 12, {"w": (w[:3].clone(), (5, 4), (0, 0)),
                                     "col": (col[:, :2].contiguous(), (5, 4), (0, 0))})
        self.save_as_rank(1, 2, 12, {"w": (w[3:].clone(), (5, 4), (3, 0)),
                                     "col": (col[:, 2:].contiguous(), (5, 4), (0, 2))})
        _lib.check(_lib.lib().bw_commit(12), "commit")
        # The reader exposes each saved piece's global shape and offsets.
        lib, h = _lib.lib(), ctypes.c_void_p()
        _lib.check(lib.bw_ckpt_open(12, 0, ctypes.byref(h)), "open")
        try:
            got = {lib.bw_load_name(h, i).decode(): (
                [lib.bw_load_dim(h, i, d) for d in range(2)],
                [lib.bw_load_global_dim(h, i, d) for d in range(2)],
                [lib.bw_load_offset(h, i, d) for d in range(2)]) for i in range(2)}
        finally:
            lib.bw_load_close(h)
        self.assertEqual(got["w"], ([2, 4], [5, 4], [3, 0]))
        self.assertEqual(got["col"], ([5, 2], [5, 4], [0, 2]))
        # World 1: plain targets of the global shape are filled in place, a strided one
        # through a copy, a missing one created whole.
        self.as_rank(0, 1)
        target, strided = torch.zeros(5, 4), torch.zeros(4, 5, dtype=torch.int64).t()
        state = {"w": target, "col": strided}
        self.assertEqual(ckpt.load(state, 12).tier, "disk")
        self.assertIs(state["w"], target)
        self.assertTrue(torch.equal(target, w))
        self.assertIs(state["col"], strided)
        self.assertTrue(torch.equal(strided, col))
        out = {}
        ckpt.load(out, 12)
        self.assertTrue(torch.equal(out["w"], w))
        self.assertTrue(torch.equal(out["col"], col))
        # World 3: every rank gets the whole tensors; another shape is replaced.
        self.as_rank(2, 3)
        other = {"w": torch.zeros(3, 4), "col": None}
        ckpt.load(other, 12)
        self.assertTrue(torch.equal(other["w"], w))
        self.assertTrue(torch.equal(other["col"], col))

    def test_bad_pieces_are_clear_errors(self):
        with self.assertRaises(ckpt.CheckpointError) as cm:  # outside its global shape
            self.save_as_rank(0, 1, 13, {"w": (torch.zeros(3, 4), (5, 4), (3, 0))})
        self.assertIn("'w'", str(cm.exception))
        self.assertIn("does not fit", str(cm.exception))
        self.as_rank(0, 1)
        tensors, _, blob = ckpt._prepare({"w": torch.zeros(2, 4)}, "checkpoint.save")
        with self.assertRaises(ckpt.CheckpointError) as cm:  # a piece flagged replicated
            ckpt._stage(13, tensors, blob, False, {"w": ckpt._Piece((5, 4), (0, 0), True)})
        self.assertIn("'w' is the piece [2,4] at [0,0] of [5,4]", str(cm.exception))
        # Rows nobody saved: a clear error naming the tensor, not garbage.
        self.save_as_rank(0, 2, 14, {"w": (torch.ones(2, 4), (5, 4), (0, 0))})
        self.save_as_rank(1, 2, 14, {"w": (torch.ones(2, 4), (5, 4), (3, 0))})
        _lib.check(_lib.lib().bw_commit(14), "commit")
        self.as_rank(0, 1)
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.load({}, 14)
        self.assertIn("'w': rows 2..3 of dim 0 were not saved", str(cm.exception))

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
