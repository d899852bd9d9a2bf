"""The static engine: parse each file once, walk it once, run the enabled rules, honour noqa.

Bad input never raises: a file that cannot be read, decoded or parsed becomes one ``TD000``
finding and the run goes on. A rule that crashes on a file is recorded as an internal error (the
other rules' findings for that file still count) so one bug cannot hide every other finding.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from traindoctor.check.fix import apply_edits, select_fixes
from traindoctor.config import Settings
from traindoctor.facts.checkpoint.static.summary import CHECKPOINT_SAVES_QUERY
from traindoctor.facts.data.static import drives_training
from traindoctor.facts.data.summariser import DATA_SUMMARISER
from traindoctor.facts.evaluation.flow import RETURNED_MODE_QUERY
from traindoctor.facts.evaluation.modes import PARAMETER_MODES_QUERY
from traindoctor.facts.frameworks.static import HOOKS
from traindoctor.facts.models.summariser import MODEL_QUERY
from traindoctor.finding import Finding, Location, sort_findings
from traindoctor.registry import all_rules
from traindoctor.rules.base import Rule
from traindoctor.static.context import FileContext
from traindoctor.static.project import ModuleReader, ProjectView, view_for
from traindoctor.static.source import parse

#: A noqa comment on a line: the bare word (every code), or the word, a colon and codes (any case).
NOQA_COMMENT = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]*(?:[\s,]+[A-Za-z]+[0-9]*)*))?", re.IGNORECASE)
#: ``# traindoctor: noqa`` (every code) or ``# traindoctor: noqa: TD102, TD3`` on a line of its own.
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*traindoctor[ \t]*:[ \t]*noqa(?:[ \t]*:[ \t]*(?P<codes>[A-Za-z]+[0-9]*(?:[ \t,]+[A-Za-z]+[0-9]*)*))?[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_MAX_FIX_PASSES = 10
#: Words without which a file cannot drive training (see ``loaders.drives_training``): a cheap
#: substring test that spares library files the context a project question would need.
_TRAINING_WORDS = (
    ".backward(",
    "for epoch",
    "epoch in ",
    "training_step",
    "SGD(",
    "Adam(",
    "AdamW(",
    "Adamax(",
    "RMSprop(",
    "Adagrad(",
    "Adadelta(",
    "LBFGS(",
    "Rprop(",
    "Adafactor(",
    "Muon(",
)


class _WordTest:
    """Which words occur in one source text, each searched for at most once.

    Many rules share trigger words (``DataLoader``, ``save``, ``val``): a word that does not occur
    costs a scan of the whole file, so the answer is remembered for the other rules that ask."""

    __slots__ = ("seen", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.seen: dict[str, bool] = {}

    def any(self, words: Iterable[str]) -> bool:
        seen = self.seen
        for word in words:
            found = seen.get(word)
            if found is None:
                found = seen[word] = word in self.source
            if found:
                return True
        return False


@dataclass
class FileResult:
    filename: str
    findings: list[Finding]
    #: Source after fixes (None when fixing was not asked for or nothing changed).
    fixed_source: str | None = None
    original_source: str | None = None
    fixes_applied: int = 0
    internal_errors: list[str] = field(default_factory=list)
    #: Other files (project modules, config files) whose content went into the findings: a
    #: content-keyed cache of this file's result must be invalidated when one of them changes.
    project_dependencies: tuple[str, ...] = ()

    @property
    def dependencies(self) -> tuple[str, ...]:
        """The name the check cache reads (same as ``project_dependencies``)."""
        return self.project_dependencies


def instantiate(codes: Iterable[str]) -> list[Rule]:
    wanted = set(codes)
    return [r() for r in all_rules() if r.code in wanted and r.static]


def _noqa_allows(finding: Finding, lines: list[str]) -> bool:
    """False when the finding's line carries a ``# noqa`` that covers its code."""
    if finding.location is None:
        return True
    row = finding.location.row
    if not 1 <= row <= len(lines):
        return True
    line = lines[row - 1]
    if "noqa" not in line and "NOQA" not in line:
        return True
    match = NOQA_COMMENT.search(line)
    if match is None:
        return True
    codes = match.group("codes")
    if not codes:
        return False
    return not any(finding.code.startswith(c.upper()) for c in re.split(r"[\s,]+", codes) if c)


def file_noqa(source: str) -> frozenset[str] | None:
    """Codes a file-level ``# traindoctor: noqa`` turns off: None none, empty set all of them."""
    if "noqa" not in source and "NOQA" not in source:  # cheap: most files have neither
        return None
    if source.isascii() and "traindoctor" not in source.lower():
        return None  # plain noqa comments only (the pattern, any case, needs the tool's name)
    codes: set[str] = set()
    found = False
    for match in _FILE_NOQA.finditer(source):
        found = True
        listed = match.group("codes")
        if not listed:
            return frozenset()
        codes.update(c.upper() for c in re.split(r"[\s,]+", listed) if c)
    return frozenset(codes) if found else None


def _file_noqa_allows(finding: Finding, off: frozenset[str] | None) -> bool:
    if off is None:
        return True
    return bool(off) and not any(finding.code.startswith(c) for c in off)


def run_rules(ctx: FileContext, rules: list[Rule], errors: list[str]) -> list[Finding]:
    found: list[Finding] = []
    for rule in rules:
        try:
            found.extend(rule.check(ctx))
        except RecursionError:
            errors.append(f"{ctx.filename}: rule {rule.code} gave up (file too deeply nested)")
        except Exception as exc:  # fail-open: one broken rule must not lose the others
            errors.append(f"{ctx.filename}: internal error in rule {rule.code}: {type(exc).__name__}: {exc}")
    return found


def check_source(
    data: bytes | str,
    filename: str,
    settings: Settings | None = None,
    rules: list[Rule] | None = None,
    fix: bool = False,
    unsafe_fixes: bool = False,
) -> FileResult:
    """Check one file's contents; optionally fix it (repeatedly, until nothing more applies)."""
    settings = settings or Settings()
    if rules is None:
        rules = instantiate(settings.enabled_codes())
    ignored = settings.ignored_for(filename)
    if ignored:
        rules = [r for r in rules if not any(r.code.startswith(i.upper()) for i in ignored)]
    parsed = parse(filename, data)
    if isinstance(parsed, Finding):
        report = "TD000" in settings.enabled_codes() and not any("TD000".startswith(i.upper()) for i in ignored)
        return FileResult(filename, [parsed] if report else [])
    source, lines, tree = parsed
    errors: list[str] = []
    original = source
    off = file_noqa(source)
    if off is not None and not off:
        return FileResult(filename, [])
    dependencies: set[str] = set()

    def findings_of(source: str, lines: list[str], tree: ast.Module) -> list[Finding]:
        # Rules whose trigger words do not occur cannot fire: skip them, and the index too.
        present = _WordTest(source)
        active = [
            r for r in rules if r.__class__.check is not Rule.check and (not r.triggers or present.any(r.triggers))
        ]
        cross = [r for r in rules if r.project_aware and r not in active]
        if cross and not ("import" in source and present.any(_TRAINING_WORDS)):
            cross = []  # cannot drive training: no question about other modules will be asked
        if not active and not cross:
            return []
        ctx = file_context(filename, source, tree, settings, lines)
        try:
            if cross and drives_training(ctx) and ctx.project is not None and ctx.project.imports_project:
                active = [r for r in rules if r in active or r in cross]
            if not active:
                return []
            found = [f for f in run_rules(ctx, active, errors) if _noqa_allows(f, lines) and _file_noqa_allows(f, off)]
            dependencies.update(ctx.project_dependencies)
        finally:
            ctx.release()  # the tree is freed now, not by the cycle collector (see FileContext.release)
        return sort_findings(_dedupe(found))

    findings = findings_of(source, lines, tree)
    applied = 0
    passes = 0
    while fix and passes < _MAX_FIX_PASSES:
        passes += 1
        edits, fixed = select_fixes(findings, unsafe_fixes, lines)
        if not edits:
            break
        reparsed = parse(filename, apply_edits(source, lines, edits))
        if isinstance(reparsed, Finding):
            errors.append(f"{filename}: a fix produced code that does not parse; fix skipped")
            break
        applied += len(fixed)
        source, lines, tree = reparsed
        findings = findings_of(source, lines, tree)
    result = FileResult(
        filename,
        findings,
        internal_errors=errors,
        fixes_applied=applied,
        project_dependencies=tuple(sorted(dependencies)),
    )
    if fix and source != original:
        result.fixed_source = source
        result.original_source = original
    return result


#: How the project model reads a checked file's project modules: parsed like checked files, with
#: the same framework conventions, summarised by the topics' facts (what a function's DataLoader is
#: built with, whether a Dataset holds its data; what model a class builds, on first use).
READER = ModuleReader(
    parse,
    frameworks=HOOKS,
    summarisers=(DATA_SUMMARISER,),
    queries=(MODEL_QUERY, PARAMETER_MODES_QUERY, RETURNED_MODE_QUERY, CHECKPOINT_SAVES_QUERY),
)


def file_context(
    filename: str, source: str, tree: ast.Module, settings: Settings, lines: list[str] | None = None
) -> FileContext:
    """A file's context as the checker builds it: the frameworks' conventions known, the project
    around the file resolved on first use (see :data:`READER`)."""
    return FileContext(filename, source, tree, settings, lines, project=_project_view, frameworks=HOOKS)


def _project_view(ctx: FileContext) -> ProjectView | None:
    """The checked file's view of its project."""
    return view_for(ctx, READER)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, Location | None, str]] = set()
    out = []
    for f in findings:
        key = (f.code, f.location, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
