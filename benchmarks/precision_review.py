"""Whole-repository precision: ``traindoctor check .`` from the root of each repository of
``repos.tsv``, every finding judged right or wrong by reading the code around it.

The script checks each repository of one half (the same cached check as ``seeded_mistakes.py``'s
unedited trees), writes a **worksheet** (one row per finding, with the lines around it, for the
reviewer to read; written outside the repository, never committed: it holds code) and computes
precision per code from the **judgements** in ``precision_judgements.tsv`` (committed: repo,
commit, file, line, code, verdict ``right``/``wrong``, the class of a wrong one, a short note; no
code). A finding without a judgement is counted as ``unjudged`` and left out of the precision; a
judgement that matches no finding any more is reported as ``gone`` (the checker stopped
reporting it: a fixed false positive, or a lost true one).

"right" includes right-but-of-little-value; "wrong" is a false positive. Judge the tune half
while tuning; the held-out half is judged once, at the end, by someone who did not tune (its
worksheet is written only when asked for with ``--half heldout``).

Usage::

    python benchmarks/precision_review.py --repos /work/.mirror --half tune --worksheet /tmp/ws-tune.txt
    python benchmarks/precision_review.py --repos /work/.mirror --half tune --json /tmp/precision-tune.json
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_repos import HALVES, default_cache, read_repos
from seeded_mistakes import Runner

JUDGEMENTS = Path(__file__).resolve().parent / "precision_judgements.tsv"
FIELDS = ("repo", "commit", "file", "line", "code", "verdict", "class", "note")
Key = tuple[str, str, str, str, str]


def read_judgements(path: Path = JUDGEMENTS) -> dict[Key, dict[str, str]]:
    """``{(repo, commit, file, line, code): row}`` of the judgements file (``#`` lines are notes)."""
    if not path.exists():
        return {}
    with path.open() as handle:
        rows = csv.DictReader((line for line in handle if not line.startswith("#")), delimiter="\t")
        return {(r["repo"], r["commit"], r["file"], r["line"], r["code"]): r for r in rows}


def line_of(finding: dict[str, Any]) -> str:
    """A finding's line as the judgements file writes it: ``ROW``, or ``CELL:ROW`` in a notebook
    (the cell's 1-based index among all cells, the row within the cell)."""
    row = finding["location"]["row"]
    return f"{finding['cell']}:{row}" if finding.get("cell") is not None else str(row)


def key_of(repo: str, commit: str, finding: dict[str, Any]) -> Key:
    return (repo, commit, finding["filename"], line_of(finding), finding["code"])


def source_lines(path: Path, cell: int | None) -> list[str]:
    """The lines of a Python file, or of one cell of a notebook."""
    if cell is None:
        return path.read_text(errors="replace").splitlines()
    cells = json.loads(path.read_text(errors="replace")).get("cells", [])
    source = cells[cell - 1].get("source", "") if 0 < cell <= len(cells) else ""
    return ("".join(source) if isinstance(source, list) else source).splitlines()


def tally(found: dict[str, list[Key]], judged: dict[Key, dict[str, str]], halves: dict[str, str]) -> dict[str, Any]:
    """Precision per half and code: right / (right + wrong), with the unjudged and the wrong
    findings' classes counted."""
    table: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    classes: dict[str, Counter[str]] = defaultdict(Counter)
    for repo, keys in found.items():
        half = halves[repo]
        for key in keys:
            row = judged.get(key)
            verdict = row["verdict"] if row else "unjudged"
            for code in (key[4], "*"):
                table[(half, code)][verdict] += 1
            if verdict == "wrong":
                classes[half][row["class"] if row else ""] += 1
    current = {k for keys in found.values() for k in keys}
    gone = sorted(k for k in judged if k[0] in found and k not in current)
    out: dict[str, Any] = {"precision": {}, "wrong_classes": {h: dict(c.most_common()) for h, c in classes.items()}}
    for (half, code), counts in sorted(table.items()):
        judged_n = counts["right"] + counts["wrong"]
        out["precision"][f"{half}/{code}"] = {
            "right": counts["right"],
            "wrong": counts["wrong"],
            "unjudged": counts["unjudged"],
            "precision": round(counts["right"] / judged_n, 3) if judged_n else None,
        }
    out["gone"] = [list(k) for k in gone]
    return out


def worksheet(runner: Runner, repo: Any, findings: list[dict[str, Any]], context: int) -> list[str]:
    """Each finding with the lines around it (for reading; never committed)."""
    root, _ = runner.tree(repo)
    out = []
    for f in sorted(findings, key=lambda f: (f["filename"], f.get("cell") or 0, f["location"]["row"], f["code"])):
        row = f["location"]["row"]
        out.append(f"=== {repo.name}\t{repo.commit}\t{f['filename']}\t{line_of(f)}\t{f['code']}\t{f['message']}")
        for related in f.get("related") or []:
            out.append(f"    related {related['filename']}:{(related.get('location') or {}).get('row')}")
        path = root / f["filename"]
        if path.suffix in (".py", ".ipynb") and path.exists():
            lines = source_lines(path, f.get("cell"))
            for n in range(max(1, row - context), min(len(lines), row + context) + 1):
                out.append(f"{'>' if n == row else ' '}{n:5} {lines[n - 1]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder of snapshots (OWNER+NAME/repo)")
    parser.add_argument("--half", choices=(*HALVES, "all"), default="tune")
    parser.add_argument("--worksheet", type=Path, help="write the findings with their context here")
    parser.add_argument("--context", type=int, default=8, help="lines of context either side in the worksheet")
    parser.add_argument("--json", type=Path, help="write the precision table here")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--judgements", type=Path, default=JUDGEMENTS)
    parser.add_argument("--round", type=int, help="only the repositories of this round (repos.tsv)")
    args = parser.parse_args(argv)

    repos = [r for r in read_repos(half=args.half) if args.round in (None, r.round)]
    scratch = Path(tempfile.mkdtemp(prefix="td-precision-"))
    runner = Runner(args.repos, args.cache, scratch)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(zip([r.name for r in repos], pool.map(runner.unedited, repos)))
    if args.worksheet:
        lines = [line for r in repos for line in worksheet(runner, r, results[r.name], args.context)]
        args.worksheet.write_text("\n".join(lines) + "\n")
        print(f"worksheet: {args.worksheet}")
    found = {r.name: [key_of(r.name, r.commit, f) for f in results[r.name]] for r in repos}
    summary = tally(found, read_judgements(args.judgements), {r.name: r.half for r in repos})
    print(f"{sum(map(len, found.values()))} findings in {len(repos)} repositories ({args.half})")
    print(f"{'half/code':20} {'right':>5} {'wrong':>5} {'unjudged':>8} {'precision':>9}")
    for name, row in summary["precision"].items():
        value = "-" if row["precision"] is None else f"{row['precision']:.2f}"
        print(f"{name:20} {row['right']:5} {row['wrong']:5} {row['unjudged']:8} {value:>9}")
    for half, classes in summary["wrong_classes"].items():
        print(f"wrong findings by class ({half}):", *(f"  {n:3}  {c}" for c, n in classes.items()), sep="\n")
    if summary["gone"]:
        print(f"{len(summary['gone'])} judged findings no longer reported")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
