"""Mixed-precision rules (TD301-TD305, TD307, TD308) beyond their own examples.

Each test runs the real engine on a realistic snippet and asserts the finding (row, column,
message), the fixed text, or the silence that precision requires.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.amp.static import BFLOAT16, FLOAT16, amp_facts

AMP_CODES = ["TD301", "TD302", "TD303", "TD304", "TD305", "TD307", "TD308"]


def run(src: str, codes=None, fix: bool = False, min_torch: str = "2.13"):
    source = textwrap.dedent(src).lstrip("\n")
    result = check_source(
        source, "train.py", Settings(min_torch_version=min_torch), instantiate(codes or AMP_CODES), fix=fix
    )
    assert not result.internal_errors, result.internal_errors
    return source, result


def found(src: str, codes=None, **kw) -> list[tuple[str, int]]:
    _, result = run(src, codes, **kw)
    return [(f.code, f.location.row) for f in result.findings]


def facts_of(src: str):
    source = textwrap.dedent(src).lstrip("\n")
    ctx = file_context("x.py", source, ast.parse(source), Settings())
    return amp_facts(ctx)


# ---------------------------------------------------------------------- shared analysis
@pytest.mark.parametrize(
    "expr,dtype",
    [
        ('torch.autocast("cuda")', FLOAT16),
        ('torch.autocast("cuda:0")', FLOAT16),
        ('torch.autocast("cpu")', BFLOAT16),
        ("torch.cuda.amp.autocast()", FLOAT16),
        ("torch.cpu.amp.autocast()", BFLOAT16),
        ('torch.autocast("cuda", dtype=torch.bfloat16)', BFLOAT16),
        ('torch.autocast("cuda", torch.bfloat16)', BFLOAT16),
        ("torch.cuda.amp.autocast(True, torch.bfloat16)", BFLOAT16),
        ('torch.amp.autocast(device_type="cpu", dtype=torch.half)', FLOAT16),
        ('torch.autocast("cuda", dtype=AMP_DTYPES[args.dtype])', None),
        ('torch.autocast("xla")', None),
        ("torch.autocast(device_type=dev.type)", None),  # nothing in the file targets CUDA
        ('torch.autocast("cuda", **amp_kwargs)', None),
    ],
)
def test_autocast_dtype_resolution(expr, dtype):
    facts = facts_of(f"import torch\nwith {expr}:\n    y = f(x)\n")
    [region] = facts.autocasts
    assert region.dtype == dtype


def test_autocast_through_binding_conditional_and_partial():
    facts = facts_of(
        """
        import contextlib
        import functools
        import torch

        a = torch.autocast("cuda", dtype=torch.bfloat16)
        b = contextlib.nullcontext() if cpu else torch.autocast(device_type="cpu")
        c = functools.partial(torch.autocast, "cuda", dtype=torch.float16)
        with a:
            pass
        with b:
            pass
        with c():
            pass
        with contextlib.nullcontext():
            pass
        """
    )
    assert [(r.site.lineno, r.dtype) for r in facts.autocasts] == [
        (8, BFLOAT16),
        (10, BFLOAT16),
        (12, FLOAT16),
    ]


def test_enabled_flag_literal_constant_and_argparse():
    facts = facts_of(
        """
        import argparse
        import torch

        USE_AMP = False
        p = argparse.ArgumentParser()
        p.add_argument("--amp", action="store_true")
        args = p.parse_args()
        with torch.autocast("cuda", enabled=False):
            pass
        with torch.autocast("cuda", enabled=USE_AMP):
            pass
        with torch.autocast("cuda", enabled=args.amp):
            pass
        with torch.autocast("cuda"):
            pass
        """
    )
    assert [r.enabled for r in facts.autocasts] == [False, False, None, True]


# ---------------------------------------------------------------------- TD301
def test_td301_reports_the_autocast_with_position_and_message():
    src, result = run(
        """
        import torch

        def train(model, loader, optimizer):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                loss.backward()
                optimizer.step()
        """,
        ["TD301"],
    )
    [f] = result.findings
    assert (f.code, f.location.row, f.location.column) == ("TD301", 5, 14)
    assert "line 7" in f.message and "GradScaler" in f.message
    assert f.fix is None


def test_td301_is_per_function_not_per_file():
    assert found(
        """
        import torch

        scaler = torch.amp.GradScaler("cuda")

        def pretrain(batch):
            with torch.autocast("cuda"):
                loss = model(batch).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        def finetune(batch):
            with torch.autocast("cuda"):
                loss = head(model(batch)).mean()
            loss.backward()
            opt.step()
        """,
        ["TD301"],
    ) == [("TD301", 13)]


def test_td301_silent_for_fp16_branch_with_scaler_and_fp32_branch_without():
    # The common "if use_fp16: autocast + scaler, else: plain" shape (seen in real scripts).
    assert (
        found(
            """
        import torch

        def main():
            use_fp16 = cfg.get("fp16", False)
            scaler = torch.cuda.amp.GradScaler() if use_fp16 else None
            for batch in loader:
                if use_fp16:
                    with torch.cuda.amp.autocast():
                        loss = criterion(model(batch), batch) / accum
                    scaler.scale(loss).backward()
                else:
                    loss = criterion(model(batch), batch) / accum
                    loss.backward()
        """,
            ["TD301"],
        )
        == []
    )


def test_td301_silent_when_backward_is_not_of_the_autocast_loss():
    assert (
        found(
            """
        import torch

        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            with torch.no_grad(), torch.autocast("cuda"):
                preview = model(x_val)
        """,
            ["TD301"],
        )
        == []
    )


def test_td301_unknown_device_reported_only_when_the_file_targets_cuda():
    body = textwrap.dedent(
        """
        import torch

        def step(model, batch, device):
            with torch.autocast(device_type=device.type):
                loss = model(batch).mean()
            loss.backward()
        """
    )
    assert found(body, ["TD301"]) == []
    assert found(body + "\nmodel.cuda()\n", ["TD301"]) == [("TD301", 4)]


# ---------------------------------------------------------------------- TD302
CLIP_TWICE = """
import torch

def step(loss):
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.nn.utils.clip_grad_value_(model.parameters(), 5.0)
    scaler.step(optimizer)
    scaler.update()
"""


def test_td302_two_clips_get_one_unscale():
    _, result = run(CLIP_TWICE, ["TD302"])
    assert [(f.location.row, f.fix is not None) for f in result.findings] == [(5, True), (6, False)]
    assert "`scaler.unscale_(optimizer)`" in result.findings[0].message
    _, fixed = run(CLIP_TWICE, ["TD302"], fix=True)
    assert fixed.fixed_source == CLIP_TWICE.lstrip("\n").replace(
        "    torch.nn.utils.clip_grad_norm_", "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip_grad_norm_"
    )
    assert fixed.findings == []


def test_td302_fix_keeps_crlf_line_endings():
    src = "import torch\r\nscaler.scale(loss).backward()\r\ntorch.nn.utils.clip_grad_norm_(ps, 1.0)\r\nscaler.step(opt)\r\nscaler.update()\r\n"
    result = check_source(src, "t.py", Settings(), instantiate(["TD302"]), fix=True)
    assert result.fixed_source == src.replace("torch.nn.utils.clip", "scaler.unscale_(opt)\r\ntorch.nn.utils.clip")


def test_td302_no_fix_when_step_takes_an_expression():
    _, result = run(
        """
        import torch

        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(optimizers[0])
        scaler.update()
        """,
        ["TD302"],
    )
    [f] = result.findings
    assert f.location.row == 4 and f.fix is None


def test_td302_silent_without_a_following_scaler_step():
    # Scaled gradients go straight to optimizer.step(): another bug, but not "before unscale_".
    assert (
        found(
            """
        import torch

        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        """,
            ["TD302"],
        )
        == []
    )


def test_td302_accumulation_with_unscale_under_the_same_condition():
    assert (
        found(
            """
        import torch

        def train(self, loader):
            for i, batch in enumerate(loader):
                with torch.amp.autocast("cuda"):
                    loss = self.train_step(batch) / self.accum
                self.scaler.scale(loss).backward()
                if (i + 1) % self.accum == 0:
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
        """,
            ["TD302"],
        )
        == []
    )


# ---------------------------------------------------------------------- TD303
def test_td303_position_and_message():
    _, result = run(
        """
        import torch

        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        """,
        ["TD303"],
    )
    [f] = result.findings
    assert (f.location.row, f.location.column) == (5, 1)
    assert "`scaler.update()`" in f.message


def test_td303_silent_for_unknown_objects_with_step():
    assert (
        found(
            """
        def train(engine, sched, opt):
            engine.step(opt)     # a framework's own step
            sched.step()
            opt.step()
        """,
            ["TD303"],
        )
        == []
    )


def test_td303_returned_scaler_may_be_updated_by_the_caller():
    assert (
        found(
            """
        import torch

        def make(opt):
            scaler = torch.amp.GradScaler()
            scaler.step(opt)
            return scaler
        """,
            ["TD303"],
        )
        == []
    )


# ---------------------------------------------------------------------- TD304
REAL_TD304 = """
import torch
from torch.cuda.amp import autocast, GradScaler

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def train(model, data, epochs):
    scaler = GradScaler()
    for single in data:
        with torch.cuda.amp.autocast():
            loss = model(single)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_td304_fix_on_a_real_shaped_script_is_exact_and_idempotent():
    _, result = run(REAL_TD304, ["TD304"], fix=True)
    assert result.fixed_source == REAL_TD304.lstrip("\n").replace(
        "scaler = GradScaler()", 'scaler = torch.amp.GradScaler("cuda")'
    ).replace("with torch.cuda.amp.autocast():", 'with torch.autocast("cuda"):')
    assert result.findings == []
    _, again = run(result.fixed_source, ["TD304"], fix=True)
    assert again.fixed_source is None


def test_td304_message_help_and_span():
    _, result = run("import torch\nwith torch.cuda.amp.autocast(enabled=amp):\n    pass\n", ["TD304"])
    [f] = result.findings
    assert f.message == '`torch.cuda.amp.autocast(...)` is deprecated; use `torch.autocast("cuda", ...)` instead.'
    assert (f.location.row, f.location.column, f.end_location.column) == (2, 6, 29)
    assert f.fix is not None and f.fix.is_safe


def test_td304_positional_cache_enabled_becomes_keyword():
    src = "import torch\nctx = torch.cuda.amp.autocast(True, torch.float16, False)\n"
    _, result = run(src, ["TD304"], fix=True)
    assert result.fixed_source == (
        'import torch\nctx = torch.autocast("cuda", enabled=True, dtype=torch.float16, cache_enabled=False)\n'
    )


def test_td304_version_gated_fallbacks_are_not_reported():
    assert (
        found(
            """
        import torch

        scaler = torch.amp.GradScaler(device="cuda") if TORCH_2_4 else torch.cuda.amp.GradScaler()
        if is_torch_version(">=", "2.3"):
            s2 = torch.amp.GradScaler("cuda")
        else:
            s2 = torch.cuda.amp.GradScaler()
        """,
            ["TD304"],
        )
        == []
    )


def test_td304_import_inside_a_function_does_not_count_for_the_fix():
    src = """
    from torch.cuda.amp import GradScaler

    def setup():
        import torch
        return torch.zeros(1)

    scaler = GradScaler()
    """
    _, result = run(src, ["TD304"], fix=True)
    assert [f.location.row for f in result.findings] == [7]
    assert result.fixed_source is None


def test_td304_old_torch_minimum():
    src = "import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\n"
    assert found(src, ["TD304"], min_torch="2.2") == [("TD304", 3)]
    assert found(src, ["TD304"], min_torch="1.9") == []


# ---------------------------------------------------------------------- TD305
def test_td305_silent_when_the_dtype_comes_from_config():
    assert (
        found(
            """
        import torch

        ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
        scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
        with ctx:
            logits, loss = model(X, Y)
        scaler.scale(loss).backward()
        """,
            ["TD305"],
        )
        == []
    )


def test_td305_message_and_position():
    _, result = run(
        """
        import torch

        scaler = torch.amp.GradScaler()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).mean()
        scaler.scale(loss).backward()
        """,
        ["TD305"],
    )
    [f] = result.findings
    assert (f.location.row, f.location.column) == (3, 10)
    assert "bfloat16" in f.message and f.message.endswith(".")


# ---------------------------------------------------------------------- TD307
def test_td307_reports_each_backward_inside_nested_regions_once():
    assert found(
        """
        import torch

        with torch.autocast("cuda", dtype=torch.bfloat16):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).mean()
                loss.backward()
            aux = model(z).mean()
            aux.backward()
        """,
        ["TD307"],
    ) == [("TD307", 6), ("TD307", 8)]


# ---------------------------------------------------------------------- TD308
def test_td308_half_after_to_device_on_a_pretrained_model():
    # Shape seen in a real fine-tuning script: fp16 weights *and* a GradScaler.
    _, result = run(
        """
        import torch
        import torch.optim as optim

        def main():
            model = XTTS2Model.from_pretrained(path)
            model.to(device).half()
            optimizer = optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                optimizer.step()
        """,
        ["TD308"],
    )
    [f] = result.findings
    assert (f.location.row, f.location.column) == (6, 5)
    assert "autocast" in f.message


def test_td308_helper_that_casts_for_evaluation_is_silent():
    assert (
        found(
            """
        import torch

        def evaluate(model, loader):
            model = model.to(dtype=torch.float16)
            return [model(x) for x in loader]

        def train(model, loader):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                opt.step()
        """,
            ["TD308"],
        )
        == []
    )


def test_td308_fp32_master_weights_recipe_is_silent():
    # Pre-AMP mixed precision: fp16 model, fp32 master copies in the optimizer.
    assert (
        found(
            """
        import torch

        model = Net().cuda().half()
        master = [p.detach().clone().float() for p in model.parameters()]
        optimizer = torch.optim.SGD(master, lr=0.1)
        """,
            ["TD308"],
        )
        == []
    )


def test_td308_module_subclass_chain_and_type_cast():
    assert found(
        """
        import torch
        from torch import nn

        class Base(nn.Module):
            pass

        class Net(Base):
            pass

        net = Net().cuda()
        net.type(torch.cuda.HalfTensor)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        """,
        ["TD308"],
    ) == [("TD308", 11)]


# ---------------------------------------------------------------------- robustness
@pytest.mark.parametrize(
    "src",
    [
        "import torch\nwith torch.autocast:\n    pass\n",
        "import torch\nwith torch.autocast(*a, **k):\n    loss.backward()\n",
        "import torch\nx.backward(); y.step(); scaler.step()\n",
        "import torch\ntorch.cuda.amp.GradScaler(*args)\n",
        "import torch\nf = lambda: torch.autocast('cuda')\nwith f():\n    loss.backward()\n",
        "import torch\ntorch.autograd.backward()\n",
        "model.half(1)\nmodel.to()\n",
    ],
)
def test_odd_code_never_crashes(src):
    run(src)


def test_td308_backward_without_any_update_is_silent():
    # torch's own DDP test shape: cast to half, run backward, assert on the gradients' dtype.
    src = """
        import torch

        def check_half_grads(model, inp):
            model = model.half()
            out = model(inp)
            out.sum().backward()
            for param in model.parameters():
                assert param.grad.dtype == torch.float16
        """
    assert found(src, ["TD308"]) == []


def test_td308_backward_and_step_through_a_passed_optimizer_fires():
    src = """
        import torch

        class Net(torch.nn.Module):
            pass

        def train(opt, loader):
            model = Net().cuda().half()
            for x in loader:
                model(x).sum().backward()
                opt.step()
        """
    assert found(src, ["TD308"]) == [("TD308", 7)]
