"""SIGUSR1 -> all-thread Python stack dump appended to $BULWARK_STACK_FILE.

Shared by bulwark.init() and sitecustomize_dir/sitecustomize.py (which carries its
own copy so it never imports the bulwark package). Harmless when the variable is
unset or the file cannot be opened.
"""
import faulthandler
import os
import signal

_stack_file = None  # kept open for the life of the process (faulthandler needs it)


def register_stack_dump():
    """Registers the dump; returns True if registered. Never raises."""
    global _stack_file
    path = os.environ.get("BULWARK_STACK_FILE")
    if not path or not hasattr(signal, "SIGUSR1"):
        return False
    try:
        f = open(path, "a")
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        return False
    old, _stack_file = _stack_file, f
    if old is not None:
        try:
            old.close()
        except OSError:
            pass
    return True
