"""Parallel checking gives the serial output; the cache serves unchanged files and knows when not to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traindoctor.check.engine as engine
import traindoctor.check.runner as runner
from traindoctor.check.cache import Cache
from traindoctor.check.runner import CheckOptions, check_many
from traindoctor.cli import main
from traindoctor.config import Settings

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
NOTEBOOK = json.dumps(
    {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": 1,
                "source": ["import torch\n", "with torch.cuda.amp.autocast():\n", "    pass\n"],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    },
    indent=1,
)


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--min-torch-version", "2.13", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path):
    for i in range(6):
        write(tmp_path, f"pkg/m{i}.py", DEPRECATED * (i % 3 + 1))
    write(tmp_path, "pkg/broken.py", "def f(:\n")
    write(tmp_path, "nb.ipynb", NOTEBOOK)
    write(tmp_path, "z/clean.py", "x = 1\n")
    return tmp_path


@pytest.fixture
def counted(monkeypatch):
    """Count the files actually checked (in-process: --jobs 1)."""
    calls: list[str] = []
    real = runner._check_guarded

    def counting(filename, *args, **kwargs):
        calls.append(Path(filename).name)
        return real(filename, *args, **kwargs)

    monkeypatch.setattr(runner, "_check_guarded", counting)
    return calls


@pytest.fixture
def cache_on(monkeypatch, tmp_path):
    monkeypatch.delenv("TRAINDOCTOR_NO_CACHE", raising=False)
    monkeypatch.delenv("TRAINDOCTOR_CACHE_DIR", raising=False)
    return tmp_path / "cache"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_parallel_output_is_identical_to_serial(project, capsys, fmt):
    serial = run(capsys, "--no-cache", "--jobs", "1", "--output-format", fmt, str(project))
    parallel = run(capsys, "--no-cache", "--jobs", "2", "--output-format", fmt, str(project))
    assert serial[0] == 1 and "TD304" in serial[1] and "TD000" in serial[1]
    assert parallel == serial


def test_parallel_pool_really_runs_and_keeps_input_order(project):
    items = [(str(p), p.read_bytes()) for p in sorted(project.rglob("*.py"))]
    settings = Settings(min_torch_version="2.13")
    serial = check_many(items, settings, CheckOptions(jobs=1))
    parallel = check_many(items, settings, CheckOptions(jobs=2))
    assert [o.filename for o in parallel] == [name for name, _ in items]
    assert [o.findings for o in parallel] == [o.findings for o in serial]


def test_parallel_fix_matches_serial_fix(project, tmp_path_factory, capsys):
    import shutil

    other = tmp_path_factory.mktemp("copy") / "project"
    shutil.copytree(project, other)
    assert run(capsys, "--fix", "--jobs", "1", str(project))[0] == 1  # TD000 remains
    assert run(capsys, "--fix", "--jobs", "2", str(other))[0] == 1
    for path in project.rglob("*.*"):
        if path.is_file():
            assert path.read_bytes() == (other / path.relative_to(project)).read_bytes()
    assert "torch.amp.GradScaler" in (project / "pkg/m0.py").read_text()


def test_unchanged_rerun_is_served_from_the_cache(project, capsys, counted, cache_on):
    first = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project))
    assert len(counted) == 9
    assert (cache_on / ".gitignore").read_text().strip().endswith("*")
    counted.clear()
    second = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project))
    assert counted == [] and second == first
    # JSON too: every field (fix edits, cell, source line) survives the cache.
    counted.clear()
    cold = run(capsys, "--no-cache", "--jobs", "1", "--output-format", "json", str(project))
    warm = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), "--output-format", "json", str(project))
    assert warm == cold


def test_cache_misses_when_the_file_or_the_settings_change(project, capsys, counted, cache_on):
    run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project))
    counted.clear()
    (project / "pkg/m0.py").write_text(DEPRECATED + "y = 2\n")
    run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project))
    assert counted == ["m0.py"]
    counted.clear()
    code, out, _ = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), "--ignore", "TD304", str(project))
    assert len(counted) == 9 and "TD304" not in out
    counted.clear()
    run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), "--min-torch-version", "2.0", str(project))
    assert len(counted) == 9


def test_cache_revalidates_project_dependencies(tmp_path, capsys, counted, cache_on, monkeypatch):
    """A file's entry holds the content hashes of the project files its analysis read."""
    dep = write(tmp_path, "models.py", "class Net: pass\n")
    write(tmp_path, "train.py", DEPRECATED)

    class ContextWithDeps(engine.FileContext):
        @property
        def project_dependencies(self) -> tuple[str, ...]:
            return (str(dep.resolve()),) if self.filename.endswith("train.py") else ()

    monkeypatch.setattr(engine, "FileContext", ContextWithDeps)
    target = str(tmp_path / "train.py")
    first = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), target)
    assert counted == ["train.py"]
    entry = json.loads(next(cache_on.glob("entries/*.json")).read_text())["files"][str(Path(target).resolve())]
    assert list(entry["deps"]) == [str(dep.resolve())]
    counted.clear()
    assert run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), target) == first
    assert counted == []
    dep.write_text("class Net: pass\nclass Other: pass\n")
    assert run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), target) == first
    assert counted == ["train.py"]
    counted.clear()
    dep.unlink()
    run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), target)
    assert counted == ["train.py"]


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[]", b'{"format": 1, "files": {"x": 3}}', b"\xff\x00"])
def test_corrupt_cache_is_ignored_and_rebuilt(project, capsys, counted, cache_on, garbage):
    expected = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project))
    (cache_file,) = cache_on.glob("entries/*.json")
    cache_file.write_bytes(garbage)
    counted.clear()
    assert run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project)) == expected
    assert len(counted) == 9
    assert json.loads(cache_file.read_text())["format"] == 1  # rebuilt


def test_cache_entries_naming_foreign_classes_are_misses(project, capsys, counted, cache_on):
    expected = run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project))
    (cache_file,) = cache_on.glob("entries/*.json")
    data = json.loads(cache_file.read_text())
    for entry in data["files"].values():
        entry["findings"] = [{"__dc__": "os:system", "fields": {"command": "echo pwned"}}]
    cache_file.write_text(json.dumps(data))
    counted.clear()
    assert run(capsys, "--jobs", "1", "--cache-dir", str(cache_on), str(project)) == expected
    assert len(counted) == 9


def test_cache_lookup_rejects_non_string_dependencies(tmp_path):
    cache = Cache(tmp_path, "k")
    cache.entries["/x.py"] = {"hash": "h", "deps": {"0": "a"}, "findings": []}
    assert cache.lookup("/x.py", "h", "x.py") is None
    cache.entries["/x.py"] = {"hash": "h", "deps": {}, "findings": []}
    assert cache.lookup("/x.py", "h", "x.py") == []


def test_no_cache_writes_nothing_and_default_location_is_the_project_root(project, capsys, cache_on, monkeypatch):
    write(project, "pyproject.toml", "[tool.traindoctor]\n")
    run(capsys, "--no-cache", str(project))
    assert not (project / ".traindoctor_cache").exists()
    monkeypatch.setenv("TRAINDOCTOR_NO_CACHE", "1")
    run(capsys, str(project))
    assert not (project / ".traindoctor_cache").exists()
    monkeypatch.delenv("TRAINDOCTOR_NO_CACHE")
    run(capsys, str(project))
    assert (project / ".traindoctor_cache" / "CACHEDIR.TAG").is_file()
    # The cache folder is never scanned, even with a .py file in it.
    write(project, ".traindoctor_cache/stray.py", "def f(:\n")
    code, out, _ = run(capsys, "--output-format", "json", str(project))
    assert not any(".traindoctor_cache" in d["filename"] for d in json.loads(out))


def test_configured_cache_dir(project, capsys, cache_on):
    write(project, "pyproject.toml", '[tool.traindoctor]\ncache-dir = "build/td-cache"\n')
    run(capsys, str(project))
    assert list((project / "build" / "td-cache").glob("entries/*.json"))
    write(project, "pyproject.toml", "[tool.traindoctor]\ncache-dir = 3\n")
    code, _, err = run(capsys, str(project))
    assert code == 2 and "cache-dir must be a path" in err


def test_unwritable_cache_folder_is_skipped_silently(project, capsys, cache_on):
    blocker = project / "not-a-folder"
    blocker.write_text("")
    code, out, err = run(capsys, "--cache-dir", str(blocker / "cache"), str(project))
    assert code == 1 and err == "" and "TD304" in out


def test_bad_jobs_is_a_usage_error(project, capsys):
    code, _, err = run(capsys, "--jobs", "-1", str(project))
    assert code == 2 and "--jobs" in err


def test_no_worker_processes_falls_back_to_in_process(project, capsys, monkeypatch):
    expected = run(capsys, "--no-cache", "--jobs", "1", str(project))

    def no_processes(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(runner, "_parallel", no_processes)
    assert run(capsys, "--no-cache", "--jobs", "2", str(project)) == expected


@pytest.mark.parametrize("extra", [[], ["--cpu-time"]])
def test_speed_benchmark_reports_all_rows_and_agrees_with_itself(project, extra):
    """benchmarks/lint_speed.py on a tiny corpus: the three checker rows, identical findings."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "lint_speed.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(project / "pkg"), "--repeat", "1", "--jobs", "2", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ("timed by CPU time" in proc.stdout) == bool(extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in (
        "`ast.parse` alone",
        "`traindoctor check --jobs 1`",
        "`traindoctor check` (2 jobs)",
        "`traindoctor check`, cached re-run",
    ):
        assert row in proc.stdout
    assert "findings: 13;" in proc.stdout and "MISMATCH" not in proc.stdout


PROJECT_UTILS = """
import torchvision
from torch.utils.data import DataLoader


def get_training_dataloader(batch_size=16, num_workers=2):
    training = torchvision.datasets.CIFAR100(root="./data", train=True)
    return DataLoader(training, shuffle=True, num_workers=num_workers, batch_size=batch_size)
"""

PROJECT_TRAIN = """
import torch
from utils import get_training_dataloader


def train(epoch):
    net.train()
    for images, labels in training_loader:
        images, labels = images.cuda(), labels.cuda()
        optimizer.zero_grad()
        loss_function(net(images), labels).backward()
        optimizer.step()


if __name__ == "__main__":
    net = torch.nn.Linear(3, 100).cuda()
    loss_function = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    training_loader = get_training_dataloader(num_workers=4, batch_size=128)
    for epoch in range(1, 200):
        train(epoch)
"""


@pytest.mark.skipif(
    not hasattr(engine.FileContext, "project_dependencies"),
    reason="needs the project context (FileContext.project_dependencies)",
)
def test_cache_follows_a_real_imported_project_module(tmp_path, capsys, counted, cache_on):
    """With the project context on, the loader factory in utils.py decides train.py's TD101."""
    write(tmp_path, "utils.py", PROJECT_UTILS)
    train = write(tmp_path, "train.py", PROJECT_TRAIN)
    argv = ("--jobs", "1", "--cache-dir", str(cache_on), "--select", "TD101", "--output-format", "json", str(train))
    first = run(capsys, *argv)
    assert [d["code"] for d in json.loads(first[1])] == ["TD101"]
    assert json.loads(first[1])[0]["related"][0]["filename"].endswith("utils.py")
    counted.clear()
    assert run(capsys, *argv) == first and counted == []  # related locations survive the cache
    # utils.py now pins memory: train.py is unchanged but its finding must go.
    write(
        tmp_path, "utils.py", PROJECT_UTILS.replace("batch_size=batch_size)", "batch_size=batch_size, pin_memory=True)")
    )
    code, out, _ = run(capsys, *argv)
    assert counted == ["train.py"] and json.loads(out) == []


@pytest.mark.parametrize(
    ("total", "cores", "load", "jobs"),
    [
        (10_000, 8, 0.0, 1),  # a small run stays in-process
        (10**7, 1, 0.0, 1),
        (10**7, 2, 0.2, 2),  # a quiet machine: every core
        (10**7, 2, 0.8, 1),  # another program holds most of a core: in-process
        (10**7, 2, 6.0, 1),
        (10**7, 8, 2.3, 6),  # the cores other programs leave idle
        (10**7, 8, None, 8),  # no load average on this platform
    ],
)
def test_automatic_jobs_are_the_idle_cores(total, cores, load, jobs):
    assert runner.automatic_jobs(total, cores=cores, load=load) == jobs


def test_default_jobs_follow_the_load(project, monkeypatch):
    """The default starts workers only where cores are idle; the output is the same either way."""
    items = [(str(p), p.read_bytes()) for p in sorted(project.rglob("*.py"))]
    settings = Settings(min_torch_version="2.13")
    used: list[int] = []
    real = runner._parallel

    def spy(tasks, settings, options, jobs):
        used.append(jobs)
        return real(tasks, settings, options, jobs)

    monkeypatch.setattr(runner, "_parallel", spy)
    monkeypatch.setattr(runner, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(runner, "usable_cores", lambda: 2)
    monkeypatch.setattr(runner, "load_average", lambda: 1.9)
    busy = check_many(items, settings)
    assert used == []  # in-process
    monkeypatch.setattr(runner, "load_average", lambda: 0.1)
    quiet = check_many(items, settings)
    assert used == [2]
    assert [o.findings for o in quiet] == [o.findings for o in busy]


def test_collector_is_paused_while_checking_and_restored_after(project, monkeypatch):
    """Checking in-process pauses the cyclic garbage collector (a full collection every
    COLLECT_EVERY files) and leaves it as it found it, findings unchanged."""
    import gc

    seen: list[bool] = []
    collected: list[int] = []
    real = runner._check_guarded

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "_check_guarded", recording)
    monkeypatch.setattr(runner, "COLLECT_EVERY", 3)
    monkeypatch.setattr(runner.gc, "collect", lambda *a: collected.append(1) or 0)
    items = [(str(p), p.read_bytes()) for p in sorted(project.rglob("*.py"))]
    settings = Settings(min_torch_version="2.13")
    assert gc.isenabled()
    paused = check_many(items, settings, CheckOptions(jobs=1))
    assert seen == [False] * len(items) and len(items) == 8
    assert gc.isenabled()
    assert len(collected) >= len(items) // 3 - 1
    gc.disable()
    try:
        check_many(items, settings, CheckOptions(jobs=1))
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()
    monkeypatch.setattr(runner, "_check_guarded", real)
    monkeypatch.setattr(runner, "paused_collector", _unpaused)
    unpaused = check_many(items, settings, CheckOptions(jobs=1))
    assert [[f.code for f in o.findings] for o in paused] == [[f.code for f in o.findings] for o in unpaused]
    assert sum(len(o.findings) for o in paused) == 13  # 12 deprecated calls and one TD000


def _unpaused():
    import contextlib

    return contextlib.nullcontext()
