"""Child process entry point of ``verify-resume``: install the recorder, then run the script.

``python -m traindoctor.resume._child --mode M --target N [--offset K] [--interrupt-at K]
[--detail-step S] --out DIR -- SCRIPT ARGS...``

The script runs as ``traindoctor run`` runs it (:mod:`traindoctor.runtime.script`), in the
sandbox :mod:`traindoctor.resume.runner` started the child in, with the sandbox's guard installed;
the child's exit code is the script's, and the record says ``ended`` (exit code 0) or ``crashed``.
"""

from __future__ import annotations

import argparse
import os
import sys

from traindoctor.runtime.script import ScriptRunner
from traindoctor.sandbox.guard import install_from_env


def main() -> int:
    """Parse the child's command line, install the recorder, run the script; its exit code."""
    parser = argparse.ArgumentParser(prog="traindoctor.resume._child")
    parser.add_argument("--mode", choices=["reference", "interrupt", "resume"], required=True)
    parser.add_argument("--target", type=int, required=True)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--interrupt-at", type=int)
    parser.add_argument("--detail-step", type=int)
    parser.add_argument("--out", required=True)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args

    from traindoctor.resume.recorder import Recorder, install

    out, shared = opts.out, None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: one record per rank
        shared, out = out, os.path.join(out, f"rank{int(os.environ.get('RANK', '0'))}")
        os.makedirs(out, exist_ok=True)
    recorder = Recorder(
        mode=opts.mode,
        target=opts.target,
        offset=opts.offset,
        interrupt_at=opts.interrupt_at,
        detail_step=opts.detail_step,
        out_dir=out,
        shared_dir=shared,
    )
    install(recorder)
    install_from_env()  # the sandbox's guard: Python's writes to the view land on private copies
    code = ScriptRunner(opts.script, args).run().code
    recorder.write_record("ended" if code == 0 else "crashed")
    return code


if __name__ == "__main__":
    sys.exit(main())
