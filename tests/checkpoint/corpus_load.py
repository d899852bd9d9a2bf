"""Run ``traindoctor.checkpoint.load`` on hostile DCP directories, each in a forked child under limits.

``python corpus_load.py CASES.json OUT.json``: CASES is a list of ``{"name", "target"}``. torch
is imported once; each case then runs in a child process (``os.fork``) whose address space may
grow by at most ``EXTRA_MEMORY`` bytes beyond the parent's and whose CPU time is capped at
``CPU_SECONDS`` (``RLIMIT_AS``, ``RLIMIT_CPU``); the parent kills a child still running after
``WALL_SECONDS``. OUT gets, per case: ``outcome`` (``refused``: a ``CheckpointReadError``;
``loaded``; ``error``: any other exception; ``killed``: a signal or the wall clock), the
exception's type and message, the wall time and the child's peak resident memory.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import sys
import time
import warnings

EXTRA_MEMORY = 512 << 20
CPU_SECONDS = 10
WALL_SECONDS = 30


def _virtual_size() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _child(target: str, write_fd: int) -> None:
    import torch

    from traindoctor.checkpoint import load
    from traindoctor.checkpoint.inspection import CheckpointReadError

    limit = _virtual_size() + EXTRA_MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    try:
        load(target, model=model, optimizer=optimizer)
        result = {"outcome": "loaded", "type": "", "message": ""}
    except CheckpointReadError as exc:
        result = {"outcome": "refused", "type": type(exc).__name__, "message": str(exc)}
    except BaseException as exc:
        result = {"outcome": "error", "type": type(exc).__name__, "message": str(exc)[:2000]}
    os.write(write_fd, json.dumps(result).encode())


def run_case(target: str) -> dict[str, object]:
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        try:
            _child(target, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    status = 0
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - started > WALL_SECONDS:
            os.kill(pid, signal.SIGKILL)
            done, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    with os.fdopen(read_fd, "rb") as fh:
        raw = fh.read()
    result: dict[str, object] = json.loads(raw) if raw else {"outcome": "killed", "type": "", "message": ""}
    if os.WIFSIGNALED(status):
        result = {"outcome": "killed", "type": f"signal {os.WTERMSIG(status)}", "message": ""}
    result["seconds"] = elapsed
    result["max_rss_bytes"] = usage.ru_maxrss * 1024
    return result


def main() -> None:
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    import traindoctor.checkpoint  # noqa: F401  (imported before the forks)

    # the children's garbage collections need not walk torch's objects, inherited by every fork
    gc.freeze()

    with open(sys.argv[1]) as fh:
        cases = json.load(fh)
    out = {case["name"]: run_case(case["target"]) for case in cases}
    with open(sys.argv[2], "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
