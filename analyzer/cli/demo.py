"""``hangscope demo``: the samples a pip install carries (``analyzer/samples/``, copied there
from ``sample_dumps/`` when the wheel is built), or those of a source tree."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_SAMPLE", "demo_samples"]

#: The sample the demo analyzes when none is named: a real 8-rank gloo job, one rank stalled.
DEFAULT_SAMPLE = "chain_tp_dp_w8"


def demo_samples() -> dict[str, Path]:
    """``{name: folder}`` of the sample dump sets at hand: those installed with the package,
    else those of the source tree it runs from."""
    package = Path(__file__).resolve().parents[1]
    for root in (package / "samples", package.parent / "sample_dumps"):
        if root.is_dir():
            found = {
                d.name: d
                for d in sorted(root.iterdir())
                if d.is_dir() and any(f.name.startswith("nccl_trace_rank_") for f in d.iterdir())
            }
            if found:
                return found
    return {}
