"""A tiny trainer for end-to-end tests: no torch, ~20 ms steps, uses the Bulwark SDK.

Its "model" is one float w; each step w += 1 and loss = 1 / w. It checkpoints w and
the step, and on resume checks that the loaded state is exactly the resume step's
(exit 3 otherwise), so a test passes only if checkpoints round-trip through restarts.
Environment knobs: TINY_CRASH_AT_START=1 exits 1 at once (budget exhaustion);
TINY_STEP_TIME seconds per step (default 0.02); TINY_SAVE_EVERY_STEP=1 snapshots every
step (the memory tier; the SDK marks every checkpoint.intervalSteps-th for disk);
TINY_STEP_LOG=PATH appends "rank step pid" for every step it runs (a test then sees
whether a step ran twice or a rank was restarted).
"""
import argparse
import math
import os
import struct
import sys
import time

import bulwark

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=100)
args = ap.parse_args()

if os.environ.get("TINY_CRASH_AT_START") == "1":
    print("tiny: simulated startup failure: CUDA error: an illegal memory access", flush=True)
    sys.exit(1)

bulwark.init()
rank = int(os.environ.get("RANK", "0"))
step_time = float(os.environ.get("TINY_STEP_TIME", "0.02"))
every_step = os.environ.get("TINY_SAVE_EVERY_STEP") == "1"
start = 1
w = 1.0
resume = bulwark.resume_step()
if resume >= 0:
    state = bulwark.load()
    saved_step, w = struct.unpack("<qd", state["state"])
    if saved_step != resume or (math.isfinite(w) and w != 1.0 + resume):
        print(f"tiny: rank {rank} loaded step {saved_step} w={w}, expected {resume}", flush=True)
        sys.exit(3)
    start = resume + 1
    print(f"tiny: rank {rank} resumed from step {resume}", flush=True)
print(f"tiny: rank {rank} of {os.environ.get('WORLD_SIZE')} starting at step {start} "
      f"master {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
      f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)
step_log = open(os.environ["TINY_STEP_LOG"], "a", buffering=1) if os.environ.get("TINY_STEP_LOG") else None
for step in range(start, args.steps + 1):
    time.sleep(step_time)
    if step_log:
        step_log.write(f"{rank} {step} {os.getpid()}\n")
    if bulwark.poll_injected_nan():
        w = float("nan")
    if bulwark.should_skip(step):
        pass  # data for this step would be skipped; w still advances
    w = w + 1.0
    loss = 1.0 / w
    bulwark.report_step(step, loss, 128)
    if every_step or bulwark.should_checkpoint(step):
        bulwark.save(step, {"state": struct.pack("<qd", step, w)})
print(f"tiny: rank {rank} finished", flush=True)
