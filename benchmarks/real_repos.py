"""The public repositories the two scaling measurements run on, and how one is checked.

``benchmarks/repos.tsv`` lists them (repository, commit, half, kind); nothing of their code is kept
in this repository. Each is brought here as a git snapshot (``SNAPSHOTS/owner+name/repo``, a git
directory without a work tree, as the ``fetch`` tool leaves it), its source and configuration files
are extracted at the listed commit into a scratch folder with an empty ``.git`` folder marking the
root, and ``traindoctor check . --output-format json --no-cache`` runs from that root, as a user runs
it. ``seeded_mistakes.py`` and ``precision_review.py`` share these helpers.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPOS_TSV = HERE / "repos.tsv"
SOURCE = HERE.parent / "src" / "traindoctor"
#: What a checkout keeps: what the checker reads (sources, notebooks, configuration files) and the
#: ``.gitignore`` files that decide which of them it reads.
KEEP_SUFFIXES = (".py", ".pyi", ".ipynb", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".json", ".gitignore")
HALVES = ("tune", "heldout")


@dataclass(frozen=True)
class Repo:
    """One row of ``repos.tsv``."""

    name: str
    commit: str
    half: str
    kind: str
    #: When the repository joined the measurement (see the notes of ``repos.tsv``).
    round: int = 1

    @property
    def label(self) -> str:
        """A file-name-safe label: ``owner+name``."""
        return self.name.replace("/", "+")


def split_key(name: str) -> str:
    """The order a kind's repositories are dealt to the halves in: a hash of the name, so that the
    split depends on nothing but the list itself."""
    return hashlib.sha256(name.lower().encode()).hexdigest()


def assign_halves(rows: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{repo: half}`` for ``(repo, kind)`` rows: sorted by kind, then by :func:`split_key`, and
    dealt alternately to ``tune`` and ``heldout`` down that one list, so each kind is split evenly
    (an odd kind's extra repository goes to whichever half the running count favours) and the two
    halves differ by at most one repository."""
    ordered = sorted(rows, key=lambda row: (row[1], split_key(row[0])))
    return {name: HALVES[i % 2] for i, (name, _kind) in enumerate(ordered)}


def read_repos(path: Path = REPOS_TSV, half: str = "all") -> list[Repo]:
    """The rows of ``repos.tsv`` (``#`` lines are its header notes), those of one half unless
    ``half`` is ``all``."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    rows = csv.DictReader(lines, delimiter="\t")
    repos = [Repo(r["repo"], r["commit"], r["half"], r["kind"], int(r.get("round") or 1)) for r in rows]
    return [r for r in repos if half in ("all", r.half)]


def git_dir(snapshots: Path, repo: Repo) -> Path:
    """The snapshot's git directory (some snapshots are clones with a work tree)."""
    root = snapshots / repo.label / "repo"
    return root / ".git" if (root / ".git").is_dir() else root


def _git(git: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git), *args], input=data, capture_output=True, check=True).stdout


def tracked_files(git: Path, commit: str) -> list[str]:
    """The paths a checkout keeps (see ``KEEP_SUFFIXES``) whose blob the snapshot holds (a snapshot
    lacks files of 4 MiB and more)."""
    listing = _git(git, "ls-tree", "-r", "-z", commit).decode(errors="surrogateescape").split("\0")
    entries = []
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000" and path.endswith(KEEP_SUFFIXES):
            entries.append((sha, path))
    if not entries:
        return []
    answers = _git(git, "cat-file", "--batch-check", data="".join(f"{sha}\n" for sha, _ in entries).encode())
    present = {line.split()[0] for line in answers.decode().splitlines() if not line.endswith("missing")}
    return [path for sha, path in entries if sha in present]


def extract(git: Path, commit: str, into: Path) -> list[str]:
    """Write the kept files of ``commit`` under ``into`` (an empty ``.git`` folder marks the root);
    returns their paths."""
    paths = tracked_files(git, commit)
    into.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(paths), 500):  # keep the command line short
        archive = _git(git, "archive", "--format=tar", commit, "--", *paths[start : start + 500])
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / ".git").mkdir(exist_ok=True)
    return paths


def check(root: Path, timeout: float = 1800) -> list[dict[str, Any]]:
    """The findings of ``traindoctor check . --output-format json --no-cache`` run from ``root``
    (one worker process: the benchmarks run several checks side by side instead)."""
    done = subprocess.run(
        # -P: the tree's root is not put on sys.path (a project's own ``types.py`` would shadow the stdlib's)
        [sys.executable, "-P", "-m", "traindoctor", "check", ".", "--output-format", "json", "--no-cache"]
        + ["--exit-zero", "-j", "1"],
        cwd=root,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(SOURCE.parent)},
    )
    if done.returncode != 0:
        raise RuntimeError(f"check failed in {root} (exit {done.returncode}): {done.stderr.decode()[-2000:]}")
    findings: list[dict[str, Any]] = json.loads(done.stdout)
    for finding in findings:
        finding["filename"] = relative(finding["filename"], root)
        for related in finding.get("related") or []:
            related["filename"] = relative(related["filename"], root)
    return findings


def relative(filename: str, root: Path) -> str:
    """``filename`` relative to the checked root, in POSIX form."""
    path = Path(filename)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(root.resolve())
        except ValueError:
            return path.as_posix()
    return path.as_posix()


def checker_version() -> str:
    """A hash of the checker's sources: cached results are reused only by the same checker."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE.rglob("*.py")):
        digest.update(path.relative_to(SOURCE).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def default_cache() -> Path:
    """Where results are cached between runs (``TRAINDOCTOR_BENCH_CACHE`` overrides)."""
    return Path(os.environ.get("TRAINDOCTOR_BENCH_CACHE", Path.home() / ".cache" / "traindoctor-bench"))


def first_round_heldout(repos: list[Repo]) -> list[str]:
    """The repositories round 1 dealt to the held-out half (spent after rounds 2-3, now tuned on)."""
    dealt = assign_halves((r.name, r.kind) for r in repos if r.round == 1)
    return sorted(name for name, half in dealt.items() if half == "heldout")


def main(argv: list[str] | None = None) -> int:
    """``--verify``: whether ``repos.tsv`` keeps its deal: the latest round held out, every earlier
    round tuned on (round 1 was dealt by :func:`assign_halves`; its held-out half and later held-out
    rounds, once spent, joined the tune half)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify", action="store_true", help="check the halves of repos.tsv")
    args = parser.parse_args(argv)
    repos = read_repos()
    rounds = sorted({r.round for r in repos})
    latest = rounds[-1] if rounds else 0
    wrong = [r.name for r in repos if r.half != ("heldout" if r.round == latest and latest > 1 else "tune")]
    counts = {h: sum(r.half == h for r in repos) for h in HALVES}
    per_round = ", ".join(f"round {n}: {sum(r.round == n for r in repos)}" for n in rounds)
    spent = first_round_heldout(repos)
    print(
        f"{len(repos)} repositories ({per_round}): {counts}; halves {'differ for ' + ', '.join(wrong) if wrong else 'as dealt'}"
    )
    print(f"round 1's held-out half (spent, now tuned on): {len(spent)} repositories; held out: round {latest}")
    return 1 if (args.verify and wrong) else 0


if __name__ == "__main__":
    sys.exit(main())
