"""Types of the compiled group-by kernels (``analyzer/kernels/_groupkeys/groupkeys.c``)."""

import numpy as np

def ranged_ids(
    major: np.ndarray, minor: np.ndarray, n_major: int, limit: int, out: np.ndarray, /
) -> int:
    """Dense ids of (major, minor) pairs into ``out``: the number of distinct pairs, or -1
    when the pairs are too sparse for ranged slots (``limit``)."""

def reduce_at(op: int, ids: np.ndarray, values: np.ndarray | None, out: np.ndarray, /) -> None:
    """Per id: the minimum (``op`` 0), the maximum (1) or the first row (2) into ``out``."""

def remap_into(codes: list[np.ndarray], remaps: list[np.ndarray], out: np.ndarray, /) -> int:
    """Each ``codes[k]`` through ``remaps[k]``, laid end to end into ``out``: values written."""

def first_at(ids: np.ndarray, values: np.ndarray, target: np.ndarray, out: np.ndarray, /) -> None:
    """Per id, the first row whose value is the id's ``target``."""
