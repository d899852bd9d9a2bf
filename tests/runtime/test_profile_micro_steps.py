"""Micro-steps (issue 25): where a step takes well under a millisecond, the doctor's own work per
step is as large as the script's, and it must not land in the rows.

pytorch/examples' regression (0.21-0.28 ms steps, no optimizer: the loop updates
``p.data`` itself) was called data-bound: the doctor's ~0.25 ms per step landed in backward and
other host work. The loops below time their own phases with ``perf_counter`` and run in
interleaved chunks, unwatched then watched. Each row's share of the doctor's step is compared with
the same row's share of the loop's unwatched step in the chunk before it, and the median ratio over
the chunks must lie within 30%; the doctor's step (without its own work) is compared with the
unwatched step scaled by how much slower the watched chunk's data phase ran (``get_batch``, where
no doctor code runs: the machine's speed of the moment). Ratios, because on a machine shared with
other jobs one chunk runs 1.5x slower than the next; medians over each chunk's steps, because a
step the scheduler preempted is ten times longer and one or two of them move a mean over a few
hundred steps by more than 30% (the profile's rows are the means of these same steps, checked as
such). Nothing here asserts an absolute speed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

import traindoctor
from traindoctor.runtime.session import Session

#: Interleaved (unwatched, watched) chunks, and steps per chunk.
CHUNKS = 7
STEPS = 240
#: Steps left out at the start of an unwatched chunk (the doctor's warm-up is its own).
SKIP = 10
#: A row is right when doctor / unwatched lies within this factor.
WITHIN = 1.3

Phases = dict[str, float]


class Regression:
    """pytorch/examples' regression shape: a polynomial fit by a Linear layer, batches made by a
    ``get_batch`` (no DataLoader), and either the loop's own update of ``p.data`` or ``SGD``."""

    def __init__(self, optimizer: bool, width: int = 48) -> None:
        self.w = torch.randn(width, 1)
        self.fc = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))
        self.opt = torch.optim.SGD(self.fc.parameters(), lr=1e-3) if optimizer else None
        self.width = width

    def get_batch(self, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, self.width)
        return x, x.mm(self.w) + 0.1

    def steps(self, count: int) -> list[Phases]:
        """Run ``count`` steps; each row holds the loop's own timing of one step's phases. A step
        ends where the doctor's does (``optimizer.step()``, or ``backward()`` without one)."""
        perf = time.perf_counter
        rows: list[Phases] = []
        fc, opt = self.fc, self.opt
        last = perf()
        for _ in range(count):
            t0 = perf()
            x, y = self.get_batch()
            t1 = perf()
            fc.zero_grad()
            t2 = perf()
            out = fc(x)
            t3 = perf()
            loss = nn.functional.smooth_l1_loss(out, y)
            loss.item()
            t4 = perf()
            loss.backward()
            t5 = perf()
            if opt is not None:
                opt.step()
                end = perf()
                rows.append(
                    {
                        "step": end - last,
                        "data": t1 - t0,
                        "forward": t3 - t2,
                        "backward": t5 - t4,
                        "optimizer": end - t5,
                    }
                )
                last = end
            else:
                rows.append({"step": t5 - last, "data": t1 - t0, "forward": t3 - t2, "backward": t5 - t4})
                last = t5
                with torch.no_grad():
                    for p in fc.parameters():
                        p.data.add_(-1e-3 * p.grad)  # the loop's own update: next step's other host work
        return rows


def _own(rows: list[Phases]) -> Phases:
    """The loop's median timings over a chunk's steps, with its other host work (the step's rest)."""
    kept = [dict(r, other=r["step"] - r["forward"] - r["backward"] - r.get("optimizer", 0.0)) for r in rows[SKIP:]]
    return {key: statistics.median(r[key] for r in kept) for key in kept[0]}


def _rows(doctor: Session) -> Phases:
    """The doctor's median rows over the steady steps its profile averaged."""
    prof = doctor.profile
    steady = doctor.profiled_records[prof.warmup_steps :]
    assert len(steady) == prof.steady_steps >= STEPS - 2 * SKIP
    rows: dict[str, list[float]] = {"step": [], "forward": [], "backward": [], "other": []}
    if prof.optimizer_seen:
        rows["optimizer"] = []
    for r in steady:
        assert r.forward_s is not None and r.backward_s is not None and r.other_s is not None
        for key, value in (
            ("step", r.own_s),
            ("forward", r.forward_s),
            ("backward", r.backward_s),
            ("other", r.other_s),
        ):
            rows[key].append(value)
        if "optimizer" in rows:
            rows["optimizer"].append(r.optimizer_s)
    # the profile's rows are these steps' means
    assert prof.other_s == pytest.approx(statistics.fmean(rows["other"]))
    assert prof.step_s == pytest.approx(statistics.fmean(rows["step"]))
    return {key: statistics.median(values) for key, values in rows.items()}


@pytest.fixture()
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _chunks(make: Callable[[], Regression]) -> tuple[list[Phases], list[Phases], list[Session]]:
    """(unwatched own timings, watched own timings, watched sessions) of each interleaved chunk."""
    unwatched, watched, doctors = [], [], []
    for _ in range(CHUNKS):
        unwatched.append(_own(make().steps(STEPS)))
        loop = make()
        # every monitor (the doctor's real per-step work); no host-work sampler thread
        with traindoctor.watch(thresholds={"profile.sample_host_work": False}) as doctor:
            watched.append(_own(loop.steps(STEPS)))
        doctors.append(doctor)
        assert not [n for n in doctor.notes if "internal error" in n]
    return unwatched, watched, doctors


@pytest.mark.parametrize(
    ("optimizer", "width"),
    [(False, 4), (True, 48)],  # regression's own 4 features; a 2-layer fit that SGD steps
    ids=["own-update", "sgd"],
)
def test_micro_step_rows_match_the_unwatched_loop(optimizer: bool, width: int, one_thread: None) -> None:
    torch.manual_seed(0)
    unwatched, watched, doctors = _chunks(lambda: Regression(optimizer, width))
    profiles = [d.profile for d in doctors]
    ratios: dict[str, list[float]] = {}
    for own, seen, doctor in zip(unwatched, watched, doctors, strict=True):
        rows = _rows(doctor)
        for key, value in rows.items():
            if key != "step":  # shares of the step
                ratios.setdefault(key, []).append((value / rows["step"]) / (own[key] / own["step"]))
        speed = seen["data"] / own["data"]  # the machine's speed of the moment, no doctor code in it
        ratios.setdefault("step", []).append(rows["step"] / (own["step"] * speed))
    medians = {key: statistics.median(values) for key, values in ratios.items()}
    assert set(medians) == ({"step", "forward", "backward", "other"} | ({"optimizer"} if optimizer else set()))
    for key, ratio in medians.items():
        assert 1 / WITHIN <= ratio <= WITHIN, (key, medians)
    # the doctor's own work was measured and left out: a visible share of these short steps
    assert statistics.median(p.doctor_share for p in profiles) > 0.01
    assert all(p.to_dict()["per_step_ms"]["doctor"] > 0 for p in profiles)
    if optimizer:
        # compute-bound unwatched (the step and the 2-layer fit beside a 32-sample batch), and so is
        # the verdict: the doctor's own time no longer makes the remainder look like the data path
        own = {key: statistics.median(u[key] for u in unwatched) for key in unwatched[0]}
        assert own["forward"] + own["backward"] + own["optimizer"] > 1.5 * own["other"], own
        assert statistics.mode(p.verdict for p in profiles) == "compute-bound"


def test_the_report_says_when_the_doctors_own_work_is_a_large_share() -> None:
    from traindoctor.report.html import render_run_html
    from traindoctor.report.run import render_text
    from traindoctor.runtime.profile import build_profile
    from traindoctor.runtime.step_timer import StepRecord

    def records(doctor_s: float) -> list[StepRecord]:
        return [
            StepRecord(i, i * 1.0, i * 1.0 + 0.001, 0.0, 0.0, 0.0001, 1, 32, 1, None, 0.0002, 0.0002, doctor_s=doctor_s)
            for i in range(1, 30)
        ]

    quiet = build_profile(records(0.00005), run_s=0.03)
    assert quiet.doctor_share == pytest.approx(0.05)
    assert "watching took" not in quiet.reason
    busy = build_profile(records(0.0004), run_s=0.03)
    assert busy.step_s == pytest.approx(0.0006)  # the script's own step: the doctor's left out
    assert busy.doctor_share == pytest.approx(0.4)
    assert "watching took 0.4 ms per step (40% of the watched step)" in busy.reason
    assert "less certain" in busy.reason
    data = busy.to_dict()
    assert data["per_step_ms"]["doctor"] == pytest.approx(0.4) and data["doctor_share"] == pytest.approx(0.4)
    text = render_text({"findings": [], "profile": data})
    assert (
        "watching (the doctor, left out of the rows)" in text
        and "40% of the watched step: the rows are less certain" in text
    )
    page = render_run_html({"findings": [], "profile": data})
    assert 'id="doctor-time"' in page and "Watching took 0.4 ms per step (40% of the watched step)" in page
    assert "less certain" in page and "less certain" not in render_run_html(
        {"findings": [], "profile": quiet.to_dict()}
    )
    assert data["per_step_ms"]["other"] == pytest.approx(0.1)  # 1 ms watched - 0.4 doctor - 0.1 - 0.2 - 0.2
