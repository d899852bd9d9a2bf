"""``traindoctor server``: the Language Server Protocol server (pygls), over stdio.

Diagnostics are published when a document opens, is saved, and after it changes (debounced: a
check starts once no change has come for ``debounce`` seconds, so typing is never checked key by
key). Saving a file also re-checks the other open documents, since project-aware findings read
other modules from disk. Checks run one at a time on a worker thread, on a snapshot of the text;
a result whose document moved on meanwhile is dropped (the newer text has its own check coming).

Notebooks use the LSP notebook document sync when the client offers it (``jupyter-notebook``
documents with Python cells): each cell's diagnostics go to that cell.

Everything a check needs is in :mod:`traindoctor.server.analysis`; what is offered on a
diagnostic in :mod:`traindoctor.server.actions`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lsprotocol import types
from pygls.capabilities import get_capability
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from traindoctor.config import ConfigError
from traindoctor.finding import Finding, Location
from traindoctor.registry import all_rules
from traindoctor.server import actions, convert
from traindoctor.server.analysis import Analyzer, Cell, Outcome
from traindoctor.static.context import split_lines
from traindoctor.version import __version__

logger = logging.getLogger(__name__)

#: How long a document must stay unchanged before it is checked again (seconds).
DEFAULT_DEBOUNCE = 0.25
PYTHON_SUFFIXES = (".py", ".pyi")
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(
            notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")]
        )
    ],
    save=True,
)
#: A scheduled check: ("text", document uri) or ("notebook", notebook uri).
Key = tuple[str, str]


class TraindoctorServer(LanguageServer):
    """The server's state: open documents' last diagnostics and the checks scheduled for them."""

    def __init__(self, debounce: float = DEFAULT_DEBOUNCE) -> None:
        super().__init__(
            "traindoctor",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=NOTEBOOK_SYNC,
        )
        self.debounce = debounce
        self.analyzer = Analyzer()
        #: Document or cell uri -> what was last published for it.
        self.published: dict[str, actions.Published] = {}
        #: Open Python documents (uris) and notebooks (uri -> the cell uris last published).
        self.texts: set[str] = set()
        self.notebooks: dict[str, list[str]] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traindoctor-check")
        self._reported: set[str] = set()

    # -- scheduling -----------------------------------------------------------------------------
    def schedule(self, key: Key, delay: float, use_cache: bool = False) -> None:
        """Check ``key`` once ``delay`` seconds pass without another schedule for it."""
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending.cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._start, key, use_cache)

    def _start(self, key: Key, use_cache: bool) -> None:
        self._timers.pop(key, None)
        task = asyncio.ensure_future(self._check(key, use_cache))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, key: Key) -> None:
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending.cancel()

    def recheck_others(self, but: Key) -> None:
        """Schedule every other open document: a saved module can change their findings."""
        for uri in self.texts:
            if ("text", uri) != but:
                self.schedule(("text", uri), self.debounce, use_cache=True)
        for uri in self.notebooks:
            if ("notebook", uri) != but:
                self.schedule(("notebook", uri), self.debounce)

    async def _check(self, key: Key, use_cache: bool) -> None:
        kind, uri = key
        if kind == "text" and uri in self.texts:
            document = self.workspace.get_text_document(uri)
            version, text = document.version, document.source
            path = self._path(uri, "untitled.py")
            outcome = await self._run(uri, lambda: self.analyzer.check_text(path, text, use_cache))
            if outcome is not None and uri in self.texts and self.workspace.get_text_document(uri).version == version:
                self._publish(uri, version, split_lines(text), outcome.findings)
        elif kind == "notebook" and uri in self.notebooks:
            notebook = self.workspace.get_notebook_document(notebook_uri=uri)
            if notebook is None:
                return
            version = notebook.version
            cells = [(c.document, self._cell(c)) for c in notebook.cells]
            path = self._path(uri, "untitled.ipynb")
            outcome = await self._run(uri, lambda: self.analyzer.check_notebook(path, [cell for _, cell in cells]))
            current = self.workspace.get_notebook_document(notebook_uri=uri)
            if outcome is not None and current is not None and current.version == version:
                self._publish_notebook(uri, cells, outcome.findings)

    async def _run(self, uri: str, check: Callable[[], Outcome]) -> Outcome | None:
        """Run ``check`` on the worker thread; None when it cannot (the user is told once why)."""
        started = time.perf_counter()
        try:
            outcome, cpu_ms = await asyncio.get_running_loop().run_in_executor(self._worker, _run_check, check)
        except ConfigError as exc:
            self._tell(f"traindoctor: configuration error: {exc}", types.MessageType.Error)
            return Outcome()
        except Exception as exc:  # a bug of ours: say so, keep serving
            logger.exception("checking %s failed", uri)
            self._tell(
                f"traindoctor: internal error checking {uri}: {type(exc).__name__}: {exc}", types.MessageType.Error
            )
            return None
        for message in outcome.internal_errors:
            self._tell(f"traindoctor: internal error: {message}", types.MessageType.Warning)
        for message in outcome.warnings:
            self._tell(message, types.MessageType.Warning)
        wall_ms = 1000 * (time.perf_counter() - started)
        how = "from the cache" if outcome.cached else f"in {wall_ms:.0f} ms ({cpu_ms:.0f} ms CPU)"
        what = "excluded by the configuration" if outcome.excluded else f"{len(outcome.findings)} findings"
        self.window_log_message(types.LogMessageParams(type=types.MessageType.Log, message=f"{uri}: {what} {how}"))
        return outcome

    def _tell(self, message: str, kind: types.MessageType) -> None:
        """Show ``message`` once per session (a broken configuration would else pop up per keystroke)."""
        self.window_log_message(types.LogMessageParams(type=kind, message=message))
        if message not in self._reported:
            self._reported.add(message)
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    # -- documents ------------------------------------------------------------------------------
    def _path(self, uri: str, untitled: str) -> Path:
        path = to_fs_path(uri)
        if path:
            return Path(path)
        root = self.workspace.root_path
        return Path(root or Path.cwd()) / untitled

    def _cell(self, cell: types.NotebookCell) -> Cell:
        document = self.workspace.get_text_document(cell.document)
        python = document.language_id in (None, "python")
        return Cell(code=cell.kind == types.NotebookCellKind.Code and python, text=document.source)

    def is_python(self, document: types.TextDocumentItem) -> bool:
        """Python documents are checked; notebooks come through the notebook sync instead."""
        if document.uri.endswith(PYTHON_SUFFIXES):
            return True
        return document.language_id == "python" and not document.uri.endswith(".ipynb")

    # -- publishing -----------------------------------------------------------------------------
    def _related(self, finding: Finding) -> list[types.DiagnosticRelatedInformation]:
        if not finding.related or not get_capability(
            self.client_capabilities, "text_document.publish_diagnostics.related_information", False
        ):
            return []
        out = []
        for related in finding.related:
            uri = from_fs_path(str(Path(related.filename).absolute()))
            if uri is None:
                continue
            try:
                lines = split_lines(Path(related.filename).read_text(encoding="utf-8", errors="replace"))
            except OSError:
                lines = []
            start = related.location or Location(1, 1)
            point = convert.position(lines, start, self.workspace.position_codec)
            location = types.Location(uri=uri, range=types.Range(start=point, end=point))
            out.append(types.DiagnosticRelatedInformation(location=location, message=related.message))
        return out

    def _publish(self, uri: str, version: int | None, lines: list[str], findings: list[Finding]) -> None:
        codec = self.workspace.position_codec
        items = [(f, convert.diagnostic(lines, f, codec, self._related(f))) for f in findings]
        self.published[uri] = actions.Published(uri, version, lines, items)
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=[d for _, d in items], version=version)
        )

    def _publish_notebook(self, uri: str, cells: list[tuple[str, Cell]], findings: list[Finding]) -> None:
        by_cell: dict[int, list[Finding]] = {}
        first_code = next((n for n, (_, c) in enumerate(cells, start=1) if c.code), 1)
        for finding in findings:
            by_cell.setdefault(finding.cell or first_code, []).append(finding)
        published = []
        for number, (cell_uri, cell) in enumerate(cells, start=1):
            version = self.workspace.get_text_document(cell_uri).version
            self._publish(cell_uri, version, split_lines(cell.text), by_cell.get(number, []))
            published.append(cell_uri)
        for gone in set(self.notebooks.get(uri, [])) - set(published):
            self.clear(gone)
        self.notebooks[uri] = published

    def clear(self, uri: str) -> None:
        self.published.pop(uri, None)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def versioned_edits(self) -> bool:
        return bool(get_capability(self.client_capabilities, "workspace.workspace_edit.document_changes", False))

    def close(self) -> None:
        for key in list(self._timers):
            self.forget(key)
        self._worker.shutdown(wait=False, cancel_futures=True)


def _run_check(check: Callable[[], Outcome]) -> tuple[Outcome, float]:
    """``check()`` and the CPU time it took on its thread (ms), with the cycle collector off
    meanwhile: a large file's check allocates hundreds of thousands of syntax-tree objects that
    each collection would walk again, and the check frees its trees itself. The collector runs
    again once the check is done."""
    enabled = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    try:
        return check(), 1000 * (time.thread_time() - started)
    finally:
        if enabled:
            gc.enable()


def _asks_for_quick_fixes(kind: types.CodeActionKind | str) -> bool:
    """Whether a client's ``only`` kind covers quick fixes (kinds are dotted: ``quickfix.x``)."""
    value = str(getattr(kind, "value", kind))
    quickfix = types.CodeActionKind.QuickFix.value
    return value == quickfix or value.startswith(quickfix + ".") or quickfix.startswith(value + ".")


def create_server(debounce: float = DEFAULT_DEBOUNCE) -> TraindoctorServer:
    """The server with every feature registered."""
    server = TraindoctorServer(debounce)

    @server.feature(types.INITIALIZE)
    def initialize(ls: TraindoctorServer, params: types.InitializeParams) -> None:
        root = ls.workspace.root_path
        ls.analyzer.root = Path(root) if root else None

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TraindoctorServer, params: types.DidOpenTextDocumentParams) -> None:
        if ls.is_python(params.text_document):
            ls.texts.add(params.text_document.uri)
            ls.schedule(("text", params.text_document.uri), 0, use_cache=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TraindoctorServer, params: types.DidChangeTextDocumentParams) -> None:
        if params.text_document.uri in ls.texts:
            ls.schedule(("text", params.text_document.uri), ls.debounce)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: TraindoctorServer, params: types.DidSaveTextDocumentParams) -> None:
        key = ("text", params.text_document.uri)
        if params.text_document.uri in ls.texts:
            ls.schedule(key, 0, use_cache=True)
        ls.recheck_others(but=key)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TraindoctorServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri in ls.texts:
            ls.texts.discard(uri)
            ls.forget(("text", uri))
            ls.clear(uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: TraindoctorServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.notebooks[params.notebook_document.uri] = []
        ls.schedule(("notebook", params.notebook_document.uri), 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: TraindoctorServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.schedule(("notebook", params.notebook_document.uri), ls.debounce)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: TraindoctorServer, params: types.DidSaveNotebookDocumentParams) -> None:
        key = ("notebook", params.notebook_document.uri)
        ls.schedule(key, 0)
        ls.recheck_others(but=key)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: TraindoctorServer, params: types.DidCloseNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        ls.forget(("notebook", uri))
        for cell_uri in ls.notebooks.pop(uri, []):
            ls.clear(cell_uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])
    )
    def code_action(ls: TraindoctorServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        published = ls.published.get(params.text_document.uri)
        if published is None:
            return None
        if params.context.only and not any(_asks_for_quick_fixes(kind) for kind in params.context.only):
            return None
        return actions.code_actions(published, params.range, ls.workspace.position_codec, ls.versioned_edits())

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: TraindoctorServer, params: types.HoverParams) -> types.Hover | None:
        published = ls.published.get(params.text_document.uri)
        return actions.hover(published, params.position) if published is not None else None

    @server.command(actions.SHOW_DOCUMENTATION)
    async def show_documentation(ls: TraindoctorServer, code: str) -> str | None:
        path = actions.documentation_file(code)
        if path is None:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Error, message=f"unknown rule {code}")
            )
            return None
        uri = from_fs_path(str(path)) or str(path)
        if get_capability(ls.client_capabilities, "window.show_document.support", False):
            await ls.window_show_document_async(types.ShowDocumentParams(uri=uri, take_focus=True))
        else:
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=f"{code}: see {uri}"))
        return uri

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: TraindoctorServer, params: None) -> None:
        ls.close()

    return server


def serve(debounce: float = DEFAULT_DEBOUNCE) -> None:
    """Serve one client over stdin/stdout until it exits."""
    server = create_server(debounce)
    all_rules()  # import every rule now, then keep the collector off everything imported so far:
    gc.freeze()  # the long-lived modules would otherwise be walked by every full collection
    server.start_io()
