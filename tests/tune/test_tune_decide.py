"""tune's decisions from repeated runs and the conditions it measures under (no trials run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from traindoctor.tune.conditions import Cores, contended, cpu_quota
from traindoctor.tune.decide import choose, choose_finalists, decided
from traindoctor.tune.repeats import FASTER, SLOWER, TIED, UNDECIDED, compare, flipped, separation_chance

PLAIN = {"num_workers": 0, "torch_threads": 2}  # the script's own
ONE_THREAD = {"num_workers": 0, "torch_threads": 1}
WORKERS = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2, "torch_threads": 2}
CONFIGS = {"plain": PLAIN, "one": ONE_THREAD, "workers": WORKERS}


def test_runs_are_separated_only_with_three_each_and_no_overlap() -> None:
    assert compare([110.0, 112.0, 111.0], [100.0, 101.0, 99.0], 0.03) == FASTER
    assert compare([100.0, 101.0, 99.0], [110.0, 112.0, 111.0], 0.03) == SLOWER
    assert compare([110.0, 112.0], [100.0, 101.0], 0.03) == UNDECIDED  # two runs each: 1 in 6 by chance
    assert compare([110.0, 95.0, 111.0], [100.0, 101.0, 99.0], 0.03) == UNDECIDED  # overlap
    assert compare([100.0, 101.0], [102.0, 100.5], 0.03) == TIED  # all four within 3%
    assert separation_chance(3, 3) == pytest.approx(0.05)


def test_a_single_faster_run_of_workers_does_not_win() -> None:
    # under load one lucky run of the workers' configuration: not a measured difference
    runs = {"plain": [1000.0], "workers": [1400.0]}
    choice = choose(runs, CONFIGS, script_threads=2, tie=0.03, gain=1.1)
    assert choice.leader == "workers" and choice.best == "plain" and choice.undecided


def test_workers_win_when_every_run_beats_every_run_without_them() -> None:
    runs = {"plain": [1000.0, 980.0, 1010.0], "workers": [1400.0, 1350.0, 1420.0]}
    choice = choose(runs, CONFIGS, script_threads=2, tie=0.03, gain=1.1)
    assert choice.best == "workers" and choice.verdicts == {"plain": FASTER}
    # separated but by less than the workers' gain: no workers
    close = {"plain": [1000.0, 990.0, 1005.0], "workers": [1060.0, 1070.0, 1080.0]}
    assert choose(close, CONFIGS, script_threads=2, tie=0.03, gain=1.1).best == "plain"


def test_runs_that_flip_between_rounds_keep_the_simpler_setting() -> None:
    runs = {"plain": [1000.0, 1300.0, 1010.0], "one": [1250.0, 1020.0, 1290.0]}
    choice = choose(runs, CONFIGS, script_threads=2, tie=0.03, gain=1.1)
    assert choice.leader == "one" and choice.best == "plain"
    assert flipped([(1250.0, 1000.0), (1020.0, 1300.0)]) and not flipped([(2.0, 1.0), (3.0, 1.0)])
    assert not decided(runs, 0.03)
    assert decided({"plain": [1000.0, 990.0, 1005.0], "one": [1400.0, 1350.0, 1420.0]}, 0.03)


def test_the_finalists_are_the_fastest_its_close_runner_up_the_best_plain_and_the_baseline() -> None:
    configs = {**CONFIGS, "w4": dict(WORKERS, num_workers=4)}
    runs = {"plain": [900.0], "one": [1000.0], "workers": [1500.0], "w4": [1400.0]}
    assert choose_finalists(runs, configs, "plain", 4) == ["workers", "w4", "one", "plain"]
    assert choose_finalists(runs, configs, "plain", 3) == ["workers", "w4", "plain"]


def test_the_cgroup_quota_and_the_load_that_counts_as_contention(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "cpu.max").write_text("max 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job\n")
    assert cpu_quota(tmp_path, proc) == pytest.approx(1.5)
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    proc.write_text("1:cpu,cpuacct:/\n")
    assert cpu_quota(v1, proc) is None
    cores = Cores(affinity=4, quota=1.5)
    assert cores.effective == 1.5 and cores.whole == 1 and "quota of 1.5" in cores.describe()
    assert contended(0.8, cores) and not contended(0.7, cores) and not contended(None, cores)
    assert Cores(2).effective == 2.0 and not contended(1.0, Cores(2))
    # where other programs' CPU use is known, it decides: a trial's own 3 processes raise the
    # load average to 2.5 on a quiet 2-core machine, which is no contention
    assert not contended(2.5, Cores(2), others=0.3) and contended(0.2, Cores(2), others=0.6)


def test_the_worker_ceiling_keeps_the_scripts_own_workers_out_of_the_choice() -> None:
    # the script's 4 workers on 2 cores measured fastest: never recommended above the ceiling of 1
    configs = {"own": dict(WORKERS, num_workers=4), "plain": PLAIN}
    runs = {"own": [1500.0, 1490.0, 1510.0], "plain": [1000.0, 990.0, 1005.0]}
    choice = choose(runs, configs, script_threads=2, tie=0.03, gain=1.1, ceiling=1)
    assert choice.leader == "own" and choice.best == "plain"
    with pytest.raises(ValueError):
        choose({"own": [1500.0], "plain": []}, configs, script_threads=2, tie=0.03, gain=1.1, ceiling=1)


def test_finalists_undecided_only_in_the_loaders_queue_need_no_more_rounds() -> None:
    from traindoctor.tune.decide import undecided_minor

    p2 = {"num_workers": 2, "prefetch_factor": 2, "torch_threads": 1}
    p4 = {"num_workers": 2, "prefetch_factor": 4, "torch_threads": 1}
    base = {"num_workers": 0, "torch_threads": 2}
    configs = {"p2": p2, "p4": p4, "base": base}
    # the jpeg pipeline on a quiet machine: the two prefetch factors overlap, the default is slower
    runs = {"p2": [936.0, 950.0, 1013.0], "p4": [884.0, 1007.0, 953.0], "base": [785.0, 681.0, 674.0]}
    assert undecided_minor(runs, configs, 0.05) == ["p2"]
    # the default still undecided (two runs): more rounds may change the workers advised
    assert undecided_minor(dict(runs, base=[785.0, 681.0]), configs, 0.05) == []
    # one thread instead of two undecided: that is the advice itself
    configs_t = dict(configs, p2=dict(p2, torch_threads=2))
    assert undecided_minor(runs, configs_t, 0.05) == []
    # nothing undecided: [] (decided() ends the rounds)
    assert undecided_minor({"p4": [1000.0, 1001.0], "p2": [1002.0, 1003.0]}, configs, 0.05) == []
