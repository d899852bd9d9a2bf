"""The project around a checked file: which file an import names, and one summary per module.

Real training code is a project: the loop is in ``train.py``, the loaders in ``utils.py``, the
epoch in ``engine.py``. Rules keep reading one file (:class:`~traindoctor.static.context.FileContext`)
and ask ``ctx.project`` about a name that resolves to another module of the same project.

* **Resolution** (as Python would, like mypy/pyright): search roots are the checked file's folder
  and the project root (nearest parent with ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or
  ``.git``); relative imports resolve from the importing file; ``pkg.module.attr`` walks packages.
  An import that does not resolve to a project file is the outside world and stays unknown.
* **Summaries** (the Salsa/ty shape): one immutable :class:`ModuleSummary` per module, computed on
  first use from that module's own :class:`FileContext`, cached by file content, so a module shared
  by many scripts is summarised once per process. A summary that is being computed when it is asked
  for again (an import cycle) answers "unknown". What a summary says about its functions and
  classes beyond their syntax (the DataLoader a function returns, the model a class builds) comes
  from the topics' facts, handed down by the engine in a :class:`ModuleReader` (this layer imports
  no facts): summarisers (:class:`Summariser`) run with the summary, queries (:class:`Query`) on
  first use.
* **Purity**: everything here is a function of the files on disk, never of the order files are
  checked in, so checking files in worker processes or from a content-keyed cache is safe. Each view
  records which other files it read (``dependencies``) so a cache can invalidate on them.
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from traindoctor.static.names import ImportMap, dotted
from traindoctor.static.protocols import FACTS_ONLY

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.finding import Related
    from traindoctor.static.context import FileContext, FrameworkHooks

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
#: A top-level function a summary describes.
FuncDef = ast.FunctionDef | ast.AsyncFunctionDef
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Calls that hand their argument's iteration through (``for b in tqdm(loader)``).
_ITER_WRAPPERS = frozenset(
    {"enumerate", "zip", "tqdm", "islice", "track", "trange", "chain", "log_every", "iter", "cycle"}
)
_MAX_FILE_BYTES = 2_000_000


def project_root(path: Path) -> Path:
    """Nearest parent of ``path`` holding a project marker; else the file's own folder."""
    start = path.parent
    for folder in (start, *start.parents):
        if any((folder / m).exists() for m in ROOT_MARKERS):
            return folder
    return start


def passed_argument(call: ast.Call, positional: tuple[str, ...], param: str, method: bool = False) -> ast.expr | None:
    """The expression ``call`` passes for the parameter ``param`` of a function whose positional
    parameters are ``positional`` (``method``: the first, ``self``, is bound already); None when
    it passes none or a ``*args`` hides which."""
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    names = list(positional[1:] if method else positional)
    if param not in names:
        return None
    index = names.index(param)
    for i, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            return None
        if i == index:
            return value
    return None


def receiving_parameter(
    call: ast.Call, arg: ast.AST, positional: tuple[str, ...], keyword_only: tuple[str, ...], method: bool = False
) -> str | None:
    """The parameter that receives ``arg`` at ``call`` (None when it cannot be told: a ``*args``
    before it, or an argument the function takes through ``*args``/``**kwargs``)."""
    names = list(positional[1:] if method else positional)
    for i, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            return None
        if value is arg:
            return names[i] if i < len(names) else None
    for kw in call.keywords:
        if kw.value is arg and kw.arg is not None:
            return kw.arg if kw.arg in (*positional, *keyword_only) else None
    return None


# ---------------------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Place:
    """A position in a project file (1-based row and column)."""

    path: str
    line: int
    column: int


@dataclass(frozen=True)
class FunctionFacts:
    """What a top-level function of a project module does, as far as its own file tells."""

    name: str
    place: Place
    #: Positional parameters in order, then keyword-only ones.
    positional: tuple[str, ...]
    keyword_only: tuple[str, ...]
    #: Parameter -> its default's value (UNKNOWN when not constant); absent: no default.
    defaults: Mapping[str, Any]
    #: Parameter -> where the function starts a pass over it (``for batch in loader``).
    iterates: Mapping[str, Place]
    #: Whether the body calls ``backward()``.
    backward: bool
    #: Qualified names it calls (torch APIs etc.) -> first place.
    calls: Mapping[str, Place]
    #: Topic -> what that topic's :class:`Summariser` found (the DataLoader it returns, ...).
    topics: Mapping[str, Any] = field(default_factory=dict)

    def argument(self, call: ast.Call, param: str, method: bool = False) -> ast.expr | None:
        """The expression ``call`` passes for the parameter ``param`` (None when it cannot be told)."""
        return passed_argument(call, self.positional, param, method)

    def param_for(self, call: ast.Call, arg: ast.AST, method: bool = False) -> str | None:
        """The parameter that receives ``arg`` at ``call`` (None when it cannot be told)."""
        return receiving_parameter(call, arg, self.positional, self.keyword_only, method)


@dataclass(frozen=True)
class ClassFacts:
    """A top-level class of a project module: what constructing and using it calls."""

    name: str
    place: Place
    calls: Mapping[str, Place]
    #: Topic -> what that topic's :class:`Summariser` found (a Dataset that holds its data, ...).
    topics: Mapping[str, Any] = field(default_factory=dict)


class Summariser(Protocol):
    """One topic's facts about the top-level functions and classes of a project module, computed
    with the module's summary (the facts packages provide these; the engine hands them down)."""

    #: The key its facts are filed under in ``FunctionFacts.topics`` and ``ClassFacts.topics``.
    topic: str

    def function(self, ctx: FileContext, node: FuncDef, facts: FunctionFacts) -> Any:
        """What the function ``node`` (whose syntax facts are ``facts``) tells the topic."""
        ...

    def cls(self, ctx: FileContext, node: ast.ClassDef) -> Any:
        """What the class ``node`` tells the topic."""
        ...


class Query(Protocol):
    """A question about a top-level definition of a project module (what model a class builds),
    too costly to answer for every module: answered on first use, memoised in the summary and
    validated against the files the answer read (see :meth:`ModuleSummary.answer`)."""

    #: The name it is asked by (:meth:`Resolved.answer`).
    name: str

    def candidates(self, ctx: FileContext) -> frozenset[str]:
        """The module's top-level names the question may have an answer for (a cheap filter, run
        with the summary)."""
        ...

    def answer(self, ctx: FileContext, name: str, fresh: bool) -> Any:
        """The answer for the definition ``name`` (None: unknown). ``fresh``: what the module's
        context kept from earlier answers was computed against another project state."""
        ...


class SettlingQuery(Query, Protocol):
    """A :class:`Query` that also knows, with the summary, the answers for which it needs no
    context (a function that cannot have any: its answer is known empty without reading the
    module again, which is the costly part of an answer)."""

    def settled(self, ctx: FileContext) -> Mapping[str, Any]:
        """Top-level name -> its answer, for names outside :meth:`candidates`."""
        ...


@dataclass(frozen=True)
class ModuleSummary:
    """Immutable facts about one project module (see the module docstring)."""

    path: str
    digest: str
    functions: Mapping[str, FunctionFacts]
    classes: Mapping[str, ClassFacts]
    #: Top-level name -> (module path, attribute or None) for names the module imports from the
    #: project (re-exports such as ``from .unet_model import UNet`` in ``__init__.py``).
    imports: Mapping[str, tuple[str, str | None]]
    #: Project modules imported with ``from x import *``.
    star_imports: tuple[str, ...]
    #: Top-level names the module defines itself (functions, classes, assignments).
    defined: frozenset[str]
    #: Top-level names the module binds by importing the outside world (``torch``, ``nn`` ->
    #: ``torch.nn``): what a ``from module import *`` hands on besides the module's own names.
    external: Mapping[str, str] = field(default_factory=dict)
    #: Query name -> the top-level names it may answer for (nn.Module classes and factories for
    #: "what model does it build"); answers are computed on first use (:meth:`answer`).
    answerable: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: (path, content digest) of the other project files whose content went into this summary.
    dependency_digests: tuple[tuple[str, str], ...] = ()
    #: Query name -> top-level name -> the answer known with the summary (:class:`SettlingQuery`).
    settled: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    #: (query, name) -> (answer, the (path, digest) of the files it depends on); see :meth:`answer`.
    _memo: dict[tuple[str, str], tuple[Any, tuple[tuple[str, str], ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def dependencies(self) -> frozenset[str]:
        return frozenset(p for p, _ in self.dependency_digests)

    def answers(self, name: str) -> bool:
        """Whether some query may have an answer for the top-level name ``name``."""
        return any(name in names for names in self.answerable.values())

    def answer(self, query: str, name: str, project: Project) -> tuple[Any, frozenset[str]]:
        """(the answer of ``query`` for ``name`` or None, the other files that answer depends on).

        Memoised per question and validated against the current content of those files, so a
        changed dependency recomputes only this answer (the Salsa shape)."""
        if name not in self.answerable.get(query, ()):
            return self.settled.get(query, {}).get(name), frozenset()
        entry = self._memo.get((query, name))
        if entry is not None and all(project.digest(p) == d for p, d in entry[1]):
            return entry[0], frozenset(p for p, _ in entry[1])
        asked = project.query(query)
        key = (self.path, query, name)
        if asked is None:
            return None, frozenset()  # the query was not handed down
        if key in project.queries_in_progress:
            return None, frozenset()  # a cycle between answers: unknown
        ctx = project.module_context(self)
        if ctx is None:
            return None, frozenset()
        project.queries_in_progress.add(key)
        saved = ctx.__dict__.get("project")
        view = _ModuleView(ctx, project, Path(self.path))
        ctx.__dict__["project"] = view
        try:
            info = asked.answer(ctx, name, fresh=not project.queries_in_progress - {key})
        finally:
            ctx.__dict__["project"] = saved
            project.queries_in_progress.discard(key)
        deps = tuple(sorted((p, d) for p in view.dependencies - {self.path} if (d := project.digest(p)) is not None))
        self._memo[(query, name)] = (info, deps)
        return info, frozenset(p for p, _ in deps)


@dataclass(frozen=True)
class Resolved:
    """A name in a checked file that resolves to a definition in a project module."""

    path: str
    name: str
    function: FunctionFacts | None = None
    cls: ClassFacts | None = None
    summary: ModuleSummary | None = field(default=None, compare=False, repr=False)
    project: Project | None = field(default=None, compare=False, repr=False)
    #: Where the files read to answer :meth:`answer` are recorded (the asking view's dependencies).
    sink: set[str] | None = field(default=None, compare=False, repr=False)

    def answer(self, query: str) -> Any:
        """The answer of ``query`` for the definition (computed on first use); None: unknown."""
        if self.summary is None or self.project is None:
            return None
        info, deps = self.summary.answer(query, self.name, self.project)
        if self.sink is not None:
            self.sink.update(deps)
        return info

    @property
    def place(self) -> Place | None:
        if self.function is not None:
            return self.function.place
        if self.cls is not None:
            return self.cls.place
        return None


# ---------------------------------------------------------------------------------------- project


@dataclass(frozen=True, eq=False)
class ModuleReader:
    """How the project model reads the other modules of a project, handed down by the engine so
    that this layer imports neither the engine nor the facts."""

    #: The engine's own ``parse`` (same decoding, same TD000 rules as checked files).
    parse: Callable[[str, bytes], Any]
    #: The framework conventions the modules' contexts know (as the checked file's does).
    frameworks: FrameworkHooks | None = None
    #: The topics' facts about each module's functions and classes, computed with its summary.
    summarisers: tuple[Summariser, ...] = ()
    #: The topics' questions about a module's definitions, answered on first use.
    queries: tuple[Query, ...] = ()


class Project:
    """All modules of one project root seen in this process; summaries memoised by content."""

    def __init__(self, root: Path, reader: ModuleReader | None = None) -> None:
        self.root = root
        #: How project modules are read (None: the project stays unknown, only imports resolve).
        self.reader = reader
        self._summaries: dict[str, ModuleSummary | None] = {}
        self._in_progress: set[str] = set()
        self._modules: dict[tuple[str, str], str | None] = {}
        self._digests: dict[str, str | None] = {}
        self._data: dict[str, bytes] = {}
        self.queries_in_progress: set[tuple[str, str, str]] = set()
        self._contexts: dict[str, Any] = {}

    # ------------------------------------------------------------------ resolution
    def search_roots(self, importer: Path) -> tuple[Path, ...]:
        here = importer.parent
        return (here,) if here == self.root else (here, self.root)

    def module_file(self, dotted_name: str, importer: Path, level: int = 0) -> str | None:
        """The project file a module name imports from ``importer`` (None: outside world)."""
        key = (f"{level}:{dotted_name}", str(importer.parent))
        if key in self._modules:
            return self._modules[key]
        found: str | None = None
        parts = [p for p in dotted_name.split(".") if p]
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            found = _file_of(base, parts)
        else:
            for root in self.search_roots(importer):
                found = _file_of(root, parts)
                if found is not None:
                    break
        if found is not None and not _inside(Path(found), self.root) and not _inside(Path(found), importer.parent):
            found = None
        self._modules[key] = found
        return found

    # ------------------------------------------------------------------ summaries
    def digest(self, path: str) -> str | None:
        """Content hash of a project file (read once per project)."""
        if path not in self._digests:
            try:
                data = Path(path).read_bytes()
            except OSError:
                self._digests[path] = None
                return None
            self._data[path] = data
            self._digests[path] = hashlib.blake2b(data, digest_size=16).hexdigest()
        return self._digests[path]

    def summary(self, path: str) -> ModuleSummary | None:
        """The summary of a project module (None: unreadable, unparsable or in an import cycle)."""
        if path in self._summaries:
            return self._summaries[path]
        if path in self._in_progress:
            return None
        digest = self.digest(path)
        if digest is None or len(self._data.get(path, b"")) > _MAX_FILE_BYTES:
            self._summaries[path] = None
            return None
        cached = _BY_CONTENT.get((self.reader, path, digest))
        if cached is not None and all(self.digest(p) == d for p, d in cached.dependency_digests):
            self._summaries[path] = cached
            return cached
        self._in_progress.add(path)
        try:
            result = _summarize(self, path, self._data[path], digest)
        finally:
            self._in_progress.discard(path)
        self._summaries[path] = result
        if result is not None:
            _BY_CONTENT[(self.reader, path, digest)] = result
        return result

    def release(self) -> None:
        """Release the module contexts parsed for this project (see ``FileContext.release``)."""
        contexts = list(self._contexts.values())
        self._contexts.clear()
        for ctx in contexts:
            ctx.release()

    def module_context(self, summary: ModuleSummary) -> FileContext | None:
        """The parsed context of a summarised module, for on-demand queries.

        Kept only as long as this project (one checked file): retaining every module's tree for
        the whole run would make each garbage collection walk them all."""
        ctx = self._contexts.get(summary.path)
        if ctx is None:
            if self.digest(summary.path) != summary.digest or self.reader is None:
                return None
            parsed = self.reader.parse(summary.path, self._data[summary.path])
            if not isinstance(parsed, tuple):
                return None
            ctx = self._contexts[summary.path] = _module_context(self, summary.path, parsed)
        return ctx

    def query(self, name: str) -> Query | None:
        """The reader's query called ``name`` (None: not handed down)."""
        queries = self.reader.queries if self.reader is not None else ()
        return next((q for q in queries if q.name == name), None)

    def lookup(self, path: str, name: str, seen: frozenset[str] = frozenset()) -> Resolved | None:
        """``name`` as defined by (or re-exported from) the module at ``path``."""
        if path in seen or len(seen) > 8:
            return None
        summary = self.summary(path)
        if summary is None:
            return None
        fn = summary.functions.get(name)
        cls = summary.classes.get(name)
        if fn is not None or cls is not None or summary.answers(name):
            return Resolved(path, name, fn, cls, summary, self)
        if name in summary.defined:
            return None
        seen = seen | {path}
        target = summary.imports.get(name)
        if target is not None:
            module, attr = target
            return self.lookup(module, attr, seen) if attr is not None else None
        for module in summary.star_imports:
            found = self.lookup(module, name, seen)
            if found is not None:
                return found
        return None

    def submodule(self, path: str, name: str) -> str | None:
        """``pkg.name`` when ``path`` is a package ``__init__.py`` and ``name`` its submodule."""
        p = Path(path)
        if p.name != "__init__.py":
            return None
        return _file_of(p.parent, [name])


#: (reader, path, content digest) -> summary; shared by all projects of the process, so a module
#: imported by many checked files is summarised once. Entries are reused only while the files they
#: depend on still have the content they were built from.
_BY_CONTENT: dict[tuple[ModuleReader | None, str, str], ModuleSummary] = {}


def forget_projects() -> None:
    """Forget every summary and project root this process memoised (a benchmark that times
    several runs in one process: each must read the project anew, as a fresh ``check`` does)."""
    _BY_CONTENT.clear()
    _ROOTS.clear()


_ROOTS: dict[str, Path] = {}


def project_for(filename: str, reader: ModuleReader | None = None) -> Project | None:
    """The project of a file on disk (None for in-memory sources with no file behind them).

    A fresh :class:`Project` per checked file: file contents are re-validated (by hash) on every
    check, so a long-lived process never answers from a stale summary; the summaries themselves
    come from the content-keyed cache.
    """
    path = Path(filename)
    try:
        if not path.is_file():
            return None
        path = path.resolve()
    except OSError:
        return None
    folder = str(path.parent)
    root = _ROOTS.get(folder)
    if root is None:
        root = _ROOTS[folder] = project_root(path)
    return Project(root, reader)


def _file_of(base: Path, parts: list[str]) -> str | None:
    # Plain string paths: this runs for every import of every checked file, and building
    # ``Path`` objects cost more than the ``stat`` calls themselves (parts are identifiers).
    folder = os.path.join(str(base), *parts[:-1])
    if not parts:
        init = os.path.join(folder, "__init__.py")
        return init if os.path.isfile(init) else None
    leaf = parts[-1]
    module = os.path.join(folder, f"{leaf}.py")
    if os.path.isfile(module):
        return module
    init = os.path.join(folder, leaf, "__init__.py")
    if os.path.isfile(init):
        return init
    return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------- views


class ProjectView:
    """The project as one checked file sees it: its imports of project modules, resolved."""

    def __init__(self, ctx: FileContext, project: Project, path: Path) -> None:
        self.ctx = ctx
        self.project = project
        self.path = path
        self.dependencies: set[str] = set()
        self._bindings: dict[str, tuple[str, str | None]] | None = None
        self._resolved: dict[int, Resolved | None] = {}
        self._stars: list[str] | None = None
        self._calls: list[tuple[ast.Call, Resolved]] | None = None
        self._imports_project: bool | None = None

    def release(self) -> None:
        """Called when the checked file is done: release the project's module contexts."""
        self.project.release()

    @property
    def bindings(self) -> dict[str, tuple[str, str | None]]:
        """Local name -> (project module path, attribute or None for the module itself)."""
        if self._bindings is None:
            self._bindings = import_bindings(self.ctx.of(ast.Import, ast.ImportFrom), self.project, self.path)
        return self._bindings

    @property
    def imports_project(self) -> bool:
        """Whether the file imports any project module (stops at the first import that resolves:
        library files ask this often and most of their imports are the outside world)."""
        if self._bindings is not None:
            return bool(self._bindings) or bool(self._star_modules())
        if self._imports_project is None:
            nodes = self.ctx.of(ast.Import, ast.ImportFrom)
            found = next(_import_bindings(nodes, self.project, self.path), None) is not None
            self._imports_project = found or bool(self._star_modules())
        return self._imports_project

    def calls(self) -> list[tuple[ast.Call, Resolved]]:
        """Every call in the file whose callee is a function or class of another project module."""
        if self._calls is None:
            self._calls = [(c, r) for c in self._project_calls() if (r := self.resolve(c.func)) is not None]
        return self._calls

    def _project_calls(self) -> Iterator[ast.Call]:
        """The calls whose callee may be defined in another project module (not yet looked up)."""
        if not self.imports_project:
            return
        for call in self.ctx.of(ast.Call):
            head = call.func
            while isinstance(head, ast.Attribute):
                head = head.value
            if not isinstance(head, ast.Name) or head.id in ("self", "cls"):
                continue
            if head.id not in self.bindings and head.id in self.ctx.imports.names:
                continue
            yield call

    def _star_modules(self) -> list[str]:
        """Project modules this file imports with ``from x import *``."""
        if self._stars is None:
            self._stars = []
            for node in self.ctx.of(ast.ImportFrom):
                if any(a.name == "*" for a in node.names):
                    module = self.project.module_file(node.module or "", self.path, node.level)
                    if module is not None:
                        self._stars.append(module)
        return self._stars

    def summary(self, path: str) -> ModuleSummary | None:
        summary = self.project.summary(path)
        if summary is not None:
            self.dependencies.add(path)
            self.dependencies.update(summary.dependencies)
        return summary

    def resolve(self, expr: ast.AST) -> Resolved | None:
        """The project definition a Name/Attribute chain names (``utils.build_loader``), if any."""
        key = id(expr)
        if key in self._resolved:
            return self._resolved[key]
        result = self._resolve(expr)
        self._resolved[key] = result
        return result

    def _resolve(self, expr: ast.AST) -> Resolved | None:
        text = dotted(expr)
        if text is None:
            return None
        head, *rest = text.split(".")
        target = self.bindings.get(head)
        if target is None:
            target = self._star_target(head)
        if target is None or not self._bound_by_import(expr):
            return None
        path, attr = target
        names = ([attr] if attr is not None else []) + rest
        if not names:
            return None
        # Walk packages: ``models.resnet.ResNet`` -> models/resnet.py, name ResNet.
        while len(names) > 1:
            sub = self.project.submodule(path, names[0])
            if sub is None:
                summary = self.summary(path)
                imported = summary.imports.get(names[0]) if summary is not None else None
                if imported is None or imported[1] is not None:
                    return None
                sub = imported[0]
            path = sub
            names = names[1:]
        if self.summary(path) is None:
            return None
        found = self.project.lookup(path, names[0])
        if found is not None:
            found = replace(found, sink=self.dependencies)
            self.dependencies.add(found.path)
            dep = self.project.summary(found.path)
            if dep is not None:
                self.dependencies.update(dep.dependencies)
        return found

    def _star_target(self, name: str) -> tuple[str, str | None] | None:
        """``name`` from a ``from .parts import *`` of this file, when a project module defines it."""
        if name in self.ctx.imports.names:
            return None
        for module in self._star_modules():
            if self.project.lookup(module, name) is not None:
                return (module, name)
        return None

    def star_external(self, name: str) -> str | None:
        """The qualified name ``name`` has in this file when only a ``from x import *`` of a
        project module binds it and that module imported it from the outside world
        (``from utils import *`` where ``utils.py`` does ``import torch``): ``"torch"``."""
        for module in self._star_modules():
            found = self._external_of(module, name, frozenset())
            if found is not None:
                return found
        return None

    def _external_of(self, path: str, name: str, seen: frozenset[str]) -> str | None:
        if path in seen or len(seen) > 8:
            return None
        summary = self.summary(path)
        if summary is None or name in summary.defined or name in summary.imports:
            return None
        found = summary.external.get(name)
        if found is not None:
            return found
        for module in summary.star_imports:
            found = self._external_of(module, name, seen | {path})
            if found is not None:
                return found
        return None

    def _bound_by_import(self, expr: ast.AST) -> bool:
        """Whether the head name is not shadowed by a local binding in the enclosing scopes."""
        node = expr
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            return False
        bound = self.ctx.bindings_of(node)
        return not bound

    def config_value(self, node: ast.AST) -> Any:
        """What ``node`` reads from the project's configuration: a config file the script loads
        (:mod:`.config_files`), a yacs defaults module (:mod:`.yacs_defaults`), a config class's
        defaults (:mod:`.class_configs`), an argparse parser declared in another module
        (:mod:`.argparse_project`), a Hydra application's composed config (:mod:`.hydra_configs`);
        UNKNOWN when none of them can tell."""
        from traindoctor.static.argparse_project import project_option_value
        from traindoctor.static.args import UNKNOWN
        from traindoctor.static.class_configs import class_config_value
        from traindoctor.static.config_files import config_value
        from traindoctor.static.hydra_configs import hydra_value
        from traindoctor.static.yacs_defaults import yacs_value

        for resolver in (config_value, yacs_value, class_config_value, project_option_value, hydra_value):
            value = resolver(self.ctx, node)
            if value is not UNKNOWN:
                return value
        return UNKNOWN

    def related(self, place: Place | None, message: str) -> tuple[Related, ...]:
        from traindoctor.finding import Location, Related

        if place is None:
            return ()
        return (Related(_display(place.path), Location(place.line, place.column), message),)


def view_for(ctx: FileContext, reader: ModuleReader | None = None) -> ProjectView | None:
    """The project view of a checked file on disk (None for sources with no file behind them)."""
    project = project_for(ctx.filename, reader)
    if project is None:
        return None
    return ProjectView(ctx, project, Path(ctx.filename).resolve())


def _display(path: str) -> str:
    """A project path as reporters show it: relative to the working directory when inside it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def import_bindings(nodes: list[Any], project: Project, path: Path) -> dict[str, tuple[str, str | None]]:
    """Local names that imports bind to project modules or names defined in them."""
    return dict(_import_bindings(nodes, project, path))


def _import_bindings(nodes: list[Any], project: Project, path: Path) -> Iterator[tuple[str, tuple[str, str | None]]]:
    """(local name, (module path, attribute or None)) for each import of a project module, in
    source order (a later binding of the same name wins, as in :func:`import_bindings`)."""
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    module = project.module_file(alias.name, path)
                    if module is not None:
                        yield alias.asname, (module, None)
                else:
                    top = alias.name.split(".", 1)[0]
                    module = project.module_file(top, path)
                    if module is not None:
                        yield top, (module, None)
        elif isinstance(node, ast.ImportFrom):
            module_name = node.module or ""
            base = project.module_file(module_name, path, node.level) if (module_name or node.level) else None
            for alias in node.names:
                if alias.name == "*":
                    continue
                local = alias.asname or alias.name
                if base is not None:
                    sub = project.submodule(base, alias.name)
                    yield local, ((sub, None) if sub is not None else (base, alias.name))
                elif node.level or module_name:
                    sub = project.module_file(
                        f"{module_name}.{alias.name}" if module_name else alias.name, path, node.level
                    )
                    if sub is not None:
                        yield local, (sub, None)


# ---------------------------------------------------------------------------------------- summarising


def _summarize(project: Project, path: str, data: bytes, digest: str) -> ModuleSummary | None:
    reader = project.reader
    if reader is None:
        return None  # no reader handed down: the project stays unknown
    parsed = reader.parse(path, data)
    if not isinstance(parsed, tuple):
        return None
    ctx = project._contexts[path] = _module_context(project, path, parsed)
    tree = ctx.tree
    me = Path(path)
    imports: dict[str, tuple[str, str | None]] = {}
    stars: list[str] = []
    top_imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    for stmt in tree.body:  # also ``try: from .x import y`` blocks
        if isinstance(stmt, ast.Try):
            top_imports += [n for n in stmt.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    imports.update(import_bindings(top_imports, project, me))
    outside = ImportMap()
    for node in top_imports:
        if isinstance(node, ast.Import):
            outside.add_import(node)
        else:
            outside.add_import_from(node)
    external = {name: qn for name, qn in outside.names.items() if name not in imports and not name.startswith("_")}
    for node in top_imports:
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            module = project.module_file(node.module or "", me, node.level)
            if module is not None:
                stars.append(module)
    defined: set[str] = set()
    functions: dict[str, FunctionFacts] = {}
    classes: dict[str, ClassFacts] = {}
    local_calls: dict[str, set[str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, _FUNCS):
            defined.add(stmt.name)
            functions[stmt.name] = _function_facts(ctx, stmt, reader.summarisers)
            local_calls[stmt.name] = {
                c.func.id for c in ast.walk(stmt) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            }
        elif isinstance(stmt, ast.ClassDef):
            defined.add(stmt.name)
            classes[stmt.name] = ClassFacts(
                stmt.name,
                place_of(ctx, stmt),
                _calls_in(ctx, stmt),
                topics={s.topic: s.cls(ctx, stmt) for s in reader.summarisers},
            )
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                if isinstance(target, ast.Name):
                    defined.add(target.id)
    functions = _close_over_local_calls(functions, local_calls)
    answerable = {q.name: q.candidates(ctx) for q in reader.queries}
    settled = {q.name: settle(ctx) for q in reader.queries if (settle := getattr(q, "settled", None)) is not None}
    view = ctx.__dict__["project"]
    return ModuleSummary(
        path=path,
        digest=digest,
        functions=functions,
        classes=classes,
        imports=imports,
        star_imports=tuple(stars),
        defined=frozenset(defined),
        external=external,
        answerable=answerable,
        settled=settled,
        dependency_digests=tuple(
            sorted((p, d) for p in view.dependencies - {path} if (d := project.digest(p)) is not None)
        ),
    )


def _close_over_local_calls(
    functions: dict[str, FunctionFacts], local_calls: dict[str, set[str]]
) -> dict[str, FunctionFacts]:
    """A function's ``calls`` include those of the same module's functions it calls (transitively):
    ``get_training_set()`` calls ``input_transform()``, which builds the ``CenterCrop``."""
    out = {}
    for name, facts in functions.items():
        seen = {name}
        todo = [n for n in local_calls.get(name, ()) if n in functions]
        calls = dict(facts.calls)
        while todo:
            callee = todo.pop()
            if callee in seen:
                continue
            seen.add(callee)
            for q, place in functions[callee].calls.items():
                calls.setdefault(q, place)
            todo.extend(n for n in local_calls.get(callee, ()) if n in functions and n not in seen)
        out[name] = replace(facts, calls=calls) if len(calls) != len(facts.calls) else facts
    return out


def _module_context(project: Project, path: str, parsed: tuple[str, list[str], ast.Module]) -> FileContext:
    """A project module's own FileContext, seeing the rest of the project through ``project``."""
    from traindoctor.static.context import FileContext

    source, lines, tree = parsed
    frameworks = project.reader.frameworks if project.reader is not None else None
    ctx = FileContext(path, source, tree, FACTS_ONLY, lines, frameworks=frameworks)
    ctx.__dict__["project"] = _ModuleView(ctx, project, Path(path))  # the module's own view
    return ctx


class _ModuleView(ProjectView):
    """The view a module being summarised has of the rest of the project."""


def place_of(ctx: FileContext, node: ast.AST) -> Place:
    """Where ``node`` is in the file of ``ctx``."""
    loc = ctx.location(node)
    return Place(ctx.filename, loc.row, loc.column)


def _calls_in(ctx: FileContext, node: ast.AST) -> dict[str, Place]:
    out: dict[str, Place] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            qn = ctx.qualname(sub.func)
            if qn is not None and qn not in out:
                out[qn] = place_of(ctx, sub)
    return out


def parameter_defaults(ctx: FileContext, fn: FuncDef) -> dict[str, Any]:
    """Parameter -> the value of its default (UNKNOWN when not constant); absent: no default."""
    a = fn.args
    defaults: dict[str, Any] = {}
    for p, d in zip(reversed([*a.posonlyargs, *a.args]), reversed(a.defaults)):
        defaults[p.arg] = ctx.value(d)
    for p, kw_default in zip(a.kwonlyargs, a.kw_defaults):
        if kw_default is not None:
            defaults[p.arg] = ctx.value(kw_default)
    return defaults


def _function_facts(ctx: FileContext, fn: FuncDef, summarisers: tuple[Summariser, ...]) -> FunctionFacts:
    a = fn.args
    positional = tuple(p.arg for p in [*a.posonlyargs, *a.args])
    keyword_only = tuple(p.arg for p in a.kwonlyargs)
    defaults = parameter_defaults(ctx, fn)
    params = set(positional) | set(keyword_only)
    iterates: dict[str, Place] = {}
    stored: set[str] = set()
    calls: dict[str, Place] = {}
    backward = False
    qualname = ctx.qualname
    for sub in ast.walk(fn):  # one walk collects every fact
        kind = sub.__class__
        it: ast.AST | None = None
        if kind is ast.Call:
            call = cast(ast.Call, sub)  # ``kind`` is its class (so below)
            func = call.func
            if func.__class__ is ast.Attribute:
                if func.attr == "backward":
                    backward = True
            elif func.__class__ is ast.Name and func.id in ("iter", "cycle") and call.args:
                it = call.args[0]
            qn = qualname(func)
            if qn is not None and qn not in calls:
                calls[qn] = place_of(ctx, sub)
        elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
            it = cast("ast.For | ast.AsyncFor | ast.comprehension", sub).iter
        elif kind is ast.YieldFrom:
            it = cast(ast.YieldFrom, sub).value  # a generator helper: ``yield from loader``
        elif kind is ast.Name and cast(ast.Name, sub).ctx.__class__ is ast.Store:
            stored.add(cast(ast.Name, sub).id)
        if it is not None:
            name = _iterated_name(it)
            if name in params and name not in iterates:
                iterates[name] = place_of(ctx, sub if kind is not ast.comprehension else it)
    for name in stored & set(iterates):
        del iterates[name]  # the parameter is rebound: the loop may iterate something else
    facts = FunctionFacts(
        name=fn.name,
        place=place_of(ctx, fn),
        positional=positional,
        keyword_only=keyword_only,
        defaults=defaults,
        iterates=iterates,
        backward=backward,
        calls=calls,
    )
    if not summarisers:
        return facts
    return replace(facts, topics={s.topic: s.function(ctx, fn, facts) for s in summarisers})


def _iterated_name(it: ast.AST | None) -> str | None:
    """The parameter a loop iterates, through wrappers (``enumerate(loader)``, ``log_every(loader, 10)``)."""
    for _ in range(4):
        if isinstance(it, ast.Name):
            return it.id
        if isinstance(it, ast.Call) and it.args:
            leaf = it.func.attr if isinstance(it.func, ast.Attribute) else getattr(it.func, "id", "")
            if leaf in _ITER_WRAPPERS:
                it = it.args[0]
                continue
        return None
    return None
