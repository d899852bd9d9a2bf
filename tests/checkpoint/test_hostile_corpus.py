"""The hostile corpus (``hostile_corpus.py``) against ``ckpt inspect``, ``checkpoint.load`` and two scanners.

Every case is refused or flagged with the message it calls for, its canary (the file its payload
would create) never appears, and each run stays within 512 MiB of address space and 10 s of CPU
(``RLIMIT_AS``, ``RLIMIT_CPU`` on the child process; a wall clock kills a hang). Where picklescan
or fickling call a case dangerous, ``ckpt inspect`` must call it UNSAFE too.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hostile_corpus
import pytest

pytest.importorskip("torch")

MEMORY = 512 << 20
CPU_SECONDS = 10
#: A hang guard only: the limits above are the measure (the machine may be shared).
WALL_SECONDS = 60
EXIT = {"unsafe": 1, "refused": 2, "not-resumable": 1}
HERE = Path(__file__).parent
#: On a busy machine a resource case may reach the wall-clock limit before the one it aims at:
#: that refusal is a verdict too.
SLOW = r"|refused: reading took longer than \d+ s"
NAMES = [name for name, *_ in hostile_corpus.CASES]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, hostile_corpus.Case]:
    root = tmp_path_factory.mktemp("hostile")
    return {case.name: case for case in hostile_corpus.build(root)}


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def _inspect(target: str) -> tuple[int, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "traindoctor", "ckpt", "inspect", target],
        capture_output=True,
        text=True,
        timeout=WALL_SECONDS,
        preexec_fn=_limited,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def test_the_corpus_covers_every_group_and_protocol() -> None:
    groups = {group for _, group, *_ in hostile_corpus.CASES}
    assert groups == {"code", "paths", "resources"}
    assert {f"raw_pickle_protocol_{p}" for p in range(6)} <= set(NAMES)
    assert len(NAMES) == len(set(NAMES)) >= 50


@pytest.mark.parametrize("name", NAMES)
def test_inspect_refuses_or_flags_each_case_within_limits(corpus: dict[str, hostile_corpus.Case], name: str) -> None:
    case = corpus[name]
    code, output, _ = _inspect(case.target)
    assert not os.path.exists(case.canary), f"{name}: the payload ran"
    assert code == EXIT[case.expect], f"{name}: exit {code} (killed by a limit when negative)\n{output}"
    assert "Traceback" not in output, output
    expected = case.message + (SLOW if case.group == "resources" else "")
    assert re.search(expected, output), f"{name}: expected /{case.message}/ in\n{output}"
    if case.expect == "not-resumable":
        assert "resumable: model" not in output


def test_inspect_under_the_limits_is_not_a_vacuous_check(tmp_path: Path) -> None:
    """The limits let an honest checkpoint through (so a refusal above is the reader's verdict)."""
    import torch

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "ok.pt")
    code, output, _ = _inspect(str(tmp_path / "ok.pt"))
    assert "model weights: 2 tensors, 10 values" in output
    assert "not resumable" not in output and code == 1  # TD504: no RNG state, a finding (exit 1)


def test_load_refuses_every_case_naming_the_cause(corpus: dict[str, hostile_corpus.Case], tmp_path: Path) -> None:
    """``checkpoint.load`` on every case: DCP directories and single files alike are refused."""
    cases = list(corpus.values())
    listing = tmp_path / "cases.json"
    listing.write_text(json.dumps([{"name": c.name, "target": c.target} for c in cases]))
    out = tmp_path / "out.json"
    subprocess.run(
        [sys.executable, str(HERE / "corpus_load.py"), str(listing), str(out)],
        check=True,
        timeout=len(cases) * 40 + 120,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    )
    results: dict[str, dict[str, Any]] = json.loads(out.read_text())
    for case in cases:
        got = results[case.name]
        assert not os.path.exists(case.canary), f"{case.name}: the payload ran"
        if case.expect == "not-resumable" and got["outcome"] == "error":
            # read safely, then found not to be a checkpoint of traindoctor's
            assert got["type"] == "ValueError" and "not a traindoctor checkpoint" in got["message"], got
            continue
        assert got["outcome"] == "refused", f"{case.name}: {got}"
        if case.load or case.expect == "refused":
            expected = case.message + (SLOW if case.group == "resources" else "")
            assert re.search(expected, got["message"]), f"{case.name}: expected /{case.message}/ in {got}"
        elif case.expect == "unsafe":  # the refusal names the global
            assert "outside torch's weights_only allowlist" in got["message"], f"{case.name}: {got}"
        else:  # a file that is not a checkpoint, refused by a limit or by torch's own unpickler
            assert "refused" in got["message"], f"{case.name}: {got}"
        assert "EOFError" not in got["message"]


def _picklescan_flags(path: str) -> bool:
    from picklescan.scanner import SafetyLevel, scan_file_path

    result = scan_file_path(path)
    return result.infected_files > 0 or any(g.safety == SafetyLevel.Dangerous for g in result.globals)


def _fickling_flags(path: str) -> bool:
    import zipfile

    import fickling
    from fickling.analysis import Severity, check_safety

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            members = [i.filename for i in archive.infolist() if i.filename.endswith("data.pkl")]
            data = [archive.read(m) for m in members]
    else:
        data = [Path(path).read_bytes()]
    for stream in data:
        try:
            pickled = fickling.fickle.Pickled.load(stream)
            if check_safety(pickled).severity >= Severity.LIKELY_UNSAFE:
                return True
        except Exception:  # fickling cannot parse the stream: no verdict from it
            continue
    return False


def test_where_a_scanner_flags_a_case_inspect_calls_it_unsafe(corpus: dict[str, hostile_corpus.Case]) -> None:
    pytest.importorskip("picklescan")
    pytest.importorskip("fickling")
    flagged = {"picklescan": 0, "fickling": 0}
    for case in corpus.values():
        if not case.scan:
            continue
        target = case.target if os.path.isfile(case.target) else os.path.join(case.target, ".metadata")
        scanners = {"picklescan": _picklescan_flags(target), "fickling": _fickling_flags(target)}
        if not any(scanners.values()):
            continue
        for scanner, says in scanners.items():
            flagged[scanner] += says
        _, output, _ = _inspect(case.target)
        assert "UNSAFE" in output, f"{case.name}: {scanners} flag it, inspect says\n{output}"
        assert not os.path.exists(case.canary)
    # both scanners really ran and caught the plain payloads (a comparison that cannot fail is none)
    assert flagged["picklescan"] >= 15 and flagged["fickling"] >= 10, flagged
