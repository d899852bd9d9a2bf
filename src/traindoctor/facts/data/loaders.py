"""The answers of the loader analysis (:mod:`traindoctor.facts.data.static`): one ``DataLoader``
construction (:class:`Loader`), the paths its value takes (:class:`Use`) and the places that start a
pass over it (:class:`Site`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from traindoctor.facts.data.names import is_evaluation_name
from traindoctor.facts.data.project import LoaderFacts, loader_keyword
from traindoctor.static.args import MISSING, UNKNOWN, ArgResult

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.finding import Related
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import Resolved


@dataclass
class Site:
    """One place that starts a pass over the loader: a ``for`` loop, a comprehension, ``iter()``."""

    node: ast.AST
    #: "for" (loop or comprehension), "iter" (``iter()``/``cycle()``), "hook" (a framework hook
    #: such as Lightning's ``train_dataloader``, iterated by the trainer every epoch).
    kind: str
    #: Calls through which the loader was passed (as an argument) to reach this site.
    via: tuple[ast.Call, ...] = ()
    #: The loop (or hook function) that makes this site run more than once, if any.
    repeated_by: ast.AST | None = None
    #: Under ``no_grad``/``inference_mode`` (or in an evaluation function) with no backward.
    evaluation: bool = False
    #: Where in another project module the pass happens (``engine.train_one_epoch``'s loop).
    related: tuple[Related, ...] = ()
    #: ``next(iter(loader))`` run once (no loop repeats it): one batch taken to look at (plot a
    #: sample, size a layer), not a pass that trains.
    peek: bool = False
    #: A ``for`` loop that never reads the batches it draws (``for i, _ in enumerate(loader)``
    #: timing the loader): nothing trains on them.
    unused: bool = False


@dataclass
class Use:
    """One path the loader's value takes: the names it travels under and where it ends up."""

    names: tuple[str, ...]
    sites: list[Site] = field(default_factory=list)
    #: Expressions that evaluate to the loader along this path (its construction included).
    refs: list[ast.expr] = field(default_factory=list)
    #: The value went somewhere we cannot follow (an unknown function, a container).
    escapes: bool = False
    #: A read that neither iterates the loader nor hands it on (``len(loader)``,
    #: ``loader.sampler``, ``print(loader)``): it says nothing about what the loader is for.
    inert: bool = False

    @property
    def evaluation(self) -> bool:
        if any(is_evaluation_name(n) for n in self.names):
            return True
        return bool(self.sites) and all(s.evaluation or s.unused for s in self.sites)


@dataclass
class Loader:
    """One ``DataLoader(...)`` construction and everything known about how it is used."""

    call: ast.Call
    uses: list[Use]
    #: The dataset argument itself says evaluation (``val_ds``, ``MNIST(train=False)``).
    evaluation_dataset: bool = False
    #: Dataset made of in-memory tensors (``TensorDataset``): workers rarely pay off.
    in_memory: bool = False
    #: Dataset is an ``IterableDataset`` defined in this file (workers need sharding).
    iterable: bool = False
    #: Dataset tensors are already on a device (``.cuda()``/``.to(...)``): pinning cannot apply.
    on_device: bool = False
    #: Built inside a function whose name says evaluation (``def val_dataloader(self)``).
    built_for_evaluation: bool = False
    #: Built by a project function in another module (``utils.get_training_dataloader(...)``):
    #: ``call`` is then the factory call in this file and the keywords come from its summary.
    factory: Resolved | None = None
    #: The construction of the factory's summary this loader stands for (a factory may return
    #: one of several, or several in a tuple); None: the factory's one loader.
    facts: LoaderFacts | None = None
    #: Where the DataLoader is really constructed, when that is another file.
    related: tuple[Related, ...] = ()

    def arg(self, ctx: FileContext, name: str) -> ArgResult:
        """The DataLoader's ``name`` argument: a node (for a factory, a constant node holding the
        value it passes), MISSING when not passed, UNKNOWN when it cannot be told."""
        if self.factory is None:
            return ctx.arg(self.call, name)
        value = loader_keyword(self.factory, self.call, ctx, name, self.facts)
        if value is MISSING or value is UNKNOWN:
            return value
        node = ast.Constant(value)  # stands at the factory call: that is where the value enters
        node.lineno, node.col_offset = self.call.lineno, self.call.col_offset
        node.end_lineno, node.end_col_offset = self.call.lineno, self.call.col_offset
        return node

    @property
    def evaluation_only(self) -> bool:
        """Evaluation loader by the catalog's definition: skipped by TD101-TD103."""
        if self.evaluation_dataset or self.built_for_evaluation:
            return True
        uses = [u for u in self.uses if not u.inert]
        return bool(uses) and all(u.evaluation for u in uses)

    @property
    def peek_only(self) -> bool:
        """Only ever used for ``next(iter(loader))`` once: a batch to look at, not a training loader."""
        if not self.uses or any(u.escapes for u in self.uses):
            return False  # inert reads (``len(loader)``) are neither escapes nor sites
        sites = self.sites
        return bool(sites) and all(s.peek for s in sites)

    @property
    def sites(self) -> list[Site]:
        return [s for u in self.uses for s in u.sites]

    @property
    def repeated_site(self) -> Site | None:
        """The first site that runs more than once (an epoch loop around it), if any."""
        for site in self.sites:
            if site.repeated_by is not None:
                return site
        return None

    @property
    def refs(self) -> list[ast.expr]:
        return [r for u in self.uses for r in u.refs]

    @property
    def names(self) -> list[str]:
        seen: list[str] = []
        for u in self.uses:
            for n in u.names:
                if n not in seen:
                    seen.append(n)
        return seen
