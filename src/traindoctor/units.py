"""Quantities as people read them: byte counts in binary units (``1.5 KiB``), for every report."""

from __future__ import annotations

#: Binary units, smallest first; each is 1024 of the one before.
BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: float, *, largest: str = "GiB") -> str:
    """``n`` bytes in the largest unit it fills, up to ``largest``: ``512 B``, ``1.5 KiB``.

    Whole bytes below 1 KiB, one decimal above. Counts beyond ``largest`` stay in it
    (``2048.0 GiB`` for 2 TiB with the default; ``largest="TiB"`` reads ``2.0 TiB``).
    """
    value, unit = float(n), BYTE_UNITS[0]
    for bigger in BYTE_UNITS[1 : BYTE_UNITS.index(largest) + 1]:
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.0f} {unit}" if unit == BYTE_UNITS[0] else f"{value:.1f} {unit}"
