"""An unmodified torchrun-style DDP script: no Bulwark SDK. It trains a small MLP with
Adam on a TensorDataset through a DataLoader, saves its own torch.save checkpoint every
--save-every steps (rank 0, atomically) and resumes from it, as a user's script would.
Bulwark's sitecustomize infers its steps, loss and data wait (docs/monitoring.md).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--save-every", type=int, default=20)
ap.add_argument("--ckpt", default="plain_ddp.pt")
ap.add_argument("--step-sleep", type=float, default=0.03)
args = ap.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 1)))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step = 0
if os.path.exists(args.ckpt):
    state = torch.load(args.ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
    if rank == 0:
        print(f"plain_ddp: resumed at step {step}", flush=True)
g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(4096, 32, generator=g), torch.randn(4096, 1, generator=g))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, world, rank))
epoch = 0
while step < args.steps:
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        if step >= args.steps:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        time.sleep(args.step_sleep)  # a bigger model's compute
        opt.step()
        step += 1
        if step % args.save_every == 0 and rank == 0:
            tmp = args.ckpt + ".tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, args.ckpt)
    epoch += 1
if rank == 0:
    print(f"plain_ddp: done at step {step}", flush=True)
dist.destroy_process_group()
