"""Issue 21, model mode and optimizer/AMP recall: how a model's layers, mode, learning rate, weight
decay and loss flow through constructor parameters, tuple results, callers, trainer classes,
project helpers and yacs defaults (TD203, TD204, TD303, TD701, TD703)."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows
from helpers.snippets import check_findings, check_rows, eval_rows


def _row(src: str, text: str, project: bool = False) -> int:
    """The 1-based line of ``text`` in ``src`` as checked: a snippet keeps its leading newline
    (``helpers.snippets``), a project file drops it (``helpers.project_tree``)."""
    lines = src.split("\n")[1:] if project else src.split("\n")
    (row,) = [i for i, line in enumerate(lines, 1) if text in line]
    return row


# ---------------------------------------------------------------- TD701: what a model is made of
LAYERS = """
    import torch
    from torch import nn

    class ConvBN(nn.Sequential):
        def __init__(self, a, b):
            super().__init__()
            self.add_module("c", nn.Conv2d(a, b, 3))
            self.add_module("bn", nn.BatchNorm2d(b))

    def stem(n):
        return nn.Sequential(ConvBN(3, n), nn.ReLU())

    class Block(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.conv = nn.Conv2d(n, n, 1)

        def forward(self, x):
            return self.conv(x)

    class Net(nn.Module):
        def __init__(self, n=8, backbone=None):
            super().__init__()
            self.backbone = backbone
            self.blocks = []
            for _ in range(2):
                self.blocks.append(Block(n))
            self.blocks = nn.Sequential(*self.blocks)

        def forward(self, x):
            return self.blocks(self.backbone(x))

    @torch.no_grad()
    def evaluate(model, loader):
        return [model(x) for x in loader]
    """


def _trained(build: str) -> str:
    return (
        LAYERS
        + f"""
    def main(loader, val_loader):
        model = {build}
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
            opt.step()
        evaluate(model, val_loader)
    """
    )


def test_td701_layers_from_constructor_parameters_and_add_module() -> None:
    # BatchNorm reaches Net only through ``backbone=stem(8)`` (a ConvBN that add_module()s it)
    src = _trained("Net(backbone=stem(8))")
    assert eval_rows(src, ["TD701"]) == [("TD701", _row(src, "return [model(x) for x in loader]"))]
    # no BatchNorm, no Dropout: nothing to report
    assert eval_rows(_trained("Net(backbone=nn.Conv2d(3, 8, 3))"), ["TD701"]) == []


def test_td701_layers_of_local_classes_constructed_in_the_class_body() -> None:
    src = _trained("Net(backbone=nn.Identity())").replace(
        "self.blocks.append(Block(n))", "self.blocks.append(ConvBN(n, n))"
    )
    assert eval_rows(src, ["TD701"]) == [("TD701", _row(src, "return [model(x) for x in loader]"))]


TUPLES = """
    import torch
    from torch import nn
    from apex import amp

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))

        def forward(self, x):
            return self.body(x)

    def setup(args):
        model = Net()
        return args, model

    def load_checkpoint(path, model, optimizer):
        model.load_state_dict(torch.load(path)["model"])
        return model, optimizer, 3

    def valid(model, loader):
        with torch.no_grad():
            return [model(x) for x in loader]

    def train(args, model, loader, val_loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = amp.initialize(models=model, optimizers=optimizer)
        model, optimizer, start = load_checkpoint(args.ckpt, model, optimizer)
        model.train()
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        valid(model, val_loader)

    def main(args, loader, val_loader):
        args, model = setup(args)
        train(args, model, loader, val_loader)
    """


def test_td701_model_through_tuple_results_handed_back_models_and_callers() -> None:
    assert eval_rows(TUPLES, ["TD701"]) == [("TD701", _row(TUPLES, "return [model(x) for x in loader]"))]
    # a tuple result whose slot we cannot tell keeps the model unknown: silent
    unknown = TUPLES.replace("return args, model", "return args, build(model)")
    assert eval_rows(unknown, ["TD701"]) == []


TRAINER = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))

        def forward(self, x):
            return self.body(x)

    class Trainer(object):
        def __init__(self, loader, val_loader):
            model = Net()
            self.model, self.optimizer = model, torch.optim.SGD(model.parameters(), lr=0.1)
            self.model = torch.nn.DataParallel(self.model)
            self.loader, self.val_loader = loader, val_loader

        def training(self):
            self.model.train()
            for x in self.loader:
                self.model(x).sum().backward()
                self.optimizer.step()

        def validation(self):
            for x in self.val_loader:
                with torch.no_grad():
                    out = self.model(x)

    def main(loader, val_loader):
        trainer = Trainer(loader, val_loader)
        for epoch in range(3):
            trainer.training()
            trainer.validation()
    """


def test_td701_trainer_class_whose_model_nothing_puts_in_eval() -> None:
    assert eval_rows(TRAINER, ["TD701"]) == [("TD701", _row(TRAINER, "out = self.model(x)"))]
    # an eval() anywhere in the file (here of the model, in another method) may set the mode: silent
    evals = TRAINER.replace(
        "        def validation(self):\n", "        def validation(self):\n            self.model.eval()\n"
    )
    assert eval_rows(evals, ["TD701"]) == []
    # a module's own submodule follows the mode its caller sets: silent
    module = TRAINER.replace("class Trainer(object):", "class Trainer(nn.Module):")
    assert eval_rows(module, ["TD701"]) == []


def test_td701_another_models_eval_and_helpers_called_after_do_not_hide_the_mode(tmp_path: Path) -> None:
    engine = """
        import torch

        def train_one_epoch(model, loader, optimizer, mode):
            model.train(mode)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()

        @torch.no_grad()
        def evaluate(loader, model):
            return [model(x) for x in loader]
        """
    train = """
        import torch
        from models import Net
        from engine import train_one_epoch, evaluate

        def main(args, train_loader, val_loader):
            model = Net()
            teacher = None
            if args.distill:
                teacher = Net()
                teacher.eval()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            if args.eval:
                evaluate(val_loader, model)
                return
            for epoch in range(3):
                train_one_epoch(model, train_loader, optimizer, args.finetune == "")
                evaluate(val_loader, model)
        """
    models = """
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))

            def forward(self, x):
                return self.body(x)
        """
    files = {"models.py": models, "engine.py": engine, "train.py": train}
    # the evaluation before any training; the one after train_one_epoch(mode unknown) stays silent
    assert checked_rows(tmp_path, files, "train.py", ["TD701"]) == [("TD701", 13)]
    # ``teacher = model``: the eval() may be the model's own
    aliased = train.replace("teacher = Net()", "teacher = model")
    assert checked_rows(tmp_path / "a", {**files, "train.py": aliased}, "train.py", ["TD701"]) == []


def test_td701_timm_create_model_of_no_known_name_takes_what_all_registered_models_share(tmp_path: Path) -> None:
    registry = """
        from timm.models.registry import register_model
        from torch import nn

        class Net(nn.Module):
            def __init__(self, p):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(8, 8), nn.Dropout(p))

            def forward(self, x):
                return self.body(x)

        @register_model
        def net_small(pretrained=False, **kwargs):
            return Net(0.1)

        @register_model
        def net_large(pretrained=False, **kwargs):
            return Net(0.2)
        """
    train = """
        import torch
        from timm.models import create_model
        import registry

        def main(model_name, loader, val_loader):
            model = create_model(model_name)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                opt.step()
            with torch.no_grad():
                out = [model(x) for x in val_loader]
        """
    files = {"registry.py": registry, "train.py": train}
    assert checked_rows(tmp_path, files, "train.py", ["TD701"]) == [("TD701", 12)]
    # the module is used for something else too: not a registering import, the name stays unknown
    used = train.replace(
        "model = create_model(model_name)", "model = create_model(model_name)\n            registry.Net"
    )
    assert checked_rows(tmp_path / "u", {**files, "train.py": used}, "train.py", ["TD701"]) == []


# ---------------------------------------------------------------- TD303
def test_td303_scaler_handed_to_a_project_function_that_only_steps_it(tmp_path: Path) -> None:
    helper = """
        def forward_backward(model, x, scaler):
            loss = model(x).mean()
            scaler.scale(loss).backward()
            return loss
        """
    train = """
        import torch
        from helper import forward_backward

        def train_epoch(model, loader, optimizer, scaler):
            for x in loader:
                forward_backward(model, x, scaler)
                if x.sum() > 0:
                    scaler.step(optimizer)

        def main(model, loader, optimizer):
            scaler = torch.amp.GradScaler("cuda")
            train_epoch(model, loader, optimizer, scaler)
        """
    files = {"helper.py": helper, "train.py": train}
    assert checked_rows(tmp_path, files, "train.py", ["TD303"]) == [("TD303", 8)]
    # the helper updates the scaler it is handed: silent
    updates = helper.replace("return loss", "scaler.update()\n    return loss")
    assert checked_rows(tmp_path / "u", {**files, "helper.py": updates}, "train.py", ["TD303"]) == []
    # handed to code we cannot read: silent
    unknown = train.replace("from helper import forward_backward", "from somelib import forward_backward")
    assert checked_rows(tmp_path / "v", {**files, "train.py": unknown}, "train.py", ["TD303"]) == []


def test_td303_one_finding_for_one_scaler_stepping_two_optimizers() -> None:
    src = """
    import torch

    def train(loader, net_g, net_d, optim_g, optim_d, scaler):
        for x in loader:
            scaler.scale(net_d(x).mean()).backward()
            scaler.step(optim_d)
            scaler.scale(net_g(x).mean()).backward()
            scaler.step(optim_g)

    scaler = torch.amp.GradScaler("cuda")
    train(loader, net_g, net_d, optim_g, optim_d, scaler)
    """
    (finding,) = check_findings(src, ["TD303"])
    assert finding.location.row == 9
    assert [r.location.row for r in finding.related] == [7]


# ---------------------------------------------------------------- TD203
ENGINE_TRAIN = """
    def train_one_epoch(model, loader, optimizer, loss_scaler):
        for x in loader:
            loss_scaler(model(x).mean(), optimizer)
    """
MAIN_TIMM = """
    import argparse
    import torch
    from timm.optim import create_optimizer
    from engine import train_one_epoch

    def get_args_parser():
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=5e-4)
        parser.add_argument("--batch-size", type=int, default=64)
        return parser

    def main(args):
        torch.distributed.init_process_group("nccl")
        model = torch.nn.parallel.DistributedDataParallel(build(), device_ids=[args.gpu])
        model_without_ddp = model.module
        linear_scaled_lr = args.lr
        args.lr = linear_scaled_lr
        optimizer = create_optimizer(args, model_without_ddp)
        for epoch in range(10):
            train_one_epoch(model, loader, optimizer, scaler)

    if __name__ == "__main__":
        main(get_args_parser().parse_args())
    """


def test_td203_timm_optimizer_built_from_args_driven_through_a_project_engine(tmp_path: Path) -> None:
    files = {"engine.py": ENGINE_TRAIN, "main.py": MAIN_TIMM}
    expected = ("TD203", _row(MAIN_TIMM, "optimizer = create_optimizer(", project=True))
    assert checked_rows(tmp_path, files, "main.py", ["TD203"]) == [expected]
    scaled = MAIN_TIMM.replace(
        "linear_scaled_lr = args.lr\n", "linear_scaled_lr = args.lr * args.batch_size * world_size() / 512.0\n"
    )
    assert checked_rows(tmp_path / "s", {**files, "main.py": scaled}, "main.py", ["TD203"]) == []


def test_td203_lr_reassigned_from_another_option_and_param_groups_of_the_ddp_model() -> None:
    src = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--blr", type=float, default=1e-4)
    args = parser.parse_args()
    torch.distributed.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(build())
    model_without_ddp = model.module
    if args.lr is None:
        args.lr = args.blr
    param_groups = groups_weight_decay(model_without_ddp, 0.05)
    optimizer = torch.optim.AdamW(param_groups, lr=args.lr)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
    """
    assert check_rows(src, ["TD203"]) == [("TD203", 15)]
    # ``args.lr *= 2``: changed in a way we do not follow, silent
    assert check_rows(src.replace("args.lr = args.blr", "args.lr *= 2"), ["TD203"]) == []


# ---------------------------------------------------------------- TD204 (yacs)
DEFAULTS = """
    from fvcore.common.config import CfgNode

    _C = CfgNode()
    _C.SOLVER = CfgNode()
    _C.SOLVER.WEIGHT_DECAY = 1e-4
    _C.SOLVER.NO_DECAY = 0.0
    _C.SOLVER.TWICE = 1e-4
    _C.SOLVER.TWICE = 0.0
    """
OPTIMIZER = """
    import torch

    def construct_optimizer(model, cfg):
        return torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=cfg.SOLVER.WEIGHT_DECAY)
    """


def test_td204_weight_decay_from_the_projects_yacs_defaults(tmp_path: Path) -> None:
    files = {"setup.py": "", "proj/config/defaults.py": DEFAULTS, "proj/models/optimizer.py": OPTIMIZER}
    result = check(tmp_path, files, "proj/models/optimizer.py", ["TD204"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD204", 4)]
    assert "weight_decay=0.0001" in result.findings[0].message
    for key in ("NO_DECAY", "TWICE", "MISSING"):  # zero, assigned twice, not a default: silent
        other = OPTIMIZER.replace("WEIGHT_DECAY", key)
        rows = checked_rows(
            tmp_path / key, {**files, "proj/models/optimizer.py": other}, "proj/models/optimizer.py", ["TD204"]
        )
        assert rows == [], key
    # two defaults modules: which one the run reads is not ours to tell
    two = {**files, "other/config.py": DEFAULTS}
    assert checked_rows(tmp_path / "two", two, "proj/models/optimizer.py", ["TD204"]) == []


# ---------------------------------------------------------------- TD703
def test_td703_loss_from_a_helpers_tuple_result() -> None:
    src = """
    import torch

    def cal_performance(pred, gold):
        loss = torch.nn.functional.cross_entropy(pred, gold)
        return loss, (pred.argmax(1) == gold).sum().item()

    def train_epoch(model, loader, optimizer):
        total_loss = 0
        for x, y in loader:
            optimizer.zero_grad()
            loss, n_correct = cal_performance(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss += loss
        return total_loss
    """
    assert check_rows(src, ["TD703"]) == [("TD703", 15)]
    assert check_rows(src.replace("total_loss += loss", "total_loss += loss.item()"), ["TD703"]) == []
    # rebound by a loop after the unpacking: not the helper's loss any more
    rebound = src.replace(
        "            total_loss += loss\n", "            for loss in [0.0]:\n                total_loss += loss\n"
    )
    assert check_rows(rebound, ["TD703"]) == []
