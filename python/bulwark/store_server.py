"""The job's long-lived TCPStore: `python -m bulwark.store_server [--port P]`.

Started by the agent that serves node slot 0 (docs/agent.md, "Generations"). It hosts a
torch.distributed TCPStore that outlives every generation of the job's process group:
ranks that recover in process re-form their group on it under a new key prefix per
generation (`bulwark/<run id>/gen<N>/`), so no port is bound again. Prints
`bulwark-store: listening on port N` once it serves, then serves until the agent ends
it (it dies with the agent).
"""
import argparse
import datetime
import signal
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=0, help="0 = an ephemeral port")
    args = ap.parse_args()
    import torch.distributed as dist
    store = dist.TCPStore(args.host, args.port, None, True, datetime.timedelta(seconds=60),
                          wait_for_workers=False)
    print(f"bulwark-store: listening on port {store.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
