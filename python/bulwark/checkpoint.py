"""Tensor checkpoints: bulwark.checkpoint.save(state_dict, step) / load(state_dict).

    import bulwark, bulwark.checkpoint as ckpt
    bulwark.init()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 0}
    step0 = ckpt.load(state)            # in place; None on a fresh start
    ...
    ckpt.save(state, step, replicated=True)   # DDP: every rank holds the same state

`save` walks nested dicts/lists/tuples. Tensors are copied straight from their
memory into the node agent's shared-memory staging ring (no serialisation, no
extra copy in the trainer) and the call returns; the agent persists in the
background when the step is due for disk. Everything else (ints, floats,
strings, optimizer hyper-parameters) is pickled into one small blob. Without an
agent (standalone) save writes the shard to BULWARK_CKPT_DIR itself.

`replicated=True` marks the tensors identical on every rank (data parallel), so
the disk tier stores them once, with the writing spread over the ranks.
"""
import ctypes
import pickle

import bulwark

__all__ = ["save", "load", "CheckpointError"]

_OBJECTS = "__bulwark_objects__"
_TORCH_DTYPES = None
CheckpointError = bulwark.BulwarkError


class _Ref:
    """Placeholder for a tensor in the pickled skeleton."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (_Ref, (self.name,))


def _dtypes():
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        import torch
        _TORCH_DTYPES = {
            torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
            torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
            torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
        }
    return _TORCH_DTYPES


def _lib():
    lib = bulwark._load_lib()
    if not getattr(lib, "_bw_ckpt_sigs", False):
        c_long, c_int, c_size, vp = ctypes.c_long, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
        sig = {
            "bw_ckpt_save": (c_int, [c_long, c_size, ctypes.POINTER(ctypes.c_char_p),
                                     ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(c_int),
                                     ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(vp),
                                     ctypes.POINTER(c_int)]),
            "bw_ckpt_open": (c_int, [c_long, c_int, ctypes.POINTER(vp)]),
            "bw_load_tier": (ctypes.c_char_p, [vp]),
            "bw_load_step": (c_long, [vp]),
            "bw_load_count": (c_size, [vp]),
            "bw_load_name": (ctypes.c_char_p, [vp, c_size]),
            "bw_load_dtype": (ctypes.c_char_p, [vp, c_size]),
            "bw_load_ndim": (c_int, [vp, c_size]),
            "bw_load_dim": (ctypes.c_longlong, [vp, c_size, c_int]),
            "bw_load_nbytes": (c_size, [vp, c_size]),
            "bw_load_read": (c_int, [vp, c_size, vp, c_size]),
            "bw_load_close": (None, [vp]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        lib._bw_ckpt_sigs = True
    return lib


def _flatten(obj, prefix, out, tensor_type):
    """Returns the skeleton of obj with tensors replaced by _Ref; appends
    (name, tensor) to out."""
    if isinstance(obj, tensor_type):
        name = prefix or "tensor"
        out.append((name, obj))
        return _Ref(name)
    if isinstance(obj, dict):
        return {k: _flatten(v, f"{prefix}/{k}" if prefix else str(k), out, tensor_type)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_flatten(v, f"{prefix}/{i}" if prefix else str(i), out, tensor_type)
                 for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    return obj


# The argument arrays of the last save, reused while the layout (names, dtypes,
# shapes, flags) is unchanged: only the data pointers are refilled. Saving every
# step, filling five ctypes arrays per tensor was half of the Python-side stall.
_LAYOUT = {"key": None}


def save(state, step, replicated=False):
    """Saves `state` (nested dicts/lists of tensors and plain values) as `step`.
    Returns once the tensors are staged (memory tier) or written (standalone)."""
    import torch
    tensors = []
    skeleton = _flatten(state, "", tensors, torch.Tensor)
    blob = pickle.dumps(skeleton, protocol=pickle.HIGHEST_PROTOCOL)
    dts = _dtypes()
    keep = []  # keeps contiguous copies alive during the call
    key = [bool(replicated), len(blob)]
    for i, (name, t) in enumerate(tensors):
        if t.device.type != "cpu":
            t = t.detach().cpu()
        if not t.is_contiguous():
            t = t.contiguous()
        if t.dtype not in dts:
            raise CheckpointError(f"bulwark.checkpoint.save: tensor '{name}' has unsupported "
                                  f"dtype {t.dtype}")
        keep.append(t)
        key.append((name, t.dtype, t.shape))
    n = len(tensors) + 1
    lay = _LAYOUT
    if lay["key"] != key:
        names = [name for name, _ in tensors]
        if len(set(names)) != len(names):
            raise CheckpointError("bulwark.checkpoint.save: two tensors map to the same name; "
                                  "use distinct string keys")
        c_names = (ctypes.c_char_p * n)()
        c_dtypes = (ctypes.c_char_p * n)()
        c_ndims = (ctypes.c_int * n)()
        c_flags = (ctypes.c_int * n)()
        dims = []
        for i, ((name, _), t) in enumerate(zip(tensors, keep)):
            c_names[i] = name.encode("utf-8")
            c_dtypes[i] = dts[t.dtype].encode()
            c_ndims[i] = t.dim()
            dims.extend(t.shape)
            c_flags[i] = 1 if replicated else 0
        c_names[n - 1] = _OBJECTS.encode()
        c_dtypes[n - 1] = b"uint8"
        c_ndims[n - 1] = 1
        dims.append(len(blob))
        c_flags[n - 1] = 0
        c_shapes = (ctypes.c_longlong * max(1, len(dims)))(*dims)
        lay.update(key=None, names=c_names, dtypes=c_dtypes, ndims=c_ndims, flags=c_flags,
                   shapes=c_shapes, data=(ctypes.c_void_p * n)())
        lay["key"] = key
    c_data = lay["data"]
    for i, t in enumerate(keep):
        c_data[i] = t.data_ptr() if t.numel() else None
    blob_buf = ctypes.create_string_buffer(blob, len(blob))
    c_data[n - 1] = ctypes.cast(blob_buf, ctypes.c_void_p)
    # c_data keeps stale pointers between saves; every one is refilled before use.
    bulwark._check(_lib().bw_ckpt_save(int(step), n, lay["names"], lay["dtypes"], lay["ndims"],
                                       lay["shapes"], c_data, lay["flags"]), "checkpoint.save")
    del keep


def _fill(skeleton, tensors, inplace):
    """Rebuilds the structure; with `inplace`, copies into inplace's tensors."""
    import torch
    if isinstance(skeleton, _Ref):
        t = tensors[skeleton.name]
        if isinstance(inplace, torch.Tensor):
            with torch.no_grad():
                if inplace.data_ptr() != t.data_ptr():
                    inplace.copy_(t)
            return inplace
        return t
    if isinstance(skeleton, dict):
        out = {}
        for k, v in skeleton.items():
            sub = inplace.get(k) if isinstance(inplace, dict) else None
            out[k] = _fill(v, tensors, sub)
        if isinstance(inplace, dict):
            inplace.clear()
            inplace.update(out)
            return inplace
        return out
    if isinstance(skeleton, (list, tuple)):
        items = [_fill(v, tensors, inplace[i] if isinstance(inplace, (list, tuple)) and
                       i < len(inplace) else None) for i, v in enumerate(skeleton)]
        return items if isinstance(skeleton, list) else tuple(items)
    return skeleton


def _targets(obj, prefix, out):
    import torch
    if isinstance(obj, torch.Tensor):
        out[prefix or "tensor"] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _targets(v, f"{prefix}/{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _targets(v, f"{prefix}/{i}" if prefix else str(i), out)


def load(state=None, step=None, info=None):
    """Loads `step` (default: the resume step) from the fastest tier holding an
    intact copy. With `state`, tensors of matching name, dtype and shape are
    filled in place (straight into their memory) and state is updated; returns
    the loaded structure, or None when there is nothing to resume from. `info`,
    if a dict, receives {"tier", "step"}."""
    import torch
    lib = _lib()
    if step is None:
        step = lib.bw_resume_step()
        if step < 0:
            return None
    inv = {v: k for k, v in _dtypes().items()}
    targets = {}
    if state is not None:
        _targets(state, "", targets)
    min_tier, last_error = 0, None
    while min_tier <= 2:
        h = ctypes.c_void_p()
        rc = lib.bw_ckpt_open(int(step), min_tier, ctypes.byref(h))
        if rc < 0:
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
                    bulwark._check(lib.bw_load_read(h, i, buf, nbytes), "checkpoint.load")
                    skeleton = pickle.loads(buf.raw[:nbytes])
                    continue
                dtype = inv[lib.bw_load_dtype(h, i).decode()]
                shape = [lib.bw_load_dim(h, i, d) for d in range(lib.bw_load_ndim(h, i))]
                dst = targets.get(name)
                if (dst is None or dst.dtype != dtype or list(dst.shape) != shape or
                        dst.device.type != "cpu" or not dst.is_contiguous()):
                    dst = torch.empty(shape, dtype=dtype)
                ptr = dst.data_ptr() if dst.numel() else None
                bulwark._check(lib.bw_load_read(h, i, ptr, nbytes), "checkpoint.load")
                tensors[name] = dst
        except bulwark.BulwarkError as e:
            if "DATA_LOSS" not in str(e):
                raise
            last_error = f"{tier} tier: {e}"
            import sys
            print(f"bulwark: skipping the {tier} copy of step {step}: {e}", file=sys.stderr)
            min_tier = {"memory": 1, "disk": 2}.get(tier, 3)
            continue
        finally:
            lib.bw_load_close(h)
        if skeleton is None:
            raise CheckpointError(f"bulwark.checkpoint.load: step {step} has no "
                                  f"{_OBJECTS} blob (not saved by bulwark.checkpoint.save)")
        if isinstance(info, dict):
            info.update({"tier": tier, "step": int(step)})
        return _fill(skeleton, tensors, state)
    raise CheckpointError(f"bulwark.checkpoint.load: no intact copy of step {step}: {last_error}")
