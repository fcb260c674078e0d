"""Bulwark sitecustomize: lets the node agent collect Python stacks of a hung rank, and
instruments unmodified PyTorch scripts (_bulwark_autometrics: steps, step time, loss,
data wait from torch's own optimizer, backward and data loader).

If $BULWARK_STACK_FILE is set, SIGUSR1 appends all threads' stacks to it (via
faulthandler). Never raises.
"""
import faulthandler
import os
import signal

_bulwark_stack_file = None


def _bulwark_register():
    global _bulwark_stack_file
    path = os.environ.get("BULWARK_STACK_FILE")
    if not path or not hasattr(signal, "SIGUSR1"):
        return
    try:
        _bulwark_stack_file = open(path, "a")
        faulthandler.register(signal.SIGUSR1, file=_bulwark_stack_file, all_threads=True,
                              chain=False)
    except Exception:  # noqa: BLE001 - must never break interpreter start-up
        _bulwark_stack_file = None


_bulwark_register()

try:
    import _bulwark_autometrics

    _bulwark_autometrics.install()
except Exception:  # noqa: BLE001 - must never break interpreter start-up
    pass
