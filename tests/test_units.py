"""``format_bytes``: the one byte formatter of ``ckpt inspect`` and the run reports."""

from __future__ import annotations

from traindoctor.units import format_bytes


def test_whole_bytes_below_one_kib_and_one_decimal_above():
    assert [format_bytes(n) for n in (0, 48, 1023, 1024, 1536, 5 * 2**20)] == [
        "0 B",
        "48 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 MiB",
    ]


def test_counts_beyond_the_largest_unit_stay_in_it():
    assert format_bytes(2 * 2**40) == "2048.0 GiB"
    assert format_bytes(2 * 2**40, largest="TiB") == "2.0 TiB"
    assert format_bytes(2**20, largest="KiB") == "1024.0 KiB"
