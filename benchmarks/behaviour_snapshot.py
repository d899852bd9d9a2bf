"""Record, or compare against a record, what `traindoctor check` says about a fixed set of trees.

A refactoring that must not change behaviour is checked by running this before and after it: the
JSON of `traindoctor check . --output-format json --no-cache` from the root of each tree, written
one file per tree, must be byte-identical.

Trees:

- the installed packages ``torch``, ``lightning``, ``pytorch_lightning``, ``transformers`` and
  ``accelerate`` (whichever are installed; located without importing them);
- with ``--repos SNAPSHOTS``, every repository of the shared real-world corpus's manifest at its
  labelled commit (SNAPSHOTS holds git snapshots as ``owner+name/repo``; the Python, TOML, CFG and
  YAML files are extracted to a scratch folder, as the corpus's ``score.py --repos`` does).

    python benchmarks/behaviour_snapshot.py OUT_DIR [--repos SNAPSHOTS] [--manifest FILE]
    python benchmarks/behaviour_snapshot.py OUT_DIR --compare BEFORE_DIR [--repos SNAPSHOTS]

``--compare`` writes OUT_DIR as usual, then lists every tree whose JSON differs from BEFORE_DIR's
and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("torch", "lightning", "pytorch_lightning", "transformers", "accelerate")
DEFAULT_MANIFEST = Path(__file__).resolve().parent.parent.parent / "shared/corpus/realworld/manifest.tsv"
KEEP_SUFFIXES = (".py", ".toml", ".cfg", ".yaml", ".yml", ".json", ".ipynb")


def package_roots() -> dict[str, Path]:
    roots = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)  # locating a package does not import it
        if spec is not None and spec.submodule_search_locations:
            roots[f"pkg-{name}"] = Path(next(iter(spec.submodule_search_locations)))
    return roots


def check_json(root: Path) -> bytes:
    done = subprocess.run(
        # -P: the tree's root is not put on sys.path (torch's own ``types.py`` would shadow the stdlib's)
        [
            sys.executable,
            "-P",
            "-m",
            "traindoctor",
            "check",
            ".",
            "--output-format",
            "json",
            "--no-cache",
            "--exit-zero",
        ],
        cwd=root,
        capture_output=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"check failed in {root} (exit {done.returncode}):\n{done.stderr.decode()[-2000:]}")
    return done.stdout


def repo_trees(snapshots: Path, manifest: Path) -> list[tuple[str, Path, str]]:
    """(label, git dir, commit) for every repository and commit of the manifest that is present."""
    seen: set[tuple[str, str]] = set()
    out = []
    with manifest.open() as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            key = (row["repo"], row["commit"])
            if key in seen:
                continue
            seen.add(key)
            git = snapshots / row["repo"].replace("/", "+") / "repo"
            git = git / ".git" if (git / ".git").is_dir() else git
            if git.is_dir():
                out.append((f"repo-{row['repo'].replace('/', '+')}-{row['commit'][:10]}", git, row["commit"]))
    return out


def extract(git: Path, commit: str, into: Path) -> bool:
    names = subprocess.run(
        ["git", "--git-dir", str(git), "ls-tree", "-r", "--name-only", commit], capture_output=True, text=True
    )
    if names.returncode != 0:
        return False
    keep = [n for n in names.stdout.split("\n") if n.endswith(KEEP_SUFFIXES)]
    archive = subprocess.run(["git", "--git-dir", str(git), "archive", commit, *keep], capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repos", type=Path, help="folder of git snapshots (owner+name/repo)")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--compare", type=Path, help="a folder this script wrote before")
    parser.add_argument("--only", action="append", default=[], help="only trees whose label contains this")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    written = []
    for label, root in package_roots().items():
        if args.only and not any(o in label for o in args.only):
            continue
        (args.out / f"{label}.json").write_bytes(check_json(root))
        written.append(label)
        print(label, flush=True)
    if args.repos is not None and args.manifest.is_file():
        for label, git, commit in repo_trees(args.repos, args.manifest):
            if args.only and not any(o in label for o in args.only):
                continue
            with tempfile.TemporaryDirectory() as tree:
                if not extract(git, commit, Path(tree)):
                    print(f"{label}: commit not in the snapshot, skipped", flush=True)
                    continue
                (args.out / f"{label}.json").write_bytes(check_json(Path(tree)))
            written.append(label)
            print(label, flush=True)

    if args.compare is None:
        return 0
    differ = []
    for label in written:
        before = args.compare / f"{label}.json"
        if not before.is_file() or before.read_bytes() != (args.out / f"{label}.json").read_bytes():
            differ.append(label)
    missing = sorted(p.stem for p in args.compare.glob("*.json") if p.stem not in written)
    for label in differ:
        print(f"DIFFERS: {label}")
    for label in missing:
        print(f"NOT RE-RUN: {label}")
    print(f"{len(written) - len(differ)} of {len(written)} trees identical")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
