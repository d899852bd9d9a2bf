"""Child process entry point of ``verify-resume``: install the recorder, then run the script.

``python -m traindoctor.resume._child --mode M --target N [--offset K] [--interrupt-at K]
[--detail-step S] --out DIR -- SCRIPT ARGS...``

The script runs as ``traindoctor run`` runs it (:mod:`traindoctor.runtime.script`); the child's
exit code is the script's, and the record says ``ended`` (exit code 0) or ``crashed``.
"""

from __future__ import annotations

import argparse
import os
import sys

from traindoctor.runtime.script import ScriptRunner


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
    if os.environ.get("TRAINDOCTOR_MIRROR") == "1":
        import torch

        from traindoctor.resume.sandbox import guard_torch_save, install_write_guard

        install_write_guard()
        torch.save = guard_torch_save(torch.save)
    code = ScriptRunner(opts.script, args).run().code
    recorder.write_record("ended" if code == 0 else "crashed")
    return code


if __name__ == "__main__":
    sys.exit(main())
