"""The pure helpers of the scaling benchmarks: the seed finders of ``seed_finders.py`` on a tiny
project tree, the edits they make, how ``seeded_mistakes.py`` scores a seed, and the deal of
``real_repos.py`` into halves."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import real_repos  # noqa: E402
import seed_finders  # noqa: E402
import seeded_mistakes  # noqa: E402
from seed_syntax import parse_modules  # noqa: E402

DATA = """\
import torch
from torch.utils.data import DataLoader


def build_loaders(train_set, val_set, workers):
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=workers, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=64, shuffle=False, num_workers=workers, pin_memory=True)
    return train_loader, val_loader


if __name__ == "__main__":
    demo = DataLoader(train_set, batch_size=2, shuffle=True, num_workers=2)
"""

TRAIN = """\
import torch
from data import build_loaders
from model import Net


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            model(x.cuda())


def main():
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader, val_loader = build_loaders(None, None, 4)
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            loss = model(x.cuda()).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        evaluate(model, val_loader)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
        if acc > best:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "best.pt")
"""

MODEL = """\
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
"""


@pytest.fixture
def project(tmp_path: Path) -> seed_finders.Project:
    for name, source in {"data.py": DATA, "train.py": TRAIN, "model.py": MODEL}.items():
        (tmp_path / name).write_text(source)
    return seed_finders.Project(parse_modules(tmp_path, ["data.py", "train.py", "model.py"]))


def by_kind(project: seed_finders.Project) -> dict[str, list[seed_finders.Seed]]:
    out: dict[str, list[seed_finders.Seed]] = {}
    for found in seed_finders.find_seeds(project):
        out.setdefault(found.kind, []).append(found)
    return out


def test_loader_seeds_are_training_loaders_built_in_a_helper_module(project):
    seeds = by_kind(project)
    pins = seeds["pin-memory-removed"]
    # the training loader only: not the validation loader, not the __main__ demo of the data module
    assert [(s.file, s.line, s.scope) for s in pins] == [("data.py", 6, "cross-file")]
    workers = seeds["num-workers-zero"]
    assert [(s.file, s.line) for s in workers] == [("data.py", 6)]


def test_edit_keeps_line_numbers_and_parses(project):
    (pin,) = by_kind(project)["pin-memory-removed"]
    source = DATA.encode()
    edited = pin.edit.apply(source).decode()
    assert edited.count("\n") == DATA.count("\n")
    ast.parse(edited)
    line = edited.splitlines()[5]
    assert "pin_memory" not in line and "num_workers=workers" in line
    assert "pin_memory=True" in edited.splitlines()[6]  # the validation loader keeps it


def test_checkpoint_seed_skips_best_model_export(project):
    saved = by_kind(project)["optimizer-not-saved"]
    assert [(s.file, s.line, s.scope) for s in saved] == [("train.py", 25, "single-file")]
    edited = saved[0].edit.apply(TRAIN.encode()).decode().splitlines()
    assert edited[24].strip() == 'torch.save({"model": model.state_dict()}, "last.pt")'


def test_eval_seeds_cross_file_when_batchnorm_lives_in_the_model_module(project):
    seeds = by_kind(project)
    (eval_mode,) = seeds["eval-mode-removed"]
    assert (eval_mode.file, eval_mode.line, eval_mode.scope) == ("train.py", 7, "cross-file")
    (no_grad,) = seeds["no-grad-removed"]
    assert no_grad.line == 8
    assert no_grad.edit.apply(TRAIN.encode()).decode().splitlines()[7] == "    if True:"


def test_cudnn_seed_needs_a_training_script(project, tmp_path: Path):
    assert "cudnn-benchmark-removed" not in by_kind(project)
    (tmp_path / "train.py").write_text("import torch\ntorch.backends.cudnn.benchmark = True\n" + TRAIN)
    (tmp_path / "eval.py").write_text("import torch\nfrom model import Net\ntorch.backends.cudnn.benchmark = True\n")
    paths = ["data.py", "train.py", "model.py", "eval.py"]
    seeds = by_kind(seed_finders.Project(parse_modules(tmp_path, paths)))["cudnn-benchmark-removed"]
    assert [(s.file, s.line, s.scope) for s in seeds] == [("train.py", 2, "cross-file")]


def finding(code: str, filename: str, row: int, related: tuple[str, int] | None = None) -> dict:
    out = {"code": code, "filename": filename, "location": {"row": row, "column": 1}}
    if related:
        out["related"] = [{"filename": related[0], "location": {"row": related[1], "column": 1}}]
    return out


def test_score_outcomes(project):
    (pin,) = by_kind(project)["pin-memory-removed"]
    score = seeded_mistakes.score
    assert score(pin, [], [finding("TD101", "data.py", 6)]) == "found"
    assert score(pin, [], [finding("TD101", "train.py", 19, related=("data.py", 6))]) == "found"
    assert score(pin, [], [finding("TD101", "train.py", 19)]) == "elsewhere"
    assert score(pin, [finding("TD101", "train.py", 19)], [finding("TD101", "train.py", 19)]) == "missed"
    assert score(pin, [], [finding("TD102", "data.py", 6)]) == "missed"
    assert score(pin, [finding("TD101", "data.py", 6)], [finding("TD101", "data.py", 6)]) == "not-scored"


def test_halves_split_every_kind_evenly():
    rows = [(f"o/r{i}", kind) for i, kind in enumerate(["a"] * 4 + ["b"] * 6 + ["c"] * 2)]
    halves = real_repos.assign_halves(rows)
    for kind in "abc":
        dealt = [halves[name] for name, k in rows if k == kind]
        assert dealt.count("tune") == dealt.count("heldout")
    assert halves == real_repos.assign_halves(list(reversed(rows)))  # the order of the list does not matter


def test_committed_split_is_the_deal_and_avoids_reserved_repositories():
    repos = real_repos.read_repos()
    assert len(repos) >= 40
    first = [r for r in repos if r.round == 1]
    # round 1 was dealt evenly; its held-out half is spent and tuned on since round 4
    dealt = real_repos.assign_halves((r.name, r.kind) for r in first)
    assert sorted(dealt.values()).count("heldout") == len(first) // 2
    assert all(r.half == "tune" for r in first)
    # the latest round is the held-out half; earlier later rounds, once spent, are tuned on
    latest = max(r.round for r in repos)
    held = [r for r in repos if r.round == latest]
    assert latest > 1 and len(held) >= 30 and all(r.half == "heldout" for r in held)
    assert all(r.half == "tune" for r in repos if r.round < latest)
    assert len({r.name.lower() for r in repos}) == len(repos)  # no repository in two rounds
    shared = BENCHMARKS.parents[1] / "shared" / "corpus" / "reserved-repos.txt"
    if shared.exists():
        reserved = {line.strip().lower() for line in shared.read_text().splitlines() if "/" in line}
        assert not reserved & {r.name.lower() for r in repos}


def test_summary_counts_recall_per_half_scope_and_kind():
    rows = [
        {"half": "tune", "scope": "single-file", "kind": "k", "outcome": "found"},
        {"half": "tune", "scope": "single-file", "kind": "k", "outcome": "missed"},
        {"half": "tune", "scope": "cross-file", "kind": "k", "outcome": "not-scored"},
        {"half": "tune", "scope": "cross-file", "kind": "k", "outcome": "elsewhere"},
    ]
    summary = seeded_mistakes.summarise(rows)
    assert summary["tune/single-file/k"]["recall"] == 0.5
    assert summary["tune/cross-file/*"] == {
        "found": 0,
        "elsewhere": 1,
        "missed": 0,
        "not-scored": 1,
        "scored": 1,
        "recall": 0.0,
    }
    assert summary["tune/*/*"]["scored"] == 3


CACHE = """\
import torch
from torch.utils.data import DataLoader


def main(train_set):
    data_loader_train = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)
    for x, y in data_loader_train:
        torch.save(x, "features.pt")
"""

AMP = """\
import torch


def step(model, optimizer, scaler, x, clip):
    loss = model(x)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()


def step_logged(model, optimizer, scaler, x):
    loss = model(x)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = commons.clip_grad_value_(model.parameters(), None)
    scaler.step(optimizer)
    scaler.update()
"""


def test_no_loader_seed_in_a_script_that_never_trains(tmp_path: Path):
    (tmp_path / "cache.py").write_text(CACHE)
    (tmp_path / "data.py").write_text(DATA)
    seeds = seed_finders.find_seeds(seed_finders.Project(parse_modules(tmp_path, ["cache.py", "data.py"])))
    # nothing here trains: neither the caching script's loader nor the helper's is seeded
    assert [s for s in seeds if s.kind in ("pin-memory-removed", "num-workers-zero")] == []


def test_unscale_seed_only_before_torch_clipping_with_a_limit(tmp_path: Path):
    (tmp_path / "amp.py").write_text(AMP)
    seeds = seed_finders.find_seeds(seed_finders.Project(parse_modules(tmp_path, ["amp.py"])))
    assert [(s.kind, s.line) for s in seeds if s.kind == "unscale-removed"] == [("unscale-removed", 7)]
