"""``traindoctor tune DATASET_SPEC --batch-size N [--max-workers K] [--batches B] [-o tuned.json]``

(``traindoctor tune SCRIPT [ARGS]``, which tunes the whole training loop, is handled by
:mod:`traindoctor.tune.script_cli`; a first argument with ``:`` that is not a file, or
``--batch-size``, selects this mode.)

Measures DataLoader configurations for a dataset on this machine (see
:mod:`traindoctor.tune.measure`) and prints the table and the recommended kwargs; ``-o`` writes
them in the format ``loader_kwargs(dataset, tuned=PATH)`` reads. Exit codes: 0 a recommendation
was made, 2 bad input or the dataset failed (a message, never a traceback). torch is imported
only after the arguments are parsed, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_ERROR = 0, 2
PROG = "traindoctor tune"


def build_parser() -> argparse.ArgumentParser:
    from traindoctor.tune.measure import DEFAULT_BATCHES, DEFAULT_TIME_BUDGET_S, DEFAULT_WARMUP_BATCHES

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Measure the fastest DataLoader settings (num_workers, prefetch_factor, "
        "pin_memory on CUDA) for a dataset on this machine.",
        epilog="DATASET_SPEC is MODULE:ATTRIBUTE (imported with the current directory on "
        "sys.path) or FILE.py:ATTRIBUTE, naming a Dataset or a zero-argument callable "
        "returning one, e.g. `traindoctor tune mypkg.data:train_set --batch-size 64 -o "
        "tuned.json`, then `DataLoader(ds, batch_size=64, **loader_kwargs(ds, "
        'tuned="tuned.json"))`. To tune the whole training loop instead (loader '
        "settings and torch threads, measured with your model in the loop): `traindoctor "
        "tune [--budget SECONDS] [--output-format text|json] [--html FILE] [-o FILE] SCRIPT "
        "[ARGS...]`.",
    )
    parser.add_argument("dataset", metavar="DATASET_SPEC", help="MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE")
    parser.add_argument("--batch-size", type=int, required=True, help="batch size to measure with")
    parser.add_argument(
        "--max-workers", type=int, help="largest num_workers to try (default: the cores this process may use)"
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=DEFAULT_BATCHES,
        help=f"timed batches per configuration (default {DEFAULT_BATCHES})",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=DEFAULT_WARMUP_BATCHES,
        help=f"warm-up batches per configuration, the first one timed as "
        f"first-batch latency (default {DEFAULT_WARMUP_BATCHES})",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=DEFAULT_TIME_BUDGET_S,
        help=f"seconds per configuration before it is cut short (default {DEFAULT_TIME_BUDGET_S:g})",
    )
    parser.add_argument(
        "--collate-fn", metavar="SPEC", help="MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE of a collate function"
    )
    parser.add_argument("--device", help="where batches go (default: cuda if available, else cpu)")
    parser.add_argument("-o", "--output", metavar="PATH", help="write the result (JSON) here")
    parser.add_argument("--output-format", choices=["text", "json"], default="text")
    return parser


def _error(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_ERROR


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_text(result: Any, display: str, output: str | None) -> str:
    """The table, the recommendation, and how to use it."""
    samples = "" if result.samples is None else f" ({result.samples} samples)"
    lines = [
        f"{display}{samples}: batch_size={result.batch_size}, {result.cores} usable "
        f"core{'s' if result.cores != 1 else ''}, device {result.device}",
        f"{result.batches} timed batches per configuration after {result.warmup_batches} warm-up "
        "batches (+ num_workers x prefetch_factor to drain what workers buffered at start-up);",
        "the loop only fetches batches (no model): this is the rate the loader can deliver",
        "",
    ]
    rows = [("config", "batches/s", "first batch ms", "speedup")]
    for m in result.measurements:
        speed = result.speedup(m)
        first = _fmt(None if m.first_batch_s is None else m.first_batch_s * 1e3, ".1f")
        if m.error is not None:
            rate, speedup = "failed", "-"
        else:
            rate = _fmt(m.batches_per_s, ".1f") + (" (capped)" if m.capped else "")
            speedup = "-" if speed is None else f"{speed:.2f}x"
        rows.append((m.candidate.label(), rate, first, speedup))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        lines.append(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}")
    lines.append("")
    for note in result.notes:
        lines.append(f"note: {note}")
    if result.notes:
        lines.append("")
    lines.append("recommended (the fastest; fewer workers preferred within 5%):")
    lines.append(f"  {json.dumps(result.recommended, sort_keys=True)}")
    lines.append("")
    path = output or "tuned.json"
    if output:
        lines.append(f"written to {output}; use it with:")
    else:
        lines.append(f"save it with `-o {path}`, then use it with:")
    lines.append("  from traindoctor.recipes import loader_kwargs")
    lines.append(f'  DataLoader(ds, batch_size={result.batch_size}, **loader_kwargs(ds, tuned="{path}"))')
    return "\n".join(lines) + "\n"


EXAMPLES = """\
examples:
  traindoctor tune train.py --epochs 1                   # script mode: the script's own arguments after it
  traindoctor tune --budget 120 -o tuned.json train.py --data ./data
  traindoctor tune --output-format json train.py > tune.json
  traindoctor tune mypkg.data:train_set --batch-size 64 -o tuned.json   # dataset mode
  traindoctor tune data.py:make_dataset --batch-size 32 --max-workers 4
then, in the training script:
  DataLoader(ds, batch_size=64, **loader_kwargs(ds, tuned="tuned.json"))   # traindoctor.recipes
"""


def full_help() -> str:
    """``traindoctor tune --help``: both modes, their options and examples."""
    from traindoctor.tune import script_cli

    dataset = build_parser().format_help()
    return (
        "traindoctor tune has two modes.\n\nSCRIPT MODE (the whole training loop, with your model in it)\n"
        + script_cli.USAGE
        + "\nDATASET MODE (the DataLoader alone, no model)\n"
        + dataset
        + "\n"
        + EXAMPLES
    )


def _wants_help(argv: Sequence[str]) -> bool:
    """``-h``/``--help`` (or nothing at all) before any SCRIPT, outside the dataset mode's own
    ``--batch-size ... --help`` (argparse's help of that mode)."""
    from traindoctor.errors import UsageError
    from traindoctor.tune import script_cli

    if not argv:
        return True
    if any(a == "--batch-size" or a.startswith("--batch-size=") for a in argv):
        return False
    try:
        opts, _, _ = script_cli.split(argv)
    except UsageError:
        return False
    return bool(opts["help"])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from traindoctor.tune import script_cli

    if _wants_help(argv):
        sys.stdout.write(full_help())
        return EXIT_OK
    if script_cli.looks_like_script_mode(argv):  # `tune SCRIPT [ARGS]`: the whole training loop
        return script_cli.main(argv)
    args = build_parser().parse_args(argv)
    if args.batch_size < 1:
        return _error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_workers is not None and args.max_workers < 0:
        return _error(f"--max-workers must be >= 0, got {args.max_workers}")
    if args.batches < 1 or args.warmup < 1:
        return _error("--batches and --warmup must be >= 1")
    if not args.time_budget > 0:
        return _error("--time-budget must be > 0")

    try:
        import torch  # noqa: F401 - fail here, with a message, when torch is missing
    except ImportError as exc:
        return _error(f"needs PyTorch ({exc})")
    from traindoctor.tune.measure import TuneError, tune_loader
    from traindoctor.tune.spec import SpecError, load_dataset, load_object

    try:
        dataset, display = load_dataset(args.dataset)
        collate_fn = load_object(args.collate_fn) if args.collate_fn else None
        result = tune_loader(
            dataset,
            batch_size=args.batch_size,
            collate_fn=collate_fn,
            batches=args.batches,
            warmup_batches=args.warmup,
            time_budget_s=args.time_budget,
            device=args.device,
            max_workers=args.max_workers,
        )
    except (SpecError, TuneError) as exc:
        return _error(str(exc))
    result.dataset = display
    if args.output:
        try:
            result.write(args.output)
        except OSError as exc:
            return _error(f"cannot write {args.output}: {exc}")
    if args.output_format == "json":
        sys.stdout.write(result.to_json())
    else:
        sys.stdout.write(render_text(result, display, args.output))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
