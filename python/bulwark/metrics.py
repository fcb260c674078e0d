"""Training metrics beyond the heartbeat: step phases, model FLOPs and MFU.

    import bulwark
    from bulwark import metrics

    metrics.set_model_flops(metrics.flops_per_token(model, n_layers=12, n_heads=12,
                                                    head_dim=64, seq_len=1024))
    for x, y in metrics.timed(loader):          # time blocked on the loader = data wait
        with metrics.phase("compute"):
            loss = model(x, y); loss.backward()
        with metrics.phase("optimizer"):
            opt.step()
        bulwark.report_step(step, loss, tokens=x.numel(), lr=sched.get_last_lr()[0])

Phases measured with `phase` and `timed` since the previous report are sent with the
next `bulwark.report_step` (an explicit keyword wins). The controller derives tokens/s,
MFU (with the peak FLOPS of the job's devices: `peak_flops`, or the spec's
`monitoring.peakFlops`) and cost from them (docs/monitoring.md).
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from typing import Any, Dict, Iterable, Iterator, Optional, TypeVar

from bulwark import _lib

T = TypeVar("T")

PHASES = ("data_wait", "compute", "optimizer")
_lock = threading.Lock()
_acc: Dict[str, float] = {}


def _add(phase_name: str, seconds: float) -> None:
    with _lock:
        _acc[phase_name] = _acc.get(phase_name, 0.0) + seconds


def take_phases() -> Dict[str, float]:
    """The phase times accumulated since the last call (report_step calls it)."""
    with _lock:
        out = dict(_acc)
        _acc.clear()
    return out


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Times the block as step phase `name` ("data_wait", "compute" or "optimizer")."""
    if name not in PHASES:
        raise ValueError(f"bulwark.metrics.phase: unknown phase {name!r}; "
                         f"use one of {', '.join(PHASES)}")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _add(name, time.perf_counter() - t0)


def timed(iterable: Iterable[T]) -> Iterator[T]:
    """Yields the items of `iterable`, counting the time spent waiting for each as data
    wait (the input pipeline's share of the step)."""
    it = iter(iterable)
    lib = _lib.lib()
    while True:
        t0 = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        delay = lib.bw_data_delay()  # chaos slow_data (0 unless injected)
        if delay > 0:
            time.sleep(delay)
        _add("data_wait", time.perf_counter() - t0)
        yield item


def flops_per_token(model: Any = None, *, n_layers: int, n_heads: int, head_dim: int,
                    seq_len: int, n_params: Optional[int] = None,
                    exclude_embeddings: bool = True) -> float:
    """Training FLOPs per token of a decoder transformer, PaLM's rule as nanoGPT and
    torchtitan compute it: 6·N + 12·L·H·Q·T, with N the parameters (those of
    torch.nn.Embedding modules left out when `exclude_embeddings`: a lookup does no
    matmul), L layers, H heads, Q head dimension, T sequence length. `n_params`
    overrides the count taken from `model`."""
    if n_params is None:
        if model is None:
            raise ValueError("bulwark.metrics.flops_per_token: pass a model or n_params")
        n_params = sum(p.numel() for p in model.parameters())
        if exclude_embeddings:
            import torch  # only when counting a model
            n_params -= sum(p.numel() for m in model.modules()
                            if isinstance(m, torch.nn.Embedding) for p in m.parameters())
    for name, v in (("n_layers", n_layers), ("n_heads", n_heads), ("head_dim", head_dim),
                    ("seq_len", seq_len), ("n_params", n_params)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"bulwark.metrics.flops_per_token: {name} must be a positive "
                             f"integer (got {v!r})")
    return float(6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len)


def peak_flops(gpu_name: str, dtype: str = "bf16") -> float:
    """Dense peak FLOPS of one device from Bulwark's table (the same the controller
    uses), e.g. peak_flops("NVIDIA H100 80GB HBM3") == 989e12; 0.0 when unknown."""
    return float(_lib.lib().bw_peak_flops(gpu_name.encode(), dtype.encode()))


def mfu(flops_per_token_: float, tokens_per_second: float, devices: int,
        peak_flops_per_device: float) -> float:
    """Model FLOPs utilisation: flops/token × tokens/s ÷ (devices × peak FLOPS)."""
    if not (flops_per_token_ > 0 and tokens_per_second > 0 and devices > 0 and
            peak_flops_per_device > 0):
        return 0.0
    return flops_per_token_ * tokens_per_second / (devices * peak_flops_per_device)


def set_model_flops(flops_per_token_: float) -> None:
    """Declares the model's training FLOPs per token to the agent (for MFU)."""
    if not (isinstance(flops_per_token_, (int, float)) and math.isfinite(flops_per_token_)
            and flops_per_token_ > 0):
        raise ValueError("bulwark.metrics.set_model_flops: flops_per_token must be a finite "
                         f"number > 0 (got {flops_per_token_!r})")
    _lib.check(_lib.lib().bw_set_model_flops(float(flops_per_token_)), "set_model_flops")
