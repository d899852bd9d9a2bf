"""DDP training on 2 CPU ranks where rank 1 fails at step 3: --fail raise|kill|hang|term."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    mode = sys.argv[sys.argv.index("--fail") + 1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)
    for step, (x,) in enumerate(data, start=1):
        if step == 3 and rank == 1:
            if mode == "raise":
                raise RuntimeError("rank 1 lost its data shard")
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "hang":
                time.sleep(600)
            if mode == "term":  # rank 0 is busy in Python when torchrun stops it
                raise RuntimeError("rank 1 lost its data shard")
        if step == 3 and rank == 0 and mode == "term":
            time.sleep(60)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # DDP all-reduce: rank 0 waits here for rank 1
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
