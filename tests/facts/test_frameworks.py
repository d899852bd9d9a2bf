"""The frameworks' forms of the ten mistakes (facts/frameworks/static.py): Hugging Face Trainer,
Lightning Trainer/LightningModule/Fabric, accelerate and apex. No framework is installed here:
the checker reads the calls, it never imports the libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.frameworks.static import hf_decayed_norm_params, lightning_hparam
from traindoctor.registry import all_rules
from traindoctor.static.context import FileContext

ALL = [r.code for r in all_rules() if r.static and r.code != "TD000"]


def _findings(src: str, codes=None, filename: str = "train.py"):
    result = check_source(textwrap.dedent(src), filename, Settings(min_torch_version="2.13"), instantiate(codes or ALL))
    assert not result.internal_errors
    return result.findings


def _rows(src: str, codes=None) -> list[tuple[str, int]]:
    return [(f.code, f.location.row) for f in _findings(src, codes)]


def test_checking_framework_code_imports_no_framework(tmp_path):
    # The point of the static checker: it needs none of them, even where they are installed
    # (the integration tests install them). Checked in a fresh interpreter.
    script = tmp_path / "train.py"
    script.write_text(HF_SCRIPT)
    probe = (
        "import sys\n"
        "from traindoctor.check.cli import main\n"
        f"main([{str(script)!r}, '--no-cache', '--exit-zero', '-q'])\n"
        "names = ('transformers', 'lightning', 'pytorch_lightning', 'accelerate', 'apex', 'torch')\n"
        "print('IMPORTED', [n for n in names if n in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "IMPORTED []" in out.stdout, out.stdout + out.stderr
    assert "TD10" in out.stdout  # it did check the Trainer script


HF_SCRIPT = """
import torch.nn as nn
from transformers import Trainer, TrainingArguments


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3)
        self.bn1 = nn.BatchNorm2d(32)
        self.gn = nn.GroupNorm(4, 32)
        self.final_norm = nn.GroupNorm(4, 32)
        self.head = nn.Linear(32, 10)
        self.norm = nn.LayerNorm(10)


model = ConvNet()
args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=4,
    gradient_accumulation_steps=8,
    weight_decay=0.01,
    dataloader_num_workers=4,
    dataloader_pin_memory=False,
    fp16=True,
    save_only_model=True,
)
trainer = Trainer(model=model, args=args, train_dataset=train_ds)
trainer.train()
"""


def test_hf_training_arguments_each_mistake_at_its_keyword():
    found = {f.code: f for f in _findings(HF_SCRIPT)}
    assert sorted(found) == ["TD101", "TD103", "TD202", "TD204", "TD306", "TD501"]
    assert found["TD202"].location.row == 20  # per_device_train_batch_size=4
    assert "4 x 8 samples" in found["TD202"].message
    assert found["TD204"].location.row == 22  # weight_decay=0.01
    # biases, LayerNorm (by type) and `final_norm` (by name) are excluded by the Trainer; the
    # BatchNorm and GroupNorm weights with other names are not
    assert "2 normalisation parameter(s)" in found["TD204"].message
    assert "`bn1.weight`" in found["TD204"].message and "`gn.weight`" in found["TD204"].message
    assert found["TD103"].location.row == 23  # dataloader_num_workers=4
    assert "4 worker processes" in found["TD103"].message
    assert found["TD101"].location.row == 24
    assert found["TD306"].location.row == 25 and found["TD306"].severity.value == "info"
    assert found["TD501"].location.row == 26 and "save_only_model" in found["TD501"].message


def test_hf_fixes_turn_on_pinning_and_persistence():
    result = check_source(
        textwrap.dedent(HF_SCRIPT),
        "train.py",
        Settings(min_torch_version="2.13"),
        instantiate(["TD101", "TD103"]),
        fix=True,
    )
    assert "dataloader_pin_memory=True," in result.fixed_source
    assert "    save_only_model=True, dataloader_persistent_workers=True,\n)" in result.fixed_source


def test_hf_default_workers_reported_and_cli_arguments_left_alone():
    assert _rows("""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments("out", per_device_train_batch_size=32)
    Trainer(model=model, args=args, train_dataset=ds).train()
    """) == [("TD102", 4)]
    # arguments parsed from the command line hold the fields' defaults, as argparse options do
    assert _rows("""
    from transformers import HfArgumentParser, Trainer, TrainingArguments

    (training_args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    Trainer(model=model, args=training_args, train_dataset=ds).train()
    """) == [("TD102", 4)]
    # ... but not when they come from a file
    assert (
        _rows("""
    from transformers import HfArgumentParser, Trainer, TrainingArguments

    (training_args,) = HfArgumentParser(TrainingArguments).parse_yaml_file("train.yaml")
    Trainer(model=model, args=training_args, train_dataset=ds).train()
    """)
        == []
    )


def test_hf_arguments_without_training_are_not_judged():
    # an evaluation script: arguments built, Trainer used for predict() only
    assert (
        _rows("""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments("out", fp16=True, save_only_model=True)
    trainer = Trainer(model=model, args=args)
    print(trainer.predict(test_ds))
    """)
        == []
    )
    # opaque **kwargs may hold the loader settings
    assert (
        _rows("""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments("out", **config)
    Trainer(model=model, args=args, train_dataset=ds).train()
    """)
        == []
    )


def test_hf_weight_decay_left_alone_with_own_optimizer_or_layernorm_only_model():
    assert (
        _rows(
            """
    import torch.nn as nn
    from transformers import Trainer, TrainingArguments

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
    args = TrainingArguments("out", weight_decay=0.05, dataloader_num_workers=2, dataloader_persistent_workers=True)
    trainer = Trainer(model=model, args=args, optimizers=(my_optimizer, None), train_dataset=ds)
    trainer.train()
    """,
            ["TD204"],
        )
        == []
    )
    assert (
        _rows(
            """
    import torch.nn as nn
    from transformers import Trainer, TrainingArguments

    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    args = TrainingArguments("out", weight_decay=0.05)
    Trainer(model=model, args=args, train_dataset=ds).train()
    """,
            ["TD204"],
        )
        == []
    )


def test_hf_trainer_exclusion_patterns_match_transformers():
    params = (
        ("encoder.bn1.weight", "torch.nn.BatchNorm2d"),
        ("encoder.bn1.bias", "torch.nn.BatchNorm2d"),
        ("down.0.norm1.weight", "torch.nn.GroupNorm"),
        ("mid.norm.weight", "torch.nn.GroupNorm"),
        ("input_layernorm.weight", "torch.nn.RMSNorm"),
        ("ln_f.weight", "torch.nn.LayerNorm"),
        ("block.post_norm.weight", "torch.nn.GroupNorm"),
    )
    assert hf_decayed_norm_params(params) == ["encoder.bn1.weight", "down.0.norm1.weight"]


LIT = """
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader


class LitNet(L.LightningModule):
    def __init__(self, lr: float = 0.1, weight_decay: float = 5e-4, batch_size: int = 8, workers: int = 4):
        super().__init__()
        self.save_hyperparameters()
        self.workers = workers
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    def train_dataloader(self):
        return DataLoader(train_set, batch_size=self.hparams.batch_size, shuffle=True, num_workers=self.workers)


trainer = L.Trainer(max_epochs=10, accelerator="gpu", accumulate_grad_batches=4, precision=16)
trainer.fit(LitNet())
trainer.save_checkpoint("final.ckpt")
"""


def test_lightning_module_hooks_and_trainer_flags():
    found = _findings(LIT)
    rows = sorted((f.code, f.location.row) for f in found)
    assert rows == [
        ("TD101", 23),
        ("TD103", 23),
        ("TD202", 23),
        ("TD204", 20),
        ("TD210", 13),  # Conv2d with a bias right before BatchNorm2d
        ("TD304", 26),
        ("TD306", 26),
    ]
    by = {f.code: f for f in found}
    assert "`LitNet`" in by["TD204"].message and "weight_decay=0.0005" in by["TD204"].message
    assert "Lightning iterates this `train_dataloader` every epoch" in by["TD103"].message
    assert "8 x 4 samples" in by["TD202"].message
    assert 'precision="16-mixed"' in by["TD304"].message
    assert by["TD304"].fix is not None and by["TD304"].fix.edits[0].content == '"16-mixed"'
    # Lightning's own checkpoint (`trainer.save_checkpoint`) is complete: no TD50x
    assert not any(f.code.startswith("TD50") for f in found)


def _ctx(src: str) -> FileContext:
    src = textwrap.dedent(src)
    return file_context("m.py", src, ast.parse(src), Settings(min_torch_version="2.13"))


def _attr(ctx: FileContext, text: str) -> ast.Attribute:
    return next(a for a in ctx.of(ast.Attribute) if ast.unparse(a) == text and isinstance(a.ctx, ast.Load))


def test_lightning_hparam_reads_init_defaults_only_on_evidence():
    ctx = _ctx("""
    import lightning.pytorch as pl

    class M(pl.LightningModule):
        def __init__(self, lr=0.1, wd=1e-4, workers=4, n=2):
            super().__init__()
            self.lr = lr
            self.wd = wd
            self.workers = workers
            if n > 1:
                n = 1
            self.n = n

        def setup(self, stage):
            self.workers = self.workers // 8

        def configure_optimizers(self):
            return make(self.lr, self.wd, self.workers, self.n)

    model = M(wd=0.0)
    """)
    assert lightning_hparam(ctx, _attr(ctx, "self.lr")) == 0.1
    # the file builds M(wd=0.0): the default is not the value
    assert repr(lightning_hparam(ctx, _attr(ctx, "self.wd"))) == "UNKNOWN"
    # reassigned in setup(): unknown, but the declared default is still there for "uses workers"
    assert repr(ctx.value(_attr(ctx, "self.workers"))) == "UNKNOWN"
    assert lightning_hparam(ctx, _attr(ctx, "self.workers"), declared=True) == 4
    # the parameter is rebound in __init__: its default is not its value
    assert repr(ctx.value(_attr(ctx, "self.n"))) == "UNKNOWN"


def test_plain_module_init_defaults_are_not_values():
    ctx = _ctx("""
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self, p=0.5):
            super().__init__()
            self.p = p

        def forward(self, x):
            return drop(x, self.p)
    """)
    assert repr(ctx.value(_attr(ctx, "self.p"))) == "UNKNOWN"


def test_lightning_cli_trainer_defaults_set_benchmark():
    src = """
    import torch
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch import LightningModule
    import torchvision

    class M(LightningModule):
        def __init__(self):
            super().__init__()
            self.model = torchvision.models.resnet18()

        def training_step(self, batch, i):
            return self.model(batch).sum()

    LightningCLI(M, trainer_defaults={"benchmark": True, "max_epochs": 90})
    """
    assert [f for f in _findings(src, ["TD401"])] == []


def test_lightning_benchmark_with_deterministic():
    assert _rows(
        """
    import pytorch_lightning as pl

    trainer = pl.Trainer(
        benchmark=True,
        deterministic=True,
    )
    """,
        ["TD403"],
    ) == [("TD403", 6)]
    assert (
        _rows(
            """
    import pytorch_lightning as pl

    trainer = pl.Trainer(benchmark=False, deterministic=True)
    """,
            ["TD403"],
        )
        == []
    )


def test_fabric_checkpoint_is_judged_by_what_it_holds():
    src = """
    import torch
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cuda", precision="bf16-mixed")
    model = torch.nn.Linear(32, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)
    for epoch in range(10):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            fabric.backward(loss)
            optimizer.step()
        fabric.save("last.ckpt", {"model": model, "optimizer": optimizer, "epoch": epoch})
    """
    assert [f.code for f in _findings(src) if f.code.startswith(("TD50", "TD30"))] == []


def test_accelerate_owns_the_scaler_and_saves_complete_state():
    found = _findings("""
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=4)
    model = torch.nn.Sequential(torch.nn.Conv1d(8, 16, 3), torch.nn.BatchNorm1d(16))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(train_set, batch_size=4, num_workers=4, persistent_workers=True, pin_memory=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(10):
        for x, y in loader:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = model(x).mean()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        accelerator.save_state(f"ckpt/{epoch}")
    """)
    codes = {f.code: f.location.row for f in found}
    assert "TD301" not in codes and not any(c.startswith("TD50") for c in codes)
    assert codes["TD202"] == 9 and codes["TD306"] == 6


def test_apex_amp_is_deprecated_without_fix():
    found = _findings("""
    import torch
    from apex import amp

    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        with amp.scale_loss(criterion(model(x), y), optimizer) as scaled:
            scaled.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
        optimizer.step()
    """)
    assert [(f.code, f.location.row) for f in found] == [("TD304", 5), ("TD304", 7)]
    assert all(f.fix is None and "apex" in f.message for f in found)


@pytest.mark.parametrize("name", ["transformers", "lightning", "accelerate"])
def test_framework_names_in_strings_alone_do_not_fire(name):
    assert (
        _rows(f"""
    # a script that mentions {name} but uses none of it
    print("{name} TrainingArguments Trainer(precision=16) fp16=True")
    """)
        == []
    )


def test_frameworks_that_set_the_sampler_epoch_are_not_reported():
    src = """
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, DistributedSampler

    accelerator = Accelerator()
    sampler = DistributedSampler(train_set, shuffle=True)
    loader = DataLoader(train_set, batch_size=64, sampler=sampler)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(10):
        for x, y in loader:
            accelerator.backward(model(x).sum())
            optimizer.step()
    """
    assert _rows(src, ["TD601"]) == []
    # the same loop without accelerate's wrapper is reported at the sampler
    plain = src.replace("model, optimizer, loader = accelerator.prepare(model, optimizer, loader)", "pass")
    assert _rows(plain, ["TD601"]) == [("TD601", 7)]


def test_trl_configs_are_training_arguments():
    found = _findings("""
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(output_dir="qwen-sft", fp16=True, dataloader_num_workers=2)
    trainer = SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=config, train_dataset=dataset)
    trainer.train()
    """)
    assert sorted((f.code, f.location.row) for f in found) == [("TD103", 4), ("TD306", 4)]
