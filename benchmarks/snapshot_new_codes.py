"""Prove that two behaviour snapshots differ only by new findings of the given codes.

    python benchmarks/snapshot_new_codes.py BEFORE_DIR AFTER_DIR --codes TD207,TD208,...

For every tree (``*.json`` of ``behaviour_snapshot.py``), every finding of BEFORE must be in AFTER
unchanged (compared as whole JSON objects, with multiplicity), and every finding AFTER adds must
have one of the codes. Prints the added findings per code and per tree; exits 1 on any other
difference (a finding changed or vanished, a new finding of another code, a tree missing).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def _findings(path: Path) -> list[dict[str, object]]:
    data = json.loads(path.read_bytes() or b"[]")
    return data if isinstance(data, list) else data.get("findings", [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--codes", required=True, help="comma-separated new codes")
    args = parser.parse_args(argv)
    codes = set(args.codes.split(","))
    bad = 0
    per_code: Counter[str] = Counter()
    for before_path in sorted(args.before.glob("*.json")):
        after_path = args.after / before_path.name
        if not after_path.is_file():
            print(f"MISSING: {before_path.stem}")
            bad += 1
            continue
        before = Counter(json.dumps(f, sort_keys=True) for f in _findings(before_path))
        after = Counter(json.dumps(f, sort_keys=True) for f in _findings(after_path))
        lost = before - after
        added = after - before
        for text in lost.elements():
            print(f"CHANGED OR VANISHED in {before_path.stem}: {text[:200]}")
            bad += 1
        tree_codes: Counter[str] = Counter()
        for text in added.elements():
            code = str(json.loads(text).get("code"))
            if code not in codes:
                print(f"NEW FINDING OF AN OLD CODE in {before_path.stem}: {text[:200]}")
                bad += 1
            tree_codes[code] += 1
        per_code.update(tree_codes)
        if tree_codes:
            print(f"{before_path.stem}: " + ", ".join(f"{c} +{n}" for c, n in sorted(tree_codes.items())))
    print("added per code: " + (", ".join(f"{c} {per_code[c]}" for c in sorted(codes)) or "none"))
    print("OK: only new findings of new codes" if not bad else f"{bad} other differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
