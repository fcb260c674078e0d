"""An unmodified torchrun-style training loop: no Bulwark SDK, only the torchrun
environment. It "trains" for --seconds (sleeps of 50 ms); on the job's first attempt
(TORCHELASTIC_RESTART_COUNT 0) rank 1 crashes (exit 1) after --crash-after seconds.
Prints its pid and attempt so a test can tell new processes from old ones.
"""
import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=10)
ap.add_argument("--crash-after", type=float, default=7)
args = ap.parse_args()
rank = int(os.environ["RANK"])
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"plain: rank {rank} restart {restart} pid {os.getpid()}", flush=True)
t0 = time.time()
while time.time() - t0 < args.seconds:
    if rank == 1 and restart == 0 and time.time() - t0 >= args.crash_after:
        print("plain: rank 1 fails on purpose", flush=True)
        sys.exit(1)
    time.sleep(0.05)
print(f"plain: rank {rank} done", flush=True)
