"""Checkpoints in the shape of torch.distributed.checkpoint: a state dict in, loaded in place.

    import bulwark
    from bulwark import checkpoint

    state = {"model": model, "optim": optimizer, "progress": {"step": 0}}
    loaded = checkpoint.load(state)          # in place; None on a fresh start
    start = loaded.step + 1 if loaded else 0
    for step in bulwark.steps(start, total):
        ...
        checkpoint.save(state, step, replicated=True)   # returns once staged in memory

The state dict is a dict, nested dicts, lists and tuples, whose leaves are
  * tensors: stored as tensors, copied straight from their memory into the node
    agent's shared-memory ring (CPU) or through pinned host memory (CUDA);
  * Stateful objects, anything with state_dict() and load_state_dict() (nn.Module,
    optimizers, LR schedulers, your own): their state_dict() is stored, never the
    object; load fills that state dict in place and calls load_state_dict() with it;
  * anything else picklable (ints, floats, strings, RNG states): one small pickled blob.
`replicated=True` marks the tensors identical on every rank (data parallel), so the disk
tier stores them once, the writing spread over the ranks.

Sharded tensors (torch 2.x DTensor, as FSDP2 and tensor parallelism make them, and
ShardedTensor) are saved as this rank's local piece with the global shape and the piece's
offsets; `load` fills the local pieces of the live sharded tensors in place, whatever
world size and sharding saved them (the file tiers stitch the saved pieces).

The agent seals the snapshot and persists it in the background when the step is due
for disk. Without an agent, `save` writes the shard to BULWARK_CKPT_DIR itself. `load`
reads the fastest tier holding an intact copy (memory, disk, shared), verifying every
chunk, and falls back to the next tier on a checksum failure.

Under `bulwark.run`, calling save or load while the generation is being re-formed
raises BulwarkError (they belong inside the training function).
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import importlib
import math
import pickle
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Tuple, runtime_checkable

from bulwark import _lib
from bulwark._lib import BulwarkError
from bulwark._runtime import _RUNTIME

__all__ = ["save", "async_save", "load", "LoadInfo", "Stateful", "CheckpointError"]

CheckpointError = BulwarkError
_OBJECTS = "__bulwark_objects__"  # the pickled skeleton's blob (format-stable name)


@runtime_checkable
class Stateful(Protocol):
    """What save/load store through its state dict instead of pickling it."""

    def state_dict(self) -> Dict[str, Any]: ...

    def load_state_dict(self, state_dict: Dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class LoadInfo:
    """What `load` restored."""
    step: int
    tier: str       # "memory", "disk" or "shared"
    seconds: float  # wall time of the load


class _Ref:
    """A tensor's place in the pickled skeleton (the name pickles with older files)."""
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self):
        return (_Ref, (self.name,))


class _StatefulRef:
    """A Stateful object's place in the skeleton: its state dict's skeleton."""
    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __reduce__(self):
        return (_StatefulRef, (self.inner,))


def _torch(import_it: bool = False):
    """torch if the program imported it (a state without torch cannot hold tensors, and
    importing it would stall a torch-free trainer's first save for seconds); with
    `import_it`, imported on demand (None when it is not installed)."""
    torch = sys.modules.get("torch")
    if torch is not None or not import_it:
        return torch
    try:
        import torch
        return torch
    except ImportError:
        return None


_DTYPES: Optional[Dict[Any, str]] = None


def _dtypes() -> Dict[Any, str]:
    global _DTYPES
    if not _DTYPES:
        torch = _torch()
        if torch is None:
            return {}
        _DTYPES = {
            torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
            torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
            torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
        }
    return _DTYPES


def _is_stateful(obj: Any) -> bool:
    return (not isinstance(obj, (dict, list, tuple)) and callable(getattr(obj, "state_dict", None))
            and callable(getattr(obj, "load_state_dict", None)))


class _Piece(NamedTuple):
    """Where a local tensor sits in its sharded tensor."""
    global_shape: Tuple[int, ...]
    offsets: Tuple[int, ...]
    replicated: bool  # every rank holds the whole tensor (a DTensor of Replicate() only)


def _sharded_types() -> Tuple[type, ...]:
    """The DTensor and ShardedTensor classes of the torch modules the program imported. A
    sharded tensor cannot exist before its module is imported, and importing them here
    would cost seconds (torch.distributed._shard does not even import on some torch 1.13
    builds)."""
    found = []
    for module, cls in (("torch.distributed.tensor", "DTensor"),
                        ("torch.distributed._tensor", "DTensor"),
                        ("torch.distributed._shard.sharded_tensor", "ShardedTensor")):
        c = getattr(sys.modules.get(module), cls, None)
        if isinstance(c, type) and c not in found:
            found.append(c)
    return tuple(found)


_LOCAL_LAYOUT: Any = None  # compute_local_shape_and_global_offset, once found


def _dtensor_piece(name: str, t: Any, what: str) -> Tuple[Any, _Piece]:
    """The local tensor of DTensor t and where it sits in the global tensor."""
    global _LOCAL_LAYOUT
    gshape = tuple(t.shape)
    for p in t.placements:
        kind = type(p).__name__
        if kind in ("Shard", "Replicate"):
            continue
        hint = (" (unreduced partial values: .redistribute() it to Replicate() or Shard() "
                "placements, or use .full_tensor(), first)" if kind in ("Partial", "_Partial")
                else "")
        raise CheckpointError(f"bulwark.{what}: DTensor '{name}' has placement {p!r}{hint}; "
                              "bulwark.checkpoint supports Shard(dim) and Replicate() placements")
    local = t._local_tensor if hasattr(t, "_local_tensor") else t.to_local()
    if all(type(p).__name__ == "Replicate" for p in t.placements):
        return local, _Piece(gshape, (0,) * len(gshape), True)
    if _LOCAL_LAYOUT is None:
        for module in ("torch.distributed.tensor._utils", "torch.distributed._tensor._utils"):
            try:
                utils = importlib.import_module(module)
                _LOCAL_LAYOUT = utils.compute_local_shape_and_global_offset
                break
            except (ImportError, AttributeError):
                continue
        else:
            raise CheckpointError(f"bulwark.{what}: DTensor '{name}': this torch has no "
                                  "compute_local_shape_and_global_offset; sharded DTensors need "
                                  "torch 2.1 or newer")
    shape, offsets = _LOCAL_LAYOUT(t.shape, t.device_mesh, t.placements)
    if len(offsets) != len(gshape) or tuple(local.shape) != tuple(shape):
        raise CheckpointError(
            f"bulwark.{what}: DTensor '{name}' of global shape {list(gshape)}: this rank's local "
            f"tensor has shape {list(local.shape)} but its placements {list(t.placements)} give "
            f"{list(shape)} at offsets {list(offsets)} (is this rank in its device mesh?)")
    return local, _Piece(gshape, tuple(int(o) for o in offsets), False)


def _sharded_tensor_piece(name: str, t: Any, what: str) -> Tuple[Any, _Piece]:
    """The local shard of ShardedTensor t (an empty one if it has none) and where it sits."""
    gshape = tuple(t.size())
    shards = t.local_shards()
    if len(shards) > 1:
        raise CheckpointError(
            f"bulwark.{what}: ShardedTensor '{name}' has {len(shards)} local shards on this "
            "rank; bulwark.checkpoint saves one piece of a tensor per rank: use a sharding spec "
            "that places at most one shard on each rank (ChunkShardingSpec with one placement "
            "per rank)")
    if shards:
        md = shards[0].metadata
        return shards[0].tensor, _Piece(gshape, tuple(int(o) for o in md.shard_offsets), False)
    if not gshape:
        raise CheckpointError(f"bulwark.{what}: ShardedTensor '{name}' is a scalar with no "
                              "local shard on this rank")
    torch = _torch()
    empty = torch.empty((0,) + gshape[1:], dtype=t.dtype)
    return empty, _Piece(gshape, (gshape[0],) + (0,) * (len(gshape) - 1), False)


def _local_piece(name: str, t: Any, what: str) -> Tuple[Any, _Piece]:
    """This rank's local tensor of a DTensor or ShardedTensor and where it sits."""
    if hasattr(t, "placements") and hasattr(t, "device_mesh"):
        return _dtensor_piece(name, t, what)
    return _sharded_tensor_piece(name, t, what)


def _flatten(obj: Any, prefix: str, out: List[Tuple[str, Any]], tensor_type: Any) -> Any:
    """The skeleton of obj: tensors replaced by _Ref (appended to out), Stateful objects
    by _StatefulRef of their state dict's skeleton."""
    if tensor_type is not None and isinstance(obj, tensor_type):
        name = prefix or "tensor"
        out.append((name, obj))
        return _Ref(name)
    if _is_stateful(obj):
        return _StatefulRef(_flatten(obj.state_dict(), prefix, out, tensor_type))
    if isinstance(obj, dict):
        return {k: _flatten(v, f"{prefix}/{k}" if prefix else str(k), out, tensor_type)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_flatten(v, f"{prefix}/{i}" if prefix else str(i), out, tensor_type)
                 for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


class _Layout:
    """The ctypes argument arrays of the last save, reused while names, dtypes, shapes
    and flags are unchanged (filling them per tensor was half the Python-side stall of
    a per-step snapshot): only the data pointers are refilled."""

    def __init__(self) -> None:
        self.key: Optional[list] = None
        self.arrays: Dict[str, Any] = {}

    def arrays_for(self, tensors: List[Tuple[str, Any]], blob_len: int, replicated: bool,
                   pieces: Dict[str, _Piece]):
        dts = _dtypes()
        key = [bool(replicated), blob_len] + [(n, t.dtype, tuple(t.shape), pieces.get(n))
                                              for n, t in tensors]
        if key == self.key:
            return self.arrays
        names = [n for n, _ in tensors]
        if len(set(names)) != len(names):
            raise CheckpointError("bulwark.checkpoint.save: two tensors map to the same name; "
                                  "use distinct string keys")
        n = len(tensors) + 1
        a = {"names": (ctypes.c_char_p * n)(), "dtypes": (ctypes.c_char_p * n)(),
             "ndims": (ctypes.c_int * n)(), "flags": (ctypes.c_int * n)(),
             "data": (ctypes.c_void_p * n)()}
        dims: List[int] = []
        global_dims: List[int] = []
        offsets: List[int] = []
        for i, (name, t) in enumerate(tensors):
            a["names"][i] = name.encode("utf-8")
            a["dtypes"][i] = dts[t.dtype].encode()
            a["ndims"][i] = t.dim()
            dims.extend(t.shape)
            piece = pieces.get(name)
            if piece is None:  # a plain tensor: whole, replicated as the caller says
                global_dims.extend(t.shape)
                offsets.extend([0] * t.dim())
                a["flags"][i] = 1 if replicated else 0
            else:  # a sharded tensor's local piece: replicated only if every rank holds it all
                global_dims.extend(piece.global_shape)
                offsets.extend(piece.offsets)
                a["flags"][i] = 1 if piece.replicated else 0
        a["names"][n - 1] = _OBJECTS.encode()
        a["dtypes"][n - 1] = b"uint8"
        a["ndims"][n - 1] = 1
        dims.append(blob_len)
        global_dims.append(blob_len)
        offsets.append(0)
        a["flags"][n - 1] = 0
        a["shapes"] = (ctypes.c_longlong * len(dims))(*dims)
        a["global_shapes"] = (ctypes.c_longlong * len(global_dims))(*global_dims)
        a["offsets"] = (ctypes.c_longlong * len(offsets))(*offsets)
        self.key, self.arrays = key, a
        return a


_LAYOUT = _Layout()
_SAVE_LOCK = threading.Lock()  # save and async_save's background staging, one at a time


def _host_tensors(tensors: List[Tuple[str, Any]]) -> List[Tuple[str, Any]]:
    """CPU, contiguous versions of `tensors` with supported dtypes (copies only when
    needed; a CUDA tensor is copied with a blocking .cpu() here: async_save avoids it)."""
    dts = _dtypes()
    out = []
    for name, t in tensors:
        if t.dtype not in dts:
            raise CheckpointError(f"bulwark.checkpoint.save: tensor '{name}' has unsupported "
                                  f"dtype {t.dtype}")
        if t.device.type != "cpu":
            t = t.detach().cpu()
        if not t.is_contiguous():
            t = t.contiguous()
        out.append((name, t))
    return out


def _stage(step: int, tensors: List[Tuple[str, Any]], blob: bytes, replicated: bool,
           pieces: Dict[str, _Piece]) -> None:
    with _SAVE_LOCK:
        a = _LAYOUT.arrays_for(tensors, len(blob), replicated, pieces)
        data = a["data"]
        for i, (_, t) in enumerate(tensors):
            data[i] = t.data_ptr() if t.numel() else None
        blob_buf = ctypes.create_string_buffer(blob, len(blob))
        data[len(tensors)] = ctypes.cast(blob_buf, ctypes.c_void_p)
        _lib.check(_lib.lib().bw_ckpt_save_sharded(
            int(step), len(tensors) + 1, a["names"], a["dtypes"], a["ndims"], a["shapes"],
            a["global_shapes"], a["offsets"], data, a["flags"]), "checkpoint.save")


def _prepare(state_dict: Any, what: str, running: bool = True):
    """The state's tensors (sharded ones as their local pieces), the pieces' places in
    their global tensors by name, and the pickled skeleton. `running`: refuse unless
    this rank is running a generation (the park snapshot passes False)."""
    if running:
        _RUNTIME.require_running(what)
    if not isinstance(state_dict, dict):
        raise CheckpointError(f"bulwark.{what}: state_dict must be a dict (got "
                              f"{type(state_dict).__name__})")
    torch = _torch()
    tensors: List[Tuple[str, Any]] = []
    skeleton = _flatten(state_dict, "", tensors, torch.Tensor if torch else None)
    pieces: Dict[str, _Piece] = {}
    sharded = _sharded_types()
    if sharded:
        for i, (name, t) in enumerate(tensors):
            if isinstance(t, sharded):
                local, pieces[name] = _local_piece(name, t, what)
                tensors[i] = (name, local)
    return tensors, pieces, pickle.dumps(skeleton, protocol=pickle.HIGHEST_PROTOCOL)


def save(state_dict: Dict[str, Any], step: int, *, replicated: bool = False) -> None:
    """Saves `state_dict` as `step`. Returns once the tensors are staged in memory (or,
    without an agent, written). A safe point of bulwark.run. `replicated` applies to
    plain tensors; a DTensor or ShardedTensor is saved as this rank's piece (replicated
    when its placements are all Replicate())."""
    _RUNTIME.check()
    tensors, pieces, blob = _prepare(state_dict, "checkpoint.save")
    _stage(step, _host_tensors(tensors), blob, replicated, pieces)
    _remember(state_dict, step, replicated, pieces)


# ---- the live state, staged when the rank parks (docs/sdk.md "Park snapshots")
#
# The newest save of a state every rank holds alike (replicated=True, no sharded
# tensors) whose values are all Stateful objects (a model, an optimizer: save reads
# their state_dict() each time, so saving the same dict later captures the state as it
# is then) is remembered. When bulwark.run parks this rank (a peer failed), the runtime
# stages that state as the last step this rank reported, if the report's loss was
# finite, no optimizer in the state has stepped since the report, and every
# floating-point value is finite: the survivors then hold the step the job had reached,
# and a rank that lost its process or node restores a survivor's copy of it instead of
# an older snapshot of its own. The controller takes a copy as another rank's only when
# every rank's copy of the step agrees (ckpt::PortableDigest). Training thread only.
_LIVE: Dict[str, Any] = {"state": None, "saved": None, "reported": None, "marks": None}
_STEP_COUNTS: "weakref.WeakKeyDictionary[Any, List[int]]" = weakref.WeakKeyDictionary()


def _remember(state_dict: Any, step: int, replicated: bool, pieces: Dict[str, _Piece]) -> None:
    portable = (replicated and not pieces and isinstance(state_dict, dict) and
                bool(state_dict) and all(_is_stateful(v) for v in state_dict.values()))
    _LIVE["state"] = state_dict if portable else None
    _LIVE["saved"] = int(step)
    _LIVE["reported"] = _LIVE["marks"] = None


def _step_count(opt: Any) -> Optional[Tuple[str, int]]:
    """How many times `opt` stepped, as far as can be told without waiting for a
    device: a step post-hook's count (torch >= 2.0; counted from the first call), else
    the optimizer's own per-parameter count (Adam-style state, on the CPU); None when
    neither is available."""
    register = getattr(opt, "register_step_post_hook", None)
    if register is not None:
        count = _STEP_COUNTS.get(opt)
        if count is None:
            count = [0]
            register(lambda *_: count.__setitem__(0, count[0] + 1))
            _STEP_COUNTS[opt] = count
        return ("hook", count[0])
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st or "step" not in st:
                continue
            v = st["step"]
            if getattr(v, "device", None) is not None and v.device.type != "cpu":
                return None
            return ("state", int(v.item() if hasattr(v, "item") else v))
    return None


def _optimizer_marks(state: Dict[str, Any]) -> Optional[Tuple[Any, ...]]:
    """The step counts of the optimizers among `state`'s values; None when there is
    none or one cannot tell (then no park snapshot: its step would be unknown)."""
    torch = _torch()
    if torch is None:
        return None
    marks = []
    for v in state.values():
        if isinstance(v, torch.optim.Optimizer):
            c = _step_count(v)
            if c is None:
                return None
            marks.append(c)
    return tuple(marks) if marks else None


def _mark_reported(step: int, loss: float) -> None:
    """bulwark.report_step: `step` ended with `loss` (after its optimizer step)."""
    state = _LIVE["state"]
    if state is None:
        return
    ok = math.isfinite(loss)
    _LIVE["reported"] = int(step) if ok else None
    _LIVE["marks"] = _optimizer_marks(state) if ok else None


def _save_at_park() -> Optional[int]:
    """Stages the live state as the last reported step when that is what it holds (see
    above); the step staged, or None. Raises what staging raises."""
    state, step = _LIVE["state"], _LIVE["reported"]
    if state is None or step is None or step == _LIVE["saved"]:
        return None
    marks = _optimizer_marks(state)
    if marks is None or marks != _LIVE["marks"]:
        return None  # an optimizer stepped after the report: the state is a later step's
    tensors, pieces, blob = _prepare(state, "checkpoint (park snapshot)", running=False)
    if pieces or any(t.device.type != "cpu" for _, t in tensors):
        return None  # device tensors: the device may be what failed
    torch = _torch()
    host = _host_tensors(tensors)
    for _, t in host:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return None  # a NaN reached the weights: not a state to resume from
    _stage(step, host, blob, True, pieces)
    _LIVE["saved"] = step
    return step


class _Pinned:
    """Pinned host buffers for async_save's device-to-host copies, reused by layout."""

    def __init__(self) -> None:
        self.key: Optional[list] = None
        self.buffers: List[Any] = []

    def for_tensors(self, tensors: List[Tuple[str, Any]]) -> List[Any]:
        torch = _torch()
        key = [(n, t.dtype, tuple(t.shape)) for n, t in tensors]
        if key != self.key:
            self.buffers = [torch.empty(tuple(t.shape), dtype=t.dtype, pin_memory=True)
                            for _, t in tensors]
            self.key = key
        return self.buffers


_PINNED = _Pinned()
_EXECUTOR: Optional[concurrent.futures.ThreadPoolExecutor] = None


def async_save(state_dict: Dict[str, Any], step: int, *,
               replicated: bool = False) -> "concurrent.futures.Future[None]":
    """Like save, returning at once for device tensors: their device-to-host copies are
    queued on the current CUDA stream into pinned memory (so later kernels that modify
    them run after the copy) and a background thread stages the snapshot once the copies
    are done. CPU tensors are staged before it returns (a memcpy into shared memory).
    The future's result() raises what save would have raised."""
    global _EXECUTOR
    _RUNTIME.check()
    tensors, pieces, blob = _prepare(state_dict, "checkpoint.async_save")
    _remember(state_dict, step, replicated, pieces)
    done: "concurrent.futures.Future[None]"
    device = [(n, t) for n, t in tensors if t.device.type != "cpu"]
    if not device:
        done = concurrent.futures.Future()
        try:
            _stage(step, _host_tensors(tensors), blob, replicated, pieces)
            done.set_result(None)
        except BaseException as e:  # noqa: BLE001 - delivered through the future
            done.set_exception(e)
        return done
    torch = _torch()
    buffers = iter(_PINNED.for_tensors(device))
    host: List[Tuple[str, Any]] = []
    for name, t in tensors:
        if t.device.type == "cpu":
            host.append((name, t.contiguous().clone()))  # the caller may change it next
        else:
            buf = next(buffers)
            buf.copy_(t.detach(), non_blocking=True)
            host.append((name, buf))
    event = torch.cuda.Event()
    event.record()
    if _EXECUTOR is None:
        _EXECUTOR = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bulwark-ckpt")

    def finish() -> None:
        event.synchronize()
        _stage(step, _host_tensors(host), blob, replicated, pieces)

    return _EXECUTOR.submit(finish)


def _fill(skeleton: Any, tensors: Dict[str, Any], inplace: Any) -> Any:
    """Rebuilds the saved structure over `inplace`: tensors are the ones load filled (the
    live targets where name, dtype and shape matched), Stateful objects get
    load_state_dict() and stay themselves, dicts are updated in place."""
    if isinstance(skeleton, _Ref):
        return tensors[skeleton.name]  # the target itself when it fit (filled by load)
    if isinstance(skeleton, _StatefulRef):
        if _is_stateful(inplace):
            inplace.load_state_dict(_fill(skeleton.inner, tensors, inplace.state_dict()))
            return inplace
        return _fill(skeleton.inner, tensors, None)
    if isinstance(skeleton, dict):
        out = {k: _fill(v, tensors, inplace.get(k) if isinstance(inplace, dict) else None)
               for k, v in skeleton.items()}
        if isinstance(inplace, dict):
            inplace.update(out)
            return inplace
        return out
    if isinstance(skeleton, (list, tuple)):
        items = [_fill(v, tensors, inplace[i] if isinstance(inplace, (list, tuple)) and
                       i < len(inplace) else None) for i, v in enumerate(skeleton)]
        return items if isinstance(skeleton, list) else tuple(items)
    return skeleton


def _targets(obj: Any, prefix: str, out: Dict[str, Any], tensor_type: Any) -> None:
    """Where each saved tensor can be loaded in place: the live tensors of `obj`."""
    if tensor_type is not None and isinstance(obj, tensor_type):
        out[prefix or "tensor"] = obj
    elif _is_stateful(obj):
        _targets(obj.state_dict(), prefix, out, tensor_type)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _targets(v, f"{prefix}/{k}" if prefix else str(k), out, tensor_type)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _targets(v, f"{prefix}/{i}" if prefix else str(i), out, tensor_type)


def _read_region(lib: Any, h: Any, name: str, dtype_name: str, ndim: int, ptr: Any,
                 nbytes: int, shape: Any, global_shape: Any, offsets: Any) -> None:
    """bw_load_piece: the region `shape` at `offsets` (None: 0s) of tensor `name` into ptr."""
    dims = ctypes.c_longlong * max(1, ndim)
    _lib.check(lib.bw_load_piece(h, name.encode("utf-8"), dtype_name.encode(), ndim,
                                 dims(*shape), dims(*global_shape),
                                 dims(*offsets) if offsets is not None else None, ptr, nbytes),
               "checkpoint.load")


def _load_piece(lib: Any, h: Any, name: str, dtype: Any, dtype_name: str, gshape: List[int],
                target: Any, step: int) -> None:
    """Fills the local piece of sharded tensor `target` from the saved tensor `name`."""
    local, piece = _local_piece(name, target, "checkpoint.load")
    if local.dtype != dtype or list(piece.global_shape) != gshape:
        raise CheckpointError(
            f"bulwark.checkpoint.load: {type(target).__name__} '{name}' is {local.dtype} of "
            f"global shape {list(piece.global_shape)} but step {step} saved {dtype} of global "
            f"shape {gshape}; load into a sharded tensor of the saved dtype and global shape")
    torch = _torch()
    direct = local.device.type == "cpu" and local.is_contiguous()
    dst = local if direct else torch.empty(tuple(local.shape), dtype=local.dtype)
    _read_region(lib, h, name, dtype_name, dst.dim(), dst.data_ptr() if dst.numel() else None,
                 dst.numel() * dst.element_size(), local.shape, piece.global_shape,
                 piece.offsets)
    if not direct:  # a device or strided local piece: one copy into it
        with torch.no_grad():
            local.copy_(dst)


def load(state_dict: Dict[str, Any], step: Optional[int] = None) -> Optional[LoadInfo]:
    """Loads `step` (default: the resume step the agent chose) into `state_dict` in
    place: tensors of matching name, dtype and shape are filled straight into their
    memory, Stateful objects get load_state_dict(), other values are replaced. A DTensor
    or ShardedTensor gets its local piece filled in place from the saved pieces, whatever
    world size and sharding saved them; a plain tensor (or a missing target) takes the
    whole tensor of a sharded save. Returns what was loaded, or None when there is
    nothing to resume from."""
    _RUNTIME.require_running("checkpoint.load")
    if not isinstance(state_dict, dict):
        raise CheckpointError("bulwark.checkpoint.load: state_dict must be a dict (got "
                              f"{type(state_dict).__name__})")
    t0 = time.monotonic()
    lib = _lib.lib()
    if step is None:
        step = lib.bw_resume_step()
        if step < 0:
            return None
    torch = _torch()
    inv = {v: k for k, v in _dtypes().items()}
    targets: Dict[str, Any] = {}
    _targets(state_dict, "", targets, torch.Tensor if torch else None)
    sharded = _sharded_types()
    min_tier, last_error = 0, None
    while min_tier <= 2:
        h = ctypes.c_void_p()
        if lib.bw_ckpt_open(int(step), min_tier, ctypes.byref(h)) < 0:
            msg = lib.bw_last_error().decode("utf-8", "replace")
            raise CheckpointError(f"bulwark.checkpoint.load failed: {msg}" +
                                  (f" (after: {last_error})" if last_error else ""))
        tier = lib.bw_load_tier(h).decode()
        try:
            tensors, skeleton = {}, None
            for i in range(lib.bw_load_count(h)):
                name = lib.bw_load_name(h, i).decode("utf-8")
                nbytes = lib.bw_load_nbytes(h, i)
                if name == _OBJECTS:
                    buf = ctypes.create_string_buffer(max(1, nbytes))
                    _lib.check(lib.bw_load_read(h, i, buf, nbytes), "checkpoint.load")
                    skeleton = pickle.loads(buf.raw[:nbytes])
                    continue
                if torch is None:
                    torch = _torch(import_it=True)
                    inv = {v: k for k, v in _dtypes().items()}
                if torch is None:
                    raise CheckpointError(f"bulwark.checkpoint.load: step {step} holds tensor "
                                          f"'{name}' but torch is not installed")
                dtype_name = lib.bw_load_dtype(h, i).decode()
                dtype = inv[dtype_name]
                ndim = lib.bw_load_ndim(h, i)
                shape = [lib.bw_load_dim(h, i, d) for d in range(ndim)]
                gshape = [lib.bw_load_global_dim(h, i, d) for d in range(ndim)]
                target = targets.get(name)
                if sharded and isinstance(target, sharded):
                    _load_piece(lib, h, name, dtype, dtype_name, gshape, target, step)
                    tensors[name] = target
                    continue
                # A plain tensor (or none) takes the whole tensor, stitched if it was saved
                # in pieces.
                fits = (target is not None and target.dtype == dtype and
                        list(target.shape) == gshape)
                direct = fits and target.device.type == "cpu" and target.is_contiguous()
                dst = target if direct else torch.empty(gshape, dtype=dtype)
                ptr = dst.data_ptr() if dst.numel() else None
                if shape == gshape:
                    _lib.check(lib.bw_load_read(h, i, ptr, nbytes), "checkpoint.load")
                else:
                    _read_region(lib, h, name, dtype_name, dst.dim(), ptr,
                                 dst.numel() * dst.element_size(), gshape, gshape, None)
                if fits and not direct:  # a device or strided target: one copy into it
                    with torch.no_grad():
                        target.copy_(dst)
                    dst = target
                tensors[name] = dst
        except BulwarkError as e:
            if "DATA_LOSS" not in str(e):
                raise
            last_error = f"{tier} tier: {e}"
            print(f"bulwark: skipping the {tier} copy of step {step}: {e}", file=sys.stderr)
            min_tier = {"memory": 1, "disk": 2}.get(tier, 3)
            continue
        finally:
            lib.bw_load_close(h)
        if skeleton is None:
            raise CheckpointError(f"bulwark.checkpoint.load: step {step} has no "
                                  f"{_OBJECTS} blob (not saved by bulwark.checkpoint.save)")
        _fill(skeleton, tensors, state_dict)
        return LoadInfo(step=int(step), tier=tier, seconds=time.monotonic() - t0)
    raise CheckpointError(f"bulwark.checkpoint.load: no intact copy of step {step}: {last_error}")
