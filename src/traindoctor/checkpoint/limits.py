"""The bounds on the work that reading one checkpoint may cost, and the refusal when one is hit.

A checkpoint is data from somewhere else: a crafted file may nest a million levels deep, refer to
one object a million times, decompress to gigabytes or never end. Every reader in this package
works within a :class:`Limits` (the defaults are documented in ``docs/checkpoints.md``; ``ckpt
inspect --limit NAME=VALUE`` or ``inspect_checkpoint(path, limits=Limits(...))`` change them) and
charges what it does to one :class:`Budget` per inspection. Going past a limit raises
:class:`LimitExceeded`, whose message is the verdict ("refused: pickle nests deeper than 1000
levels (limit depth=1000)").
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from traindoctor.checkpoint.inspection import CheckpointReadError


@dataclass(frozen=True)
class Limits:
    """How much one inspection or one ``load`` check may read, build and take."""

    #: Bytes of one pickle stream (a zip's ``data.pkl`` once decompressed, a raw pickle, DCP's
    #: ``.metadata``) and of ``traindoctor.json``.
    pickle_bytes: int = 64 * 1024 * 1024
    #: Pickle opcodes executed, all streams of the inspection together.
    opcodes: int = 4_000_000
    #: Memo entries of one pickle stream.
    memo: int = 1_000_000
    #: Nesting depth of the values described.
    depth: int = 1000
    #: Values visited while describing the contents.
    items: int = 1_000_000
    #: Zip archive members, DCP index entries, global references, tensors and components listed.
    entries: int = 250_000
    #: Size of one integer in the stream (bits).
    int_bits: int = 4096
    #: Before ``load`` hands a file to torch: integers of more than 60 bits, float dict keys and
    #: set members in it (their hashes can be made to collide: torch's unpickler would then
    #: build its dicts in quadratic time).
    collidable: int = 1000
    #: Wall time of the whole inspection (seconds).
    seconds: float = 10.0


#: What each limit bounds, for messages and ``--help``.
LIMIT_NAMES = tuple(f.name for f in dataclasses.fields(Limits))


class LimitExceeded(CheckpointReadError):
    """Reading stopped at a limit; the message is the verdict, naming the limit."""

    def __init__(self, what: str, name: str, value: float) -> None:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        super().__init__(f"refused: {what} (limit {name}={shown})")
        self.limit = name


def parse_limit(text: str, base: Limits) -> Limits:
    """``base`` with one ``NAME=VALUE`` setting applied (``depth=2000``, ``seconds=30``)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or name not in LIMIT_NAMES:
        raise ValueError(f"--limit {text!r}: expected NAME=VALUE with NAME one of {', '.join(LIMIT_NAMES)}")
    try:
        value: float = float(raw) if name == "seconds" else int(raw.replace("_", ""))
    except ValueError:
        raise ValueError(f"--limit {text!r}: {raw!r} is not a number") from None
    if value <= 0:
        raise ValueError(f"--limit {text!r}: must be positive")
    changes: dict[str, Any] = {name: value}
    return dataclasses.replace(base, **changes)


class Budget:
    """What one inspection has spent so far: opcodes, visits, listed entries and time."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.deadline = time.monotonic() + self.limits.seconds
        self.opcodes = 0
        self.items = 0
        self.entries = 0

    def check_time(self) -> None:
        """Raise :class:`LimitExceeded` once the inspection has taken longer than allowed."""
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"reading took longer than {self.limits.seconds:g} s", "seconds", self.limits.seconds)

    def spend_items(self, count: int = 1) -> None:
        """Charge ``count`` visited values (and check the clock every few thousand)."""
        before = self.items
        self.items += count
        if self.items > self.limits.items:
            raise LimitExceeded(
                f"the checkpoint holds more than {self.limits.items} values to describe", "items", self.limits.items
            )
        if before >> 12 != self.items >> 12:
            self.check_time()

    def spend_entries(self, what: str, count: int = 1) -> None:
        """Charge ``count`` listed entries (``what`` names them in the refusal)."""
        self.entries += count
        if self.entries > self.limits.entries:
            raise LimitExceeded(f"more than {self.limits.entries} {what}", "entries", self.limits.entries)
