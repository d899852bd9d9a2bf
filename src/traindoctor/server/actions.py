"""What the editor offers on a diagnostic: fixes, "disable for this line", documentation, hover.

Every action is computed from the findings last published for the document (or notebook cell)
and the text they were found in, never from what the client sends back, so an action always
edits the text its finding came from; the edits carry that text's version, and a client
rejects them if the document changed since.

- one quick fix per finding that has a fix; an unsafe one (``--unsafe-fixes`` on the command
  line) says so in its title and is never the preferred action;
- "Disable TDnnn for this line": the ``# noqa: TDnnn`` comment ``check --add-noqa`` would write;
- "Show documentation for TDnnn": runs :data:`SHOW_DOCUMENTATION`, which opens the rule's page
  (the text of ``traindoctor rule TDnnn``) in the editor;
- hover over a diagnostic: the finding's message and the rule's "What it does", "Why is this
  bad?" and "Use instead".
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.workspace import PositionCodec

from traindoctor.check.noqa import UNSILENCEABLE, split_ending, with_noqa
from traindoctor.docs import render_rule
from traindoctor.finding import Finding
from traindoctor.registry import get_rule
from traindoctor.server.convert import contains, overlaps, text_edit
from traindoctor.version import __version__

#: The command behind "Show documentation for TDnnn"; its one argument is the code.
SHOW_DOCUMENTATION = "traindoctor.showRuleDocumentation"
#: The sections of a rule's page a hover shows.
HOVER_SECTIONS = ("What it does", "Why is this bad?", "Use instead")


@dataclass
class Published:
    """The diagnostics last sent for one document or notebook cell, with what they came from."""

    uri: str
    #: The document's version when it was checked (None: the client gave none).
    version: int | None
    #: The lines of the checked text.
    lines: list[str]
    items: list[tuple[Finding, types.Diagnostic]]


def _workspace_edit(published: Published, edits: list[types.TextEdit], versioned: bool) -> types.WorkspaceEdit:
    if versioned:
        document = types.OptionalVersionedTextDocumentIdentifier(uri=published.uri, version=published.version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=edits)])
    return types.WorkspaceEdit(changes={published.uri: edits})


def _noqa_edit(published: Published, finding: Finding, codec: PositionCodec) -> types.TextEdit | None:
    """The edit that silences ``finding`` on its line, or None when a comment cannot do it."""
    location = finding.location
    if finding.code in UNSILENCEABLE or location is None or not 1 <= location.row <= len(published.lines):
        return None
    line = published.lines[location.row - 1]
    new = with_noqa(line, [finding.code])
    if new == line:
        return None
    body, new_body = split_ending(line)[0], split_ending(new)[0]
    row = location.row - 1
    start = types.Position(line=row, character=0)
    end = types.Position(line=row, character=codec.client_num_units(body))
    return types.TextEdit(range=types.Range(start=start, end=end), new_text=new_body)


def code_actions(
    published: Published, requested: types.Range, codec: PositionCodec, versioned: bool
) -> list[types.CodeAction]:
    """The quick fixes for the diagnostics that overlap ``requested``."""
    actions: list[types.CodeAction] = []
    documented: set[str] = set()
    for finding, diagnostic in published.items:
        if not overlaps(diagnostic.range, requested):
            continue
        fix = finding.fix
        if fix is not None and fix.edits:
            label = "" if fix.is_safe else " (unsafe fix: review the change)"
            actions.append(
                types.CodeAction(
                    title=f"traindoctor ({finding.code}): {fix.message}{label}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    is_preferred=fix.is_safe,
                    edit=_workspace_edit(
                        published, [text_edit(published.lines, e, codec) for e in fix.edits], versioned
                    ),
                )
            )
        noqa = _noqa_edit(published, finding, codec)
        if noqa is not None:
            actions.append(
                types.CodeAction(
                    title=f"traindoctor: Disable {finding.code} for this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=_workspace_edit(published, [noqa], versioned),
                )
            )
        if finding.code not in documented and get_rule(finding.code) is not None:
            documented.add(finding.code)
            title = f"traindoctor: Show documentation for {finding.code}"
            actions.append(
                types.CodeAction(
                    title=title,
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    command=types.Command(title=title, command=SHOW_DOCUMENTATION, arguments=[finding.code]),
                )
            )
    return actions


def rule_sections(code: str, wanted: tuple[str, ...] = HOVER_SECTIONS) -> str:
    """The ``wanted`` sections of the rule's documentation page, as markdown ("" if none)."""
    rule = get_rule(code)
    if rule is None:
        return ""
    out = []
    for part in re.split(r"^## ", render_rule(rule), flags=re.MULTILINE)[1:]:
        title, _, body = part.partition("\n")
        if title.strip() in wanted:
            out.append(f"**{title.strip()}**\n\n{body.strip()}")
    return "\n\n".join(out)


def hover(published: Published, at: types.Position) -> types.Hover | None:
    """What hovering at ``at`` shows: every finding under the cursor, with its rule's explanation."""
    under = [(f, d) for f, d in published.items if contains(d.range, at)]
    if not under:
        return None
    blocks = []
    for finding, _ in under:
        head = f"**{finding.code}** ({finding.name}): {finding.message}"
        if finding.help:
            head += f"\n\n*{finding.help}*"
        body = rule_sections(finding.code)
        blocks.append(head + (f"\n\n{body}" if body else "") + f"\n\n[{finding.code} documentation]({finding.url})")
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(blocks)),
        range=under[0][1].range,
    )


def documentation_file(code: str) -> Path | None:
    """A markdown file holding the rule's page (written once per traindoctor version); None: no rule."""
    rule = get_rule(code)
    if rule is None:
        return None
    folder = Path(tempfile.gettempdir()) / f"traindoctor-{__version__}-rules"
    path = folder / f"{rule.code}.md"
    page = render_rule(rule)
    folder.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != page:
        path.write_text(page, encoding="utf-8")
    return path
