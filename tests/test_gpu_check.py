"""benchmarks/gpu_check.py on a CPU machine: it says it needs a GPU (or a CUDA wheel) and exits 2,
never green; its workloads run on the CPU (``--allow-cpu``) where no GPU-only finding may fire and
no device profile is invented; its table and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import benchmark_module

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    with benchmark_module("gpu_check") as module:
        yield module


def test_without_cuda_it_says_it_needs_a_gpu_and_exits_2(tmp_path: Path, gpu_check) -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - a GPU machine runs the real check
        pytest.skip("CUDA is available here: the check would really run")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "r.json", "--markdown", "r.md"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    if torch.version.cuda is None:  # a CPU wheel: it says which install is missing
        assert proc.stdout.strip() == gpu_check.CPU_WHEEL.format(version=torch.__version__)
        assert "CUDA wheel" in proc.stdout and "make gpu-check" in proc.stdout
    else:  # pragma: no cover - a CUDA wheel on a machine without a GPU
        assert proc.stdout.strip() == gpu_check.NEEDS_GPU
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "r.md").exists()


def test_workloads_rehearsed_on_cpu_report_no_gpu_only_finding(tmp_path: Path, gpu_check, capsys) -> None:
    checks = "check_profile,check_mfu,check_td801_td309,check_gemm_premise,check_td101,check_td201_td306,check_td301_td302,check_td401_td402,check_tune"
    code = gpu_check.main(
        [
            "--allow-cpu",
            "--only",
            checks,
            "--json",
            str(tmp_path / "r.json"),
            "--markdown",
            str(tmp_path / "r.md"),
        ]
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 0, report
    assert report["header"]["rehearsal"] is True and report["failed"] == 0
    rows = {(r["check"], r["variant"]): r for r in report["results"]}
    gpu_only = {"TD101", "TD201", "TD306", "TD309", "TD401", "TD402", "TD801"}
    assert all(not gpu_only & set(r["observed"]) for r in report["results"])
    # The workloads are real: the non-GPU findings do fire on the CPU.
    assert rows[("TD301/TD302 scaler", "fp16, no GradScaler")]["observed"] == ["TD301"]
    assert rows[("TD301/TD302 scaler", "fp16, clip before unscale_")]["observed"] == ["TD302"]
    assert rows[("TD301/TD302 scaler", "fp16, unscale_ then clip")]["observed"] == []
    assert rows[("TD101 pin-memory-off", "pin_memory=False")]["numbers"]["verdict"]
    profile_rows = [r for r in report["results"] if r["check"] == "device-time profile"]
    assert [r["variant"] for r in report["results"] if r["check"].startswith(("TD801", "TD309"))] == [
        "loss.item() then 20 ms of host work",
        "loss.item() per step, big bf16 kernels",
        "fp32 Linear 4096, precision 'highest'",
        "fp32 Linear 4096, precision 'high'",
    ]
    assert len(profile_rows) == 6 and all("gpu_step_ms" not in r["numbers"] for r in profile_rows)
    assert "b30_over_b32" in rows[("TD201 premise: bf16 GEMM", "batch 30 vs 32 vs 64")]["numbers"]
    (mfu,) = [r for r in report["results"] if r["check"] == "MFU vs a known one"]
    # the FLOPs probe runs on CUDA only: the rehearsal invents no MFU
    assert mfu["numbers"]["mfu"] is None and mfu["numbers"]["flops_expected"] == (6 * 2 - 2) * 32 * 64 * 64
    tune = rows[("tune pin_memory candidates", "4 candidates")]
    assert tune["observed"] == ["no pinned"]  # pinning is only measured when batches go to CUDA
    table = (tmp_path / "r.md").read_text()
    assert "| check | variant | expected | reported | result | s | numbers |" in table
    assert table.count("| pass |") == len(report["results"])


def test_a_failing_check_makes_the_exit_code_1(tmp_path: Path, gpu_check, monkeypatch) -> None:
    def broken(ctx):
        return [gpu_check._timed("broken", "v", ["TD101"], lambda: (_ for _ in ()).throw(RuntimeError("boom")))]

    def missed(ctx):
        return [gpu_check._timed("missed", "v", ctx.expect("TD101", gpu_only=False), lambda: ([], {}))]

    monkeypatch.setattr(gpu_check, "CHECKS", [broken, missed])
    code = gpu_check.main(["--allow-cpu", "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")])
    assert code == 1
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert results[0]["error"] == "RuntimeError: boom" and results[1]["passed"] is False
    table = (tmp_path / "r.md").read_text()
    assert "| broken | v | TD101 | - | error |" in table and "| missed | v | TD101 | - | FAIL |" in table


def test_expectations_follow_the_device(gpu_check, tmp_path: Path) -> None:
    gpu = gpu_check.Context("cuda", True, (9, 0), tmp_path)
    cpu = gpu_check.Context("cpu", False, None, tmp_path, rehearsal=True)
    assert gpu.expect("TD306", "TD201") == ["TD201", "TD306"]
    assert cpu.expect("TD306", "TD201") == []
    assert cpu.expect("TD301", gpu_only=False) == ["TD301"]
