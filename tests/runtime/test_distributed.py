"""torchrun with 2 CPU processes (gloo): every rank watches itself, rank 0 writes the merged report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from traindoctor.doctor.distributed import merge_reports

ROOT = Path(__file__).resolve().parents[2]

DDP_SCRIPT = textwrap.dedent(
    """
    import time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler

    class Slow(Dataset):
        def __len__(self):
            return 48
        def __getitem__(self, i):
            time.sleep(0.003 * (1 + dist.get_rank()))  # rank 1 decodes twice as slowly
            return torch.full((4,), float(i)), torch.zeros(1)

    def main():
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        data = Slow()
        sampler = DistributedSampler(data, shuffle=True)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        model = DDP(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
    """
)


def test_torchrun_two_ranks_merged_report(tmp_path: Path) -> None:
    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_SCRIPT)
    report_path = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "traindoctor",
            "run",
            "--select",
            "TD1,TD6",
            "--output-format",
            "json",
            "-o",
            str(report_path),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    env_info = report["environment"]
    assert env_info["world_size"] == 2 and env_info["local_world_size"] == 2
    assert env_info["ranks_merged"] == [0, 1] and env_info["ranks_missing"] == []
    (td102,) = [f for f in report["findings"] if f["code"] == "TD102"]
    evidence = td102["evidence"]
    assert evidence["ranks"] == [0, 1]
    per_rank = evidence["per_rank"]
    assert sorted(per_rank) == ["0", "1"]
    assert per_rank["0"]["batches"] == per_rank["1"]["batches"] == 12  # 2 epochs x 24 samples / 4
    assert per_rank["1"]["wait_ms_per_batch"] > per_rank["0"]["wait_ms_per_batch"]
    assert sorted(report["profile"]["per_rank"]) == ["0", "1"]
    assert report["profile"]["steps"] == 12
    assert not any(p.name.startswith("rank") for p in tmp_path.iterdir())


def test_merge_keeps_per_rank_evidence_and_lists_missing_ranks() -> None:
    def rank_report(share: float) -> dict:
        return {
            "findings": [
                {
                    "code": "TD102",
                    "filename": "t.py",
                    "location": {"row": 3, "column": 1},
                    "message": "m",
                    "evidence": {"data_wait_share": share},
                }
            ],
            "profile": {
                "verdict": "data-bound",
                "shares": {"data": share},
                "per_step_ms": {"step": 10.0},
                "samples_per_s": 100.0,
            },
            "environment": {"world_size": 4},
            "notes": ["x"],
            "partial": False,
        }

    merged = merge_reports({1: rank_report(0.5), 0: rank_report(0.4)}, world_size=4)
    (finding,) = merged["findings"]
    assert finding["evidence"]["data_wait_share"] == 0.4  # the lowest rank's numbers lead
    assert finding["evidence"]["per_rank"] == {"0": {"data_wait_share": 0.4}, "1": {"data_wait_share": 0.5}}
    assert merged["environment"]["ranks_missing"] == [2, 3] and merged["partial"] is True
    assert merged["profile"]["samples_per_s_all_ranks"] == 200.0
    assert merged["notes"] == ["rank 0: x", "rank 1: x"]
