"""The torch.nn vocabulary the model analysis reads: which parameters each layer registers,
which layers have none, the containers, module base classes, wrappers and chain methods."""

from __future__ import annotations

WEIGHT_BIAS = ("weight", "bias")
#: torch.nn layer -> parameter names it registers with default arguments.
LAYER_PARAMS: dict[str, tuple[str, ...]] = {
    **{
        n: WEIGHT_BIAS
        for n in (
            "Linear",
            "LazyLinear",
            "Bilinear",
            "Conv1d",
            "Conv2d",
            "Conv3d",
            "ConvTranspose1d",
            "ConvTranspose2d",
            "ConvTranspose3d",
            "LazyConv1d",
            "LazyConv2d",
            "LazyConv3d",
            "BatchNorm1d",
            "BatchNorm2d",
            "BatchNorm3d",
            "LazyBatchNorm1d",
            "LazyBatchNorm2d",
            "LazyBatchNorm3d",
            "SyncBatchNorm",
            "GroupNorm",
            "LayerNorm",
        )
    },
    "RMSNorm": ("weight",),
    "Embedding": ("weight",),
    "EmbeddingBag": ("weight",),
    "PReLU": ("weight",),
    "InstanceNorm1d": (),
    "InstanceNorm2d": (),
    "InstanceNorm3d": (),
    "MultiheadAttention": ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"),
}
PARAMLESS = frozenset(
    (
        "ReLU",
        "ReLU6",
        "GELU",
        "SiLU",
        "Mish",
        "Tanh",
        "Sigmoid",
        "Softmax",
        "LogSoftmax",
        "ELU",
        "SELU",
        "CELU",
        "LeakyReLU",
        "Hardswish",
        "Hardsigmoid",
        "Hardtanh",
        "Softplus",
        "Softsign",
        "Tanhshrink",
        "Threshold",
        "GLU",
        "Identity",
        "Flatten",
        "Unflatten",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "FeatureAlphaDropout",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveAvgPool3d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d",
        "Upsample",
        "UpsamplingNearest2d",
        "UpsamplingBilinear2d",
        "PixelShuffle",
        "PixelUnshuffle",
        "ZeroPad1d",
        "ZeroPad2d",
        "ZeroPad3d",
        "ConstantPad1d",
        "ConstantPad2d",
        "ReflectionPad2d",
        "ReplicationPad2d",
        "LocalResponseNorm",
        "ChannelShuffle",
        "Softmax2d",
    )
)
#: Composite torch.nn layers whose inner kinds matter (names left unknown).
COMPOSITE_KINDS: dict[str, tuple[str, ...]] = {
    n: ("Linear", "LayerNorm", "Dropout", "MultiheadAttention")
    for n in (
        "Transformer",
        "TransformerEncoderLayer",
        "TransformerDecoderLayer",
        "TransformerEncoder",
        "TransformerDecoder",
    )
}
AFFINE_ARG = {
    "LayerNorm": "elementwise_affine",
    "RMSNorm": "elementwise_affine",
    "GroupNorm": "affine",
    "InstanceNorm1d": "affine",
    "InstanceNorm2d": "affine",
    "InstanceNorm3d": "affine",
}
CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
MODULE_BASES = frozenset(
    (
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "pytorch_lightning.LightningModule",
        "lightning.pytorch.core.LightningModule",
        "pytorch_lightning.core.LightningModule",
    )
)
WRAPPERS = frozenset(
    (
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.compile",
    )
)
WRAPPER_PREFIX = {
    "torch.nn.parallel.DistributedDataParallel": "module.",
    "torch.nn.DataParallel": "module.",
    "torch.nn.parallel.DataParallel": "module.",
    "torch.compile": "_orig_mod.",
}
CHAIN_METHODS = frozenset(
    (
        "to",
        "cuda",
        "cpu",
        "float",
        "double",
        "half",
        "bfloat16",
        "train",
        "eval",
        "requires_grad_",
        "share_memory",
        "type",
        "to_empty",
    )
)
TENSOR_FACTORIES = frozenset(
    (
        "zeros",
        "ones",
        "empty",
        "randn",
        "rand",
        "full",
        "arange",
        "tensor",
        "eye",
        "linspace",
        "zeros_like",
        "ones_like",
    )
)
