"""Runtime halves of TD201-TD206 on tiny real CPU loops: the mistake vs its healthy twin."""

from __future__ import annotations

import torch
from rule_loops import FAKE_A100, codes, conv_bn_net, finding, mlp, train_steps, vectors
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import traindoctor
from traindoctor.recipes import param_groups


def _loader(batch: int, samples: int | None = None, features: int = 8) -> DataLoader:
    n = samples or batch * 3
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(n, features, generator=gen), torch.randint(0, 2, (n,), generator=gen))
    return DataLoader(data, batch_size=batch)


def _epoch(model: nn.Module, opt: torch.optim.Optimizer, loader: DataLoader, sched=None) -> None:
    for x, y in loader:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


# ---------------------------------------------------------------- TD201 (GPU-only: fake device)
def _fp16_cuda_loop(doctor, batch: int) -> None:
    doctor.uses_cuda = True  # what a CUDA run reports
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        doctor.emit("on_autocast_enter", "cuda", torch.float16)
        x, y = vectors(batch, seed=step)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def test_td201_batch_not_multiple_of_8_under_fp16_on_cuda() -> None:
    with traindoctor.watch(select=["TD201"], device=FAKE_A100) as doctor:
        _fp16_cuda_loop(doctor, batch=12)
    f = finding(doctor, "TD201")
    assert f.evidence["batch"] == 12 and f.evidence["autocast_dtypes"] == ["float16"]
    assert f.evidence["linear_layers"] == 2
    assert "(8 or 16)" in f.message


def test_td201_silent_for_multiple_of_8_and_on_cpu() -> None:
    with traindoctor.watch(select=["TD201"], device=FAKE_A100) as good:
        _fp16_cuda_loop(good, batch=16)
    with traindoctor.watch(select=["TD201"]) as cpu:  # the real device: a CPU
        _fp16_cuda_loop(cpu, batch=12)
    assert codes(good) == [] and codes(cpu) == []


# ---------------------------------------------------------------- TD202
def test_td202_small_batchnorm_batch_with_accumulation() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD202"]) as doctor:
        train_steps(model, opt, steps=3, batch=4, accumulation=4)
    ev = finding(doctor, "TD202").evidence
    assert ev["batchnorm_batch"] == 4 and ev["backward_per_step"] == 4
    assert ev["effective_batch"] == 16 and ev["batchnorm_layers"] == 1


def test_td202_silent_for_large_batch_and_for_eval_only_batchnorm() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD202"]) as doctor:
        train_steps(model, opt, steps=2, batch=32)
        model.eval()
        with torch.no_grad():
            model(torch.randn(2, 3, 8, 8))  # tiny evaluation batches do not matter
    assert codes(doctor) == []


def test_td202_threshold_is_configurable() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD202"], thresholds={"TD202.min_batch": 4}) as doctor:
        train_steps(model, opt, steps=2, batch=4)
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD203
REFERENCE = {"reference_batch": 16, "reference_lr": 0.1}


def test_td203_effective_batch_grew_without_lr_scaling() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as doctor:
        _epoch(model, opt, _loader(64))
    f = finding(doctor, "TD203")
    ev = f.evidence
    assert ev["effective_batch"] == 64 and ev["batch_source"] == "loader"
    assert ev["scaling_rule"] == "linear" and ev["recommended_lr"] == 0.4
    assert "0.4" in f.message


def test_td203_adam_gets_square_root_rule() -> None:
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as doctor:
        _epoch(model, opt, _loader(64))
    ev = finding(doctor, "TD203").evidence
    assert ev["scaling_rule"] == "sqrt" and abs(ev["recommended_lr"] - 0.2) < 1e-12


def test_td203_silent_when_scaled_same_batch_or_no_reference() -> None:
    model = mlp()
    scaled = torch.optim.SGD(model.parameters(), lr=0.4)
    same = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as a:
        _epoch(model, scaled, _loader(64))
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as b:
        _epoch(model, same, _loader(16))
    with traindoctor.watch(select=["TD203"]) as c:
        _epoch(model, same, _loader(64))
    assert codes(a) == [] and codes(b) == [] and codes(c) == []


# ---------------------------------------------------------------- TD204
def test_td204_adamw_over_all_parameters_decays_bias_and_norm() -> None:
    model = conv_bn_net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # default weight_decay=0.01
    with traindoctor.watch(select=["TD204"]) as doctor:
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD204")
    ev = f.evidence
    assert ev["names"] == ["0.bias", "1.weight", "1.bias", "6.bias"]
    assert ev["kinds"] == {"bias": 2, "norm": 2} and ev["decayed"] == 4
    assert ev["weight_decay"] == [0.01]


def test_td204_classifies_by_module_type_not_name() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.gain = nn.LayerNorm(8)  # a norm layer with an unhelpful name
            self.fc = nn.Linear(8, 2, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.gain(self.proj(x)))

    model = Block()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)
    with traindoctor.watch(select=["TD204"]) as doctor:
        train_steps(model, opt, steps=1, data=vectors)
    ev = finding(doctor, "TD204").evidence
    assert ev["names"] == ["proj.bias", "gain.weight", "gain.bias"]
    assert ev["kinds"] == {"bias": 1, "norm": 2}


def test_td204_silent_with_proper_groups_or_no_decay() -> None:
    model = conv_bn_net()
    good = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3)
    with traindoctor.watch(select=["TD204"]) as a:
        train_steps(model, good, steps=1)
    plain = torch.optim.SGD(model.parameters(), lr=0.1)  # weight_decay=0
    with traindoctor.watch(select=["TD204"]) as b:
        train_steps(model, plain, steps=1)
    assert codes(a) == [] and codes(b) == []


# ---------------------------------------------------------------- TD205
def _name_filtered_groups(model: nn.Module, no_decay: list[str]) -> list[dict]:
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": 0.05},
        {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]


def test_td205_declared_patterns_that_match_nothing() -> None:
    model = conv_bn_net()
    patterns = ["bias", "BatchNorm.weight"]
    opt = torch.optim.AdamW(_name_filtered_groups(model, patterns), lr=1e-3)
    with traindoctor.watch(select=["TD205"], thresholds={"no_decay": patterns}) as doctor:
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD205")
    assert f.evidence["dead_patterns"] == ["BatchNorm.weight"]
    assert "0.weight" in f.evidence["example_names"]


def test_td205_empty_no_decay_group_without_declared_patterns() -> None:
    model = conv_bn_net()
    opt = torch.optim.AdamW(_name_filtered_groups(model, ["BatchNorm", "LayerNorm.bias"]), lr=1e-3)
    with traindoctor.watch(select=["TD205"]) as doctor:
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD205")
    assert f.evidence["empty_no_decay_groups"] == [1]
    assert f.evidence["decayed_bias_norm_params"] == 4


def test_td205_silent_when_patterns_match() -> None:
    model = conv_bn_net()
    patterns = ["bias", "1.weight"]
    opt = torch.optim.AdamW(_name_filtered_groups(model, patterns), lr=1e-3)
    with traindoctor.watch(select=["TD205"], thresholds={"no_decay": "bias, 1.weight"}) as doctor:
        train_steps(model, opt, steps=1)
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD206
def test_td206_large_batch_starts_at_peak_lr() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with traindoctor.watch(select=["TD206"]) as doctor:
        _epoch(model, opt, _loader(1024))
    ev = finding(doctor, "TD206").evidence
    assert ev["effective_batch"] == 1024 and ev["first_lrs"] == [0.5, 0.5, 0.5]


def test_td206_silent_with_warmup_or_small_batch() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
    with traindoctor.watch(select=["TD206"]) as a:
        _epoch(model, opt, _loader(1024), sched=warm)
    opt2 = torch.optim.SGD(model.parameters(), lr=0.5)
    with traindoctor.watch(select=["TD206"]) as b:
        _epoch(model, opt2, _loader(64))
    assert codes(a) == [] and codes(b) == []


def _lbfgs_steps(model: nn.Module, opt: torch.optim.Optimizer, x, y, steps: int) -> None:
    """pytorch/examples time_sequence_prediction's shape: the whole data set as one batch,
    LBFGS re-evaluating the loss in a closure up to ``max_iter`` times per step."""
    for _ in range(steps):

        def closure():
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)


def test_td206_lbfgs_closure_evaluations_are_not_gradient_accumulation() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=20)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    with traindoctor.watch(select=["TD206"]) as doctor:
        _lbfgs_steps(model, opt, x, y, steps=6)
    assert codes(doctor) == []  # was: "effective batch is 1280" (64 x 20 closure calls)
    calls = [(r.backward_calls, r.closure_backward_calls) for r in doctor.records]
    assert all(inside == total > 1 for total, inside in calls)
    assert {r.accumulated_backward_calls for r in doctor.records} == {1}


def test_td206_real_accumulation_to_a_large_batch_still_fires() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with traindoctor.watch(select=["TD206"]) as doctor:
        for _ in range(4):
            for _ in range(20):  # 20 micro-batches of 64 accumulated into each step
                nn.functional.mse_loss(model(torch.randn(64, 8)), torch.randn(64, 1)).backward()
            opt.step()
            opt.zero_grad()
    ev = finding(doctor, "TD206").evidence
    assert ev["effective_batch"] == 1280 and ev["accumulation"] == 20


def test_td206_lr_scaled_from_reference_without_warmup() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.8)
    with traindoctor.watch(select=["TD206"], thresholds={"reference_lr": 0.1}) as doctor:
        _epoch(model, opt, _loader(64))
    assert finding(doctor, "TD206").evidence["lr_factor"] == 8.0


# ---------------------------------------------------------------- CLI shorthands
SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(192, 8), torch.randint(0, 2, (192,)))
for x, y in DataLoader(data, batch_size=64):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""


def test_cli_reference_options_reach_td203(tmp_path) -> None:
    import json

    from traindoctor.doctor.cli import main, parse_args

    opts = parse_args(["--reference-batch", "16", "--reference-lr=0.1", "--no-decay", "bias,bn", "x.py"])
    assert opts.thresholds == {"reference_batch": 16, "reference_lr": 0.1, "no_decay": "bias,bn"}
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    rc = main(
        [
            "--select",
            "TD203",
            "--reference-batch",
            "16",
            "--reference-lr",
            "0.1",
            "--output-format",
            "json",
            "-o",
            str(out),
            str(script),
        ]
    )
    assert rc == 0
    [f] = json.loads(out.read_text())["findings"]
    assert f["code"] == "TD203" and f["evidence"]["effective_batch"] == 64
