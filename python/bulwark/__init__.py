"""Bulwark SDK for PyTorch trainers (ctypes binding of libbulwark.so).

    import bulwark
    bulwark.init()
    state = bulwark.load()                 # None on a fresh start
    start = 0 if state is None else state["step"] + 1
    for step in range(start, steps):
        if bulwark.should_skip(step): continue
        loss = train_step(...)
        if bulwark.poll_injected_nan(): loss = float("nan")
        bulwark.report_step(step, loss, tokens)
        if bulwark.should_checkpoint(step):
            bulwark.save(step, {"model": m.state_dict(), "optim": o.state_dict(), "step": step})

libbulwark.so is found via $BULWARK_LIB, else <repo>/build/lib/libbulwark.so
relative to this package. Errors from the library raise BulwarkError.
"""
import ctypes
import io
import os

from bulwark._stacks import register_stack_dump

__all__ = [
    "BulwarkError", "init", "report_step", "resume_step", "should_checkpoint", "save",
    "commit", "load", "poll_injected_nan", "skip_range", "should_skip", "rank", "world_size",
]

_STATE_BLOB = "state"      # torch.save of the whole state object
_BYTES_PREFIX = "bytes/"   # dict-of-bytes mode: one blob per key


class BulwarkError(RuntimeError):
    """A libbulwark call failed; the message says what and how to fix it."""


_lib = None


def _find_lib():
    env = os.environ.get("BULWARK_LIB")
    if env:
        if not os.path.isfile(env):
            raise BulwarkError(f"BULWARK_LIB={env} does not exist; point it at libbulwark.so")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.normpath(os.path.join(here, "..", "..", "build", "lib", "libbulwark.so"))
    if os.path.isfile(cand):
        return cand
    raise BulwarkError(
        "libbulwark.so not found: set BULWARK_LIB to its path, or build it with "
        f"`cmake --build build --target bulwark` (looked for {cand})")


def _load_lib():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_lib())
    c_long, c_int, c_size = ctypes.c_long, ctypes.c_int, ctypes.c_size_t
    sig = {
        "bw_last_error": (ctypes.c_char_p, []),
        "bw_init": (c_int, []),
        "bw_shutdown": (c_int, []),
        "bw_rank": (c_int, []),
        "bw_world_size": (c_int, []),
        "bw_resume_step": (c_long, []),
        "bw_should_checkpoint": (c_int, [c_long]),
        "bw_skip_from": (c_long, []),
        "bw_skip_to": (c_long, []),
        "bw_poll_injected_nan": (c_int, []),
        "bw_report_step": (c_int, [c_long, ctypes.c_double, ctypes.c_longlong]),
        "bw_save": (c_int, [c_long, c_size, ctypes.POINTER(ctypes.c_char_p),
                            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(c_size)]),
        "bw_commit": (c_int, [c_long]),
        "bw_load": (c_int, [c_long, ctypes.POINTER(ctypes.c_void_p)]),
        "bw_blobs_count": (c_size, [ctypes.c_void_p]),
        "bw_blobs_name": (ctypes.c_char_p, [ctypes.c_void_p, c_size]),
        "bw_blobs_data": (ctypes.c_void_p, [ctypes.c_void_p, c_size]),
        "bw_blobs_size": (c_size, [ctypes.c_void_p, c_size]),
        "bw_blobs_free": (None, [ctypes.c_void_p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    _lib = lib
    return lib


def _check(rc, what):
    if rc < 0:
        msg = _load_lib().bw_last_error().decode("utf-8", "replace")
        raise BulwarkError(f"bulwark.{what} failed: {msg}")
    return rc


def init():
    """Reads the rank environment, connects to the agent (if any) and registers the
    SIGUSR1 stack dump. Safe to call again."""
    register_stack_dump()
    _check(_load_lib().bw_init(), "init")


def rank():
    return _check(_load_lib().bw_rank(), "rank")


def world_size():
    return _check(_load_lib().bw_world_size(), "world_size")


def report_step(step, loss, tokens=0):
    """Reports a finished step (non-blocking; dropped if no agent listens)."""
    _check(_load_lib().bw_report_step(int(step), float(loss), int(tokens)), "report_step")


def resume_step():
    """Committed step to resume from, or -1 for a fresh start."""
    return int(_load_lib().bw_resume_step())


def should_checkpoint(step):
    return bool(_check(_load_lib().bw_should_checkpoint(int(step)), "should_checkpoint"))


def poll_injected_nan():
    """True once after the agent injected a NaN (chaos testing)."""
    return bool(_check(_load_lib().bw_poll_injected_nan(), "poll_injected_nan"))


def skip_range():
    """(from, to) data batches to skip after a NaN rollback, or None."""
    lib = _load_lib()
    lo, hi = int(lib.bw_skip_from()), int(lib.bw_skip_to())
    if lo < 0 or hi <= lo:
        return None
    return (lo, hi)


def should_skip(step):
    r = skip_range()
    return r is not None and r[0] <= step < r[1]


def _is_bytes_dict(state):
    return isinstance(state, dict) and len(state) > 0 and all(
        isinstance(k, str) and isinstance(v, (bytes, bytearray, memoryview))
        for k, v in state.items())


def save(step, state):
    """Saves this rank's shard of `step`. `state` is any torch-serialisable object
    (typically a dict of state_dicts), or a dict of str -> bytes saved as-is."""
    if _is_bytes_dict(state):
        items = [(_BYTES_PREFIX + k, bytes(v)) for k, v in state.items()]
    else:
        import torch  # only needed for torch state
        buf = io.BytesIO()
        torch.save(state, buf)
        items = [(_STATE_BLOB, buf.getvalue())]
    n = len(items)
    names = (ctypes.c_char_p * n)(*[k.encode("utf-8") for k, _ in items])
    keep = [ctypes.c_char_p(v) for _, v in items]  # borrows the bytes, no copy
    data = (ctypes.c_void_p * n)(*[ctypes.cast(p, ctypes.c_void_p) for p in keep])
    sizes = (ctypes.c_size_t * n)(*[len(v) for _, v in items])
    _check(_load_lib().bw_save(int(step), n, names, data, sizes), "save")


def commit(step):
    """Commits `step` for all ranks. Only needed when running without the Bulwark
    agent with WORLD_SIZE > 1 (call on one rank after a barrier)."""
    _check(_load_lib().bw_commit(int(step)), "commit")


def load(step=None, map_location=None):
    """Loads this rank's state of committed `step` (default: the resume step).
    Returns None if step is None and there is nothing to resume from."""
    lib = _load_lib()
    if step is None:
        step = lib.bw_resume_step()
        if step < 0:
            return None
    handle = ctypes.c_void_p()
    _check(lib.bw_load(int(step), ctypes.byref(handle)), "load")
    try:
        blobs = {}
        for i in range(lib.bw_blobs_count(handle)):
            name = lib.bw_blobs_name(handle, i).decode("utf-8")
            size = lib.bw_blobs_size(handle, i)
            ptr = lib.bw_blobs_data(handle, i)
            blobs[name] = ctypes.string_at(ptr, size) if size else b""
    finally:
        lib.bw_blobs_free(handle)
    if _STATE_BLOB in blobs and len(blobs) == 1:
        import torch
        return torch.load(io.BytesIO(blobs[_STATE_BLOB]), map_location=map_location)
    return {k[len(_BYTES_PREFIX):]: v for k, v in blobs.items() if k.startswith(_BYTES_PREFIX)}
