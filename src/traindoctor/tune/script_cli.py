"""``traindoctor tune [--budget S] [--output-format text|json] [--html FILE] [-o FILE] SCRIPT [ARGS]``

Runs the user's training script in short, bounded trials (see :mod:`traindoctor.tune.script`)
and prints the trials, the recommended settings, the speed-up over the script's own settings
and how the bottleneck moved. Our options come before SCRIPT; everything after it belongs to
the script. Exit codes: 0 a recommendation was made, 2 bad input or the script could not be
tuned (a message, never a traceback).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from traindoctor.errors import UsageError
from traindoctor.facts.data.pipeline import MEASURED_TIE

EXIT_OK, EXIT_ERROR = 0, 2
PROG = "traindoctor tune"

USAGE = """\
usage: traindoctor tune [--budget SECONDS] [--output-format text|json] [--html FILE]
                        [-o FILE] [--keep] [--allow-writes] SCRIPT [ARGS ...]
       traindoctor tune DATASET_SPEC --batch-size N [...]   (the loader alone; see --help there)

Run SCRIPT in short, bounded trials (child processes in a sandbox: each starts in a view of this
folder, what it writes lands in a scratch folder or fails, your files are never changed) and
measure which DataLoader settings (num_workers, prefetch_factor, persistent_workers, pin_memory
on CUDA) and torch intra-op threads make the whole training loop fastest.

options:
  --budget SECONDS             wall-time target for all trials (default 60)
  --output-format {text,json}  report format (default: text)
  --html FILE                  also write an HTML report (needs traindoctor[html])
  -o, --output FILE            write the tuned settings for loader_kwargs(ds, tuned=FILE)
  --keep                       keep the trials' scratch folder (logs, the views they wrote in)
  --allow-writes               run the trials even where no sandbox (Landlock, bubblewrap)
                               works: their writes may then reach your files
  -h, --help                   show this help
"""

#: Options that take a value, and flags.
_VALUED = {"--budget", "--output-format", "--html", "-o", "--output"}
_FLAGS = {"--keep", "--allow-writes", "-h", "--help"}


def misplaced_options_hint(script_args: Sequence[str]) -> str:
    """A note when the script's arguments hold ``traindoctor tune``'s own options: everything after
    SCRIPT goes to the script, so ``tune train.py --budget 30`` hands ``--budget`` to it."""
    ours = sorted({a.partition("=")[0] for a in script_args} & (_VALUED | _FLAGS) - {"-h", "--help", "-o"})
    if not ours:
        return ""
    return (
        f"\n(note: {', '.join(ours)} came after SCRIPT, so the script received {'them' if len(ours) > 1 else 'it'}; "
        f"{PROG}'s own options go before it: {PROG} [OPTIONS] SCRIPT [ARGS])"
    )


def split(argv: Sequence[str]) -> tuple[dict[str, Any], str | None, list[str]]:
    """Our options (before SCRIPT), SCRIPT, and the script's arguments."""
    opts: dict[str, Any] = {
        "budget": 60.0,
        "output_format": "text",
        "html": None,
        "output": None,
        "keep": False,
        "allow_writes": False,
        "help": False,
    }
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in ("-h", "--help"):
            opts["help"] = True
        elif name == "--keep":
            opts["keep"] = True
        elif name == "--allow-writes":
            opts["allow_writes"] = True
        elif name in _VALUED:
            if eq:
                value = inline
            elif i + 1 < len(args):
                i += 1
                value = args[i]
            else:
                raise UsageError(f"{name} needs a value")
            if name == "--budget":
                try:
                    opts["budget"] = float(value)
                except ValueError:
                    raise UsageError(f"--budget must be a number of seconds, not {value!r}") from None
                if not opts["budget"] > 0:
                    raise UsageError("--budget must be > 0")
            elif name == "--output-format":
                if value not in ("text", "json"):
                    raise UsageError(f"--output-format must be text or json, not {value!r}")
                opts["output_format"] = value
            elif name == "--html":
                opts["html"] = value
            else:
                opts["output"] = value
        elif arg == "--":
            return opts, (args[i + 1] if i + 1 < len(args) else None), args[i + 2 :]
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option {arg!r}")
        else:
            return opts, arg, args[i + 1 :]
        i += 1
    return opts, None, []


def looks_like_script_mode(argv: Sequence[str]) -> bool:
    """``tune SCRIPT`` rather than ``tune DATASET_SPEC --batch-size N``."""
    if any(a == "--batch-size" or a.startswith("--batch-size=") for a in argv):
        return False
    try:
        _, target, _ = split(argv)
    except UsageError:
        return any(a.split("=", 1)[0] in ("--budget", "--html") for a in argv)
    if target is None:
        return any(a.split("=", 1)[0] in ("--budget", "--html") for a in argv)
    if ":" in target and not os.path.isfile(target):
        return False
    return True


def _fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _fmt_load(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def _runs(entry: dict[str, Any]) -> str:
    span = entry.get("interval")
    text = f"median of {entry['runs']}"
    if span and entry["runs"] > 1:
        text += f", runs {_fmt_rate(span[0])}-{_fmt_rate(span[1])}"
    return text


def _speedup_text(data: dict[str, Any]) -> str:
    """The speed-up over the baseline, as far as the runs show it."""
    speed, verdict, span = data.get("speedup"), data.get("speedup_verdict"), data.get("speedup_range")
    if not speed or data["best"]["config"] == data["baseline"]["config"]:
        return ": the script's own settings"
    if verdict == "faster":
        return f", {speed:.2f}x the baseline" + (f" (the runs allow {span[0]:.2f}x-{span[1]:.2f}x)" if span else "")
    if verdict == "tied":
        return f", as fast as the baseline (their runs lie within {MEASURED_TIE:.0%} of each other)"
    return (
        f", {speed:.2f}x the baseline by the medians, but the runs overlap"
        + (f" ({span[0]:.2f}x-{span[1]:.2f}x)" if span else "")
        + ": not measured apart"
    )


def _others_text(conditions: dict[str, Any]) -> str:
    """How busy other programs kept the cores, where measured."""
    peak = conditions.get("others_peak")
    if not isinstance(peak, (int, float)):
        return ""
    return f"; other programs kept up to {peak:.1f} cores busy during a trial"


def render_text(data: dict[str, Any], output: str | None) -> str:
    from traindoctor.tune.script import label

    loader = data.get("training_loader") or {}
    site = loader.get("site")
    where = f"{os.path.relpath(site[0])}:{site[1]}" if site else "?"
    conditions = data.get("conditions") or {}
    cores = conditions.get("cores") or {}
    quota = cores.get("quota")
    got = f" (cgroup CPU quota {quota:g})" if quota is not None and quota < data["cores"] else ""
    lines = [
        f"traindoctor tune {data['script']}: {data['cores']} usable core"
        f"{'s' if data['cores'] != 1 else ''}{got}, budget {data['budget_s']:g} s, "
        f"{len(data['trials'])} measurements in {data['elapsed_s']:.1f} s",
        f"load average: {_fmt_load(conditions.get('load_start'))} at start, "
        f"{_fmt_load(conditions.get('load_end'))} at the end, up to {_fmt_load(conditions.get('peak_load'))} "
        "during the trials (the trials' own processes included)" + _others_text(conditions),
        f"training DataLoader: {where} (batch_size={loader.get('batch_size')})",
        "",
    ]
    rows = [("phase", "configuration", "samples/s", "data wait", "load", "others", "verdict")]
    for t in data["trials"]:
        load = t.get("load") or [None, None]
        others = t.get("others")
        rows.append(
            (
                t["phase"],
                label(t["config"]),
                _fmt_rate(t["samples_per_s"]),
                _fmt_share(t["data_wait_share"]),
                "-".join(_fmt_load(x) for x in load),
                "?" if others is None else f"{others:.1f}",
                t["verdict"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(7)]
    for r in rows:
        lines.append(
            f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}  "
            f"{r[4]:>{widths[4]}}  {r[5]:>{widths[5]}}  {r[6]}".rstrip()
        )
    lines.append("")
    base, best = data["baseline"], data["best"]
    lines.append(
        f"baseline (the script's own): {label(base['config'])}: "
        f"{_fmt_rate(base['samples_per_s'])} samples/s ({_runs(base)})"
    )
    lines.append(
        f"best: {label(best['config'])}: {_fmt_rate(best['samples_per_s'])} samples/s ({_runs(best)})"
        + _speedup_text(data)
    )
    limit = data.get("limit")
    if limit:
        reached = limit.get("reached")
        lines.append(
            f"limit: {_fmt_rate(limit['samples_per_s'])} samples/s ({limit['bound']}-bound), as the probe "
            f"measured it: {limit['detail']}" + (f"; the best reaches {reached:.0%} of it" if reached else "")
        )
    lines.append(f"bottleneck: {data['bottleneck_before']} -> {data['bottleneck_after']}")
    for note in data.get("notes", []):
        lines.append(f"note: {note}")
    lines.append("")
    rec = data["recommended"]
    kwargs = {k: v for k, v in rec.items() if k != "torch_threads"}
    lines.append("recommended:")
    lines.append("  DataLoader(dataset, batch_size=..., " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")")
    if "torch_threads" in rec:
        lines.append(f"  torch.set_num_threads({rec['torch_threads']})  # in the training process, before the loop")
    path = output or "tuned.json"
    lines.append(f"written to {output}; use it with:" if output else f"save it with `-o {path}`, then use it with:")
    lines.append("  from traindoctor.recipes import loader_kwargs")
    lines.append(f'  DataLoader(dataset, batch_size=..., **loader_kwargs(dataset, tuned="{path}"))')
    return "\n".join(lines) + "\n"


def _error(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts, script, rest = split(argv)
    except UsageError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n\n{USAGE}")
        return EXIT_ERROR
    if opts["help"]:
        sys.stdout.write(USAGE)
        return EXIT_OK
    if script is None:
        sys.stderr.write(f"{PROG}: missing SCRIPT\n\n{USAGE}")
        return EXIT_ERROR
    if not os.path.isfile(script):
        return _error(f"can't open file {os.path.abspath(script)!r}: no such file")
    render_html: Callable[[Mapping[str, Any]], str] | None = None
    if opts["html"]:
        try:
            from traindoctor.report.html import missing_dependency
            from traindoctor.report.html import render_tune_html as render_html
        except ImportError as exc:
            return _error(f"--html needs the HTML report (`pip install traindoctor[html]`): {exc}")
        missing = missing_dependency()  # before the trials, not after minutes of them
        if missing:
            return _error(missing)
    try:
        import torch  # noqa: F401 - fail here, with a message, when torch is missing
    except ImportError as exc:
        return _error(f"needs PyTorch ({exc})")
    from traindoctor.sandbox import NONE, UNSANDBOXED, SandboxUnavailable, detect
    from traindoctor.tune.progress import Progress
    from traindoctor.tune.script import TuneScriptError, TuneSettings, tune_script

    try:
        kind = detect(allow_writes=opts["allow_writes"])
    except SandboxUnavailable as exc:
        return _error(str(exc))
    if kind == NONE:
        print(f"{PROG}: warning: {UNSANDBOXED}", file=sys.stderr)
    settings = TuneSettings(budget=opts["budget"], keep=opts["keep"], sandbox=kind, allow_writes=opts["allow_writes"])
    progress = Progress("traindoctor tune", 4)
    try:
        tuned = tune_script(script, rest, settings=settings, progress=progress)
    except TuneScriptError as exc:
        progress.close()
        return _error(str(exc) + misplaced_options_hint(rest))
    finally:
        progress.close()
    data = tuned.to_dict()
    if opts["output"]:
        try:
            with open(opts["output"], "w", encoding="utf-8") as fh:
                fh.write(json.dumps(tuned.tuned_file(), indent=2) + "\n")
        except OSError as exc:
            return _error(f"cannot write {opts['output']}: {exc}")
    if render_html is not None:
        try:
            with open(opts["html"], "w", encoding="utf-8") as fh:
                fh.write(render_html(data))
        except OSError as exc:
            return _error(f"cannot write {opts['html']}: {exc}")
    if opts["output_format"] == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(data, opts["output"]))
    return EXIT_OK
