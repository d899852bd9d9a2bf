"""Seeded mistakes in real code: how many of the mistakes the catalog says ``check`` must report it
finds in repositories nobody tuned it on.

For each repository of ``repos.tsv`` (one half, or both) the snapshot is extracted at its commit,
the pattern finders of ``seed_finders.py`` find places where a practice is done right, and each
seed applies one minimal edit that introduces the mistake (``pin_memory=True`` removed from a
training loader, the optimizer dropped from a checkpoint dict, ``model.eval()`` deleted before an
evaluation loop, ...). ``traindoctor check . --output-format json --no-cache`` runs from the root
of the unedited tree (once per repository, cached) and of each edited tree. A seed is **found**
when the edited tree reports the kind's code at the seed's place (or one of its anchors), or
cites it as a related location, and the unedited tree does not report that code there; a seed
whose place the unedited tree already reports is **not scored** (the practice was not done right
after all). The edited tree's new findings of the code elsewhere are counted apart (``elsewhere``:
the checker noticed something but reported it at another place).

Recall is reported per kind, per scope (single-file: what the rule needs is in the edited file;
cross-file: the edit is in another module than where the finding must be reported or the
evidence lives) and per half. At most ``--per-kind`` seeds per repository and kind are scored
(chosen by a hash of file and line, so the choice is stable), so a repository with forty loaders
does not outweigh the rest.

``seeds.tsv`` (committed) lists the seeds by identity only: repository, commit, file, first edited
line, kind, scope; never code. ``--write-seeds`` rewrites it from the snapshots; a normal run
recomputes the seeds and scores those listed, reporting any listed seed the finders no longer
produce (``stale``).

Usage::

    python benchmarks/seeded_mistakes.py --repos /work/.mirror --half tune --json /tmp/seeded-tune.json
    python benchmarks/seeded_mistakes.py --repos /work/.mirror --half all --write-seeds
    python benchmarks/seeded_mistakes.py --repos /work/.mirror --half tune --show 40   # print edits to review

The review of a sample of tune-half edits is in ``seeded_review.md``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_repos import HALVES, Repo, check, checker_version, default_cache, extract, git_dir, read_repos
from seed_finders import KINDS, Project, Seed, Span, find_seeds
from seed_syntax import parse_modules

SEEDS_TSV = Path(__file__).resolve().parent / "seeds.tsv"
OUTCOMES = ("found", "elsewhere", "missed", "not-scored")
SEED_FIELDS = ("repo", "commit", "file", "line", "kind", "scope")


@dataclass(frozen=True)
class Case:
    """A seed of one repository, ready to score."""

    repo: Repo
    seed: Seed

    @property
    def ident(self) -> tuple[str, str, str, int, str]:
        return (self.repo.name, self.repo.commit, self.seed.file, self.seed.line, self.seed.kind)

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self.ident).encode()).hexdigest()[:20]


def spread(seed: Seed) -> str:
    """The order seeds of one repository and kind are taken in: a hash of file and line."""
    return hashlib.sha256(f"{seed.file}:{seed.line}".encode()).hexdigest()


def seeds_of(root: Path, paths: list[str], per_kind: int) -> list[Seed]:
    """The seeds of one extracted tree, at most ``per_kind`` of each kind."""
    found = find_seeds(Project(parse_modules(root, paths)))
    by_kind: dict[str, list[Seed]] = defaultdict(list)
    for found_seed in sorted(found, key=spread):
        if len(by_kind[found_seed.kind]) < per_kind:
            by_kind[found_seed.kind].append(found_seed)
    return sorted((s for group in by_kind.values() for s in group), key=lambda s: (s.file, s.line, s.kind))


def read_seed_list(path: Path) -> set[tuple[str, str, str, int, str]]:
    """The identities listed in ``seeds.tsv``."""
    if not path.exists():
        return set()
    with path.open() as handle:
        rows = csv.DictReader((line for line in handle if not line.startswith("#")), delimiter="\t")
        return {(r["repo"], r["commit"], r["file"], int(r["line"]), r["kind"]) for r in rows}


def write_seed_list(path: Path, cases: list[Case], replaced: set[str]) -> None:
    """Write the identities of ``cases`` (no code), keeping the listed rows of repositories
    other than ``replaced``."""
    rows = []
    if path.exists():
        with path.open() as handle:
            listed = csv.DictReader((line for line in handle if not line.startswith("#")), delimiter="\t")
            rows = [tuple(r[f] for f in SEED_FIELDS) for r in listed if r["repo"] not in replaced]
    rows += [tuple(map(str, (*c.ident, c.seed.scope))) for c in cases]
    rows.sort(key=lambda r: (r[0], r[2], int(r[3]), r[4]))
    header = "# Seeds of seeded_mistakes.py, by identity only: the edit is recomputed from the snapshot."
    path.write_text("\n".join([header, "\t".join(SEED_FIELDS), *("\t".join(r) for r in rows)]) + "\n")


def places(seed: Seed) -> list[Span]:
    """Where a finding of the seed counts: its place and its anchors."""
    return [(seed.file, *seed.place), *seed.anchors]


def at(filename: str, row: int, spans: list[Span]) -> bool:
    return any(filename == f and first <= row <= last for f, first, last in spans)


def cites(finding: dict[str, Any], spans: list[Span]) -> bool:
    """Whether the finding sits at one of ``spans`` or names one as a related location."""
    if at(finding["filename"], finding["location"]["row"], spans):
        return True
    for related in finding.get("related") or []:
        location = related.get("location") or {}
        if "row" in location and at(related["filename"], location["row"], spans):
            return True
    return False


def signature(finding: dict[str, Any]) -> tuple[str, str, int]:
    return (finding["code"], finding["filename"], finding["location"]["row"])


def score(seed: Seed, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
    """``found``, ``elsewhere``, ``missed`` or ``not-scored`` (see the module docs)."""
    code, spans = KINDS[seed.kind].code, places(seed)
    if any(f["code"] == code and cites(f, spans) for f in before):
        return "not-scored"
    if any(f["code"] == code and cites(f, spans) for f in after):
        return "found"
    old = {signature(f) for f in before}
    if any(f["code"] == code and signature(f) not in old for f in after):
        return "elsewhere"
    return "missed"


class Runner:
    """Extracts trees and runs checks, caching results by checker version."""

    def __init__(self, snapshots: Path, cache: Path, scratch: Path) -> None:
        self.snapshots, self.scratch = snapshots, scratch
        self.version = checker_version()
        self.cache = cache / "seeded" / self.version
        self.cache.mkdir(parents=True, exist_ok=True)

    def tree(self, repo: Repo) -> tuple[Path, list[str]]:
        root = self.scratch / repo.label
        listing = self.scratch / f"{repo.label}.paths"
        if not listing.exists():
            shutil.rmtree(root, ignore_errors=True)
            paths = extract(git_dir(self.snapshots, repo), repo.commit, root)
            listing.write_text("\n".join(paths))
        return root, listing.read_text().splitlines()

    def cached(self, name: str, run: Any) -> list[dict[str, Any]]:
        path = self.cache / f"{name}.json"
        if path.exists():
            findings: list[dict[str, Any]] = json.loads(path.read_text())
            return findings
        findings = run()
        if checker_version() != self.version:
            # the checker's sources changed while this ran: its findings belong to no version
            raise RuntimeError("the checker's sources changed during the run; run it again")
        path.write_text(json.dumps(findings))
        return findings

    def unedited(self, repo: Repo) -> list[dict[str, Any]]:
        root, _ = self.tree(repo)
        return self.cached(f"{repo.label}-{repo.commit[:12]}", lambda: check(root))

    def edited(self, case: Case) -> list[dict[str, Any]]:
        def run() -> list[dict[str, Any]]:
            root, _ = self.tree(case.repo)
            copy = Path(tempfile.mkdtemp(dir=self.scratch, prefix="edit-"))
            try:
                shutil.copytree(root, copy / "t", copy_function=os.link)
                target = copy / "t" / case.seed.file
                source = target.read_bytes()
                target.unlink()  # a hard link: write a new file, never into the shared one
                target.write_bytes(case.seed.edit.apply(source))
                return check(copy / "t")
            finally:
                shutil.rmtree(copy, ignore_errors=True)

        return self.cached(case.key, run)


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Recall per half, scope and kind (found / scored), with the other outcomes counted."""
    table: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        for key in ((r["half"], r["scope"], r["kind"]), (r["half"], r["scope"], "*"), (r["half"], "*", r["kind"])):
            table[key][r["outcome"]] += 1
        table[(r["half"], "*", "*")][r["outcome"]] += 1
    out = {}
    for (half, scope, kind), counts in sorted(table.items()):
        scored = counts["found"] + counts["elsewhere"] + counts["missed"]
        out[f"{half}/{scope}/{kind}"] = {
            **{outcome: counts[outcome] for outcome in OUTCOMES},
            "scored": scored,
            "recall": round(counts["found"] / scored, 3) if scored else None,
        }
    return out


def print_table(summary: dict[str, Any]) -> None:
    print(f"{'half/scope/kind':58} {'found':>5} {'scored':>6} {'recall':>6} {'elsewhere':>9} {'not-scored':>10}")
    for key, row in summary.items():
        recall = "-" if row["recall"] is None else f"{row['recall']:.2f}"
        print(
            f"{key:58} {row.get('found', 0):5} {row['scored']:6} {recall:>6} {row.get('elsewhere', 0):9} {row.get('not-scored', 0):10}"
        )


def show(case: Case, root: Path) -> str:
    """The edit as a small diff, for the review (printed, never committed)."""
    source = (root / case.seed.file).read_bytes()
    before = source.decode("utf-8", "replace").splitlines()
    after = case.seed.edit.apply(source).decode("utf-8", "replace").splitlines()
    lines = [f"== {case.repo.name} {case.seed.file}:{case.seed.line} {case.seed.kind} ({case.seed.scope})"]
    first, last = case.seed.edit.line, case.seed.edit.end_line
    lines += [f"- {x}" for x in before[first - 1 : last]] + [f"+ {x}" for x in after[first - 1 : last]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, required=True, help="folder of snapshots (OWNER+NAME/repo)")
    parser.add_argument("--half", choices=(*HALVES, "all"), default="tune")
    parser.add_argument("--json", type=Path, help="write every seed's outcome and the summary here")
    parser.add_argument("--per-kind", type=int, default=3, help="seeds per repository and kind (default 3)")
    parser.add_argument(
        "--jobs", type=int, default=max(1, min(4, (os.cpu_count() or 2))), help="checks run side by side"
    )
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--seeds", type=Path, default=SEEDS_TSV)
    parser.add_argument("--write-seeds", action="store_true", help="rewrite the seed list from the snapshots")
    parser.add_argument("--show", type=int, default=0, help="print the first N edits (for the review) and stop")
    parser.add_argument("--repo", action="append", help="only these repositories (OWNER/NAME)")
    parser.add_argument("--round", type=int, help="only the repositories of this round (repos.tsv)")
    args = parser.parse_args(argv)

    repos = [
        r
        for r in read_repos(half=args.half)
        if (not args.repo or r.name in args.repo) and args.round in (None, r.round)
    ]
    scratch = Path(tempfile.mkdtemp(prefix="td-seeded-"))
    runner = Runner(args.repos, args.cache, scratch)
    listed = read_seed_list(args.seeds)
    cases: list[Case] = []
    for repo in repos:
        root, paths = runner.tree(repo)
        cases += [Case(repo, s) for s in seeds_of(root, paths, args.per_kind)]
    if args.write_seeds:
        write_seed_list(args.seeds, cases, {r.name for r in repos})
        print(f"{len(cases)} seeds of {len(repos)} repositories written to {args.seeds}")
        shutil.rmtree(scratch, ignore_errors=True)
        return 0
    if listed:
        produced = {c.ident for c in cases}
        wanted = {row for row in listed if row[0] in {r.name for r in repos}}
        stale = sorted(wanted - produced)
        cases = [c for c in cases if c.ident in wanted]
        if stale:
            print(f"{len(stale)} listed seeds are no longer produced by the finders:", *stale[:10], sep="\n  ")
    if args.show:
        for case in cases[: args.show]:
            print(show(case, runner.tree(case.repo)[0]))
        shutil.rmtree(scratch, ignore_errors=True)
        return 0

    with ThreadPoolExecutor(args.jobs) as pool:
        befores = dict(zip([r.name for r in repos], pool.map(runner.unedited, repos)))
        afters = list(pool.map(runner.edited, cases))
    results = []
    for case, after in zip(cases, afters):
        outcome = score(case.seed, befores[case.repo.name], after)
        results.append(
            {
                "repo": case.repo.name,
                "commit": case.repo.commit,
                "half": case.repo.half,
                "file": case.seed.file,
                "line": case.seed.line,
                "kind": case.seed.kind,
                "code": KINDS[case.seed.kind].code,
                "scope": case.seed.scope,
                "outcome": outcome,
            }
        )
    summary = summarise(results)
    print(f"{len(results)} seeds in {len(repos)} repositories ({args.half})")
    print_table(summary)
    if args.json:
        args.json.write_text(json.dumps({"half": args.half, "seeds": results, "summary": summary}, indent=1))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
