"""How long after the debounce does the editor server publish diagnostics for a large file?

A ``traindoctor server`` subprocess is driven by a real LSP client (pygls's, over JSON-RPC on
stdio, the one the server tests use): a 5,000-line training module is opened, then edited 50
times the way typing does (one small incremental change at a time, each followed by a pause until
its diagnostics arrive). For each edit the time from sending the change to receiving the
diagnostics for that version is measured; the debounce is subtracted, so what is reported is what
the server itself adds: the check of the whole file, the conversion, the transport. The server's
own log line for the check ("N findings in X ms") gives the check alone.

The file is generated (deterministic): a training script (model, optimizer, loader, AMP, an epoch
loop, checkpointing) followed by the kind of code a large training module holds: model blocks,
datasets, metrics, configuration classes and helpers. ``--file`` benchmarks a file of yours
instead (it is opened, not changed on disk).

    python benchmarks/lsp_latency.py [--edits 50] [--lines 5000] [--debounce-ms 250] [--file F] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "server"))  # the LSP client session the server tests use

from lsp_session import Session  # noqa: E402

TARGET_MS = 150.0

HEAD = '''"""Train a classifier (a large module, as real projects grow them)."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast
from torch.utils.data import DataLoader, Dataset

ACCUM = 4
BATCH = 64
'''

TRAIN = """

def train(epochs: int = 10) -> None:
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scaler = GradScaler()
    loader = DataLoader(Images1(1024), batch_size=BATCH, shuffle=True, num_workers=4)
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            x, y = x.cuda(), y.cuda()
            with autocast():
                loss = nn.functional.cross_entropy(model(x), y) / ACCUM
            scaler.scale(loss).backward()
            if (step + 1) % ACCUM == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        torch.save({"model": model.state_dict(), "epoch": epoch}, "last.pt")


if __name__ == "__main__":
    train()
"""

BLOCKS = (
    '''

class Block{i}(nn.Module):
    """Residual block {i}."""

    def __init__(self, width: int = 64, dropout: float = 0.1) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width * 4)
        self.fc2 = nn.Linear(width * 4, width)
        self.norm = nn.LayerNorm(width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(self.drop(torch.relu(self.fc1(self.norm(x)))))
        return x + y
''',
    '''

class Images{i}(Dataset):
    """Synthetic images, set {i}."""

    def __init__(self, size: int, seed: int = {i}) -> None:
        self.size = size
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        image = torch.rand(3, 32, 32, generator=self.generator)
        return image, index % 10
''',
    '''

@dataclass
class Config{i}:
    """Settings of experiment {i}."""

    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = {i}
    max_steps: int = 10_000
    label_smoothing: float = 0.1

    def schedule(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / max(self.warmup_steps, 1)
        progress = (step - self.warmup_steps) / max(self.max_steps - self.warmup_steps, 1)
        return self.lr * 0.5 * (1 + math.cos(math.pi * progress))
''',
    '''

def accuracy_{i}(logits: torch.Tensor, labels: torch.Tensor, k: int = 1) -> float:
    """Top-{{k}} accuracy (metric set {i})."""
    top = logits.topk(k, dim=-1).indices
    hits = (top == labels.unsqueeze(-1)).any(dim=-1)
    return hits.float().mean().item()


def mean_{i}(values: list[float]) -> float:
    total = 0.0
    count = 0
    for value in values:
        total += value
        count += 1
    return total / max(count, 1)
''',
)


def generate(lines: int) -> str:
    """A training module of about ``lines`` lines (the training script comes last)."""
    parts = [HEAD]
    i = 0
    while sum(p.count("\n") for p in parts) + TRAIN.count("\n") < lines:
        parts.append(BLOCKS[i % len(BLOCKS)].format(i=i))
        i += 1
    parts.append(TRAIN)
    return "".join(parts)


def edit_at(text: str, n: int) -> types.TextEdit:
    """The ``n``-th keystroke: retype a digit of a number somewhere in the file (spread over it)."""
    numbers = list(re.finditer(r"(?<![\w.])\d+(?![\w.])", text))
    match = numbers[(n * 7919) % len(numbers)]
    line = text.count("\n", 0, match.start())
    column = match.start() - (text.rfind("\n", 0, match.start()) + 1)
    start = types.Position(line=line, character=column)
    end = types.Position(line=line, character=column + 1)
    return types.TextEdit(range=types.Range(start=start, end=end), new_text=str((int(match.group()[0]) + 1) % 10))


def retype(text: str, edit: types.TextEdit) -> str:
    """``text`` after :func:`edit_at`'s one-character change."""
    lines = text.splitlines(keepends=True)
    offset = sum(len(line) for line in lines[: edit.range.start.line]) + edit.range.start.character
    return text[:offset] + edit.new_text + text[offset + 1 :]


async def measure(path: Path, text: str, edits: int, debounce_ms: int) -> dict:
    async with Session(path.parent, debounce_ms=debounce_ms) as session:
        doc = session.open(path, text)
        opened = await session.diagnostics(doc, version=1, timeout=120)
        latencies, checks, cpu = [], [], []
        for n in range(edits):
            edit = edit_at(text, n)
            text = retype(text, edit)
            logs = len(session.logs)
            sent = time.perf_counter()
            version = session.edit(doc, edit)
            await session.diagnostics(doc, version=version, timeout=120)
            arrived = session.published[doc][-1][0]
            latencies.append(1000 * (arrived - sent) - debounce_ms)
            check = next((m for m in reversed(session.logs[logs:]) if m.startswith(doc)), "")
            found = re.search(r"in (\d+) ms \((\d+) ms CPU\)$", check)
            if found:
                checks.append(float(found.group(1)))
                cpu.append(float(found.group(2)))
    return {"findings_at_open": len(opened), "latency_ms": latencies, "check_ms": checks, "check_cpu_ms": cpu}


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--debounce-ms", type=int, default=250)
    parser.add_argument("--file", type=Path, help="benchmark this file instead of the generated one")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="traindoctor-lsp-") as scratch:
        if args.file:
            path, text = args.file.resolve(), args.file.read_text(encoding="utf-8")
        else:
            path, text = Path(scratch) / "train_large.py", generate(args.lines)
            (Path(scratch) / "pyproject.toml").write_text("[tool.traindoctor]\n")
            path.write_text(text)
        result = asyncio.run(measure(path, text, args.edits, args.debounce_ms))
    latency, check = summary(result["latency_ms"]), summary(result["check_ms"] or [0.0])
    cpu = summary(result["check_cpu_ms"] or [0.0])
    over = sum(v > TARGET_MS for v in result["latency_ms"])
    print(f"file: {path.name}, {text.count(chr(10))} lines, {result['findings_at_open']} findings; {args.edits} edits")
    print(
        f"diagnostics after the debounce ({args.debounce_ms} ms), ms: "
        + ", ".join(f"{k} {v:.0f}" for k, v in latency.items())
    )
    print("the check alone (server log), ms: " + ", ".join(f"{k} {v:.0f}" for k, v in check.items()))
    print("its CPU time on the check thread, ms: " + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()))
    print(f"edits over {TARGET_MS:.0f} ms: {over} of {args.edits}")
    if args.json:
        summaries = {"latency": latency, "check": check, "check_cpu": cpu}
        args.json.write_text(json.dumps({**result, **summaries}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
