"""Tests of bulwark.ordered_allreduce_hook in real gloo process groups of 4 ranks.

- Buckets of 1 to 4099 elements (fewer elements than ranks, uneven slices, float32 and
  float64, values of magnitudes 1e-3 to 1e3 so that the order of a sum shows in its
  bits): every rank gets, bit for bit, the sum of the ranks' buckets added rank 0 first,
  divided by the world size, from the hook and from each of its two ways (slices by
  all-to-all, whole buckets gathered); the same data through gloo's own all-reduce does
  not (so the comparison can fail). On a backend that refuses all-to-all the hook falls
  back to the gather, same bits, and does not ask again.
- DDP with the hook: 4 steps with DDP's default buckets and with a bucket per layer
  (another layout) end with the same parameters bit for bit, on every rank.
- A rank that died: the others' hook (its all-to-all) raises instead of summing garbage
  or hanging.

Runs on the Debian torch 1.13 (ctest: sdk_python_allreduce_test). Workers are this file
run with --worker; every wait has a deadline.
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

_DEADLINE_S = 240  # per group of workers; the process group's own timeout is 30 s
_WORLD = 4
_SIZES = (1, 3, 4, 5, 1000, 4099)


class _Bucket:
    """What the hook reads of DDP's GradBucket: its flat buffer."""

    def __init__(self, t):
        self._t = t

    def buffer(self):
        return self._t


def _data(rank, n, dtype):
    import torch
    g = torch.Generator().manual_seed(1000 * rank + n)
    scale = torch.pow(10.0, torch.randint(-3, 4, (n,), generator=g).double())
    return (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(dtype)


def _rank_order_mean(n, dtype, world):
    out = _data(0, n, dtype).clone()
    for r in range(1, world):
        out.add_(_data(r, n, dtype))
    return out.div_(world)


def _check_sums(rank, world):
    import torch
    import torch.distributed as dist

    import bulwark
    ring_differs = False
    for dtype in (torch.float32, torch.float64):
        for n in _SIZES:
            want = _rank_order_mean(n, dtype, world)
            got = bulwark.ordered_allreduce_hook(None, _Bucket(_data(rank, n, dtype))).wait()
            assert got.dtype == dtype and got.shape == (n,), (got.dtype, got.shape)
            assert torch.equal(got, want), f"n={n} {dtype}: differs from the rank-order sum"
            # The hook gathers buckets this small whole; each way on its own:
            for way in (bulwark._sliced_sum, bulwark._gathered_sum):
                got = way(dist.group.WORLD, _data(rank, n, dtype)).wait()
                assert torch.equal(got, want), f"n={n} {dtype}: {way.__name__} differs"
            ring = _data(rank, n, dtype)
            dist.all_reduce(ring)
            ring_differs = ring_differs or not torch.equal(ring.div_(world), want)
    assert ring_differs, "gloo's all-reduce matched the rank-order sum everywhere: weak data"
    # A backend without all-to-all (as torch's base ProcessGroup refuses it): the hook
    # gathers instead, with the same bits, and remembers it.
    n = 600000  # sliced while all-to-all works
    real = dist.all_to_all_single
    calls = []

    def refuse(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("ProcessGroupFake does not support alltoall_base")

    dist.all_to_all_single = refuse
    try:
        for _ in range(2):
            got = bulwark.ordered_allreduce_hook(None, _Bucket(_data(rank, n, torch.float32)))
            assert torch.equal(got.wait(), _rank_order_mean(n, torch.float32, world)), \
                "the fallback's sums differ"
    finally:
        dist.all_to_all_single = real
        bulwark._ALLTOALL_UNSUPPORTED.clear()
    assert len(calls) == 1, f"all-to-all tried {len(calls)} times; once, then remembered"


def _train(bucket_cap_mb):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import bulwark
    torch.manual_seed(7)
    layers = [torch.nn.Linear(32, 256), torch.nn.Tanh()]
    for _ in range(8):  # 2.1 MB in all: DDP's first bucket holds 1 MB, the rest another
        layers += [torch.nn.Linear(256, 256), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(256, 1))
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
    ddp.register_comm_hook(None, bulwark.ordered_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(int(os.environ["RANK"]))
    for _ in range(4):
        x = torch.randn(16, 32, generator=g) * 3
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _check_ddp(rank, world):
    import torch
    import torch.distributed as dist
    few = _train(bucket_cap_mb=25)    # 1 MB, then one bucket of the rest
    many = _train(bucket_cap_mb=0.2)  # 1 MB, then a bucket per layer: another layout
    assert torch.equal(few, many), "another bucket layout changed the parameters' bits"
    everyone = [torch.empty_like(few) for _ in range(world)]
    dist.all_gather(everyone, few)
    for r, p in enumerate(everyone):
        assert torch.equal(p, few), f"rank {r}'s parameters differ from rank {rank}'s"


def worker(phase, rank, world, root):
    import torch  # noqa: F401
    import torch.distributed as dist

    import bulwark
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{root}/store-{phase}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=30))
    if phase == "sums":
        _check_sums(rank, world)
    elif phase == "ddp":
        _check_ddp(rank, world)
    elif phase == "peer_dies":
        dist.barrier()
        if rank == world - 1:
            os._exit(0)  # gone without a word: its sockets close
        try:
            big = _data(rank, 600000, torch.float32)  # 9.2 MB gathered: sliced, all-to-all
            bulwark.ordered_allreduce_hook(None, _Bucket(big)).wait()
        except RuntimeError as e:
            print(f"worker {phase} rank {rank}: raised: {e}", flush=True)
            os._exit(0)  # the group is broken: no destroy
        raise AssertionError("the hook returned although a rank was gone")
    dist.barrier()
    dist.destroy_process_group()
    print(f"worker {phase} rank {rank}: ok", flush=True)


class OrderedAllreduceHookTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="bw_py_allreduce.")
        self.env = {k: v for k, v in os.environ.items() 
                    if not k.startswith("BULWARK_") or k == "BULWARK_LIB"}
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            self.env.pop(k, None)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [PKG_PARENT] + [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p])

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_group(self, phase, world=_WORLD):
        return _groups.run_workers(self, os.path.abspath(__file__), phase, world, self.dir,
                                   self.env, _DEADLINE_S)

    def test_sums_in_rank_order_bit_for_bit(self):
        self.run_group("sums")

    def test_ddp_parameters_do_not_depend_on_the_bucket_layout(self):
        self.run_group("ddp")

    def test_a_dead_peer_raises(self):
        outputs = self.run_group("peer_dies")
        for r in range(_WORLD - 1):
            self.assertIn(f"rank {r}: raised", outputs[r])


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        sys.exit(0)
    unittest.main()
