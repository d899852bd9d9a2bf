"""What a loader's dataset is: made of in-memory tensors, an ``IterableDataset``, already on a
device, or named for evaluation, read from the expressions bound to the dataset argument."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.facts.data.names import is_evaluation_name
from traindoctor.facts.data.project import holds_its_data
from traindoctor.facts.data.training import callee_name
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


_TENSOR_DATASETS = frozenset(
    {
        "torch.utils.data.TensorDataset",
        "torch.utils.data.dataset.TensorDataset",
        # Lightning's demo datasets (used by its examples and docs): the corpus or random tensors are
        # built once in ``__init__`` and ``__getitem__`` slices them.
        *(
            f"{package}.{name}"
            for package in ("lightning.pytorch", "pytorch_lightning")
            for name in (
                "demos.WikiText2",
                "demos.RandomDataset",
                "demos.RandomDictDataset",
                "demos.transformer.WikiText2",
                "demos.boring_classes.RandomDataset",
                "demos.boring_classes.RandomDictDataset",
            )
        ),
    }
)


def binding_chain(ctx: FileContext, expr: ast.AST) -> Iterator[ast.AST]:
    """``expr`` and the expressions it stands for, a few hops deep: names bound once,
    ``self.x`` assigned once in the class, and the dataset wrapped by ``Subset(ds, ...)``."""
    for _ in range(6):
        yield expr
        nxt: ast.AST | None = None
        if isinstance(expr, ast.Name):
            nxt = ctx.binding(expr)
        elif isinstance(expr, ast.Attribute):
            nxt = _self_attribute_value(ctx, expr)
        elif isinstance(expr, ast.Call) and expr.args and callee_name(expr) == "Subset":
            nxt = expr.args[0]
        if nxt is None:
            return
        expr = nxt


def mapped_elements(ctx: FileContext, expr: ast.AST) -> list[ast.expr] | None:
    """The datasets a one-argument lambda is mapped over, when ``expr`` is its parameter.

    ``apply_to_collection(self.datasets, Dataset, lambda x: DataLoader(x))`` or
    ``map(lambda d: DataLoader(d), [ds_a, ds_b])``: the lambda is a generic loader factory and
    its parameter ranges over the elements of the collection passed in the same call. Only a
    collection the file spells out (a list/tuple literal, through names and ``self.x`` bound
    once) counts; anything else stays unknown.
    """
    if not isinstance(expr, ast.Name):
        return None
    fn = ctx.function_of(expr)
    if not isinstance(fn, ast.Lambda) or [a.arg for a in fn.args.args] != [expr.id]:
        return None
    call = ctx.parent(fn)
    if not isinstance(call, ast.Call) or fn not in call.args:
        return None
    for arg in call.args:
        if arg is fn:
            continue
        for value in binding_chain(ctx, arg):
            if isinstance(value, (ast.List, ast.Tuple)) and value.elts:
                if any(isinstance(e, ast.Starred) for e in value.elts):
                    return None
                return list(value.elts)
    return None


def element_kind(ctx: FileContext, expr: ast.AST) -> str | None:
    """ "memory" or "iterable" when a dataset expression is known to be one of those, else None."""
    chain = list(binding_chain(ctx, expr))
    if any(is_in_memory(ctx, e) for e in chain):
        return "memory"
    if any(is_iterable_dataset_call(ctx, e) for e in chain):
        return "iterable"
    return None


def _self_attribute_value(ctx: FileContext, attr: ast.Attribute) -> ast.expr | None:
    """The value of ``self.x`` when the enclosing class assigns ``self.x`` exactly once."""
    if not (isinstance(attr.value, ast.Name) and attr.value.id == "self"):
        return None
    cls = ctx.enclosing(attr, ast.ClassDef)
    if cls is None:
        return None
    found: list[ast.expr] = []
    for node in ctx.walk(cls):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and dotted(t) == dotted(attr):
                    found.append(node.value)
    return found[0] if len(found) == 1 else None


_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp)


def is_in_memory(ctx: FileContext, expr: ast.AST) -> bool:
    """A dataset of values already in memory: tensors (``TensorDataset``), Python containers,
    ``range``, or a class of this file whose ``__getitem__`` only indexes its own attributes."""
    if isinstance(expr, _CONTAINERS):
        return True
    if not isinstance(expr, ast.Call):
        return False
    if ctx.qualname(expr.func) in _TENSOR_DATASETS:
        return True
    if (
        isinstance(expr.func, ast.Name)
        and expr.func.id in ("range", "list", "tuple")
        and expr.func.id not in ctx.imports.names
    ):
        return True
    if isinstance(expr.func, ast.Name):  # ``dataset = partial(ReverseDataset, 10, 16)``; ``dataset(n)``
        bound = ctx.binding(expr.func)
        if isinstance(bound, ast.Call) and ctx.qualname(bound.func) == "functools.partial" and bound.args:
            return is_in_memory(ctx, ast.Call(func=bound.args[0], args=[], keywords=[]))
    if isinstance(expr.func, ast.Name):
        local = [c for c in ctx.of(ast.ClassDef) if c.name == expr.func.id]
        if local:  # a Dataset class of this file
            return any(indexes_own_data(c) for c in local)
    view = ctx.project
    if view is not None and view.imports_project:
        resolved = view.resolve(expr.func)  # a Dataset class of another project module
        return resolved is not None and holds_its_data(resolved.cls)
    return False


#: Calls that only reshape or convert data already in memory.
_CHEAP_FUNCS = frozenset({"len", "int", "float", "min", "max", "range", "slice", "tuple", "list", "abs"})


_CHEAP_METHODS = frozenset(
    {
        "clone",
        "long",
        "float",
        "int",
        "view",
        "reshape",
        "unsqueeze",
        "squeeze",
        "item",
        "size",
        "numel",
        "contiguous",
        "detach",
        # wrapping or flipping a slice that is already in memory (``torch.tensor(ts[a:b])``,
        # ``torch.flip(x, dims=(0,))``, ``arr.astype(np.float32)``): microseconds per sample
        "tensor",
        "as_tensor",
        "from_numpy",
        "flip",
        "astype",
    }
)


def indexes_own_data(cls: ast.ClassDef) -> bool:
    """``__getitem__`` only slices the instance's own attributes (``return self.data[i]``,
    possibly through locals and cheap conversions) and calls nothing that reads files or
    transforms samples: an in-memory dataset."""
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__getitem__":
            indexes_self = False
            for node in ast.walk(item):
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Name) and func.id in _CHEAP_FUNCS:
                        continue
                    if isinstance(func, ast.Attribute) and func.attr in _CHEAP_METHODS:
                        continue
                    return False
                if (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.value, ast.Attribute)
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "self"
                ):
                    indexes_self = True
            return indexes_self
    return False


def says_evaluation(ctx: FileContext, expr: ast.AST) -> bool:
    """A dataset expression that names an evaluation split (``val_ds``, ``MNIST(train=False)``)."""
    if isinstance(expr, ast.Name):
        return is_evaluation_name(expr.id)
    if isinstance(expr, ast.Attribute):
        return is_evaluation_name(expr.attr)
    if isinstance(expr, ast.Subscript):
        key = expr.slice
        return isinstance(key, ast.Constant) and isinstance(key.value, str) and is_evaluation_name(key.value)
    if isinstance(expr, ast.Call):
        for kw in expr.keywords:
            if kw.arg == "train" and ctx.value(kw.value) is False:
                return True
            if kw.arg in ("split", "subset", "mode"):
                v = ctx.value(kw.value)
                if isinstance(v, str) and is_evaluation_name(v):
                    return True
    return False


def moves_to_device(ctx: FileContext, expr: ast.AST) -> bool:
    """Whether a dataset expression builds its tensors on a device (``TensorDataset(x.cuda())``)."""
    if not isinstance(expr, ast.Call):
        return False
    nodes: list[ast.AST] = list(ctx.walk(expr))
    for arg in [*expr.args, *(k.value for k in expr.keywords)]:
        if isinstance(arg, ast.Name):
            bound = ctx.binding(arg)
            if bound is not None:
                nodes.extend(ctx.walk(bound))
    for n in nodes:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("cuda", "to"):
            return True
        if isinstance(n, ast.keyword) and n.arg == "device":
            return True
    return _items_on_device(ctx, expr)


def _items_on_device(ctx: FileContext, call: ast.Call) -> bool:
    """A Dataset class of this file whose ``__getitem__`` returns a value moved to CUDA
    (``return full_seq.cuda()``): its batches are on the device already (no pinning, no workers:
    CUDA does not survive a forked worker)."""
    if not isinstance(call.func, ast.Name):
        return False
    for cls in ctx.of(ast.ClassDef):
        if cls.name != call.func.id:
            continue
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "__getitem__":
                for ret in ast.walk(item):
                    if isinstance(ret, ast.Return) and ret.value is not None and _cuda_value(ret.value):
                        return True
    return False


def _cuda_value(value: ast.expr) -> bool:
    """``x.cuda()``, ``x.to("cuda")``, ``x.to(self.device)`` or a tuple of such."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return bool(value.elts) and any(_cuda_value(e) for e in value.elts)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr == "cuda":
            return True
        if value.func.attr == "to" and value.args:
            first = value.args[0]
            if isinstance(first, ast.Constant):
                return isinstance(first.value, str) and first.value.startswith("cuda")
            text = (dotted(first) or "").lower()
            return "device" in text or "cuda" in text  # ``.to(self.device)``
    return False


def is_iterable_dataset_call(ctx: FileContext, expr: ast.AST) -> bool:
    """A call of an ``IterableDataset`` subclass defined in this file."""
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Name):
        return False
    for cls in ctx.of(ast.ClassDef):
        if cls.name == expr.func.id:
            for base in cls.bases:
                text = dotted(base) or ""
                if text.endswith("IterableDataset"):
                    return True
    return False
