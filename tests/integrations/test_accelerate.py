"""accelerate scripts under ``traindoctor run``: seeded mistakes found with evidence, and a healthy
twin (bf16 autocast, ``accelerator.save_state`` every epoch) with none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from framework_runs import Pending, need, under_run

need("accelerate")

SCRIPT = "accelerate_train.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict[str, Pending]]:
    tmp = tmp_path_factory.mktemp
    started = {
        "seeded": under_run(SCRIPT, ["--mistakes", "decay,bn,save,slow"], tmp("acc-seeded")),
        "healthy": under_run(SCRIPT, [], tmp("acc-healthy")),
    }
    yield started
    for pending in started.values():
        pending.close()


def test_seeded_mistakes_under_traindoctor_run(runs) -> None:
    run = runs["seeded"].result()
    assert run.codes == [
        "TD102",
        "TD202",
        "TD204",
        "TD210",
        "TD501",
    ]  # weights only: TD501 alone (its full-state fix saves the RNG too); Linear -> BatchNorm1d (TD210)
    td202 = run.finding("TD202")["evidence"]  # accelerator.accumulate(): 4 backward per real step
    assert (td202["batchnorm_batch"], td202["backward_per_step"], td202["effective_batch"]) == (4, 4, 16)
    td204 = run.finding("TD204")["evidence"]
    assert td204["decayed"] == 4 and td204["kinds"] == {"bias": 2, "norm": 2}
    td102 = run.finding("TD102")["evidence"]
    assert td102["num_workers"] == 0 and td102["data_wait_share"] > 0.2
    # accelerator.save(obj, path) is a thin wrapper of torch.save: the user's weights-only save.
    td501 = run.finding("TD501")["evidence"]
    out = runs["seeded"].report.parent
    assert td501["missing_optimizers"] == ["AdamW"] and td501["path"] == str(out / "weights.pt")


def test_healthy_twin_with_save_state_has_no_findings(runs) -> None:
    run = runs["healthy"].result()
    # save_state wrote the weights with torch.save next to the optimizer and RNG states: the
    # framework's checkpoint, not judged file by file.
    assert run.report["findings"] == []
    assert run.report["profile"]["steps"] == 8
    assert {"pytorch_model.bin", "optimizer.bin", "random_states_0.pkl"} <= {
        p.name for p in (runs["healthy"].report.parent / "state").iterdir()
    }
