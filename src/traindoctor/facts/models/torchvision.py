"""What torchvision's classification constructors build (``torchvision.models.resnet50()``):
layer kinds, and exact parameter names for the ResNet family."""

from __future__ import annotations

from traindoctor.facts.models.info import ModelInfo, Params

# ---------------------------------------------------------------- torchvision classifiers
_TV_BN = (
    "resnet",
    "resnext",
    "wide_resnet",
    "densenet",
    "mobilenet_v2",
    "mobilenet_v3",
    "efficientnet",
    "regnet",
    "inception_v3",
    "googlenet",
    "shufflenet",
    "mnasnet",
)
_TV_DROPOUT = (
    "alexnet",
    "vgg",
    "squeezenet",
    "mobilenet_v2",
    "mobilenet_v3",
    "efficientnet",
    "inception_v3",
    "googlenet",
    "mnasnet",
)
#: ResNet-family block counts and whether they use bottleneck blocks (exact parameter names).
_RESNETS = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet34": ((3, 4, 6, 3), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "resnet152": ((3, 8, 36, 3), True),
    "resnext50_32x4d": ((3, 4, 6, 3), True),
    "resnext101_32x8d": ((3, 4, 23, 3), True),
    "resnext101_64x4d": ((3, 4, 23, 3), True),
    "wide_resnet50_2": ((3, 4, 6, 3), True),
    "wide_resnet101_2": ((3, 4, 23, 3), True),
}


def _resnet_params(blocks: tuple[int, ...], bottleneck: bool) -> Params:
    bn, conv, linear = "torch.nn.BatchNorm2d", "torch.nn.Conv2d", "torch.nn.Linear"
    out: list[tuple[str, str]] = [("conv1.weight", conv), ("bn1.weight", bn), ("bn1.bias", bn)]
    convs = (1, 2, 3) if bottleneck else (1, 2)
    for layer, count in enumerate(blocks, 1):
        for i in range(count):
            p = f"layer{layer}.{i}."
            for c in convs:
                out += [(f"{p}conv{c}.weight", conv), (f"{p}bn{c}.weight", bn), (f"{p}bn{c}.bias", bn)]
            if i == 0 and (layer > 1 or bottleneck):
                out += [
                    (f"{p}downsample.0.weight", conv),
                    (f"{p}downsample.1.weight", bn),
                    (f"{p}downsample.1.bias", bn),
                ]
    out += [("fc.weight", linear), ("fc.bias", linear)]
    return tuple(out)


def torchvision_model(fn: str) -> ModelInfo | None:
    """What we know about ``torchvision.models.<fn>()`` (classification constructors only)."""
    if fn in _RESNETS:
        params = _resnet_params(*_RESNETS[fn])
        return ModelInfo(frozenset(k for _, k in params), params, f"torchvision {fn}")
    kinds: set[str] = set()
    if fn.startswith(_TV_BN) or (fn.startswith("vgg") and fn.endswith("_bn")):
        kinds.add("torch.nn.BatchNorm2d")
    if fn.startswith(_TV_DROPOUT):
        kinds.add("torch.nn.Dropout")
    if not kinds:
        return None
    return ModelInfo(frozenset(kinds), None, f"torchvision {fn}")
