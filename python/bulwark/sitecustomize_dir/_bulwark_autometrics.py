"""Bulwark's instrumentation of unmodified PyTorch scripts (docs/monitoring.md,
"Unmodified scripts").

Imported by Bulwark's sitecustomize in every rank (and the node's zygote and warm
ranks, which fork ranks after torch is imported). It patches PyTorch when PyTorch is
imported, never importing it itself, so a script that does not use torch pays nothing:

* `torch.optim.Optimizer` subclasses: `step()` of the first optimizer that steps is the
  rank's heartbeat and step. The step number is the optimizer's own count when its
  state keeps one (Adam, AdamW, … restore it with their state dict, so a resumed run
  continues where it was), else a count from 1 in this process (a restarted script
  then looks like rework until it passes the old high water).
* `torch.Tensor.backward`: the scalar it is called on is the loss (read when the step
  ends; only for CPU tensors unless BULWARK_AUTO_LOSS=1, since reading a GPU value
  waits for the device). A non-finite loss is a NaN fault like an SDK report's.
* `torch.utils.data` iterators: the time spent in `__next__` is the step's data wait;
  the first tensor of a batch gives its samples (dimension 0) and, when it is a 2-D
  integer tensor (token ids), its tokens.

The step report goes through the SDK (`bulwark.report_step(..., _inferred=True)`),
and only when this rank has an agent (BULWARK_AGENT_SOCK). Off when the script imports
bulwark itself (it then reports its own steps), when BULWARK_AUTO_METRICS=0, or as soon
as the SDK reports a step. Never raises into the training script: any error switches
the instrumentation off with one line on stderr.
"""
import functools
import importlib.abc
import importlib.util
import math
import os
import re
import sys
import time
import weakref

_state = {
    "off": False,
    "decided": None,  # True: report; False: stand down (decided at the first step)
    "primary": None,  # weakref to the optimizer whose steps count
    "count": 0,
    "loss": None,
    "data_wait": 0.0,
    "samples": 0.0,
    "tokens": 0.0,
    "last_end": None,
    "opt_s": 0.0,
}


def _off(why):
    if not _state["off"]:
        _state["off"] = True
        try:
            sys.stderr.write(f"bulwark: step instrumentation off: {why}\n")
        except Exception:  # noqa: BLE001
            pass


def _enabled():
    if _state["off"]:
        return False
    if _state["decided"] is None:
        env = os.environ
        if env.get("BULWARK_AUTO_METRICS") == "0" or not env.get("BULWARK_AGENT_SOCK"):
            _state["decided"] = False
        else:
            _state["decided"] = not _script_uses_sdk()
    if _state["decided"]:
        sdk = sys.modules.get("bulwark")
        if sdk is not None and getattr(sdk, "_reported", False):
            _state["decided"] = False  # the trainer reports its own steps
    return bool(_state["decided"])


def _script_uses_sdk():
    path = sys.argv[0] if sys.argv else ""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return False
    return re.search(r"^\s*(import\s+bulwark\b|from\s+bulwark\b)", text, re.M) is not None


def _optimizer_step_count(opt):
    """The optimizer's own step count (Adam-style state), or None."""
    try:
        for group in opt.param_groups:
            for p in group["params"]:
                st = opt.state.get(p)
                if not st or "step" not in st:
                    continue
                v = st["step"]
                if hasattr(v, "is_cuda"):
                    if v.is_cuda:
                        return None  # reading it would wait for the device
                    v = v.item()
                return int(v)
    except Exception:  # noqa: BLE001
        return None
    return None


def _after_step(opt, t0, t1):
    if not _enabled():
        return
    primary = _state["primary"]
    if primary is None or primary() is None:
        _state["primary"] = weakref.ref(opt)
    elif primary() is not opt:
        return  # a second optimizer of the same step (GANs): counted once
    _state["count"] += 1
    step = _optimizer_step_count(opt)
    if step is None:
        step = _state["count"]
    loss = float("nan")
    recorded = _state["loss"]
    _state["loss"] = None
    if recorded is not None:
        try:
            if not getattr(recorded, "is_cuda", False) or os.environ.get("BULWARK_AUTO_LOSS") == "1":
                loss = float(recorded)
        except Exception:  # noqa: BLE001
            loss = float("nan")
    else:
        loss = 0.0  # no backward seen: no loss to judge
    last_end = _state["last_end"]
    step_time = t1 - last_end if last_end is not None else None
    data_wait = _state["data_wait"]
    optimizer = t1 - t0
    compute = None
    if step_time is not None:
        compute = max(0.0, step_time - data_wait - optimizer)
    samples, tokens = _state["samples"], _state["tokens"]
    _state.update(data_wait=0.0, samples=0.0, tokens=0.0, last_end=t1)
    import bulwark  # the SDK, on the rank's PYTHONPATH
    bulwark.report_step(step, loss, tokens=int(tokens), samples=samples or None,
                        data_wait=data_wait, optimizer=optimizer, compute=compute,
                        _inferred=True)


def _wrap_step(fn):
    if getattr(fn, "_bulwark_wrapped", False):
        return fn

    @functools.wraps(fn)
    def step(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = fn(self, *args, **kwargs)
        if not _state["off"]:
            try:
                _after_step(self, t0, time.perf_counter())
            except Exception as e:  # noqa: BLE001
                _off(f"{type(e).__name__}: {e}")
        return out

    step._bulwark_wrapped = True
    return step


def _patch_optimizer(mod):
    Optimizer = getattr(mod, "Optimizer", None)
    if Optimizer is None:
        return
    previous = Optimizer.__dict__.get("__init_subclass__")

    @classmethod
    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(Optimizer, cls).__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = _wrap_step(cls.__dict__["step"])

    Optimizer.__init_subclass__ = __init_subclass__
    for sub in _all_subclasses(Optimizer):  # defined before the patch (none, normally)
        if "step" in sub.__dict__:
            sub.step = _wrap_step(sub.__dict__["step"])


def _all_subclasses(cls):
    out, todo = [], [cls]
    while todo:
        for s in todo.pop().__subclasses__():
            out.append(s)
            todo.append(s)
    return out


def _patch_backward(mod):
    Tensor = getattr(mod, "Tensor", None)
    fn = getattr(Tensor, "backward", None) if Tensor is not None else None
    if fn is None or getattr(fn, "_bulwark_wrapped", False):
        return

    @functools.wraps(fn)
    def backward(self, *args, **kwargs):
        if not _state["off"]:
            try:
                if self.numel() == 1:
                    _state["loss"] = self.detach()
            except Exception:  # noqa: BLE001
                pass
        return fn(self, *args, **kwargs)

    backward._bulwark_wrapped = True
    Tensor.backward = backward


def _batch_size(batch):
    first = batch
    for _ in range(4):  # the first tensor of a (nested) tuple/list/dict batch
        if isinstance(first, dict):
            first = next(iter(first.values()), None)
        elif isinstance(first, (list, tuple)):
            first = first[0] if first else None
        else:
            break
    shape = getattr(first, "shape", None)
    if not shape:
        return 0.0, 0.0
    samples = float(shape[0])
    tokens = 0.0
    dtype = str(getattr(first, "dtype", ""))
    if len(shape) == 2 and ("int" in dtype):
        tokens = float(shape[0] * shape[1])
    return samples, tokens


def _patch_dataloader(mod):
    It = getattr(mod, "_BaseDataLoaderIter", None)
    fn = getattr(It, "__next__", None) if It is not None else None
    if fn is None or getattr(fn, "_bulwark_wrapped", False):
        return

    @functools.wraps(fn)
    def __next__(self):
        t0 = time.perf_counter()
        batch = fn(self)
        if not _state["off"]:
            try:
                _state["data_wait"] += time.perf_counter() - t0
                s, t = _batch_size(batch)
                _state["samples"] += s
                _state["tokens"] += t
            except Exception:  # noqa: BLE001
                pass
        return batch

    __next__._bulwark_wrapped = True
    It.__next__ = __next__


_PATCHES = {
    "torch.optim.optimizer": _patch_optimizer,
    "torch._tensor": _patch_backward,
    "torch.utils.data.dataloader": _patch_dataloader,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the modules in _PATCHES right after they execute."""

    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES or _state["off"]:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return loader.create_module(s)

            def exec_module(self, module):
                exec_module(module)
                try:
                    _PATCHES[name](module)
                except Exception as e:  # noqa: BLE001
                    _off(f"patching {name}: {type(e).__name__}: {e}")

        spec.loader = _Loader()
        return spec


def install():
    """Installs the import hook (and patches what is already imported)."""
    if os.environ.get("BULWARK_AUTO_METRICS") == "0":
        return
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _Finder())
