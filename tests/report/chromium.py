"""A tiny headless-Chromium driver for the HTML report tests (Debian's ``chromium`` package).

Each call starts a fresh browser with a fresh profile, lets the page's scripts run (virtual time,
so no sleeping), and returns the DOM after JavaScript ran plus every console message the page
logged (uncaught errors included): Chromium prints them to stderr as ``...:CONSOLE:N] "msg"``
with ``--enable-logging=stderr``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
]
SKIP_REASON = (
    "Chromium is not installed (apt-get install chromium; .ci/run installs it): "
    "the HTML report's browser test is skipped"
)


def find_chromium() -> str | None:
    """The browser binary: ``$TRAINDOCTOR_CHROMIUM`` or the first on PATH."""
    override = os.environ.get("TRAINDOCTOR_CHROMIUM")
    if override:
        return override if shutil.which(override) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    binary = find_chromium()
    if binary is None:
        raise RuntimeError(SKIP_REASON)
    with tempfile.TemporaryDirectory(prefix="td-chromium-") as profile:
        return subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "HOME": profile},
        )


def console_messages(stderr: str) -> list[str]:
    return [line.split("] ", 1)[-1] for line in stderr.splitlines() if ":CONSOLE" in line]


def load(page: Path, *, budget_ms: int = 10000, timeout: float = 180.0) -> tuple[str, list[str]]:
    """(DOM after the page's scripts ran, console messages) of the local file ``page``."""
    proc = _run([f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()], timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout, console_messages(proc.stderr)


def screenshot(
    page: Path, out: Path, *, width: int = 1280, height: int = 2000, budget_ms: int = 10000, timeout: float = 180.0
) -> list[str]:
    """Save a PNG of ``page`` at ``width`` x ``height``; returns the console messages."""
    proc = _run(
        [
            f"--virtual-time-budget={budget_ms}",
            f"--window-size={width},{height}",
            f"--screenshot={out.resolve()}",
            page.resolve().as_uri(),
        ],
        timeout,
    )
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return console_messages(proc.stderr)
