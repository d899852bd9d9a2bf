"""What a saved object holds: its pieces (``model.state_dict()``, ``optimizer.state_dict()``, RNG
getters, ...), read from the expression a save writes.

A dict built in a variable across statements (``ckpt = {...}; ckpt["optimizer"] = ...;
ckpt.update(...)``) is followed, and so, one level deep, is a local helper whose parameter is
what gets saved (the caller's argument is substituted). Whatever cannot be read (a value from an
unknown call, a parameter nobody in the file passes, a dict handed to an unknown function) is an
*opaque* piece that may hold anything its dict key does not rule out.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.base import FUNCTION_DEFS, IndexPart, callee_name, position
from traindoctor.facts.checkpoint.static.vocabulary import RX_MODELISH, RX_RNG, key_rules_out, kind_from_name
from traindoctor.static.names import dotted
from traindoctor.static.vocab import (
    DATA,
    META,
    MODEL,
    OPAQUE,
    OPTIMIZER,
    RNG_ANY,
    RNG_CPU,
    RNG_CUDA,
    RNG_KINDS,
    RNG_NUMPY,
    RNG_PYTHON,
    SCALER,
    SCHEDULER,
)

if TYPE_CHECKING:
    from traindoctor.static.context import FileContext

#: A local helper's parameters -> the arguments the caller it is read for passes (None: none).
Substitutions = dict[str, ast.expr | None]

#: DCP's state-dict helpers (torch.distributed.checkpoint.state_dict) and what they return.
_DCP_GETTERS = {
    "get_model_state_dict": (MODEL,),
    "get_optimizer_state_dict": (OPTIMIZER,),
    "get_state_dict": (MODEL, OPTIMIZER),
}
#: Calls that return a generator's state, and which generator it is.
RNG_GETTERS: dict[str, str] = {
    "torch.get_rng_state": RNG_CPU,
    "torch.random.get_rng_state": RNG_CPU,
    "torch.default_generator.get_state": RNG_CPU,
    "torch.random.default_generator.get_state": RNG_CPU,
    "torch.cuda.get_rng_state": RNG_CUDA,
    "torch.cuda.get_rng_state_all": RNG_CUDA,
    "torch.cuda.random.get_rng_state": RNG_CUDA,
    "torch.cuda.random.get_rng_state_all": RNG_CUDA,
    "numpy.random.get_state": RNG_NUMPY,
    "random.getstate": RNG_PYTHON,
}

#: Names of generic containers (``state``, ``ckpt``, ``extra``): what they hold is unknown.
_RX_GENERIC_STATE = re.compile(r"state|ckpt|checkpoint|extra|misc|other|save|bundle|payload|train")
#: Dict keys that record where in the data the run is (enough to restore the data position).
_RX_DATA_KEY = re.compile(r"step|iter|batch|sampler|loader|data_?state|position|offset|consumed|samples_seen")
#: Names of saved objects that are data, not training state (features, caches, predictions...).
_RX_DATAISH = re.compile(
    r"feat|cache|dataset|embed|tensor|result|pred|output|logit|stat|vocab|token|label|image|img|"
    r"metric|hist|mean|std|buffer|activation|grad|mask|index|sample|example|input|target|score|"
    r"audio|text|corpus|dump|record|quant|scale|calib|graph|trace|export|onnx|config|meta|eval"
)
#: Calls whose value is plain metadata (a number, a string, a time), never training state.
_HARMLESS_CALLS = {
    "int",
    "float",
    "str",
    "len",
    "vars",
    "bool",
    "round",
    "repr",
    "list",
    "tuple",
    "sorted",
    "getattr",
    "hasattr",
    "isinstance",
    "time",
    "datetime",
    "now",
    "item",
    "tolist",
    "numpy",
    "get_lr",
    "get_last_lr",
    "format",
    "join",
    "__repr__",
    "asdict",
    "to_dict",
    "to_json_string",
    "type",
    "id",
    "max",
    "min",
    "sum",
    "abs",
    "isoformat",
    "strftime",
    "getcwd",
    "gethostname",
    "uuid4",
    "hex",
}
#: Calls whose value holds what their argument or receiver holds (a copy, a device move).
_PASS_THROUGH_CALLS = {
    "deepcopy",
    "copy",
    "cpu",
    "to",
    "clone",
    "detach",
    "OrderedDict",
    "dict",
    "half",
    "float",
    "contiguous",
}
#: Pass-through methods whose value is their receiver (``x.to(device)``, ``x.cpu()``).
_RECEIVER_METHODS = frozenset({"to", "cpu", "clone", "detach", "half", "float", "contiguous"})


def _builds_model(ctx: FileContext, call: ast.Call) -> bool:
    """Whether a call builds an ``nn.Module`` the file (or its project) spells out."""
    from traindoctor.facts.models.static import model_of

    info = model_of(ctx, call)
    return bool(info.kinds) or info.known


@dataclass(frozen=True)
class Piece:
    """One thing found inside a saved object, under top-level dict key ``key`` (None: no key)."""

    kind: str
    key: str | None
    node: ast.AST


@dataclass
class Saved:
    """What one save writes: its pieces, and whether the whole object is unknown."""

    pieces: list[Piece] = field(default_factory=list)

    def kinds(self) -> set[str]:
        """The kinds of the pieces found."""
        return {p.kind for p in self.pieces}

    def has(self, kind: str) -> bool:
        """Whether a piece of ``kind`` is certainly saved (``rng_any`` covers each RNG kind)."""
        kinds = self.kinds()
        if kind in RNG_KINDS and RNG_ANY in kinds:
            return True
        return kind in kinds

    def may_hold(self, kind: str) -> bool:
        """Whether ``kind`` is saved or may hide in an opaque piece whose key does not rule it out."""
        if self.has(kind):
            return True
        return any(p.kind == OPAQUE and not key_rules_out(p.key, kind) for p in self.pieces)

    @property
    def is_opaque(self) -> bool:
        """The whole object is unknown (not a dict or value we could read)."""
        return any(p.kind == OPAQUE and p.key is None for p in self.pieces)

    def weight_keys(self) -> set[str]:
        """The keys the model weights are saved under, including a value of unknown kind whose key
        names weights (``"model_state": sub_to_normal_bn(sd)``)."""
        keys = set(self.keys_of(MODEL))
        for p in self.pieces:
            if p.kind == OPAQUE and p.key is not None and kind_from_name(p.key) is None:
                if RX_MODELISH.search(p.key.lower()):
                    keys.add(p.key)
        return keys

    def keys_of(self, kind: str) -> list[str]:
        """The top-level dict keys the pieces of ``kind`` are saved under, sorted."""
        return sorted({p.key for p in self.pieces if p.kind == kind and p.key is not None})


class SaveContents(IndexPart):
    """Reads what an expression that a save writes holds (:meth:`analyze`)."""

    def analyze(self, obj: ast.expr | None, subst: Substitutions | None = None) -> Saved:
        """What the object ``obj`` a save writes holds; ``subst`` maps a helper's parameters to the
        arguments of the caller the helper is read for."""
        saved = Saved()
        if obj is None:
            saved.pieces.append(Piece(OPAQUE, None, self.ctx.tree))
            return saved
        self._value(obj, None, saved, subst or {}, 0, top=True)
        return saved

    def _value(
        self, node: ast.AST, key: str | None, out: Saved, subst: Substitutions, depth: int, top: bool = False
    ) -> None:
        add = out.pieces.append
        if depth > 8:
            add(Piece(OPAQUE, key, node))
            return
        if key is not None and _RX_DATA_KEY.search(key.lower()):
            add(Piece(DATA, key, node))
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if k is None:
                    self._value(v, key, out, subst, depth + 1, top=top)
                else:
                    entry_key = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                    self._value(v, entry_key if top else key, out, subst, depth + 1)
            return
        if isinstance(node, ast.Constant) or isinstance(
            node, (ast.JoinedStr, ast.Compare, ast.BinOp, ast.UnaryOp, ast.BoolOp)
        ):
            add(Piece(META, key, node))
            return
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for e in node.elts:
                self._value(e, key, out, subst, depth + 1)
            return
        if isinstance(node, ast.IfExp):
            self._value(node.body, key, out, subst, depth + 1, top=top)
            self._value(node.orelse, key, out, subst, depth + 1, top=top)
            return
        if isinstance(node, ast.Call):
            self._call(node, key, out, subst, depth, top)
            return
        if isinstance(node, ast.Name):
            if top and key is None and node.id in self.ctx.parsed_args_names:
                add(Piece(META, key, node))  # ``torch.save(args, "args.pyT")``: the run's config
                return
            self._name(node, key, out, subst, depth, top)
            return
        if isinstance(node, ast.Attribute):
            if node.attr == "state" and isinstance(node.value, ast.Attribute) and node.value.attr == "bit_generator":
                add(Piece(RNG_NUMPY, key, node))
                return
            # (through a subscript, ``evaluator.coco_eval["bbox"].eval``: the last name says it)
            text = dotted(node) or node.attr
            self._named_object(text, node, key, out, top)
            return
        if isinstance(node, (ast.DictComp, ast.ListComp, ast.GeneratorExp, ast.Subscript, ast.Starred)):
            found = False
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "state_dict":
                    add(Piece(self.objects.classify(sub.func.value), key, sub))
                    found = True
            if not found:
                add(Piece(OPAQUE, key, node))
            return
        add(Piece(OPAQUE, key, node))

    def _call(self, node: ast.Call, key: str | None, out: Saved, subst: Substitutions, depth: int, top: bool) -> None:
        add = out.pieces.append
        ctx = self.ctx
        func = node.func
        qn = ctx.qualname(func)
        if qn in RNG_GETTERS:
            add(Piece(RNG_GETTERS[qn], key, node))
            return
        if isinstance(func, ast.Attribute):
            if func.attr == "state_dict":
                add(Piece(self.objects.classify(func.value), key, node))
                return
            if func.attr in ("get_state", "getstate", "get_rng_state"):
                add(Piece(RNG_ANY, key, node))
                return
        name = callee_name(node) or ""
        if name in _DCP_GETTERS and (qn or "").startswith("torch.distributed.checkpoint"):
            kinds = _DCP_GETTERS[name]
            if name == "get_state_dict" and len(node.args) < 2 and not node.keywords:
                kinds = (MODEL,)
            for kind in kinds:
                add(Piece(kind, key, node))
            return
        if name == "dict" and not node.args:
            for kw in node.keywords:
                if kw.arg is None:
                    self._value(kw.value, key, out, subst, depth + 1, top=top)
                else:
                    self._value(kw.value, kw.arg if top else key, out, subst, depth + 1)
            return
        if name in _PASS_THROUGH_CALLS:
            if isinstance(func, ast.Attribute) and name in _RECEIVER_METHODS:
                inner: ast.expr | None = func.value  # ``model.to(device)`` is the model, not the device
            else:
                inner = node.args[0] if node.args else (func.value if isinstance(func, ast.Attribute) else None)
            if inner is not None:
                self._value(inner, key, out, subst, depth + 1, top=top)
                return
        if name in _HARMLESS_CALLS:
            add(Piece(META, key, node))
            return
        if re.search(r"get_state_dict|unwrap|de_?parallel", name) and node.args:
            add(Piece(self.objects.classify(node), key, node))
            return
        if top and _builds_model(ctx, node):
            add(Piece(MODEL, key, node))  # ``torch.save(model, path)``: the whole module, pickled
            return
        # An unknown call: state_dict() calls inside still tell us something; the rest is opaque.
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "state_dict":
                add(Piece(self.objects.classify(sub.func.value), key, sub))
        if key is not None and RX_RNG.search(key.lower()):
            add(Piece(RNG_ANY, key, node))
        add(Piece(OPAQUE, key, node))

    def _name(self, node: ast.Name, key: str | None, out: Saved, subst: Substitutions, depth: int, top: bool) -> None:
        ctx = self.ctx
        if node.id in subst and self.objects.is_param_only(node):
            replacement = subst[node.id]
            if replacement is None:
                out.pieces.append(Piece(OPAQUE, key, node))
            else:
                self._value(replacement, key, out, {}, depth + 1, top=top)
            self._mutations(node, key, out, subst, depth, top)
            return
        bound, since = self.reaching(node)
        if bound and any(b is not None for b in bound):
            for b in bound:
                if b is not None:
                    self._value(b, key, out, subst, depth + 1, top=top)
            if any(b is None for b in bound):
                # Also rebound where we cannot see the value (loop target, parameter, ``+=``).
                self._named_object(node.id, node, key, out, top)
            self._mutations(node, key, out, subst, depth, top, since)
            return
        unpacked = self._dcp_unpacked.get((id(ctx.scope_of(node)), node.id))
        if unpacked is not None and bound and all(b is None for b in bound):
            out.pieces.append(Piece(unpacked, key, node))
        else:
            self._named_object(node.id, node, key, out, top)
        if bound:
            self._mutations(node, key, out, subst, depth, top, since)

    @cached_property
    def _dcp_unpacked(self) -> dict[tuple[int, str], str]:
        """``model_sd, optim_sd = get_state_dict(model, optimizer)``: what each name holds."""
        ctx = self.ctx
        out: dict[tuple[int, str], str] = {}
        for node in ctx.of(ast.Assign):
            value = node.value
            if not (
                isinstance(value, ast.Call)
                and callee_name(value) == "get_state_dict"
                and (ctx.qualname(value.func) or "").startswith("torch.distributed.checkpoint")
            ):
                continue
            for target in node.targets:
                if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
                    for elt, kind in zip(target.elts, (MODEL, OPTIMIZER)):
                        if isinstance(elt, ast.Name):
                            out[(id(ctx.scope_of(node)), elt.id)] = kind
        return out

    def reaching(self, name: ast.Name) -> tuple[list[ast.expr | None] | None, tuple[int, int] | None]:
        """The bindings of ``name`` that may reach this use, and where the dominating one starts.

        A plain assignment in a block that leads to the use (``checkpoint = {...}`` in the epoch
        loop, before ``torch.save(checkpoint, ...)``) hides earlier ones such as
        ``checkpoint = torch.load(args.resume)`` in the resume branch. Rebindings after the use
        inside a loop around it still count: they reach the next iteration.
        """
        ctx = self.ctx
        bound = ctx.bindings_of(name)
        if not bound:
            return bound, None
        use_pos = (name.lineno, name.col_offset)
        use_blocks = self._block_positions(ctx.statement_of(name))
        best: ast.expr | None = None
        for b in bound:
            if b is None or position(b) >= use_pos:
                continue
            where = self._block_position(ctx.statement_of(b))
            if where is not None and where[0] in use_blocks and where[1] < use_blocks[where[0]]:
                if best is None or position(b) > position(best):
                    best = b
        if best is None:
            return bound, None
        since = position(best)
        loops = [l for l in ctx.enclosing_loops(name) if not ctx.within(best, l)]
        kept: list[ast.expr | None] = []
        for b in bound:
            if b is None:
                continue
            if since <= position(b) < use_pos or any(ctx.within(b, l) for l in loops):
                kept.append(b)
        return kept, since

    def _block_position(self, stmt: ast.AST) -> tuple[tuple[int, str], int] | None:
        parent = self.ctx.parent(stmt)
        if parent is None:
            return None
        for fname, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is stmt:
                        return (id(parent), fname), i
        return None

    def _block_positions(self, stmt: ast.AST) -> dict[tuple[int, str], int]:
        """Block -> index of the statement on the path from ``stmt`` up to its scope."""
        out: dict[tuple[int, str], int] = {}
        cur: ast.AST | None = stmt
        while cur is not None and not isinstance(cur, (ast.Module, *FUNCTION_DEFS, ast.ClassDef, ast.Lambda)):
            if isinstance(cur, ast.stmt):
                where = self._block_position(cur)
                if where is not None:
                    out[where[0]] = where[1]
            cur = self.ctx.parent(cur)
        return out

    def _named_object(self, text: str, node: ast.AST, key: str | None, out: Saved, top: bool) -> None:
        """A name we cannot follow: judge it by what the file built under it, else by its name."""
        add = out.pieces.append
        for kind in (OPTIMIZER, SCHEDULER, SCALER, DATA):
            if text in self.objects.built[kind]:
                add(Piece(kind, key, node))
                return
        last = text.rsplit(".", 1)[-1].lower()
        named = kind_from_name(last)
        if named is not None:
            add(Piece(named, key, node))
        elif RX_RNG.search(last):
            add(Piece(RNG_ANY, key, node))
        elif RX_MODELISH.search(last):
            add(Piece(MODEL, key, node))
        elif _RX_GENERIC_STATE.search(last):
            add(Piece(OPAQUE, key, node))
        elif top and not _RX_DATAISH.search(last):
            add(Piece(OPAQUE, key, node))
        else:
            add(Piece(META, key, node))

    def _mutations(
        self,
        node: ast.Name,
        key: str | None,
        out: Saved,
        subst: Substitutions,
        depth: int,
        top: bool,
        since: tuple[int, int] | None = None,
    ) -> None:
        """Items stored into a dict variable in its scope: ``d["k"] = v``, ``d.update(...)``, escapes.

        ``since``: where the binding that reaches the save starts; stores before it went into an
        earlier object bound to the same name.
        """
        ctx = self.ctx
        scope = ctx.scope_of(node)
        for use in self.objects.name_uses.get(node.id, ()):
            if use is node or ctx.scope_of(use) is not scope:
                continue
            if since is not None and position(use) < since:
                continue
            parent = ctx.parent(use)
            if isinstance(parent, ast.Subscript) and parent.value is use:
                if isinstance(parent.ctx, ast.Store):
                    stmt = ctx.parent(parent)
                    value = getattr(stmt, "value", None)
                    k = parent.slice
                    sub = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                    if value is None:
                        out.pieces.append(Piece(OPAQUE, sub if top else key, parent))
                    else:
                        self._value(value, sub if top else key, out, subst, depth + 1)
                continue
            if isinstance(parent, ast.Attribute) and parent.value is use:
                call = ctx.parent(parent)
                if parent.attr in ("update", "setdefault") and isinstance(call, ast.Call) and call.func is parent:
                    if parent.attr == "update":
                        for a in call.args:
                            self._value(a, key, out, subst, depth + 1, top=top)
                        for kw in call.keywords:
                            self._value(
                                kw.value,
                                (kw.arg if top else key) if kw.arg else key,
                                out,
                                subst,
                                depth + 1,
                                top=top and kw.arg is None,
                            )
                    elif len(call.args) == 2:
                        k = call.args[0]
                        sub = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                        self._value(call.args[1], sub if top else key, out, subst, depth + 1)
                continue
            if (isinstance(parent, ast.Call) and use in parent.args) or isinstance(parent, ast.keyword):
                call = parent if isinstance(parent, ast.Call) else ctx.parent(parent)
                if isinstance(call, ast.Call) and not self.objects.benign_consumer(call):
                    out.pieces.append(Piece(OPAQUE, key, call))
