"""TD204 on real project shapes: frozen bases (adapters, LoRA, PEFT, a project helper that freezes
its argument), optimizer classes named through variables, ``getattr`` and dicts, parameter
groups of whole submodules, ``**kwargs`` of a conditional dict, yacs defaults, demo blocks."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

MODEL = """
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
            self.head = nn.Linear(8, 10)
            self.adapter_up = nn.Linear(8, 8, bias=False)

        def forward(self, x):
            return self.head(self.backbone(x).mean((2, 3)))
    """

ADAPTERS = """
    def mark_only_adapter_as_trainable(model, bias="none"):
        for name, param in model.named_parameters():
            if "adapter_" not in name:
                param.requires_grad = False

    def mark_adapter_and_norms_trainable(model):
        for name, param in model.named_parameters():
            param.requires_grad = any(s in name for s in trainable_names())

    def keep_norms(model):
        for name, param in model.named_parameters():
            param.requires_grad = "adapter_" in name or "norm" in name

    def trainable_names():
        return ["adapter_", "rms_1", "ln_f"]
    """


def _train(freeze: str, optimizer: str = "torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.02)") -> str:
    return f"""
    import torch
    from models import Net
    from adapters import mark_only_adapter_as_trainable, mark_adapter_and_norms_trainable, keep_norms

    def main(loader):
        model = Net()
        {freeze}
        optimizer = {optimizer}
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    """


def test_a_project_helper_that_freezes_all_but_the_adapter_silences_td204(tmp_path: Path) -> None:
    files = {"models.py": MODEL, "adapters.py": ADAPTERS, "train.py": _train("mark_only_adapter_as_trainable(model)")}
    assert checked_rows(tmp_path, files, "train.py", ["TD204"]) == []
    # the same optimizer over the whole model, nothing frozen: reported at the optimizer
    files["train.py"] = _train("pass")
    result = check(tmp_path / "plain", files, "train.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 8)]
    assert "weight_decay=0.02 to every parameter of `model`" in result.findings[0].message


def test_a_freeze_that_keeps_norms_trainable_or_an_unknown_selection_is_still_reported(tmp_path: Path) -> None:
    for i, freeze in enumerate(["keep_norms(model)", "mark_adapter_and_norms_trainable(model)"]):
        files = {"models.py": MODEL, "adapters.py": ADAPTERS, "train.py": _train(freeze)}
        assert checked_rows(tmp_path / str(i), files, "train.py", ["TD204"]) == [("TD204", 8)], freeze


def test_in_file_freezes_by_name_list_and_requires_grad_(tmp_path: Path) -> None:
    freezes = [
        "model.requires_grad_(False); model.head = torch.nn.Linear(8, 10)",
        "[p.requires_grad_(False) for p in model.parameters()]",
        "for n, p in model.named_parameters():\n            p.requires_grad = n in KEEP",
    ]
    for i, freeze in enumerate(freezes):
        train = _train(freeze).replace("def main", 'KEEP = ["head.weight", "head.bias"]\n\n    def main')
        files = {"models.py": MODEL, "adapters.py": ADAPTERS, "train.py": train}
        assert checked_rows(tmp_path / str(i), files, "train.py", ["TD204"]) == [], freeze


def test_peft_wrapping_freezes_the_base_unless_it_is_an_opt_in_branch_off_by_default(tmp_path: Path) -> None:
    script = """
        import argparse
        import torch
        from peft import LoraConfig, get_peft_model
        from models import Net

        parser = argparse.ArgumentParser()
        parser.add_argument("--use_lora", action="store_true")
        args = parser.parse_args()
        model = Net()
        {wrap}
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        """
    wrapped = {"models.py": MODEL, "train.py": script.format(wrap="model = get_peft_model(model, LoraConfig(r=8))")}
    assert checked_rows(tmp_path / "a", wrapped, "train.py", ["TD204"]) == []
    in_place = {"models.py": MODEL, "train.py": script.format(wrap="get_peft_model(model, LoraConfig(r=8))")}
    assert checked_rows(tmp_path / "b", in_place, "train.py", ["TD204"]) == []
    opt_in = script.format(wrap="if args.use_lora:\n            model = get_peft_model(model, LoraConfig(r=8))")
    files = {"models.py": MODEL, "train.py": opt_in}
    result = check(tmp_path / "c", files, "train.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 12)]
    assert "(its default)" in result.findings[0].message


def test_optimizer_classes_named_through_variables_getattr_and_dicts(tmp_path: Path) -> None:
    script = """
        import argparse
        import torch
        from models import Net

        parser = argparse.ArgumentParser()
        parser.add_argument("--use_8bit_adam", action="store_true")
        parser.add_argument("--optimizer", default="AdamW")
        parser.add_argument("--wd", type=float, default=0.05)
        args = parser.parse_args()
        OPTIMIZERS = {{"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}}
        model = Net()
        if args.use_8bit_adam:
            import bitsandbytes as bnb
            optimizer_cls = bnb.optim.AdamW8bit
        else:
            optimizer_cls = torch.optim.AdamW
        {build}
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        """
    builds = [
        "optimizer = optimizer_cls(model.parameters(), lr=1e-4, weight_decay=args.wd)",
        "optimizer = optimizer_cls(model.parameters(), lr=1e-4)",  # AdamW's default decay
        "optimizer = getattr(torch.optim, args.optimizer)(model.parameters(), lr=1e-4)",
        'optimizer = OPTIMIZERS["sgd"](model.parameters(), lr=0.1, weight_decay=args.wd)',
        "optimizer = OPTIMIZERS[args.optimizer.lower()](model.parameters(), lr=0.1, weight_decay=args.wd)",
    ]
    for i, build in enumerate(builds):
        files = {"models.py": MODEL, "train.py": script.format(build=build)}
        result = check(tmp_path / str(i), files, "train.py", ["TD204"])
        assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 17)], build
    # a class the file cannot name (a config's string of no known value) stays unknown
    unknown = script.format(build="optimizer = getattr(torch.optim, cfg.name)(model.parameters(), lr=1e-4)")
    assert checked_rows(tmp_path / "u", {"models.py": MODEL, "train.py": unknown}, "train.py", ["TD204"]) == []


def test_parameter_groups_of_whole_submodules_decay_their_biases_and_norms(tmp_path: Path) -> None:
    script = """
        import torch
        from models import Net

        model = Net()
        groups = [
            {{"params": model.backbone.parameters(), "lr": 1e-5{backbone}}},
            {{"params": model.head.parameters()}},
        ]
        optimizer = torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=1e-4)
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        """
    result = check(tmp_path / "a", {"models.py": MODEL, "train.py": script.format(backbone="")}, "train.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 9)]
    assert "every parameter of `model.backbone`" in result.findings[0].message
    # the group that holds the norms opts out; the head still decays its bias
    opted = script.format(backbone=', "weight_decay": 0.0')
    result = check(tmp_path / "b", {"models.py": MODEL, "train.py": opted}, "train.py", ["TD204"])
    assert [f.location.row for f in result.findings] == [9]
    assert "`model.head`" in result.findings[0].message
    # groups split by name are the fix, not the mistake
    named = script.replace(
        '{{"params": model.head.parameters()}}', '{{"params": [p for n, p in model.named_parameters() if "bias" in n]}}'
    )
    assert (
        checked_rows(tmp_path / "c", {"models.py": MODEL, "train.py": named.format(backbone="")}, "train.py", ["TD204"])
        == []
    )


def test_kwargs_of_a_conditional_dict_leave_the_default_decay_known(tmp_path: Path) -> None:
    model = """
        import torch
        from torch import nn

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln = nn.LayerNorm(64)
                self.fc = nn.Linear(64, 64)

            def configure_optimizers(self, weight_decay, learning_rate, device_type):
                extra_args = dict(fused=True) if device_type == "cuda" else dict()
                return torch.optim.AdamW(self.parameters(), lr=learning_rate, **extra_args)
        """
    result = check(tmp_path / "a", {"model.py": model}, "model.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 12)]
    assert "weight_decay=0.01 (its default) to every parameter of `GPT`" in result.findings[0].message
    # one alternative passes a weight decay: which one runs is not known
    hidden = model.replace("dict(fused=True)", "dict(fused=True, weight_decay=0.0)")
    assert checked_rows(tmp_path / "b", {"model.py": hidden}, "model.py", ["TD204"]) == []


def test_yacs_defaults_with_lower_case_keys_and_the_module_the_file_imports(tmp_path: Path) -> None:
    defaults = """
        from yacs.config import CfgNode as CN

        _C = CN()
        _C.TRAIN = CN()
        _C.TRAIN.weight_decay = 1e-4
        _C.TRAIN.lr = 0.02
        cfg = _C
        """
    other = """
        from yacs.config import CfgNode as CN

        _C = CN()
        _C.SWEEP = CN()
        _C.SWEEP.NAME = "grid"
        """
    train = """
        import torch
        from config.defaults import cfg
        from models import Net

        def create_optimizer(net, cfg):
            return torch.optim.SGD(net.parameters(), lr=cfg.TRAIN.lr, momentum=0.9, weight_decay=cfg.TRAIN.weight_decay)

        def main(loader):
            net = Net()
            optimizer = create_optimizer(net, cfg)
            for x, y in loader:
                torch.nn.functional.cross_entropy(net(x), y).backward()
                optimizer.step()
        """
    files = {"config/defaults.py": defaults, "sweep/config.py": other, "models.py": MODEL, "train.py": train}
    (tmp_path / ".git").mkdir()
    result = check(tmp_path, files, "train.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 6)]
    assert "weight_decay=0.0001" in result.findings[0].message
    # a key path the defaults module does not assign stays unknown
    unknown = train.replace("cfg.TRAIN.weight_decay", "cfg.TRAIN.wd")
    assert checked_rows(tmp_path, {**files, "train.py": unknown}, "train.py", ["TD204"]) == []


def test_a_scheduler_plot_in_a_library_modules_main_block_is_no_training(tmp_path: Path) -> None:
    schedulers = """
        import math

        class Cosine:
            def __init__(self, optimizer, steps):
                self.optimizer, self.steps, self.t = optimizer, steps, 0

            def step(self):
                self.t += 1
                for g in self.optimizer.param_groups:
                    g["lr"] = 0.5 * (1 + math.cos(math.pi * self.t / self.steps))

        if __name__ == "__main__":
            import torch
            import torchvision
            import matplotlib.pyplot as plt

            model = torchvision.models.resnet18()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)
            sched = Cosine(optimizer, 100)
            lrs = []
            for _ in range(100):
                sched.step()
                lrs.append(optimizer.param_groups[0]["lr"])
            plt.plot(lrs)
        """
    assert checked_rows(tmp_path, {"schedulers.py": schedulers}, "schedulers.py", ["TD204"]) == []
    # the same block training the model is training
    trains = schedulers.replace("sched.step()", "model(x).sum().backward(); optimizer.step(); sched.step()")
    assert checked_rows(tmp_path / "t", {"schedulers.py": trains}, "schedulers.py", ["TD204"]) == [("TD204", 18)]


FACTORY = """
    import torch

    def build_optimizer(model, args):
        return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay)

    def make(model, wd, lr=0.1):
        opt_args = dict(lr=lr, weight_decay=wd)
        return torch.optim.AdamW(model.parameters(), **opt_args)
    """

CALLER = """
    import argparse
    import torch
    from models import Net
    from optim_factory import build_optimizer, make

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--weight_decay", type=float, default={wd})

    def main(args):
        model = Net()
        optimizer = {build}
        for epoch in range(90):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()

    if __name__ == "__main__":
        main(parser.parse_args())
    """


def test_an_optimizer_helper_of_another_module_with_the_decay_this_call_passes(tmp_path: Path) -> None:
    files = {"models.py": MODEL, "optim_factory.py": FACTORY}
    train = CALLER.format(wd="1e-4", build="build_optimizer(model, args)")
    result = check(tmp_path / "a", {**files, "train.py": train}, "train.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 12)]
    finding = result.findings[0]
    assert "`build_optimizer` builds `SGD` with weight_decay=0.0001 (from this call)" in finding.message
    (related,) = finding.related
    assert related.filename.endswith("optim_factory.py") and related.location.row == 4
    # through a parameter and a **kwargs dict of the helper
    train = CALLER.format(wd="1e-4", build="make(model, 0.05)")
    assert checked_rows(tmp_path / "b", {**files, "train.py": train}, "train.py", ["TD204"]) == [("TD204", 12)]
    # the helper's own file cannot tell: nothing there
    assert checked_rows(tmp_path / "a", {**files, "train.py": train}, "optim_factory.py", ["TD204"]) == []


def test_helper_calls_with_no_decay_an_unknown_one_or_a_frozen_model(tmp_path: Path) -> None:
    files = {"models.py": MODEL, "optim_factory.py": FACTORY, "adapters.py": ADAPTERS}
    cases = [
        CALLER.format(wd="0.0", build="build_optimizer(model, args)"),
        CALLER.format(wd="1e-4", build="make(model, cfg.wd)"),
        CALLER.format(wd="1e-4", build="build_optimizer(model, args)")
        .replace("model = Net()", "model = Net()\n        mark_only_adapter_as_trainable(model)")
        .replace(
            "from models import Net", "from models import Net\n    from adapters import mark_only_adapter_as_trainable"
        ),
    ]
    for i, train in enumerate(cases):
        assert checked_rows(tmp_path / str(i), {**files, "train.py": train}, "train.py", ["TD204"]) == [], train
