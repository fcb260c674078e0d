"""The sample trainer of deploy/sample-trainjob.yaml: ``python3 -m bulwark.sample``.

It needs no GPU, no torch and no data, so that a new installation can be tried before
any training code is packaged: each rank fits one number w to a target by gradient
descent on the squared error, reports every step to Bulwark (step heartbeats, loss,
tokens) and, when the job asks for checkpoints (``bulwark.should_checkpoint``), saves
its state and resumes from it after a restart.

Options: ``--steps N`` (default 300), ``--step-seconds S`` seconds of "compute" per step
(default 0.1).
"""
import argparse
import os
import time
from typing import Any, Dict, List, Optional

import bulwark
from bulwark import checkpoint


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bulwark.sample")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-seconds", type=float, default=0.1)
    args = ap.parse_args(argv)

    bulwark.init()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    target = 3.0 + rank
    state: Dict[str, Any] = {"progress": {"step": 0, "w": 0.0}}
    start = 1
    if bulwark.resume_step() >= 0 and checkpoint.load(state) is not None:
        start = int(state["progress"]["step"]) + 1
    w = float(state["progress"]["w"])
    print(f"sample: rank {rank} of {world} starting at step {start}", flush=True)
    for step in bulwark.steps(start, args.steps + 1):
        time.sleep(args.step_seconds)
        w -= 0.05 * 2.0 * (w - target)
        loss = (w - target) ** 2
        bulwark.report_step(step, loss, 1024)
        if bulwark.should_checkpoint(step):
            state["progress"] = {"step": step, "w": w}
            checkpoint.save(state, step)
    print(f"sample: rank {rank} finished, loss {(w - target) ** 2:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
