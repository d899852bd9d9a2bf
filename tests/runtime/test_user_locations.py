"""The user's line wherever the file lives (issue 9): user code is told from library code by where
modules live (installed packages, the standard library, the real traindoctor/torch folders),
never by words in a path; torch warnings keep the user's line; sites carry the call's column."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import traindoctor
from traindoctor.doctor.cli import main
from traindoctor.runtime.live import is_library_file

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import time
    import torch
    from torch import nn
    torch.set_num_threads(1)  # a loaded shared machine: no intra-op thread hand-offs
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 24
        def __getitem__(self, i):
            time.sleep(0.003)
            return torch.ones(4) * i, torch.zeros(1)

    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)  # OPTIMIZER
    for x, y in DataLoader(Slow(), batch_size=4):  # LOADER
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            score = model(x)  # EVAL
    """
)


def _where(marker: str, call: str) -> tuple[int, int]:
    for row, line in enumerate(SCRIPT.splitlines(), 1):
        if marker in line:
            return row, line.index(call) + 1
    raise AssertionError(marker)


def _sites(report: dict) -> dict[str, tuple[str, int, int]]:
    return {
        f["code"]: (f["filename"], f["location"]["row"], f["location"]["column"])
        for f in report["findings"]
        if f.get("location")
    }


@pytest.fixture()
def _keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("_keep_threads")
@pytest.mark.parametrize("folder", ["torch", "traindoctor"])
def test_user_script_in_a_folder_named_like_a_library_keeps_its_locations(tmp_path: Path, folder: str) -> None:
    script = tmp_path / folder / "train.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    assert main(["--output-format", "json", "-o", str(out), "--select", "TD102,TD204,TD701", str(script)]) == 0
    sites = _sites(json.loads(out.read_text()))
    assert sites["TD102"] == (str(script), *_where("# LOADER", "DataLoader("))
    assert sites["TD204"] == (str(script), *_where("# OPTIMIZER", "torch.optim.AdamW("))
    assert sites["TD701"] == (str(script), *_where("# EVAL", "model(x)"))


def test_repository_cloned_into_a_folder_named_traindoctor(tmp_path: Path) -> None:
    """The package itself lives in .../traindoctor/src/traindoctor and the user's script in
    .../traindoctor/tests/: the script is still user code, the package is not."""
    repo = tmp_path / "traindoctor"
    shutil.copytree(
        ROOT / "src" / "traindoctor", repo / "src" / "traindoctor", ignore=shutil.ignore_patterns("__pycache__")
    )
    script = repo / "tests" / "train.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(repo / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traindoctor",
            "run",
            "--output-format",
            "json",
            "-o",
            str(out),
            "--select",
            "TD102,TD204,TD701",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    sites = _sites(json.loads(out.read_text()))
    name = "traindoctor/tests/train.py"  # relative to the folder the run started in, as check names it
    assert sites["TD102"] == (name, *_where("# LOADER", "DataLoader("))
    assert sites["TD204"] == (name, *_where("# OPTIMIZER", "torch.optim.AdamW("))
    assert sites["TD701"] == (name, *_where("# EVAL", "model(x)"))


def test_library_files_are_known_by_location_not_by_name(tmp_path: Path) -> None:
    assert is_library_file(torch.__file__)
    assert is_library_file(traindoctor.__file__)
    assert is_library_file(json.__file__)  # the standard library
    assert is_library_file("<frozen runpy>")
    for name in ("torch", "traindoctor", "site"):
        assert not is_library_file(str(tmp_path / name / "train.py"))
    assert not is_library_file(__file__)


def test_torch_warning_under_a_probe_keeps_the_users_line() -> None:
    with traindoctor.watch(select=[]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.amp.GradScaler("cuda")  # CPU machine: torch warns with stacklevel=2
            row = sys._getframe().f_lineno - 1
    (warning,) = [w for w in caught if "CUDA is not available" in str(w.message)]
    assert (warning.filename, warning.lineno) == (__file__, row)


def test_torch_warning_through_traindoctor_run(tmp_path: Path) -> None:
    script = tmp_path / "amp.py"
    script.write_text("import torch\nscaler = torch.amp.GradScaler('cuda')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-m", "traindoctor", "run", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{script}:2: UserWarning: torch.cuda.amp.GradScaler is enabled" in proc.stderr
    assert "probes" not in proc.stderr


def test_identical_scripts_in_two_folders_keep_their_own_file(tmp_path) -> None:
    """Call sites are cached per code object; equal code objects of two copies of one script
    (equal code compares equal whatever its filename) must not share a site."""
    from traindoctor.runtime.live import user_site

    source = "import sys\ndef where(get):\n    return get(1)\n"
    sites = []
    for name in ("a", "b"):
        path = tmp_path / name / "train.py"
        path.parent.mkdir()
        path.write_text(source)
        namespace: dict = {}
        exec(compile(source, str(path), "exec"), namespace)
        sites.append(namespace["where"](user_site))
    assert [s[0] for s in sites] == [str(tmp_path / "a" / "train.py"), str(tmp_path / "b" / "train.py")]
    assert sites[0][1] == sites[1][1] == 3
