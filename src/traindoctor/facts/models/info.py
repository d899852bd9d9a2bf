"""What the checker knows about one model: its layer kinds (a lower bound) and, when complete, its
parameter names (see :mod:`traindoctor.facts.models.static`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from traindoctor.static.names import BATCHNORMS, NORM_LAYERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.project import Resolved

Params = tuple[tuple[str, str], ...]
#: The project model's query "what model does this definition build" (see :mod:`.summariser`).
MODEL = "model"


@dataclass(frozen=True)
class ModelInfo:
    """What the file tells about one model (see the module docstring)."""

    kinds: frozenset[str]
    params: Params | None
    label: str = ""

    @property
    def known(self) -> bool:
        return self.params is not None

    @property
    def has_batchnorm(self) -> bool:
        return any(k in BATCHNORMS or k == "torch.nn.SyncBatchNorm" for k in self.kinds)

    @property
    def has_dropout(self) -> bool:
        return any(k.rsplit(".", 1)[-1].endswith("Dropout") or "Dropout" in k for k in self.kinds)

    @property
    def param_names(self) -> list[str] | None:
        return None if self.params is None else [n for n, _ in self.params]

    def norm_params(self) -> list[str]:
        """Names of parameters owned by normalisation layers (empty when unknown)."""
        return [n for n, k in self.params or () if k in NORM_LAYERS]

    def bias_or_norm_params(self) -> list[str]:
        return [n for n, k in self.params or () if k in NORM_LAYERS or n.rsplit(".", 1)[-1].endswith("bias")]


UNKNOWN_MODEL = ModelInfo(frozenset(), None, "")


def model_built_by(resolved: Resolved) -> ModelInfo | None:
    """What a definition of another project module builds when it is a model class or factory
    (computed on first use, see :class:`~traindoctor.facts.models.summariser.ModelQuery`)."""
    return cast("ModelInfo | None", resolved.answer(MODEL))  # what the MODEL query answers
