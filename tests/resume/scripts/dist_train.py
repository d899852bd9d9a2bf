"""2-rank training under torchrun (gloo) for ``verify-resume --nproc-per-node 2``.

--kind fsdp: FSDP2 with traindoctor.checkpoint (sharded directory, ResumableLoader): exact.
--kind ddp-model-only: DDP, rank 0 saves the model weights alone: momentum is lost on resume.
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn

from traindoctor import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--kind", choices=["fsdp", "ddp-model-only"], required=True)
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
X = torch.randn(48, 8)
Y = X @ torch.randn(8, 1)
data = torch.utils.data.TensorDataset(X, Y)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Dropout(0.1), nn.Linear(16, 1))
if args.kind == "fsdp":
    from torch.distributed.fsdp import fully_shard

    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
else:
    model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = checkpoint.ResumableLoader(data, batch_size=4, shuffle=True, seed=1)
step = 0
if args.resume:
    if args.kind == "fsdp":
        step = checkpoint.load("ckpt", model=model, optimizer=optimizer, loader=loader).step
    else:
        state = torch.load("ckpt.pt", weights_only=True)
        model.module.load_state_dict(state["model"])
        step = state["step"]
while step < args.steps:
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 4 == 0:
            if args.kind == "fsdp":
                checkpoint.save("ckpt", model=model, optimizer=optimizer, loader=loader, step=step)
            elif rank == 0:
                torch.save({"model": model.module.state_dict(), "step": step}, "ckpt.pt")
        if step >= args.steps:
            break
dist.destroy_process_group()
