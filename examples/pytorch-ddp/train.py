#!/usr/bin/python3
"""Character-level GPT trained with DDP over gloo: the Bulwark example job.

Launched torchrun-style: reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT from the environment (set by torchrun or by the Bulwark agent).

Modes (--mode):
  bulwark    the training function runs under `bulwark.run` (in-process recovery: on a
             fault elsewhere this process keeps running, leaves the step, re-forms the
             process group and restores the agreed step from memory); checkpoints
             through `bulwark.checkpoint`, step reports, NaN injection and data
             skipping through the SDK. Default when the Bulwark agent launched us
             (BULWARK_AGENT_SOCK or BULWARK_RESUME_STEP set).
  torchsave  the plain-torchrun baseline "as a careful user would": rank 0
             torch.save()s {model, optim, step} to <ckpt-dir>/ckpt.pt (tmp file +
             os.replace), every rank resumes from it at startup; a non-finite loss or
             gradient norm raises (so torchrun restarts the group). Rank 0 appends one
             JSON line per step to <ckpt-dir>/steps.jsonl:
             {step, t_end, step_time, ckpt_stall, attempt, loss, tokens}. step_time is
             measured from the previous step's end (from the loop start for the first
             step of an attempt) and includes ckpt_stall, the time blocked in the
             checkpoint save made since the previous step -- the same definition the
             Bulwark ETTR ledger uses (src/ledger/ettr_ledger.h).
  none       no checkpoints (for timing).

Data for (step, rank) is a pure function of (--seed, step, rank, stream), so a resumed
run sees exactly the batches it would have seen; stream 1 replaces stream 0 for steps
inside the SDK's skip range (data skipping after a NaN rollback).

Fault hooks for the baseline (no effect in bulwark mode): BASELINE_CHAOS is a comma
list of KIND:AT:RANK with KIND in kill|hang|nan|nodeloss and AT a step number or
"@SECONDS" (seconds since BASELINE_T0, a Unix time set by the benchmark runner). Each
fault fires once per run: fired faults are recorded in <ckpt-dir>/chaos_fired so a
restarted attempt does not fire them again. nodeloss kills every rank r with
r // BASELINE_PROCS_PER_NODE == RANK // BASELINE_PROCS_PER_NODE (default 1 per node).
"""

import time

T_PROC_START = time.time()  # before the heavy imports: startup cost is reported

import argparse
import contextlib
import datetime
import hashlib
import json
import math
import os
import signal
import sys

# One BLAS thread per rank: ranks already fill the cores (set before torch loads BLAS).
# Under torchrun this is what takes effect; a warm rank under Bulwark imported torch in
# the zygote, before this line, and gets OMP_NUM_THREADS=1 from its agent instead.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

CORPUS_DIR = "/usr/share/games/fortunes"


def parse_args():
    env_interval = int(os.environ.get("BULWARK_CKPT_INTERVAL_STEPS", "0") or 0)
    under_bulwark = ("BULWARK_AGENT_SOCK" in os.environ
                     or "BULWARK_RESUME_STEP" in os.environ)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600, help="last step (1-based)")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30, help="linear warmup steps")
    p.add_argument("--ckpt-every", type=int,
                   default=env_interval if env_interval > 0 else 20)
    p.add_argument("--ckpt-dir", default=os.environ.get("BULWARK_CKPT_DIR", "ckpt"))
    p.add_argument("--mode", choices=["bulwark", "torchsave", "none"],
                   default="bulwark" if under_bulwark else "torchsave")
    p.add_argument("--pg-timeout", type=float, default=60.0,
                   help="gloo collective timeout, seconds")
    p.add_argument("--elastic-batch", choices=["keep", "scale"], default="keep",
                   help="an elastic job on fewer ranks than at full size: keep the global "
                        "batch (each rank accumulates the gradients of the missing ranks' "
                        "micro-batches) or scale it with the world size")
    p.add_argument("--snapshot-every", type=int, default=1,
                   help="with the agent's memory tier: snapshot every N steps (a fault then "
                        "redoes at most N-1 more steps; each snapshot stalls the step)")
    p.add_argument("--align-every", type=int, default=10,
                   help="the bitwise alignment check: every N steps each rank reports a "
                        "digest of its parameters, which must be equal on all ranks "
                        "(silent data corruption otherwise; 0 = off)")
    p.add_argument("--poison-batch", default="",
                   help="STEP:RANK[,STEP:RANK...]: the data batch of that step and rank "
                        "holds a corrupt record (its loss weight is NaN), as a bad shard "
                        "would: the NaN follows the data wherever it runs (tests of the "
                        "replay classification, docs/diagnosis.md)")
    p.add_argument("--segfault-at-step", type=int, default=0,
                   help="rank 0 dies of SIGSEGV at this step, every time it gets there: a "
                        "crash in native code (tests of the replay classification; 0 = never)")
    p.add_argument("--raise-at-step", type=int, default=0,
                   help="rank 0 raises at this step, every time it gets there: a bug in "
                        "the program (tests of the replay classification; 0 = never)")
    p.add_argument("--exact-allreduce", action="store_true",
                   help="bulwark mode: sum gradients with the SDK's ordered all-reduce "
                        "hook instead of DDP's ring, so a resumed run repeats the first "
                        "run's losses bit for bit and `bulwark replay` compares them "
                        "exactly (it costs steps: docs/benchmarks.md, bench/overhead)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--val-every", type=int, default=100)
    p.add_argument("--snapshot-ab", type=int, default=0,
                   help="benchmarks only: snapshot (and persist) only in even blocks of N "
                        "steps, so on/off step times compare within one run")
    p.add_argument("--metrics-ab", type=int, default=0,
                   help="benchmarks only: report the full training metrics (phases, lr, grad "
                        "norm, samples) only in odd blocks of N steps, the bare heartbeat in "
                        "even ones, and append rank 0's step times to --step-times")
    p.add_argument("--step-times", default="",
                   help="benchmarks only: rank 0 appends 'STEP OWN on|off INTERVAL T' per step "
                        "here: OWN is the step's own seconds (data to report), INTERVAL the "
                        "wall seconds since the previous step's end, everything included "
                        "(checkpoint saves, safe points), and T the Unix time of its end")
    p.add_argument("--pid-dir", default="",
                   help="benchmarks only: each rank writes its pid to DIR/rank-RANK.pid")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    a = p.parse_args()
    if a.steps < 1 or a.batch_size < 1 or a.ckpt_every < 1 or a.snapshot_every < 1:
        p.error("--steps, --batch-size, --ckpt-every and --snapshot-every must be >= 1")
    try:
        a.poisoned = {tuple(int(v) for v in item.split(":"))
                      for item in a.poison_batch.split(",") if item.strip()}
    except ValueError:
        p.error(f"--poison-batch: want STEP:RANK[,STEP:RANK...], got {a.poison_batch!r}")
    if any(len(t) != 2 for t in a.poisoned):
        p.error(f"--poison-batch: want STEP:RANK[,STEP:RANK...], got {a.poison_batch!r}")
    return a


# ----------------------------------------------------------------------------- data

class Corpus:
    """Byte-level vocabulary over the concatenated Debian fortune files."""

    def __init__(self, directory=CORPUS_DIR):
        names = sorted(n for n in os.listdir(directory) if "." not in n)
        if not names:
            sys.exit(f"no fortune files in {directory}: apt-get install fortunes")
        ids, vocab = self._cached(directory, names)
        split = int(len(ids) * 0.9)
        self.train, self.val = ids[:split], ids[split:]
        self.vocab_size = len(vocab)
        self.chars = bytes(vocab.tolist()).decode("latin-1")

    @staticmethod
    def _cached(directory, names):
        """(token ids, vocabulary) of the files: tokenised once per machine and kept in a
        cache file keyed by the files' names, sizes and times (tokenising takes a few
        hundred ms, which every new rank process would pay at start)."""
        paths = [os.path.join(directory, n) for n in names]
        key = hashlib.sha1(repr([(p, os.stat(p).st_size, os.stat(p).st_mtime_ns)
                                 for p in paths]).encode()).hexdigest()[:16]
        cache_dir = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                 os.path.expanduser("~/.cache"), "bulwark-demo")
        cache = os.path.join(cache_dir, f"corpus-{key}.npz")
        try:
            with np.load(cache) as z:
                return z["ids"], z["vocab"]
        except (OSError, KeyError, ValueError):
            pass  # not made yet, or unreadable: tokenise
        raw = b"".join(open(p, "rb").read() for p in paths)
        data = np.frombuffer(raw, dtype=np.uint8)
        vocab = np.unique(data)
        lut = np.zeros(256, dtype=np.uint8)
        lut[vocab] = np.arange(len(vocab), dtype=np.uint8)
        ids = lut[data]
        try:  # written whole, then renamed: a concurrent reader sees all of it or none
            os.makedirs(cache_dir, exist_ok=True)
            tmp = f"{cache}.{os.getpid()}.tmp.npz"
            np.savez(tmp, ids=ids, vocab=vocab)
            os.replace(tmp, cache)
        except OSError:
            pass  # no cache: the next process tokenises again
        return ids, vocab

    def batch(self, seed, step, rank, stream, batch_size, context, split="train"):
        """Batch for (step, rank): a pure function of its arguments."""
        src = self.train if split == "train" else self.val
        rng = np.random.default_rng([seed, stream, step, rank])
        ix = rng.integers(0, len(src) - context - 1, size=batch_size)
        chunk = src[ix[:, None] + np.arange(context + 1)].astype(np.int64)
        t = torch.from_numpy(chunk)
        return t[:, :-1], t[:, 1:]


# ---------------------------------------------------------------------------- model

class Block(nn.Module):
    def __init__(self, d, n_head, context):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        mask = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.mask = mask.view(1, 1, context, context)  # not a buffer: gloo can't bcast bool

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.n_head)
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, n_layer, n_head, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, n_head, context) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def lr_at(step, args):
    """Linear warmup, then cosine decay to 10 % at --steps (a function of step only)."""
    if step <= args.warmup:
        return args.lr * step / args.warmup
    frac = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


# ---------------------------------------------------------------- baseline chaos

class BaselineChaos:
    """Parses BASELINE_CHAOS and fires this rank's faults once per run."""

    def __init__(self, spec, ckpt_dir, rank):
        self.rank = rank
        self.marker = os.path.join(ckpt_dir, "chaos_fired")
        self.t0 = float(os.environ.get("BASELINE_T0", "0") or 0)
        self.ppn = int(os.environ.get("BASELINE_PROCS_PER_NODE", "1") or 1)
        self.faults = []
        for item in filter(None, (s.strip() for s in spec.split(","))):
            parts = item.split(":")
            if len(parts) != 3 or parts[0] not in ("kill", "hang", "nan", "nodeloss"):
                sys.exit(f"BASELINE_CHAOS: bad entry {item!r}; "
                         "want KIND:STEP:RANK or KIND:@SECONDS:RANK, "
                         "KIND in kill|hang|nan|nodeloss")
            kind, at, target = parts[0], parts[1], int(parts[2])
            mine = (target // self.ppn == rank // self.ppn) if kind == "nodeloss" \
                else target == rank
            if mine:
                self.faults.append((item, kind, at))

    def _fired(self):
        try:
            with open(self.marker) as f:
                return set(line.strip() for line in f)
        except FileNotFoundError:
            return set()

    def due(self, step):
        """Returns the kind of a fault to fire now (marking it fired), or None."""
        if not self.faults:
            return None
        fired = self._fired()
        for item, kind, at in self.faults:
            tag = f"{item}#rank{self.rank}"
            if tag in fired:
                continue
            if at.startswith("@"):
                hit = self.t0 > 0 and time.time() - self.t0 >= float(at[1:])
            else:
                hit = step >= int(at)
            if hit:
                with open(self.marker, "a") as f:
                    f.write(tag + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                print(f"[rank {self.rank}] BASELINE_CHAOS firing {item} at step {step}",
                      file=sys.stderr, flush=True)
                return kind
        return None


# --------------------------------------------------------------- benchmark hooks

class StepTimes:
    """--step-times and --pid-dir (benchmarks only; no effect without them)."""

    def __init__(self, args, rank):
        if args.pid_dir:
            os.makedirs(args.pid_dir, exist_ok=True)
            with open(os.path.join(args.pid_dir, f"rank-{rank}.pid"), "w") as f:
                f.write(f"{os.getpid()}\n")
        # Line-buffered: a kept process makes a new one per generation, and the old one,
        # never collected (gc.freeze), would keep its unflushed lines.
        self.f = (open(args.step_times, "a", buffering=1) if args.step_times and rank == 0
                  else None)
        self.prev = time.perf_counter()

    def write(self, step, own, full):
        now = time.perf_counter()
        if self.f:
            self.f.write(f"{step} {own:.6f} {'on' if full else 'off'} {now - self.prev:.6f} "
                         f"{time.time():.6f}\n")
        self.prev = now


# -------------------------------------------------------------------------- main

def report_start(rank, mode, attempt, world, model, corpus, start, t_launch):
    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        print(f"[rank 0] mode={mode} attempt={attempt} world={world} "
              f"params={nparams} vocab={corpus.vocab_size} start_step={start} "
              f"import_s={t_launch - T_PROC_START:.2f} init_s={time.time() - t_launch:.2f}",
              flush=True)


def log_step(rank, step, start, loss_v, args, tokens, world, step_time, model, corpus):
    if rank == 0 and (step % args.log_every == 0 or step == start):
        print(f"step {step:5d} loss {loss_v:.4f} lr {lr_at(step, args):.2e} "
              f"tok/s {tokens * world / max(step_time, 1e-9):8.0f} "
              f"step_ms {step_time * 1e3:6.1f}", flush=True)
    if rank == 0 and args.val_every > 0 and step % args.val_every == 0:
        with torch.no_grad():
            vl = [model(*corpus.batch(args.seed, i, 0, 0, args.batch_size,
                                      args.context, split="val")).item()
                  for i in range(4)]
        print(f"step {step:5d} val_loss {sum(vl) / len(vl):.4f}", flush=True)


def build(args, corpus):
    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model = GPT(corpus.vocab_size, args.d_model, args.n_layer, args.n_head, args.context)
    ddp = DDP(model)
    if args.mode == "bulwark" and args.exact_allreduce:
        import bulwark  # gradients summed in rank order: a resumed run repeats bit for bit
        ddp.register_comm_hook(None, bulwark.ordered_allreduce_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99),
                            weight_decay=0.01)
    return model, ddp, opt


def train_bulwark(args, corpus):
    """One generation of training under bulwark.run (the process group is formed)."""
    import bulwark
    from bulwark import checkpoint
    t_launch = time.time()
    gen = bulwark.generation()
    for gap in bulwark.deterministic(args.seed):
        print(f"[rank {gen.rank}] not deterministic: {gap}", file=sys.stderr, flush=True)
    rank, world = gen.rank, gen.world_size
    model, ddp, opt = build(args, corpus)
    from bulwark import metrics
    # MFU: the model's training FLOPs per token (PaLM's 6N + 12·L·H·Q·T); the peak per
    # device comes from the spec (monitoring.peakFlops: on CPU, what the cores reach).
    metrics.set_model_flops(metrics.flops_per_token(
        model, n_layers=args.n_layer, n_heads=args.n_head, head_dim=args.d_model // args.n_head,
        seq_len=args.context))
    state = {"model": model, "optim": opt}
    start = 1
    loaded = checkpoint.load(state)
    if loaded is not None:
        start = loaded.step + 1
        if rank == 0:
            print(f"[rank 0] generation {gen.number}: resumed step {loaded.step} from the "
                  f"{loaded.tier} tier in {loaded.seconds * 1e3:.1f} ms"
                  f"{' (same process)' if gen.restarted else ''}", flush=True)
    # With the agent's memory tier, snapshot every --snapshot-every steps (a fault redoes
    # fewer than that many); the agent persists every checkpoint.intervalSteps-th to disk.
    memory_tier = bool(os.environ.get("BULWARK_STAGING_DIR"))
    report_start(rank, "bulwark", gen.number, world, model, corpus, start, t_launch)
    # An elastic job on fewer ranks than at full size (gen.max_world_size): with
    # --elastic-batch keep this rank also trains the micro-batches of the missing ranks
    # v with v % world == rank, accumulating their gradients, so a step sees the data and
    # the gradient of the full-size step;
    # with scale each rank trains its own batch and the global batch shrinks.
    full = max(gen.max_world_size, world) if args.elastic_batch == "keep" else world
    virtual = [v for v in range(full) if v % world == rank]
    # Each micro-batch's loss is weighted world/full: DDP's mean over the world's ranks
    # is then the mean over all `full` micro-batches, as at full size.
    weight = world / full
    if rank == 0 and full > world:
        print(f"[rank 0] {world} of {full} ranks: the ranks accumulate "
              f"{full // world}-{-(-full // world)} micro-batches each (global batch kept)",
              flush=True)
    tokens = args.batch_size * args.context * len(virtual)
    prev_end = time.time()
    loss_v = float("nan")
    times = StepTimes(args, rank)
    nullphase = contextlib.nullcontext()
    for step in bulwark.steps(start, args.steps + 1):
        full = args.metrics_ab <= 0 or (step // args.metrics_ab) % 2 == 1
        t_step = time.perf_counter()
        skip = bulwark.skip_range()
        stream = 1 if skip and skip[0] <= step < skip[1] else 0
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        poison = bulwark.poll_injected_nan()  # poisons every rank's weights via allreduce
        if step == args.raise_at_step and rank == 0:
            raise RuntimeError(f"a bug in the program at step {step} (--raise-at-step)")
        if step == args.segfault_at_step and rank == 0:
            import ctypes
            ctypes.string_at(0)  # reads address 0: SIGSEGV, as a bug in native code would
        opt.zero_grad(set_to_none=True)
        # The random numbers of a step (none today; dropout would draw them) depend on
        # the step alone, so a resumed run and `bulwark replay` draw the same.
        bulwark.seed_step(args.seed, step)
        loss_sum = 0.0
        inputs = []
        for i, v in enumerate(virtual):
            with metrics.phase("data_wait") if full else nullphase:
                x, y = corpus.batch(args.seed, step, v, stream, args.batch_size, args.context)
            inputs.append(x)
            # Gradients are all-reduced once, with the last micro-batch.
            with ddp.no_sync() if i < len(virtual) - 1 else contextlib.nullcontext(), \
                    metrics.phase("compute") if full else nullphase:
                loss = ddp(x, y)
                if poison or (stream == 0 and (step, v) in args.poisoned):
                    loss = loss * float("nan")
                (loss * weight).backward()
            loss_sum += loss.item()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        loss_v = loss_sum / len(virtual)
        with metrics.phase("optimizer") if full else nullphase:
            opt.step()
        bulwark.check_alignment(step, model, every=args.align_every)
        t_end = time.time()
        step_time, prev_end = t_end - prev_end, t_end
        if full:
            bulwark.report_step(step, loss_v, tokens, samples=args.batch_size * len(virtual),
                                lr=opt.param_groups[0]["lr"], grad_norm=float(gnorm),
                                data=inputs)
        else:
            bulwark.report_step(step, loss_v, tokens, data=inputs)
        own = time.perf_counter() - t_step
        log_step(rank, step, start, loss_v, args, tokens, world, step_time, model, corpus)
        if not (args.snapshot_ab > 0 and (step // args.snapshot_ab) % 2 == 1) and (
                (memory_tier and step % args.snapshot_every == 0)
                or bulwark.should_checkpoint(step)):  # (odd blocks: the A/B bench's "off")
            checkpoint.save(state, step, replicated=True)
        times.write(step, own, full)
    if rank == 0:
        print(f"done: steps={args.steps} final_loss={loss_v:.4f}" if start <= args.steps
              else "done: nothing to do", flush=True)


def guarded_step(ddp, model, opt, x, y, fault, rank, step):
    """One plain step with the baseline's fault hooks and the usual user guard: a
    non-finite loss or gradient norm raises (the launcher then restarts). Returns the
    loss; the optimizer step is the caller's."""
    if fault == "hang":
        os.kill(os.getpid(), signal.SIGSTOP)
    loss = ddp(x, y)
    if fault == "nan":
        loss = loss * float("nan")  # poisons every rank's weights via allreduce
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    loss_v = loss.item()
    if not (math.isfinite(loss_v) and math.isfinite(gnorm)):
        raise RuntimeError(f"rank {rank}: non-finite loss {loss_v} / grad norm "
                           f"{gnorm} at step {step}")
    return loss_v


def train_plain(args, corpus):
    """The plain torchrun script: torch.save checkpoints (torchsave) or none."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    attempt = int(os.environ.get("BULWARK_ATTEMPT",
                                 os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    t_launch = time.time()
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.pg_timeout))
    model, ddp, opt = build(args, corpus)
    start = 1
    ckpt_path = os.path.join(args.ckpt_dir, "ckpt.pt")
    if args.mode == "torchsave":
        os.makedirs(args.ckpt_dir, exist_ok=True)
        if os.path.exists(ckpt_path):
            state = torch.load(ckpt_path)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            start = int(state["step"]) + 1
    chaos = None
    if os.environ.get("BASELINE_CHAOS"):
        os.makedirs(args.ckpt_dir, exist_ok=True)  # holds the chaos_fired marker
        chaos = BaselineChaos(os.environ["BASELINE_CHAOS"], args.ckpt_dir, rank)
    steplog = None
    if args.mode == "torchsave" and rank == 0:
        steplog = open(os.path.join(args.ckpt_dir, "steps.jsonl"), "a")
    tokens = args.batch_size * args.context
    report_start(rank, args.mode, attempt, world, model, corpus, start, t_launch)
    prev_end = time.time()
    stall = 0.0  # checkpoint stall since prev_end
    loss_v = float("nan")
    times = StepTimes(args, rank)
    for step in range(start, args.steps + 1):
        t_step = time.perf_counter()
        x, y = corpus.batch(args.seed, step, rank, 0, args.batch_size, args.context)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        fault = chaos.due(step) if chaos else None
        if fault in ("kill", "nodeloss"):
            os.kill(os.getpid(), signal.SIGKILL)
        loss_v = guarded_step(ddp, model, opt, x, y, fault, rank, step)
        opt.step()
        t_end = time.time()
        step_time, prev_end = t_end - prev_end, t_end
        if steplog is not None:
            steplog.write(json.dumps(dict(step=step, t_end=t_end, step_time=step_time,
                                          ckpt_stall=stall, attempt=attempt,
                                          loss=loss_v, tokens=tokens * world)) + "\n")
            steplog.flush()
        stall = 0.0
        own = time.perf_counter() - t_step
        log_step(rank, step, start, loss_v, args, tokens, world, step_time, model, corpus)
        if args.mode == "torchsave" and step % args.ckpt_every == 0:
            t0 = time.time()
            if rank == 0:
                tmp = ckpt_path + ".tmp"
                torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                            "step": step}, tmp)
                os.replace(tmp, ckpt_path)
            dist.barrier()
            stall = time.time() - t0
        times.write(step, own, True)
    if rank == 0:
        print(f"done: steps={args.steps} final_loss={loss_v:.4f}" if start <= args.steps
              else "done: nothing to do", flush=True)
    dist.destroy_process_group()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    corpus = Corpus()  # once per process: kept across generations
    if args.mode == "bulwark":
        import bulwark
        bulwark.run(train_bulwark, args, corpus,
                    timeout=datetime.timedelta(seconds=args.pg_timeout))
    else:
        train_plain(args, corpus)


if __name__ == "__main__":
    main()
