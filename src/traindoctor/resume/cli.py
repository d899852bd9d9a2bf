"""``traindoctor verify-resume SCRIPT [ARGS] --resume-args "..." [--steps N] [--interrupt-at K]``

Proves that a training script resumes exactly (see :mod:`traindoctor.resume.runner` for the three
runs and :mod:`traindoctor.resume.compare` for the verdict). Our options may appear before or
after SCRIPT; everything after a ``--`` goes to the script unchanged (use it when the script has
options with the same names). Exit codes: 0 exact, 1 not exact, 2 could not verify.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from typing import Any

from traindoctor.resume.compare import Verdict, compare_runs
from traindoctor.resume.recorder import INTERRUPT_EXIT

EXIT_EXACT, EXIT_DIVERGED, EXIT_ERROR = 0, 1, 2
DEFAULT_GPU_TOLERANCE = 1e-5
_VALUED = {
    "--resume-args",
    "--steps",
    "--interrupt-at",
    "--timeout",
    "--tolerance",
    "--output-format",
    "--workdir",
    "--html",
    "--nproc-per-node",
}
_FLAGS = {"--keep", "--allow-writes", "--bitwise", "--noise-floor", "-h", "--help"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traindoctor verify-resume",
        description="Run SCRIPT uninterrupted, then interrupted after a checkpoint and resumed, "
        "and compare per-step losses and final model/optimizer state. The runs start "
        "in a mirror of the current folder, inside a sandbox (Landlock, else bubblewrap): "
        "relative paths the script reads (configurator.py, data/, ../data up to three folders up) work as when you run it; "
        "what the runs write lands in the mirror or fails (your files are never changed).",
    )
    parser.add_argument(
        "--resume-args", required=True, help="arguments added to the script's own to make it resume (quoted)"
    )
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps to run (N)")
    parser.add_argument(
        "--interrupt-at", type=int, help="interrupt after the first checkpoint at or after this step (default: N // 2)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument(
        "--tolerance",
        type=float,
        help=f"relative tolerance; default 0 (bitwise) on CPU, {DEFAULT_GPU_TOLERANCE:g} when the run used CUDA",
    )
    parser.add_argument(
        "--bitwise",
        action="store_true",
        help="compare bitwise also on a GPU (for runs with deterministic kernels); same as --tolerance 0",
    )
    parser.add_argument(
        "--noise-floor",
        action="store_true",
        help="run the script uninterrupted a second time and compare within twice the difference between "
        "the two (nondeterministic kernels); one more run",
    )
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    parser.add_argument("--workdir", help="keep the runs' files here (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--allow-writes",
        action="store_true",
        help="run even where no sandbox (Landlock, bubblewrap) works: the runs' writes may then reach your files",
    )
    parser.add_argument(
        "--html", metavar="FILE", help="also write a self-contained HTML report (needs traindoctor[html])"
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        metavar="N",
        help="run each of the three runs with torchrun on N processes (ranks) and compare rank by rank",
    )
    return parser


def split_argv(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """Separate our options from SCRIPT and its arguments."""
    ours: list[str] = []
    script: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i + 1 :])
            break
        name = arg.split("=", 1)[0]
        if name in _VALUED:
            if "=" not in arg and i + 1 < len(argv):
                # ``--opt=value`` so argparse accepts values that start with "-".
                arg = f"{arg}={argv[i + 1]}"
                i += 1
            ours.append(arg)
        elif arg in _FLAGS:
            ours.append(arg)
        elif script is None:
            script = arg
        else:
            rest.append(arg)
        i += 1
    return ours, script, rest


#: ``--html FILE`` of the current command (set by :func:`main`), also written on failure.
_html_out: str | None = None


def _write_html(result: dict[str, Any]) -> None:
    if not _html_out:
        return
    try:
        from traindoctor.report.html import render_resume_html, write_html

        write_html(render_resume_html(result), _html_out)
    except Exception as exc:  # the verdict and exit code stand without the page
        print(f"traindoctor verify-resume: could not write {_html_out}: {exc}", file=sys.stderr)


def _fail(message: str, fmt: str, tail: str = "") -> int:
    _write_html({"exact": False, "error": message, "log_tail": tail})
    import os

    where = (
        f"the runs started in a mirror of {os.getcwd()} (relative paths resolve there; "
        "run verify-resume from the folder you run the script from)"
    )
    if fmt == "json":
        print(json.dumps({"exact": False, "error": message, "log_tail": tail, "cwd": os.getcwd()}, indent=2))
    else:
        print(f"traindoctor verify-resume: {message}", file=sys.stderr)
        if tail:
            print(f"  {where}", file=sys.stderr)
        if tail:
            print(
                "  last lines of its output:\n" + "\n".join(f"    {line}" for line in tail.splitlines()),
                file=sys.stderr,
            )
    return EXIT_ERROR


def render(verdict: Verdict, script: str, steps: int, k: int) -> str:
    lines = [
        f"verify-resume {script}: {steps} steps; interrupted after the checkpoint "
        f"written at step {k}, resumed for steps {k + 1}-{steps}"
    ]
    lines.append(verdict.summary)
    if verdict.cause:
        lines.append(f"cause: {verdict.cause}")
        if verdict.explanation:
            lines.append(f"  {verdict.explanation}")
    for other in verdict.also:
        lines.append(f"also: {other}")
    for note in verdict.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    ours, script, rest = split_argv(raw)
    parser = build_parser()
    if any(a in ("-h", "--help") for a in ours) or script is None:
        parser.print_help(sys.stderr if script is None and "-h" not in ours else sys.stdout)
        return EXIT_ERROR if script is None and not ({"-h", "--help"} & set(ours)) else EXIT_EXACT
    opts = parser.parse_args(ours)
    global _html_out
    _html_out = None
    if opts.html:
        from traindoctor.report.html import missing_dependency

        if missing_dependency():
            return _fail(str(missing_dependency()), opts.output_format)
        _html_out = opts.html
    steps = opts.steps
    interrupt_at = opts.interrupt_at if opts.interrupt_at is not None else max(1, steps // 2)
    if steps < 2 or not 1 <= interrupt_at < steps:
        return _fail("need --steps >= 2 and 1 <= --interrupt-at < --steps", opts.output_format)
    import os

    if not os.path.isfile(script):
        return _fail(f"script not found: {script}", opts.output_format)
    from traindoctor.resume.runner import run_all

    if opts.nproc_per_node < 1:
        return _fail("--nproc-per-node must be >= 1", opts.output_format)
    from traindoctor.sandbox import NONE, UNSANDBOXED, SandboxUnavailable, detect
    from traindoctor.tune.progress import Progress

    try:
        sandbox = detect(allow_writes=opts.allow_writes)
    except SandboxUnavailable as exc:
        return _fail(str(exc), opts.output_format)
    if sandbox == NONE:
        print(f"traindoctor verify-resume: warning: {UNSANDBOXED}", file=sys.stderr)
    progress = Progress("traindoctor verify-resume", 3)
    try:
        runs = run_all(
            script,
            rest,
            opts.resume_args,
            steps=steps,
            interrupt_at=interrupt_at,
            timeout=opts.timeout,
            workdir=opts.workdir,
            progress=progress,
            nproc=opts.nproc_per_node,
            sandbox=sandbox,
            allow_writes=opts.allow_writes,
            second_reference=opts.noise_floor and opts.nproc_per_node == 1,
        )
    finally:
        progress.close()
    try:
        if opts.nproc_per_node > 1:
            return _judge_ranks(runs, script, steps, interrupt_at, opts)
        return _judge(runs, script, steps, interrupt_at, opts)
    finally:
        if not (opts.keep or opts.workdir):
            shutil.rmtree(runs.workdir, ignore_errors=True)
        elif opts.output_format == "text":
            print(f"(run files kept in {runs.workdir})")


def _compare(ref: Any, intr: Any, res: Any, steps: int, tol: float) -> Verdict:
    """The verdict for one run (or one rank) of each scenario: per-step records and final state."""
    final_diff = None
    if ref.final is not None and res.final is not None:
        import torch

        from traindoctor.resume.compare import compare_states

        final_diff = compare_states(
            torch.load(ref.final, map_location="cpu", weights_only=True),
            torch.load(res.final, map_location="cpu", weights_only=True),
            tol,
        )
    verdict = compare_runs(ref.record, intr.record, res.record, final_diff, steps, tol)
    if res.record.get("status") == "crashed" and not verdict.exact:
        verdict.cause = "the resumed run crashed"
    return verdict


#: With ``--noise-floor``: the resumed run may differ from the reference by this many times what
#: two uninterrupted runs differ by.
NOISE_MARGIN = 2.0


def _tolerance(opts: Any, ref: Any, res: Any, second: Any) -> tuple[float, str]:
    """The relative tolerance of the comparison, and a note on where it came from: 0 (bitwise)
    with ``--bitwise`` or on a CPU run, ``--tolerance``, the CUDA default, and with
    ``--noise-floor`` at least :data:`NOISE_MARGIN` times the two uninterrupted runs' largest
    relative difference (per-step losses and final state)."""
    if opts.bitwise:
        return 0.0, ""
    tol = opts.tolerance
    if tol is None:
        cuda = any(r.record and r.record.get("cuda_used") for r in (ref, res))
        tol = DEFAULT_GPU_TOLERANCE if cuda else 0.0
    if second is None or second.record is None:
        return tol, "" if second is None else "noise floor not measured: the second uninterrupted run left no record"
    from traindoctor.resume.compare import loss_noise, noise_floor

    floor = loss_noise(ref.record, second.record)
    if ref.final is not None and second.final is not None:
        import torch

        floor = max(
            floor,
            noise_floor(
                torch.load(ref.final, map_location="cpu", weights_only=True),
                torch.load(second.final, map_location="cpu", weights_only=True),
            ),
        )
    if floor == 0:
        return tol, "noise floor: two uninterrupted runs are bitwise identical"
    if floor == float("inf"):
        return (
            tol,
            "noise floor: the two uninterrupted runs differ in shape or in NaNs; compared at the tolerance alone",
        )
    chosen = max(tol, NOISE_MARGIN * floor)
    return chosen, (
        f"noise floor: two uninterrupted runs differ by up to {floor:.3g} (relative); "
        f"compared within {chosen:.3g} ({NOISE_MARGIN:g}x that, or the tolerance when larger)"
    )


def _judge(runs: Any, script: str, steps: int, interrupt_at: int, opts: Any) -> int:
    fmt = opts.output_format
    ref, intr, res = runs.reference, runs.interrupted, runs.resumed
    if ref.timed_out or ref.record is None or ref.record.get("last_step", 0) < steps:
        done = (ref.record or {}).get("last_step", 0)
        why = "timed out" if ref.timed_out else f"stopped after {done} optimizer steps"
        return _fail(f"the uninterrupted run {why}; it must run at least --steps {steps} steps", fmt, ref.log_tail())
    if res is None:
        saves = (intr.record or {}).get("saves", [])
        where = (
            f"checkpoints were saved at steps {sorted({s['step'] for s in saves})}"
            if saves
            else "no torch.save was seen"
        )
        return _fail(
            f"the interrupted run wrote no checkpoint at or after step {interrupt_at} ({where})", fmt, intr.log_tail()
        )
    if intr.returncode != INTERRUPT_EXIT:
        return _fail(
            f"the interrupted run exited with status {intr.returncode} instead of being interrupted",
            fmt,
            intr.log_tail(),
        )
    k = int(intr.record["checkpoint_step"])
    if res.record is None or res.timed_out:
        return _fail("the resumed run " + ("timed out" if res.timed_out else "left no record"), fmt, res.log_tail())
    tol, floor_note = _tolerance(opts, ref, res, runs.reference2)
    verdict = _compare(ref, intr, res, steps, tol)
    if floor_note:
        verdict.notes.append(floor_note)
    from traindoctor.resume.runner import stale_notes

    verdict.notes += stale_notes(runs)
    if res.record.get("status") == "crashed" and not verdict.exact:
        verdict.explanation = "its last output lines:\n" + "\n".join(
            f"    {line}" for line in res.log_tail(8).splitlines()
        )
    from traindoctor.resume.result import result_dict

    data = result_dict(verdict, runs, script=script, steps=steps, interrupt_at=interrupt_at, tolerance=tol)
    _write_html(data)
    if fmt == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render(verdict, script, steps, k))
    return EXIT_EXACT if verdict.exact else EXIT_DIVERGED


def _judge_ranks(runs: Any, script: str, steps: int, interrupt_at: int, opts: Any) -> int:
    """Multi-rank verdict: each rank's three records compared like a single run's."""
    fmt = opts.output_format
    ref, intr, res = runs.reference, runs.interrupted, runs.resumed
    n = int(opts.nproc_per_node)
    for rank, run in enumerate(ref.ranks or []):
        done = (run.record or {}).get("last_step", 0)
        if ref.timed_out or run.record is None or done < steps:
            why = "timed out" if ref.timed_out else f"stopped after {done} optimizer steps"
            return _fail(
                f"the uninterrupted run's rank {rank} {why}; it must run at least --steps {steps} steps",
                fmt,
                ref.log_tail(),
            )
    if res is None:
        saves = (intr.record or {}).get("saves", [])
        where = (
            f"checkpoints were saved at steps {sorted({s['step'] for s in saves})}"
            if saves
            else "no save was seen on rank 0"
        )
        return _fail(
            f"the interrupted run wrote no checkpoint at or after step {interrupt_at} ({where})", fmt, intr.log_tail()
        )
    stopped = [(r.record or {}).get("status") for r in intr.ranks or []]
    if any(s != "interrupted" for s in stopped):
        return _fail(
            f"the interrupted run's ranks ended as {stopped} instead of all being interrupted after the checkpoint",
            fmt,
            intr.log_tail(),
        )
    k = int(intr.record["checkpoint_step"])
    tol = 0.0 if opts.bitwise else opts.tolerance
    if tol is None:
        cuda = any(r.record and r.record.get("cuda_used") for r in (ref.ranks or []))
        tol = DEFAULT_GPU_TOLERANCE if cuda else 0.0
    verdicts: list[Verdict] = []
    for rank in range(n):
        ref_r, intr_r, res_r = ref.ranks[rank], intr.ranks[rank], res.ranks[rank]
        if res_r.record is None or res.timed_out:
            return _fail(
                f"the resumed run's rank {rank} " + ("timed out" if res.timed_out else "left no record"),
                fmt,
                res.log_tail(),
            )
        verdicts.append(_compare(ref_r, intr_r, res_r, steps, tol))
    diverged = [
        (v.first_step if v.first_step is not None else steps + 1, r) for r, v in enumerate(verdicts) if not v.exact
    ]
    first_rank = min(diverged)[1] if diverged else None
    if fmt == "json":
        data: dict[str, Any] = {
            "exact": not diverged,
            "script": script,
            "steps": steps,
            "nproc_per_node": n,
            "interrupt_at": interrupt_at,
            "checkpoint_step": k,
            "tolerance": tol,
            "ranks": {str(r): v.to_dict() for r, v in enumerate(verdicts)},
            "first_divergent_rank": first_rank,
        }
        if first_rank is not None:
            lead = verdicts[first_rank]
            data.update(first_divergent_step=lead.first_step, cause=lead.cause, explanation=lead.explanation)
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        lines = [
            f"verify-resume {script}: {n} ranks (torchrun), {steps} steps; interrupted "
            f"after the checkpoint written at step {k}, resumed for steps {k + 1}-{steps}"
        ]
        if first_rank is None:
            lines.append(
                f"resume is exact on every rank ({n}): per-step losses and final "
                "model/optimizer state identical" + (" (bitwise)" if tol == 0 else "")
            )
        else:
            lead = verdicts[first_rank]
            lines.append(
                f"resume is NOT exact: first divergent step {lead.first_step} on rank {first_rank}; cause: {lead.cause}"
            )
        for rank, verdict in enumerate(verdicts):
            lines.append(f"rank {rank}: {verdict.summary}")
            if verdict.cause:
                lines.append(f"  cause: {verdict.cause}")
                if verdict.explanation:
                    lines.append(f"    {verdict.explanation}")
            for other in verdict.also:
                lines.append(f"  also: {other}")
        sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_EXACT if not diverged else EXIT_DIVERGED
