"""TD503 checkpoint-without-scaler: static and runtime."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.project_tree import check, rows
from helpers.rule_loops import finding, images, line_of, model_and_momentum_sgd
from torch import nn

import traindoctor

# ------------------------------------------------------------------ traindoctor check
NANOGPT_STYLE = """
import torch

init_from = "resume"
model = GPT(conf)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
if init_from == "resume":
    checkpoint = torch.load("out/ckpt.pt", map_location="cuda")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    best_val_loss = checkpoint["best_val_loss"]
checkpoint = None
while True:
    if iter_num % 2000 == 0:
        checkpoint = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "iter_num": iter_num,
            "best_val_loss": best_val_loss,
        }
        torch.save(checkpoint, "out/ckpt.pt")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    iter_num += 1
"""


def test_a_resume_path_makes_a_missing_scaler_more_certain_not_less(tmp_path):
    result = check(tmp_path, {"train.py": NANOGPT_STYLE}, "train.py", ["TD503"])
    assert rows(result) == [("TD503", 22)]
    # the same script restoring the scaler on resume (and so saving it) is fine
    fixed = NANOGPT_STYLE.replace(
        '    iter_num = checkpoint["iter_num"]',
        '    scaler.load_state_dict(checkpoint["scaler"])\n    iter_num = checkpoint["iter_num"]',
    ).replace('"iter_num": iter_num,', '"iter_num": iter_num, "scaler": scaler.state_dict(),')
    assert rows(check(tmp_path, {"train.py": fixed}, "train.py", ["TD503"])) == []


# ------------------------------------------------------------------ traindoctor run
def test_td503_scaler_missing_and_present(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD503"]) as doctor:
        scaler = torch.amp.GradScaler("cpu")
        for step in range(2):
            x, y = images(8, seed=step)
            scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        base = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        torch.save(base, tmp_path / "a.pt")  # no scaler
        torch.save({**base, "scaler": scaler.state_dict()}, tmp_path / "b.pt")
    f = finding(doctor, "TD503")
    assert f.location.row == line_of("# no scaler")
    assert f.evidence == {"path": str(tmp_path / "a.pt"), "loss_scale_now": 65536.0}
