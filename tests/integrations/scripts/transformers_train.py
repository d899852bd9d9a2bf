"""A tiny Hugging Face Trainer run with seeded mistakes (``--mistakes``) or none (its healthy twin).

Used by tests/integrations: run it under ``traindoctor run`` or with ``--callback`` (plain
``python``, traindoctor's ``DoctorCallback`` added to the Trainer). The model is a one-layer BERT
built from a config (no download), CPU, synthetic tokens, seconds.

Seeded mistakes (each a switch in ``--mistakes``, comma-separated):
  decay   the user's own AdamW over ``model.parameters()``: decay on biases and LayerNorm (TD204)
  save    a user TrainerCallback saving ``model.state_dict()`` alone every epoch (TD501)
  slow    a slow map-style dataset read with ``dataloader_num_workers=0`` (TD102)
The healthy twin uses the Trainer's own optimizer (it keeps biases and LayerNorm out of weight
decay), the Trainer's checkpoints every epoch and evaluation every epoch: nothing to report.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments


class Tokens(Dataset):
    def __init__(self, n, delay=0.0):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 12), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        self.delay = delay

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long), "labels": self.labels[i]}


class SaveWeights(TrainerCallback):
    def __init__(self, out):
        self.out = out

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        torch.save(model.state_dict(), os.path.join(self.out, "weights.pt"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mistakes", default="", help="comma-separated: decay,save,slow")
    parser.add_argument("--callback", action="store_true", help="watch with traindoctor's DoctorCallback")
    parser.add_argument("--report", default=None, help="with --callback: write the JSON report here")
    parser.add_argument("--out", default=".")
    parser.add_argument("--gpu", action="store_true", help="train on CUDA with fp16 (accelerate's GradScaler)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--data-ms", type=float, default=25.0, help="'slow': ms to load one sample")
    args = parser.parse_args()
    mistakes = [m for m in args.mistakes.split(",") if m]
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    optimizers = (None, None)
    if "decay" in mistakes:
        optimizers = (torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1), None)
    callbacks = [SaveWeights(args.out)] if "save" in mistakes else []
    if args.callback:
        from traindoctor.integrations.transformers import DoctorCallback

        callbacks.append(DoctorCallback(report=args.report))
    training_args = TrainingArguments(
        output_dir=os.path.join(args.out, "hf"),
        num_train_epochs=args.epochs,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=1e-3,
        weight_decay=0.1,
        eval_strategy="no" if mistakes else "epoch",
        save_strategy="no" if mistakes else "epoch",
        logging_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        use_cpu=not args.gpu,
        fp16=args.gpu,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=Tokens(args.samples, delay=args.data_ms / 1000 if "slow" in mistakes else 0.0),
        eval_dataset=Tokens(32),
        optimizers=optimizers,
        callbacks=callbacks,
    )
    result = trainer.train()
    print("final train_loss", result.training_loss)


if __name__ == "__main__":
    sys.exit(main())
