"""The example trainer under the peers of bench/peers: nvidia-resiliency-ext and TorchFT.

Same model, data, optimiser, LR schedule and fault hooks as
examples/pytorch-ddp/train.py (imported from it, not copied); only the parts each peer
owns differ, written as that peer's documentation and examples show:

  --mode nvrx     nvidia_resiliency_ext.inprocess.Wrapper around the training loop (the
                  shape of its advanced example: model, optimiser and a TCPStore made
                  once per process, the process group re-formed on a PrefixStore per
                  restart iteration, state reloaded from the last torch.save checkpoint
                  on every iteration; rank 0 saves inside call_wrapper.atomic()). Started
                  as WORLD_SIZE plain processes, of which --active are active and the
                  rest spares that ShiftRanks brings in when a process is terminated.
  --mode torchft  one replica group of one rank: torchft.Manager over ProcessGroupGloo,
                  torchft.DistributedDataParallel; a step whose gradients are not finite
                  is reported with manager.report_error, so should_commit() discards it
                  on every replica (torchft's way to skip a bad step); a replica that
                  (re)joins heals from a live peer. Started by torchrun per replica group.

Both log one JSON line per step (on the logging rank) to <ckpt-dir>/steps.jsonl:
{step, t_end, step_time, ckpt_stall, attempt, loss, tokens, participants, committed},
with the definitions of train.py's torchsave mode; `participants` is the number of
data-parallel replicas whose gradients the step averaged.

Faults: BASELINE_CHAOS as in train.py (kill, hang, nan, nodeloss by the current rank);
nodeloss also kills what else lives on that node (the nvrx monitor daemon of the rank;
the torchft replica group's torchrun agent), found by environment tags the runner sets.
"""

import datetime
import json
import math
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples",
                                "pytorch-ddp"))
import train as T  # noqa: E402  (sets the BLAS thread count before torch loads)
sys.path.insert(0, os.path.dirname(HERE))
import benchdoc  # noqa: E402  (kill_env_tagged)

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["nvrx", "torchft"], required=True)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--timeout", type=float, default=3.0,
                   help="every timeout the peer has (gloo collectives, hang, heartbeat), s")
    p.add_argument("--active", type=int, default=4, help="nvrx: active ranks")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--val-every", type=int, default=100)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    return p.parse_args()


class StepLog:
    """Appends the per-step JSON lines (train.py's format plus participants)."""

    def __init__(self, ckpt_dir):
        self.f = open(os.path.join(ckpt_dir, "steps.jsonl"), "a")

    def write(self, **rec):
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()


def make_model(args, corpus):
    torch.manual_seed(args.seed)
    model = T.GPT(corpus.vocab_size, args.d_model, args.n_layer, args.n_head, args.context)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99),
                            weight_decay=0.01)
    return model, opt


def set_lr(opt, step, args):
    for g in opt.param_groups:
        g["lr"] = T.lr_at(step, args)


# ---------------------------------------------------------------------- nvrx

def run_nvrx(args, corpus):
    import nvidia_resiliency_ext.inprocess as inprocess
    from nvidia_resiliency_ext.inprocess import rank_assignment as ra

    os.environ["PEER_OWNER"] = str(os.getpid())  # inherited by this rank's monitor daemon
    model, opt = make_model(args, corpus)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    initial_opt = opt.state_dict()
    port = int(os.environ["MASTER_PORT"])
    base_store = dist.TCPStore(os.environ["MASTER_ADDR"], port + 2,
                               world_size=int(os.environ["WORLD_SIZE"]),
                               is_master=int(os.environ["RANK"]) == 0, multi_tenant=True,
                               wait_for_workers=True, use_libuv=True)
    ckpt_path = os.path.join(args.ckpt_dir, "ckpt.pt")
    # nvrx counts a rank blocked in a collective (GIL released) as not progressing, and
    # gloo cannot abort a pending collective: the gloo timeout must end before the soft
    # timeout (nvrx's usage guide: "specify a short timeout for the gloo backend"); the
    # hard timeout, which kills a rank that cannot act (a SIGSTOP), is --timeout.
    t = datetime.timedelta(seconds=args.timeout)
    gloo_t, soft_t = t * 0.5, t * 0.8
    tick = datetime.timedelta(seconds=0.2)

    def train(call_wrapper: inprocess.CallWrapper = None):
        t_launch = time.time()
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = dist.PrefixStore(str(call_wrapper.iteration), base_store)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=gloo_t)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        start = 1
        if os.path.exists(ckpt_path):  # every iteration reloads, as the examples do
            state = torch.load(ckpt_path)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            start = int(state["step"]) + 1
        else:
            model.load_state_dict(initial)
            opt.load_state_dict(initial_opt)
        chaos = T.BaselineChaos(os.environ.get("BASELINE_CHAOS", ""), args.ckpt_dir, rank)
        steplog = StepLog(args.ckpt_dir) if rank == 0 else None
        tokens = args.batch_size * args.context
        T.report_start(rank, "nvrx", call_wrapper.iteration, world, model, corpus, start,
                       t_launch)
        prev_end, stall, loss_v = time.time(), 0.0, float("nan")
        for step in range(start, args.steps + 1):
            x, y = corpus.batch(args.seed, step, rank, 0, args.batch_size, args.context)
            set_lr(opt, step, args)
            fault = chaos.due(step)
            if fault in ("kill", "nodeloss"):
                if fault == "nodeloss":
                    benchdoc.kill_env_tagged("PEER_OWNER", os.getpid())  # this rank's monitor daemon
                os.kill(os.getpid(), signal.SIGKILL)
            loss_v = T.guarded_step(ddp, model, opt, x, y, fault, rank, step)
            opt.step()
            t_end = time.time()
            step_time, prev_end = t_end - prev_end, t_end
            if steplog:
                steplog.write(step=step, t_end=t_end, step_time=step_time, ckpt_stall=stall,
                              attempt=call_wrapper.iteration, loss=loss_v,
                              tokens=tokens * world, participants=world, committed=True)
            stall = 0.0
            T.log_step(rank, step, start, loss_v, args, tokens, world, step_time, model,
                       corpus)
            if step % args.ckpt_every == 0:
                t0 = time.time()
                dist.barrier()
                if rank == 0:
                    with call_wrapper.atomic():
                        torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                                    "step": step}, ckpt_path + ".tmp")
                        os.replace(ckpt_path + ".tmp", ckpt_path)
                dist.barrier()
                stall = time.time() - t0
        if rank == 0:
            print(f"done: steps={args.steps} final_loss={loss_v:.4f}", flush=True)
        dist.destroy_process_group()

    wrapped = inprocess.Wrapper(
        store_kwargs={"port": port + 1},
        rank_assignment=inprocess.Compose(ra.MaxActiveWorldSize(args.active), ra.ShiftRanks()),
        monitor_thread_interval=tick, monitor_process_interval=tick, heartbeat_interval=tick,
        progress_watchdog_interval=tick, soft_timeout=soft_t, hard_timeout=t,
        heartbeat_timeout=t, last_call_wait=tick,
        termination_grace_time=datetime.timedelta(seconds=0.1),
        monitor_process_logfile=os.environ.get("PEER_MONITOR_LOG"),
    )(train)
    wrapped()


# ------------------------------------------------------------------- torchft

def run_torchft(args, corpus):
    from torchft import DistributedDataParallel, Manager, ProcessGroupGloo

    rid = int(os.environ["REPLICA_GROUP_ID"])
    groups = int(os.environ["NUM_REPLICA_GROUPS"])
    model, opt = make_model(args, corpus)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    t = datetime.timedelta(seconds=args.timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=t), min_replica_size=1,
                      load_state_dict=load_state_dict,
                      state_dict=lambda: {"model": model.state_dict(),
                                          "optim": opt.state_dict()},
                      replica_id=f"bench_{rid}", timeout=datetime.timedelta(seconds=10))
    ddp = DistributedDataParallel(manager, model)
    chaos = T.BaselineChaos(os.environ.get("BASELINE_CHAOS", ""), args.ckpt_dir, rid)
    steplog = StepLog(args.ckpt_dir) if rid == 0 else None
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    tokens = args.batch_size * args.context
    print(f"[replica {rid}] torchft attempt={attempt} step={manager.current_step()}",
          flush=True)
    prev_end, loss_v = time.time(), float("nan")
    while manager.current_step() < args.steps:
        step = manager.current_step() + 1
        x, y = corpus.batch(args.seed, step, rid, 0, args.batch_size, args.context)
        set_lr(opt, step, args)
        fault = chaos.due(step)
        if fault == "nodeloss":  # the whole node: both replica groups, agents included
            ppn = chaos.ppn
            for g in range(rid // ppn * ppn, rid // ppn * ppn + ppn):
                benchdoc.kill_env_tagged("PEER_GROUP", g)
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "hang":
            os.kill(os.getpid(), signal.SIGSTOP)
        manager.start_quorum()
        opt.zero_grad(set_to_none=True)
        loss = ddp(x, y)
        if fault == "nan":
            loss = loss * float("nan")
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        loss_v = loss.item()
        if not (math.isfinite(loss_v) and math.isfinite(gnorm)):
            manager.report_error(RuntimeError(f"non-finite loss {loss_v} / grad norm {gnorm}"))
        participants = manager.num_participants()
        committed = manager.should_commit()
        if committed:
            opt.step()
        t_end = time.time()
        step_time, prev_end = t_end - prev_end, t_end
        if steplog:
            steplog.write(step=step, t_end=t_end, step_time=step_time, ckpt_stall=0.0,
                          attempt=attempt, loss=loss_v, tokens=tokens * participants,
                          participants=participants, committed=committed)
        if committed:
            T.log_step(rid, step, 1, loss_v, args, tokens, participants, step_time, model,
                       corpus)
    if rid == 0:
        print(f"done: steps={args.steps} final_loss={loss_v:.4f}", flush=True)
    manager.shutdown()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    corpus = T.Corpus()
    (run_nvrx if args.mode == "nvrx" else run_torchft)(args, corpus)


if __name__ == "__main__":
    main()
