"""A tiny training run for the sharded-checkpoint tests (under torchrun, gloo, CPU).

FSDP2 (``fully_shard``) or DDP over an MLP with dropout, AdamW, StepLR and a ResumableLoader:
32 samples, batch 4 per rank, so 4 steps per epoch on 2 ranks. Every rank writes
``OUT/result_rank<r>.pt``: the sample indices and losses of each step it ran and (rank 0) the full
model and optimizer state at the end, and right after a resume.

    --kind fsdp|ddp  --out DIR  [--resume CKPT]  [--save-at 5,9]  [--kill-in-save-at 9]
    [--async]  [--steps 12]
"""

import argparse
import copy
import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
from torch.utils.data import Dataset

from traindoctor import checkpoint


class Indexed(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(8, generator=g)
        return x, x.sum(0, keepdim=True).sin(), i


def build(kind):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model[0])
        fully_shard(model[3])
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched


def full_state(model, opt):
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, opt, options=options)
    # On one rank the "full" tensors may be the live parameters themselves: copy them.
    return copy.deepcopy({"model": model_sd, "optimizer": optim_sd})


def kill_inside_the_shard_write():
    """Rank 1 dies (SIGKILL) while DCP writes its shards."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    def write_data(self, plan, planner):
        os.kill(os.getpid(), signal.SIGKILL)

    FileSystemWriter.write_data = write_data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=["fsdp", "ddp"], required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--resume")
    parser.add_argument("--save-at", default="")
    parser.add_argument("--kill-in-save-at", type=int, default=0)
    parser.add_argument("--async", dest="async_save", action="store_true")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--check-errors", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, opt, sched = build(args.kind)
    loader = checkpoint.ResumableLoader(Indexed(), batch_size=4, shuffle=True, seed=7)
    result = {"steps": [], "losses": [], "seen": [], "world": dist.get_world_size()}
    step = 0
    if args.resume:
        info = checkpoint.load(args.resume, model=model, optimizer=opt, scheduler=sched,
                               loader=loader)
        step = info.step
        result.update(resumed_from=step, restored=info.restored, missing=info.missing,
                      notes=info.notes)
        state = full_state(model, opt)
        if rank == 0:
            result["after_load"] = state
    save_at = {int(s) for s in args.save_at.split(",") if s}
    while step < args.steps:
        for x, y, idx in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            result["steps"].append(step)
            result["losses"].append(loss.item())
            result["seen"].append(idx.tolist())
            if step in save_at:
                state = full_state(model, opt)
                if rank == 0:
                    result[f"at_save_{step}"] = state
                if step == args.kill_in_save_at and rank == 1:
                    checkpoint.wait()  # the previous async save must not be the one killed
                    kill_inside_the_shard_write()
                torch.save(result, os.path.join(args.out, f"result_rank{rank}.pt"))
                checkpoint.save(os.path.join(args.out, "ckpt", "last"), model=model,
                                optimizer=opt, scheduler=sched, loader=loader, step=step,
                                epoch=loader.epoch, keep_last=1, async_save=args.async_save)
            if step == args.steps:
                break
    checkpoint.wait()
    state = full_state(model, opt)
    if rank == 0:
        result["final"] = state
    torch.save(result, os.path.join(args.out, f"result_rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    if args.check_errors:  # a sharded model without its process group: a named error, no file
        try:
            checkpoint.save(os.path.join(args.out, "late"), model=model, optimizer=opt)
        except ValueError as exc:
            result["save_error"] = str(exc)
        torch.save(result, os.path.join(args.out, f"result_rank{rank}.pt"))


if __name__ == "__main__":
    main()
