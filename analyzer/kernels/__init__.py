"""Vectorised helpers shared from normalize on: categorical codes read per category, and
integer group keys computed in O(rows) (a compiled kernel, :mod:`analyzer.kernels._groupkeys`,
with numpy's versions as the reference and fallback).
"""

from analyzer.kernels.category_codes import (
    category_at,
    code_of,
    codes_at,
    from_codes,
    in_labels,
    text_at,
)
from analyzer.kernels.group_by import (
    Pairs,
    as_int64,
    compiled,
    dense_ids,
    first_at_max,
    first_of,
    group_ids,
    maximum_at,
    minimum_at,
    pairs,
    ranged_slots,
    reduce_max,
    reduce_min,
    remap_into,
)

__all__ = [
    "Pairs",
    "as_int64",
    "category_at",
    "code_of",
    "codes_at",
    "compiled",
    "dense_ids",
    "first_at_max",
    "first_of",
    "from_codes",
    "group_ids",
    "in_labels",
    "maximum_at",
    "minimum_at",
    "pairs",
    "ranged_slots",
    "reduce_max",
    "reduce_min",
    "remap_into",
    "text_at",
]
