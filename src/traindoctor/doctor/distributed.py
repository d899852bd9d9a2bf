"""Distributed runs: every rank watches itself; rank 0 merges the ranks' reports.

Under ``torchrun`` each rank runs ``traindoctor run`` in its own process. At the end every rank
writes its report (JSON) into a folder shared by the ranks of this node (named after the launcher
process, the ranks' common parent, and the rendezvous port), and rank 0 waits for them (up to a
timeout), merges them, and writes the one report. Files, not collectives: the training script has
usually destroyed its process group by the time the doctor reports, and a crashed rank must not
hang the others. Ranks on other nodes cannot be read from here; the merged report lists them as
missing.

Merging: findings with the same code and place are one finding; its evidence is the lowest rank's
plus ``ranks`` and ``per_rank`` (each rank's own evidence, e.g. its data-wait share).

When a rank fails (:class:`RankGuard`): each rank keeps a heartbeat file (pid, last step, where
its main thread is) in the shared folder, so rank 0 can say what happened to a rank that wrote no
report. A rank that raises writes its report with the exception. A rank that torchrun stops
(SIGTERM, sent to the survivors when one rank fails) writes its report before exiting, even when
its main thread is blocked inside a collective. A rank killed by SIGKILL writes nothing; rank 0
sees its process gone and does not wait for it. Rank 0 waits at most ``distributed.wait_s``
(default 60 s) for reports after it finished. A rank that makes no progress (no optimizer step,
no batch) for ``distributed.stall_s`` (default 1800 s, counted from its first step; 0 disables)
is hung: it reports where it is blocked and exits with code 124, and torchrun stops the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any

#: Seconds rank 0 waits for the other ranks' reports.
DEFAULT_WAIT_S = 60.0
#: Seconds without progress (after the first step) after which a rank is declared hung: torch's
#: default process-group timeout, so a rank blocked in a collective is not stopped earlier than
#: torch itself would give up.
DEFAULT_STALL_S = 1800.0
#: Seconds between heartbeats.
HEARTBEAT_S = 1.0
#: After SIGTERM, seconds the main thread gets to unwind before the guard reports for it.
TERM_GRACE_S = 2.0
#: Exit code of a rank the stall watchdog ends (like ``timeout``).
EXIT_STALLED = 124


def is_distributed() -> bool:
    """Whether this process is one rank of a multi-process launch (``torchrun`` sets the env)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def shared_dir() -> str:
    """The folder this node's ranks exchange reports in (same for all ranks of one launch)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    port = os.environ.get("MASTER_PORT", "0")
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in f"{run_id}-{port}")
    return os.path.join(tempfile.gettempdir(), f"traindoctor-{os.getppid()}-{safe}")


def write_rank_report(report: Mapping[str, Any], rank: int, folder: str | None = None) -> str:
    """Write this rank's report atomically; returns the path."""
    folder = folder or shared_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank{rank}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(report, fh, default=str)
    os.replace(tmp, path)
    return path


def collect_rank_reports(
    expected: Sequence[int], folder: str | None = None, timeout_s: float = DEFAULT_WAIT_S
) -> dict[int, dict[str, Any]]:
    """Read the reports of ``expected`` ranks, waiting up to ``timeout_s`` for them to appear."""
    folder = folder or shared_dir()
    deadline = time.monotonic() + timeout_s
    found: dict[int, dict[str, Any]] = {}
    while True:
        for rank in expected:
            if rank in found:
                continue
            path = os.path.join(folder, f"rank{rank}.json")
            try:
                with open(path, encoding="utf-8") as fh:
                    found[rank] = json.load(fh)
            except (OSError, ValueError):
                continue
        if len(found) == len(expected) or time.monotonic() >= deadline:
            return found
        # A rank whose process is gone without a report will never write one.
        beats = {r: read_heartbeat(r, folder) for r in expected if r not in found}
        if beats and all(b is not None and not pid_alive(int(b.get("pid", 0))) for b in beats.values()):
            time.sleep(0.1)  # a report written just before exiting
            for rank in beats:
                try:
                    with open(os.path.join(folder, f"rank{rank}.json"), encoding="utf-8") as fh:
                        found[rank] = json.load(fh)
                except (OSError, ValueError):
                    pass
            return found
        time.sleep(0.05)


def remove_shared_dir(folder: str | None = None) -> None:
    shutil.rmtree(folder or shared_dir(), ignore_errors=True)


def _profile_summary(profile: Mapping[str, Any]) -> dict[str, Any]:
    shares = profile.get("shares") or {}
    per = profile.get("per_step_ms") or {}
    return {
        "verdict": profile.get("verdict"),
        "step_ms": per.get("step"),
        "data_share": shares.get("data"),
        "samples_per_s": profile.get("samples_per_s"),
    }


def merge_reports(
    reports: Mapping[int, Mapping[str, Any]], world_size: int, failures: Mapping[int, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """One report from several ranks' reports (see the module docstring).

    ``failures`` describes ranks that wrote no report (see :func:`missing_rank_failures`).
    """
    ranks = sorted(reports)
    if not ranks:
        return {"findings": [], "profile": {}, "environment": {}, "notes": [], "partial": True}
    base = reports[ranks[0]]
    groups: dict[tuple[Any, ...], list[tuple[int, Mapping[str, Any]]]] = {}
    for rank in ranks:
        for finding in reports[rank].get("findings") or []:
            loc = finding.get("location") or {}
            key = (finding.get("code"), finding.get("filename"), loc.get("row"))
            groups.setdefault(key, []).append((rank, finding))
    findings = []
    for key in sorted(groups, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        members = groups[key]
        first = dict(members[0][1])
        evidence = dict(first.get("evidence") or {})
        evidence["ranks"] = [rank for rank, _ in members]
        evidence["per_rank"] = {str(rank): dict(f.get("evidence") or {}) for rank, f in members}
        first["evidence"] = evidence
        findings.append(first)
    profile = dict(base.get("profile") or {})
    profile["per_rank"] = {str(r): _profile_summary(reports[r].get("profile") or {}) for r in ranks}
    rates = [(reports[r].get("profile") or {}).get("samples_per_s") for r in ranks]
    numbers = [x for x in rates if isinstance(x, (int, float))]
    if len(numbers) == len(rates):
        profile["samples_per_s_all_ranks"] = round(sum(numbers), 3)
    environment = dict(base.get("environment") or {})
    environment["ranks_merged"] = ranks
    environment["ranks_missing"] = [r for r in range(world_size) if r not in reports]
    notes: list[str] = []
    failed: dict[str, Any] = {}
    for rank in ranks:
        failure = reports[rank].get("failure")
        if failure:
            failed[str(rank)] = failure
    for rank, failure in sorted((failures or {}).items()):
        failed.setdefault(str(rank), failure)
    # The first failure is the cause; a rank stalled inside torch (waiting in a collective)
    # is a victim of a rank stalled in its own code, whatever the clocks say.
    timed = [
        (bool(f.get("in_torch")), float(f["time"]), int(r))
        for r, f in failed.items()
        if isinstance(f.get("time"), (int, float))
    ]
    if timed:
        first_rank = str(min(timed)[2])
        environment["first_failure"] = {"rank": int(first_rank), **failed[first_rank]}
        notes.append(f"first failure: rank {first_rank} {describe_failure(failed[first_rank])}")
    for failed_rank in sorted(failed, key=int):
        notes.append(f"rank {failed_rank} failed: {describe_failure(failed[failed_rank])}")
    for rank in ranks:
        for note in reports[rank].get("notes") or []:
            notes.append(f"rank {rank}: {note}")
    if failed:
        environment["ranks_failed"] = failed
    partial = any(bool(reports[r].get("partial")) for r in ranks) or bool(environment["ranks_missing"]) or bool(failed)
    profile["partial"] = partial
    return {
        "findings": findings,
        "profile": profile,
        "timeline": list(base.get("timeline") or []),  # rank 0's (the HTML report's charts)
        "environment": environment,
        "notes": notes,
        "partial": partial,
    }


def gather(
    report: Mapping[str, Any], *, rank: int, world_size: int, local_world_size: int, timeout_s: float = DEFAULT_WAIT_S
) -> dict[str, Any] | None:
    """Exchange reports through the shared folder. Rank 0 gets the merged report, others ``None``.

    Rank 0 expects the ranks of its own node (``0 .. local_world_size-1``); others are reported
    missing in ``environment.ranks_missing``.
    """
    folder = shared_dir()
    write_rank_report(report, rank, folder)
    if rank != 0:
        return None
    expected = list(range(max(local_world_size, 1)))
    found = collect_rank_reports(expected, folder, timeout_s)
    failures = missing_rank_failures([r for r in expected if r not in found], folder, timeout_s)
    remove_shared_dir(folder)
    return merge_reports(found, world_size, failures)


# --------------------------------------------------------------------------- failing ranks


def describe_failure(failure: Mapping[str, Any]) -> str:
    """One line: how a rank failed and where."""
    how = failure.get("how")
    where = failure.get("where")
    at = f" at {where}" if where else ""
    step = failure.get("last_step")
    after = f" (after step {step})" if step is not None else ""
    if how == "raised":
        return f"raised {failure.get('exception')}{at}{after}"
    if how == "terminated":
        return (
            f"stopped by {failure.get('signal', 'a signal')} (torchrun stops the other ranks when one fails){at}{after}"
        )
    if how == "killed":
        beat = f" (last heartbeat: step {step}{at})" if step is not None else ""
        return (
            f"process {failure.get('pid')} ended without a report: killed by a signal it "
            f"cannot catch (SIGKILL, e.g. the OOM killer) or os._exit{beat}"
        )
    if how == "stalled":
        inside = " (blocked inside torch, e.g. waiting in a collective)" if failure.get("in_torch") else ""
        return (
            f"hung: no progress for {failure.get('seconds')} s{at}{after}{inside}; it "
            f"reported and exited with code {EXIT_STALLED}"
        )
    if how == "no_report":
        return f"still running without a report {failure.get('seconds')} s after rank 0 finished{at}{after}"
    if how == "never_started":
        return "never started the doctor (no heartbeat)"
    if how == "exit":
        return f"exited with code {failure.get('exit_code')}{at}{after}"
    return str(how)


def heartbeat_path(rank: int, folder: str | None = None) -> str:
    return os.path.join(folder or shared_dir(), f"rank{rank}.alive.json")


def read_heartbeat(rank: int, folder: str | None = None) -> dict[str, Any] | None:
    try:
        with open(heartbeat_path(rank, folder), encoding="utf-8") as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by torchrun, counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def missing_rank_failures(ranks: Sequence[int], folder: str | None, waited_s: float) -> dict[int, dict[str, Any]]:
    """What happened to ranks without a report, from their heartbeats."""
    out: dict[int, dict[str, Any]] = {}
    for rank in ranks:
        beat = read_heartbeat(rank, folder)
        if beat is None:
            out[rank] = {"how": "never_started"}
            continue
        info = {
            "pid": beat.get("pid"),
            "last_step": beat.get("step"),
            "where": beat.get("where"),
            "time": beat.get("time"),
        }
        if pid_alive(int(beat.get("pid", 0))):
            out[rank] = {"how": "no_report", "seconds": round(waited_s, 1), **info}
        else:
            out[rank] = {"how": "killed", **info}
    return out


def _user_frames(frame: FrameType | None, limit: int = 8) -> list[str]:
    """``file:line in function`` of the innermost frames, innermost last."""
    frames: list[str] = []
    while frame is not None and len(frames) < 64:
        frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    frames.reverse()
    return frames[-limit:]


def _where(frame: FrameType | None) -> str | None:
    """The innermost frame of the user's code (not torch, not the standard library, not us),
    told apart by what the module is (:func:`live.is_library_file`), never by words in a path."""
    from traindoctor.runtime.live import first_user_frame

    user = first_user_frame(frame)
    if user is None:
        return None
    return f"{os.path.basename(user.f_code.co_filename)}:{user.f_lineno} in {user.f_code.co_name}"


def _in_torch(frame: FrameType | None) -> bool:
    """Whether the innermost frame is torch's own code (a rank blocked in a collective)."""
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if frame is None or not torch_file:
        return False
    root = os.path.dirname(os.path.realpath(torch_file)) + os.sep
    return os.path.realpath(frame.f_code.co_filename).startswith(root)


class RankGuard:
    """Makes sure a rank's evidence reaches rank 0 however the rank ends (see module docstring).

    ``write_merged`` renders and writes the merged report (rank 0); it is called by
    :meth:`finish` on the normal path or by the guard's own thread on the emergency paths
    (SIGTERM while the main thread is blocked, stall), after which the process exits.
    """

    def __init__(
        self, session: Any, write_merged: Callable[[dict[str, Any]], None], *, base_report: Callable[[], dict[str, Any]]
    ) -> None:
        self.session = session
        self.write_merged = write_merged
        self.base_report = base_report
        self.rank = int(getattr(session, "rank", 0))
        self.folder = shared_dir()
        thresholds = getattr(session, "thresholds", {}) or {}
        self.wait_s = float(thresholds.get("distributed.wait_s", DEFAULT_WAIT_S))
        self.stall_s = float(thresholds.get("distributed.stall_s", DEFAULT_STALL_S))
        self.failure: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._reported = False
        self._finishing = False
        #: Set while the guard thread writes an emergency report; it ends in ``os._exit``.
        self._emergency_running = False
        self._emergency_exit = threading.Event()
        self._in_script = False
        self._stop = threading.Event()
        self._term_at: float | None = None
        self._main_ident = threading.main_thread().ident
        self._old_term: Any = None
        self._wake_r = self._wake_w = -1
        self._old_wakeup = -1
        self._progress: tuple[int, int] = (0, 0)
        self._progress_t = time.monotonic()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> RankGuard:
        try:
            os.makedirs(self.folder, exist_ok=True)
            self._beat()
            if threading.current_thread() is threading.main_thread():
                self._old_term = signal.signal(signal.SIGTERM, self._on_sigterm)
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_w, False)
                self._old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
            self._thread = threading.Thread(target=self._watch, name="traindoctor-rank-guard", daemon=True)
            self._thread.start()
        except Exception as exc:  # fail-open: the run goes on without the guard
            self.session.notes.append(f"rank guard not started: {type(exc).__name__}: {exc}")
        return self

    def close(self) -> None:
        self._stop.set()
        if threading.current_thread() is threading.main_thread():
            try:
                if self._old_term is not None:
                    signal.signal(signal.SIGTERM, self._old_term)
                if self._wake_w >= 0:
                    signal.set_wakeup_fd(self._old_wakeup)
            except (ValueError, OSError):
                pass
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = -1

    # ------------------------------------------------------------------ main-thread events
    def note_exception(self, exc: BaseException) -> None:
        """The script raised: remember what and where (the report says so)."""
        if self.failure is not None:
            return
        tb = exc.__traceback__
        frame = None
        while tb is not None:
            frame, tb = tb.tb_frame, tb.tb_next
        self.failure = {
            "how": "raised",
            "exception": f"{type(exc).__name__}: {exc}"[:300],
            "where": _where(frame),
            "last_step": int(self.session.step),
            "time": time.time(),
        }

    def run_script(self, run: Callable[..., Any], *args: Any) -> Any:
        """Run the user's script; SIGTERM interrupts it (and only it) with ``SystemExit``."""
        self._in_script = True
        try:
            return run(*args)
        finally:
            self._in_script = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.failure is None:
            self.failure = {
                "how": "terminated",
                "signal": "SIGTERM",
                "where": _where(frame),
                "last_step": int(self.session.step),
                "time": time.time(),
            }
        if self._in_script and not self._finishing:
            raise SystemExit(128 + signal.SIGTERM)
        # Otherwise the report is being written (bounded by wait_s): let it finish.

    def finish(self, report: dict[str, Any], exit_code: int) -> dict[str, Any] | None:
        """Normal end (also after an exception or SIGTERM): exchange reports; rank 0 merges."""
        with self._lock:
            emergency = self._emergency_running
            first = not self._reported
            self._reported = True
            self._finishing = self._finishing or first
        if emergency:
            # The guard thread is writing this rank's report (a stall or SIGTERM fired while the
            # script was still running) and ends the process when done. Returning would let the
            # interpreter exit under it: the report lost, and torchrun's SIGTERM killing a
            # process whose signal handlers finalisation has already reset. Wait for it, bounded.
            self._emergency_exit.wait(min(self.wait_s, 20.0) + 10.0)
            return None
        if not first:
            return None
        self._stop.set()
        if self.failure is None and exit_code not in (0, None):
            self.failure = {
                "how": "exit",
                "exit_code": exit_code,
                "last_step": int(self.session.step),
                "time": time.time(),
            }
        if self.failure is not None:
            report["failure"] = self.failure
            report["partial"] = True
        wait_s = self.wait_s
        if self.failure is not None and self.failure["how"] == "raised":
            # The others are probably blocked waiting for this rank; torchrun stops them (and
            # they report) only once this rank exits. Do not hold them for the full wait.
            wait_s = min(wait_s, 5.0)
        return gather(
            report,
            rank=self.rank,
            world_size=int(self.session.world_size),
            local_world_size=int(self.session.local_world_size),
            timeout_s=wait_s,
        )

    # ------------------------------------------------------------------ guard thread
    def _beat(self) -> None:
        frame = sys._current_frames().get(self._main_ident) if self._main_ident else None
        beat = {
            "pid": os.getpid(),
            "rank": self.rank,
            "step": int(self.session.step),
            "where": _where(frame),
            "time": time.time(),
        }
        tmp = f"{heartbeat_path(self.rank, self.folder)}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(beat, fh)
        os.replace(tmp, heartbeat_path(self.rank, self.folder))

    def _watch(self) -> None:
        import select

        while not self._stop.is_set():
            try:
                if self._wake_r >= 0:
                    ready, _, _ = select.select([self._wake_r], [], [], HEARTBEAT_S)
                    if ready:
                        data = os.read(self._wake_r, 64)
                        if signal.SIGTERM in data and self._term_at is None:
                            self._term_at = time.monotonic()
                else:
                    time.sleep(HEARTBEAT_S)
                if self._stop.is_set():
                    return
                self._beat()
                now = time.monotonic()
                if self._term_at is not None and not self._our_sigterm_handler():
                    self._term_at = None  # the script handles SIGTERM itself (preemption save)
                if not self._in_script:
                    # The script has ended (normally, by an exception or by SIGTERM): the main
                    # thread is on its way to finish(), which reports. A rank that left its
                    # script is neither stalled nor blocked.
                    continue
                if self._term_at is not None and now - self._term_at > TERM_GRACE_S:
                    # SIGTERM arrived but the main thread did not unwind: it is blocked in C
                    # code (a collective). Report for it.
                    if self.failure is None:
                        self.failure = {"how": "terminated", "signal": "SIGTERM", "time": time.time()}
                    self._emergency(128 + signal.SIGTERM)
                    return
                progress = (int(self.session.step), int(getattr(self.session.timer, "_batches", 0)))
                if progress != self._progress:
                    self._progress, self._progress_t = progress, now
                elif self.stall_s > 0 and progress[0] > 0 and now - self._progress_t > self.stall_s:
                    self.failure = {
                        "how": "stalled",
                        "seconds": round(now - self._progress_t, 1),
                        "time": time.time() - (now - self._progress_t),
                    }
                    self._emergency(EXIT_STALLED)
                    return
            except Exception as exc:  # fail-open: a broken guard never stops training
                try:
                    self.session.notes.append(f"rank guard: {type(exc).__name__}: {exc}")
                except Exception:
                    pass
                return

    def _our_sigterm_handler(self) -> bool:
        try:
            return signal.getsignal(signal.SIGTERM) == self._on_sigterm
        except (ValueError, OSError):
            return False

    def _emergency(self, exit_code: int) -> None:
        """Write this rank's report from the guard thread (main thread blocked), then exit."""
        with self._lock:
            if self._reported:
                return
            self._reported = True
            self._emergency_running = True
        try:
            frame = sys._current_frames().get(self._main_ident) if self._main_ident else None
            assert self.failure is not None
            self.failure.setdefault("where", _where(frame))
            self.failure["stack"] = _user_frames(frame)
            self.failure["in_torch"] = _in_torch(frame)
            self.failure["last_step"] = int(self.session.step)
            self.failure["blocked"] = True
            try:
                self.session.stop(None)
            except Exception as exc:
                self.session.notes.append(f"stopping the watch: {type(exc).__name__}: {exc}")
            self.session.partial = True
            report = self.base_report()
            report["environment"]["exit_code"] = exit_code
            report["failure"] = self.failure
            report["partial"] = True
            merged = gather(
                report,
                rank=self.rank,
                world_size=int(self.session.world_size),
                local_world_size=int(self.session.local_world_size),
                timeout_s=min(self.wait_s, 20.0),
            )
            if merged is not None:
                self.write_merged(merged)
        except Exception as exc:
            sys.stderr.write(
                f"traindoctor run: rank {self.rank}: could not write the report: {type(exc).__name__}: {exc}\n"
            )
        finally:
            sys.stderr.write(f"traindoctor run: rank {self.rank}: {describe_failure(self.failure or {})}\n")
            sys.stderr.flush()
            sys.stdout.flush()
            self._emergency_exit.set()
            os._exit(exit_code)
