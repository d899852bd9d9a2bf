"""Throughput (samples/s, tokens/s, FLOPs, MFU) and the host row of waits for the GPU.

Tokens/s come from real CPU loops; the FLOP count from a real CPU step (it must leave the losses
bit-for-bit as they are unwatched); MFU and the sync row from loops on the simulated asynchronous
device (``helpers.sim_cuda``), whose waits are the truth the sync row is checked against.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from helpers.sim_cuda import SimulatedCuda
from helpers.sim_loops import FAKE_CUDA, run_sim_loop
from torch.utils.data import DataLoader

import traindoctor
from traindoctor.report.html import render_run_html
from traindoctor.report.run import render_text
from traindoctor.runtime.peak_flops import device_peaks, peak_for
from traindoctor.runtime.phases import PHASE_DATA, PHASE_FORWARD, PHASE_OPTIMIZER, PHASE_OTHER
from traindoctor.runtime.step_timer import StepTimer
from traindoctor.runtime.throughput import StepFlops, Throughput, batch_tokens

# ------------------------------------------------------------------ the peak table


@pytest.mark.parametrize(
    ("name", "label", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.5),
        ("NVIDIA H200", "H200 SXM", 989.5),
        ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
        ("NVIDIA L4", "L4", 121.0),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2),
        ("NVIDIA GeForce RTX 3090", "RTX 3090", 71.0),
    ],
)
def test_peak_table_by_device_name(name: str, label: str, bf16: float) -> None:
    found = device_peaks(name)
    assert found is not None and found[0] == label
    assert found[1]["bf16"] == pytest.approx(bf16 * 1e12)


def test_unknown_devices_and_missing_precisions_have_no_peak() -> None:
    for name in ("NVIDIA A10G", "NVIDIA H100", "NVIDIA GeForce RTX 3090 Ti", "AMD Instinct MI300X", "", None):
        assert device_peaks(name) is None, name
    label, t4 = device_peaks("Tesla T4") or ("", {})
    assert label == "T4" and peak_for(t4, "bf16") is None  # BF16 on a T4 is emulated
    assert peak_for(t4, "tf32") == t4["fp32"]  # no TF32 units: FP32 GEMMs run at the FP32 peak
    _label, v100 = device_peaks("Tesla V100-SXM2-16GB") or ("", {})
    assert peak_for(v100, "fp16") == pytest.approx(125e12)


def test_mfu_arithmetic_over_precisions() -> None:
    tp = Throughput(samples_per_s=100.0)
    tp.add_flops(2, {"bf16": 989.5e10, "fp32": 67e10}, samples=10, step_s=0.1, device_name="NVIDIA H200", gpu=True)
    # per step: 0.01 s at the bf16 peak + 0.01 s at the fp32 peak; 10 steps/s
    assert tp.mfu == pytest.approx(0.2)
    assert tp.flops_per_sample == pytest.approx((989.5e10 + 67e10) / 10)
    cpu = Throughput(samples_per_s=100.0)
    cpu.add_flops(2, {"fp32": 1e9}, samples=10, step_s=0.1, device_name="NVIDIA H200", gpu=False)
    assert cpu.mfu is None and "CPU" in cpu.mfu_note
    emulated = Throughput(samples_per_s=100.0)
    emulated.add_flops(2, {"bf16": 1e9}, samples=10, step_s=0.1, device_name="Tesla T4", gpu=True)
    assert emulated.mfu is None and "no bf16 peak" in emulated.mfu_note


# ------------------------------------------------------------------ tokens


def test_batch_tokens() -> None:
    ids = torch.zeros(4, 8, dtype=torch.long)
    mask = torch.zeros(4, 8, dtype=torch.long)
    mask[:, :5] = 1
    assert batch_tokens((ids, ids)) == 32
    assert batch_tokens({"input_ids": ids, "attention_mask": mask}) == 20
    assert batch_tokens({"input_ids": ids}) == 32
    assert batch_tokens((torch.zeros(4, 8), torch.zeros(4))) is None  # float features: no token ids
    assert batch_tokens(torch.zeros(4, 8, 3, dtype=torch.long)) is None  # rank 3: not token ids


class _Lm(torch.nn.Module):
    def __init__(self, vocab: int = 32, width: int = 8, embed: bool = True) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width) if embed else None
        self.proj = torch.nn.Linear(width if embed else 6, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.embed is None:
            return self.proj(ids[:, :6].float())
        return self.proj(self.embed(ids))


def _token_loop(samples: list[Any], model: torch.nn.Module, steps: int = 8) -> Any:
    loader = DataLoader(samples, batch_size=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch() as session:
        for _epoch in range(2):
            for batch in loader:
                ids = batch["input_ids"] if isinstance(batch, dict) else batch[0]
                logits = model(ids)
                loss = logits.float().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    return session


def test_tokens_per_s_of_token_ids_fed_to_an_embedding_leave_padding_out() -> None:
    gen = torch.Generator().manual_seed(0)
    mask = torch.tensor([1] * 5 + [0] * 3)
    samples = [{"input_ids": torch.randint(0, 32, (8,), generator=gen), "attention_mask": mask} for _ in range(16)]
    session = _token_loop(samples, _Lm())
    prof = session.profile
    assert prof.samples_per_s and prof.tokens_per_s
    assert prof.tokens_per_s == pytest.approx(prof.samples_per_s * 5, rel=1e-9)  # 5 of 8 tokens are real
    report = session.report_dict()
    assert report["profile"]["tokens_per_s"] == pytest.approx(prof.tokens_per_s, abs=1e-3)  # rounded to 3 places
    text = render_text(report)
    assert f"{prof.tokens_per_s:.0f} tokens/s" in text
    assert "MFU" not in text and report["profile"]["throughput"]["mfu"] is None  # a CPU run: no MFU
    assert report["profile"]["throughput"]["flops_per_step"] is None  # nor a FLOP count


def test_no_tokens_without_an_embedding_or_without_integer_ids() -> None:
    gen = torch.Generator().manual_seed(0)
    ints = [(torch.randint(0, 32, (8,), generator=gen),) for _ in range(16)]
    tuples = _token_loop(ints, _Lm())
    assert tuples.profile.tokens_per_s == pytest.approx(tuples.profile.samples_per_s * 8, rel=1e-9)
    plain = _token_loop(ints, _Lm(embed=False))
    assert plain.profile.samples_per_s and plain.profile.tokens_per_s is None


# ------------------------------------------------------------------ the FLOP count


class _Tiny(torch.nn.Module):
    """Embedding, a convolution, a transformer layer with dropout, a head: the usual kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(40, 16)
        self.conv = torch.nn.Conv1d(16, 16, 3, padding=1)
        self.block = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.head = torch.nn.Linear(16, 40)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.conv(self.embed(ids).transpose(1, 2)).transpose(1, 2)
        return self.head(self.block(h))


def _train_tiny(watched: bool, steps: int = 5) -> tuple[list[float], Any]:
    torch.manual_seed(0)
    model = _Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 40, (steps, 4, 12), generator=torch.Generator().manual_seed(1))
    losses: list[float] = []

    def loop() -> None:
        for ids in data:
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 40), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())

    if not watched:
        loop()
        return losses, None
    # a CUDA machine as far as the session knows (the FLOPs probe installs); the work stays on the CPU
    with traindoctor.watch(device=FAKE_CUDA, cuda=SimulatedCuda()) as session:
        loop()
    return losses, session


def test_counting_one_steps_flops_leaves_the_losses_bit_for_bit() -> None:
    plain, _ = _train_tiny(watched=False)
    watched, session = _train_tiny(watched=True)
    assert watched == plain  # exact equality, every step
    assert session.step_flops is not None
    step, by_precision, _samples = session.step_flops
    assert step == 2 and session.records[1].flop_counted
    # FP32 GEMMs; the convolution is filed under TF32 (cuDNN allows TF32 by default, matmuls not)
    assert set(by_precision) == {"fp32", "tf32"} and min(by_precision.values()) > 0
    # the same step counted by a plain FlopCounterMode gives the same total
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = _Tiny()
    ids = torch.randint(0, 40, (4, 12))
    with FlopCounterMode(display=False) as counter:
        logits = model(ids[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 40), ids[:, 1:].reshape(-1)).backward()
    assert sum(by_precision.values()) == counter.get_total_flops()
    assert torch.utils._python_dispatch._get_current_dispatch_mode() is None  # the mode was left


def test_step_flops_counts_a_linear_steps_forward_and_backward_by_precision() -> None:
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(16, 8)
    flops = StepFlops()
    flops.start()
    lin(x).sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lin(x).float().sum().backward()
    assert flops.stop()
    # forward 2*16*8*4, weight gradient the same (the input needs no gradient)
    assert flops.by_precision == {"fp32": 2 * 2 * 16 * 8 * 4, "bf16": 2 * 2 * 16 * 8 * 4}


def test_step_flops_never_pops_a_mode_the_script_entered() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    flops = StepFlops()
    flops.start()
    with Passthrough() as user_mode:
        assert not flops.stop()  # the script's mode is innermost: ours stays
        assert _get_current_dispatch_mode() is user_mode
    assert flops.stop() and _get_current_dispatch_mode() is None
    with Passthrough():
        assert not StepFlops.possible()


# ------------------------------------------------------------------ MFU on the simulated device


def test_mfu_on_a_known_device_and_the_counted_step_is_left_out() -> None:
    session, _truth, _sim = run_sim_loop(steps=8)
    prof = session.profile
    tp = prof.throughput
    assert session.records[1].flop_counted and prof.warmup_steps == 1
    assert prof.steady_steps == 6  # steps 3-8: the counted step 2 ran slower
    assert session.gpu_profile is not None and all(s.index != 2 for s in session.gpu_profile.steps)
    flops_per_sample = 2 * 2 * 8 * 1  # Linear(8, 1): forward and the weight gradient, per sample
    assert tp.flops_per_sample == pytest.approx(flops_per_sample)
    assert tp.device == "H100 SXM"  # the simulated device's name
    assert tp.mfu == pytest.approx(flops_per_sample * prof.samples_per_s / 67e12, rel=1e-9)
    text = render_text(session.report_dict())
    assert "MFU 0.0% of the H100 SXM fp32 peak" in text and "unvalidated on hardware" in text
    html = render_run_html(session.report_dict())
    assert 'id="throughput-table"' in html and "MFU (model FLOP/s" in html


def test_rates_and_mfu_follow_the_device_when_the_host_runs_ahead() -> None:
    # no sync in the step and non-blocking copies: the host queues 20 steps in microseconds while
    # the device needs 22 ms for each (10 + 10 + 2 ms of kernels); the truth is the device's pace
    session, _truth, _sim = run_sim_loop(
        steps=20, fwd=(1, 0.01, 0.0), bwd=(1, 0.01, 0.0), opt=(1, 0.002, 0.0), pinned=True, non_blocking=True
    )
    prof = session.profile
    assert prof.device_step_s is not None and prof.step_s < 0.1 * prof.device_step_s  # launch times
    batch, device_step = 4, 0.022
    assert prof.samples_per_s == pytest.approx(batch / device_step, rel=0.05)
    assert prof.throughput.samples_per_s == prof.samples_per_s
    tp = prof.throughput
    assert tp.mfu == pytest.approx(tp.flops_per_sample * batch / device_step / 67e12, rel=0.05)
    # a loop that waits for the device every step already runs at its pace: nothing is rescaled
    synced, _truth, _sim = run_sim_loop(steps=12, item=True)
    p = synced.profile
    assert p.device_step_s is not None and p.samples_per_s == pytest.approx(4 / p.step_s, rel=0.05)


def test_no_mfu_on_an_unknown_device() -> None:
    session, _truth, _sim = run_sim_loop(steps=8, sim=SimulatedCuda(name="Simulated Accelerator X"))
    tp = session.profile.throughput
    assert tp.flops_per_step and tp.mfu is None
    assert tp.mfu_note == "no peak known for Simulated Accelerator X: no MFU"
    text = render_text(session.report_dict())
    assert "no peak known for Simulated Accelerator X: no MFU" in text and "MFU 0" not in text


# ------------------------------------------------------------------ the sync row


class _WaitLog(SimulatedCuda):
    """The simulated device, logging each synchronisation's wait: (host time it began, seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[float, float]] = []

    def sync(self, device: int | None = None) -> None:
        t0 = time.perf_counter()  # the simulation's clock while it is installed
        super().sync(device)
        self.waits.append((t0, time.perf_counter() - t0))


def test_sync_waits_are_their_own_host_row_within_10_percent_of_the_truth() -> None:
    sim = _WaitLog()
    session, _truth, _sim = run_sim_loop(sim=sim, item=True, host_after_s=0.004)
    prof = session.profile
    steady = [r for r in session.records[prof.warmup_steps :] if not r.flop_counted]
    truth = sum(w for t, w in sim.waits for r in steady if r.start <= t < r.end) / len(steady)
    assert truth > 0.005  # the loop's kernels: about 8 ms per step, waited for in .item()
    assert prof.sync_s == pytest.approx(truth, rel=0.10)
    assert prof.other_s == pytest.approx(0.004, rel=0.10)  # the loop's own host work, without the wait
    rows = prof.data_s + prof.transfer_s + prof.compute_s + prof.optimizer_s + prof.sync_s + (prof.other_s or 0)
    assert rows == pytest.approx(prof.step_s, rel=0.01)  # the host rows add up to the step
    text = render_text(session.report_dict())
    assert "per step, host time" in text and "waiting for the GPU (sync: .item(), .cpu(), ...)" in text


def test_a_wait_inside_forward_or_the_optimizer_step_leaves_that_row() -> None:
    timer = StepTimer()
    timer.optimizer_pre(0.0)
    timer.optimizer_post(1.0, True)  # step 1 ends at t=1
    timer.forward_seen = True
    timer.optimizer_pre(1.5)
    timer.optimizer_post(2.0, True)  # step 2: forward timing active from step 3 on
    timer.add_sync(0.3, PHASE_FORWARD)  # inside the forward, which took 0.5 s in all
    timer.forward_total += 0.5
    timer.add_sync(0.1, PHASE_OTHER)
    timer.optimizer_pre(2.8)
    timer.add_sync(0.05, PHASE_OPTIMIZER)  # e.g. a clip_grad_norm_(...).item() inside the step
    timer.add_sync(0.01, PHASE_DATA)  # inside a DataLoader fetch: stays in the data wait
    record = timer.optimizer_post(3.0, True)
    assert record is not None
    assert record.sync_s == pytest.approx(0.45)
    assert record.forward_s == pytest.approx(0.2)
    assert record.optimizer_s == pytest.approx(0.15)
    parts = record.forward_s + (record.backward_s or 0) + record.optimizer_s + record.sync_s + (record.other_s or 0)
    assert parts == pytest.approx(record.wall_s)


def test_the_html_report_shows_gpu_busy_per_phase_and_idle_per_cause_per_step() -> None:
    session, _truth, _sim = run_sim_loop(item=True, host_after_s=0.004, steps=12)
    report = session.report_dict()
    steps = report["profile"]["gpu"]["steps"]
    assert steps and all(sum(s["busy"].values()) == pytest.approx(s["busy_ms"], abs=2e-3) for s in steps)
    assert all(s["idle"]["sync"] > 0 for s in steps)
    html = render_run_html(report)
    for label in ("busy: forward", "busy: backward", "idle: after synchronisations"):
        assert label in html, label


def test_no_count_once_torch_compile_compiled_a_graph_during_the_watch() -> None:
    from torch._dynamo.utils import counters

    before = StepFlops.compiled_graphs()
    assert StepFlops.possible(before)
    counters["stats"]["unique_graphs"] += 1  # as a torch.compile'd model's first call does
    try:
        assert not StepFlops.possible(before)
        assert StepFlops.possible(before + 1)  # graphs compiled before the watch do not count
    finally:
        counters["stats"]["unique_graphs"] -= 1


def test_batch_tokens_is_fail_open_on_odd_batches() -> None:
    class Odd(dict[str, int]):
        def get(self, key: Any, default: Any = None) -> Any:
            raise RuntimeError("no")

    assert batch_tokens(Odd(a=1)) is None
    assert batch_tokens(None) is None and batch_tokens("text") is None
