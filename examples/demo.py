"""`make demo`: run traindoctor on the bundled examples and show what it finds.

1. The static checker over `examples/static/` (scripts with and without mistakes).
2. The fixes it can apply, as a diff (nothing is written).
3. The runtime doctor on a small training script with a slow input pipeline.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n$ {text}\n{'=' * 78}", flush=True)


def traindoctor(*args: str) -> int:
    banner("traindoctor " + " ".join(args))
    return subprocess.call([sys.executable, "-m", "traindoctor", *args], cwd=HERE.parent)


def main() -> int:
    failures = 0
    # Exit code 1 means "findings reported": expected on the bad examples.
    failures += traindoctor("check", "examples/static") not in (0, 1)
    failures += traindoctor("check", "--statistics", "examples/static") not in (0, 1)
    failures += traindoctor("check", "--diff", "examples/static") not in (0, 1)
    clean = [p for p in ("examples/static/train_clean.py", "examples/recipes_train.py") if (HERE.parent / p).exists()]
    failures += traindoctor("check", *clean) != 0
    slow = HERE / "runtime" / "slow_pipeline.py"
    if slow.exists():
        failures += traindoctor("run", "examples/runtime/slow_pipeline.py") not in (0, 1)
    if failures:
        print(f"\ndemo: {failures} step(s) did not behave as expected", file=sys.stderr)
        return 1
    print("\ndemo: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
