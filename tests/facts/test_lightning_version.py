"""The Lightning major version a file is written for (``lightning_major``): TD304's legacy
``precision=16`` spelling is advice for Lightning 2.x only."""

from __future__ import annotations

import pytest
from helpers.project_tree import check, rows

SCRIPT = """
import pytorch_lightning as pl

trainer = pl.Trainer(max_epochs=10, precision=16{extra})
trainer.fit(model, datamodule=dm)
"""


@pytest.mark.parametrize(
    ("files", "extra", "reported"),
    [
        ({}, "", True),  # nothing says which version: the 2.x advice stands
        ({"requirements.txt": "torch\npytorch-lightning>=2.1\n"}, "", True),
        ({"requirements.txt": "torch==1.12\npytorch-lightning==1.9.4\n"}, "", False),
        ({"environment.yaml": "dependencies:\n  - pip:\n    - pytorch-lightning==1.4.2\n"}, "", False),
        ({"setup.py": "setup(install_requires=['pytorch_lightning<2.0'])\n"}, "", False),
        ({"requirements/base.txt": "lightning~=1.9.0\n"}, "", False),
        ({}, ", gpus=1", False),  # removed in 2.0
        ({"requirements.txt": "lightning-bolts==0.3\n"}, "", True),  # another package
    ],
)
def test_td304_lightning_precision_alias_only_for_lightning_2(tmp_path, files, extra, reported):
    tree = {".git/HEAD": "", **files, "train.py": SCRIPT.format(extra=extra)}
    result = check(tmp_path, tree, "train.py", ["TD304"])
    assert rows(result) == ([("TD304", 3)] if reported else [])


def test_1x_epoch_end_hook_marks_the_file(tmp_path):
    script = SCRIPT.format(extra="") + (
        "\n\nclass Model(pl.LightningModule):\n    def training_epoch_end(self, outputs):\n        pass\n"
    )
    assert rows(check(tmp_path, {".git/HEAD": "", "train.py": script}, "train.py", ["TD304"])) == []
