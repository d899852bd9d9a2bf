"""Where a live submodule was built, read back from the user's source (TD210's runtime line)."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import torch.nn as nn

from traindoctor.facts.models.source_sites import module_source_site

MODELS = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3),  # BODY0
            nn.BatchNorm2d(cout),
            nn.ReLU(),
        )
        self.head = nn.Linear(cout, 2)  # HEAD


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))  # STEM
        self.block = Block(8, 16)


class Starred(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)]
        self.body = nn.Sequential(*layers)


class Added(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module("conv", nn.Conv2d(3, 8, 3))
"""


def _load(tmp_path: Path, source: str, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return path, module


def _row(source: str, mark: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if f"# {mark}" in line)


def test_layers_of_user_classes_are_found_through_sequential_arguments(tmp_path):
    path, models = _load(tmp_path, MODELS, "td_models_a")
    net = models.Net()
    # nearest user class above the layer: Net for stem.0, Block for block.body.0 and block.head
    assert module_source_site(net, "stem.0") == (str(path), _row(MODELS, "STEM"))
    site = module_source_site(net, "block.body.0")
    assert site == (str(path), _row(MODELS, "BODY0"))
    assert site is not None and site.column == 13
    assert module_source_site(net, "block.head") == (str(path), _row(MODELS, "HEAD"))


def test_builds_the_source_cannot_show_give_no_line(tmp_path):
    _, models = _load(tmp_path, MODELS, "td_models_b")
    assert module_source_site(models.Starred(), "body.0") is None  # nn.Sequential(*layers)
    assert module_source_site(models.Added(), "conv") is None  # add_module: no self.conv = ...
    assert module_source_site(models.Net(), "stem.9") is None  # no such child
    net = models.Net()
    net.stem.append(nn.ReLU())  # the live container no longer matches its source: no guess
    assert module_source_site(net, "stem.0") is None


def test_bare_sequential_is_matched_by_its_children_in_the_hint_files(tmp_path):
    script = textwrap.dedent(
        """\
        import torch.nn as nn

        netG = nn.Sequential(nn.Linear(16, 192), nn.Tanh())
        netD = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.BatchNorm1d(64), nn.Linear(64, 1))  # NETD
        """
    )
    path = tmp_path / "train.py"
    path.write_text(script)
    netD = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.BatchNorm1d(64), nn.Linear(64, 1))
    site = module_source_site(netD, "1", [str(path)])
    assert site == (str(path), _row(script, "NETD")) and site.column == 36
    # without the file, or when two calls in it match, no line
    assert module_source_site(netD, "1", []) is None
    path.write_text(script + "netE = " + script.splitlines()[3].split("= ", 1)[1] + "\n")
    assert module_source_site(netD, "1", [str(path)]) is None
