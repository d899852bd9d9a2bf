"""TD301 fp16-without-grad-scaler: a float16 autocast loss is backpropagated without loss scaling."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Related, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.amp import GradScaler
    from torch.optim import Optimizer

    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class Fp16WithoutGradScaler(Rule):
    code = "TD301"
    name = "fp16-without-grad-scaler"
    severity = Severity.ERROR
    summary = (
        "A loss computed under float16 autocast is backpropagated without a GradScaler; "
        "scale it with `scaler.scale(loss).backward()` or autocast to bfloat16."
    )
    gpu_only = False
    static = True
    triggers = ("autocast",)
    runtime = True
    fixable = "never"

    what_it_does = """
        Finds float16 autocast regions (`torch.autocast("cuda")`, whose default dtype on CUDA is
        float16, `torch.cuda.amp.autocast()`, or an explicit `dtype=torch.float16`) whose loss is
        backpropagated with a plain `loss.backward()` in the same function, with no GradScaler
        in that function, or scaled by a GradScaler the file constructs with `enabled=False`
        (its `scale()` returns the loss unchanged). The finding points at the autocast.

        Each function is judged on its own: a GradScaler used correctly in one training step
        does not protect a plain `loss.backward()` in another. An autocast used only for
        inference, one disabled with `enabled=False`, and a bfloat16 or CPU autocast
        (`torch.autocast("cpu")` defaults to bfloat16) are not reported. When the device type
        cannot be resolved and no dtype is given, the rule stays silent unless the script
        targets CUDA.

    Frameworks that own the scaler count as scaling: `accelerator.backward(loss)` and
    `fabric.backward(loss)` scale the loss when the framework runs float16 mixed precision
    (`Accelerator(mixed_precision="fp16")`, `Fabric(precision="16-mixed")`, or a setting the file
    does not spell out, such as `accelerate launch --mixed_precision fp16`). When every
    `Accelerator`/`Fabric` of the file is told a precision without loss scaling
    (`mixed_precision="no"`/`"bf16"`, `precision="32-true"`/`"bf16-mixed"`), a hand-written
    float16 autocast backpropagated through it is reported like a plain `loss.backward()`.
    """
    why_bad = """
        float16 has a 5-bit exponent: its smallest subnormal is about 6e-8 and its largest value
        65504. Under float16 autocast the backward pass runs in float16 too, and many gradient
        values (small activations times small upstream gradients) fall below that range and
        flush to zero. The weights those gradients belong to silently stop learning; training
        often still "works", just worse. `GradScaler` multiplies the loss by a large factor
        before `backward()` so gradients stay representable, divides them back before the
        optimizer step, and skips steps whose gradients overflowed.

        bfloat16 has float32's 8-bit exponent, so a bfloat16 autocast needs no scaler.
    """
    example = """
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda"):  # float16 by default on CUDA
                loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
    """
    use_instead = """
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = criterion(model(x.cuda()), y.cuda())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        # or let traindoctor pick: bfloat16 with no scaling on GPUs that support it
        # (compute capability >= 8.0), float16 with an enabled GradScaler on older ones.
        from traindoctor.recipes import autocast_settings
        amp = autocast_settings("cuda")
        for x, y in loader:
            optimizer.zero_grad()
            with amp.autocast():
                loss = criterion(model(x.cuda()), y.cuda())
            amp.scaler.scale(loss).backward()
            amp.scaler.step(optimizer)
            amp.scaler.update()
    """
    options = """
    No thresholds. At run time a backward() counts when a float16 autocast region was entered
    since the previous backward() and no enabled GradScaler's `scale()` was called after it. The
    evidence samples the gradients at the first 3 such optimizer steps: the share of gradient
    elements that are exactly zero.
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html#gradient-scaling",
        "https://pytorch.org/docs/stable/notes/amp_examples.html",
        "https://arxiv.org/abs/1710.03740",
    )

    valid = (
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Valid(
            """
            import torch

            for x, y in loader:
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            def train(model, loader, optimizer):
                for x, y in loader:
                    with torch.autocast("cpu"):  # bfloat16 on CPU
                        loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            from torch.cuda.amp import autocast

            def evaluate(model, loader):
                model.eval()
                with torch.no_grad(), autocast():
                    return sum(model(x).sum() for x, in loader)

            def train(model, loader, optimizer):
                for x, y in loader:
                    loss = model(x).sum()   # full precision
                    loss.backward()
                    optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            use_amp = args.amp
            scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
            for x, y in loader:
                with torch.cuda.amp.autocast(enabled=use_amp):
                    loss = criterion(model(x), y)
                if use_amp:
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            for x, y in loader:
                with torch.autocast("cuda", enabled=False):
                    loss = criterion(model(x), y)
                loss.backward()
            """
        ),
        Valid(
            """
            import torch

            def step(model, batch, device):
                # the device is only known at run time and nothing here targets CUDA
                with torch.autocast(device_type=device.type):
                    loss = model(batch).mean()
                loss.backward()
            """
        ),
        Valid(
            """
            from accelerate import Accelerator
            import torch

            accelerator = Accelerator(mixed_precision="fp16")
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                accelerator.backward(loss)
            """
        ),
    )

    invalid = (
        Invalid(
            """
            import torch

            # a GradScaler made inert: scale() hands the loss back unchanged
            scaler = torch.cuda.amp.GradScaler(enabled=False)
            for x, y in loader:
                optimizer.zero_grad()
                with torch.cuda.amp.autocast(enabled=True):  # TD301
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Invalid(
            """
            import torch

            model = Net().cuda()
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda"):  # TD301
                    loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """
        ),
        Invalid(
            """
            from torch.cuda.amp import autocast as amp_autocast

            def train_step(model, batch, optimizer):
                with amp_autocast():  # TD301
                    out = model(batch["input"])
                    loss = out.loss / 4
                loss.backward()
                optimizer.step()
            """
        ),
        Invalid(
            """
            import torch

            half = torch.float16
            for x, y in loader:
                with torch.autocast("cuda", half):  # TD301
                    logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
                loss.backward()
                optimizer.step()
            """
        ),
        Invalid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")

            def train_generator(batch):
                with torch.autocast("cuda"):
                    loss_g = gen_loss(batch)
                scaler.scale(loss_g).backward()
                scaler.step(opt_g)
                scaler.update()

            def train_critic(batch):
                with torch.autocast(device_type="cuda", dtype=torch.float16):  # TD301
                    loss_d = critic_loss(batch)
                loss_d.backward()
                opt_d.step()
            """
        ),
        Invalid(
            """
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            amp_ctx = torch.autocast(device_type=device.type)
            for x, y in loader:
                with amp_ctx:  # TD301
                    loss = criterion(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
            """
        ),
        Invalid("""
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(mixed_precision="no")  # the framework keeps no GradScaler
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):  # TD301
                loss = model(x, y)
            accelerator.backward(loss)
            optimizer.step()
        """),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.amp.static import amp_facts

        facts = amp_facts(ctx)
        if not facts.file_uses_autocast or not facts.backwards:
            return
        for region in facts.with_autocasts():
            if not region.is_fp16:
                continue
            if facts.live_scaler_used_in(region.scope):
                continue
            plain = [
                b
                for b in facts.backwards_in(region.scope)
                if (b.kind == "direct" or (b.kind == "scaled" and facts.inert_scaler(b.scaler, region.scope)))
                and facts.flows_from(region, b.loss, b.call)
            ]
            if not plain:
                continue
            row = plain[0].call.lineno
            inert = ""
            related: tuple[Related, ...] = ()
            if plain[0].kind == "scaled":
                inert = (
                    f" (`{plain[0].scaler}` is a GradScaler constructed with `enabled=False`: its "
                    "`scale()` returns the loss unchanged)"
                )
                disabled = [s for s in facts.scaler_constructions if s.enabled is False and s.target]
                named = [s for s in disabled if s.target == plain[0].scaler]  # else: passed in
                related = tuple(
                    Related(ctx.filename, ctx.location(s.call), "the GradScaler is constructed disabled here")
                    for s in named or disabled
                )
            yield ctx.report(
                self,
                region.site,
                f"This float16 autocast's loss is backpropagated without loss scaling (line {row}){inert}; "
                "use `scaler.scale(loss).backward()` with a `torch.amp.GradScaler`, "
                "or autocast to `torch.bfloat16`.",
                help="Scale the loss with a `GradScaler` before `backward()`",
                related=related,
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class Fp16WithoutGradScalerMonitor(Monitor):
    """Backward passes of losses computed under float16 autocast with no (enabled) GradScaler.

    A backward counts when a float16 autocast region was entered since the previous backward and
    no enabled ``GradScaler.scale()`` was called since that region. Evidence: the share of gradient
    elements that are exactly zero at the first flagged optimizer steps (underflow shows up as
    zeros), the autocast device and dtype.
    """

    rule = Fp16WithoutGradScaler

    #: Optimizer steps whose gradients are inspected (each costs one pass over the gradients).
    SAMPLES = 3

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.fp16_device: str | None = None
        self.device_seen: str | None = None
        self.site: Site | None = None
        self.scaled = False
        self.flagged_backwards = 0
        self.flagged_in_step = 0
        self.flagged_steps = 0
        self.zeros = 0
        self.elements = 0
        self.sampled = 0

    def on_autocast_enter(self, device_type: str, dtype: torch.dtype) -> None:
        import torch

        if dtype is torch.float16:
            if self.site is None:
                from traindoctor.runtime.live import user_site

                self.site = user_site()
            self.fp16_device = self.device_seen = device_type
            self.scaled = False

    def on_scaler_call(self, scaler: GradScaler, method: str, optimizer: Optimizer | None = None) -> None:
        if method == "scale" and scaler.is_enabled():
            self.scaled = True

    def on_backward(self) -> None:
        if self.fp16_device is not None and not self.scaled:
            self.flagged_backwards += 1
            self.flagged_in_step += 1
        self.fp16_device = None
        self.scaled = False

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        if not self.flagged_in_step:
            return
        self.flagged_in_step = 0
        self.flagged_steps += 1
        if self.sampled < self.SAMPLES:
            self.sampled += 1
            import torch

            # Non-zeros counted on the gradients' own device and read once per device: one
            # synchronisation per sampled step, not one (and an allocation) per parameter.
            nonzero: dict[torch.device, torch.Tensor] = {}
            elements = 0
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None or g.is_sparse:
                        continue
                    count = torch.count_nonzero(g)
                    key = g.device
                    nonzero[key] = count if key not in nonzero else nonzero[key] + count
                    elements += g.numel()
            self.elements += elements
            self.zeros += elements - sum(int(c) for c in nonzero.values())

    def on_run_end(self) -> None:
        if not self.flagged_steps:
            return
        from traindoctor.runtime.live import site_kwargs

        share = round(self.zeros / self.elements, 4) if self.elements else None
        self.report(
            f"{self.flagged_steps} optimizer step(s) backpropagated a loss computed under float16 "
            "autocast without a GradScaler; scale the loss with `torch.amp.GradScaler` "
            "(`scaler.scale(loss).backward()`) or autocast to `torch.bfloat16`.",
            evidence={
                "autocast_dtype": "float16",
                "autocast_device": self.device_seen,
                "steps_without_scaler": self.flagged_steps,
                "backward_calls": self.flagged_backwards,
                "zero_grad_fraction": share,
                "grad_steps_sampled": self.sampled,
            },
            step=self.session.step,
            **site_kwargs(self.site),
        )
