"""``ckpt inspect`` on DCP directories and on whole pickled modules; nothing is unpickled."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from traindoctor.checkpoint.cli import main as ckpt_main
from traindoctor.checkpoint.inspect import CheckpointReadError, inspect_checkpoint


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.b = torch.nn.Linear(8, 2)


def test_whole_pickled_module_lists_its_tensors_and_the_classes_it_would_import(tmp_path, capsys):
    path = tmp_path / "whole.pt"
    torch.save(Net(), path)
    result = inspect_checkpoint(path)
    assert [k for k, _ in result.tensors] == [
        "a.weight",
        "a.bias",
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
        "b.weight",
        "b.bias",
    ]
    assert dict(result.tensors)["a.weight"].shape == (8, 4)
    assert f"{__name__}.Net" in result.imports
    assert "torch.nn.modules.batchnorm.BatchNorm1d" in result.imports
    (model,) = [c for c in result.components if c.kind == "model"]
    assert model.summary.startswith(f"whole pickled module {__name__}.Net: 9 tensors, 91 values")
    assert ckpt_main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    assert "9 tensors" in out and "unpickling it imports" in out and "UNSAFE" in out


def _model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    sched.step()
    return model, opt


def test_hand_written_dcp_save_of_model_only_is_td501_and_td504(tmp_path, capsys):
    model, _ = _model_and_optimizer()
    dcp.save({"model": model.state_dict()}, checkpoint_id=tmp_path / "ck", no_dist=True)
    result = inspect_checkpoint(tmp_path / "ck")
    assert result.format.startswith("DCP directory")
    assert [k for k, _ in result.tensors] == ["model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias"]
    assert {f.code for f in result.findings} == {"TD501", "TD504"}
    assert result.ranks[1].startswith("rank 0: __0_0.distcp, 4 item(s)")
    assert ckpt_main(["inspect", str(tmp_path / "ck")]) == 1
    assert "tensors (4) (global shapes)" in capsys.readouterr().out


def test_dcp_save_with_optimizer_is_td502_without_scheduler_and_td504_without_rng(tmp_path):
    model, opt = _model_and_optimizer()
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp_path / "ck", no_dist=True)
    result = inspect_checkpoint(tmp_path / "ck")
    assert {c.kind for c in result.components} == {"model", "optimizer"}
    assert {f.code for f in result.findings} == {"TD502", "TD504"}
    assert "optim.state.0.weight.exp_avg" in dict(result.tensors)


def test_traindoctor_sharded_checkpoint_written_by_one_process_is_complete(tmp_path):
    """A DCP directory written by traindoctor.checkpoint (here its files by hand, 1 rank)."""
    from traindoctor.checkpoint import sharded
    from traindoctor.checkpoint.state import capture_rng

    model, opt = _model_and_optimizer()
    model_sd, optim_sd = get_state_dict(model, opt)
    folder = tmp_path / "ck"
    dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=folder, no_dist=True)
    torch.save(
        {
            "format": sharded.SHARDED_FORMAT,
            "step": 4,
            "scheduler": {"last_epoch": 1, "base_lrs": [0.1], "_last_lr": [0.1]},
        },
        folder / sharded.COMMON_FILE,
    )
    torch.save({"rank": 0, "rng": capture_rng()}, folder / "rank_0.pt")
    (folder / sharded.MANIFEST).write_text(json.dumps({"world_size": 1, "step": 4}))
    result = inspect_checkpoint(folder)
    assert result.findings == [] and result.safe and result.step == 4
    assert "rank_0.pt:rng.torch" in {c.path for c in result.components}
    # and load reads it back into a fresh model (no process group needed)
    from traindoctor import checkpoint

    fresh, fresh_opt = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)), None
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    info = checkpoint.load(folder, model=fresh, optimizer=fresh_opt)
    assert info.step == 4 and "optimizer" in info.restored and "rng:torch" in info.restored
    for key, value in model.state_dict().items():
        assert torch.equal(value, fresh.state_dict()[key])


class Boom:
    def __reduce__(self):
        return (print, ("PWNED-BY-METADATA",))


def test_a_crafted_metadata_is_reported_and_never_run(tmp_path, capsys):
    model, _ = _model_and_optimizer()
    folder = tmp_path / "ck"
    dcp.save({"model": model.state_dict()}, checkpoint_id=folder, no_dist=True)
    (folder / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": Boom()}))
    with pytest.raises(CheckpointReadError, match="not DCP metadata"):
        inspect_checkpoint(folder)
    from traindoctor import checkpoint

    with pytest.raises(ValueError, match=r"builtins\.print.*refusing to unpickle"):
        checkpoint.load(folder, model=torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)))
    assert "PWNED" not in capsys.readouterr().out


def test_an_unfinished_dcp_directory_is_named_incomplete(tmp_path, capsys):
    folder = tmp_path / ".last.tmp-1-ab"
    folder.mkdir()
    (folder / "__0_0.distcp").write_bytes(b"x" * 10)
    assert ckpt_main(["inspect", str(folder)]) == 2
    assert "incomplete DCP checkpoint: no .metadata" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert ckpt_main(["inspect", str(empty)]) == 2
