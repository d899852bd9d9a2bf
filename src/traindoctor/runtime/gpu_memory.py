"""GPU memory of the watched run, counted from the watch's start.

``torch.cuda.max_memory_allocated()`` counts from the process start (or the script's last
``reset_peak_memory_stats()``), and resetting it would change what the script itself reads. So the
doctor reads the allocator's statistics (``memory_stats``, which neither synchronises nor resets)
once when it first sees CUDA in use and once at the end:

* the peak allocated and reserved bytes at the end are the run's when they grew under the watch
  (always, when CUDA was first initialised under it); otherwise the peak of the watch is not
  known exactly and the largest allocation sampled at step ends stands in, marked as such;
* fragmentation is reserved minus allocated at the peaks: memory the caching allocator holds that
  no tensor uses;
* ``num_alloc_retries`` (the allocator freed its cache and retried: a sign of running close to
  the limit) and ``num_ooms`` count the difference under the watch;
* the headroom (capacity minus peak allocated) against the memory one step's activations take
  (peak minus what stays allocated between steps) tells roughly how much larger a batch fits.

The memory-bound verdict is judged on allocated memory against capacity, not on reserved memory
(cache and fragmentation included), which the allocator gives back before it fails an allocation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_KEYS = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "num_alloc_retries", "num_ooms")


def read_stats(stats: Mapping[str, Any]) -> dict[str, int]:
    """The allocator statistics the report uses (missing keys count 0)."""
    return {key: int(stats.get(key, 0) or 0) for key in _KEYS}


def gpu_memory(
    baseline: Mapping[str, int] | None,
    end: Mapping[str, int],
    *,
    total: int | None,
    step_allocated: Sequence[int] = (),
) -> dict[str, Any]:
    """The profile's ``cuda_*`` memory entries (see the module docstring).

    ``baseline``: :func:`read_stats` when the doctor first saw CUDA in use (None: CUDA was first
    initialised under the watch, so the process's numbers are the watch's); ``end``: at the end;
    ``step_allocated``: bytes allocated at sampled step ends.
    """
    base = baseline or dict.fromkeys(_KEYS, 0)
    allocated, reserved = end["allocated_bytes.all.peak"], end["reserved_bytes.all.peak"]
    exact = baseline is None or allocated > base["allocated_bytes.all.peak"]
    if not exact:
        allocated = max(step_allocated, default=0) or allocated
    out: dict[str, Any] = {
        "cuda_allocated_peak_bytes": allocated,
        "cuda_reserved_peak_bytes": reserved,
        "cuda_total_bytes": total,
        "cuda_peak_exact": exact,
        "cuda_fragmentation_bytes": max(reserved - allocated, 0),
        "cuda_alloc_retries": end["num_alloc_retries"] - base["num_alloc_retries"],
        "cuda_ooms": end["num_ooms"] - base["num_ooms"],
    }
    if total:
        out["cuda_headroom_bytes"] = max(total - allocated, 0)
        resident = min(step_allocated, default=0)
        activations = allocated - resident if resident else 0
        if activations > 0:
            # A batch n times larger needs about n times the activations on top of what stays.
            out["cuda_batch_fit_factor"] = round((total - resident) / activations, 2)
    return out
