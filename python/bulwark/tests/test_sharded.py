"""Tests of bulwark.checkpoint with sharded tensors (DTensor, ShardedTensor) in real gloo
process groups, standalone (no agent: each rank writes its shard to BULWARK_CKPT_DIR, rank
0 commits after a barrier).

A 2-rank group saves DTensors sharded along dim 0 (uneven), dim 1, replicated and with an
empty local piece, a ShardedTensor and a per-rank plain tensor; it loads them back into
differently sharded, zero-initialised tensors in place. A 3-rank group and a 1-rank group
then load the same step with other shardings, and this process (no group) loads it as
plain whole tensors.

Needs torch 2.x with DTensor: ctest runs it (sdk_python_sharded_test) with
BW_TORCH2_PYTHON, by default ~/.cache/bulwark/peers-venv/bin/python. Without DTensor (the
Debian torch 1.13) the tests are skipped; run as a script it then exits 77, which ctest
reports as skipped. Workers are this file run with --worker; every wait has a deadline.
"""
import datetime
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_PARENT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, PKG_PARENT)

import _groups  # noqa: E402  (this directory: the script's own)

_DEADLINE_S = 240  # per group of workers; the process group's own timeout is 60 s


def _why_unavailable():
    """None when this Python has torch with DTensor and gloo, else the reason."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        return f"no torch: {e}"
    if not dist.is_available() or not dist.is_gloo_available():
        return f"torch {torch.__version__} has no torch.distributed with gloo"
    try:
        from torch.distributed.tensor import DTensor  # noqa: F401
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no DTensor ({e})"
    return None


_UNAVAILABLE = _why_unavailable()

# The saved step's global tensors.


def expected():
    import torch
    return {
        "w": torch.arange(28, dtype=torch.float32).reshape(7, 4),         # Shard(0): 4 + 3
        "c": torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.5,   # Shard(1): 3 + 3
        "r": torch.tensor([1.0, 2.0, 3.0]),                               # Replicate()
        "e": torch.arange(4, dtype=torch.int64).reshape(1, 4),            # Shard(0): 1 + 0
        "st": torch.arange(15, dtype=torch.float64).reshape(5, 3) - 7,    # ShardedTensor
    }


class Holder:
    """A Stateful object whose state dict holds sharded tensors (as a model's does)."""

    def __init__(self, sd):
        self.sd = sd

    def state_dict(self):
        return self.sd

    def load_state_dict(self, sd):
        self.sd = dict(sd)


def sharded_tensor(global_tensor, world):
    """A ShardedTensor of `global_tensor` split along dim 0 over the group's ranks."""
    from torch.distributed._shard import sharded_tensor as st
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world)])
    t = st.zeros(spec, *global_tensor.shape, dtype=global_tensor.dtype)
    for s in t.local_shards():
        index = tuple(slice(o, o + n) for o, n in
                      zip(s.metadata.shard_offsets, s.metadata.shard_sizes))
        s.tensor.copy_(global_tensor[index])
    return t


def check_sharded_tensor(t, global_tensor, name):
    for s in t.local_shards():
        index = tuple(slice(o, o + n) for o, n in
                      zip(s.metadata.shard_offsets, s.metadata.shard_sizes))
        if not bool((s.tensor == global_tensor[index]).all()):
            raise AssertionError(f"{name}: local shard at {s.metadata.shard_offsets} is "
                                 f"{s.tensor.tolist()}, want {global_tensor[index].tolist()}")


def check_dtensor(t, global_tensor, name, ptr):
    if t._local_tensor.data_ptr() != ptr:
        raise AssertionError(f"{name}: the local tensor was replaced, not filled in place")
    full = t.full_tensor()
    if full.dtype != global_tensor.dtype or not bool((full == global_tensor).all()):
        raise AssertionError(f"{name}: loaded {full.tolist()}, want {global_tensor.tolist()}")


def worker(phase, rank, world, root):
    """One rank of a group: `phase` is save (world 2), load3 (world 3) or load1 (world 1)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    import bulwark
    import bulwark.checkpoint as ckpt
    from bulwark import _lib

    dist.init_process_group("gloo", init_method=f"file://{root}/store-{phase}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (world,))
    bulwark.init()
    g = expected()

    def dt(name, placements, zero=True):
        src = torch.zeros_like(g[name]) if zero else g[name]
        return distribute_tensor(src, mesh, placements)

    def ptrs(state):
        out = {k: v._local_tensor.data_ptr() for k, v in state.items() if isinstance(v, DTensor)}
        out.update({k: v._local_tensor.data_ptr() for k, v in state["model"].sd.items()})
        return out

    if phase == "save":
        state = {"model": Holder({"w": dt("w", [Shard(0)], False),
                                  "c": dt("c", [Shard(1)], False)}),
                 "r": dt("r", [Replicate()], False), "e": dt("e", [Shard(0)], False),
                 "st": sharded_tensor(g["st"], world),
                 "plain": torch.full((2,), float(rank)), "step": 3}
        assert tuple(state["e"].to_local().shape) == ((1, 4) if rank == 0 else (0, 4))
        ckpt.save(state, 3)
        state["step"] = 4
        ckpt.async_save(state, 4).result(timeout=60)
        dist.barrier()
        if rank == 0:
            for step in (3, 4):
                _lib.check(_lib.lib().bw_commit(step), "commit")
        dist.barrier()
        # The same world, loaded into zeros sharded differently: rows <-> columns.
        fresh = {"model": Holder({"w": dt("w", [Shard(1)]), "c": dt("c", [Shard(0)])}),
                 "r": dt("r", [Replicate()]), "e": dt("e", [Shard(1)]),
                 "st": sharded_tensor(torch.zeros_like(g["st"]), world),
                 "plain": torch.zeros(2), "step": 0}
        before = ptrs(fresh)
        info = ckpt.load(fresh, 4)
        assert (info.step, info.tier, fresh["step"]) == (4, "disk", 4), (info, fresh["step"])
        for name, t in list(fresh["model"].sd.items()) + [("r", fresh["r"]), ("e", fresh["e"])]:
            check_dtensor(t, g[name], name, before[name])
        check_sharded_tensor(fresh["st"], g["st"], "st")
        assert torch.equal(fresh["plain"], torch.full((2,), float(rank))), fresh["plain"]
        # Clear errors naming the tensor, on every rank alike (no collective is left hanging).
        try:
            from torch.distributed.tensor import Partial
            ckpt.save({"bad": DTensor.from_local(torch.ones(2), mesh, [Partial()])}, 5)
            raise AssertionError("a Partial DTensor was saved")
        except ckpt.CheckpointError as e:
            assert "'bad'" in str(e) and "Partial" in str(e), str(e)
        try:
            ckpt.load({"r": dt("r", [Replicate()]), "e": distribute_tensor(
                torch.zeros(2, 4, dtype=torch.int64), mesh, [Shard(0)])}, 4)
            raise AssertionError("a DTensor of another global shape was loaded")
        except ckpt.CheckpointError as e:
            assert "'e'" in str(e) and "global shape [2, 4]" in str(e), str(e)
    elif phase == "load3":
        # Three ranks: 3 + 3 + 1 rows, 2 + 2 + 2 columns, a ShardedTensor of 2 + 2 + 1 rows.
        fresh = {"model": Holder({"w": dt("w", [Shard(0)]), "c": dt("c", [Shard(1)])}),
                 "r": dt("r", [Replicate()]), "e": dt("e", [Shard(1)]),
                 "st": sharded_tensor(torch.zeros_like(g["st"]), world), "plain": None}
        before = ptrs(fresh)
        ckpt.load(fresh, 3)
        for name, t in list(fresh["model"].sd.items()) + [("r", fresh["r"]), ("e", fresh["e"])]:
            check_dtensor(t, g[name], name, before[name])
        check_sharded_tensor(fresh["st"], g["st"], "st")
        # A per-rank plain tensor comes from rank `rank mod saved world`.
        assert torch.equal(fresh["plain"], torch.full((2,), float(rank % 2))), fresh["plain"]
    elif phase == "load1":
        # One rank: a DTensor on a 1-rank mesh, a plain tensor of the global shape filled in
        # place, missing targets created whole.
        c = torch.zeros(4, 6)
        fresh = {"model": Holder({"w": dt("w", [Shard(0)]), "c": c}),
                 "st": sharded_tensor(torch.zeros_like(g["st"]), world)}
        before = ptrs({"model": Holder({"w": fresh["model"].sd["w"]})})
        ckpt.load(fresh, 3)
        check_dtensor(fresh["model"].sd["w"], g["w"], "w", before["w"])
        assert fresh["model"].sd["c"] is c and torch.equal(c, g["c"]), c
        check_sharded_tensor(fresh["st"], g["st"], "st")
        for name in ("r", "e"):
            assert torch.equal(fresh[name], g[name]), (name, fresh[name])
    dist.barrier()
    dist.destroy_process_group()
    print(f"worker {phase} rank {rank}: ok", flush=True)


@unittest.skipIf(_UNAVAILABLE is not None, f"needs torch 2.x with DTensor: {_UNAVAILABLE}")
class ShardedCheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bw_py_sharded.")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("BULWARK_") or k == "BULWARK_LIB"}
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            self.env.pop(k, None)
        self.env["BULWARK_CKPT_DIR"] = os.path.join(self.dir, "ckpt")
        self.env["PYTHONPATH"] = os.pathsep.join(
            [PKG_PARENT] + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p])

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_group(self, phase, world):
        return _groups.run_workers(self, os.path.abspath(__file__), phase, world, self.dir,
                                   self.env, _DEADLINE_S)

    def test_dtensor_and_sharded_tensor_save_and_reshard(self):
        self.run_group("save", 2)
        self.run_group("load3", 3)
        self.run_group("load1", 1)
        # This process, with no process group: every tensor whole, as a plain tensor.
        import bulwark
        import bulwark.checkpoint as ckpt
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(self.env)
            bulwark.init()
            out = {}
            info = ckpt.load(out, 3)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            bulwark.init()
        self.assertEqual((info.step, info.tier), (3, "disk"))
        g = expected()
        model = out["model"]
        import torch
        for name in ("w", "c"):
            self.assertTrue(torch.equal(model[name], g[name]), name)
        for name in ("r", "e", "st"):
            self.assertTrue(torch.equal(out[name], g[name]), name)
        self.assertEqual(out["step"], 3)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        # The worker's checks are done and reported; leave without the interpreter's
        # teardown, in which torch 2.x's gloo sometimes aborts ("terminate called without
        # an active exception", once in a loaded run) after destroy_process_group.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if _UNAVAILABLE is not None:
        print(f"skipped: needs torch 2.x with DTensor: {_UNAVAILABLE}")
        sys.exit(77)
    unittest.main()
