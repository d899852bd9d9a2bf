"""TD801 sync-every-step: every training step waits for the GPU, which then idles."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


class SyncEveryStep(Rule):
    code = "TD801"
    name = "sync-every-step"
    severity = Severity.INFO
    summary = (
        "Every training step forces a host-device synchronisation (`.item()`, `.cpu()`, `.tolist()`, "
        "`print(tensor)`, a tensor-valued `if`), so the GPU idles while the host catches up; log every "
        "N steps and accumulate on the device."
    )
    gpu_only = True
    static = True
    runtime = True
    triggers = ("backward",)
    fixable = "never"

    what_it_does = """
    Statically (info), in a script that places work on CUDA: a synchronisation that runs at every
    step of a training loop (a loop whose own code calls `backward()`): `x.item()`, `x.tolist()`,
    `x.cpu()`, `x.to("cpu")`, `print(loss)` or `f"{loss}"` of the backpropagated loss tensor, or an
    `if` that compares that tensor itself (`if loss > limit:`, `if torch.isnan(loss):`). Calls
    behind an `if` (`if step % log_every == 0:`), in another branch, a nested loop or function,
    and calls after the loop are left alone, as are test files and a read whose value an
    environment's `step()` needs in the same loop (`envs.step(q.argmax(1).cpu().numpy())`: the
    acting step of reinforcement learning cannot go on without it). One finding per loop, at its
    first such call; the message counts them.

    At run time (GPU): the device timer brackets every `.item()`, `.tolist()`, `.cpu()`,
    device-to-host `.to()` and `Tensor.__bool__` of a device tensor on timed steps, tagged with
    the user's line. The GPU idle time that follows a synchronisation is charged to it (up to the
    time the host waited there). It fires when a site synchronised in nearly every steady step and
    the idle after synchronisations is a visible share of the GPU's step time; it names the site
    (file and line) and the synchronisations per step.
    """
    why_bad = """
    CUDA runs asynchronously: the host queues kernels and goes on, and the GPU works through the
    queue while the host prepares the next step. A call that needs a value on the host (`.item()`,
    printing a tensor, `if loss > x:`) waits until the GPU has finished everything queued, so the
    queue is empty when the host comes back. Everything the host does next (the rest of the loop's
    Python, fetching the batch, launching the first kernels of the next forward) happens while the
    GPU has nothing to do. With big kernels that gap is small; with a fast model, small batches or
    a heavy loop body it can cost a large share of the step.
    """
    example = """
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")
    """
    use_instead = """
    running = torch.zeros((), device="cuda")
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        running += loss.detach()
        if step % 100 == 0:
            print(f"step {step}: loss {running.item() / 100:.4f}")
            running.zero_()
    """
    options = """
    GPU-only at run time. Fires when a site synchronised in at least `TD801.min_step_share`
    (default 0.9) of the steady timed steps (at least `TD801.min_steps`, default 5) and the GPU
    idle time after synchronisations is at least `TD801.min_idle_share` (default 0.10) of the
    GPU's step time. One `.item()` per step in a loop whose kernels keep the GPU busy while the
    host catches up stays below it.
    """
    references = (
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#avoid-unnecessary-cpu-gpu-synchronization",
        "https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
    )

    valid = (
        Valid("""
        model = model.cuda()
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"step {step}: loss {loss.item():.4f}")
        """),
        Valid("""
        # after the loop: once per epoch
        model = model.cuda()
        for epoch in range(epochs):
            total = torch.zeros((), device="cuda")
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.detach()
            print(epoch, total.item())
        """),
        Valid("""
        # evaluation code: no backward in the loop
        model = model.cuda()
        correct = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
        """),
        Valid("""
        # a CPU script: nothing to wait for
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        """),
        Valid("""
        # the model and the loss are what moves: no tensor read on the host
        model.cuda()
        for x, y in loader:
            loss = criterion(model(x.to("cuda")), y.to("cuda"))
            loss.backward()
            optimizer.step()
            model.cpu() if done else None
        """),
    )
    invalid = (
        Invalid("""
        model = model.cuda()
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            print(f"step {step}: loss {loss.item():.4f}")  # TD801
        """),
        Invalid("""
        import torch
        import torch.nn.functional as F

        device = torch.device("cuda")
        for batch in loader:
            logits = model(batch["x"].to(device))
            loss = F.cross_entropy(logits, batch["y"].to(device))
            if torch.isnan(loss):  # TD801
                raise RuntimeError("nan loss")
            loss.backward()
            optimizer.step()
        """),
        Invalid("""
        def train(model, loader, optimizer):
            model.to("cuda")
            for x, y in loader:
                out = model(x.to("cuda"))
                loss = criterion(out, y.to("cuda"))
                loss.backward()
                optimizer.step()
                preds.extend(out.argmax(1).cpu().tolist())  # TD801
                pbar.set_postfix(loss=loss.item())
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file
        from traindoctor.facts.gpu.static import step_syncs

        if not ctx.targets_cuda or is_test_file(ctx.filename):
            return
        for sites in step_syncs(ctx):
            first = sites[0]
            more = f" ({len(sites)} such calls in the step)" if len(sites) > 1 else ""
            yield ctx.report(
                self,
                first.node,
                f"`{first.text}` waits for the GPU at every training step{more}, and the GPU idles "
                "until the host queues more work; read values every N steps, or accumulate them "
                "on the device (`total += loss.detach()`) and read them when you log.",
                help="Synchronise every N steps",
            )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class SyncEveryStepMonitor(Monitor):
    """The GPU idle time after host-device synchronisations that run at every step (GPU-only)."""

    rule = SyncEveryStep

    def on_run_end(self) -> None:
        from traindoctor.facts.gpu.runtime import site_text, step_sync_sites

        gpu = self.session.gpu_profile
        if gpu is None or gpu.span <= 0 or len(gpu.steps) < int(self.threshold("min_steps", 5)):
            return
        idle_share = gpu.share(gpu.idle["sync"])
        if idle_share < float(self.threshold("min_idle_share", 0.10)):
            return
        min_step_share = float(self.threshold("min_step_share", 0.9))
        uses = [u for u in step_sync_sites(gpu) if u.step_share >= min_step_share]
        if not uses:
            return
        top = uses[0]
        site = top.site
        where = "" if site is None else f" at {site_text(site)}"
        self.report(
            f"Every training step synchronised the host with the GPU{where} "
            f"({top.syncs_per_step:g} per step, {gpu.syncs_per_step:g} in all), and the GPU idled "
            f"{idle_share:.0%} of its step time after synchronisations; read values every N steps "
            "or accumulate them on the device and read them when you log.",
            evidence={
                "sync_idle_share": round(idle_share, 4),
                "site_idle_share": round(gpu.share(top.idle_s), 4),
                "site": site_text(site),
                "site_syncs_per_step": round(top.syncs_per_step, 3),
                "syncs_per_step": round(gpu.syncs_per_step, 3),
                "sites": [site_text(u.site) for u in uses],
                "gpu_step_ms": round(gpu.span * 1000.0, 3),
                "steady_steps": len(gpu.steps),
            },
            step=self.session.step or None,
            filename=site[0] if site else "",
            row=site[1] if site else None,
            column=getattr(site, "column", None) if site else None,
            help="Synchronise every N steps",
        )
