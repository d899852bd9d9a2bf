"""Where a file trains: its training loops and the loops that run one step per iteration.

A training loop is a loop around ``backward()`` / ``optimizer.step()`` (the *train markers*), or
around a call of a local function that trains; a batch loop is the innermost loop around one
step, so a save inside it runs mid-epoch. A framework hook called every epoch or step
(Lightning's ``on_train_epoch_end``, a ``TrainerCallback`` event) repeats like the loop's body.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property

from traindoctor.facts.checkpoint.static.base import FUNCTION_DEFS, IndexPart
from traindoctor.static.names import receiver
from traindoctor.static.vocab import OPTIMIZER, SCALER

#: Framework hooks run once per epoch or step of the framework's own training loop (Lightning
#: ``Callback``/``LightningModule`` hooks, Hugging Face ``TrainerCallback`` events).
_PERIODIC_HOOKS = frozenset(
    {
        "on_train_epoch_end",
        "on_train_epoch_start",
        "on_train_batch_end",
        "on_validation_epoch_end",
        "training_epoch_end",
        "validation_epoch_end",  # Lightning < 2
        "on_epoch_end",
        "on_epoch_begin",
        "on_step_end",
        "on_evaluate",
        "on_save",  # TrainerCallback
    }
)


#: Names of functions that train (``train_one_epoch``, ``train_epoch``, ``fit``): handed the
#: optimizer, they step it, through ``loss.backward()`` or a scaler's ``__call__`` alike.
_RX_TRAIN_FUNCTION = re.compile(r"^_?(train|fit)(_|$)|_train_(one_)?(epoch|step)$")


class TrainingLoops(IndexPart):
    """The training and batch loops of one file, and whether it trains at all."""

    @cached_property
    def train_markers(self) -> list[ast.Call]:
        """``loss.backward()``, ``accelerator.backward(loss)``, ``optimizer.step()``, ``scaler.step(opt)``."""
        ctx = self.ctx
        out = list(ctx.method_calls("backward"))
        out.extend(ctx.calls_to("torch.autograd.backward"))
        for call in ctx.method_calls("step"):
            recv = receiver(call)
            kind = self.objects.classify(recv)
            if kind == OPTIMIZER or (kind == SCALER and call.args):
                out.append(call)
        return out

    @cached_property
    def _loops(self) -> tuple[set[int], set[int]]:
        """(ids of training loops, ids of batch loops)."""
        ctx = self.ctx
        training: set[int] = set()
        batch: set[int] = set()
        # Local functions that train (directly or through other local functions) and whether each
        # runs one step per call ("step") or loops itself ("epoch").
        level: dict[str, str] = {}
        for m in self.train_markers:
            fn = ctx.function_of(m)
            loops = ctx.enclosing_loops(m)
            if loops:
                training.update(id(l) for l in loops)
                batch.add(id(loops[0]))
            if isinstance(fn, FUNCTION_DEFS):
                if not loops or level.get(fn.name) == "step":
                    level[fn.name] = "step"
                else:
                    level.setdefault(fn.name, "epoch")
        for call in self.project_training_calls:
            loops = ctx.enclosing_loops(call)
            training.update(id(l) for l in loops)
            fn = ctx.function_of(call)
            if loops and isinstance(fn, FUNCTION_DEFS):
                level.setdefault(fn.name, "epoch")
        changed = True
        seen: set[int] = set()
        while changed:
            changed = False
            for name, call in [*self.objects.local_calls, *self._handed_functions]:
                if name not in level or id(call) in seen:
                    continue
                seen.add(id(call))
                changed = True
                loops = ctx.enclosing_loops(call)
                if loops:
                    training.update(id(l) for l in loops)
                    if level[name] == "step":
                        batch.add(id(loops[0]))
                fn = ctx.function_of(call)
                if isinstance(fn, FUNCTION_DEFS) and fn.name not in level:
                    level[fn.name] = "step" if (not loops and level[name] == "step") else "epoch"
        return training, batch

    @cached_property
    def _handed_functions(self) -> list[tuple[str, ast.Call]]:
        """(local function, call) where a call is handed a function the file defines to run it
        (``gpu_timer(train_step)``, ``retry(step_fn, 3)``): the function runs there."""
        out = []
        defined = self.objects.local_functions
        for call in self.ctx.of(ast.Call):
            for arg in call.args:
                if isinstance(arg, ast.Name) and arg.id in defined and arg.id not in self.ctx.imports.names:
                    out.append((arg.id, call))
        return out

    @cached_property
    def project_training_calls(self) -> list[ast.Call]:
        """Calls of a function of another project module that runs ``backward()`` (or is named
        like one that trains) and is handed an optimizer of this file (``train_one_epoch(model, loader, optimizer, ...)`` imported
        from ``engine.py``): the file trains through it, one epoch (or more) per call."""
        ctx = self.ctx
        view = ctx.project
        if view is None or not self.objects.has_optimizer:
            return []
        out = []
        for call, resolved in view.calls():
            facts = resolved.function
            if facts is None or not (facts.backward or _RX_TRAIN_FUNCTION.search(facts.name)):
                continue
            args = [*call.args, *(k.value for k in call.keywords)]
            if any(self.objects.classify(a) == OPTIMIZER for a in args if isinstance(a, (ast.Name, ast.Attribute))):
                out.append(call)
        return out

    @property
    def batch_loops(self) -> set[int]:
        """Ids of the loops that run one training step per iteration (a save inside is mid-epoch)."""
        return self._loops[1]

    @property
    def trains(self) -> bool:
        """The file builds an optimizer and runs backward / optimizer steps."""
        return self.objects.has_optimizer and bool(self.train_markers or self.project_training_calls)

    def in_training_loop(self, node: ast.AST) -> bool:
        """Whether ``node`` runs inside a training loop."""
        training, _ = self._loops
        return any(id(l) in training for l in self.ctx.enclosing_loops(node))

    @cached_property
    def training_loops(self) -> list[ast.AST]:
        """The training loops of the file, in source order."""
        training, _ = self._loops
        return [loop for loop in self.ctx.of(ast.For, ast.AsyncFor, ast.While) if id(loop) in training]

    def trains_in(self, fn: ast.AST) -> bool:
        """Whether a training loop runs in the function ``fn`` itself."""
        return any(self.ctx.function_of(loop) is fn for loop in self.training_loops)

    def after_training(self, node: ast.AST, runs_once: bool) -> bool:
        """Whether ``node`` runs after the training of its own function, in no loop: after a
        training loop that is more than a batch loop (an epoch loop around one, the whole run), or
        after any training loop when the function ``runs_once`` (module level, or called here only
        outside loops). A function whose only training loop is one pass over the batches, called
        from elsewhere, is an epoch function: what follows its loop runs every epoch."""
        ctx = self.ctx
        if ctx.enclosing_loops(node):
            return False
        scope = ctx.scope_of(node)
        start = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        _, batch = self._loops
        return any(
            ctx.scope_of(loop) is scope
            and ((getattr(loop, "end_lineno", 0) or 0), 0) < start
            and (runs_once or id(loop) not in batch)
            for loop in self.training_loops
        )

    def in_periodic_hook(self, node: ast.AST) -> bool:
        """A save in a framework hook the trainer calls every epoch or step (Lightning's
        ``on_train_epoch_end``, a ``TrainerCallback``'s ``on_epoch_end``) repeats like a save in
        the training loop: the loop is the framework's."""
        fn = self.ctx.function_of(node)
        return isinstance(fn, FUNCTION_DEFS) and fn.name in _PERIODIC_HOOKS

    def mid_epoch(self, node: ast.AST) -> bool:
        """Whether ``node`` runs inside a batch loop: between two steps of one epoch."""
        _, batch = self._loops
        return any(id(l) in batch for l in self.ctx.enclosing_loops(node))
