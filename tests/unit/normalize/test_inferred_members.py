"""Members nobody's file names, inferred from the layout of the groups (analyzer.normalize.layout)."""

from __future__ import annotations

import pandas as pd

from analyzer import schema
from analyzer.normalize.layout import infer_members, inferred_ranks


def _groups(rows: list[tuple[str, str, tuple[int, ...], str]]) -> pd.DataFrame:
    return schema.frame(
        schema.GROUPS,
        {
            "pg_name": [r[0] for r in rows],
            "pg_desc": [r[1] for r in rows],
            "ranks": [r[2] for r in rows],
            "size": [len(r[2]) for r in rows],
            "source": [r[3] for r in rows],
        },
    )


def _tp_dp(missing: int) -> pd.DataFrame:
    """TP groups of 2 consecutive ranks and DP groups of 4 ranks 2 apart over 8 ranks, as the
    entries of every rank but ``missing`` show them."""
    rows = [("0", "default_pg", tuple(r for r in range(8) if r != missing), "world")]
    for i in range(4):
        m = tuple(r for r in (2 * i, 2 * i + 1) if r != missing)
        rows.append((str(1 + i), "TENSOR_MODEL_PARALLEL_GROUP", m, "entries"))
    for i in range(2):
        m = tuple(r for r in range(i, 8, 2) if r != missing)
        rows.append((str(5 + i), "DATA_PARALLEL_GROUP", m, "entries"))
    return _groups(rows)


def test_the_last_rank_with_no_trace_is_inferred_from_both_families() -> None:
    layout = infer_members(_tp_dp(7), world=7, dumped=set(range(7)))
    inferred = inferred_ranks(layout.groups, set(range(7)))
    assert layout.world == 8 and layout.declared == 8
    assert set(inferred) == {7}
    assert "TENSOR_MODEL_PARALLEL_GROUP (group 4)" in inferred[7]
    ranks = dict(zip(layout.groups["pg_name"], layout.groups["ranks"], strict=True))
    assert ranks["4"] == (6, 7) and ranks["6"] == (1, 3, 5, 7)
    source = dict(zip(layout.groups["pg_name"], layout.groups["source"], strict=True))
    assert source["4"] == "inferred" and source["1"] == "entries"


def test_a_complete_layout_declares_the_world_and_infers_nobody() -> None:
    layout = infer_members(_tp_dp(-1), world=8, dumped=set(range(8)))
    assert inferred_ranks(layout.groups, set(range(8))) == {}
    assert layout.declared == 8 and layout.world == 8


def test_no_inference_where_the_layout_does_not_decide() -> None:
    # A short group whose known member lies beyond the partition the full groups imply.
    groups = _groups(
        [
            ("0", "default_pg", (0, 1, 4), "world"),
            ("1", "TP", (0, 1), "entries"),
            ("2", "TP", (4,), "entries"),
        ]
    )
    layout = infer_members(groups, world=5, dumped={0, 1, 4})
    assert inferred_ranks(layout.groups, {0, 1, 4}) == {}
    # A member that wrote a dump is never inferred as a member with no dump.
    groups = _groups(
        [
            ("0", "default_pg", (0, 1, 2, 3), "world"),
            ("1", "TP", (0, 1), "entries"),
            ("2", "TP", (2,), "entries"),
        ]
    )
    layout = infer_members(groups, world=4, dumped={0, 1, 2, 3})
    assert inferred_ranks(layout.groups, {0, 1, 2, 3}) == {}
