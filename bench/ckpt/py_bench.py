#!/usr/bin/python3
"""Python-side checkpoint benchmark with real torch (see bench/ckpt/README.md).

  save   a real state dict (stack of nn.Linear + AdamW state after one step):
         bulwark.checkpoint.save (memory tier, steady state after warm-up saves) vs
         torch.save to a file on --dir (with and without fsync) vs a single-threaded
         memcpy (ctypes.memmove) of the same tensor bytes into pre-faulted tensors.
  rss    RssAnon growth (peak during the call - before) of bulwark.checkpoint.save vs
         torch.save to io.BytesIO, sampled every ~0.5 ms by a thread.
  step   mean step time of examples/pytorch-ddp/train.py under `bulwark run`
         (1 node x --ranks ranks, memory snapshot every step, disk persist every
         --interval steps) vs the same job with `--mode none` (no checkpoints).

Writes one JSON document to --out. Run by bench/ckpt/run.py.
"""
import argparse
import ctypes
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class PeakSampler:
    """Samples RssAnon (and RssShmem) in a thread; peak growth over the start value."""

    def __init__(self):
        self.base = status_kib("RssAnon")
        self.base_shm = status_kib("RssShmem")
        self.peak = self.base
        self.peak_shm = self.base_shm
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, status_kib("RssAnon"))
            self.peak_shm = max(self.peak_shm, status_kib("RssShmem"))
            time.sleep(0.0005)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, status_kib("RssAnon"))


def build_state(layers, width):
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(16, width)
    model(x).square().mean().backward()
    opt.step()  # creates exp_avg / exp_avg_sq
    return model, opt, {"model": model.state_dict(), "optim": opt.state_dict(), "step": 1}


def tensors_of(obj, out):
    import torch
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors_of(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensors_of(v, out)
    return out


def bench_save(args, res):
    import torch
    import bulwark
    import bulwark.checkpoint as bwckpt
    bulwark.init()
    model, opt, state = build_state(args.layers, args.width)
    ts = [t for t in tensors_of(state, []) if t.numel() > 1]
    nbytes = sum(t.numel() * t.element_size() for t in tensors_of(state, []))
    res["state_bytes"] = nbytes
    res["tensors"] = len(tensors_of(state, []))
    res["model"] = f"{args.layers} x nn.Linear({args.width}, {args.width}) + AdamW state"
    # Pre-faulted destinations for the memcpy baseline.
    dst = [torch.ones_like(t) for t in ts]

    def memcpy():
        t0 = time.perf_counter()
        for d, s in zip(dst, ts):
            ctypes.memmove(d.data_ptr(), s.data_ptr(), s.numel() * s.element_size())
        return time.perf_counter() - t0

    step = [0]

    def bw_save():
        step[0] += 1
        t0 = time.perf_counter()
        bwckpt.save(state, step[0])
        return time.perf_counter() - t0

    path = os.path.join(args.dir, "torchsave.pt")

    def torch_save(fsync):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        dt = time.perf_counter() - t0
        os.unlink(path)
        return dt

    for _ in range(args.slots):  # warm-up: allocates the ring, touches every slot
        bw_save()
    memcpy()
    s = {"bulwark": [], "memcpy": [], "torch_save": [], "torch_save_fsync": []}
    for r in range(args.reps):
        order = [("bulwark", bw_save), ("memcpy", memcpy),
                 ("torch_save", lambda: torch_save(False)),
                 ("torch_save_fsync", lambda: torch_save(True))]
        if r % 2:
            order.reverse()
        for k, fn in order:
            s[k].append(fn())
    res["save"] = {k + "_s": statistics.median(v) for k, v in s.items()}
    res["save"]["samples"] = s

    # RSS-anon growth during save.
    rss = {}
    with PeakSampler() as p:
        bw_save()
    rss["bulwark_save_anon_kib"] = p.peak - p.base
    rss["bulwark_save_shmem_kib"] = p.peak_shm - p.base_shm
    buf = io.BytesIO()
    with PeakSampler() as p:
        torch.save(state, buf)
    rss["torch_save_bytesio_anon_kib"] = p.peak - p.base
    del buf
    rss["trainer_anon_kib_before"] = status_kib("RssAnon")
    rss["state_kib"] = nbytes // 1024
    res["rss"] = rss


def parse_step_ms(run_dir):
    """step_ms values printed by rank 0 (one line per step with --log-every 1)."""
    vals = []
    for dp, _, fs in os.walk(run_dir):
        for fn in fs:
            if not fn.endswith(".log"):
                continue
            p = os.path.join(dp, fn)
            with open(p, errors="replace") as f:
                txt = f.read()
            if "step_ms" not in txt:
                continue
            for m in re.finditer(r"^step\s+(\d+) loss .* step_ms\s+([\d.]+)", txt, re.M):
                vals.append((int(m.group(1)), float(m.group(2)), p))
    return vals


AB_BLOCK = 20


def bench_step(args, res):
    import yaml
    bulwark = args.bulwark
    out = {"mode": {}}
    work = tempfile.mkdtemp(prefix="bw-step-", dir=args.dir)
    shutil.copy(os.path.join(REPO, "examples", "pytorch-ddp", "train.py"), work)
    # Three variants, interleaved rep by rep so drift hits all alike:
    #   none     --mode none: no Bulwark SDK in the trainer at all;
    #   sdk      Bulwark SDK (step reports, resume, NaN poll) with checkpoints off;
    #   bulwark  the same plus a memory snapshot every step, disk persist every N.
    modes = ["none", "sdk", "bulwark"]

    def run_job(name, extra_args, ckpt):
        """Runs train.py under `bulwark run`; returns (report, run_dir)."""
        job = {
            "name": f"ckptbench-{name}",
            "nodes": 1,
            "procsPerNode": args.ranks,
            "command": ["/usr/bin/python3", "train.py"],
            "args": ["--steps", str(args.steps), "--log-every", "1", "--val-every", "0",
                     "--d-model", str(args.d_model), "--n-layer", str(args.n_layer)] + extra_args,
            "checkpoint": ckpt,
        }
        spec = os.path.join(work, f"job-{name}.yaml")
        with open(spec, "w") as f:
            yaml.safe_dump(job, f)
        run_dir = os.path.join(work, f"run-{name}")
        report = os.path.join(work, f"report-{name}.json")
        cmd = [bulwark, "run", spec, "--report", report, "--run-dir", run_dir,
               "--store", os.path.join(work, "store.db"), "--fresh", "--quiet"]
        print("py_bench: " + " ".join(cmd), file=sys.stderr, flush=True)
        cp = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if cp.returncode != 0:
            raise SystemExit(f"bulwark run failed ({cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
        with open(report) as f:
            return json.load(f), run_dir

    on_ckpt = {"intervalSteps": args.interval, "keep": 3, "memorySlots": 3}
    per_rep = {m: [] for m in modes}
    for r in range(args.step_reps):
        for mode in modes:
            rep, run_dir = run_job(
                f"{mode}-{r}", ["--mode", "none"] if mode == "none" else [],
                {"intervalSteps": 0, "keep": 3, "memorySlots": 0} if mode == "sdk" else on_ckpt)
            vals = parse_step_ms(run_dir)
            # Drop the first steps (startup, first-save ring allocation).
            ms = [v for s, v, _ in vals if s > args.skip_steps]
            per_rep[mode].append({"mean_step_ms": statistics.mean(ms) if ms else None,
                                  "median_step_ms": statistics.median(ms) if ms else None,
                                  "steps_measured": len(ms), "wall_s": rep.get("wall_s"),
                                  "checkpoint_s": rep.get("seconds", {}).get("checkpoint"),
                                  "committed": rep.get("checkpoints", {}).get("committed"),
                                  "phase": rep.get("phase")})
    # Within one run: snapshots on in even blocks of AB_BLOCK steps, off in odd ones.
    # A step's time includes the save made at the end of the step before it, so the
    # first step of each block is excluded from both sides.
    ab = []
    for r in range(args.step_reps):
        _, run_dir = run_job(f"ab-{r}", ["--snapshot-ab", str(AB_BLOCK)], on_ckpt)
        on, off = [], []
        for s, v, _ in parse_step_ms(run_dir):
            if s <= args.skip_steps or s % AB_BLOCK == 0:
                continue
            (off if (s // AB_BLOCK) % 2 == 1 else on).append(v)
        ab.append({"on_ms": statistics.mean(on), "off_ms": statistics.mean(off),
                   "on_steps": len(on), "off_steps": len(off)})
    out["ab"] = {"block": AB_BLOCK, "reps": ab,
                 "on_ms": statistics.median([a["on_ms"] for a in ab]),
                 "off_ms": statistics.median([a["off_ms"] for a in ab]),
                 "ratio": statistics.median([a["on_ms"] / a["off_ms"] for a in ab])}
    for mode in modes:
        out["mode"][mode] = {
            "reps": per_rep[mode],
            "mean_step_ms": statistics.median([p["mean_step_ms"] for p in per_rep[mode]]),
        }
    shutil.rmtree(work, ignore_errors=True)
    out["config"] = {"ranks": args.ranks, "steps": args.steps, "interval": args.interval,
                     "d_model": args.d_model, "n_layer": args.n_layer,
                     "skip_steps": args.skip_steps, "reps": args.step_reps}
    res["step"] = out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="directory on the local disk (not tmpfs)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--bulwark", default=os.path.join(REPO, "build", "bin", "bulwark"))
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--skip-steps", type=int, default=20)
    ap.add_argument("--step-reps", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--only", choices=["save", "step"], default=None)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    res = {}
    if args.only in (None, "save"):
        staging = tempfile.mkdtemp(prefix="bw-pybench-", dir="/dev/shm")
        saved = dict(os.environ)
        os.environ.update({"BULWARK_STAGING_DIR": staging, "BULWARK_MEMORY_SLOTS": str(args.slots),
                           "RANK": "0", "WORLD_SIZE": "1"})
        os.environ.pop("BULWARK_CKPT_DIR", None)
        try:
            bench_save(args, res)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            os.environ.clear()
            os.environ.update(saved)
    if args.only in (None, "step"):
        bench_step(args, res)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
