"""An unmodified torchrun-style script: no Bulwark SDK, only the torchrun environment.

Rank 1 crashes (exit 1) on its first attempt, found through a marker file in
$PLAIN_MARKER_DIR; every rank checks the torchrun variables and exits 0 otherwise.
"""
import os
import sys
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
assert 0 <= rank < world, (rank, world)
for k in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"):
    assert k in os.environ, k
marker = os.path.join(os.environ["PLAIN_MARKER_DIR"], "crashed-once")
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"plain: rank {rank}/{world} restart {restart}", flush=True)
if rank == 1 and not os.path.exists(marker):
    open(marker, "w").close()
    print("plain: rank 1 fails on purpose", flush=True)
    sys.exit(1)
time.sleep(0.3)
print(f"plain: rank {rank} done", flush=True)
