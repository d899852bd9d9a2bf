"""What the bottom layers of the static engine need from a file, as protocols.

The static engine reads bottom-up: ``args``/``names`` (argument lookup, qualified names) ->
``values`` (constant propagation) -> ``dicts``/``argparse_facts`` -> ``context`` (one file, one
walk) -> ``project``, ``config_files`` -> the topics' facts (``traindoctor.facts``) -> rules ->
``check.engine``. A lower layer never imports a higher one, not even for type hints: where it
needs to ask the file something, it names the question here and ``FileContext`` answers it; what
it needs from above (the framework conventions, the topics' summarisers) the engine hands down.
"""

from __future__ import annotations

import ast
from typing import Any, Protocol

from traindoctor.finding import Severity


class DictSource(Protocol):
    """Reads a dict the file spells out (for ``**kwargs`` arguments)."""

    def dict_literal(self, node: ast.AST) -> dict[str, ast.expr] | None: ...

    def dict_alternatives(self, node: ast.AST) -> list[dict[str, ast.expr]] | None: ...


class ValueSource(DictSource, Protocol):
    """What constant propagation asks about names: their bindings and where else values come from."""

    imports: Any

    def bindings_of(self, name: ast.Name) -> list[ast.expr | None] | None: ...

    def argparse_default(self, node: ast.Attribute, *, declared: bool = False) -> Any: ...

    def framework_value(self, node: ast.Attribute) -> Any: ...

    def outside_value(self, node: ast.AST) -> Any: ...

    def value(self, node: Any) -> Any: ...


class FileIndex(Protocol):
    """The node index of one file and its navigation: what ``dicts`` and ``argparse_facts`` walk."""

    def of(self, *types: type) -> list[Any]: ...

    def method_calls(self, attr: str) -> list[ast.Call]: ...

    def parent(self, node: ast.AST) -> ast.AST | None: ...

    def scope_of(self, node: ast.AST) -> ast.AST: ...

    def function_of(self, node: ast.AST) -> ast.AST | None: ...

    def binding(self, name: ast.Name) -> ast.expr | None: ...


class ArgparseSource(FileIndex, ValueSource, Protocol):
    """What reading argparse defaults asks of a file: its nodes and the values of expressions."""


class CheckSettings(Protocol):
    """The settings a file's rules read (``traindoctor.config.Settings`` provides them)."""

    def torch_below(self, version: str) -> bool: ...


class FactsOnly:
    """The :class:`CheckSettings` of a file read for its facts only (a project module summarised
    for another file, the script a watched run saves from): facts hold what the code does, never
    version advice, so no torch version is below anything."""

    def torch_below(self, version: str) -> bool:
        return False


FACTS_ONLY = FactsOnly()


class RuleInfo(Protocol):
    """What a finding needs from its rule (``traindoctor.rules.base.Rule`` provides it, as class
    attributes: read-only here, so that a rule instance and a rule class both qualify)."""

    @property
    def code(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def severity(self) -> Severity: ...

    @property
    def summary(self) -> str: ...


class ProjectLink(Protocol):
    """A file's view of its project (``traindoctor.static.project.ProjectView`` provides it)."""

    dependencies: set[str]

    def config_value(self, node: ast.AST) -> Any: ...

    def star_external(self, name: str) -> str | None: ...
