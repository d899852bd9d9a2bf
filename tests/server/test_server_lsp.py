"""``traindoctor server`` end to end: a real client over JSON-RPC on stdio, as an editor uses it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the editor server's tests need the lsp extra: pip install 'traindoctor[lsp]'")
pytest.importorskip("lsprotocol", reason="the editor server's tests need the lsp extra: pip install 'traindoctor[lsp]'")

from lsp_env import server_env
from lsp_session import Session, apply_edits, uri, workspace_edits
from lsprotocol import types

from traindoctor.server.actions import SHOW_DOCUMENTATION

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "static"
DEPRECATED = "scaler = torch.cuda.amp.GradScaler()\n"  # TD304, with a safe fix
FIXED = 'scaler = torch.amp.GradScaler("cuda")\n'
TRAIN = "import torch\n" + DEPRECATED + "other = torch.cuda.amp.GradScaler()  # a comment\n"


def check_json(path: Path) -> list[dict]:
    """What ``traindoctor check`` says about ``path`` (the server must say the same)."""
    done = subprocess.run(
        [sys.executable, "-m", "traindoctor", "check", "--output-format", "json", "--no-cache", str(path)],
        capture_output=True,
        text=True,
        env=server_env(),
        cwd=path.parent,
    )
    return json.loads(done.stdout)


def lsp_range(item: dict) -> tuple[int, int, int, int]:
    start, end = item["location"], item["end_location"]
    return (start["row"] - 1, start["column"] - 1, end["row"] - 1, end["column"] - 1)


def as_tuple(rng: types.Range) -> tuple[int, int, int, int]:
    return (rng.start.line, rng.start.character, rng.end.line, rng.end.character)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[tool.traindoctor]\nextend-exclude = ["vendored"]\n')
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_diagnostics_code_actions_fix_and_noqa(project: Path) -> None:
    async def scenario() -> None:
        async with Session(project) as session:
            capabilities = session.result.capabilities
            assert capabilities.hover_provider and capabilities.code_action_provider
            assert SHOW_DOCUMENTATION in capabilities.execute_command_provider.commands
            assert capabilities.notebook_document_sync is not None

            doc = session.open(project / "train.py")
            diagnostics = await session.diagnostics(doc, version=1)
            expected = check_json(project / "train.py")
            assert [(d.code, as_tuple(d.range)) for d in diagnostics] == [(e["code"], lsp_range(e)) for e in expected]
            first, second = diagnostics
            assert first.code == "TD304" and first.source == "traindoctor"
            assert first.severity == types.DiagnosticSeverity.Information
            assert first.code_description.href.endswith("/TD304")

            # The fix: a safe quick fix, preferred; applying it clears the diagnostic.
            actions = await session.code_actions(doc, first.range)
            titles = [a.title for a in actions]
            assert titles == [
                'traindoctor (TD304): Replace with `torch.amp.GradScaler("cuda", ...)`',
                "traindoctor: Disable TD304 for this line",
                "traindoctor: Show documentation for TD304",
            ]
            fix, disable, docs = actions
            assert fix.is_preferred and fix.kind == types.CodeActionKind.QuickFix
            version, edits = workspace_edits(fix, doc)
            assert version == 1
            text = apply_edits(TRAIN, edits)
            assert text.splitlines()[1] == FIXED.rstrip("\n")
            after = await session.diagnostics(doc, version=session.replace(doc, text))
            assert [d.code for d in after] == ["TD304"] and after[0].range.start.line == 2

            # "Disable for this line": the noqa comment, after the comment already there.
            actions = await session.code_actions(doc, after[0].range)
            disable = next(a for a in actions if a.title.startswith("traindoctor: Disable"))
            version, edits = workspace_edits(disable, doc)
            text = apply_edits(text, edits)
            assert text.splitlines()[2] == "other = torch.cuda.amp.GradScaler()  # a comment  # noqa: TD304"
            assert await session.diagnostics(doc, version=session.replace(doc, text)) == []

            # "Show documentation": the rule's page opens in the editor.
            shown = await session.client.workspace_execute_command_async(
                types.ExecuteCommandParams(command=docs.command.command, arguments=docs.command.arguments)
            )
            assert session.shown == [shown]
            page = Path(shown.removeprefix("file://")).read_text()
            assert page.startswith("# TD304: ") and "## Why is this bad?" in page

    asyncio.run(scenario())


def test_hover_explains_the_rule(project: Path) -> None:
    async def scenario() -> None:
        async with Session(project) as session:
            doc = session.open(project / "train.py")
            diagnostic = (await session.diagnostics(doc, version=1))[0]
            hover = await session.client.text_document_hover_async(
                types.HoverParams(text_document=types.TextDocumentIdentifier(uri=doc), position=diagnostic.range.start)
            )
            text = hover.contents.value
            assert hover.contents.kind == types.MarkupKind.Markdown
            assert text.startswith("**TD304** (")
            assert "**What it does**" in text and "**Why is this bad?**" in text and "**Use instead**" in text
            assert "**Example**" not in text
            nothing = await session.client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=doc), position=types.Position(line=0, character=0)
                )
            )
            assert nothing is None

    asyncio.run(scenario())


def test_a_syntax_error_is_one_td000_diagnostic_and_the_server_goes_on(project: Path) -> None:
    async def scenario() -> None:
        async with Session(project) as session:
            doc = session.open(project / "broken.py", "import torch\ndef f(:\n    pass\n")
            (diagnostic,) = await session.diagnostics(doc, version=1)
            assert diagnostic.code == "TD000" and diagnostic.range.start.line == 1
            assert diagnostic.severity == types.DiagnosticSeverity.Error
            assert "SyntaxError" in diagnostic.message
            version = session.replace(doc, "import torch\n" + DEPRECATED)
            assert [d.code for d in await session.diagnostics(doc, version=version)] == ["TD304"]

    asyncio.run(scenario())


def test_a_notebook_through_notebook_sync(project: Path) -> None:
    notebook_uri = uri(project / "nb.ipynb")
    cell_uris = [f"{notebook_uri}#cell{i}" for i in range(3)]

    def cell(i: int, kind: types.NotebookCellKind) -> types.NotebookCell:
        return types.NotebookCell(kind=kind, document=cell_uris[i])

    async def scenario() -> None:
        async with Session(project) as session:
            texts = ["# Training", "import torch\n%matplotlib inline\n", "x = 1\n" + DEPRECATED]
            session.client.notebook_document_did_open(
                types.DidOpenNotebookDocumentParams(
                    notebook_document=types.NotebookDocument(
                        uri=notebook_uri,
                        notebook_type="jupyter-notebook",
                        version=1,
                        cells=[
                            cell(0, types.NotebookCellKind.Markup),
                            cell(1, types.NotebookCellKind.Code),
                            cell(2, types.NotebookCellKind.Code),
                        ],
                    ),
                    cell_text_documents=[
                        types.TextDocumentItem(
                            uri=cell_uris[i], language_id="markdown" if i == 0 else "python", version=1, text=t
                        )
                        for i, t in enumerate(texts)
                    ],
                )
            )
            (diagnostic,) = await session.diagnostics(cell_uris[2])
            assert diagnostic.code == "TD304" and as_tuple(diagnostic.range)[:2] == (1, 9)
            assert await session.diagnostics(cell_uris[1]) == []  # the magic is not a syntax error
            assert await session.diagnostics(cell_uris[0]) == []

            actions = await session.code_actions(cell_uris[2], diagnostic.range)
            _, edits = workspace_edits(actions[0], cell_uris[2])
            fixed = apply_edits(texts[2], edits)
            assert fixed == "x = 1\n" + FIXED
            count = len(session.published[cell_uris[2]])
            session.client.notebook_document_did_change(
                types.DidChangeNotebookDocumentParams(
                    notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=2),
                    change=types.NotebookDocumentChangeEvent(
                        cells=types.NotebookDocumentCellChanges(
                            text_content=[
                                types.NotebookDocumentCellContentChanges(
                                    document=types.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=2),
                                    changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
                                )
                            ]
                        )
                    ),
                )
            )
            await session.until(lambda: len(session.published[cell_uris[2]]) > count)
            assert await session.diagnostics(cell_uris[2]) == []

    asyncio.run(scenario())


def test_changes_are_debounced(project: Path) -> None:
    async def scenario() -> None:
        async with Session(project, debounce_ms=400) as session:
            doc = session.open(project / "train.py")
            await session.diagnostics(doc, version=1)
            text = TRAIN
            for i in range(5):  # typing: five changes well inside one debounce interval
                text = text.replace(DEPRECATED, f"x{i} = {i}\n" + DEPRECATED)
                last = session.replace(doc, text)
            diagnostics = await session.diagnostics(doc, version=last)
            assert [d.range.start.line for d in diagnostics] == [6, 7]
            assert [p.version for _, p in session.published[doc]] == [1, last]

    asyncio.run(scenario())


def test_the_projects_settings_and_excludes_apply(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.traindoctor]\nignore = ["TD304"]\nextend-exclude = ["vendored"]\n')
    (project / "vendored").mkdir()
    (project / "vendored" / "lib.py").write_text(TRAIN)
    (project / "loader.py").write_text((EXAMPLES / "train_amp_accum.py").read_text())

    async def scenario() -> None:
        async with Session(project) as session:
            assert await session.diagnostics(session.open(project / "train.py"), version=1) == []
            assert await session.diagnostics(session.open(project / "vendored" / "lib.py"), version=1) == []
            loader = session.open(project / "loader.py")
            codes = [d.code for d in await session.diagnostics(loader, version=1)]
            assert codes == [e["code"] for e in check_json(project / "loader.py")]
            assert len(codes) > 5 and "TD304" not in codes
            # A broken configuration is said once, plainly.
            (project / "pyproject.toml").write_text("[tool.traindoctor]\nselect = 3\n")
            version = session.replace(loader, (project / "loader.py").read_text() + "\n")
            assert await session.diagnostics(loader, version=version) == []
            assert any("configuration error" in m for m in session.messages)

    asyncio.run(scenario())


def test_the_cache_is_shared_with_check(project: Path) -> None:
    cache = project / "cache"
    env = server_env(TRAINDOCTOR_NO_CACHE=None, TRAINDOCTOR_CACHE_DIR=str(cache))
    subprocess.run(
        [sys.executable, "-m", "traindoctor", "check", "train.py"], cwd=project, env=env, capture_output=True
    )
    assert list(cache.glob("entries/*.json"))
    (project / "new.py").write_text("import torch\n" + DEPRECATED)

    async def scenario() -> None:
        async with Session(project, env=env) as session:
            doc = session.open(project / "train.py")
            assert len(await session.diagnostics(doc, version=1)) == 2
            assert any(log.endswith("2 findings from the cache") for log in session.logs)
            new = session.open(project / "new.py")
            await session.diagnostics(new, version=1)
            # An edited buffer is checked afresh and never stored.
            edited = session.replace(new, "import torch\n" + DEPRECATED * 2)
            assert len(await session.diagnostics(new, version=edited)) == 2

    asyncio.run(scenario())
    (entries,) = [json.loads(p.read_text())["files"] for p in cache.glob("entries/*.json")]
    stored = entries[str(project / "new.py")]
    assert len(stored["findings"]) == 1  # the file as saved, not the edited buffer


def test_a_refused_cache_folder_is_said_once_and_the_documents_are_still_checked(project: Path) -> None:
    configs = project / "configs"
    configs.mkdir()
    (configs / "lr.json").write_text('{"lr": 0.1}')
    env = server_env(TRAINDOCTOR_NO_CACHE=None, TRAINDOCTOR_CACHE_DIR=str(configs))

    async def scenario() -> None:
        async with Session(project, env=env) as session:
            doc = session.open(project / "train.py")
            assert len(await session.diagnostics(doc, version=1)) == 2
            session.save(doc)
            await session.until(lambda: sum("2 findings in" in log for log in session.logs) >= 2)
            refused = [m for m in session.messages if "the cache is not used" in m]
            assert len(refused) == 1 and f"cannot keep the cache in {configs}" in refused[0]

    asyncio.run(scenario())
    assert sorted(p.name for p in configs.iterdir()) == ["lr.json"]


def test_saving_a_module_rechecks_the_other_open_documents(project: Path) -> None:
    async def scenario() -> None:
        async with Session(project) as session:
            train = session.open(project / "train.py")
            await session.diagnostics(train, version=1)
            other = session.open(project / "other.py", "x = 1\n")
            await session.diagnostics(other, version=1)
            before = len(session.published[train])
            session.save(other)
            await session.until(lambda: len(session.published[train]) > before)

    asyncio.run(scenario())


def test_utf16_positions(project: Path) -> None:
    text = "import torch\nscaler = torch.cuda.amp.GradScaler(); s = '😀'; t = torch.cuda.amp.GradScaler()\n"

    async def scenario() -> None:
        async with Session(project) as session:
            doc = session.open(project / "emoji.py", text)
            diagnostics = await session.diagnostics(doc, version=1)
            # The emoji is two UTF-16 code units: the second finding starts one unit later than its
            # character column.
            expected = check_json_text(project, text)
            assert [d.range.start.character for d in diagnostics] == [
                e["location"]["column"] - 1 + (1 if i else 0) for i, e in enumerate(expected)
            ]
            actions = await session.code_actions(doc, diagnostics[1].range)
            _, edits = workspace_edits(actions[0], doc)
            assert apply_edits(text, edits).endswith('t = torch.amp.GradScaler("cuda")\n')

    asyncio.run(scenario())


def check_json_text(root: Path, text: str) -> list[dict]:
    path = root / "emoji.py"
    path.write_text(text, encoding="utf-8")
    return check_json(path)
