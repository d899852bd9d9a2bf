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
  for again (an import cycle) answers "unknown".
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
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.facts.models.static import ModelInfo
    from traindoctor.static.context import FileContext, FrameworkHooks

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
#: DataLoader keywords whose value a loader factory's summary records.
LOADER_KEYWORDS = ("batch_size", "num_workers", "pin_memory", "persistent_workers", "shuffle", "sampler", "drop_last")
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


# ---------------------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Place:
    """A position in a project file (1-based row and column)."""

    path: str
    line: int
    column: int


@dataclass(frozen=True)
class LoaderFacts:
    """A ``DataLoader(...)`` a function builds and returns.

    ``keywords`` maps a DataLoader keyword to ``("value", v)`` (a known value), ``("param", name)``
    (the function's parameter ``name`` is passed through) or ``("unknown", None)``; a keyword that
    is not passed is absent (the DataLoader default applies) unless ``opaque``.
    """

    place: Place
    keywords: Mapping[str, tuple[str, Any]]
    evaluation: bool
    in_memory: bool
    iterable: bool
    on_device: bool


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
    #: Runs without gradients or is an evaluation function without ``backward()``.
    evaluation: bool
    #: Whether the body calls ``backward()`` or an optimizer step (runs the train step).
    trains: bool
    #: The DataLoader it returns, if it builds one.
    loader: LoaderFacts | None
    #: Qualified names it calls (torch APIs etc.) -> first place.
    calls: Mapping[str, Place]

    def param_for(self, call: ast.Call, arg: ast.AST, method: bool = False) -> str | None:
        """The parameter that receives ``arg`` at ``call`` (None when it cannot be told)."""
        positional = list(self.positional[1:] if method else self.positional)
        for i, value in enumerate(call.args):
            if isinstance(value, ast.Starred):
                return None
            if value is arg:
                return positional[i] if i < len(positional) else None
        for kw in call.keywords:
            if kw.value is arg and kw.arg is not None:
                return kw.arg if kw.arg in (*self.positional, *self.keyword_only) else None
        return None


@dataclass(frozen=True)
class ClassFacts:
    """A top-level class of a project module: what constructing and using it calls."""

    name: str
    place: Place
    calls: Mapping[str, Place]
    #: A Dataset whose ``__getitem__`` only indexes data it already holds (see
    #: ``loaders.indexes_own_data``): loader workers would not pay for themselves.
    in_memory: bool = False


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
    #: Top-level classes and functions that may be models (nn.Module classes, factories); what
    #: each builds is computed on first use (:meth:`model`), as a memoised query.
    model_names: frozenset[str] = frozenset()
    #: (path, content digest) of the other project files whose content went into this summary.
    dependency_digests: tuple[tuple[str, str], ...] = ()

    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def dependencies(self) -> frozenset[str]:
        return frozenset(p for p, _ in self.dependency_digests)

    def model(self, name: str, project: Project) -> tuple[ModelInfo | None, frozenset[str]]:
        """(what model ``name`` builds or None, the other files that answer depends on).

        Memoised per name and validated against the current content of those files, so a
        changed dependency recomputes only this answer (the Salsa shape)."""
        if name not in self.model_names:
            return None, frozenset()
        entry = self._memo.get(name)
        if entry is not None and all(project.digest(p) == d for p, d in entry[1]):
            return entry[0], frozenset(p for p, _ in entry[1])
        key = (self.path, name)
        if key in project.models_in_progress:
            return None, frozenset()  # a cycle between models: unknown
        ctx = project.module_context(self)
        if ctx is None:
            return None, frozenset()
        project.models_in_progress.add(key)
        saved = ctx.__dict__.get("project")
        view = _ModuleView(ctx, project, Path(self.path))
        ctx.__dict__["project"] = view
        if not project.models_in_progress - {key}:
            ctx._shared.pop("models", None)  # answers computed against another project state
        try:
            info = _model_of_definition(ctx, name)
        finally:
            ctx.__dict__["project"] = saved
            project.models_in_progress.discard(key)
        deps = tuple(sorted((p, d) for p in view.dependencies - {self.path} if (d := project.digest(p)) is not None))
        self._memo[name] = (info, deps)
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
    #: Where the files read to answer :attr:`model` are recorded (the asking view's dependencies).
    sink: set[str] | None = field(default=None, compare=False, repr=False)

    @property
    def model(self) -> ModelInfo | None:
        """What the definition builds when it is a model class or factory (computed on first use)."""
        if self.summary is None or self.project is None:
            return None
        info, deps = self.summary.model(self.name, self.project)
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


@dataclass(frozen=True)
class ModuleReader:
    """How the project model reads the other modules of a project, handed down by the engine so
    that this layer imports neither the engine nor the facts."""

    #: The engine's own ``parse`` (same decoding, same TD000 rules as checked files).
    parse: Callable[[str, bytes], Any]
    #: The framework conventions the modules' contexts know (as the checked file's does).
    frameworks: FrameworkHooks | None = None


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
        self.models_in_progress: set[tuple[str, str]] = set()
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
        cached = _BY_CONTENT.get((path, digest))
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
            _BY_CONTENT[(path, digest)] = result
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

    def lookup(self, path: str, name: str, seen: frozenset[str] = frozenset()) -> Resolved | None:
        """``name`` as defined by (or re-exported from) the module at ``path``."""
        if path in seen or len(seen) > 8:
            return None
        summary = self.summary(path)
        if summary is None:
            return None
        fn = summary.functions.get(name)
        cls = summary.classes.get(name)
        if fn is not None or cls is not None or name in summary.model_names:
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


#: (path, content digest) -> summary; shared by all projects of the process, so a module imported by
#: many checked files is summarised once. Entries are reused only while the files they depend on
#: still have the content they were built from.
_BY_CONTENT: dict[tuple[str, str], ModuleSummary] = {}
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
            self._calls = []
            if self.imports_project:
                for call in self.ctx.of(ast.Call):
                    head = call.func
                    while isinstance(head, ast.Attribute):
                        head = head.value
                    if not isinstance(head, ast.Name) or head.id in ("self", "cls"):
                        continue
                    if head.id not in self.bindings and head.id in self.ctx.imports.names:
                        continue
                    resolved = self.resolve(call.func)
                    if resolved is not None:
                        self._calls.append((call, resolved))
        return self._calls

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
        """What ``node`` reads from a config file the script loads (see :mod:`.config_files`)."""
        from traindoctor.static.config_files import config_value

        return config_value(self.ctx, node)

    def related(self, place: Place | None, message: str) -> tuple:
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
    from traindoctor.facts.data.static import indexes_own_data

    if project.reader is None:
        return None  # no reader handed down: the project stays unknown
    parsed = project.reader.parse(path, data)
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
            functions[stmt.name] = _function_facts(ctx, stmt)
            local_calls[stmt.name] = {
                c.func.id for c in ast.walk(stmt) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            }
        elif isinstance(stmt, ast.ClassDef):
            defined.add(stmt.name)
            classes[stmt.name] = ClassFacts(
                stmt.name, _place(ctx, stmt), _calls_in(ctx, stmt), in_memory=indexes_own_data(stmt)
            )
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                if isinstance(target, ast.Name):
                    defined.add(target.id)
    functions = _close_over_local_calls(functions, local_calls)
    model_names = _model_candidates(ctx, tree)
    view = ctx.__dict__["project"]
    return ModuleSummary(
        path=path,
        digest=digest,
        functions=functions,
        classes=classes,
        imports=imports,
        star_imports=tuple(stars),
        defined=frozenset(defined),
        model_names=model_names,
        dependency_digests=tuple(
            sorted((p, d) for p in view.dependencies - {path} if (d := project.digest(p)) is not None)
        ),
    )


def _close_over_local_calls(
    functions: dict[str, FunctionFacts], local_calls: dict[str, set[str]]
) -> dict[str, FunctionFacts]:
    """A function's ``calls`` include those of the same module's functions it calls (transitively):
    ``get_training_set()`` calls ``input_transform()``, which builds the ``CenterCrop``."""
    from dataclasses import replace

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


def _module_context(project: Project, path: str, parsed: tuple) -> FileContext:
    """A project module's own FileContext, seeing the rest of the project through ``project``."""
    from traindoctor.static.context import FileContext

    source, lines, tree = parsed
    frameworks = project.reader.frameworks if project.reader is not None else None
    ctx = FileContext(path, source, tree, _SummarySettings(), lines, frameworks=frameworks)
    ctx.__dict__["project"] = _ModuleView(ctx, project, Path(path))  # the module's own view
    return ctx


class _SummarySettings:
    """Settings of a project module's own context: summaries hold facts, never version advice."""

    def torch_below(self, version: str) -> bool:
        return False


class _ModuleView(ProjectView):
    """The view a module being summarised has of the rest of the project."""


def _place(ctx: FileContext, node: ast.AST) -> Place:
    loc = ctx.location(node)
    return Place(ctx.filename, loc.row, loc.column)


def _calls_in(ctx: FileContext, node: ast.AST) -> dict[str, Place]:
    out: dict[str, Place] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            qn = ctx.qualname(sub.func)
            if qn is not None and qn not in out:
                out[qn] = _place(ctx, sub)
    return out


def _function_facts(ctx: FileContext, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> FunctionFacts:
    from traindoctor.facts.data.static import is_evaluation_name, under_no_grad

    a = fn.args
    positional = tuple(p.arg for p in [*a.posonlyargs, *a.args])
    keyword_only = tuple(p.arg for p in a.kwonlyargs)
    defaults: dict[str, Any] = {}
    for p, d in zip(reversed([*a.posonlyargs, *a.args]), reversed(a.defaults)):
        defaults[p.arg] = ctx.value(d)
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            defaults[p.arg] = ctx.value(d)
    params = set(positional) | set(keyword_only)
    iterates: dict[str, Place] = {}
    stored: set[str] = set()
    calls: dict[str, Place] = {}
    trains = has_backward = False
    qualname = ctx.qualname
    for sub in ast.walk(fn):  # one walk collects every fact
        kind = sub.__class__
        it: ast.AST | None = None
        if kind is ast.Call:
            func = sub.func  # type: ignore[attr-defined]
            if func.__class__ is ast.Attribute:
                if func.attr == "backward":
                    trains = has_backward = True
                elif func.attr == "step":
                    trains = True
            elif func.__class__ is ast.Name and func.id in ("iter", "cycle") and sub.args:  # type: ignore[attr-defined]
                it = sub.args[0]  # type: ignore[attr-defined]
            qn = qualname(func)
            if qn is not None and qn not in calls:
                calls[qn] = _place(ctx, sub)
        elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
            it = sub.iter  # type: ignore[attr-defined]
        elif kind is ast.Name and sub.ctx.__class__ is ast.Store:  # type: ignore[attr-defined]
            stored.add(sub.id)  # type: ignore[attr-defined]
        if it is not None:
            name = _iterated_name(it)
            if name in params and name not in iterates:
                iterates[name] = _place(ctx, sub if kind is not ast.comprehension else it)
    for name in stored & set(iterates):
        del iterates[name]  # the parameter is rebound: the loop may iterate something else
    no_grad = under_no_grad(ctx, fn.body[0]) if fn.body else False
    evaluation = not has_backward and (no_grad or is_evaluation_name(fn.name))
    return FunctionFacts(
        name=fn.name,
        place=_place(ctx, fn),
        positional=positional,
        keyword_only=keyword_only,
        defaults=defaults,
        iterates=iterates,
        evaluation=evaluation,
        trains=trains,
        loader=_returned_loader(ctx, fn, params),
        calls=calls,
    )


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


def _returned_loader(ctx: FileContext, fn: ast.AST, params: set[str]) -> LoaderFacts | None:
    from traindoctor.facts.data.static import DATALOADER, loader_index

    calls = [c for c in ctx.calls_to(DATALOADER) if ctx.within(c, fn)]
    if not calls:
        return None
    returned: list[ast.Call] = []
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Return) and sub.value is not None and ctx.function_of(sub) is fn:
            value: ast.AST | None = sub.value
            if isinstance(value, ast.Name):
                value = ctx.binding(value)
            if isinstance(value, ast.Call) and any(value is c for c in calls):
                returned.append(value)
            else:
                return None  # returns something else too: not a plain factory
    if len(returned) != 1:
        return None
    call = returned[0]
    keywords: dict[str, tuple[str, Any]] = {}
    for name in LOADER_KEYWORDS:
        node = ctx.arg(call, name)
        if node is MISSING:
            continue
        if node is UNKNOWN:
            keywords[name] = ("unknown", None)
        elif isinstance(node, ast.Name) and node.id in params and ctx.bindings_of(node) == [None]:
            keywords[name] = ("param", node.id)
        else:
            value = ctx.value(node)
            keywords[name] = ("unknown", None) if value is UNKNOWN else ("value", value)
    loader = loader_index(ctx).loader_of(call)
    return LoaderFacts(
        place=_place(ctx, call),
        keywords=keywords,
        evaluation=loader is None or loader.evaluation_dataset or loader.built_for_evaluation,
        in_memory=loader is not None and loader.in_memory,
        iterable=loader is not None and loader.iterable,
        on_device=loader is not None and loader.on_device,
    )


def _model_candidates(ctx: FileContext, tree: ast.Module) -> frozenset[str]:
    """Top-level classes and functions that may build a model (cheap syntactic filters)."""
    out: set[str] = set()
    local_classes = {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and _may_be_module(stmt, local_classes, ctx):
            out.add(stmt.name)
        elif isinstance(stmt, ast.FunctionDef) and _may_build_model(stmt, local_classes, ctx):
            out.add(stmt.name)
    return frozenset(out)


def _model_of_definition(ctx: FileContext, name: str) -> ModelInfo | None:
    """What the top-level class or factory function ``name`` of the module builds."""
    from traindoctor.facts.models.static import _function_returns, class_info

    for stmt in ctx.tree.body:
        if getattr(stmt, "name", None) != name:
            continue
        try:
            if isinstance(stmt, ast.ClassDef):
                info = class_info(ctx, stmt)
            elif isinstance(stmt, ast.FunctionDef):
                info = _function_returns(ctx, stmt, 0)
            else:
                return None
        except RecursionError:
            return None
        return info if info.kinds or info.known else None
    return None


def _may_be_module(cls: ast.ClassDef, local_classes: set[str], ctx: FileContext) -> bool:
    """A class that may be an ``nn.Module``: a base named ``...Module``, another local class, or a
    name from elsewhere in the project (a cheap filter before the model analysis)."""
    view = ctx.project
    for base in cls.bases:
        text = dotted(base) or ""
        head = text.split(".", 1)[0]
        if text.endswith("Module") or text in local_classes or (head and head not in ctx.imports.names):
            return True
        if view is not None and head in view.bindings:
            return True
    return False


def _may_build_model(fn: ast.FunctionDef, local_classes: set[str], ctx: FileContext) -> bool:
    """A function whose ``return`` may hand back a model: it returns a call of a local class, an
    ``nn``/``torchvision.models`` constructor, a project name or a capitalised (star-imported)
    name, directly or through a variable (a cheap filter before the model analysis)."""
    view = ctx.project
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Call):
            text = dotted(sub.func) or ""
            head = text.split(".", 1)[0]
            if text in local_classes or "nn." in text or text.startswith("torchvision.models"):
                return True
            if view is not None and head in view.bindings:
                return True
            if head and head not in ctx.imports.names and head[:1].isupper():
                return True
    return False


def loader_keyword(resolved: Resolved, call: ast.Call, ctx: FileContext, name: str) -> Any:
    """The value a project loader factory passes for DataLoader keyword ``name`` at ``call``.

    MISSING when the factory does not pass it (the DataLoader default applies), UNKNOWN when the
    summary or the call site cannot tell, else the value.
    """
    fn = resolved.function
    if fn is None or fn.loader is None:
        return UNKNOWN
    fact = fn.loader.keywords.get(name)
    if fact is None:
        return MISSING
    kind, value = fact
    if kind == "value":
        return value
    if kind != "param":
        return UNKNOWN
    from traindoctor.static.args import find_arg

    node = find_arg(call, value, fn.positional, ctx)
    if node is MISSING:
        return fn.defaults.get(value, UNKNOWN)
    if node is UNKNOWN:
        return UNKNOWN
    return ctx.value(node)
