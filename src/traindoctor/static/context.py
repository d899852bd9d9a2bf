"""Everything a static rule may ask about one file, built from one parse and one walk.

The engine parses a file once and walks it once (:func:`build_index`): every node is filed by its
type and gets a parent link. Rules then *query* this index (``ctx.calls_to("torch.save")``,
``ctx.method_calls("backward")``, ``ctx.value(node)``) instead of walking the tree again, so the
checker costs little more than ``ast.parse`` itself. Derived indexes (calls by qualified name,
bindings per scope, argparse defaults, "does this file target CUDA") are computed lazily, the first
time a rule asks, so files that contain no training code never pay for them.
"""

from __future__ import annotations

import ast
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Any, Protocol, TypeVar, cast

from traindoctor.finding import Edit, Finding, Fix, Location, Origin, Related
from traindoctor.static import values as _values
from traindoctor.static.argparse_facts import ArgparseFacts
from traindoctor.static.args import MISSING, SIGNATURES, UNKNOWN, ArgResult, find_arg, last_arg_end
from traindoctor.static.dicts import SpelledDicts
from traindoctor.static.names import ImportMap
from traindoctor.static.protocols import CheckSettings, ProjectLink, RuleInfo

T = TypeVar("T")

_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Positioned(Protocol):
    """A node with a source position, as statements, expressions, arguments and keywords carry."""

    lineno: int
    col_offset: int
    end_lineno: int | None
    end_col_offset: int | None


class _Parsed(Protocol):
    """A node ``ast.parse`` made: its end position is set too."""

    lineno: int
    col_offset: int
    end_lineno: int
    end_col_offset: int


def split_lines(source: str) -> list[str]:
    """Lines with their endings, split exactly where Python's tokenizer splits them."""
    return io.StringIO(source, newline="").readlines()


def line_ending(line: str) -> str:
    """The ending of one of :func:`split_lines`'s lines: ``"\\n"``, ``"\\r\\n"``, ``"\\r"`` or ``""``."""
    return line[len(line.rstrip("\r\n")) :]


#: Fields that never hold child nodes we index: names, operators, contexts, flags.
_LEAF_FIELDS = frozenset(
    {
        "ctx",
        "op",
        "ops",
        "id",
        "arg",
        "attr",
        "name",
        "names",
        "module",
        "level",
        "kind",
        "type_comment",
        "is_async",
        "conversion",
        "simple",
        "tag",
        "kwd_attrs",
    }
)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}

#: The node index: every node of a tree filed under its class.
NodeIndex = dict[type[ast.AST], list[ast.AST]]


def _child_fields(kind: type) -> tuple[str, ...] | None:
    """Child-bearing fields of an AST class; None for non-node values (identifier lists)."""
    if not issubclass(kind, ast.AST):
        return None
    fields = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
    _CHILD_FIELDS[kind] = fields
    return fields


def build_index(tree: ast.AST) -> NodeIndex:
    """One walk: every node grouped by its type (order within a group is fixed up lazily).

    This is the only full walk the checker makes, on every file, so it is hand-inlined: it
    visits only the fields that can hold statements/expressions (``ast.iter_child_nodes`` also
    yields every ``Load``/``Store`` context and operator, doubling the work). Parent links are
    built on demand (see ``FileContext.parents``).
    """
    by_type: NodeIndex = {}
    # The four commonest classes (about two thirds of all nodes) take a short path with the
    # same effect as the general one: same buckets, same visiting order.
    names: list[ast.AST] = []
    constants: list[ast.AST] = []
    attributes: list[ast.AST] = []
    calls: list[ast.AST] = []
    add_name, add_constant = names.append, constants.append
    add_attribute, add_call = attributes.append, calls.append
    Name, Constant, Attribute, Call = ast.Name, ast.Constant, ast.Attribute, ast.Call
    # Field values: nodes, None, or the items of a list field (nodes, or identifiers skipped below).
    stack: list[Any] = [tree]
    pop = stack.pop
    push = stack.extend
    append = stack.append
    get = by_type.get
    field_table = _CHILD_FIELDS
    while stack:
        node = pop()
        kind = node.__class__
        if kind is Name:
            add_name(node)
            continue
        if kind is Constant:
            add_constant(node)
            continue
        if kind is Attribute:
            add_attribute(node)
            append(node.value)
            continue
        if kind is Call:
            add_call(node)
            append(node.func)
            push(node.args)
            push(node.keywords)
            continue
        if node is None:
            continue
        fields = field_table.get(kind)
        if fields is None:
            fields = _child_fields(kind)
            if fields is None:
                continue
        bucket = get(kind)
        if bucket is None:
            by_type[kind] = [node]
        else:
            bucket.append(node)
        for name in fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if value.__class__ is list:
                push(value)
            else:
                append(value)
    for kind, bucket in ((Name, names), (Constant, constants), (Attribute, attributes), (Call, calls)):
        if bucket:
            by_type[kind] = bucket
    return by_type


def build_parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    """Child -> parent for every node the index holds (same fields as :func:`build_index`)."""
    table: dict[ast.AST, ast.AST] = {}
    stack: list[Any] = [tree]  # as in build_index: field values
    pop = stack.pop
    append = stack.append
    field_table = _CHILD_FIELDS
    while stack:
        node = pop()
        fields = field_table.get(node.__class__)
        if fields is None:
            fields = _child_fields(node.__class__)
            if fields is None:
                continue
        for name in fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if value.__class__ is list:
                for item in value:
                    if item is not None:
                        table[item] = node
                        append(item)
            else:
                table[value] = node
                append(value)
    return table


def _position(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


#: The same key as :func:`_position`, read in C, for node classes that always carry a position.
_POSITION_ATTRS = attrgetter("lineno", "col_offset")


def _sort_by_position(nodes: list[ast.AST], types: Iterable[type[ast.AST]]) -> None:
    """Sort nodes of ``types`` by :func:`_position`, reading the key in C where the node classes
    always carry a position (a hand-built node without one falls back to the general key)."""
    if all("lineno" in t._attributes and "col_offset" in t._attributes for t in types):
        try:
            nodes.sort(key=_POSITION_ATTRS)
            return
        except AttributeError:
            pass  # keys are computed before sorting starts: the list is unchanged
    nodes.sort(key=_position)


def _bind(
    table: dict[tuple[int, str], list[ast.expr | None]], target: ast.AST, value: ast.expr | None, scope: ast.AST
) -> None:
    """Record ``target = value`` in ``scope`` (tuples unpacked element-wise when the shapes match).

    A module-level function, not a recursive closure: a closure that calls itself is a reference
    cycle that would keep the table (and the expressions in it) alive until the cycle collector."""
    if isinstance(target, ast.Name):
        table.setdefault((id(scope), target.id), []).append(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            for t, v in zip(target.elts, value.elts):
                _bind(table, t, v, scope)
        else:
            for t in target.elts:
                _bind(table, t.value if isinstance(t, ast.Starred) else t, None, scope)


@dataclass(frozen=True)
class FrameworkHooks:
    """Framework conventions a file's context consults without importing the frameworks' facts
    (the layers read bottom-up): :data:`traindoctor.facts.frameworks.static.HOOKS` provides them
    and the engine hands them to each context it builds (:func:`traindoctor.check.engine.file_context`)."""

    #: ``self.lr`` / ``self.hparams.lr`` inside a LightningModule: its ``__init__`` default, else UNKNOWN.
    attribute_value: Callable[[FileContext, ast.Attribute], Any]
    #: Whether a Trainer, Fabric or Accelerator of the file picks the GPU itself.
    targets_cuda: Callable[[FileContext], bool]


class FileContext:
    """One parsed file and the questions rules ask about it."""

    def __init__(
        self,
        filename: str,
        source: str,
        tree: ast.Module,
        settings: CheckSettings,
        lines: list[str] | None = None,
        project: Callable[[FileContext], ProjectLink | None] | None = None,
        frameworks: FrameworkHooks | None = None,
    ) -> None:
        self.filename = filename
        self.source = source
        self.tree = tree
        self.settings = settings
        #: Builds the file's view of its project on first use (the engine passes
        #: :func:`traindoctor.static.project.view_for`); None: the file is checked alone.
        self._project_factory = project
        #: The frameworks' conventions (None: the file is read without them).
        self.frameworks = frameworks
        self.lines = lines if lines is not None else split_lines(source)
        self.nodes = build_index(tree)
        self._ordered: set[type[ast.AST]] = set()
        #: Several node types merged into source order, once per combination asked for.
        self._merged: dict[tuple[type[ast.AST], ...], list[ast.AST]] = {}
        self._shared: dict[str, Any] = {}
        self._scope_memo: dict[int, ast.AST] = {}
        self._qualnames: dict[ast.AST, str | None] = {}
        self.imports = ImportMap()
        stars = False
        for node in self.of(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                self.imports.add_import(node)
            else:
                self.imports.add_import_from(node)
                stars = stars or node.names[0].name == "*"
        if stars and project is not None:
            self.imports.fallback = self._star_exported
        # Module-level aliases such as ``DL = torch.utils.data.DataLoader``.
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.Name, ast.Attribute))
            ):
                qn = self.imports.resolve(node.value)
                if qn is not None:
                    self.imports.add_alias(node.targets[0].id, qn)

    def _star_exported(self, name: str) -> str | None:
        """What ``name`` means when a project module this file star-imports imported it from the
        outside world (``from utils import *`` bringing ``torch``); asked once per unbound name."""
        view = self.project
        return view.star_external(name) if view is not None else None

    def shared(self, key: str, build: Callable[[FileContext], T]) -> T:
        """A per-file analysis that several rules use, built once, dropped with the file.

        Shared analyses (loaders, AMP flow, checkpoints, models) live here rather than in
        module-level caches, so that nothing outlives the file's tree.
        """
        store = self._shared
        if key not in store:
            store[key] = build(self)
        return cast(T, store[key])  # a key names one analysis, always made by the same ``build``

    def forget(self, key: str) -> None:
        """Drop the shared analysis ``key``: it was built against a state that no longer holds."""
        self._shared.pop(key, None)

    def release(self) -> None:
        """Drop every analysis built for this file; the context must not be used afterwards.

        Shared analyses and the project view point back at their context (``LoaderIndex.ctx``),
        which makes reference cycles: left alone, each checked file's tree (tens of thousands of
        nodes) would wait for the cycle collector, and every collection until then walks it again,
        which costs more than the rules do. Breaking the cycles when the file is done lets
        reference counting free it at once. The engine calls this once the findings are out.
        """
        view = self.__dict__.get("project")
        if view is not None and hasattr(view, "release"):
            view.release()
        self._shared.clear()
        self.__dict__.clear()

    # ------------------------------------------------------------------ the project around the file
    @cached_property
    def project(self) -> Any:
        """The file's view of its project (other modules it imports), or None for in-memory code.

        Built on first use: files whose rules never ask about another module never resolve an
        import. See :mod:`traindoctor.static.project`.
        """
        return self._project_factory(self) if self._project_factory is not None else None

    @property
    def project_dependencies(self) -> tuple[str, ...]:
        """Absolute paths of the other files (project modules, config files) whose content went
        into this file's findings, sorted: a cache keyed on this file must also key on them."""
        view = self.__dict__.get("project")
        if view is None:
            return ()
        return tuple(sorted(view.dependencies))

    # ------------------------------------------------------------------ node queries
    def of(self, *types: type[ast.AST]) -> list[Any]:
        """All nodes of the given AST types, in source order.

        Typed ``list[Any]``: each node is of a class asked for, and callers (the facts packages
        among them) read the nodes as such without narrowing each one."""
        for t in types:
            if t not in self._ordered:
                bucket = self.nodes.get(t)
                if bucket:
                    _sort_by_position(bucket, (t,))
                self._ordered.add(t)
        if len(types) == 1:
            return self.nodes.get(types[0], [])
        merged = self._merged.get(types)
        if merged is None:
            merged = []
            for t in types:
                merged.extend(self.nodes.get(t, ()))
            _sort_by_position(merged, types)
            self._merged[types] = merged
        return list(merged)  # the caller's own list, as when it was merged for it alone

    @cached_property
    def parents(self) -> dict[ast.AST, ast.AST]:
        """Each node's parent; built the first time a rule navigates upwards."""
        return build_parents(self.tree)

    def qualname(self, node: ast.AST) -> str | None:
        """Canonical fully qualified name of a Name/Attribute chain bound by an import.

        Remembered per node: the imports are complete once the context is built, and rules ask
        about the same callees many times (every call of a large file, rule after rule)."""
        memo = self._qualnames
        if node in memo:
            return memo[node]
        found = memo[node] = self.imports.resolve(node)
        return found

    @cached_property
    def _calls_by_name(self) -> dict[str, list[ast.Call]]:
        out: dict[str, list[ast.Call]] = {}
        qualname = self.qualname
        for call in self.of(ast.Call):
            qn = qualname(call.func)
            if qn is not None:
                out.setdefault(qn, []).append(call)
        return out

    @cached_property
    def lowered_source(self) -> str:
        """The file's text in lower case: a word no part of it spells (``"batch" in
        ctx.segment(node).lower()``) is absent here too, so rules can skip a file at once."""
        return self.source.lower()

    @cached_property
    def names_by_id(self) -> dict[str, list[ast.Name]]:
        """Identifier -> every ``ast.Name`` spelling it (loads and stores), in source order."""
        out: dict[str, list[ast.Name]] = {}
        for node in self.of(ast.Name):
            out.setdefault(node.id, []).append(node)
        return out

    @cached_property
    def _calls_by_attr(self) -> dict[str, list[ast.Call]]:
        out: dict[str, list[ast.Call]] = {}
        for call in self.of(ast.Call):
            func = call.func
            if isinstance(func, ast.Attribute):
                out.setdefault(func.attr, []).append(call)
        return out

    def calls_to(self, *qualnames: str) -> list[ast.Call]:
        """Calls whose callee resolves (through imports and aliases) to one of ``qualnames``."""
        table = self._calls_by_name
        if len(qualnames) == 1:
            return table.get(qualnames[0], [])
        out = [c for q in qualnames for c in table.get(q, ())]
        out.sort(key=lambda n: (n.lineno, n.col_offset))
        return out

    def calls_to_prefix(self, prefix: str) -> list[tuple[str, ast.Call]]:
        """(qualname, call) for every resolved call whose name starts with ``prefix``."""
        out = [(q, c) for q, cs in self._calls_by_name.items() if q.startswith(prefix) for c in cs]
        out.sort(key=lambda qc: (qc[1].lineno, qc[1].col_offset))
        return out

    def method_calls(self, attr: str) -> list[ast.Call]:
        """Calls of the form ``<anything>.attr(...)``, resolved or not (``loss.backward()``)."""
        return self._calls_by_attr.get(attr, [])

    @cached_property
    def called_names(self) -> frozenset[str]:
        """Every qualified name this file calls; cheap pre-filter for rules."""
        return frozenset(self._calls_by_name)

    def mentions(self, *qualnames: str) -> bool:
        """Whether any Name/Attribute in the file resolves to one of ``qualnames``."""
        # A name that resolves to ``a.b.c`` spells ``c`` somewhere in the file (in the chain itself
        # or in the import that binds it; canonical spellings keep the last part): a file that
        # never spells it cannot mention it, and is not walked. (Only in ASCII files: Python
        # normalises non-ASCII identifiers, so their spelling in the text may differ.)
        wanted = set(qualnames)
        if self.source.isascii():
            wanted = {q for q in wanted if q.rsplit(".", 1)[-1] in self.source}
            if not wanted:
                return False
        for node in self.nodes.get(ast.Attribute, ()):
            if self.imports.resolve(node) in wanted:
                return True
        for node in self.nodes.get(ast.Name, ()):
            if self.imports.resolve(node) in wanted:
                return True
        return False

    # ------------------------------------------------------------------ tree navigation
    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def enclosing(self, node: ast.AST, types: type | tuple[type, ...]) -> ast.AST | None:
        for anc in self.ancestors(node):
            if isinstance(anc, types):
                return anc
        return None

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function/lambda/class/module whose body contains ``node``.

        Memoised along the way up: every binding of a file asks this, and nodes of one body share
        their ancestors (a node that is not a scope has the same answer as its children)."""
        memo = self._scope_memo
        parents = self.parents
        path = []
        found: ast.AST
        parent = parents.get(node)
        while parent is not None:
            if isinstance(parent, _SCOPES):
                found = parent
                break
            known = memo.get(id(parent))
            if known is not None:
                found = known
                break
            path.append(parent)
            parent = parents.get(parent)
        else:
            found = self.tree
        for step in path:
            memo[id(step)] = found
        return found

    def function_of(self, node: ast.AST) -> ast.AST | None:
        """The innermost enclosing function (or None at module level)."""
        return self.enclosing(node, _FUNCS)

    def enclosing_loops(self, node: ast.AST, stop_at_function: bool = True) -> list[ast.AST]:
        """Loops around ``node``, innermost first (comprehensions excluded)."""
        out: list[ast.AST] = []
        for anc in self.ancestors(node):
            if stop_at_function and isinstance(anc, _FUNCS):
                break
            if isinstance(anc, _LOOPS):
                out.append(anc)
        return out

    def statement_of(self, node: ast.AST) -> ast.stmt:
        """The statement that contains ``node``."""
        cur: ast.AST = node
        while not isinstance(cur, ast.stmt):
            parent = self.parents.get(cur)
            if parent is None:
                break
            cur = parent
        return cast(ast.stmt, cur)  # every node below the module lies in a statement

    def walk(self, node: ast.AST) -> Iterator[ast.AST]:
        """Walk a subtree (use sparingly: prefer the index)."""
        return ast.walk(node)

    def within(self, node: ast.AST, container: ast.AST) -> bool:
        """Whether ``node`` lies inside ``container`` (by position)."""
        if not hasattr(container, "lineno") or not hasattr(node, "lineno"):
            return container is self.tree
        outer, inner = cast(_Parsed, container), cast(_Parsed, node)
        start = (outer.lineno, outer.col_offset)
        end = (outer.end_lineno, outer.end_col_offset)
        pos = (inner.lineno, inner.col_offset)
        return start <= pos and (inner.end_lineno, inner.end_col_offset) <= end

    # ------------------------------------------------------------------ values
    @cached_property
    def _bindings(self) -> dict[tuple[int, str], list[ast.expr | None]]:
        """(id(scope), name) -> values bound; None marks a binding we cannot evaluate."""
        table: dict[tuple[int, str], list[ast.expr | None]] = {}

        def bind(target: ast.AST, value: ast.expr | None, scope: ast.AST) -> None:
            _bind(table, target, value, scope)

        for node in self.of(ast.Assign):
            scope = self.scope_of(node)
            for target in node.targets:
                bind(target, node.value, scope)
        for node in self.of(ast.AnnAssign):
            if node.value is not None:
                bind(node.target, node.value, self.scope_of(node))
        for node in self.of(ast.AugAssign):
            bind(node.target, None, self.scope_of(node))
        for node in self.of(ast.NamedExpr):
            bind(node.target, node.value, self.scope_of(node))
        for loop_kind in (ast.For, ast.AsyncFor):
            for node in self.of(loop_kind):
                bind(node.target, None, self.scope_of(node))
        for with_kind in (ast.With, ast.AsyncWith):
            for node in self.of(with_kind):
                for item in node.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars, None, self.scope_of(node))
        for function_kind in _FUNCS:
            for fn in self.of(function_kind):
                a = fn.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                    if arg is not None:
                        table.setdefault((id(fn), arg.arg), []).append(None)
        for declaration_kind in (ast.Global, ast.Nonlocal):
            for node in self.of(declaration_kind):
                for name in node.names:
                    table.setdefault((id(self.scope_of(node)), name), []).append(None)
        return table

    def bindings_of(self, name: ast.Name) -> list[ast.expr | None] | None:
        """Every value bound to ``name`` in the scope that resolves it (None: not evaluable).

        Looks in the innermost function first, then enclosing functions, then the module. A
        function parameter resolves to ``[None]``: the caller decides its value.
        """
        table = self._bindings
        scope: ast.AST | None = self.scope_of(name)
        while scope is not None:
            if not isinstance(scope, ast.ClassDef) or scope is self.scope_of(name):
                found = table.get((id(scope), name.id))
                if found is not None:
                    return found
            if scope is self.tree:
                break
            scope = self.scope_of(scope)
        return None

    def binding(self, name: ast.Name) -> ast.expr | None:
        """The single expression bound to ``name``, if there is exactly one."""
        bound = self.bindings_of(name)
        if bound and len(bound) == 1:
            return bound[0]
        return None

    def value(self, node: ast.AST | Any | None) -> Any:
        """The constant value of an expression, or UNKNOWN (see :mod:`traindoctor.static.values`)."""
        if node is MISSING or node is UNKNOWN:
            return UNKNOWN
        return _values.evaluate(self, node)

    def framework_value(self, node: ast.Attribute) -> Any:
        """What a framework's convention says ``node`` holds (``self.lr`` of a LightningModule:
        its ``__init__`` default), else UNKNOWN. See :class:`FrameworkHooks`."""
        hooks = self.frameworks
        return hooks.attribute_value(self, node) if hooks is not None else UNKNOWN

    def outside_value(self, node: ast.AST) -> Any:
        """A value the file reads from elsewhere in its project (``cfg.train.batch_size`` from a
        YAML file the script loads, a config class's default), else UNKNOWN. See
        :meth:`traindoctor.static.project.ProjectView.config_value`."""
        view = self.project
        return view.config_value(node) if view is not None else UNKNOWN

    @cached_property
    def _dicts(self) -> SpelledDicts:
        return SpelledDicts(self)

    @property
    def mutated_names(self) -> frozenset[str]:
        """Names of containers changed in place somewhere in the file (see :mod:`.dicts`)."""
        return self._dicts.mutated_names

    def dict_literal(self, node: ast.AST) -> dict[str, ast.expr] | None:
        """Keys -> value nodes of a dict the file spells out (``{...}``, ``dict(k=v)``), else None."""
        return self._dicts.dict_literal(node)

    def dict_alternatives(self, node: ast.AST) -> list[dict[str, ast.expr]] | None:
        """The dicts a conditional picks between (``dict(fused=True) if cuda else dict()``), else None."""
        return self._dicts.dict_alternatives(node)

    def arg(self, call: ast.Call, name: str, qualname: str | None = None) -> ArgResult:
        """The expression passed for ``name`` (keyword, positional or literal ``**kwargs``).

        Returns :data:`MISSING` when it is not passed and :data:`UNKNOWN` when it may hide in
        ``*args``/opaque ``**kwargs``. ``qualname`` picks the positional signature; by default the
        call's own resolved name is used.
        """
        if qualname is None:
            qualname = self.qualname(call.func)
        signature = SIGNATURES.get(qualname) if qualname else None
        return find_arg(call, name, signature, self)

    def arg_value(self, call: ast.Call, name: str, default: Any = MISSING, qualname: str | None = None) -> Any:
        """The *value* of an argument: its constant, ``default`` when not passed, else UNKNOWN."""
        node = self.arg(call, name, qualname)
        if node is MISSING:
            return default
        if node is UNKNOWN:
            return UNKNOWN
        return self.value(node)

    @cached_property
    def _argparse_facts(self) -> ArgparseFacts:
        return ArgparseFacts(self)

    @property
    def parsed_args_names(self) -> frozenset[str]:
        """Names bound to the result of ``parse_args()`` (see :mod:`.argparse_facts`)."""
        return self._argparse_facts.parsed_args_names

    def argparse_default(self, node: ast.Attribute, *, declared: bool = False) -> Any:
        """Value of ``args.x`` from this file's argparse default for ``x`` (else UNKNOWN)."""
        return self._argparse_facts.argparse_default(node, declared=declared)

    @property
    def argparse_options(self) -> dict[str, list[Any]]:
        """argparse dest -> the defaults this file declares for it (``add_argument``, ``set_defaults``)."""
        return self._argparse_facts.options

    @property
    def namespace_stores(self) -> frozenset[str]:
        """Attributes the file stores on a plain name (``args.lr = ...``, ``setattr(args, "lr", v)``)."""
        return self._argparse_facts.reassigned

    # ------------------------------------------------------------------ file-level facts
    @cached_property
    def targets_cuda(self) -> bool:
        """Whether the script places work on a CUDA device (GPU-only rules need this)."""
        for name in self.called_names:
            # ``torch.accelerator.current_accelerator()``: the device-generic API picks the GPU
            if name.startswith(("torch.cuda.", "torch.accelerator.")):
                return True
        if self.method_calls("cuda"):
            return True
        for node in self.nodes.get(ast.Constant, ()):
            v = cast(ast.Constant, node).value  # the index files each node under its own class
            if isinstance(v, str) and (v == "cuda" or v.startswith("cuda:") or v == "nccl"):
                return True
        hooks = self.frameworks  # Trainer/Fabric/Accelerator pick the GPU themselves
        return hooks is not None and bool(hooks.targets_cuda(self))

    # ------------------------------------------------------------------ positions and text
    def _char_col(self, lineno: int, byte_col: int) -> int:
        if lineno < 1 or lineno > len(self.lines):
            return byte_col
        line = self.lines[lineno - 1]
        if line.isascii():
            return byte_col
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def location(self, node: ast.AST) -> Location:
        lineno = getattr(node, "lineno", 1)
        return Location(lineno, self._char_col(lineno, getattr(node, "col_offset", 0)) + 1)

    def end_location(self, node: ast.AST) -> Location:
        end_lineno: int | None = getattr(node, "end_lineno", None)
        start_lineno: int = getattr(node, "lineno", 1)
        lineno = end_lineno or start_lineno
        col: int | None = getattr(node, "end_col_offset", None)
        if col is None:
            col = getattr(node, "col_offset", 0)
        return Location(lineno, self._char_col(lineno, col) + 1)

    def segment(self, node: ast.AST) -> str:
        """The exact source text of ``node`` (as ``ast.get_source_segment``, without re-splitting
        the whole source on every call: rules ask for segments of many nodes)."""
        at = cast(Positioned, node)  # a node without a position has none of these attributes
        try:
            lineno, end_lineno = at.lineno, at.end_lineno
            col, end_col = at.col_offset, at.end_col_offset
        except AttributeError:
            return ""
        lines = self.lines
        if end_lineno is None or end_col is None or lineno < 1 or end_lineno > len(lines):
            return ""
        if lineno == end_lineno:
            line = lines[lineno - 1]
            if line.isascii():
                return line[col:end_col]
            return line.encode("utf-8")[col:end_col].decode("utf-8", errors="replace")
        first = lines[lineno - 1].encode("utf-8")[col:].decode("utf-8", errors="replace")
        last = lines[end_lineno - 1].encode("utf-8")[:end_col].decode("utf-8", errors="replace")
        return "".join([first, *lines[lineno : end_lineno - 1], last])

    def line_text(self, row: int) -> str:
        if 1 <= row <= len(self.lines):
            return self.lines[row - 1].rstrip("\r\n")
        return ""

    def indent_of(self, node: ast.AST) -> str | None:
        """Leading whitespace of the line where ``node`` starts, if ``node`` starts that line."""
        line = self.line_text(getattr(node, "lineno", 1))
        stripped = line[: len(line) - len(line.lstrip())]
        at = cast(Positioned, node)  # callers pass statements
        if len(stripped) != self._char_col(at.lineno, at.col_offset):
            return None
        return stripped

    # ------------------------------------------------------------------ findings and fixes
    def report(
        self,
        rule: RuleInfo,
        node: ast.AST,
        message: str | None = None,
        *,
        fix: Fix | None = None,
        help: str | None = None,
        end_node: ast.AST | None = None,
        related: tuple[Related, ...] = (),
    ) -> Finding:
        """A finding of ``rule`` at ``node`` (message defaults to the rule's summary).

        ``related`` cites other places (usually other project files) that hold the evidence."""
        loc = self.location(node)
        return Finding(
            code=rule.code,
            name=rule.name,
            severity=rule.severity,
            message=message or rule.summary,
            filename=self.filename,
            location=loc,
            end_location=self.end_location(end_node or node),
            origin=Origin.STATIC,
            fix=fix,
            help=help,
            source_line=self.line_text(loc.row),
            related=tuple(related),
        )

    def fix_add_keyword(self, call: ast.Call, text: str, message: str, applicability: str = "safe") -> Fix | None:
        """Insert the keyword argument ``text`` (e.g. ``"pin_memory=True"``) at the end of a call."""
        end = last_arg_end(call)
        if end is None:
            # ``f()``: insert just before the closing parenthesis.
            lineno, col = call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1
            content = text
        else:
            lineno, col = end
            content = ", " + text
        at = Location(lineno, self._char_col(lineno, col) + 1)
        return Fix(message, (Edit(content, at, at),), applicability)

    def fix_replace(self, node: ast.AST, text: str, message: str, applicability: str = "safe") -> Fix:
        """Replace the source of ``node`` with ``text``."""
        return Fix(message, (Edit(text, self.location(node), self.end_location(node)),), applicability)

    def fix_insert_line_before(
        self, stmt: ast.stmt, text: str, message: str, applicability: str = "safe"
    ) -> Fix | None:
        """Insert a new statement line ``text`` above ``stmt`` at the same indentation.

        Returns None when ``stmt`` does not start its line (``if x: stmt``): no safe place.
        """
        indent = self.indent_of(stmt)
        if indent is None:
            return None
        at = Location(stmt.lineno, 1)
        line = self.lines[stmt.lineno - 1] if stmt.lineno <= len(self.lines) else "\n"
        # The file's own line ending (that of the line, else of the first line: LF, CRLF or CR).
        newline = line_ending(line) or line_ending(self.lines[0] if self.lines else "") or "\n"
        return Fix(message, (Edit(f"{indent}{text}{newline}", at, at),), applicability)
