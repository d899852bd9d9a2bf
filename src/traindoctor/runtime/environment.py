"""The report's facts about a watched run's process and machine, and its filenames (no torch import)."""

from __future__ import annotations

import os
import sys
from typing import Any


def run_environment(session: Any) -> dict[str, Any]:
    """Facts about the run of ``session`` (a :class:`~traindoctor.runtime.session.Session`) for
    the report: versions, platform, device, cores, ranks (no user data)."""
    import platform

    torch_version = None
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None:
        torch_version = getattr(torch_mod, "__version__", None)
    from traindoctor.version import __version__

    return {
        "traindoctor": __version__,
        "python": platform.python_version(),
        "torch": torch_version,
        "platform": platform_string(),
        "device": session.device.to_dict(),
        "uses_cuda": session.uses_cuda,
        "cpu_count": session.cpu_count,
        "machine_cores": session.machine_cores,
        "rank": session.rank,
        "world_size": session.world_size,
        "local_rank": session.local_rank,
        "local_world_size": session.local_world_size,
        "partial_reason": session.partial_reason or None,
    }


def current_dir() -> str:
    """The working directory, or "" when it no longer exists (filenames then stay as they are)."""
    try:
        return os.getcwd()
    except OSError:
        return ""


def relative_filename(finding: dict[str, Any], base: str) -> dict[str, Any]:
    """``finding`` with its filename relative to ``base`` when the file lies under it (the
    script's own name and those of the modules it imports alike, as ``check`` names them)."""
    name = finding.get("filename")
    if base and isinstance(name, str) and os.path.isabs(name):
        try:
            rel = os.path.relpath(name, base)
        except ValueError:  # pragma: no cover - another drive on Windows
            return finding
        if not rel.startswith(".."):
            finding["filename"] = rel
    return finding


def platform_string() -> str:
    """``platform.platform()``'s string without its ``uname -p`` subprocess.

    On Linux ``platform.platform()`` asks ``uname -p`` for a processor name (a fork and exec in
    every watched run, milliseconds of the user's time) that is almost always ``unknown`` or the
    machine name, both of which it then drops. Elsewhere ``platform.platform()`` is used as is.
    """
    import platform

    try:
        uname = os.uname()
    except AttributeError:  # pragma: no cover - Windows
        return platform.platform()
    if uname.sysname != "Linux":
        return platform.platform()
    libc, version = platform.libc_ver()
    parts = (uname.sysname, uname.release, uname.machine, "with", libc + version)
    text = "-".join(p.strip() for p in parts if p)
    for ch in ' /\\:;"()':
        text = text.replace(ch, "_" if ch == " " else "-")
    text = text.replace("unknown", "")
    while "--" in text:
        text = text.replace("--", "-")
    return text.rstrip("-")
