"""Project context: findings whose evidence lives in another module of the checked file's project.

Each test writes a tiny project tree (the shapes real repositories use: ``utils.get_*_dataloader``,
``engine.train_one_epoch``, ``util/misc.py`` scalers, ``models/`` packages with star imports) and
checks only the script, as a user runs ``traindoctor check train.py``: the finding lands in the
script, at the call, and cites the other file as a related location.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from helpers.project_tree import check, rows, write

from traindoctor.check.engine import READER, check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.data.project import function_data
from traindoctor.finding import Location
from traindoctor.report import get_reporter
from traindoctor.report import text as text_report
from traindoctor.static.project import Project, project_for, project_root
from traindoctor.static.source import parse

UTILS_FACTORY = """
import torchvision
from torch.utils.data import DataLoader


def get_training_dataloader(mean, std, batch_size=16, num_workers=2, shuffle=True):
    transform = torchvision.transforms.Normalize(mean, std)
    training = torchvision.datasets.CIFAR100(root="./data", train=True, transform=transform)
    loader = DataLoader(training, shuffle=shuffle, num_workers=num_workers, batch_size=batch_size)
    return loader


def get_test_dataloader(mean, std, batch_size=16, num_workers=2):
    test = torchvision.datasets.CIFAR100(root="./data", train=False)
    return DataLoader(test, num_workers=num_workers, batch_size=batch_size)
"""

TRAIN_WITH_FACTORY = """
import torch
from utils import get_training_dataloader, get_test_dataloader


def train(epoch):
    net.train()
    for images, labels in training_loader:
        images, labels = images.cuda(), labels.cuda()
        optimizer.zero_grad()
        loss_function(net(images), labels).backward()
        optimizer.step()


if __name__ == "__main__":
    net = torch.nn.Linear(3, 100).cuda()
    loss_function = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    training_loader = get_training_dataloader(
        (0.5,), (0.2,),
        num_workers=4,
        batch_size=128,
    )
    test_loader = get_test_dataloader((0.5,), (0.2,), num_workers=4)
    for epoch in range(1, 200):
        train(epoch)
"""


def test_loader_built_by_a_project_factory_is_reported_at_the_call_with_the_factory_cited(tmp_path):
    result = check(
        tmp_path, {"utils.py": UTILS_FACTORY, "train.py": TRAIN_WITH_FACTORY}, "train.py", ["TD101", "TD102", "TD103"]
    )
    assert rows(result) == [("TD101", 18), ("TD103", 18)]
    td101, td103 = result.findings
    assert td101.location == Location(18, 23)
    assert "4 worker processes" in td103.message and "line 24" in td103.message
    for f in (td101, td103):
        assert f.fix is None  # the keyword belongs in utils.py, not in the factory call
        assert [(Path(r.filename).name, r.location.row) for r in f.related] == [("utils.py", 8)]
        assert "get_training_dataloader" in f.related[0].message


def test_factory_keyword_defaults_and_call_site_values_decide(tmp_path):
    # num_workers not passed: the factory's default (0) applies -> TD102, no TD103.
    train = TRAIN_WITH_FACTORY.replace("num_workers=4,\n", "")
    utils = UTILS_FACTORY.replace("num_workers=2, shuffle=True", "num_workers=0, shuffle=True")
    result = check(tmp_path, {"utils.py": utils, "train.py": train}, "train.py", ["TD102", "TD103"])
    assert rows(result) == [("TD102", 18)]
    assert result.findings[0].related


def test_factory_that_pins_and_persists_is_silent(tmp_path):
    utils = UTILS_FACTORY.replace(
        "batch_size=batch_size)\n    return loader",
        "batch_size=batch_size,\n                        pin_memory=True, persistent_workers=num_workers > 0)\n    return loader",
    )
    result = check(
        tmp_path, {"utils.py": utils, "train.py": TRAIN_WITH_FACTORY}, "train.py", ["TD101", "TD102", "TD103"]
    )
    assert rows(result) == []


def test_unknown_factory_keyword_stays_unknown(tmp_path):
    utils = UTILS_FACTORY.replace("num_workers=num_workers, batch_size", "num_workers=os.cpu_count(), batch_size")
    result = check(
        tmp_path, {"utils.py": "import os\n" + utils, "train.py": TRAIN_WITH_FACTORY}, "train.py", ["TD102", "TD103"]
    )
    assert rows(result) == []


ENGINE = """
import torch


def train_one_epoch(model, criterion, data_loader, optimizer, device, epoch):
    model.train()
    for samples, targets in metric_logger.log_every(data_loader, 10, header):
        loss = criterion(model(samples.to(device)), targets.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@torch.no_grad()
def evaluate(data_loader, model, device):
    model.eval()
    for images, target in data_loader:
        model(images.to(device))
"""

MAIN_WITH_ENGINE = """
import torch
from engine import train_one_epoch, evaluate


def main(args):
    model = torch.nn.Linear(3, 3).to("cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    criterion = torch.nn.CrossEntropyLoss()
    data_loader_train = torch.utils.data.DataLoader(
        dataset_train, batch_size=64, num_workers=10, pin_memory=True, drop_last=True,
    )
    data_loader_val = torch.utils.data.DataLoader(dataset_val, batch_size=64, num_workers=10, pin_memory=True)
    for epoch in range(args.start_epoch, args.epochs):
        train_one_epoch(model, criterion, data_loader_train, optimizer, "cuda", epoch)
        evaluate(data_loader_val, model, "cuda")
"""


def test_loader_iterated_by_an_engine_function_in_an_epoch_loop_respawns_workers(tmp_path):
    result = check(tmp_path, {"engine.py": ENGINE, "main.py": MAIN_WITH_ENGINE}, "main.py", ["TD103"])
    assert rows(result) == [("TD103", 9)]
    f = result.findings[0]
    assert "10 worker processes" in f.message and "line 13" in f.message
    assert [(Path(r.filename).name, r.location.row) for r in f.related] == [("engine.py", 6)]
    assert "`train_one_epoch` iterates its `data_loader` argument" in f.related[0].message
    assert f.fix is not None  # the DataLoader is in this file: the fix edits it here


def test_engine_function_that_does_not_iterate_its_argument_gives_nothing(tmp_path):
    engine = ENGINE.replace("metric_logger.log_every(data_loader, 10, header)", "other_batches")
    result = check(tmp_path, {"engine.py": engine, "main.py": MAIN_WITH_ENGINE}, "main.py", ["TD103"])
    assert rows(result) == []


def test_loader_only_evaluated_by_a_no_grad_engine_function_is_an_evaluation_loader(tmp_path):
    main = MAIN_WITH_ENGINE.replace(
        'train_one_epoch(model, criterion, data_loader_train, optimizer, "cuda", epoch)', "pass"
    )
    result = check(tmp_path, {"engine.py": ENGINE, "main.py": main}, "main.py", ["TD103"])
    assert rows(result) == []


def test_relative_imports_inside_a_package_resolve_from_the_importing_file(tmp_path):
    files = {
        "pyproject.toml": "[project]\nname = 'proj'\n",
        "proj/__init__.py": "",
        "proj/engine.py": ENGINE,
        "proj/main.py": MAIN_WITH_ENGINE.replace("from engine import", "from .engine import"),
    }
    result = check(tmp_path, files, "proj/main.py", ["TD103"])
    assert rows(result) == [("TD103", 9)]
    # ``from . import engine`` + ``engine.train_one_epoch(...)``: the same function
    files["proj/main.py"] = (
        MAIN_WITH_ENGINE.replace("from engine import train_one_epoch, evaluate", "from . import engine")
        .replace("        train_one_epoch(", "        engine.train_one_epoch(")
        .replace("        evaluate(", "        engine.evaluate(")
    )
    result = check(tmp_path, files, "proj/main.py", ["TD103"])
    assert rows(result) == [("TD103", 9)]


def test_a_parameter_that_shadows_an_imported_module_is_not_resolved(tmp_path):
    main = MAIN_WITH_ENGINE.replace("def main(args):", "def main(args, train_one_epoch):")
    result = check(tmp_path, {"engine.py": ENGINE, "main.py": main}, "main.py", ["TD103"])
    assert rows(result) == []


MISC = """
import torch


class NativeScalerWithGradNormCount:
    state_dict_key = "amp_scaler"

    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer):
        self._scaler.scale(loss).backward()
        self._scaler.step(optimizer)
        self._scaler.update()
"""


def test_deprecated_amp_in_a_project_class_is_reported_at_its_construction(tmp_path):
    main = """
    import torch
    import util.misc as misc
    from util.misc import NativeScalerWithGradNormCount as NativeScaler

    loss_scaler = NativeScaler()
    other = misc.NativeScalerWithGradNormCount()
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, loss_scaler)
    """
    result = check(tmp_path, {"util/__init__.py": "", "util/misc.py": MISC, "main.py": main}, "main.py", ["TD304"])
    assert rows(result) == [("TD304", 5)]  # one finding per project definition, at its first use
    f = result.findings[0]
    assert "torch.cuda.amp.GradScaler" in f.message and f.fix is None
    assert [(Path(r.filename).as_posix().endswith("util/misc.py"), r.location.row) for r in f.related] == [(True, 8)]


def test_library_code_that_does_not_drive_training_never_reads_other_modules(tmp_path):
    main = """
    from util.misc import NativeScalerWithGradNormCount

    def make_scaler():
        return NativeScalerWithGradNormCount()
    """
    write(tmp_path, {"util/__init__.py": "", "util/misc.py": MISC, "lib.py": main})

    path = tmp_path / "lib.py"
    result = check_source(path.read_bytes(), str(path), Settings(), instantiate(["TD304", "TD101", "TD401"]))
    assert result.findings == []
    source, lines, tree = parse(str(path), path.read_bytes())
    ctx = file_context(str(path), source, tree, Settings(), lines)
    for rule in instantiate(["TD304", "TD101", "TD103", "TD401", "TD202"]):
        list(rule.check(ctx))
    assert ctx.project_dependencies == ()


def test_pkg_module_attr_access_and_compat_shims(tmp_path):
    main = """
    import util.misc

    scaler = util.misc.NativeScalerWithGradNormCount()
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer, scaler)
    """
    files = {"util/__init__.py": "", "util/misc.py": MISC, "main.py": main}
    assert rows(check(tmp_path, files, "main.py", ["TD304"])) == [("TD304", 3)]
    # the old API only as the fallback of the new one: a compatibility shim, not a finding
    files["util/misc.py"] = MISC.replace(
        "        self._scaler = torch.cuda.amp.GradScaler()",
        "        try:\n            self._scaler = torch.amp.GradScaler('cuda')\n"
        "        except AttributeError:\n            self._scaler = torch.cuda.amp.GradScaler()",
    )
    assert rows(check(tmp_path, files, "main.py", ["TD304"])) == []


MODELS_PARTS = """
import torch.nn as nn


class DoubleConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(cin, cout, 3), nn.BatchNorm2d(cout), nn.ReLU())
"""

MODELS_NET = """
from .parts import *


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes):
        super().__init__()
        self.inc = DoubleConv(n_channels, 64)
        self.out = DoubleConv(64, n_classes)
"""

TRAIN_UNET = """
import torch
import torchvision
from models import UNet

model = UNet(n_channels=3, n_classes=2).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torchvision.datasets.CIFAR10("data", transform=torchvision.transforms.RandomCrop(32))
loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True)
for epoch in range(10):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
"""


def test_model_layers_are_read_through_package_reexports_and_star_imports(tmp_path):
    files = {
        "models/__init__.py": "from .unet import UNet\n",
        "models/parts.py": MODELS_PARTS,
        "models/unet.py": MODELS_NET,
        "train.py": TRAIN_UNET,
    }
    result = check(tmp_path, files, "train.py", ["TD401"])
    assert rows(result) == [("TD401", 5)]
    # the same model without convolutions: no cuDNN advice
    files["models/parts.py"] = MODELS_PARTS.replace("nn.Conv2d(cin, cout, 3), ", "nn.Linear(cin, cout), ")
    assert rows(check(tmp_path, files, "train.py", ["TD401"])) == []


def test_batchnorm_in_a_project_model_counts_for_td202(tmp_path):
    files = {
        "models/__init__.py": "from .unet import UNet\n",
        "models/parts.py": MODELS_PARTS,
        "models/unet.py": MODELS_NET,
        "train.py": TRAIN_UNET.replace("batch_size=8", "batch_size=4").replace(
            "        optimizer.step()", "        if step % 8 == 0:\n            optimizer.step()"
        ),
    }
    result = check(tmp_path, files, "train.py", ["TD202"])
    assert rows(result) == [("TD202", 8)]


def test_import_cycles_are_cut_and_unknown_stays_silent(tmp_path):
    files = {
        "a.py": "from b import helper\n\ndef build():\n    return helper()\n",
        "b.py": "from a import build\n\ndef helper():\n    return build()\n",
        "train.py": "import torch\nfrom a import build\n\nloader = build()\nfor epoch in range(3):\n"
        "    for x in loader:\n        x.cuda().sum().backward()\n",
    }
    result = check(tmp_path, files, "train.py", ["TD101", "TD102", "TD103", "TD304", "TD401"])
    assert rows(result) == []


def test_project_dependencies_name_the_files_that_influenced_the_findings(tmp_path):
    from traindoctor.facts.data.static import iter_training_loaders

    write(tmp_path, {"utils.py": UTILS_FACTORY, "train.py": TRAIN_WITH_FACTORY, "unrelated.py": "x = 1\n"})
    path = tmp_path / "train.py"
    source, lines, tree = parse(str(path), path.read_bytes())
    ctx = file_context(str(path), source, tree, Settings(), lines)
    assert ctx.project_dependencies == ()  # nothing asked yet: nothing read
    list(iter_training_loaders(ctx))
    assert ctx.project_dependencies == (str((tmp_path / "utils.py").resolve()),)
    # the engine hands them on with the file's result
    result = check_source(path.read_bytes(), str(path), Settings(), instantiate(["TD101", "TD103"]))
    assert result.project_dependencies == (str((tmp_path / "utils.py").resolve()),)
    # in-memory source with no file behind it: no project
    memory = file_context("<stdin>", source, tree, Settings(), lines)
    assert memory.project is None and memory.project_dependencies == ()


def test_summaries_are_computed_once_per_content_and_redone_when_it_changes(tmp_path):
    write(tmp_path, {"pyproject.toml": "", "utils.py": UTILS_FACTORY, "train.py": TRAIN_WITH_FACTORY})
    assert project_root(tmp_path / "train.py") == tmp_path
    utils = str(tmp_path / "utils.py")
    first = Project(tmp_path, READER).summary(utils)
    again = Project(tmp_path, READER).summary(utils)  # a fresh project (another run, same process)
    assert first is again
    assert function_data(first.functions["get_training_dataloader"]).loader.keywords["num_workers"] == (
        "param",
        "num_workers",
    )
    (tmp_path / "utils.py").write_text(UTILS_FACTORY.replace("num_workers=num_workers,", "num_workers=3,"))
    changed = Project(tmp_path, READER).summary(utils)
    assert changed is not first
    assert function_data(changed.functions["get_training_dataloader"]).loader.keywords["num_workers"] == ("value", 3)


def test_modules_outside_the_project_are_the_outside_world(tmp_path):
    write(tmp_path, {"outside/utils.py": UTILS_FACTORY, "proj/pyproject.toml": "", "proj/train.py": TRAIN_WITH_FACTORY})
    project = project_for(str(tmp_path / "proj" / "train.py"))
    assert project is not None and project.root == (tmp_path / "proj").resolve()
    assert project.module_file("utils", (tmp_path / "proj" / "train.py").resolve()) is None


def test_reporters_show_related_locations(tmp_path):
    result = check(tmp_path, {"utils.py": UTILS_FACTORY, "train.py": TRAIN_WITH_FACTORY}, "train.py", ["TD101"])
    text = text_report.render(result.findings)
    assert "related: " in text and "utils.py:8:14: the DataLoader is built here" in text
    data = json.loads(get_reporter("json")(result.findings))
    assert data[0]["related"][0]["location"] == {"row": 8, "column": 14}
    assert data[0]["related"][0]["filename"].endswith("utils.py")
    sarif = json.loads(get_reporter("sarif")(result.findings))
    related = sarif["runs"][0]["results"][0]["relatedLocations"][0]
    assert related["physicalLocation"]["region"] == {"startLine": 8, "startColumn": 14}
    assert related["message"]["text"].startswith("the DataLoader is built here")


# ---------------------------------------------------------------------------------------- config files

TRAIN_WITH_CONFIG = """
import argparse
import torch
import yaml
from easydict import EasyDict

parser = argparse.ArgumentParser()
parser.add_argument("--config", default="configs/train.yaml")
args = parser.parse_args()
with open(args.config) as f:
    cfg = EasyDict(yaml.safe_load(f))
model = torch.nn.Conv2d(3, 8, 3).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(ds, batch_size=cfg.train.batch_size, num_workers=cfg["num_workers"],
                                     pin_memory=True)
for epoch in range(cfg.train.epochs):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
"""

CONFIG_YAML = """
# training settings
num_workers: 6   # per GPU
train:
  batch_size: 100
  epochs: 90
  lr: 1e-4
  milestones:
    - 30
    - 60
"""


def test_values_read_from_a_yaml_config_loaded_by_an_argparse_default_path(tmp_path):
    files = {"configs/train.yaml": CONFIG_YAML, "train.py": TRAIN_WITH_CONFIG}
    result = check(tmp_path, files, "train.py", ["TD103", "TD201"])
    assert rows(result) == [("TD103", 13), ("TD201", 13)]
    td103, td201 = result.findings
    assert "6 worker processes" in td103.message
    assert "100" in td201.message


def test_config_changed_in_place_or_missing_stays_unknown(tmp_path):
    changed = TRAIN_WITH_CONFIG.replace("model = torch", "cfg.num_workers = args.workers\nmodel = torch")
    assert rows(check(tmp_path, {"configs/train.yaml": CONFIG_YAML, "train.py": changed}, "train.py", ["TD103"])) == []
    # the config file is not in the project: nothing is known
    assert rows(check(tmp_path / "other", {"train.py": TRAIN_WITH_CONFIG}, "train.py", ["TD103", "TD201"])) == []


def test_json_config_read_through_a_string_and_attrdict(tmp_path):
    src = """
    import json
    import torch

    with open("config_v1.json") as f:
        data = f.read()
    h = AttrDict(json.loads(data))
    model = torch.nn.Conv1d(80, 512, 7).cuda()
    optim_g = torch.optim.AdamW(model.parameters(), h.learning_rate)
    train_loader = torch.utils.data.DataLoader(trainset, num_workers=h.num_workers, shuffle=True,
                                               batch_size=h.batch_size, pin_memory=True)
    for epoch in range(h.training_epochs):
        for x in train_loader:
            model(x.cuda()).sum().backward()
            optim_g.step()
    """
    config = '{"batch_size": 16, "num_workers": 4, "learning_rate": 0.0002, "training_epochs": 3100}'
    result = check(tmp_path, {"config_v1.json": config, "train.py": src}, "train.py", ["TD103"])
    assert rows(result) == [("TD103", 9)]
    # project_dependencies name the config file read
    from traindoctor.facts.data.static import loader_index

    path = tmp_path / "train.py"
    source, lines, tree = parse(str(path), path.read_bytes())
    ctx = file_context(str(path), source, tree, Settings(), lines)
    call = loader_index(ctx).loaders[0].call
    assert ctx.arg_value(call, "num_workers") == 4
    assert ctx.project_dependencies == (str((tmp_path / "config_v1.json").resolve()),)


def test_simple_yaml_reads_the_training_config_subset_and_refuses_the_rest():
    from traindoctor.static.args import UNKNOWN
    from traindoctor.static.config_files import simple_yaml

    data = simple_yaml(textwrap.dedent(CONFIG_YAML))
    assert data["num_workers"] == 6 and data["train"]["batch_size"] == 100 and data["train"]["epochs"] == 90
    assert data["train"]["lr"] is UNKNOWN  # a string to PyYAML, a float to other readers: never guessed
    assert data["train"]["milestones"] is UNKNOWN
    flow = simple_yaml("a: [1, 2]\nb: &x 3\nc: 'text'\nd: 0.5\ne: yes\nf: null\n")
    assert flow == {"a": UNKNOWN, "b": UNKNOWN, "c": "text", "d": 0.5, "e": UNKNOWN, "f": None}
    assert simple_yaml("- 1\n- 2\n") is None


# ---------------------------------------------------------------------------------------- classes of real code


IMAGENET_STYLE = """
import argparse
import torch
import torch.backends.cudnn as cudnn
import torchvision.models as models
import torchvision.transforms as transforms

parser = argparse.ArgumentParser()
parser.add_argument("--arch", default="resnet18")
parser.add_argument("--seed", default=None, type=int)


def main():
    args = parser.parse_args()
    if args.seed is not None:
        torch.manual_seed(args.seed)
        cudnn.deterministic = True
        cudnn.benchmark = False
    model = models.__dict__[args.arch]().cuda()
    optimizer = torch.optim.SGD(model.parameters(), 0.1)
    train_tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
    for epoch in range(90):
        for images, target in train_loader:
            loss = criterion(model(images.cuda()), target.cuda())
            loss.backward()
            optimizer.step()
"""


def test_registry_model_and_benchmark_only_disabled_for_seeded_runs(tmp_path):
    result = check(tmp_path, {"main.py": IMAGENET_STYLE}, "main.py", ["TD401"])
    assert rows(result) == [("TD401", 18)]
    # a script that turns benchmarking on for its default runs is fine
    on = IMAGENET_STYLE.replace("    model = models", "    cudnn.benchmark = args.seed is None\n    model = models")
    assert rows(check(tmp_path, {"main.py": on}, "main.py", ["TD401"])) == []
    # deterministic everywhere (not only for seeded runs): the user chose reproducibility
    always = IMAGENET_STYLE.replace("    model = models", "    cudnn.deterministic = True\n    model = models")
    assert rows(check(tmp_path, {"main.py": always}, "main.py", ["TD401"])) == []
    # a non-CNN architecture named by the default: no conv evidence
    vit = IMAGENET_STYLE.replace('default="resnet18"', 'default="vit_b_16"')
    assert rows(check(tmp_path, {"main.py": vit}, "main.py", ["TD401"])) == []


def test_project_registry_names_a_local_model(tmp_path):
    files = {
        "models/__init__.py": "from .nets import *\n",
        "models/nets.py": MODELS_PARTS + "\n\ndef tiny():\n    return DoubleConv(3, 8)\n",
        "main.py": IMAGENET_STYLE.replace("import torchvision.models as models\n", "import models\n").replace(
            'default="resnet18"', 'default="tiny"'
        ),
    }
    assert rows(check(tmp_path, files, "main.py", ["TD401"])) == [("TD401", 18)]


ACCEL_SCRIPT = """
import argparse
import torch
from data import get_training_set

parser = argparse.ArgumentParser()
parser.add_argument("--accel", action="store_true")
parser.add_argument("--threads", type=int, default=4)
opt = parser.parse_args()
device = torch.accelerator.current_accelerator() if opt.accel else torch.device("cpu")
train_loader = torch.utils.data.DataLoader(get_training_set(3), num_workers=opt.threads, batch_size=64)
model = torch.nn.Conv2d(1, 1, 3).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(30):
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
"""

DATA_MODULE = """
from torchvision.transforms import CenterCrop, Compose, ToTensor


def input_transform(crop_size):
    return Compose([CenterCrop(crop_size), ToTensor()])


def get_training_set(upscale_factor):
    return DatasetFromFolder("images/train", input_transform=input_transform(256 // upscale_factor))
"""


def test_accelerator_scripts_and_a_data_pipeline_in_another_module(tmp_path):
    files = {"data.py": DATA_MODULE, "main.py": ACCEL_SCRIPT}
    result = check(tmp_path, files, "main.py", ["TD101", "TD103", "TD401"])
    assert rows(result) == [("TD101", 10), ("TD103", 10), ("TD401", 11)]
    # the images are resized at random in the helper module: no fixed shape, no TD401
    files["data.py"] = DATA_MODULE.replace("CenterCrop(crop_size)", "RandomResize(crop_size, 2 * crop_size)").replace(
        "import CenterCrop", "import RandomResize"
    )
    assert rows(check(tmp_path, files, "main.py", ["TD401"])) == []


def test_factory_batch_size_feeds_td201_and_a_local_cycle_generator_repeats_the_loader(tmp_path):
    utils = UTILS_FACTORY.replace("batch_size=16, num_workers=2", "batch_size=100, num_workers=2")
    train = TRAIN_WITH_FACTORY.replace("        batch_size=128,\n", "")
    result = check(tmp_path, {"utils.py": utils, "train.py": train}, "train.py", ["TD201"])
    assert rows(result) == [("TD201", 18)]
    assert "Batch size 100" in result.findings[0].message and result.findings[0].related
    src = """
    import torch
    from multiprocessing import cpu_count

    def cycle(dl):
        while True:
            for data in dl:
                yield data

    class Trainer:
        def __init__(self, ds):
            dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, pin_memory=True, num_workers=cpu_count())
            self.dl = cycle(dl)

        def train(self):
            while self.step < self.train_num_steps:
                data = next(self.dl).cuda()
                self.model(data).sum().backward()
    """
    src = textwrap.dedent(src).lstrip("\n")
    assert rows(check(tmp_path, {"ddpm.py": src}, "ddpm.py", ["TD103"])) == [("TD103", 11)]
    # itertools.cycle caches the first pass: the loader is iterated once
    cached = src.replace(
        "def cycle(dl):\n    while True:\n        for data in dl:\n            yield data\n", ""
    ).replace(
        "from multiprocessing import cpu_count", "from multiprocessing import cpu_count\nfrom itertools import cycle"
    )
    assert rows(check(tmp_path, {"ddpm.py": cached}, "ddpm.py", ["TD103"])) == []
