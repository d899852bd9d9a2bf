"""TD801 at run time: real 30-step CPU loops whose kernels run on the simulated asynchronous device.

A sync every step followed by host work the GPU cannot overlap (the host's logging) fires, naming
the line; the same ``.item()`` with nothing after it (the next step's kernels are queued at once)
and a GPU-bound loop whose big kernels hide the host's work stay silent; a CPU run never fires.
"""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, finding
from helpers.sim_cuda import SimNet, SimSGD, SimulatedCuda, spin
from helpers.sim_loops import FAKE_CUDA, run_sim_loop

import traindoctor


def test_item_every_step_with_host_work_after_it_fires_at_the_loops_line() -> None:
    session, _truth, _sim = run_sim_loop(item=True, host_after_s=0.004, select=["TD801"])
    f = finding(session, "TD801")
    assert f.filename.endswith("sim_loops.py") and f.location is not None
    line = open(f.filename, encoding="utf-8").read().splitlines()[f.location.row - 1]
    assert "loss.item()" in line
    ev = f.evidence
    assert ev["site_syncs_per_step"] == 1.0 and ev["syncs_per_step"] == 1.0
    # 4 ms of host work after each sync on a 8 ms GPU step: a third of the step idle (simulated truth)
    assert 0.25 < ev["sync_idle_share"] < 0.40, ev
    assert ev["site"].endswith(f"sim_loops.py:{f.location.row}")


def test_item_every_step_on_a_gpu_bound_loop_stays_silent() -> None:
    quick, _t, _s = run_sim_loop(item=True, host_after_s=0.0, select=["TD801"])
    big, _t, _s = run_sim_loop(item=True, host_after_s=0.001, fwd=(1, 0.03, 0.0), bwd=(1, 0.04, 0.0), select=["TD801"])
    for session in (quick, big):
        assert session.profile.gpu.syncs_per_step == 1.0  # the sync is seen, and judged harmless
        assert "TD801" not in codes(session)
    assert big.profile.gpu.share(big.profile.gpu.idle["sync"]) < 0.05


def test_a_tensor_valued_if_every_step_fires() -> None:
    sim = SimulatedCuda()
    model = sim.place(SimNet(sim, (1, 0.002, 0.0), (1, 0.003, 0.0)), 0)
    opt = SimSGD(model.parameters(), sim, (1, 0.001, 0.0))
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with sim.installed(), traindoctor.watch(device=FAKE_CUDA, cuda=sim, select=["TD801"]) as session:
        for _ in range(30):
            loss = model(x.to("cuda"), y.to("cuda"))
            opt.zero_grad()
            loss.backward()
            opt.step()
            diverged = sim.on(loss > 1e9)  # a device tensor, as on a GPU
            if diverged:  # the guard line
                break
            spin(0.003)  # the loop's own host work
    f = finding(session, "TD801")
    assert f.location is not None
    assert "if diverged:" in open(f.filename, encoding="utf-8").read().splitlines()[f.location.row - 1]
    assert f.evidence["sync_idle_share"] > 0.25


def test_a_cpu_run_with_item_every_step_never_fires() -> None:
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with traindoctor.watch(select=["TD801"]) as session:
        for _ in range(20):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
    assert session.gpu_profile is None
    assert "TD801" not in codes(session)
