"""``traindoctor tune``: measure the fastest DataLoader settings for a dataset on this machine.

``tune_loader(dataset, batch_size=...)`` returns a :class:`TuneResult` whose ``write(path)``
file is what ``traindoctor.recipes.loader_kwargs(dataset, tuned=path)`` reads. Importing this
package does not import torch (measuring does). See ``docs/tune.md``.
"""

from __future__ import annotations

from traindoctor.tune.measure import Candidate, Measurement, TuneError, TuneResult, tune_loader

__all__ = ["Candidate", "Measurement", "TuneError", "TuneResult", "tune_loader"]
