"""The HTML run report's notes under the step table: uneven step times, the doctor's own work."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from traindoctor.runtime.profile import DOCTOR_SHARE_NOTED


def num(value: Any, unit: str = "", digits: int = 4) -> str:
    """A number as the report's tables print it (``n/a`` for none, escaped text otherwise)."""
    if isinstance(value, bool) or value is None:
        return "n/a"
    if isinstance(value, (int, float)):
        if abs(value) >= 10**digits:
            return f"{value:,.0f}{unit}"  # 44,161 rather than 4.416e+04
        return f"{value:.{digits}g}{unit}"
    return html.escape(str(value), quote=True)


#: Step times whose 90th percentile exceeds the median by this factor get a word in the report.
STEP_SPREAD = 2.0


def step_spread(per: Mapping[str, Any]) -> str:
    """A word when the steady steps' times varied more than :data:`STEP_SPREAD` x (p90/median):
    the means above then hide slow steps (contention for cores, periodic evaluation, I/O)."""
    p90, median = per.get("p90_step"), per.get("median_step")
    if not isinstance(p90, (int, float)) or not isinstance(median, (int, float)) or median <= 0:
        return ""
    ratio = p90 / median
    if ratio <= STEP_SPREAD:
        return ""
    return (
        f'<p class="note" id="step-spread">Step times varied {ratio:.1f}x: the slowest tenth of the steady '
        f"steps took {num(p90, ' ms')} or more against a median of {num(median, ' ms')}, so the means "
        "above hide slow steps (other processes competing for the cores, periodic work in the loop, "
        "I/O); the step-time chart shows where.</p>"
    )


def doctor_note(per: Mapping[str, Any]) -> str:
    """The doctor's own work per step, left out of the rows (:mod:`traindoctor.runtime.step_timer`)."""
    doctor, step = per.get("doctor") or 0.0, per.get("step") or 0.0
    if doctor <= 0:
        return ""
    share = doctor / (step + doctor)
    more = " At that share the rows are less certain." if share >= DOCTOR_SHARE_NOTED else ""
    return (
        f'<p class="note" id="doctor-time">Watching took {num(doctor, " ms")} per step ({share:.0%} of the watched '
        f"step): the doctor's own work, measured at its probes and left out of the rows above.{more}</p>"
    )
