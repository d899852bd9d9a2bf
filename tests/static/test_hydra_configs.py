"""Hydra applications: the composed config (primary YAML + defaults list) as known values
(``static/hydra_configs.py``)."""

from __future__ import annotations

import textwrap

import pytest
from helpers.project_tree import LOOP, check, rows, value_at

from traindoctor.static.args import UNKNOWN

CONF = {
    ".git/HEAD": "",
    "conf/config.yaml": """
        defaults:
          - data: imagenet
          - optim@trainer.optim: adamw   # a package override
          - _self_
          - override hydra/job_logging: colorlog

        batch_size: 64
        data:
          root: /datasets
        trainer:
          epochs: 90
        name: ${data.root}/run
        required: ???
        """,
    "conf/data/imagenet.yaml": """
        num_workers: 0
        pin_memory: true
        root: /imagenet
        """,
    "conf/optim/adamw.yaml": """
        lr: 0.001
        weight_decay: 0.05
        """,
}

APP = """
import hydra


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    loader = build(cfg.data, cfg.batch_size)
    print(cfg.trainer.optim.weight_decay, cfg.trainer.epochs, cfg.name, cfg.required, cfg["batch_size"])
    run(cfg)


def build(data, batch_size):
    print(data.num_workers, data.root, data.pin_memory)


def run(cfg):
    print(cfg.data.num_workers)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("cfg.data.num_workers", 0),  # from the group option, in ``run`` (called with the config)
        ("data.num_workers", 0),  # ``build(cfg.data, ...)``: the part the call passes
        ("data.root", "/datasets"),  # _self_ after the group: the primary config wins
        ("data.pin_memory", True),
        ("cfg.trainer.optim.weight_decay", 0.05),  # ``optim@trainer.optim``
        ("cfg.trainer.epochs", 90),
        ("cfg['batch_size']", 64),
        ("cfg.name", UNKNOWN),  # an interpolation
        ("cfg.required", UNKNOWN),  # mandatory
    ],
)
def test_composed_values(tmp_path, expr, expected):
    assert value_at(tmp_path, {**CONF, "train.py": APP}, "train.py", expr) == expected


def test_self_first_lets_the_defaults_win_and_global_packages(tmp_path):
    conf = {
        **CONF,
        "conf/config.yaml": """
            defaults:
              - _self_
              - data: imagenet
              - experiment: fast

            batch_size: 64
            data:
              root: /datasets
            """,
        "conf/experiment/fast.yaml": "# @package _global_\nbatch_size: 256\n",
    }
    files = {**conf, "train.py": APP}
    assert value_at(tmp_path, files, "train.py", "data.root") == "/imagenet"
    assert value_at(tmp_path, files, "train.py", "cfg['batch_size']") == 256


@pytest.mark.parametrize(
    "change",
    [
        ("def run(cfg):\n", "def run(cfg):\n    cfg.data.num_workers = 8\n"),  # stored in the file
        ("    run(cfg)\n", "    run(cfg)\n    run(other)\n"),  # called with something else too
        ("    run(cfg)\n", "    run(cfg)\n    callbacks.append(run)\n"),  # handed on as a value
        ('config_name="config"', "config_name=name"),  # not a constant
    ],
)
def test_unknown_stays_unknown(tmp_path, change):
    app = APP.replace(*change)
    assert value_at(tmp_path, {**CONF, "train.py": app}, "train.py", "cfg.data.num_workers") is UNKNOWN


def test_td102_from_a_hydra_group_option(tmp_path):
    app = textwrap.dedent("""
        import hydra
        import torch
        from torch.utils.data import DataLoader


        @hydra.main(config_path="conf", config_name="config")
        def main(cfg):
            model = torch.nn.Linear(4, 2).cuda()
            loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.data.num_workers)
        """) + textwrap.indent(LOOP, "    ")
    result = check(tmp_path, {**CONF, "train.py": app}, "train.py", ["TD102"])
    assert rows(result) == [("TD102", 9)]
    conf = {
        **CONF,
        "conf/data/imagenet.yaml": CONF["conf/data/imagenet.yaml"].replace("num_workers: 0", "num_workers: 8"),
    }
    assert rows(check(tmp_path, {**conf, "train.py": app}, "train.py", ["TD102"])) == []
