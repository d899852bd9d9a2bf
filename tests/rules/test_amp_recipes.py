"""TD301 and TD308 on real recipes: a disabled GradScaler handed to the training function inside a
``*params`` tuple (another scaler built only in a branch the defaults skip), and float16 weights
under an fp32 master-weights optimizer wrapper or cast straight back to float32."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

CONFIG = """
    from yacs.config import CfgNode

    _C = CfgNode()
    _C.TRAIN = CfgNode()
    _C.TRAIN.MIXED_PRECISION = False
    _C.FSDP = CfgNode()
    _C.FSDP.ENABLED = False
    cfg = _C
    """

TRAINER = """
    import torch
    from torch.cuda import amp
    from fairscale.optim.grad_scaler import ShardedGradScaler
    from core.config import cfg

    def train_epoch(loader, model, loss_fun, optimizer, scaler, cur_epoch):
        for inputs, labels in loader:
            with amp.autocast(enabled=cfg.TRAIN.MIXED_PRECISION):
                loss = loss_fun(model(inputs.cuda()), labels.cuda())
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    def train_model(loader, model, loss_fun, optimizer):
        if cfg.FSDP.ENABLED:
            scaler = ShardedGradScaler(enabled=cfg.TRAIN.MIXED_PRECISION)
        else:
            scaler = amp.GradScaler(enabled={enabled})
        for cur_epoch in range(10):
            params = (loader, model, loss_fun, optimizer, scaler)
            train_epoch(*params, cur_epoch)
    """


def test_disabled_scaler_reaching_the_loop_through_a_star_tuple(tmp_path: Path) -> None:
    files = {"core/__init__.py": "", "core/config.py": CONFIG, "core/trainer.py": TRAINER.format(enabled="False")}
    (tmp_path / ".git").mkdir()
    result = check(tmp_path, files, "core/trainer.py", ["TD301"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD301", 8)]
    finding = result.findings[0]
    assert "constructed with `enabled=False`" in finding.message
    assert [r.location.row for r in finding.related] == [19]
    # the scaler enabled with the autocast: nothing to report
    files["core/trainer.py"] = TRAINER.format(enabled="cfg.TRAIN.MIXED_PRECISION")
    assert checked_rows(tmp_path, files, "core/trainer.py", ["TD301"]) == []
    # the sharded branch taken by default: that scaler may be live
    files["core/config.py"] = CONFIG.replace("_C.FSDP.ENABLED = False", "_C.FSDP.ENABLED = True")
    files["core/trainer.py"] = TRAINER.format(enabled="False")
    assert checked_rows(tmp_path, files, "core/trainer.py", ["TD301"]) == []


HALF = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    model = Net().cuda()
    {cast}
    optimizer = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    {wrap}
    for x, y in loader:
        loss = model(x, y)
        optimizer.backward(loss) if args.fp16 else loss.backward()
        optimizer.step()
    """


def test_half_weights_under_a_master_weights_wrapper_are_the_classic_recipe(tmp_path: Path) -> None:
    wrap = "if args.fp16:\n        from apex.fp16_utils import FP16_Optimizer\n        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)"
    script = HALF.format(cast="if args.fp16:\n        model = model.half()", wrap=wrap)
    assert checked_rows(tmp_path / "a", {"train.py": script}, "train.py", ["TD308"]) == []
    bare = HALF.format(cast="model = model.half()", wrap="pass")
    result = check(tmp_path / "b", {"train.py": bare}, "train.py", ["TD308"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD308", 8)]
    assert "cast to float16 and then trained" in result.findings[0].message


def test_a_round_trip_back_to_float32_is_no_half_training(tmp_path: Path) -> None:
    casts = [
        "model = model.half().float()",
        "model.half()\n    model.load_state_dict(torch.load('w.pt'))\n    model.float()",
        "model = model.to(torch.float16).to(torch.float32)",
    ]
    for i, cast in enumerate(casts):
        script = HALF.format(cast=cast, wrap="pass")
        assert checked_rows(tmp_path / str(i), {"train.py": script}, "train.py", ["TD308"]) == [], cast
    # cast back only after training: the training ran in float16
    late = HALF.format(cast="model = model.half()", wrap="pass") + "model.float()\n"
    assert checked_rows(tmp_path / "late", {"train.py": late}, "train.py", ["TD308"]) == [("TD308", 8)]


def test_a_scaler_switched_with_the_autocast_is_live_when_the_switch_is_on(tmp_path: Path) -> None:
    script = """
        import argparse
        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--amp", action="store_true")
        args = parser.parse_args()
        if args.amp:
            scaler = torch.cuda.amp.GradScaler()
        else:
            scaler = torch.cuda.amp.GradScaler(enabled=False)
        for x, y in loader:
            with torch.cuda.amp.autocast(enabled=args.amp):
                loss = criterion(model(x.cuda()), y.cuda())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        """
    assert checked_rows(tmp_path, {"train.py": script}, "train.py", ["TD301"]) == []
