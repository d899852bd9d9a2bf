"""TD401 cudnn-benchmark-off: a CNN trains on CUDA with fixed input shapes but no cuDNN autotuning."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.backend.td403_benchmark_with_deterministic import (
    BENCHMARK,
    DETERMINISTIC,
    Setting,
    cudnn_settings,
)
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.vocab import HF_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext

#: torch.nn convolution layers (any of them makes the model convolutional).
_CONV_LAYERS = frozenset(
    f"torch.nn.{kind}{d}d" for kind in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose") for d in (1, 2, 3)
)
#: torchvision / timm model families that are convolutional networks (name prefixes; a tuple
#: for ``str.startswith``, not a regular expression: this module is imported by every watched run).
_CNN_FAMILIES = (
    "resnet",
    "resnext",
    "wide_resnet",
    "seresnet",
    "seresnext",
    "resnetv2",
    "resnest",
    "res2net",
    "vgg",
    "alexnet",
    "densenet",
    "mobilenet",
    "efficientnet",
    "tf_efficientnet",
    "regnet",
    "convnext",
    "googlenet",
    "inception",
    "shufflenet",
    "squeezenet",
    "mnasnet",
    "dla",
    "dpn",
    "cspresnet",
    "cspdarknet",
    "darknet",
    "ghostnet",
    "rexnet",
    "hrnet",
    "xception",
    "nfnet",
    "dm_nfnet",
    "nf_resnet",
    "tresnet",
    "ese_vovnet",
    "mixnet",
    "fbnet",
    "lcnet",
    "repvgg",
)
#: Evidence that inputs have one fixed size: fixed-size crops or resizes, fixed-size datasets.
_FIXED_TRANSFORMS = frozenset({"RandomResizedCrop", "RandomCrop", "CenterCrop", "FiveCrop", "TenCrop"})
_FIXED_DATASETS = frozenset(
    {
        "MNIST",
        "FashionMNIST",
        "KMNIST",
        "EMNIST",
        "QMNIST",
        "CIFAR10",
        "CIFAR100",
        "SVHN",
        "STL10",
        "FakeData",
        "USPS",
    }
)
#: timm's loader and transform factories: training crops and evaluation resizes to one input size.
_TIMM_FIXED = frozenset({"create_loader", "create_transform", "transforms_imagenet_train", "transforms_imagenet_eval"})
#: Evidence of inputs whose size changes from batch to batch.
_VARIABLE_TRANSFORMS = frozenset({"RandomResize", "RandomShortestSize", "ScaleJitter", "RandomIoUCrop"})
_LIGHTNING = ("lightning.", "pytorch_lightning.")
_PADDING = frozenset({"torch.nn.utils.rnn.pad_sequence", "torch.nn.utils.rnn.pack_padded_sequence"})


def convolution_evidence(ctx: FileContext) -> ast.Call | None:
    """The first call that builds a convolutional layer or CNN model, if any."""
    from traindoctor.facts.models.registries import TIMM_FACTORIES
    from traindoctor.facts.models.static import model_built_by, registry_entry, registry_model

    found: list[ast.Call] = []
    for qn, call in ctx.calls_to_prefix("torch.nn."):
        if qn in _CONV_LAYERS:
            found.append(call)
    for qn, call in ctx.calls_to_prefix("torchvision.models."):
        parts = qn.split(".")
        if len(parts) == 3 and parts[2].startswith(_CNN_FAMILIES):
            found.append(call)
        elif qn == "torchvision.models.get_model" and _literal_cnn_name(ctx, call):
            found.append(call)
    for call in ctx.calls_to(*sorted(TIMM_FACTORIES)):
        if _literal_cnn_name(ctx, call):
            found.append(call)
    for qn, call in ctx.calls_to_prefix("diffusers."):
        if _diffusers_conv(qn):
            found.append(call)
    for call in ctx.of(ast.Call):
        if not isinstance(call.func, ast.Subscript):
            continue
        entry = registry_entry(ctx, call.func)  # ``models.__dict__[args.arch]()``
        if (
            entry is not None
            and (ctx.qualname(entry[0]) or "") == "torchvision.models"
            and entry[1].startswith(_CNN_FAMILIES)
        ):
            found.append(call)
        elif any(k in _CONV_LAYERS for k in registry_model(ctx, call.func).kinds):
            found.append(call)
    view = ctx.project
    if not found and view is not None and view.imports_project:
        # a model class or factory of another project module (``from unet import UNet``)
        for call, resolved in view.calls():
            model = model_built_by(resolved)
            if model is not None and any(k in _CONV_LAYERS for k in model.kinds):
                found.append(call)
    found.sort(key=lambda c: (c.lineno, c.col_offset))
    return found[0] if found else None


#: diffusers models built of convolutions (UNets, ControlNets, VAEs), built or loaded with
#: ``from_pretrained``: ``diffusers.UNet2DConditionModel.from_pretrained(...)``.
_DIFFUSERS_CONV = (
    "UNet1DModel",
    "UNet2DModel",
    "UNet2DConditionModel",
    "UNet3DConditionModel",
    "UNetSpatioTemporalConditionModel",
    "UNetMotionModel",
    "ControlNetModel",
    "AutoencoderKL",
    "AsymmetricAutoencoderKL",
    "VQModel",
    "T2IAdapter",
)


def _diffusers_conv(qn: str) -> bool:
    parts = qn.split(".")
    if parts[-1] == "from_pretrained":
        parts = parts[:-1]
    return parts[-1] in _DIFFUSERS_CONV


def _literal_cnn_name(ctx: FileContext, call: ast.Call) -> bool:
    node = (
        call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("name", "model_name")), None)
    )
    value = ctx.value(node) if node is not None else None
    return isinstance(value, str) and value.split("/")[-1].split(".")[0].startswith(_CNN_FAMILIES)


def _leaf(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def _project_torchvision_calls(ctx: FileContext) -> list[tuple[str, ast.Call | None]]:
    """torchvision calls made by the project functions this file calls (``get_training_set()``
    in ``data.py`` builds the crops): the data pipeline often lives in another module."""
    view = ctx.project
    if view is None or not view.imports_project:
        return []
    out: list[tuple[str, ast.Call | None]] = []
    for _, resolved in view.calls():
        facts = resolved.function or resolved.cls
        if facts is not None:
            out.extend((q, None) for q in facts.calls if q.startswith("torchvision."))
    return out


_SEED_WORDS = ("seed", "determinis", "reproduc")


def _seeded_branch_only(ctx: FileContext, setting: Setting) -> bool:
    """``if args.seed is not None: cudnn.deterministic = True; cudnn.benchmark = False``: the
    reproducible runs turn benchmarking off on purpose, the default runs never turn it on."""
    flag, value, node = setting.flag, setting.value, setting.node
    if not ((flag == BENCHMARK and value is False) or (flag == DETERMINISTIC and value is True)):
        return False
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if isinstance(anc, ast.If) and any(ctx.within(node, b) for b in anc.body):
            words = " ".join(
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(anc.test)
                if isinstance(n, (ast.Name, ast.Attribute))
            ).lower()
            if any(w in words for w in _SEED_WORDS):
                return True
    return False


def shape_evidence(ctx: FileContext) -> tuple[bool, bool]:
    """(fixed, variable): whether the file shows inputs of one size, and of changing sizes."""
    from traindoctor.facts.data.static import DATALOADER

    fixed = variable = False
    for qn, call in [*ctx.calls_to_prefix("torchvision."), *_project_torchvision_calls(ctx)]:
        leaf = _leaf(qn)
        if qn.startswith("torchvision.models.detection") or qn.startswith("torchvision.models.segmentation"):
            variable = True
        elif qn.startswith("torchvision.transforms"):
            if leaf in _VARIABLE_TRANSFORMS:
                variable = True
            elif leaf in _FIXED_TRANSFORMS:
                fixed = True
            elif leaf == "Resize" and call is not None:
                size = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "size"), None)
                if isinstance(size, (ast.Tuple, ast.List)) and len(size.elts) == 2:
                    fixed = True
        elif qn.startswith("torchvision.datasets.") and leaf in _FIXED_DATASETS:
            fixed = True
    for qn, _ in ctx.calls_to_prefix("timm.data."):
        if _leaf(qn) in _TIMM_FIXED:
            fixed = True  # timm's loaders and transforms crop every image to the model's input size
    if ctx.calls_to("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"):
        fixed = True
    if any(ctx.calls_to(q) for q in sorted(_PADDING)):
        variable = True
    for call in ctx.calls_to(DATALOADER):
        if any(kw.arg == "collate_fn" for kw in call.keywords) or len(call.args) > 6:
            variable = True  # a custom collate usually pads to the longest sample of the batch
    return fixed, variable


class CudnnBenchmarkOff(Rule):
    code = "TD401"
    name = "cudnn-benchmark-off"
    severity = Severity.INFO
    summary = (
        "A convolutional model trains on CUDA with fixed input shapes while "
        "`torch.backends.cudnn.benchmark` stays off; set it to `True` to let cuDNN pick the fastest "
        "convolution algorithms."
    )
    gpu_only = True
    static = True
    runtime = True
    triggers = ("cuda", "nccl", "Trainer", "Fabric", "Accelerator", *HF_TRIGGERS)
    project_aware = True
    fixable = "never"

    what_it_does = """
    Reports a training script that places work on CUDA, builds a convolutional model
    (`nn.Conv1d/2d/3d`, `nn.ConvTranspose*d`, a torchvision CNN such as `resnet50()`,
    `timm.create_model("resnet50")` under any of timm's import paths, a diffusers UNet, ControlNet
    or VAE built or loaded with `from_pretrained`, a model class or factory of another project
    module, or `models.__dict__[name]` of a project module whose model factories all have
    convolutions when the name is not known), shows that its inputs have one fixed size
    (fixed-size crops or `Resize((h, w))`, a fixed-size dataset such as CIFAR-10 or MNIST, a
    `TensorDataset`, timm's `create_loader`/`create_transform`), and
    never sets `torch.backends.cudnn.benchmark`. It stays silent when the file shows inputs of
    varying size (detection models, a custom `collate_fn`, padded sequences, multi-scale
    transforms), when it asks for deterministic algorithms (benchmarking would undo that, see
    TD403), and when the flag is assigned anywhere, to any value, since that is a decision:
    in this file, in a project module that imports it (the entry script `main.py` that sets
    the flag and then runs `runners/diffusion.py`, up to three importers up) or in a project
    module it imports (a `utility.initialize()` helper). The flag is global to the process.
    The finding is placed at the first convolution or CNN constructor.

    Framework forms: Lightning's `Trainer(benchmark=...)` and
    `LightningCLI(trainer_defaults={"benchmark": ...})` set the flag (either value is the
    user's choice), and `Trainer(deterministic=True)` turns it off on purpose: all silence the
    rule. A Lightning `Trainer`/`Fabric` with the default `accelerator="auto"`, or an
    `accelerate.Accelerator`, counts as training on CUDA.
    """
    why_bad = """
    cuDNN offers several algorithms for each convolution (implicit GEMM, FFT, Winograd, ...), and
    the fastest one depends on the shapes, the data type and the GPU. With `benchmark = False`
    (PyTorch's default) cuDNN picks one by heuristics; with `benchmark = True` PyTorch times the
    candidates the first time it meets a shape and caches the winner. When the shapes stay the
    same for the whole run, that one-off cost buys faster convolutions for every later step, often
    by 10% or more for CNNs. When the shapes keep changing, every new shape pays the timing again,
    which is why this is only suggested for fixed shapes (TD402 reports the opposite case at run
    time). Benchmarking makes the algorithm choice depend on timing, so runs that must be
    bit-for-bit reproducible should leave it off.
    """
    example = """
    model = torchvision.models.resnet50().cuda()
    train_tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
    """
    use_instead = """
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda()
    train_tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
    """
    options = """
    GPU-only. Fires when at least `TD401.min_forwards` (default 8) convolution forwards ran on
    CUDA with `cudnn.benchmark` off, and every conv layer saw at most `TD401.max_shapes`
    (default 4) distinct input shapes with its most common shape covering at least
    `TD401.min_share` (default 0.8) of its forwards (a partial last batch is fine). Silent when
    `cudnn.deterministic` is on.
    """
    references = (
        "https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-cudnn-auto-tuner",
        "https://pytorch.org/docs/stable/notes/randomness.html#cuda-convolution-benchmarking",
    )

    valid = (
        Valid(
            """
            import torch
            import torchvision
            from torchvision import transforms

            torch.backends.cudnn.benchmark = True
            model = torchvision.models.resnet50().cuda()
            tf = transforms.RandomResizedCrop(224)
            loss.backward()
            """
        ),
        # Variable shapes: a detection model and a padding collate_fn.
        Valid(
            """
            import torch
            import torchvision
            from torch.utils.data import DataLoader

            model = torchvision.models.detection.fasterrcnn_resnet50_fpn().cuda()
            backbone = torchvision.models.resnet50()
            loader = DataLoader(ds, batch_size=4, collate_fn=collate)
            loss.backward()
            """
        ),
        # A deliberate choice (benchmark off for reproducibility), via an alias.
        Valid(
            """
            import torch
            from torch import nn
            from torch.backends import cudnn
            from torchvision import datasets

            cudnn.benchmark = False
            train = datasets.CIFAR10("data", train=True, download=True)
            net = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).to("cuda")
            loss.backward()
            """
        ),
        # Deterministic algorithms requested: benchmarking would undo them (TD403).
        Valid(
            """
            import torch
            from torch import nn
            from torchvision import datasets

            torch.use_deterministic_algorithms(True)
            train = datasets.MNIST("data", train=True)
            net = nn.Conv2d(1, 32, 3).cuda()
            loss.backward()
            """
        ),
        Valid("""
        import torchvision
        from lightning.pytorch import LightningModule
        from lightning.pytorch.cli import LightningCLI

        class ImageNetModel(LightningModule):
            def __init__(self):
                super().__init__()
                self.model = torchvision.models.resnet18()

            def training_step(self, batch, batch_idx):
                return self.model(batch[0]).sum()

        LightningCLI(ImageNetModel, trainer_defaults={"max_epochs": 90, "benchmark": True})
        """),
    )
    invalid = (
        Invalid(
            """
            import torch
            from torchvision import transforms
            from diffusers import UNet2DConditionModel

            unet = UNet2DConditionModel.from_pretrained("sd-model", subfolder="unet").to("cuda")  # TD401
            tf = transforms.Compose([transforms.Resize(512), transforms.CenterCrop(512), transforms.ToTensor()])
            optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
            loss.backward()
            """
        ),
        Invalid(
            """
            import torch
            import torchvision
            from torchvision import transforms

            model = torchvision.models.resnet50(weights=None).cuda()  # TD401
            tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            """
        ),
        # nn.Conv2d through aliases, CIFAR-10 through `from ... import`.
        Invalid(
            """
            import torch
            import torch.nn as nn
            from torchvision.datasets import CIFAR10

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv1 = nn.Conv2d(3, 32, 3)  # TD401
                    self.conv2 = nn.Conv2d(32, 64, 3)

            train_set = CIFAR10("./data", train=True, download=True)
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            net = Net().to(device)
            loss.backward()
            """
        ),
        # timm CNN and in-memory tensors of one shape.
        Invalid(
            """
            import timm
            import torch
            from torch.utils.data import TensorDataset, DataLoader

            model = timm.create_model("efficientnet_b0", num_classes=10).cuda()  # TD401
            ds = TensorDataset(images, labels)
            loader = DataLoader(ds, batch_size=64)
            for x, y in loader:
                model(x.cuda()).sum().backward()
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import file_trains, is_test_file
        from traindoctor.facts.frameworks.static import lightning_flag

        if not ctx.targets_cuda or is_test_file(ctx.filename):
            return
        if not file_trains(ctx):
            return
        conv = convolution_evidence(ctx)
        if conv is None:
            return
        settings = [s for s in cudnn_settings(ctx) if not _seeded_branch_only(ctx, s)]
        if any(s.flag == BENCHMARK for s in settings):
            return
        if any(s.flag == DETERMINISTIC and s.value is not False for s in settings):
            return
        trainers = [*ctx.method_calls("Trainer"), *(c for p in _LIGHTNING for _, c in ctx.calls_to_prefix(p))]
        if any(kw.arg == "benchmark" for c in trainers for kw in c.keywords):
            return  # Lightning's Trainer(benchmark=...) sets the flag
        if any(True for _ in lightning_flag(ctx, "benchmark")):
            return  # ``LightningCLI(trainer_defaults={"benchmark": ...})``
        if any(v is not False for _, v in lightning_flag(ctx, "deterministic")):
            return  # Lightning turns benchmark off for deterministic runs: the user chose that
        fixed, variable = shape_evidence(ctx)
        if not fixed or variable:
            return
        if set_on_the_way(ctx):
            return  # the entry script that imports this module, or a helper it imports, sets it
        yield ctx.report(
            self,
            conv,
            "This convolutional model trains on CUDA with fixed-size inputs but "
            "`torch.backends.cudnn.benchmark` is never set; set it to `True` once at start-up so "
            "cuDNN times its algorithms and keeps the fastest.",
            help="Set `torch.backends.cudnn.benchmark = True`",
        )


#: An assignment of the flag (``torch.backends.cudnn.benchmark = True``, ``cudnn.benchmark = cfg.X``).
_SETS_BENCHMARK = re.compile(rb"cudnn\s*\.\s*benchmark\s*=(?!=)")


def set_on_the_way(ctx: FileContext, depth: int = 3) -> bool:
    """Whether a project module on the way to this file's training sets the process-wide flag:
    a module that imports this one (``main.py`` importing ``runners/diffusion.py``), up to
    ``depth`` importers up, or a project module this file imports (``utility.initialize``, whose
    ``initialize()`` the script calls). The flag is global to the process, so one assignment on
    the way is enough; which value it sets is the user's choice (TD403 judges the combination)."""
    from traindoctor.static.importers import importers_of

    view = ctx.project
    if view is None:
        return False
    here = str(view.path)
    seen = {here}
    candidates = [path for path, _ in view.bindings.values()]
    frontier = [here]
    for _ in range(depth):
        found: list[str] = []
        for module in frontier:
            importers = importers_of(view.project, module)
            if importers is None:
                return False  # too big a tree to tell: keep the finding as the file alone says
            found += [p for p in importers if p not in seen]
        seen.update(found)
        candidates += found
        frontier = found
    for path in dict.fromkeys(candidates):
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        if _SETS_BENCHMARK.search(data):
            return True
    return False


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class CudnnBenchmarkOffMonitor(Monitor):
    """Convolutions on CUDA with (nearly) fixed input shapes while ``cudnn.benchmark`` is off.

    Fixed means: every conv layer saw at most ``max_shapes`` distinct input shapes and its most
    common shape covers at least ``min_share`` of its forwards (a last partial batch or an
    evaluation batch size are fine). Silent when ``cudnn.deterministic`` is on (the user chose
    reproducibility) or cudnn is disabled. GPU-only.
    """

    rule = CudnnBenchmarkOff

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.flags: dict[str, bool] = {}

    def on_backend_flags(self, flags: Mapping[str, bool], site: Site | None = None) -> None:
        self.flags = dict(flags)

    def on_run_end(self) -> None:
        if not self.session.device.is_cuda or self.flags.get("benchmark", True):
            return
        if self.flags.get("deterministic", False) or not self.flags.get("enabled", True):
            return  # reproducibility chosen, or cuDNN switched off (its benchmark flag does nothing)
        from traindoctor.facts.batching.runtime import conv_shapes

        layers = conv_shapes(self.session)
        min_forwards = int(self.threshold("min_forwards", 8))
        max_shapes = int(self.threshold("max_shapes", 4))
        min_share = float(self.threshold("min_share", 0.8))
        forwards = sum(sum(s.values()) for s in layers)
        if not layers or forwards < min_forwards:
            return
        for shapes in layers:
            total = sum(shapes.values())
            if len(shapes) > max_shapes or max(shapes.values()) < min_share * total:
                return
        distinct = max(len(s) for s in layers)
        example = max(layers[0].items(), key=lambda kv: kv[1])[0]
        self.report(
            f"{len(layers)} convolution layer(s) ran on CUDA with fixed input shapes (e.g. "
            f"{list(example)}) and `torch.backends.cudnn.benchmark` off; set it to True so "
            "cuDNN picks the fastest algorithm once per shape.",
            evidence={
                "conv_layers": len(layers),
                "conv_forwards": forwards,
                "max_distinct_shapes": distinct,
                "example_shape": list(example),
            },
            step=self.session.step,
        )
