"""What names say: the checkpoint APIs, and the words that name a training object.

The qualified names of the calls that save and load checkpoints, the constructors of the
training objects a checkpoint must hold (:func:`constructor_kind`), and what a variable name or a
dict key says an object is (:func:`kind_from_name`, :func:`key_rules_out`). Piece kinds
(``MODEL``, ``OPTIMIZER``, ..., ``RNG_KINDS``) are in :mod:`traindoctor.static.vocab`.
"""

from __future__ import annotations

import re

from traindoctor.static.names import OPTIMIZERS
from traindoctor.static.vocab import DATA, MODEL, OPTIMIZER, RNG_ANY, RNG_KINDS, SCALER, SCHEDULER

#: Saves and loads with ``torch.save``'s and ``torch.load``'s signatures.
SAVE_FUNCS = ("torch.save", "torch_xla.core.xla_model.save")
LOAD_FUNCS = ("torch.load",)

#: Saves that write a complete, atomic training checkpoint by construction.
COMPLETE_SAVES = ("traindoctor.checkpoint.save",)
COMPLETE_LOADS = ("traindoctor.checkpoint.load",)
#: ``torch.distributed.checkpoint`` saves and loads: ``(state_dict, *, checkpoint_id=...)``; a load
#: fills only the keys of the dict it is given.
DCP_SAVES = (
    "torch.distributed.checkpoint.save",
    "torch.distributed.checkpoint.async_save",
    "torch.distributed.checkpoint.save_state_dict",
    "torch.distributed.checkpoint.state_dict_saver.save",
    "torch.distributed.checkpoint.state_dict_saver.async_save",
)
DCP_LOADS = (
    "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict_loader.load",
)
#: A callee whose name says it may write a checkpoint.
RX_SAVE_WORD = re.compile(r"save|checkpoint|ckpt")
#: Callee names that say the call reads a checkpoint back (load/restore/resume): no save.
RX_READS_CHECKPOINT = re.compile(r"load|restore|resume|restart")
#: Unresolved wrappers with torch.save's (obj, f) signature, by receiver-or-function name.
SAVE_WRAPPERS = {"save_on_master", "save_on_main_process"}  # all spell "save_on_ma" (see saves.py)

SCALER_CTORS = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        "timm.utils.NativeScaler",
        "timm.utils.cuda.NativeScaler",
    }
)
SAMPLER_CTORS = frozenset(
    {
        "torch.utils.data.DistributedSampler",
        "torch.utils.data.RandomSampler",
        "torch.utils.data.sampler.RandomSampler",
    }
)
_OTHER_OPTIMIZERS = ("transformers.AdamW", "transformers.Adafactor", "transformers.optimization.")
_OPTIMIZER_PREFIXES = ("timm.optim.", "bitsandbytes.optim.", "apex.optimizers.", "torch.distributed.optim.")

# Names (last part, lower case) that say what an object is when no constructor tells us.
_RX_OPTIMIZER = re.compile(r"optim|(^|_)opts?\d*(_|$)")
_RX_SCHEDULER = re.compile(r"sched")
_RX_SCALER = re.compile(r"scaler")
_RX_DATA = re.compile(r"sampler|loader")
RX_RNG = re.compile(r"rng|random|generator_state|seed_state")
RX_MODELISH = re.compile(
    r"model|net|ema|module|backbone|encoder|decoder|generator|discriminator|classifier|head|weights|params"
)
#: Dict keys that name plain metadata: an opaque value under them holds no training state.
_RX_META_KEY = re.compile(
    r"^(epochs?|steps?|global_steps?|iters?|iterations?|it|batch(_idx)?|best\w*|\w*loss\w*|\w*acc\w*|"
    r"\w*metric\w*|\w*score\w*|lr|learning_rates?|\w+_lr|args|config|cfg|hparams|hyper_parameters|hyperparameters|arch|"
    r"name|model_name|version|\w*time\w*|date|seed|opts?_args|num_\w+|\w*perplexity\w*|\w*bleu\w*|"
    r"\w*f1\w*|\w*auc\w*|\w*map\w*|tokenizer\w*|vocab\w*|classes|class_names|labels?|git\w*|"
    r"commit|\w*info|notes?|host\w*|user|desc\w*|tags?|\w*_id|id|env\w*|platform|torch_version|"
    r"world_size|\w*count\w*|updates|\w*stats|elapsed\w*|\w*_elapsed|\w*_size|temperature)$"
)
#: Keys that name a training position in any spelling (``iter_num``, ``cur_epoch``, ``global_step_count``).
_RX_POSITION_KEY = re.compile(r"(^|_)(epochs?|steps?|iters?|iterations?)(_|$)")


def kind_from_name(name: str) -> str | None:
    """What a variable or attribute name says the object is (``opt_g`` -> optimizer), else None."""
    last = name.rsplit(".", 1)[-1].lower()
    if _RX_SCHEDULER.search(last):
        return SCHEDULER
    if _RX_SCALER.search(last):
        return SCALER
    if _RX_OPTIMIZER.search(last):
        return OPTIMIZER
    if _RX_DATA.search(last):
        return DATA
    return None


def key_rules_out(key: str | None, kind: str) -> bool:
    """Whether a dict key clearly names something else than ``kind`` (``"epoch"`` is no optimizer)."""
    if key is None:
        return False
    low = key.lower()
    if _RX_META_KEY.match(low):
        return True
    named = kind_from_name(low)
    if named is None and _RX_POSITION_KEY.search(low):
        return True  # a training position in any spelling (``iter_num``, ``cur_epoch``): a number
    if named is None and RX_RNG.search(low):
        named = RNG_ANY
    if (named is None and RX_MODELISH.search(low)) or low in ("state_dict", "model_state", "weights"):
        named = MODEL
    if named is None:
        return False  # a generic key such as "state" may hold anything
    if kind in RNG_KINDS:
        return named not in (RNG_ANY,)
    return named != kind


def constructor_kind(qn: str) -> str | None:
    """Which training object a constructor builds, by its qualified name."""
    last = qn.rsplit(".", 1)[-1]
    if qn in SCALER_CTORS:
        return SCALER
    if qn.startswith("torch.optim.lr_scheduler.") and last[:1].isupper() and last != "LRScheduler":
        return SCHEDULER
    if qn.startswith(("transformers.", "diffusers.")) and last.startswith("get_") and "schedule" in last:
        return SCHEDULER
    if qn.startswith("timm.scheduler.") and (last.startswith("create_scheduler") or last.endswith("Scheduler")):
        return SCHEDULER
    if qn in OPTIMIZERS or (qn.startswith(_OTHER_OPTIMIZERS) and last[:1].isupper()):
        return OPTIMIZER
    if qn.startswith("torch.optim.") and last[:1].isupper() and last not in ("Optimizer",) and "lr_scheduler" not in qn:
        return OPTIMIZER
    if qn.startswith(_OPTIMIZER_PREFIXES) and (last[:1].isupper() or last.startswith("create_optimizer")):
        return OPTIMIZER
    if qn in SAMPLER_CTORS or qn.startswith("torchdata.stateful_dataloader."):
        return DATA
    return None
