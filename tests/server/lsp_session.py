"""A real LSP client (pygls's) talking JSON-RPC over stdio to a ``traindoctor server`` subprocess.

:class:`Session` starts the server, initializes it with a client that supports what editors
support (versioned edits, related information, showDocument, notebook sync), records everything
the server sends, and offers waits for it. Tests run it with ``asyncio.run`` (no pytest plugin).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cattrs
from lsp_env import server_env
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.protocol import default_converter
from pygls.uris import from_fs_path

CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(related_information=True, version_support=True),
        code_action=types.CodeActionClientCapabilities(
            code_action_literal_support=types.ClientCodeActionLiteralOptions(
                code_action_kind=types.ClientCodeActionKindOptions(value_set=[types.CodeActionKind.QuickFix])
            )
        ),
        hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
    ),
    workspace=types.WorkspaceClientCapabilities(
        workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)
    ),
    window=types.WindowClientCapabilities(show_document=types.ShowDocumentClientCapabilities(support=True)),
    notebook_document=types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities()
    ),
)


def converter() -> cattrs.Converter:
    """pygls's converter, but telling a code action from a command as the LSP says: a command's
    ``command`` is a string, a code action's is an object (lsprotocol reads both as a command)."""
    conv = default_converter()

    def command_or_action(obj: Any, _: Any) -> types.Command | types.CodeAction:
        kind = types.Command if isinstance(obj.get("command"), str) else types.CodeAction
        return conv.structure(obj, kind)

    conv.register_structure_hook(types.Command | types.CodeAction, command_or_action)
    return conv


def uri(path: Path) -> str:
    return from_fs_path(str(path))


class Session:
    """One server process and the client connected to it."""

    def __init__(self, root: Path, debounce_ms: int = 50, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.debounce_ms = debounce_ms
        self.env = env or server_env()
        self.client = LanguageClient("traindoctor-tests", "1", converter_factory=converter)
        #: uri -> every publishDiagnostics for it, in arrival order (with arrival times).
        self.published: dict[str, list[tuple[float, types.PublishDiagnosticsParams]]] = {}
        self.logs: list[str] = []
        self.messages: list[str] = []
        self.shown: list[str] = []
        self.versions: dict[str, int] = {}
        self.result: types.InitializeResult | None = None
        client = self.client

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            self.published.setdefault(params.uri, []).append((time.perf_counter(), params))

        @client.feature(types.WINDOW_LOG_MESSAGE)
        def on_log(params: types.LogMessageParams) -> None:
            self.logs.append(params.message)

        @client.feature(types.WINDOW_SHOW_MESSAGE)
        def on_message(params: types.ShowMessageParams) -> None:
            self.messages.append(params.message)

        @client.feature(types.WINDOW_SHOW_DOCUMENT)
        def on_show(params: types.ShowDocumentParams) -> types.ShowDocumentResult:
            self.shown.append(params.uri)
            return types.ShowDocumentResult(success=True)

    async def __aenter__(self) -> Session:
        await self.client.start_io(
            sys.executable, "-m", "traindoctor", "server", "--debounce-ms", str(self.debounce_ms), env=self.env
        )
        self.result = await asyncio.wait_for(
            self.client.initialize_async(
                types.InitializeParams(
                    capabilities=CAPABILITIES,
                    process_id=os.getpid(),
                    root_uri=uri(self.root),
                    workspace_folders=[types.WorkspaceFolder(uri=uri(self.root), name="tests")],
                )
            ),
            timeout=60,
        )
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), timeout=20)
            self.client.exit(None)
        finally:
            await asyncio.wait_for(self.client.stop(), timeout=20)

    # -- documents ------------------------------------------------------------------------------
    def open(self, path: Path, text: str | None = None, language: str = "python") -> str:
        doc = uri(path)
        self.versions[doc] = 1
        item = types.TextDocumentItem(
            uri=doc, language_id=language, version=1, text=path.read_text() if text is None else text
        )
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=item))
        return doc

    def replace(self, doc: str, text: str) -> int:
        """Send the document's whole new text; returns its new version."""
        self.versions[doc] += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=doc, version=self.versions[doc]),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )
        return self.versions[doc]

    def edit(self, doc: str, edit: types.TextEdit) -> int:
        """Send one incremental change, as editors do when typing; returns the new version."""
        self.versions[doc] += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=doc, version=self.versions[doc]),
                content_changes=[types.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text)],
            )
        )
        return self.versions[doc]

    def save(self, doc: str) -> None:
        self.client.text_document_did_save(
            types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=doc))
        )

    # -- waiting --------------------------------------------------------------------------------
    async def until(self, ready: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Wait until ``ready()`` returns something true, and return it."""
        deadline = time.monotonic() + timeout
        while True:
            value = ready()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out; logs: {self.logs[-5:]}, messages: {self.messages}")
            await asyncio.sleep(0.005)

    async def diagnostics(self, doc: str, version: int | None = None, timeout: float = 30.0) -> list[types.Diagnostic]:
        """The diagnostics published for ``doc`` (for its ``version``, when given)."""

        def found() -> tuple[list[types.Diagnostic]] | None:
            for _, params in reversed(self.published.get(doc, [])):
                if version is None or params.version == version:
                    return (list(params.diagnostics),)  # a tuple: an empty list is an answer too
            return None

        (result,) = await self.until(found, timeout)
        return result

    async def code_actions(self, doc: str, rng: types.Range) -> list[types.CodeAction]:
        params = types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=doc),
            range=rng,
            context=types.CodeActionContext(diagnostics=[]),
        )
        return list(await asyncio.wait_for(self.client.text_document_code_action_async(params), timeout=30) or [])


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """``text`` with LSP ``edits`` applied (positions in UTF-16 code units, as negotiated)."""
    lines = text.splitlines(keepends=True) or [""]

    def offset(pos: types.Position) -> int:
        before = sum(len(line) for line in lines[: pos.line])
        line = lines[pos.line] if pos.line < len(lines) else ""
        units = 0
        for index, char in enumerate(line):
            if units >= pos.character:
                return before + index
            units += 2 if ord(char) > 0xFFFF else 1
        return before + len(line.rstrip("\r\n"))

    spans = sorted(((offset(e.range.start), offset(e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def workspace_edits(action: types.CodeAction, doc: str) -> tuple[int | None, list[Any]]:
    """The version and the text edits a code action's workspace edit makes to ``doc``."""
    assert action.edit is not None and action.edit.document_changes
    (change,) = action.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit) and change.text_document.uri == doc
    return change.text_document.version, list(change.edits)
