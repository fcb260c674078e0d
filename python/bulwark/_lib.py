"""Loads libbulwark.so (the C ABI, src/sdk/bulwark_c.h) and declares its signatures.

Search order: $BULWARK_LIB; the copy installed inside this package by `pip install`
(bulwark/_native/libbulwark.so); a source checkout's build (<repo>/build/lib). The
library is loaded once per process.
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional


class BulwarkError(RuntimeError):
    """A Bulwark call failed; the message says what and how to fix it."""


# Return codes of the C ABI (bulwark_c.h).
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_NOT_FOUND = -2
ERR_FAILED_PRECONDITION = -4
ERR_DATA_LOSS = -5
ERR_DEADLINE_EXCEEDED = -6
ERR_UNAVAILABLE = -7

_lib: Optional[ctypes.CDLL] = None

_c_long, _c_int, _c_size, _vp = ctypes.c_long, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
_SIGNATURES = {
    "bw_last_error": (ctypes.c_char_p, []),
    "bw_init": (_c_int, []),
    "bw_shutdown": (_c_int, []),
    "bw_rank": (_c_int, []),
    "bw_world_size": (_c_int, []),
    "bw_resume_step": (_c_long, []),
    "bw_should_checkpoint": (_c_int, [_c_long]),
    "bw_skip_from": (_c_long, []),
    "bw_skip_to": (_c_long, []),
    "bw_poll_injected_nan": (_c_int, []),
    "bw_poll_injected_sdc": (_c_int, []),
    "bw_report_digest": (_c_int, [ctypes.c_long, ctypes.c_ulonglong, ctypes.c_char_p]),
    "bw_digest": (ctypes.c_ulonglong, [_c_size, ctypes.POINTER(_vp), ctypes.POINTER(_c_size)]),
    "bw_report_step": (_c_int, [_c_long, ctypes.c_double, ctypes.c_longlong]),
    "bw_report_step_ex": (_c_int, [_c_long, ctypes.c_double, ctypes.c_longlong, _vp]),
    "bw_set_model_flops": (_c_int, [ctypes.c_double]),
    "bw_data_delay": (ctypes.c_double, []),
    "bw_peak_flops": (ctypes.c_double, [ctypes.c_char_p, ctypes.c_char_p]),
    "bw_mark_step_start": (_c_int, []),
    "bw_declare_in_process": (_c_int, [_c_int]),
    "bw_abort_requested": (_c_int, []),
    "bw_wait_abort": (_c_int, [ctypes.c_double]),
    "bw_park": (_c_int, [ctypes.c_char_p]),
    "bw_finished": (_c_int, []),
    "bw_wait_generation": (_c_int, [ctypes.c_double, ctypes.c_char_p, _c_size]),
    "bw_ckpt_save": (_c_int, [_c_long, _c_size, ctypes.POINTER(ctypes.c_char_p),
                              ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_c_int),
                              ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(_vp),
                              ctypes.POINTER(_c_int)]),
    "bw_ckpt_save_sharded": (_c_int, [_c_long, _c_size, ctypes.POINTER(ctypes.c_char_p),
                                      ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_c_int),
                                      ctypes.POINTER(ctypes.c_longlong),
                                      ctypes.POINTER(ctypes.c_longlong),
                                      ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(_vp),
                                      ctypes.POINTER(_c_int)]),
    "bw_commit": (_c_int, [_c_long]),
    "bw_ckpt_open": (_c_int, [_c_long, _c_int, ctypes.POINTER(_vp)]),
    "bw_load_tier": (ctypes.c_char_p, [_vp]),
    "bw_load_step": (_c_long, [_vp]),
    "bw_load_count": (_c_size, [_vp]),
    "bw_load_name": (ctypes.c_char_p, [_vp, _c_size]),
    "bw_load_dtype": (ctypes.c_char_p, [_vp, _c_size]),
    "bw_load_ndim": (_c_int, [_vp, _c_size]),
    "bw_load_dim": (ctypes.c_longlong, [_vp, _c_size, _c_int]),
    "bw_load_global_dim": (ctypes.c_longlong, [_vp, _c_size, _c_int]),
    "bw_load_offset": (ctypes.c_longlong, [_vp, _c_size, _c_int]),
    "bw_load_nbytes": (_c_size, [_vp, _c_size]),
    "bw_load_read": (_c_int, [_vp, _c_size, _vp, _c_size]),
    "bw_load_piece": (_c_int, [_vp, ctypes.c_char_p, ctypes.c_char_p, _c_int,
                               ctypes.POINTER(ctypes.c_longlong),
                               ctypes.POINTER(ctypes.c_longlong),
                               ctypes.POINTER(ctypes.c_longlong), _vp, _c_size]),
    "bw_load_close": (None, [_vp]),
}


class StepMetrics(ctypes.Structure):
    """bw_step_metrics (bulwark_c.h); NaN = not measured."""
    _fields_ = [("size", ctypes.c_uint), ("samples", ctypes.c_double), ("lr", ctypes.c_double),
                ("grad_norm", ctypes.c_double), ("data_wait_s", ctypes.c_double),
                ("compute_s", ctypes.c_double), ("optimizer_s", ctypes.c_double),
                ("inferred", ctypes.c_int), ("busy_s", ctypes.c_double),
                ("rng_digest", ctypes.c_ulonglong), ("data_digest", ctypes.c_ulonglong),
                ("sum_order", ctypes.c_int)]


def _find() -> str:
    env = os.environ.get("BULWARK_LIB")
    if env:
        if not os.path.isfile(env):
            raise BulwarkError(f"BULWARK_LIB={env} does not exist; point it at libbulwark.so")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.path.join(here, "_native", "libbulwark.so"),
        os.path.normpath(os.path.join(here, "..", "..", "build", "lib", "libbulwark.so")),
    ]
    for c in candidates:
        if os.path.isfile(c):
            return c
    raise BulwarkError(
        "libbulwark.so not found: install the SDK with `pip install ./python` from the "
        "Bulwark repository (it builds the library), or set BULWARK_LIB to its path "
        f"(looked in {', '.join(candidates)})")


def lib() -> ctypes.CDLL:
    """The loaded library, with every signature declared."""
    global _lib
    if _lib is None:
        handle = ctypes.CDLL(_find())
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype = res
            fn.argtypes = args
        _lib = handle
    return _lib


def check(rc: int, what: str) -> int:
    """Returns rc, or raises BulwarkError with the library's message when rc < 0."""
    if rc < 0:
        msg = lib().bw_last_error().decode("utf-8", "replace")
        raise BulwarkError(f"bulwark.{what} failed: {msg}")
    return rc
