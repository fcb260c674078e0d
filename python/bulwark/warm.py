"""A warm rank: a Python process that has already imported what a rank needs.

The node agent starts `python -m bulwark.warm` with the job's environment (docs/agent.md,
"Warm ranks"). It imports this SDK, the top-level imports of the rank's script
(`$BULWARK_WARM_TARGET`: a script path or `-m module`) and, for a script that imports
torch (or a module), torch.distributed and DDP, says
`warm_ready` on the agent socket, and blocks on stdin. It starts no thread, store or
process group, and runs no tensor operation, so it is as fresh as a new interpreter.

When a rank needs a process, the agent writes one JSON line to stdin,
{"argv": [...], "env": {...}, "cwd": "..."}, and closes it. The process then takes that
environment (replacing its own), changes to `cwd`, and runs the command's script or
module as `__main__`, exactly as `python SCRIPT ARGS` would: sys.argv, sys.path[0] and
`__file__` are the script's. Its exit status is the script's.
"""
import ast
import gc
import importlib
import json
import os
import runpy
import socket
import sys


def _top_level_imports(path):
    """Module names a script imports at its top level (absolute imports only)."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


# What DistributedDataParallel imports the first time a process constructs one: on torch
# >= 2.1, torch._dynamo (and with it inductor), 1.6-2.3 s of imports that every new rank
# would pay on the critical path of a recovery (the job waits for it at DDP's first
# collective). Older torch has no such module; the import then fails quietly.
DDP_LAZY_IMPORTS = ["torch._dynamo"]


def _preimport(target):
    wanted = ["bulwark", "bulwark.checkpoint"]
    torch_trainer = target.startswith("-m ")  # a module: assume a torch trainer
    script = _top_level_imports(target) if target and not torch_trainer else []
    torch_trainer = torch_trainer or any(m == "torch" or m.startswith("torch.") for m in script)
    if torch_trainer:
        # torch.cuda.is_available() (which importing torch._dynamo calls) then asks NVML
        # instead of initialising CUDA, which a forked child could not use.
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        wanted = (["torch", "torch.distributed", "torch.nn.parallel"] + DDP_LAZY_IMPORTS +
                  wanted)
    wanted += script
    for name in wanted:
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - a module that fails here fails later, visibly
            pass


def say_ready():
    """Tells the agent (datagram `warm_ready`) that this process can take a rank."""
    send_agent({"type": "warm_ready", "pid": os.getpid()})


# How long a datagram to the agent may wait for room in the agent's socket queue (it
# holds net.unix.max_dgram_qlen datagrams, 10 by default, until the agent reads them).
SEND_TIMEOUT_S = 2.0


def send_agent(msg):
    """Sends `msg` to the agent's socket ($BULWARK_AGENT_SOCK); True once sent. Waits at
    most SEND_TIMEOUT_S for room (a stopped or wedged agent); False when there is no
    agent, the send failed or timed out. A lost `warm_ready` only leaves the agent
    without this process: it spawns ranks afresh."""
    path = os.environ.get("BULWARK_AGENT_SOCK")
    if not path:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.settimeout(SEND_TIMEOUT_S)
            s.sendto(json.dumps(msg).encode(), path)
        return True
    except OSError:  # socket.timeout is an OSError
        return False


def _split(argv):
    """(script, module, args) from `python [options] SCRIPT|-m MODULE args`."""
    with_arg = {"-X", "-W"}
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m":
            return None, argv[i + 1], argv[i + 2:]
        if a in with_arg:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return a, None, argv[i + 1:]
    raise SystemExit(f"bulwark.warm: cannot run {argv!r}: no script or -m module")


def preimport():
    """Imports what the rank will need ($BULWARK_WARM_TARGET's top-level imports), then
    collects and freezes the garbage collector's view of what the imports made (gc.freeze:
    ~330,000 objects with torch 2.x): no later collection scans them again (a full one
    took 155 ms, at every park of a generation and at random steps of training), and a
    forked child does not touch their pages (they stay shared with the zygote)."""
    _preimport(os.environ.get("BULWARK_WARM_TARGET", ""))
    gc.collect()
    gc.freeze()


def become_assigned():
    """Waits for the assignment on stdin and runs it; its exit status is the script's."""
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the agent let us go without a rank
    job = json.loads(line)
    argv, env, cwd = job["argv"], job["env"], job.get("cwd") or os.getcwd()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    from bulwark import _stacks
    _stacks.register_stack_dump()
    script, module, args = _split(argv)
    if module is not None:
        sys.argv = [module] + list(args)
        sys.path[0] = cwd
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        path = os.path.abspath(script)
        sys.argv = [script] + list(args)
        sys.path[0] = os.path.dirname(path)
        runpy.run_path(path, run_name="__main__")
    return 0


def main():
    preimport()
    say_ready()
    return become_assigned()


if __name__ == "__main__":
    sys.exit(main())
