"""``traindoctor tune SCRIPT``: bounded trials of the user's own script.

Each test runs real child processes on tiny scripts with tiny budgets (a few seconds each);
speed claims live in ``benchmarks/tune_quality.py``, not here.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from traindoctor.cli import main as traindoctor_main
from traindoctor.facts.data.pipeline import Bounds
from traindoctor.machine import usable_cores
from traindoctor.recipes import loader_kwargs
from traindoctor.tune.progress import Progress
from traindoctor.tune.script import PROGRESS_UNITS, Runner, TuneSettings, tune_script
from traindoctor.tune.script_cli import looks_like_script_mode

SCRIPTS = Path(__file__).parent / "scripts"
JUDGED = ("baseline", "search", "confirm")
TRIAL_KEYS = {"config", "phase", "samples_per_s", "data_wait_share", "verdict", "load", "others"}
FAST = TuneSettings(budget=1.0, seconds=0.15, max_steps=40, min_rounds=0)


@pytest.fixture
def sleepy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sleepy script copied into a fresh folder that holds the user's checkpoint."""
    shutil.copy(SCRIPTS / "sleepy_train.py", tmp_path / "train.py")
    (tmp_path / "ckpt.pt").write_bytes(b"the user's checkpoint")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_trial_stops_after_its_bounded_steps_and_writes_nothing_of_the_users(
    sleepy: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    before = _files(sleepy)
    scratch = tmp_path_factory.mktemp("scratch")
    runner = Runner("train.py", ["--epochs", "50"], TuneSettings(budget=5, seconds=60, max_steps=4), scratch)
    config = {"num_workers": 0, "torch_threads": 1}
    out = runner.run({"mode": "trial", "config": config, "site": None})
    assert out["status"] == "complete"
    [segment] = out["segments"]
    assert segment["phase"] == "search" and segment["config"] == config
    assert segment["steps"] == 4  # max_steps, although `seconds` was far away
    # 2 warm-up steps (num_workers=0: nothing buffered), the step that starts the clock, 4 timed
    assert out["steps_seen"] == 2 + 1 + 4
    log = Path(out["log"]).read_text()
    assert "finished after" not in log  # the script was stopped, not run to its end
    assert _files(sleepy) == before  # checkpoint untouched, no outputs/ folder, no log
    written = [p.name for p in (scratch / "trial-01" / "view").rglob("*") if p.is_file() and not p.is_symlink()]
    assert "ckpt.pt" in written and "train.log" in written


def test_a_whole_run_trains_to_the_end_under_the_configuration(tmp_path_factory: pytest.TempPathFactory) -> None:
    # benchmarks/tune_quality.py compares configurations as whole processes
    scratch = tmp_path_factory.mktemp("scratch")
    runner = Runner(str(SCRIPTS / "short_train.py"), ["--steps", "20"], TuneSettings(budget=5), scratch)
    try:
        out = runner.run({"mode": "whole", "config": {"num_workers": 0, "torch_threads": 1}, "site": None})
    finally:
        runner.close()
    assert out["status"] == "ended" and out["segments"] == []
    assert (out["steps_seen"], out["samples_seen"]) == (20, 20 * 16)
    assert "finished after 20 steps" in Path(out["log"]).read_text()


def test_tune_script_json_is_complete_and_the_tuned_file_feeds_loader_kwargs(
    sleepy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(sleepy)
    code = traindoctor_main(
        ["tune", "--budget", "1", "--output-format", "json", "-o", "tuned.json", "train.py", "--delay-ms", "1"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    for key in (
        "baseline",
        "recommended",
        "best",
        "speedup",
        "limit",
        "bottleneck_before",
        "bottleneck_after",
        "trials",
    ):
        assert key in data, key
    assert data["baseline"]["config"]["num_workers"] == 0
    assert data["baseline"]["samples_per_s"] > 0
    assert data["bottleneck_before"] == "data-bound (main process)"  # 8 x 1 ms of sleep per batch
    assert set(data["limit"]) >= {"samples_per_s", "bound", "detail"}
    assert data["limit"]["bound"] in ("loader", "compute")
    phases = {t["phase"] for t in data["trials"]}
    assert {"baseline", "bound-loader", "bound-compute", "search"} <= phases
    for trial in data["trials"]:
        assert set(trial) == TRIAL_KEYS
        assert isinstance(trial["config"]["torch_threads"], int)
        assert len(trial["load"]) == 2 and all(isinstance(x, float) for x in trial["load"])  # Linux has a load
        assert isinstance(trial["others"], float) and trial["others"] >= 0.0  # and /proc: others' CPU use
    conditions = data["conditions"]
    # the cores tune counts: its affinity, or fewer under a cgroup CPU quota
    assert data["cores"] == max(1, int(conditions["cores"]["effective"] + 1e-9)) <= conditions["cores"]["affinity"]
    assert conditions["trials"] >= 2
    assert conditions["others_peak"] == pytest.approx(
        max(t["others"] for t in data["trials"] if t["phase"] in JUDGED), abs=0.01
    )
    assert conditions["depends_on_contention"] == bool(conditions["contended_trials"] or conditions["flipped"])
    loader_bounds = [t["config"]["num_workers"] for t in data["trials"] if t["phase"] == "bound-loader"]
    assert loader_bounds[:2] == [0, 1]
    assert data["recommended"]["num_workers"] == data["best"]["config"]["num_workers"]
    assert data["speedup"] == pytest.approx(data["best"]["samples_per_s"] / data["baseline"]["samples_per_s"], rel=1e-2)
    # the progress went to stderr as plain lines (not a terminal)
    assert "traindoctor tune [1/" in captured.err and "\r" not in captured.err
    totals = {line.split("/")[1].split("]")[0] for line in captured.err.splitlines()}
    assert totals == {str(PROGRESS_UNITS)}  # fixed when tune started
    tuned = json.loads((sleepy / "tuned.json").read_text())
    assert "torch_threads" not in tuned["recommended"]
    kwargs = loader_kwargs(None, tuned=sleepy / "tuned.json", device="cpu")
    assert kwargs["num_workers"] == data["recommended"]["num_workers"]
    after = _files(sleepy)
    assert after.pop("tuned.json")
    assert after == before  # the trials left the user's files as they were


def test_fast_in_memory_batches_keep_num_workers_zero(tmp_path: Path) -> None:
    # past the 1 s budget, a round repeats the pair that decides the advice
    settings = TuneSettings(budget=1.0, seconds=0.15, max_steps=40, min_rounds=1)
    tuned = tune_script(str(SCRIPTS / "in_memory_train.py"), settings=settings)
    assert tuned.recommended["num_workers"] == 0
    assert tuned.bottleneck_before == "compute-bound"
    assert tuned.speedup is not None and tuned.best["samples_per_s"] > 0
    # Not luck: whatever a single run said, workers are recommended only when all their runs beat
    # all runs without them; here any configuration with workers is at most undecided against
    # the fastest, and the simplest finalist the fastest was not measured apart from is chosen.
    fastest = next(c for c in tuned.comparisons if c["against_fastest"] == "fastest")
    chosen = next(c for c in tuned.comparisons if c["config"] == tuned.best["config"])
    assert chosen["against_fastest"] in ("fastest", "tied", "undecided")
    if fastest["config"]["num_workers"] > 0:  # a fastest with workers was not measured apart
        assert len(fastest["runs"]) < 3 or min(fastest["runs"]) <= max(chosen["runs"]) * 1.1
    if chosen is not fastest:  # the pair that decided was repeated
        assert len(chosen["runs"]) >= 2 and len(fastest["runs"]) >= 2


def test_a_36_step_script_is_tuned_with_fewer_steps_per_trial(tmp_path: Path) -> None:
    tuned = tune_script(str(SCRIPTS / "short_train.py"), ["--steps", "36"], settings=FAST)
    assert "the script trains 36 optimizer steps: each trial times fewer steps" in tuned.notes
    assert tuned.baseline["samples_per_s"] > 0 and tuned.limit is not None
    # every bound measured (the search may be empty when the script's own settings are predicted best)
    assert {t.phase for t in tuned.trials} >= {"baseline", "bound-loader", "bound-compute"}
    assert all(t.samples_per_s for t in tuned.trials if t.phase in ("search", "confirm"))  # none ran out of steps
    assert "num_workers" in tuned.recommended and tuned.best["samples_per_s"] > 0


def test_a_too_short_script_is_told_how_many_more_steps(capsys: pytest.CaptureFixture[str]) -> None:
    from traindoctor.tune.script import _thread_counts

    assert traindoctor_main(["tune", "--budget", "1", str(SCRIPTS / "short_train.py"), "--steps", "8"]) == 2
    err = capsys.readouterr().err
    threads = len(_thread_counts(usable_cores(), None))
    need = 2 + 1 + threads * 2 + (1 + threads) * 3  # warm-up, clock, compute warm-ups, 3 timed each
    assert f"the script trains only 8 optimizer steps; tune needs at least {need}" in err
    assert f"give {need - 8} more steps, e.g. with a larger `--steps`" in err


def test_tune_help_shows_both_modes_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert traindoctor_main(["tune", "--help"]) == 0
    out = capsys.readouterr().out
    assert "SCRIPT MODE" in out and "DATASET MODE" in out and "--budget SECONDS" in out and "--max-workers" in out
    assert "traindoctor tune train.py --epochs 1" in out and "--batch-size 64 -o tuned.json" in out
    assert traindoctor_main(["tune", "--budget", "5", "--help"]) == 0
    assert "DATASET MODE" in capsys.readouterr().out


def test_a_script_without_training_steps_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "nothing.py"
    script.write_text("print('no training here')\n")
    assert traindoctor_main(["tune", "--budget", "1", str(script)]) == 2
    err = capsys.readouterr().err
    assert "could not measure the script's training loop" in err and "Traceback" not in err


def test_a_crashing_script_is_a_message_with_its_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "crash.py"
    script.write_text("raise RuntimeError('bad config file')\n")
    assert traindoctor_main(["tune", "--budget", "1", str(script)]) == 2
    err = capsys.readouterr().err
    assert "RuntimeError: bad config file" in err


def test_html_without_the_report_module_is_a_clear_message(
    sleepy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "traindoctor.report.html", None)  # import fails
    assert traindoctor_main(["tune", "--html", "r.html", "train.py"]) == 2
    assert "pip install traindoctor[html]" in capsys.readouterr().err
    assert not (sleepy / "r.html").exists()


def test_html_without_plotly_stops_before_any_trial(
    sleepy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import traindoctor.report.html as html
    import traindoctor.tune.script as script

    monkeypatch.setattr(html, "missing_dependency", lambda: "the HTML report needs plotly")
    monkeypatch.setattr(script, "tune_script", lambda *a, **k: pytest.fail("trials ran"))
    assert traindoctor_main(["tune", "--html", "r.html", "train.py"]) == 2
    assert "the HTML report needs plotly" in capsys.readouterr().err
    assert not (sleepy / "r.html").exists()


def test_script_mode_and_dataset_mode_are_told_apart(tmp_path: Path) -> None:
    assert looks_like_script_mode(["train.py", "--epochs", "2"])
    assert looks_like_script_mode(["--budget", "10", "train.py"])
    assert not looks_like_script_mode(["mypkg.data:train_set", "--batch-size", "4"])
    assert not looks_like_script_mode(["data.py:make", "--batch-size", "4"])
    assert not looks_like_script_mode(["--help"])


def test_the_bounds_predict_serial_loading_without_workers_and_the_minimum_with() -> None:
    bounds = Bounds(loader={0: 100.0, 2: 180.0}, compute={1: 300.0}, loader_cpu=None, compute_cpu={}, cores=2)
    assert bounds.predict(0, 1) == pytest.approx(75.0)  # 1 / (1/100 + 1/300)
    assert bounds.predict(2, 1) == pytest.approx(180.0)
    # loading and compute both need the CPU: 2 cores / (5 ms + 5 ms) per sample
    cpu_bound = Bounds(
        loader={0: 200.0, 2: 400.0}, compute={1: 400.0}, loader_cpu=0.005, compute_cpu={1: 0.005}, cores=2
    )
    assert cpu_bound.predict(2, 1) == pytest.approx(200.0)
    limit = bounds.limit()
    assert limit is not None and limit["bound"] == "loader" and limit["samples_per_s"] == 180.0


def test_progress_is_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress("traindoctor tune", 2, stream=stream)
    progress.start("baseline")
    progress.done("12.0 samples/s")
    progress.remaining(1)
    progress.start("search num_workers=2")
    progress.done()
    progress.close()
    assert stream.getvalue().splitlines() == [
        "traindoctor tune [1/2] baseline: 12.0 samples/s",
        "traindoctor tune [2/2] search num_workers=2",
    ]


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_tune_and_run_give_the_same_advice_on_a_cifar_shaped_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bearpaw's cifar.py: more train-loader workers than cores, not persistent, and a test loader
    # with workers re-created every epoch. run says "use at most N workers" (TD104) and "pass
    # persistent_workers=True" (TD103); tune must not recommend more workers or non-persistent ones.
    from traindoctor.doctor.cli import main as run_main

    script = tmp_path / "cifar.py"
    shutil.copy(SCRIPTS / "cifar_shape_train.py", script)
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    assert run_main(["--output-format", "json", "-o", str(report), "--select", "TD1", str(script)]) == 0
    findings = {f["code"]: f for f in json.loads(report.read_text())["findings"]}
    ceiling = findings["TD104"]["evidence"]["recommended_total_workers"]  # more workers than cores
    # one ceiling (facts/data/pipeline.py): the loop waits for its per-sample transforms, so the
    # workers may have the cores the training process leaves them, here all or all but one
    assert max(usable_cores() - 1, 1) <= ceiling <= usable_cores()
    tuned = tune_script(str(script), ["--epochs", "10"], settings=FAST)  # trials stop early
    workers = tuned.recommended["num_workers"]
    threads = tuned.recommended.get("torch_threads", tuned.baseline["torch_threads"])
    assert workers <= tuned.conditions["worker_ceiling"][str(threads)]  # tune keeps to its ceiling
    assert workers <= ceiling
    assert tuned.recommended["persistent_workers"] is (workers > 0)  # TD103's judgement, with workers
    for code in ("TD102", "TD105"):
        if code in findings and "recommended_num_workers" in findings[code]["evidence"]:
            assert findings[code]["evidence"]["recommended_num_workers"] <= ceiling
    assert any("above the" in note and "TD104's ceiling" in note for note in tuned.notes)


def test_td102_and_tune_agree_on_a_main_process_loader(sleepy: Path) -> None:
    # TD102's predicted speed-up is a range (all cores idle, and what other programs left free
    # during the run); when tune's measurement keeps the main process, TD102 either agrees or says
    # the gain is uncertain and names tune; when tune measures workers faster, TD102 recommends them
    from traindoctor.doctor.cli import main as run_main

    report = sleepy / "report.json"
    args = ["train.py", "--delay-ms", "2", "--epochs", "2"]
    assert run_main(["--output-format", "json", "-o", str(report), "--select", "TD102", *args]) == 0
    (td102,) = [f for f in json.loads(report.read_text())["findings"] if f["code"] == "TD102"]
    evidence = td102["evidence"]
    low, high = evidence["predicted_speedup_range"]
    assert low <= high == evidence["predicted_speedup"]
    if f"{low:.1f}" != f"{high:.1f}":
        assert f"{low:.1f}-{high:.1f}x" in td102["message"]
    else:
        assert f"predicted {high:.1f}x" in td102["message"]
    # a budget that lets tune repeat the deciding pair (3 runs each)
    tuned = tune_script("train.py", args[1:], settings=TuneSettings(budget=3.0, seconds=0.2, max_steps=40))
    if tuned.recommended["num_workers"] > 0 and tuned.speedup_verdict == "faster":
        assert evidence["recommended_num_workers"] > 0  # both: workers
    verdicts = {bool(c["config"]["num_workers"]): c["against_fastest"] for c in tuned.comparisons}
    no_gain = verdicts.get(False) == "tied" or (verdicts.get(False) == "fastest" and verdicts.get(True) == "faster")
    if evidence["recommended_num_workers"] > 0 and no_gain:
        # tune measured no gain from workers: TD102 did not claim one
        assert low < 1.15 or "measures it" in td102["message"], (td102["message"], tuned.comparisons)


def test_our_options_after_script_are_named_in_the_failure() -> None:
    from traindoctor.tune.script_cli import misplaced_options_hint

    hint = misplaced_options_hint(["--epochs", "2", "--budget", "30", "--output-format=json"])
    assert "--budget, --output-format came after SCRIPT" in hint
    assert "traindoctor tune [OPTIONS] SCRIPT [ARGS]" in hint
    # the script's own -h / -o / unknown options are the script's business
    assert misplaced_options_hint(["--epochs", "2", "-o", "out", "--help"]) == ""


def test_a_timed_window_waits_for_the_device_only_where_the_script_initialised_cuda() -> None:
    from types import SimpleNamespace

    from traindoctor.tune._trial import Controller

    calls: list[str] = []

    def cuda(initialised: bool) -> SimpleNamespace:
        return SimpleNamespace(is_initialized=lambda: initialised, synchronize=lambda: calls.append("sync"))

    cpu_run = SimpleNamespace(torch=SimpleNamespace(cuda=cuda(False)))
    assert Controller._drained(cpu_run, 12.5) == 12.5 and calls == []  # type: ignore[arg-type]
    gpu_run = SimpleNamespace(torch=SimpleNamespace(cuda=cuda(True)))
    # the device is drained first, then the clock is read: the window ends when its kernels ran
    assert Controller._drained(gpu_run, 0.0) > 0.0 and calls == ["sync"]  # type: ignore[arg-type]
