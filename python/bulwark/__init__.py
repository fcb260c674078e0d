"""Bulwark SDK for training ranks: progress reports, checkpoints and in-process recovery.

    import bulwark
    from bulwark import checkpoint

    def train(cfg):
        model = DDP(build_model(cfg))                 # built inside: once per generation
        opt = torch.optim.AdamW(model.parameters())
        state = {"model": model, "optim": opt}
        loaded = checkpoint.load(state)               # in place; None on a fresh start
        start = loaded.step + 1 if loaded else 0
        for step in bulwark.steps(start, cfg.steps):  # a safe point before each step
            loss = train_step(model, opt, step)
            bulwark.report_step(step, loss, tokens=cfg.tokens_per_step)
            checkpoint.save(state, step, replicated=True)

    if __name__ == "__main__":
        bulwark.run(train, cfg)

`bulwark.run` runs the training function in generations: when a fault happens anywhere
in the job, the surviving ranks keep their processes, leave the function at a safe
point, re-form the process group and call it again, restoring the agreed step from
memory (docs/sdk.md). Outside the Bulwark agent everything still works: under torchrun
`run` calls the function once; without any launcher reports go nowhere.

libbulwark.so is found via $BULWARK_LIB, the copy `pip install` put in this package, or
a source checkout's build/lib. Errors from the library raise BulwarkError.
"""
from __future__ import annotations

import ctypes
import hashlib
import sys
from typing import Any, List, Optional, Tuple

from bulwark import _lib, _stacks
from bulwark import metrics as _metrics
from bulwark._lib import BulwarkError
from bulwark._runtime import _RUNTIME, Generation, Restart, check, generation, run, steps

__all__ = [
    "BulwarkError", "Generation", "Restart", "RngState", "batch_indices", "check", "check_alignment",
    "data_digest", "deterministic",
    "generation", "init", "ordered_allreduce_hook",
    "parameter_digest", "poll_injected_nan", "poll_injected_sdc",
    "rank", "report_step", "resume_step", "rng_digest", "run", "seed_step", "should_checkpoint", "should_skip",
    "skip_range", "steps", "world_size",
]


def init() -> None:
    """Reads the rank environment, connects to the agent (if any) and registers the
    SIGUSR1 stack dump. `bulwark.run` calls it; calling it again is harmless."""
    _stacks.register_stack_dump()
    _lib.check(_lib.lib().bw_init(), "init")


def rank() -> int:
    return _lib.check(_lib.lib().bw_rank(), "rank")


def world_size() -> int:
    return _lib.check(_lib.lib().bw_world_size(), "world_size")


_NAN = float("nan")
_reported = False  # a trainer reports its own steps (auto-instrumentation then stands down)
_deterministic = False  # deterministic() was called: report_step sends the RNG digest
# ordered_allreduce_hook's calls in this process, and their count at the last report: a
# step whose gradients went through the hook was summed in a fixed order.
_ordered_sums = 0
_ordered_sums_reported = 0


def report_step(step: int, loss: float, tokens: int = 0, *, samples: Optional[float] = None,
                lr: Optional[float] = None, grad_norm: Optional[float] = None,
                data_wait: Optional[float] = None, compute: Optional[float] = None,
                optimizer: Optional[float] = None, busy: Optional[float] = None,
                data: Any = None, _inferred: bool = False) -> None:
    """Reports a finished step (the heartbeat; non-blocking, dropped if no agent
    listens; held in order while the agent's socket is full). A safe point of
    bulwark.run. `loss` may be a tensor (float(loss)). The
    keywords are optional measurements of the step (seconds for the phases); phases
    timed with bulwark.metrics.phase/timed since the last report fill those not given.
    `busy`: this rank's own work in the step, without waiting for other ranks (default:
    the process's CPU time; on a GPU pass the device time), for the straggler score.

    For replay (docs/diagnosis.md): after deterministic(), every report carries a digest
    of this rank's random generators' state; `data` (the step's input: a tensor, bytes,
    or a list/tuple of them or of numbers) adds a digest of it. A re-run of the step
    compares both with the record, so a loss that differs because the trainer drew
    other random numbers or read other data is not blamed on the hardware. With other
    ranks, the report also says whether the step's gradients went through
    ordered_allreduce_hook: sums in an order that is not fixed (DDP's ring) make a
    re-run's last bits differ, and then only whether the fault came back counts."""
    global _reported, _ordered_sums_reported
    if not _inferred:
        _reported = True
    acc = _metrics.take_phases()
    m = _lib.StepMetrics()
    m.size = ctypes.sizeof(_lib.StepMetrics)
    for field, v in (("samples", samples), ("lr", lr), ("grad_norm", grad_norm),
                     ("data_wait_s", data_wait if data_wait is not None
                      else acc.get("data_wait")),
                     ("compute_s", compute if compute is not None else acc.get("compute")),
                     ("optimizer_s", optimizer if optimizer is not None
                      else acc.get("optimizer")),
                     ("busy_s", busy)):
        setattr(m, field, _NAN if v is None else float(v))
    m.inferred = 1 if _inferred else 0
    if _deterministic:
        m.rng_digest = rng_digest()
        if _lib.lib().bw_world_size() > 1:  # summed with other ranks: in which order?
            m.sum_order = 1 if _ordered_sums != _ordered_sums_reported else 2
    _ordered_sums_reported = _ordered_sums
    if data is not None:
        m.data_digest = data_digest(data)
    loss = float(loss)
    _lib.check(_lib.lib().bw_report_step_ex(int(step), loss, int(tokens),
                                            ctypes.byref(m)), "report_step")
    ck = sys.modules.get("bulwark.checkpoint")
    if ck is not None:
        ck._mark_reported(step, loss)  # the state a park may snapshot is this step's
    _RUNTIME.check()


def resume_step() -> int:
    """The step to resume from in this generation, or -1 for a fresh start."""
    return int(_lib.lib().bw_resume_step())


def should_checkpoint(step: int) -> bool:
    """True when `step` is due for the disk tier (checkpoint.intervalSteps)."""
    return bool(_lib.check(_lib.lib().bw_should_checkpoint(int(step)), "should_checkpoint"))


def poll_injected_nan() -> bool:
    """True once after the agent injected a NaN (chaos testing)."""
    return bool(_lib.check(_lib.lib().bw_poll_injected_nan(), "poll_injected_nan"))


def poll_injected_sdc() -> bool:
    """True once after the agent injected silent data corruption (chaos `sdc`)."""
    return bool(_lib.check(_lib.lib().bw_poll_injected_sdc(), "poll_injected_sdc"))


def parameter_digest(module: Any) -> int:
    """A 64-bit digest (XXH3, in libbulwark: no copy of a CPU tensor) of the bytes of
    `module`'s parameters, in order: equal on two ranks exactly when they hold the same
    parameters bit for bit. Parameters are torch tensors, or any object with the buffer
    protocol (bytearray, numpy arrays)."""
    keep, ptrs, lens = [], [], []
    for p in module.parameters():
        if hasattr(p, "detach"):
            t = p.detach()
            if t.device.type != "cpu" or not t.is_contiguous():
                t = t.cpu().contiguous()
            ptrs.append(t.data_ptr() if t.numel() else None)
            lens.append(t.numel() * t.element_size())
        else:  # a buffer: its bytes copied (only tensors are read in place)
            t = bytes(memoryview(p))
            ptrs.append(ctypes.cast(ctypes.c_char_p(t), ctypes.c_void_p).value if t else None)
            lens.append(len(t))
        keep.append(t)  # alive until the digest is taken
    n = len(ptrs)
    return int(_lib.lib().bw_digest(n, (ctypes.c_void_p * n)(*ptrs), (ctypes.c_size_t * n)(*lens)))


def _perturb(module: Any) -> None:
    """Chaos sdc: a tensor's first element moves by a part in a thousand; a buffer's
    first byte gets its lowest bit flipped."""
    for p in module.parameters():
        if hasattr(p, "is_floating_point"):
            if p.numel() and p.is_floating_point():
                import torch
                with torch.no_grad():
                    p.view(-1)[0] += 1e-3 * max(1.0, float(p.view(-1)[0].abs()))
                return
        else:
            m = memoryview(p).cast("B")
            if len(m):
                m[0] ^= 1
                return


def check_alignment(step: int, module: Any, *, every: int = 10,
                    group: Optional[str] = None) -> None:
    """The bitwise alignment check (docs/diagnosis.md). Call it after the optimizer step
    on every rank that must hold the same parameters as the others of `group` (data
    parallel: every rank, group None): every `every`-th step the parameters' digest goes
    to the agent, and the controller names a rank whose parameters differ from the rest
    (silent data corruption) and takes its node out. Chaos `sdc` perturbs this rank's
    parameters here (a tensor element by a part in a thousand, a buffer's lowest bit):
    no crash, no NaN."""
    if poll_injected_sdc():
        _perturb(module)
    if every <= 0 or step % every != 0:
        return
    _lib.check(_lib.lib().bw_report_digest(int(step), parameter_digest(module),
                                           group.encode() if group else None),
               "report_digest")


def deterministic(seed: int) -> List[str]:
    """Makes this rank's computation repeatable, so a re-run of its steps (`bulwark
    replay`, and the replay check after a NaN or a crash; docs/diagnosis.md) computes the
    same losses bit for bit: seeds Python's, NumPy's and torch's generators with `seed`,
    asks torch for deterministic algorithms and turns off cuDNN's autotuner. Call it once,
    before building the model. Returns what it could not make deterministic, one
    sentence each (empty: nothing known): the data order and the generator state after a
    resume are the trainer's (see seed_step), and so are DataLoader workers."""
    global _deterministic
    _deterministic = True
    gaps: List[str] = []
    if not _seed_all(seed):
        return ["torch is not installed: only Python's and NumPy's generators were seeded"]
    import torch
    if hasattr(torch, "use_deterministic_algorithms"):
        try:  # warn, not raise, where an op has no deterministic kernel (torch >= 1.11)
            torch.use_deterministic_algorithms(True, warn_only=True)
        except TypeError:
            torch.use_deterministic_algorithms(True)
    else:
        gaps.append("torch %s has no use_deterministic_algorithms: some kernels may "
                    "differ from run to run" % torch.__version__)
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    if torch.cuda.is_available():
        import os
        if os.environ.get("CUBLAS_WORKSPACE_CONFIG") is None:
            gaps.append("CUBLAS_WORKSPACE_CONFIG is not set (set it to :4096:8 before CUDA "
                        "starts): cuBLAS may reduce in another order from run to run")
    return gaps


def ordered_allreduce_hook(process_group, bucket):  # type: ignore[no-untyped-def]
    """A DDP communication hook that sums the ranks' gradients in rank order:
    `ddp.register_comm_hook(None, bulwark.ordered_allreduce_hook)`.

    DDP's own all-reduce (a ring) adds each element's ranks in an order that depends on
    where the element falls in its bucket, and DDP lays its buckets out anew after the
    first step of every process: a run resumed from a checkpoint then sums some
    gradients in another order than the first run did, and its losses drift from the
    record by a few ulps. This hook adds every element's ranks 0, 1, ..., world-1 in that
    order wherever it lies, so the sums depend on the data alone (what `bulwark replay`
    needs to compare bit for bit). A large bucket moves what a ring moves: an
    all-to-all hands rank j the j-th slice of every rank's bucket, rank j sums its slice
    in rank order and divides by the world size, an all-gather returns the slices to
    everyone (the all-to-all is waited for inside the hook; the all-gather overlaps the
    backward pass as DDP's all-reduce would). A bucket of at most
    ORDERED_GATHER_MAX_BYTES once multiplied by the world size (DDP's first bucket, a
    small model), or any bucket on a backend without all-to-all, is gathered whole from
    every rank and summed in rank order: one collective instead of two. Both ways give
    the same bits. A failed collective raises, never sums garbage. (Not annotated: DDP
    refuses a hook whose annotations are not its own types.)"""
    import torch.distributed as dist
    global _ordered_sums
    _ordered_sums += 1
    group = process_group if process_group is not None else dist.group.WORLD
    t = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    gathered_bytes = t.numel() * t.element_size() * dist.get_world_size(group)
    if gathered_bytes <= ORDERED_GATHER_MAX_BYTES or _ALLTOALL_UNSUPPORTED.get(
            dist.get_backend(group)):
        return _gathered_sum(group, t)
    try:
        return _sliced_sum(group, t)
    except RuntimeError as e:
        # A backend without all-to-all says so ("ProcessGroupX does not support
        # alltoall_base") before any transfer; every rank of the group fails here alike.
        if "support" not in str(e).lower():
            raise
        _ALLTOALL_UNSUPPORTED[dist.get_backend(group)] = True
        return _gathered_sum(group, t)


# ordered_allreduce_hook gathers a bucket whole when bucket bytes x world size is at most
# this: there one collective that overlaps the backward pass beats two of which the first
# blocks it. Measured in bench/allreduce_hook (4 ranks, gloo on CPU): alone, slices win
# from 2 MiB buckets on; in DDP, gathering its first bucket (a little over 1 MiB) whole
# wins.
ORDERED_GATHER_MAX_BYTES = 6 << 20
_ALLTOALL_UNSUPPORTED: dict = {}  # backend name -> True once all_to_all_single refused


def _slice_sizes(n: int, world: int) -> List[int]:
    """Rank j's slice of an n-element bucket: ceil(n / world) elements, fewer at the end."""
    c = -(-n // world)
    return [max(0, min(c, n - j * c)) for j in range(world)]


def _sliced_sum(group, t):  # type: ignore[no-untyped-def]
    """Reduce-scatter by all-to-all, the rank-order sum of this rank's slice, all-gather."""
    import torch
    import torch.distributed as dist
    world, me = dist.get_world_size(group), dist.get_rank(group)
    n = t.numel()
    sizes = _slice_sizes(n, world)
    c, mine = sizes[0], sizes[me]
    recv = torch.empty(world * mine, dtype=t.dtype, device=t.device)
    dist.all_to_all_single(recv, t.view(-1), [mine] * world, sizes, group=group)
    rows = recv.view(world, mine)
    acc = torch.zeros(c, dtype=t.dtype, device=t.device)  # padded: all-gather wants equal parts
    acc[:mine].copy_(rows[0])
    for r in range(1, world):
        acc[:mine].add_(rows[r])
    acc.div_(world)
    out = torch.empty(world * c, dtype=t.dtype, device=t.device)
    fut = dist.all_gather(list(out.view(world, c).unbind(0)), acc, group=group,
                          async_op=True).get_future()

    def whole(done: Any) -> Any:
        done.value()  # raises when the gather failed (a peer died)
        return out[:n].view_as(t)

    return fut.then(whole)


def _gathered_sum(group, t):  # type: ignore[no-untyped-def]
    """Every rank's whole bucket gathered, summed in rank order: the same bits as
    _sliced_sum, world-size times the traffic."""
    import torch
    import torch.distributed as dist
    world = dist.get_world_size(group)
    parts = [torch.empty_like(t) for _ in range(world)]
    fut = dist.all_gather(parts, t, group=group, async_op=True).get_future()

    def ordered_sum(done: Any) -> Any:
        done.value()  # raises when the gather failed (a peer died): never sum garbage
        out = parts[0].clone()
        for p in parts[1:]:
            out.add_(p)
        return out.div_(world)

    return fut.then(ordered_sum)


def rng_digest() -> int:
    """A 64-bit digest (never 0) of this process's random generators' state (RngState):
    Python's, NumPy's and torch's (CPU, and every CUDA device once CUDA is initialised).
    Two processes that drew the same random numbers from the same seeds have equal ones."""
    import pickle
    h = hashlib.blake2b(digest_size=8)
    state = RngState().state_dict()
    h.update(pickle.dumps(state["python"], protocol=4))
    if "numpy" in state:
        h.update(state["numpy"][1].tobytes())
        h.update(repr(state["numpy"][2:]).encode())
    if "torch" in state:
        h.update(state["torch"].numpy().tobytes())
    for s in state.get("cuda", []):
        h.update(s.cpu().numpy().tobytes())
    return int.from_bytes(h.digest(), "little") or 1


class RngState:
    """This process's random generators — Python's, NumPy's (if imported) and torch's
    (CPU, and every CUDA device once CUDA is initialised) — as a Stateful for
    bulwark.checkpoint: put `"rng": bulwark.RngState()` beside the model in the state
    saved each checkpoint, and a resumed run (or `bulwark replay`, which resumes from the
    incident's checkpoint) continues the random streams where the first run was, for a
    trainer that does not seed each step with seed_step. Each rank saves its own."""

    def state_dict(self) -> dict:
        import random
        import sys
        out: dict = {"python": random.getstate()}
        np_random = sys.modules.get("numpy.random")
        if np_random is not None:
            out["numpy"] = np_random.get_state()
        torch = sys.modules.get("torch")
        if torch is not None:
            out["torch"] = torch.get_rng_state()
            cuda = getattr(torch, "cuda", None)
            if cuda is not None and cuda.is_available() and cuda.is_initialized():
                out["cuda"] = list(cuda.get_rng_state_all())
        return out

    def load_state_dict(self, state: dict) -> None:
        import random
        import sys
        if "python" in state:
            py = state["python"]
            # Saved as a tuple; a checkpoint round trip may give lists back.
            random.setstate((py[0], tuple(py[1]), py[2]))
        if "numpy" in state:
            import numpy
            numpy.random.set_state(tuple(state["numpy"]))
        torch = sys.modules.get("torch")
        if "torch" in state:
            if torch is None:
                import torch  # noqa: F811
            torch.set_rng_state(state["torch"].to("cpu", torch.uint8))
        if "cuda" in state and torch is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.to("cpu", torch.uint8) for s in state["cuda"]])


def data_digest(data: Any) -> int:
    """A 64-bit digest (never 0) of a step's input: a tensor (its dtype, shape and
    bytes), bytes, a number or string, or a list/tuple of these. TypeError otherwise."""
    h = hashlib.blake2b(digest_size=8)

    def add(x: Any) -> None:
        if isinstance(x, (bytes, bytearray, memoryview)):
            h.update(b"b")
            h.update(bytes(x))
        elif isinstance(x, (list, tuple)):
            h.update(b"[%d" % len(x))
            for e in x:
                add(e)
        elif isinstance(x, (bool, int, float, str)):
            h.update(repr((type(x).__name__, x)).encode())
        elif hasattr(x, "detach") and hasattr(x, "dtype"):  # a torch tensor: dtype, shape, bits
            import torch
            t = x.detach().cpu().contiguous()
            h.update(repr((str(t.dtype), tuple(t.shape))).encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif hasattr(x, "tobytes") and hasattr(x, "dtype"):  # a NumPy array
            h.update(repr((str(x.dtype), tuple(x.shape))).encode())
            h.update(x.tobytes())
        else:
            raise TypeError("report_step(data=...): a tensor, an array, bytes, a number, a "
                            "string or a list/tuple of them, not %s" % type(x).__name__)

    add(data)
    return int.from_bytes(h.digest(), "little") or 1


def seed_step(seed: int, step: int) -> None:
    """Seeds Python's, NumPy's and torch's generators from (seed, step, this rank): the
    random numbers a step draws (dropout, sampling) then depend on the step alone, so a
    run resumed from a checkpoint draws what the first run drew without saving the
    generators' state. Call it at the start of every step."""
    _seed_all((seed * 1000003 + step) * 1000033 + max(0, _rank_or_zero()))


def batch_indices(step: int, batch_size: int, dataset_len: int, *, seed: int,
                  rank: int = 0, world_size: int = 1) -> List[int]:
    """The dataset indices of this rank's batch at `step`: the data position as a pure
    function of the step, so a run resumed from any checkpoint (and a replay) reads the
    batches the first run read, with no sampler state to save. Step s covers global
    samples [s * batch_size * world_size, (s + 1) * batch_size * world_size) of an endless
    sequence of epochs, each a permutation of range(dataset_len) drawn from (seed, epoch);
    this rank takes its batch_size of them. Skipping data after a NaN (skip_range) is the
    trainer's: use another seed, or the next step's indices, for skipped steps."""
    if batch_size < 1 or dataset_len < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("batch_indices: want batch_size >= 1, dataset_len >= 1 and "
                         "0 <= rank < world_size")
    import random
    out: List[int] = []
    first = (step * world_size + rank) * batch_size
    perms: dict = {}
    for g in range(first, first + batch_size):
        epoch, at = divmod(g, dataset_len)
        if epoch not in perms:
            p = list(range(dataset_len))
            random.Random(seed * 1000003 + epoch).shuffle(p)
            perms[epoch] = p
        out.append(perms[epoch][at])
    return out


def _seed_all(seed: int) -> bool:
    """Seeds Python's, NumPy's (if installed) and torch's (if installed) generators;
    False when torch is not installed."""
    import random
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed % (2 ** 32))
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        return False
    torch.manual_seed(seed % (2 ** 63))
    return True


def _rank_or_zero() -> int:
    try:
        return rank()
    except BulwarkError:
        return 0


def skip_range() -> Optional[Tuple[int, int]]:
    """(from, to): data batches of steps in [from, to) to skip after a NaN rollback."""
    lib = _lib.lib()
    lo, hi = int(lib.bw_skip_from()), int(lib.bw_skip_to())
    if lo < 0 or hi <= lo:
        return None
    return (lo, hi)


def should_skip(step: int) -> bool:
    r = skip_range()
    return r is not None and r[0] <= step < r[1]

from bulwark import checkpoint  # noqa: E402  (bulwark.checkpoint without a second import)

from bulwark import metrics  # noqa: E402

__all__ += ["checkpoint", "metrics"]
