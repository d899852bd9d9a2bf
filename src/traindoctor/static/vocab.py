"""Names shared by the static helpers and by the rule classes' own definitions.

Rule modules read these at import time (a class's ``triggers``, a table keyed by piece kind), and
``traindoctor run`` imports every rule module at start-up to find the runtime monitors. The static
helpers that answer the rules' questions (``checkpoints``, ``loaders``, ``amp``, ...) are large and
are imported inside the rules' ``check`` methods; this module holds only the plain constants, so
that a watched run never pays for the static analysis it does not run.
"""

from __future__ import annotations

# ------------------------------------------------------------------ checkpoint piece kinds
#: Piece kinds. ``rng_any`` stands for RNG state we cannot break down (it satisfies every RNG need).
MODEL, OPTIMIZER, SCHEDULER, SCALER, DATA = "model", "optimizer", "scheduler", "scaler", "data"
RNG_CPU, RNG_CUDA, RNG_NUMPY, RNG_PYTHON, RNG_ANY = "rng_cpu", "rng_cuda", "rng_numpy", "rng_python", "rng_any"
META, OPAQUE = "meta", "opaque"
RNG_KINDS = (RNG_CPU, RNG_CUDA, RNG_NUMPY, RNG_PYTHON)

# ------------------------------------------------------------------ precision
FLOAT16 = "float16"
BFLOAT16 = "bfloat16"
FLOAT32 = "float32"
DTYPE_NAMES: dict[str, str] = {
    "torch.float16": FLOAT16,
    "torch.half": FLOAT16,
    "torch.bfloat16": BFLOAT16,
    "torch.float32": FLOAT32,
    "torch.float": FLOAT32,
}

# ------------------------------------------------------------------ trigger words
#: Substrings one of which a file that configures a Hugging Face Trainer contains (rules'
#: ``triggers``): ``TrainingArguments`` or one of TRL's ``*Config`` classes.
HF_TRIGGERS = ("TrainingArguments", "Config")
#: Substrings one of which an evaluation-loop iterable's name contains, in any usual casing
#: (the engine's ``triggers`` pre-filter is case-sensitive): see ``loaders.is_evaluation_name``.
EVAL_LOOP_TRIGGERS = tuple(
    spelled
    for word in ("val", "test", "tst", "eval", "dev", "holdout", "inference", "predict")
    for spelled in (word, word.capitalize(), word.upper())
)
