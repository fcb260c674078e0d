#!/usr/bin/python3
"""What Bulwark costs a job that never fails: the same trainer under plain torchrun and
under `bulwark run`, with its default protection and with each feature alone.

The trainer is examples/pytorch-ddp/train.py (4 ranks, DDP over gloo on CPU), N steps,
no faults. Variants (each a separate run; --variants picks some):

  torchrun         torchrun --standalone --nproc_per_node 4 train.py --mode none: plain
                   DDP, no checkpoints, no SDK (the baseline)
  bulwark          `bulwark run` of examples/pytorch-ddp/job.yaml without its chaos
                   section: the demo's defaults (2 nodes x 2 ranks, a warm standby, its
                   snapshot cadence, peer push, disk persist, step reports)
  bare             `bulwark run`, step reports only (no memory tier, no disk checkpoints)
  snapshots        bare + memory snapshots at the demo's cadence (sealed by the agent)
  peer_push        snapshots + each sealed snapshot pushed to the peer node
  persist          snapshots + every checkpoint.intervalSteps-th written to disk
  metrics          bare + the /metrics port and dashboard, read once a second
  exact_allreduce  bare + the ordered all-reduce hook (bit-exact replay)

Runs are interleaved (round r runs every variant, in an order rotated by r), so drift of
the machine hits every variant alike. From each run: rank 0's per-step wall intervals
after the first --warmup steps (everything included: saves, safe points, reports), the
run's wall clock, and the CPU seconds of every process of the run per 1,000 steps over
the same window, by role (ranks, agents, controller, zygote and warm ranks, launcher),
sampled from /proc. Results: OUT/results.json; with --update-docs the section of
docs/benchmarks.md between its markers.

  /usr/bin/python3 bench/overhead/run.py [--rounds 3] [--steps 600] [--update-docs]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchdoc  # noqa: E402

PYTHON = "/usr/bin/python3"
TRAINER_DIR = os.path.join(REPO, "examples", "pytorch-ddp")
HZ = os.sysconf("SC_CLK_TCK")
VARIANTS = ["torchrun", "bulwark", "bare", "snapshots", "peer_push", "persist", "metrics",
            "exact_allreduce"]
FEATURES = {  # what each single-feature variant adds to bare, for the table
    "bare": "step reports only (SDK, agents, controller)",
    "snapshots": "memory snapshots",
    "peer_push": "memory snapshots + peer push",
    "persist": "memory snapshots + disk persist",
    "metrics": "/metrics and dashboard, scraped at 1 Hz",
    "exact_allreduce": "ordered all-reduce hook (bit-exact replay)",
}


# ------------------------------------------------------------------ the variants

def demo_spec(job):
    with open(job) as f:
        spec = yaml.safe_load(f)
    spec.pop("chaos", None)
    return spec


def arg_value(args, flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default


def without(args, flag, has_value=True):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = has_value
            continue
        out.append(a)
    return out


def bulwark_spec(variant, demo, steps, out):
    """The job spec of a `bulwark run` variant."""
    spec = json.loads(json.dumps(demo))
    spec["name"] = "overhead-" + variant.replace("_", "-")
    spec["workdir"] = TRAINER_DIR
    args = without(list(spec.get("args", [])), "--steps")
    ck = spec.setdefault("checkpoint", {})
    ck["dir"] = os.path.join(out, "ckpt")
    if variant != "bulwark":
        # bare: reports only; the feature variants add one thing each.
        args = without(without(args, "--exact-allreduce", False), "--snapshot-every")
        if variant == "exact_allreduce":
            args.append("--exact-allreduce")
        cadence = arg_value(list(demo.get("args", [])), "--snapshot-every", "1")
        snap = variant in ("snapshots", "peer_push", "persist")
        if snap:
            args += ["--snapshot-every", cadence]
        ck["memorySlots"] = ck.get("memorySlots", 4) if snap else 0
        ck["peerReplication"] = variant == "peer_push"
        if variant != "persist":
            ck["intervalSteps"] = 0
    spec["args"] = ["--steps", str(steps)] + args + [
        "--log-every", "100000", "--val-every", "0",
        "--step-times", os.path.join(out, "step_times.txt"), "--pid-dir", os.path.join(out, "pids")]
    return spec


def command(variant, demo, steps, out, bulwark, python):
    """(argv, env) of one run."""
    env = dict(os.environ, XDG_STATE_HOME=os.path.join(out, "state"))
    if variant == "torchrun":
        nproc = demo["nodes"] * demo["procsPerNode"]
        argv = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc_per_node", str(nproc), "--redirects", "1", "--tee", "2",
                "--log_dir", os.path.join(out, "torchrun-logs"),
                os.path.join(TRAINER_DIR, "train.py"), "--mode", "none",
                "--steps", str(steps), "--log-every", "100000", "--val-every", "0",
                "--step-times", os.path.join(out, "step_times.txt"),
                "--pid-dir", os.path.join(out, "pids")]
        return argv, env
    spec_path = os.path.join(out, "job.yaml")
    spec = bulwark_spec(variant, demo, steps, out)
    spec["command"] = [python] + list(spec["command"][1:])
    with open(spec_path, "w") as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    argv = [bulwark, "run", spec_path, "--fresh", "--quiet", "--progress-interval", "0",
            "--report", os.path.join(out, "report.json"), "--run-dir", os.path.join(out, "run"),
            "--store", os.path.join(out, "bulwark.db")]
    if variant == "metrics":
        argv += ["--metrics-addr", "127.0.0.1:0", "--ui"]
    return argv, env


# ------------------------------------------------------------- measuring a run

def read_proc(pid):
    """(ppid, comm, cumulative CPU seconds) of pid, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    comm = st[st.index("(") + 1:st.rindex(")")]
    rest = st[st.rindex(")") + 2:].split()
    return int(rest[1]), comm, (int(rest[11]) + int(rest[12])) / HZ


class Sampler(threading.Thread):
    """Samples the CPU time of every process under `root` every `period` seconds."""

    def __init__(self, root, period=0.2):
        super().__init__(daemon=True)
        self.root, self.period = root, period
        self.series = {}  # pid -> [(t, cpu)]
        self.comm = {}    # pid -> comm
        self.cmd = {}     # pid -> cmdline
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.period)
        self.sample()

    def sample(self):
        t = time.time()
        table = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                r = read_proc(int(name))
                if r:
                    table[int(name)] = r
        tree, frontier = {self.root}, [self.root]
        children = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for c in children.get(frontier.pop(), []):
                if c not in tree:
                    tree.add(c)
                    frontier.append(c)
        for pid in tree:
            if pid not in table:
                continue
            _, comm, cpu = table[pid]
            self.series.setdefault(pid, []).append((t, cpu))
            if pid not in self.cmd:
                self.comm[pid] = comm
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        self.cmd[pid] = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                except OSError:
                    self.cmd[pid] = comm

    def cpu_between(self, pid, t0, t1):
        """CPU seconds pid used in [t0, t1], interpolated between samples."""
        s = self.series.get(pid, [])
        if not s:
            return 0.0

        def at(t):
            if t <= s[0][0]:
                return 0.0 if t < s[0][0] - self.period else s[0][1]
            for (ta, ca), (tb, cb) in zip(s, s[1:]):
                if ta <= t <= tb:
                    return ca + (cb - ca) * (t - ta) / max(tb - ta, 1e-9)
            return s[-1][1]
        return max(0.0, at(t1) - at(t0))


def role(pid, sampler, rank_pids, root, variant):
    if pid in rank_pids:
        return "ranks"
    if pid == root:
        return "launcher" if variant == "torchrun" else "controller"
    if sampler.comm.get(pid) == "bulwark-agent":
        return "agents"
    if "bulwark.zygote" in sampler.cmd.get(pid, "") or "bulwark.store_server" in sampler.cmd.get(pid, ""):
        return "zygote, warm ranks, store"
    return "other"


def scrape(base, stop):
    while not stop.is_set():
        for path in ("/metrics", "/api/status", "/api/series", "/api/ranks"):
            try:
                with urllib.request.urlopen(base + path, timeout=2) as r:
                    r.read()
            except Exception:  # noqa: BLE001 - the port opens a moment after start
                pass
        stop.wait(1.0)


def run_one(variant, demo, steps, warmup, out, bulwark, python):
    os.makedirs(out, exist_ok=True)
    argv, env = command(variant, demo, steps, out, bulwark, python)
    log_path = os.path.join(out, "output.log")
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=TRAINER_DIR)
        sampler = Sampler(proc.pid)
        sampler.start()
        stop, scraper = threading.Event(), None
        for line in proc.stdout:
            log.write(line)
            m = re.search(r"metrics: (http://127\.0\.0\.1:\d+)/metrics", line)
            if m and scraper is None:
                scraper = threading.Thread(target=scrape, args=(m.group(1), stop), daemon=True)
                scraper.start()
        rc = proc.wait()
    wall = time.time() - t0
    stop.set()
    sampler.stop.set()
    sampler.join()
    rows = []
    try:
        with open(os.path.join(out, "step_times.txt")) as f:
            for line in f:
                p = line.split()
                rows.append((int(p[0]), float(p[3]), float(p[4])))
    except OSError:
        pass
    rows.sort()
    if rc != 0 and not (rows and rows[-1][0] == steps):
        sys.exit(f"bench: {variant} failed (exit {rc}); its output: {log_path}")
    if rc != 0:  # torch 2.x gloo can abort in its teardown after the last step
        print(f"bench: {variant} finished its {steps} steps but exited {rc} (see {log_path}); "
              "timed all the same", flush=True)
    steady = [r for r in rows if r[0] > warmup]
    if len(steady) < 10:
        sys.exit(f"bench: {variant}: only {len(steady)} steps after the warm-up")
    intervals = [r[1] for r in steady]
    t_a, t_b = steady[0][2] - steady[0][1], steady[-1][2]
    rank_pids = set()
    for name in os.listdir(os.path.join(out, "pids")):
        with open(os.path.join(out, "pids", name)) as f:
            rank_pids.add(int(f.read()))
    cpu = {}
    for pid in sampler.series:
        c = sampler.cpu_between(pid, t_a, t_b)
        if c > 0:
            k = role(pid, sampler, rank_pids, proc.pid, variant)
            cpu[k] = cpu.get(k, 0.0) + c
    per_k = 1000.0 / len(steady)
    return {
        "variant": variant, "exit_code": rc, "wall_s": wall, "steps": len(rows),
        "measured_steps": len(steady),
        "mean_ms": 1e3 * statistics.fmean(intervals),
        "median_ms": 1e3 * statistics.median(intervals),
        "p90_ms": 1e3 * quantile(intervals, 0.90), "p99_ms": 1e3 * quantile(intervals, 0.99),
        "window_s": t_b - t_a,
        "cpu_per_1000_steps": {k: v * per_k for k, v in sorted(cpu.items())},
    }


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ------------------------------------------------------------------ the report

def summarize(runs):
    by = {}
    for r in runs:
        by.setdefault(r["variant"], []).append(r)
    out = {}
    for v, rs in by.items():
        roles = sorted({k for r in rs for k in r["cpu_per_1000_steps"]})
        out[v] = {
            "runs": len(rs),
            "mean_ms": statistics.fmean(r["mean_ms"] for r in rs),
            "mean_ms_each": [r["mean_ms"] for r in rs],
            "median_ms": statistics.fmean(r["median_ms"] for r in rs),
            "p90_ms": statistics.fmean(r["p90_ms"] for r in rs),
            "p99_ms": statistics.fmean(r["p99_ms"] for r in rs),
            "wall_s": statistics.fmean(r["wall_s"] for r in rs),
            "cpu_per_1000_steps": {k: statistics.fmean(r["cpu_per_1000_steps"].get(k, 0.0)
                                                       for r in rs) for k in roles},
        }
    return out


def paired_ratio(runs, variant, base):
    """Mean over rounds of variant's mean step / base's mean step in the same round."""
    rounds = {}
    for r in runs:
        rounds.setdefault(r["round"], {})[r["variant"]] = r["mean_ms"]
    ratios = [x[variant] / x[base] for x in rounds.values() if variant in x and base in x]
    return (statistics.fmean(ratios), min(ratios), max(ratios)) if ratios else None


def render(res):
    m, s, runs = res["machine"], res["summary"], res["runs"]
    section = res.get("section", "overhead")
    lines = [
        f"<!-- BEGIN {section} (generated by bench/overhead/run.py) -->", "",
        f"Machine: {m['cpu']}, {m['nproc']} cores, {m['mem_gib']} GiB, Linux {m['kernel']}, "
        f"torch {res['torch']}; load before the run {m['loadavg_before']}; run {m['date']}.",
        "",
        f"Command: `/usr/bin/python3 bench/overhead/run.py --rounds {res['rounds']} "
        f"--steps {res['steps']}"
        + ("" if res["variants"] == VARIANTS else f" --variants {','.join(res['variants'])}")
        + ("" if res.get("python", PYTHON) == PYTHON
           else ' --python "$(bash scripts/peers-venv.sh)/bin/python"')
        + ("" if section == "overhead" else f" --section {section}") + " --update-docs`",
        "",
        f"The demo trainer, 4 ranks, {res['steps']} steps, no faults; step time = rank 0's wall "
        f"time from one step's end to the next (saves, safe points and reports included), "
        f"steps {res['warmup'] + 1}-{res['steps']}; {res['rounds']} interleaved rounds, each "
        "variant once per round. \"vs torchrun\" is the mean over rounds of the variant's mean "
        "step over torchrun's in the same round (lowest and highest round in brackets).",
        "",
        "| variant | what runs | mean step (ms) | vs torchrun | median | p90 | p99 | wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    what = dict(FEATURES, torchrun="plain torchrun, no checkpoints",
                bulwark="`bulwark run` with the demo's defaults")
    for v in [v for v in VARIANTS if v in s]:
        x = s[v]
        pr = paired_ratio(runs, v, "torchrun")
        ratio = f"{pr[0]:.3f} ({pr[1]:.3f}-{pr[2]:.3f})" if pr and v != "torchrun" else "1"
        if v == "bulwark":
            ratio = f"**{ratio}**"
        lines.append(f"| {v} | {what[v]} | {x['mean_ms']:.1f} | {ratio} | {x['median_ms']:.1f} | "
                     f"{x['p90_ms']:.1f} | {x['p99_ms']:.1f} | {x['wall_s']:.1f} |")
    base = [r["mean_ms"] for r in runs if r["variant"] == "torchrun"]
    if len(base) > 1:
        lines += ["", f"torchrun's own mean step ranged over {min(base):.1f}-{max(base):.1f} ms "
                  f"from round to round ({100 * (max(base) / min(base) - 1):.1f} %): the "
                  "machine's drift, against which single variants' differences of a few "
                  "per cent are not resolved; the ratios pair each round's runs."]
    roles = ["ranks", "agents", "controller", "zygote, warm ranks, store", "launcher", "other"]
    roles = [r for r in roles if any(r in x["cpu_per_1000_steps"] for x in s.values())]
    lines += ["", "CPU seconds per 1,000 steps, by process (same window):", "",
              "| variant | " + " | ".join(roles) + " | all |",
              "|---|" + "---|" * (len(roles) + 1)]
    for v in [v for v in VARIANTS if v in s]:
        c = s[v]["cpu_per_1000_steps"]
        lines.append(f"| {v} | " + " | ".join(f"{c.get(r, 0.0):.1f}" for r in roles) +
                     f" | {sum(c.values()):.1f} |")
    lines += ["", f"<!-- END {section} -->"]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default=os.path.join(TRAINER_DIR, "job.yaml"))
    ap.add_argument("--bulwark", default=os.path.join(REPO, "build", "bin", "bulwark"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--python", default=PYTHON,
                    help="the Python both sides run the trainer with (e.g. the torch 2.x venv "
                         "of scripts/peers-venv.sh)")
    ap.add_argument("--out", default=None, help="output dir (default: a new temp dir)")
    ap.add_argument("--section", default="overhead",
                    help="the section of docs/benchmarks.md to write (another Python's "
                         "results go beside the default's, e.g. overhead-torch2)")
    ap.add_argument("--update-docs", action="store_true")
    ap.add_argument("--from-results", default=None,
                    help="render an earlier run's DIR/results.json instead of running")
    args = ap.parse_args()
    if args.from_results:
        res = benchdoc.load_results(args.from_results)
        res["section"] = args.section
        benchdoc.publish(render(res), args.section, args.update_docs)
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        sys.exit(f"bench: unknown variant(s) {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    if args.steps <= args.warmup + 10:
        sys.exit("bench: --steps must exceed --warmup by more than 10")
    if not os.access(args.bulwark, os.X_OK):
        sys.exit(f"{args.bulwark} not found: build first (bash scripts/build.sh)")
    out = args.out or tempfile.mkdtemp(prefix="bulwark-overhead-")
    demo = demo_spec(args.job)
    res = {"machine": benchdoc.machine(), "steps": args.steps, "warmup": args.warmup,
           "rounds": args.rounds, "variants": variants, "runs": [],
           "python": args.python, "section": args.section,
           "torch": subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()}
    for rnd in range(args.rounds):
        order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
        for v in order:
            r = run_one(v, demo, args.steps, args.warmup, os.path.join(out, f"r{rnd}-{v}"),
                        args.bulwark, args.python)
            r["round"] = rnd
            res["runs"].append(r)
            print(f"bench: round {rnd} {v:16s} mean {r['mean_ms']:6.1f} ms  median "
                  f"{r['median_ms']:6.1f}  p99 {r['p99_ms']:6.1f}  wall {r['wall_s']:5.1f} s  cpu/1k "
                  + " ".join(f"{k} {c:.1f}" for k, c in r["cpu_per_1000_steps"].items()),
                  flush=True)
    res["summary"] = summarize(res["runs"])
    benchdoc.save_results(res, out)
    benchdoc.publish(render(res), args.section, args.update_docs)
    print(f"bench: outputs in {out}")


if __name__ == "__main__":
    main()
