"""The healthy twin of ``slow_pipeline.py``: samples are decoded once, up front.

The dataset keeps already-decoded tensors in memory, so assembling a batch takes well under a
millisecond and loading in the main process is the right choice: ``traindoctor run
examples/runtime/healthy_pipeline.py`` reports no findings and a compute-bound profile.
"""

from __future__ import annotations

from slow_pipeline import main

if __name__ == "__main__":
    main(["--decode-ms", "0"])
