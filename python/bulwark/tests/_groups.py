"""Shared by the tests that run real process groups: a group of worker processes (the
test file itself run with --worker PHASE RANK WORLD ROOT) with a deadline."""
import subprocess
import sys


def run_workers(test, script, phase, world, root, env, deadline_s):
    """Runs `world` workers of `phase` (`sys.executable script --worker phase rank world
    root`, RANK and WORLD_SIZE set in `env`); fails `test` with their output if any fails
    or the group is not done within `deadline_s` (then every worker is killed). Returns
    each rank's output."""
    procs = []
    for rank in range(world):
        procs.append(subprocess.Popen(
            [sys.executable, script, "--worker", phase, str(rank), str(world), root],
            env=dict(env, RANK=str(rank), WORLD_SIZE=str(world)), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs, failed = [], False
    for p in procs:
        try:
            out, _ = p.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += f"\n(killed after {deadline_s} s)"
        outputs.append(out)
        failed = failed or p.returncode != 0
    if failed:
        test.fail(f"{phase} workers failed:\n" +
                  "\n".join(f"--- rank {r} (exit {p.returncode}):\n{o}"
                            for r, (p, o) in enumerate(zip(procs, outputs))))
    return outputs
