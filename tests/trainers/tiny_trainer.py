"""A tiny trainer for end-to-end tests: no torch, ~20 ms steps, uses the Bulwark SDK.

Its "model" is one float w; each step w += 1 and loss = 1 / w. It checkpoints w and
the step (plain values: bulwark.checkpoint pickles them), and on resume checks that the
loaded state is exactly the resume step's (exit 3 otherwise), so a test passes only if
checkpoints round-trip through restarts.
Environment knobs: TINY_CRASH_AT_START=1 exits 1 at once (budget exhaustion);
TINY_STEP_TIME seconds per step (default 0.02); TINY_SAVE_EVERY_STEP=1 snapshots every
step (the memory tier; the SDK marks every checkpoint.intervalSteps-th for disk);
TINY_STEP_LOG=PATH appends "rank step pid" for every step it runs (a test then sees
whether a step ran twice or a rank was restarted; with TINY_CODE set, "rank step pid
code"); TINY_CODE names the code version (a hot update changes it); TINY_IN_PROCESS=1 runs the loop
under bulwark.run (no process group: backend=None), so a fault elsewhere makes this
process re-enter the loop in the next generation instead of being restarted;
TINY_ALIGN_EVERY=N runs the bitwise alignment check every N steps on the "model": a
frozen 8-byte layer and w's 8 bytes (chaos sdc flips a bit of the frozen layer, which
no later step repairs, as a flipped bit of w could be rounded away; training goes on).
"""
import argparse
import itertools
import math
import os
import struct
import sys
import time

import bulwark
from bulwark import checkpoint, metrics

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=100)
args = ap.parse_args()

if os.environ.get("TINY_CRASH_AT_START") == "1":
    print("tiny: simulated startup failure: CUDA error: an illegal memory access", flush=True)
    sys.exit(1)

step_time = float(os.environ.get("TINY_STEP_TIME", "0.02"))
every_step = os.environ.get("TINY_SAVE_EVERY_STEP") == "1"
step_log = open(os.environ["TINY_STEP_LOG"], "a", buffering=1) if os.environ.get("TINY_STEP_LOG") else None
align_every = int(os.environ.get("TINY_ALIGN_EVERY", "0"))


class Weights:
    """What every rank must hold alike (bulwark.check_alignment's module): a frozen
    layer and w."""

    def __init__(self, w):
        self.frozen = bytearray(8)
        self.buf = bytearray(struct.pack("<d", w))

    def parameters(self):
        return [self.frozen, self.buf]

    def value(self):
        return struct.unpack("<d", bytes(self.buf))[0]


def train():
    rank = int(os.environ.get("RANK", "0"))
    state = {"progress": {"step": 0, "w": 1.0}}
    start = 1
    resume = bulwark.resume_step()
    if resume >= 0:
        loaded = checkpoint.load(state)
        saved_step, w = state["progress"]["step"], state["progress"]["w"]
        if loaded is None or saved_step != resume or (math.isfinite(w) and w != 1.0 + resume):
            print(f"tiny: rank {rank} loaded step {saved_step} w={w}, expected {resume}",
                  flush=True)
            sys.exit(3)
        start = resume + 1
        print(f"tiny: rank {rank} resumed from step {resume} ({loaded.tier} tier)", flush=True)
    w = state["progress"]["w"]
    print(f"tiny: rank {rank} of {os.environ.get('WORLD_SIZE')} starting at step {start} "
          f"master {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
          f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')} "
          f"attempt {os.environ.get('BULWARK_ATTEMPT')} pid {os.getpid()}", flush=True)
    batches = metrics.timed(itertools.repeat(None))  # data wait (and chaos slow_data)
    weights = Weights(w)
    for step in bulwark.steps(start, args.steps + 1):
        next(batches)
        time.sleep(step_time)
        if step_log:
            code = os.environ.get("TINY_CODE")
            step_log.write(f"{rank} {step} {os.getpid()}" + (f" {code}" if code else "") + "\n")
        if bulwark.poll_injected_nan():
            w = float("nan")
        if bulwark.should_skip(step):
            pass  # data for this step would be skipped; w still advances
        w = w + 1.0
        if align_every > 0:
            weights.buf[:] = struct.pack("<d", w)
            bulwark.check_alignment(step, weights, every=align_every)
            w = weights.value()
        loss = 1.0 / w
        bulwark.report_step(step, loss, 128)
        if every_step or bulwark.should_checkpoint(step):
            state["progress"] = {"step": step, "w": w}
            checkpoint.save(state, step)
    print(f"tiny: rank {rank} finished", flush=True)


if os.environ.get("TINY_IN_PROCESS") == "1":
    bulwark.run(train, backend=None)
else:
    bulwark.init()
    train()
