"""TD305 grad-scaler-with-bf16: a GradScaler is used while autocast runs in bfloat16."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.amp import GradScaler
    from torch.optim import Optimizer

    from traindoctor.facts.amp.static import Autocast, ScalerConstruction
    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class GradScalerWithBf16(Rule):
    code = "TD305"
    name = "grad-scaler-with-bf16"
    severity = Severity.INFO
    summary = (
        "A GradScaler is used while autocast runs in bfloat16, which needs no loss scaling; "
        "drop the scaler and call `loss.backward()` and `optimizer.step()` directly."
    )
    gpu_only = False
    static = True
    triggers = ("GradScaler",)
    runtime = True
    fixable = "never"

    what_it_does = """
        Finds a GradScaler construction (`torch.amp.GradScaler`, `torch.cuda.amp.GradScaler`,
        aliases) in a file whose autocast regions all run in bfloat16: the autocasts that the
        scaled loss flows from (in the functions that call `scaler.scale(loss)`), or else every
        autocast in the file. It stays silent when any relevant autocast's dtype cannot be
        resolved, or when the scaler is enabled conditionally (`enabled=use_fp16`).
    """
    why_bad = """
        Loss scaling exists because float16's 5-bit exponent cannot represent small gradients.
        bfloat16 keeps float32's 8-bit exponent (same range, less precision), so its gradients
        do not underflow and scaling buys nothing. The scaler still costs work on every step:
        an inf/NaN check over all gradients (with a device-to-host synchronisation) and
        unscaling multiplications; and it can skip steps it considers overflowed. It is
        usually left over from an fp16 recipe.
    """
    example = """
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    use_instead = """
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()

        # or let traindoctor.recipes pick the dtype for this GPU (bf16 where supported, else fp16
        # with an enabled scaler):
        from traindoctor.recipes import autocast_settings
        amp = autocast_settings("cuda")
        with amp.autocast():
            loss = criterion(model(x), y)
        amp.scaler.scale(loss).backward()
        amp.scaler.step(optimizer)
        amp.scaler.update()
    """
    options = """
    No thresholds. At run time: an enabled GradScaler's `scale()` was called and every autocast
    region of the run was bfloat16.
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html#gradient-scaling",
        "https://cloud.google.com/tpu/docs/bfloat16",
    )

    valid = (
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda"):  # float16: the scaler is needed
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            """
        ),
        Valid(
            """
            import torch

            amp_dtype = torch.bfloat16 if args.bf16 else torch.float16
            scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)
            with torch.autocast("cuda", dtype=amp_dtype):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            """
        ),
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda", enabled=False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            """
        ),
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")

            def evaluate(x):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    return model(x)

            def train(x, y):
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
    )

    invalid = (
        Invalid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")  # TD305
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Invalid(
            """
            from torch.cuda.amp import GradScaler as Scaler
            import torch

            AMP_DTYPE = torch.bfloat16
            scaler = Scaler(enabled=True)  # TD305

            def train_step(x, y):
                with torch.autocast(device_type="cuda", dtype=AMP_DTYPE):
                    out = model(x)
                loss = criterion(out, y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self):
                    self.scaler = torch.GradScaler()  # TD305

                def step(self, x):
                    with torch.autocast("cpu"):  # CPU autocast runs in bfloat16
                        loss = self.model(x).mean()
                    self.scaler.scale(loss).backward()
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.amp.static import amp_facts

        facts = amp_facts(ctx)
        if not facts.scaler_constructions or not facts.file_uses_autocast:
            return
        for scaler in facts.scaler_constructions:
            if scaler.enabled is not True:
                continue
            regions = self._regions(ctx, scaler)
            if regions and all(r.is_bf16 for r in regions):
                yield ctx.report(
                    self,
                    scaler.call,
                    "This GradScaler scales a loss computed under bfloat16 autocast, which has "
                    "float32's range and needs no loss scaling; remove the scaler.",
                    help="Remove the GradScaler and call `loss.backward()` directly",
                )

    @staticmethod
    def _regions(ctx: FileContext, scaler: ScalerConstruction) -> list[Autocast]:
        """The enabled autocast regions this scaler's losses come from (all, if unknown)."""
        from traindoctor.facts.amp.static import amp_facts

        facts = amp_facts(ctx)
        enabled = [a for a in facts.autocasts if a.enabled is not False]
        if scaler.target is None:
            return enabled
        last = scaler.target.rsplit(".", 1)[-1]
        uses = [b for b in facts.backwards if b.kind == "scaled" and b.scaler and b.scaler.rsplit(".", 1)[-1] == last]
        if not uses:
            return enabled
        regions: list[Autocast] = []
        for use in uses:
            found = [
                a
                for a in enabled
                if a.with_stmt is not None and a.scope is use.scope and facts.flows_from(a, use.loss, use.call)
            ]
            if not found:
                return enabled  # the loss comes from elsewhere: judge by the whole file
            regions.extend(found)
        return regions


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class GradScalerWithBf16Monitor(Monitor):
    """An enabled GradScaler scales losses while every autocast region of the run is bfloat16."""

    rule = GradScalerWithBf16

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.sites: dict[int, Site | None] = {}
        self.used: dict[int, int] = {}
        self.dtypes: dict[str, int] = {}

    def on_scaler_created(self, scaler: GradScaler, site: Site | None = None) -> None:
        self.sites[id(scaler)] = site

    def on_autocast_enter(self, device_type: str, dtype: torch.dtype) -> None:
        name = str(dtype).replace("torch.", "")
        self.dtypes[name] = self.dtypes.get(name, 0) + 1

    def on_scaler_call(self, scaler: GradScaler, method: str, optimizer: Optimizer | None = None) -> None:
        if method == "scale" and scaler.is_enabled():
            self.used[id(scaler)] = self.used.get(id(scaler), 0) + 1

    def on_run_end(self) -> None:
        if not self.used or "bfloat16" not in self.dtypes or "float16" in self.dtypes:
            return
        from traindoctor.runtime.live import site_kwargs

        key = next(iter(self.used))
        self.report(
            "A GradScaler scales the loss although autocast runs in bfloat16, which has float32's "
            "exponent range; drop the GradScaler (call `loss.backward()` and `optimizer.step()` directly).",
            evidence={
                "autocast_dtypes": dict(sorted(self.dtypes.items())),
                "scale_calls": self.used[key],
            },
            **site_kwargs(self.sites.get(key)),
        )
