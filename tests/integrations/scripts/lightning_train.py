"""A tiny Lightning run with seeded mistakes (``--mistakes``) or none (its healthy twin).

Used by tests/integrations: run it under ``traindoctor run`` or with ``--callback`` (plain
``python``, traindoctor's ``DoctorCallback`` added to the Trainer). CPU, synthetic data, seconds.

Seeded mistakes (each a switch in ``--mistakes``, comma-separated):
  decay   AdamW over ``self.parameters()``: weight decay on biases and LayerNorm gains (TD204)
  bn      BatchNorm with a per-forward batch of 4 under gradient accumulation (TD202)
  save    a weights-only ``torch.save`` of the model every epoch next to a live optimizer (TD501)
  slow    a slow map-style dataset read with ``num_workers=0`` (TD102)
The healthy twin uses two parameter groups, LayerNorm, Lightning's own ModelCheckpoint, and
float16 mixed precision through Lightning's precision plugin with its GradScaler and gradient
clipping (the plugin unscales before clipping): none of which may be reported.
"""

import argparse
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

if "--pytorch-lightning" in sys.argv:  # the older package name
    import pytorch_lightning as L
    from pytorch_lightning.callbacks import ModelCheckpoint
    from pytorch_lightning.plugins import MixedPrecision
else:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.plugins import MixedPrecision


class SlowDataset(Dataset):
    def __init__(self, x, y, delay):
        self.x, self.y, self.delay = x, y, delay

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.x[i], self.y[i]


class Net(L.LightningModule):
    def __init__(self, args):
        super().__init__()
        self.args = args
        norm = nn.BatchNorm1d(32) if "bn" in args.mistakes else nn.LayerNorm(32)
        self.net = nn.Sequential(nn.Linear(16, 32), norm, nn.ReLU(), nn.Linear(32, 2))
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(args.samples, 16, generator=g)
        self.y = torch.randint(0, 2, (args.samples,), generator=g)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        if self.global_step == self.args.raise_at_step:
            raise RuntimeError(f"seeded failure at step {self.global_step}")
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        if "decay" in self.args.mistakes:
            return torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.1)
        decay, no_decay = [], []
        for module in self.modules():
            for name, p in module.named_parameters(recurse=False):
                is_norm = isinstance(module, (nn.LayerNorm, nn.BatchNorm1d))
                (no_decay if is_norm or name == "bias" else decay).append(p)
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
        )

    def train_dataloader(self):
        batch = 4 if "bn" in self.args.mistakes else 16
        data = (
            SlowDataset(self.x, self.y, self.args.data_ms / 1000)
            if "slow" in self.args.mistakes
            else TensorDataset(self.x, self.y)
        )
        return DataLoader(data, batch_size=batch, shuffle=True, num_workers=0, pin_memory=self.args.gpu)

    def val_dataloader(self):
        return DataLoader(TensorDataset(self.x[:32], self.y[:32]), batch_size=16)

    def on_train_epoch_end(self):
        if "save" in self.args.mistakes:
            torch.save(self.state_dict(), os.path.join(self.args.out, "weights.pt"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mistakes", default="", help="comma-separated: decay,bn,save,slow")
    parser.add_argument("--callback", action="store_true", help="watch with traindoctor's DoctorCallback")
    parser.add_argument("--report", default=None, help="with --callback: write the JSON report here")
    parser.add_argument("--out", default=".")
    parser.add_argument("--gpu", action="store_true", help="train on CUDA with Lightning's own 16-mixed")
    parser.add_argument("--pytorch-lightning", action="store_true", help="use the pytorch_lightning package")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--raise-at-step", type=int, default=-1, help="raise inside training_step at this step")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--data-ms", type=float, default=25.0, help="'slow': ms to load one sample")
    args = parser.parse_args()
    args.mistakes = [m for m in args.mistakes.split(",") if m]
    torch.manual_seed(0)
    callbacks, plugins = [], []
    if not args.mistakes and not args.gpu:
        # Lightning refuses precision="16-mixed" on CPU; its plugin with a CPU GradScaler runs it.
        plugins.append(MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu")))
        callbacks.append(
            ModelCheckpoint(dirpath=os.path.join(args.out, "ckpt"), save_last=True, every_n_epochs=1, save_top_k=-1)
        )
    if args.callback:
        from traindoctor.integrations.lightning import DoctorCallback

        callbacks.append(DoctorCallback(report=args.report))
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="gpu" if args.gpu else "cpu",
        precision="16-mixed" if args.gpu and not args.mistakes else None,
        devices=1,
        plugins=plugins,
        gradient_clip_val=None if args.mistakes else 1.0,
        accumulate_grad_batches=4 if "bn" in args.mistakes else 1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=not args.mistakes,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    trainer.fit(Net(args))
    print("final train_loss", float(trainer.callback_metrics["train_loss"]))


if __name__ == "__main__":
    sys.exit(main())
