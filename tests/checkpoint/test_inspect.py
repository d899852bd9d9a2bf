"""``traindoctor ckpt inspect``: contents, TD501-TD504, and files that must never be executed."""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
import zipfile

import pytest
import torch

from traindoctor import checkpoint
from traindoctor.checkpoint.cli import main
from traindoctor.checkpoint.inspect import inspect_checkpoint


def _model_and_optimizer(scheduler: bool = False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2) if scheduler else None
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return model, opt, sched


def _codes(path) -> list[str]:
    return [f.code for f in inspect_checkpoint(path).findings]


def test_full_traindoctor_checkpoint_is_safe_and_resumable(tmp_path, capsys):
    model, opt, sched = _model_and_optimizer(scheduler=True)
    path = checkpoint.save(tmp_path / "ck.pt", model=model, optimizer=opt, scheduler=sched, step=7, epoch=1)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "safety: safe" in out
    assert "step 7, epoch 1" in out
    assert "model weights: 4 tensors, 23 values" in out
    assert "state for 4 param(s) (exp_avg, exp_avg_sq, step)" in out
    assert "group 0: params=4 lr=0.001 initial_lr=0.001 betas=(0.9, 0.999)" in out
    assert re.search(r"^  model\.0\.weight +float32 +\[3, 4\] +48 B$", out, re.M)
    assert "RNG states: torch CPU present, CUDA not needed (no CUDA tensors), NumPy present, Python present" in out
    assert out.rstrip().endswith("nothing missing found")


def test_model_only_checkpoint_reports_td501_and_td504(tmp_path, capsys):
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "weights.pt"
    torch.save(model.state_dict(), path)
    assert main(["inspect", str(path), "--output-format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in data["findings"]] == ["TD501", "TD504"]
    td501 = data["findings"][0]
    assert td501["name"] == "checkpoint-without-optimizer" and td501["severity"] == "error"
    assert td501["filename"] == str(path)
    assert td501["evidence"] == {"model": ["<root>"], "optimizer": "missing"}
    assert data["safe"] is True
    assert {t["key"] for t in data["tensors"]} == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_scheduler_evidence_without_scheduler_state_reports_td502(tmp_path):
    model, opt, _ = _model_and_optimizer(scheduler=True)  # sets initial_lr in the groups
    path = tmp_path / "ck.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state()}, path)
    assert _codes(path) == ["TD502"]
    model, opt, _ = _model_and_optimizer(scheduler=False)  # no scheduler: nothing to miss
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state()}, path)
    assert _codes(path) == []


def test_empty_scaler_entry_reports_td503(tmp_path):
    model, opt, _ = _model_and_optimizer()
    path = tmp_path / "ck.pt"
    torch.save(
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "scaler": {}, "rng": torch.get_rng_state()}, path
    )
    assert _codes(path) == ["TD503"]


def _evil_class(marker):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return Evil


def test_malicious_checkpoint_is_reported_and_its_command_never_runs(tmp_path, capsys):
    marker = tmp_path / "pwned"
    model, opt, _ = _model_and_optimizer()
    path = tmp_path / "evil.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "payload": _evil_class(marker)()}, path)
    assert main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    system = f"{os.system.__module__}.system"  # posix.system on Linux
    assert "safety: UNSAFE" in out
    assert f"{system}  (called" in out
    assert "UNSAFE: do not load this file" in out
    assert not marker.exists()
    assert inspect_checkpoint(path).unsafe[0].ref.dotted == system


def test_raw_pickle_with_reduce_payload_is_reported_without_running(tmp_path, capsys):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(_evil_class(marker)(), protocol=4))
    assert main(["inspect", str(path)]) == 1
    assert "raw pickle" in capsys.readouterr().out
    assert not marker.exists()


def test_unknown_module_is_never_imported(tmp_path):
    path = tmp_path / "x.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x/data.pkl", b"\x80\x02ctd_c1_no_such_module\nboom\nq\x00)R.")
    result = inspect_checkpoint(path)
    assert [u.ref.dotted for u in result.unsafe] == ["td_c1_no_such_module.boom"]
    assert result.unsafe[0].called
    assert "td_c1_no_such_module" not in sys.modules


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "truncated"),
        (b"", "empty file"),
        (b"hello world", "not a torch checkpoint"),
    ],
)
def test_unreadable_files_get_a_clear_error_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "bad.pt"
    if content is None:
        model, _, _ = _model_and_optimizer()
        torch.save(model.state_dict(), path)
        path.write_bytes(path.read_bytes()[:300])
    else:
        path.write_bytes(content)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_legacy_format_is_named(tmp_path, capsys):
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    assert main(["inspect", str(path)]) == 2
    assert "legacy (pre-1.6, non-zip)" in capsys.readouterr().err


def test_missing_file_exit_2(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope.pt")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_shared_and_nested_structures_are_walked_once(tmp_path):
    shared = [torch.zeros(1)]
    obj = {"a": shared, "b": shared}
    for _ in range(200):
        obj = {"n": obj}
    path = tmp_path / "deep.pt"
    torch.save(obj, path)
    result = inspect_checkpoint(path)
    assert result.safe and len(result.tensors) == 1
