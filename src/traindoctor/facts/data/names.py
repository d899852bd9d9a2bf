"""Names that say evaluation (``val_loader``, ``def evaluate``) and files that are tests: the words
the data rules read to tell a training loader from one that only evaluates."""

from __future__ import annotations

import re

#: Words that mark a loader, dataset or function as evaluation-only.
_EVAL_WORDS = frozenset(
    {
        "val",
        "valid",
        "validation",
        "validate",
        "validating",
        "test",
        "tests",
        "testing",
        "tst",
        "eval",
        "evaluate",
        "evaluation",
        "evaluating",
        "dev",
        "holdout",
        "inference",
        "predict",
        "prediction",
        "predictions",
    }
)


#: ``valloader``, ``testset``: an evaluation word glued to one of these.
_EVAL_PREFIXES = ("validation", "valid", "val", "testing", "test", "eval", "dev")


_GLUED = frozenset(
    {
        "loader",
        "loaders",
        "dl",
        "dataloader",
        "dataloaders",
        "data",
        "set",
        "sets",
        "ds",
        "dataset",
        "datasets",
        "iter",
        "batches",
        "sampler",
        "split",
    }
)


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_tokens(name: str) -> list[str]:
    """``valLoader2`` -> ``["val", "loader"]``: lower-case words of an identifier."""
    return [t for t in re.split(r"[^a-z]+", _CAMEL.sub("_", name).lower()) if t]


def is_evaluation_name(name: str) -> bool:
    """Whether an identifier says evaluation (``val_loader``, ``testloader``, ``evaluate``).

    Whole words only, so ``interval_loader`` and ``latest_loader`` are not evaluation names.
    """
    for token in name_tokens(name):
        if token in _EVAL_WORDS:
            return True
        for prefix in _EVAL_PREFIXES:
            if token.startswith(prefix) and token[len(prefix) :] in _GLUED:
                return True
    return False


def is_test_module(filename: str) -> bool:
    """A test module by its own name (``test_*.py``, ``*_test.py``), wherever it lives."""
    leaf = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return leaf.startswith("test_") or leaf.endswith("_test.py")


def is_test_file(filename: str) -> bool:
    """Test code (:func:`is_test_module`, ``conftest.py``, files under ``tests/``):
    performance advice about its loaders is noise."""
    if is_test_module(filename):
        return True
    parts = filename.replace("\\", "/").split("/")
    if parts[-1] == "conftest.py":
        return True
    return any(p in ("tests", "testing") for p in parts[:-1])
