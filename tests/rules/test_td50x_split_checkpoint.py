"""A checkpoint written as several files, one after another (melgan's netG.pt, optG.pt, netD.pt,
optD.pt; a GAN's G and D weight files): one checkpoint, judged as a whole by ``check`` and by
``run``, reported once, at its first file. Files that hold the same state (``last.pt`` and a
step-numbered copy) stay two checkpoints."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from helpers.snippets import checkpoint_found, checkpoint_run
from torch import nn

import traindoctor

FOUR_FILES = """
import torch
from torch import nn



class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.mid, self.head = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.mid(torch.relu(self.body(x)))))


torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
netD = Critic()
optG = torch.optim.Adam(netG.parameters(), lr=1e-4)
optD = torch.optim.Adam(netD.parameters(), lr=1e-4)
for epoch in range(2):
    for step in range(3):
        fake = netG(torch.randn(8, 4))
        lossD = netD(fake.detach()).mean() - netD(torch.randn(8, 4)).mean()
        optD.zero_grad()
        lossD.backward()
        optD.step()
        lossG = -netD(fake).mean()
        optG.zero_grad()
        lossG.backward()
        optG.step()
    torch.save(netG.state_dict(), ROOT + "/netG.pt")
    torch.save(optG.state_dict(), ROOT + "/optG.pt")
    torch.save(netD.state_dict(), ROOT + "/netD.pt")
    torch.save(optD.state_dict(), ROOT + "/optD.pt")
"""


def _run(source: str, tmp_path: Path) -> list[tuple[str, int, dict]]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source).lstrip("\n").replace("ROOT + ", f"{str(tmp_path)!r} + "))
    code = compile(script.read_text(), str(script), "exec")
    with traindoctor.watch(select=["TD501", "TD504"]) as doctor:
        exec(code, {"__name__": "__main__", "__file__": str(script)})
    return sorted((f.code, f.location.row, f.evidence) for f in doctor.findings)


def test_four_files_of_one_checkpoint_are_judged_together_by_check_and_run(tmp_path: Path) -> None:
    # both optimizers are in the checkpoint (optG.pt, optD.pt): no TD501 on either weights file;
    # the RNG state the noise draws from is in none of the four: one TD504, at the first file
    assert checkpoint_found(FOUR_FILES) == [("TD504", 31)]
    ran = _run(FOUR_FILES, tmp_path)
    assert [(code, row) for code, row, _ in ran] == [("TD504", 31)]
    evidence = ran[0][2]
    assert evidence["missing_rng"] == ["torch"]
    assert [Path(p).name for p in evidence["files"]] == ["netG.pt", "optG.pt", "netD.pt", "optD.pt"]


def test_a_file_of_the_checkpoint_left_out_is_reported_once_at_its_first_file(tmp_path: Path) -> None:
    three = FOUR_FILES.replace('    torch.save(optD.state_dict(), ROOT + "/optD.pt")\n', "")
    (td501,) = [f for f in checkpoint_run(three).findings if f.code == "TD501"]
    assert td501.location.row == 31 and "not of `optD`" in td501.message
    ran = _run(three, tmp_path)
    assert [(code, row) for code, row, _ in ran] == [("TD501", 31), ("TD504", 31)]
    assert ran[0][2]["missing_optimizers"] == ["Adam"]  # optD's: optG's state is in optG.pt


def test_two_copies_of_a_full_checkpoint_stay_two(tmp_path: Path) -> None:
    # last.pt and a numbered copy hold the same model and optimizer: each is resumed from alone,
    # so a missing RNG state is reported at each
    copies = """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, ROOT + "/last.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, ROOT + f"/ep{epoch}.pt")
    """
    assert checkpoint_found(copies) == [("TD504", 13), ("TD504", 14)]
    assert [(code, row) for code, row, _ in _run(copies, tmp_path)] == [("TD504", 13), ("TD504", 14)]


def test_merged_contents_and_copies_at_run_time() -> None:
    from traindoctor.facts.checkpoint.runtime import SeenSave, WrittenTogether, audit, merged_contents

    g, d = nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 1))
    opt_g = torch.optim.Adam(g.parameters())
    weights_g, weights_d = audit(g.state_dict(), [g, d]), audit(d.state_dict(), [g, d])
    state_g = audit(opt_g.state_dict(), [g, d])
    merged = merged_contents([weights_g, state_g, weights_d])
    assert merged.has_model and merged.has_optimizer and len(merged.models) == 2
    pending = WrittenTogether()
    assert pending.add(SeenSave(weights_g, "g.pt", None, 1)) == []
    assert pending.add(SeenSave(state_g, "optg.pt", None, 1)) == []
    # the same model's weights again: a copy, so the collected files are handed back to judge
    done = pending.add(SeenSave(audit(g.state_dict(), [g, d]), "g2.pt", None, 1))
    assert [s.path for s in done] == ["g.pt", "optg.pt"] and [s.path for s in pending.take()] == ["g2.pt"]
