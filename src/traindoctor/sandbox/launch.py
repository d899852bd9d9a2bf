"""``python -m traindoctor.sandbox.launch -- CMD...``: restrict this process with Landlock, then become CMD.

The writable folders come from :data:`traindoctor.sandbox.policy.ENV_WRITABLE`; with
:data:`~traindoctor.sandbox.policy.ENV_SHM` ``private``, ``/dev/shm`` is first replaced by a private
tmpfs (:mod:`traindoctor.sandbox.namespace`). Landlock and the
seccomp filter survive ``exec`` and are inherited by every process CMD starts (DataLoader
workers, ``torchrun``'s ranks, subprocesses), so nothing the trial runs can write elsewhere.
Exit status 70 (and a message) when the sandbox cannot be set up: the trial never runs unsandboxed.
"""

from __future__ import annotations

import os
import sys

from traindoctor.sandbox import landlock, namespace, seccomp
from traindoctor.sandbox.policy import ENV_SHM, ENV_WRITABLE, PRIVATE, device_files

EXIT_SANDBOX_FAILED = 70


def main(argv: list[str] | None = None) -> int:
    """Restrict, then exec the command after ``--``."""
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = args[args.index("--") + 1 :] if "--" in args else args
    writable = [p for p in os.environ.get(ENV_WRITABLE, "").split(os.pathsep) if p]
    if not cmd or not writable:
        print("traindoctor.sandbox.launch: nothing to run, or no writable folder", file=sys.stderr)
        return EXIT_SANDBOX_FAILED
    try:
        if os.environ.get(ENV_SHM) == PRIVATE:
            namespace.private_shm()  # before Landlock, which forbids mounting
        landlock.restrict(writable, device_files())
        seccomp.deny_metadata_changes()
    except OSError as exc:
        print(f"traindoctor: could not start the sandbox: {exc}", file=sys.stderr)
        return EXIT_SANDBOX_FAILED
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)
    return EXIT_SANDBOX_FAILED  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main())
