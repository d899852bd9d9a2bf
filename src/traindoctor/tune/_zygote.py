"""A fork server for tuning trials: import torch once, fork a fresh child per trial.

``python -m traindoctor.tune._zygote`` reads one JSON request per line on stdin
(``{"argv": [...], "log": PATH, "cwd": DIR}``), forks, and in the child runs
:func:`traindoctor.tune._trial.main` with stdout/stderr going to ``log``. It answers
``{"pid": N}`` when the child started and ``{"status": CODE}`` when it ended. Each trial is still
its own process (isolated from the others and from the tuner), but skips the second or more that
importing torch costs, and ``torch._dynamo`` too: torch imports it the first time a script builds
an optimizer (its methods are wrapped to keep dynamo out), a second or two of every trial otherwise
(importing it starts no thread). The tuner starts the zygote inside the trials' sandbox
(:mod:`traindoctor.sandbox`), so every trial it forks is sandboxed too. The zygote itself never runs a torch operation, so no thread pool exists
when it forks. POSIX only; elsewhere the tuner starts a fresh interpreter per trial.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any


def _child(request: dict[str, Any]) -> None:
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        os.chdir(request["cwd"])
        from traindoctor.tune import _trial

        code = _trial.main(list(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def main() -> int:
    import torch
    import torch.utils.data

    try:
        import torch._dynamo  # noqa: F401  # what the script's first optimizer imports
    except Exception:  # pragma: no cover - a torch without dynamo
        pass

    import traindoctor.doctor.watch
    import traindoctor.sandbox.guard
    import traindoctor.tune._trial  # noqa: F401
    from traindoctor.runtime.probes.base import discover_probes

    discover_probes()
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
