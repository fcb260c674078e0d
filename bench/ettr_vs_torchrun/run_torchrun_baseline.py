#!/usr/bin/python3
"""ETTR of the example trainer under plain torchrun, with the demo's fault schedule.

Runs examples/pytorch-ddp/train.py under Debian's torchrun (one machine, --standalone,
--max_restarts N) in --mode torchsave, injects the job spec's chaos schedule through
the trainer's BASELINE_CHAOS hooks, and writes a JSON summary
{wall_s, productive_s, ettr, restarts, steps, final_loss, ...} to --out.

ETTR = productive / wall, computed like Bulwark's ledger (src/ledger/ettr_ledger.h):
productive time is the sum over *new* steps (step > the highest step seen so far) of
(step_time - ckpt_stall), taken from the per-step JSONL log the trainer writes on
rank 0; wall is launch of torchrun to its exit. See README.md beside this file.

Every process this script starts is killed on exit, also on error or Ctrl-C: torchrun
runs in its own session (its workers inherit its process group, which is SIGKILLed),
and any straggler carrying this run's BASELINE_RUN_ID in its environment is SIGKILLed
by pid.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchdoc  # noqa: E402
DEFAULT_JOB = os.path.join(REPO, "examples", "pytorch-ddp", "job.yaml")
PYTHON = "/usr/bin/python3"  # Debian's python with torch 1.13

KIND_MAP = {"kill_rank": "kill", "hang_rank": "hang", "nan_loss": "nan",
            "kill_agent": "nodeloss"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", default=DEFAULT_JOB, help="Bulwark job spec (YAML)")
    p.add_argument("--out", required=True, help="JSON summary file to write")
    p.add_argument("--workdir", default=None,
                   help="parent dir for this run's ckpt/log dir (default: system tmp)")
    p.add_argument("--steps", type=int, default=None,
                   help="override the job's --steps")
    p.add_argument("--max-restarts", type=int, default=None,
                   help="torchrun --max_restarts (default: faultPolicy.restartBudget)")
    p.add_argument("--ckpt-every", type=int, default=None,
                   help="torch.save interval in steps (default: checkpoint.intervalSteps)")
    p.add_argument("--pg-timeout", type=float, default=30.0,
                   help="gloo collective timeout (s); the only thing that ends a hang")
    p.add_argument("--chaos-by", choices=["steps", "seconds"], default="steps",
                   help="translate atSeconds to a step number (progress-equivalent) "
                        "or fire at the same wall-clock second since launch")
    p.add_argument("--step-time", type=float, default=0.25,
                   help="measured fault-free step time (s), for --chaos-by steps")
    p.add_argument("--startup-s", type=float, default=5.0,
                   help="fault-free launch-to-first-step time (s), for --chaos-by steps")
    p.add_argument("--chaos", default=None,
                   help="raw BASELINE_CHAOS string (overrides the job's schedule); "
                        "'' for no faults")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="give up (kill everything) after this many seconds")
    p.add_argument("trainer_args", nargs="*",
                   help="extra trainer args after --, e.g. -- --batch-size 2")
    return p.parse_args()


def load_job(path):
    try:
        with open(path) as f:
            job = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        sys.exit(f"cannot read job spec {path}: {e}")
    if not isinstance(job, dict):
        sys.exit(f"job spec {path}: top level must be a mapping")
    return job


def translate_chaos(job, args, ppn):
    """Job chaos list -> BASELINE_CHAOS string (see train.py)."""
    items = []
    for i, c in enumerate(job.get("chaos") or []):
        kind = KIND_MAP.get(c.get("kind"))
        if kind is None:
            sys.exit(f"chaos[{i}].kind {c.get('kind')!r}: want one of {sorted(KIND_MAP)}")
        at = float(c.get("atSeconds", 0))
        at_step = c.get("atStep")
        if kind == "nodeloss":
            rank = int(c.get("node", 0)) * ppn  # first rank of that node
        else:
            rank = int(c.get("rank", 0))
        if at_step is not None:
            when = str(int(at_step))  # same training progress as under Bulwark
        elif args.chaos_by == "seconds":
            when = f"@{at:g}"
        else:
            when = str(max(1, round((at - args.startup_s) / args.step_time)))
        items.append(f"{kind}:{when}:{rank}")
    return ",".join(items)


def job_steps(job):
    a = [str(x) for x in job.get("args") or []]
    return int(a[a.index("--steps") + 1]) if "--steps" in a else 600


def kill_run(proc, run_id):
    """SIGKILLs torchrun's process group and every process tagged with run_id."""
    if proc is not None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    benchdoc.kill_env_tagged("BASELINE_RUN_ID", run_id)


def copy_timestamped(src, dst, t0):
    """Copies torchrun's output to dst, each line prefixed with seconds since t0."""
    for raw in iter(src.readline, b""):
        dst.write(f"[+{time.time() - t0:8.2f}s] {raw.decode(errors='replace')}")
        dst.flush()


def read_steps(path):
    """The records of a per-step JSONL log (none if it does not exist)."""
    recs = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line torn by a SIGKILL
    return recs


def summarize(steplog, target_steps):
    """Ledger-style accounting over the rank-0 step log (appended across attempts)."""
    recs = read_steps(steplog)
    hw, productive, ckpt, rework, tokens, rework_steps = 0, 0.0, 0.0, 0.0, 0, 0
    attempts = set()
    for r in recs:
        attempts.add(r["attempt"])
        ckpt += r["ckpt_stall"]
        if r["step"] > hw:
            productive += r["step_time"] - r["ckpt_stall"]
            tokens += r.get("tokens", 0)
            hw = r["step"]
        else:
            rework += r["step_time"] - r["ckpt_stall"]
            rework_steps += 1
    final = [r for r in recs if r["step"] == hw]
    return {
        "productive_s": productive, "ckpt_stall_s": ckpt, "rework_s": rework,
        "rework_steps": rework_steps, "steps": hw, "completed": hw >= target_steps,
        "final_loss": final[-1]["loss"] if final else None,
        "attempts_with_steps": len(attempts), "tokens": tokens,
    }


def main():
    args = parse_args()
    job = load_job(args.job)
    nodes = int(job.get("nodes", 1))
    ppn = int(job.get("procsPerNode", 1))
    nproc = nodes * ppn
    fp = job.get("faultPolicy") or {}
    max_restarts = args.max_restarts if args.max_restarts is not None \
        else int(fp.get("restartBudget", 3))
    ckpt_every = args.ckpt_every or int((job.get("checkpoint") or {})
                                        .get("intervalSteps", 20))
    steps = args.steps or job_steps(job)
    chaos = args.chaos if args.chaos is not None else translate_chaos(job, args, ppn)

    run_dir = tempfile.mkdtemp(prefix="ettr_baseline_", dir=args.workdir)
    ckpt_dir, log_dir = os.path.join(run_dir, "ckpt"), os.path.join(run_dir, "torchrun")
    os.makedirs(ckpt_dir)
    trainer = os.path.join(REPO, "examples", "pytorch-ddp", "train.py")
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", str(nproc), "--max_restarts", str(max_restarts),
           # Python 3.11 + torch 1.13: the default redirect crashes; tee works.
           "--redirects", "1", "--tee", "2", "--log_dir", log_dir,
           trainer, "--mode", "torchsave", "--steps", str(steps),
           "--ckpt-every", str(ckpt_every), "--ckpt-dir", ckpt_dir,
           "--pg-timeout", str(args.pg_timeout), *args.trainer_args]
    run_id = uuid.uuid4().hex
    env = dict(os.environ, BASELINE_CHAOS=chaos, BASELINE_PROCS_PER_NODE=str(ppn),
               BASELINE_RUN_ID=run_id, PYTHONUNBUFFERED="1")
    for k in [k for k in env if k.startswith("BULWARK_")]:
        del env[k]  # never let the trainer think it runs under Bulwark
    print(f"baseline: run dir {run_dir}\nbaseline: BASELINE_CHAOS={chaos!r}\n"
          f"baseline: {' '.join(cmd)}", flush=True)

    def on_term(signum, _frame):
        raise SystemExit(f"baseline: got signal {signum}, cleaning up")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    proc, pump, rc, timed_out = None, None, None, False
    console = open(os.path.join(run_dir, "console.log"), "w")
    t0 = time.time()
    env["BASELINE_T0"] = repr(t0)
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=run_dir)
        pump = threading.Thread(target=copy_timestamped,
                                args=(proc.stdout, console, t0), daemon=True)
        pump.start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        t1 = time.time()
        kill_run(proc, run_id)
        if pump is not None:
            pump.join(timeout=5)  # EOF once every writer of the pipe is dead
        console.close()

    s = summarize(os.path.join(ckpt_dir, "steps.jsonl"), steps)
    attempt_dirs = []
    for d in (os.listdir(log_dir) if os.path.isdir(log_dir) else []):
        sub = os.path.join(log_dir, d)
        attempt_dirs += [a for a in os.listdir(sub) if a.startswith("attempt_")]
    wall = t1 - t0
    summary = {
        "system": "torchrun", "wall_s": wall, "productive_s": s["productive_s"],
        "ettr": s["productive_s"] / wall if wall > 0 else 0.0,
        "restarts": max(0, len(attempt_dirs) - 1), "steps": s["steps"],
        "final_loss": s["final_loss"], "completed": s["completed"],
        "exit_code": rc, "timed_out": timed_out,
        "ckpt_stall_s": s["ckpt_stall_s"], "rework_s": s["rework_s"],
        "rework_steps": s["rework_steps"],
        "lost_other_s": wall - s["productive_s"] - s["ckpt_stall_s"] - s["rework_s"],
        "tokens": s["tokens"], "target_steps": steps, "nproc": nproc,
        "max_restarts": max_restarts, "ckpt_every": ckpt_every,
        "pg_timeout_s": args.pg_timeout, "chaos": chaos, "chaos_by": args.chaos_by,
        "run_dir": run_dir,
    }
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))
    return 0 if s["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
