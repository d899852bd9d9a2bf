"""Regenerate the README's report screenshots (docs/img/run-report.png, docs/img/tune-report.png).

    .venv/bin/python docs/make_screenshots.py [--tune-json RESULT.json]

The run report is a real ``traindoctor run --html`` of ``examples/runtime/slow_pipeline.py``, or,
with ``--run-json``, the page of a saved ``traindoctor run --output-format json`` report (the
README's image renders ``docs/img/run-slow_pipeline.json``, a run made while the shared 2-core
machine was quiet: under heavy load the demo's compute time balloons and the picture misleads).
The tune report renders ``--tune-json`` (the output of ``traindoctor tune --output-format json``),
by default ``docs/img/tune-slow_pipeline.json``: a real ``traindoctor tune --budget 60
examples/runtime/slow_pipeline.py --epochs 30`` on the 2-core development machine. Needs the html extra (plotly) and
Chromium (``apt-get install chromium``); uses the tests' headless-Chromium driver.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:0] = [str(ROOT / "src"), str(ROOT / "tests" / "report")]

import chromium  # noqa: E402
from html_fixtures import tune_result  # noqa: E402

from traindoctor.report.html import render_run_html, render_tune_html, write_html  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-json", help="a saved `traindoctor run --output-format json` report")
    parser.add_argument("--tune-json", help="a `traindoctor tune --output-format json` result")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args()
    out = Path(args.out).resolve()
    run_json = Path(args.run_json).resolve() if args.run_json else None
    os.chdir(ROOT)  # findings' file names are relative to the repository root
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        run_html = Path(tmp) / "run.html"
        if run_json:
            write_html(render_run_html(json.loads(run_json.read_text())), str(run_html))
        else:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "traindoctor",
                    "run",
                    "--html",
                    str(run_html),
                    "-o",
                    str(Path(tmp) / "run.txt"),
                    "examples/runtime/slow_pipeline.py",
                ],
                cwd=ROOT,
                check=True,
            )
        console = chromium.screenshot(run_html, out / "run-report.png", height=2160)
        saved = Path(args.tune_json) if args.tune_json else ROOT / "docs" / "img" / "tune-slow_pipeline.json"
        tune = json.loads(saved.read_text()) if saved.exists() else tune_result()
        tune_html = Path(tmp) / "tune.html"
        write_html(render_tune_html(tune), str(tune_html))
        console += chromium.screenshot(tune_html, out / "tune-report.png", height=1700)
    if console:
        print("console messages:", *console, sep="\n  ")
        return 1
    print(f"wrote {out / 'run-report.png'} and {out / 'tune-report.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
