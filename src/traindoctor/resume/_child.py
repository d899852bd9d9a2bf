"""Child process entry point of ``verify-resume``: install the recorder, then run the script.

``python -m traindoctor.resume._child --mode M --target N [--offset K] [--interrupt-at K]
[--detail-step S] --out DIR -- SCRIPT ARGS...``
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback


def main() -> int:
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
    sys.argv = [opts.script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(opts.script)))
    try:
        runpy.run_path(opts.script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        recorder.write_record("ended" if code == 0 else "crashed")
        return code
    except BaseException:
        traceback.print_exc()
        recorder.write_record("crashed")
        return 1
    recorder.write_record("ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
