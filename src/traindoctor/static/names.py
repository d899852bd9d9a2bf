"""Qualified-name resolution through imports and aliases.

``from torch.utils.data import DataLoader as DL`` makes ``DL(...)`` a call of
``torch.utils.data.DataLoader``; ``import torch.utils.data as tud`` makes ``tud.DataLoader`` the
same. Many torch objects are reachable under several module paths (``torch.optim.adamw.AdamW``);
:data:`CANONICAL` maps those to the public name, so rules compare against one spelling.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import cast

#: Private or alternative module paths -> the public name rules compare against.
CANONICAL: dict[str, str] = {
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.utils.data.distributed.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.utils.data.sampler.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.utils.data.dataset.Dataset": "torch.utils.data.Dataset",
    "torch.utils.data.dataset.IterableDataset": "torch.utils.data.IterableDataset",
    "torch.amp.autocast_mode.autocast": "torch.autocast",
    "torch.amp.autocast": "torch.autocast",
    "torch.cuda.amp.autocast_mode.autocast": "torch.cuda.amp.autocast",
    "torch.cpu.amp.autocast_mode.autocast": "torch.cpu.amp.autocast",
    "torch.amp.grad_scaler.GradScaler": "torch.amp.GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler": "torch.cuda.amp.GradScaler",
    "torch.nn.utils.clip_grad.clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.serialization.save": "torch.save",
    "torch.serialization.load": "torch.load",
    "torch.nn.modules.batchnorm.BatchNorm1d": "torch.nn.BatchNorm1d",
    "torch.nn.modules.batchnorm.BatchNorm2d": "torch.nn.BatchNorm2d",
    "torch.nn.modules.batchnorm.BatchNorm3d": "torch.nn.BatchNorm3d",
    "torch.nn.modules.batchnorm.SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.inference_mode": "torch.inference_mode",
    "torch.autograd.grad_mode.enable_grad": "torch.enable_grad",
}

_OPTIMIZERS = (
    "SGD",
    "Adam",
    "AdamW",
    "Adamax",
    "Adagrad",
    "Adadelta",
    "RMSprop",
    "NAdam",
    "RAdam",
    "Rprop",
    "ASGD",
    "LBFGS",
    "SparseAdam",
    "Adafactor",
    "Muon",
)
#: Module names under torch.optim where each optimizer class also lives.
for _opt in _OPTIMIZERS:
    CANONICAL[f"torch.optim.{_opt.lower()}.{_opt}"] = f"torch.optim.{_opt}"
OPTIMIZERS: frozenset[str] = frozenset(f"torch.optim.{o}" for o in _OPTIMIZERS)
#: The deprecated Hugging Face AdamW (default ``weight_decay=0.0``), still in many fine-tuning scripts.
CANONICAL["transformers.optimization.AdamW"] = "transformers.AdamW"
OPTIMIZERS = OPTIMIZERS | {"transformers.AdamW"}

_SCHEDULERS = (
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
)
for _s in _SCHEDULERS:
    CANONICAL[f"torch.optim.lr_scheduler.{_s}"] = f"torch.optim.lr_scheduler.{_s}"
SCHEDULERS: frozenset[str] = frozenset(f"torch.optim.lr_scheduler.{s}" for s in _SCHEDULERS)

NORM_LAYERS: frozenset[str] = frozenset(
    f"torch.nn.{n}"
    for n in (
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "SyncBatchNorm",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
        "LayerNorm",
        "GroupNorm",
        "RMSNorm",
        "InstanceNorm1d",
        "InstanceNorm2d",
        "InstanceNorm3d",
        "LocalResponseNorm",
    )
)
BATCHNORMS: frozenset[str] = frozenset(
    f"torch.nn.{n}"
    for n in (
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
    )
)


def canonical(name: str) -> str:
    return CANONICAL.get(name, name)


def dotted(node: ast.AST) -> str | None:
    """The raw dotted text of a Name/Attribute chain (``a.b.c``), or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def receiver(call: ast.Call) -> ast.expr:
    """The object a method is called on: ``x`` of ``x.attr(...)``. ``call.func`` must be an
    attribute, as it is in every call ``FileContext.method_calls`` returns."""
    return cast(ast.Attribute, call.func).value


class ImportMap:
    """Local names bound by imports (anywhere in the file) -> fully qualified names.

    ``fallback``, when set, is asked once per name that no import binds (``torch`` in a file
    whose only import of it is a ``from utils import *``); what it answers is kept in ``names``.
    """

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.fallback: Callable[[str], str | None] | None = None
        self._asked: set[str] = set()

    def _lookup(self, name: str) -> str | None:
        found = self.names.get(name)
        if found is not None or self.fallback is None or name in self._asked:
            return found
        self._asked.add(name)
        found = self.fallback(name)
        if found is not None:
            self.names[name] = found
        return found

    def add_import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.names[alias.asname] = alias.name
            else:
                top = alias.name.split(".", 1)[0]
                self.names[top] = top

    def add_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # relative imports are the project's own code
        for alias in node.names:
            if alias.name == "*":
                continue
            self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def add_alias(self, local: str, qualified: str) -> None:
        self.names.setdefault(local, qualified)

    def resolve(self, node: ast.AST) -> str | None:
        """Fully qualified, canonical name of a Name/Attribute chain, or None if not imported."""
        # Find the head first: most chains (``self.x.y``, local names) are not imported, and
        # are answered without building their text.
        head = node
        while head.__class__ is ast.Attribute:
            head = head.value
        if head.__class__ is not ast.Name:
            return None
        base = self._lookup(head.id)
        if base is None:
            return None
        if node is head:
            return canonical(base)
        parts: list[str] = []
        while node is not head:
            link = cast(ast.Attribute, node)  # the chain the first loop walked down to the head
            parts.append(link.attr)
            node = link.value
        parts.append(base)
        return canonical(".".join(reversed(parts)))
