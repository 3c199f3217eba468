"""Desync detection: members of one collective that issued a different op, size or dtype.

Each row is compared with the first row of its (group, seq) by integer codes (one gather and
one comparison per column over every row); only the few collectives whose signatures vary are
examined in Python, against the majority of the members that recorded them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.kernels import in_labels
from analyzer.kinds import MatchState
from analyzer.match.expectations import Expectation, expectation, sides, size_checked_ops

__all__ = [
    "MISMATCH_COLUMNS",
    "NO_MAJORITY",
    "SIZE_CHECKED_OPS",
    "as_str",
    "collective_mismatches",
    "odd_against_siblings",
    "sibling_family",
]

#: Ops whose shapes are compared on some side (see :mod:`analyzer.match.expectations`).
SIZE_CHECKED_OPS = size_checked_ops()

#: ``expected`` of a mismatch where no value has a majority (e.g. a group of two).
NO_MAJORITY = "(no majority)"

MISMATCH_COLUMNS = [
    "pg_name",
    "pg_desc",
    "seq",
    "kind",
    "rank",
    "op",
    "value",
    "expected",
    "n_agree",
    "n_recorded",
    "basis",
]


def as_str(values: pd.Series) -> pd.Series:
    """``values.astype(str)``; a categorical of strings maps its codes, not every value."""
    if isinstance(values.dtype, pd.CategoricalDtype) and values.cat.categories.dtype == "str":
        codes = values.cat.codes.to_numpy()
        if (codes >= 0).all():
            return pd.Series(
                values.cat.categories.take(codes), index=values.index, name=values.name
            )
    return values.astype(str)


_COLUMNS = [
    "pg_name",
    "pg_desc",
    "seq",
    "rank",
    "record_id",
    "op",
    "input_dtypes",
    "output_dtypes",
    "input_sizes",
    "output_sizes",
]


def _varying(
    entries: pd.DataFrame, rows: np.ndarray, gid: np.ndarray, first: np.ndarray
) -> np.ndarray:
    """Collectives whose op, dtypes or (for size-checked ops) sizes differ from those of the
    first row of their (group, seq): a mask over the groups. ``rows`` are the collectives'
    positions among the entries; only their category codes are read."""
    lead = rows[first]  # per collective, the entry position of its first row
    varies = np.zeros(len(first), dtype=bool)
    for col in ("op", "input_dtypes", "output_dtypes"):
        codes = entries[col].cat.codes.to_numpy()
        varies[gid[codes[rows] != codes[lead][gid]]] = True
    checked = in_labels(entries["op"], SIZE_CHECKED_OPS)
    for col in ("input_sizes", "output_sizes"):
        codes = np.where(checked, entries[col].cat.codes.to_numpy(), -1)
        varies[gid[codes[rows] != codes[lead][gid]]] = True
    return varies


def collective_mismatches(
    entries: pd.DataFrame, rows: np.ndarray, gid: np.ndarray, first: np.ndarray
) -> pd.DataFrame:
    """Rows whose op, dtype or size differs from the majority of their collective.

    ``rows`` are the positions of the collectives among ``entries``, ``gid`` numbers each
    one's (group, seq) (:func:`analyzer.kernels.group_by.group_ids`) and ``first`` is the first row
    of each. Only the collectives whose signatures vary are read as text."""
    if not len(rows):
        return pd.DataFrame({c: [] for c in MISMATCH_COLUMNS})
    varies = _varying(entries, rows, gid, first)
    out: dict[str, list[object]] = {c: [] for c in MISMATCH_COLUMNS}
    if not varies.any():
        return pd.DataFrame(out)
    coll = entries[_COLUMNS].iloc[rows]
    sub = coll[varies[gid]].copy()
    for col in (
        "pg_name",
        "pg_desc",
        "op",
        "input_dtypes",
        "output_dtypes",
        "input_sizes",
        "output_sizes",
    ):
        sub[col] = as_str(sub[col])
    for (_, _), grp in sub.groupby(["pg_name", "seq"], sort=True):
        _examine(coll, grp, out)
    return pd.DataFrame(out)


def _examine(coll: pd.DataFrame, grp: pd.DataFrame, out: dict[str, list[object]]) -> None:
    """The deviating members of one collective whose signatures vary, appended to ``out``."""
    per_rank = _signatures(grp)
    name, desc, seq = (
        str(grp["pg_name"].iloc[0]),
        str(grp["pg_desc"].iloc[0]),
        int(grp["seq"].iloc[0]),
    )
    n = len(per_rank)
    if n < 2:
        return
    checks: list[tuple[str, pd.Series]] = [(MatchState.OP_MISMATCH.value, per_rank["op"])]
    op_major = _majority(per_rank["op"])
    if (per_rank["op"] == op_major).all():
        # Only the sides the op's expectation says every member records alike.
        rule = expectation(op_major)
        checks = [
            (
                MatchState.DTYPE_MISMATCH.value,
                _check_series(per_rank, MatchState.DTYPE_MISMATCH, rule),
            )
        ]
        if rule.sizes:
            checks.append(
                (
                    MatchState.SIZE_MISMATCH.value,
                    _check_series(per_rank, MatchState.SIZE_MISMATCH, rule),
                )
            )
    for kind, series in checks:
        if series.nunique() < 2:
            continue
        counts = series.value_counts()
        tie = len(counts) > 1 and counts.iloc[0] == counts.iloc[1]
        major = NO_MAJORITY if tie else _majority(series)
        agree = int(counts.iloc[0])
        deviating = series if tie else series[series != major]
        basis = "no majority" if tie else "group majority"
        if tie:
            # No majority inside the group (a pair): ask the sibling groups (same desc,
            # e.g. the other tensor-parallel pairs) what they issued at this seq.
            sibling = _sibling_value(coll, name, desc, seq, kind, expectation(op_major))
            if sibling is not None and (series == sibling).any():
                major, deviating = sibling, series[series != sibling]
                agree = int((series == sibling).sum())
                basis = "sibling groups"
        for rank, value in deviating.items():
            for col, v in (
                ("pg_name", name),
                ("pg_desc", desc),
                ("seq", seq),
                ("kind", kind),
                ("rank", int(rank)),  # type: ignore[call-overload]
                ("op", str(per_rank.at[rank, "op"])),
                ("value", str(value)),
                ("expected", major),
                ("n_agree", agree),
                ("n_recorded", n),
                ("basis", basis),
            ):
                out[col].append(v)
        if len(deviating):
            break


def _majority(values: pd.Series) -> str:
    counts = values.value_counts()
    top = counts[counts == counts.max()]
    return str(sorted(top.index.astype(str))[0])


def _signatures(grp: pd.DataFrame) -> pd.DataFrame:
    """Per rank of one (group, seq): op, dtypes and sizes, joined over coalesced entries."""
    grp = grp.sort_values("record_id")
    joined = {
        col: grp.groupby("rank", sort=True)[src].agg(lambda s: "+".join(map(str, s)))
        for col, src in (
            ("op", "op"),
            ("dtypes", "input_dtypes"),
            ("odtypes", "output_dtypes"),
            ("sizes", "input_sizes"),
            ("osizes", "output_sizes"),
        )
    }
    return pd.DataFrame(joined)


_SIDE_COLUMNS: dict[tuple[str, str], str] = {
    (MatchState.DTYPE_MISMATCH, "inputs"): "dtypes",
    (MatchState.DTYPE_MISMATCH, "outputs"): "odtypes",
    (MatchState.SIZE_MISMATCH, "inputs"): "sizes",
    (MatchState.SIZE_MISMATCH, "outputs"): "osizes",
}


def _check_series(per_rank: pd.DataFrame, kind: str, rule: Expectation | None = None) -> pd.Series:
    """Per rank, the value compared for ``kind``: the op, or the dtypes / shapes of the sides
    ``rule`` says must agree (``inputs|outputs`` when both). On a one-sided op a member that
    left a compared side empty is not compared (it is not that member's side)."""
    if kind == MatchState.OP_MISMATCH:
        return per_rank["op"]
    rule = rule if rule is not None else expectation(str(per_rank["op"].iloc[0]))
    compared = sides(rule.dtypes if kind == MatchState.DTYPE_MISMATCH else rule.sizes)
    if not compared:
        return pd.Series([], dtype=object)
    cols = [per_rank[_SIDE_COLUMNS[(kind, side)]] for side in compared]
    keep = pd.Series(True, index=per_rank.index)
    if rule.one_sided:
        for col in cols:
            keep &= ~col.str.fullmatch(r"\[\](\+\[\])*")
    value = cols[0] if len(cols) == 1 else cols[0] + "|" + cols[1]
    return value[keep]


def _sibling_value(
    coll: pd.DataFrame, name: str, desc: str, seq: int, kind: str, rule: Expectation | None = None
) -> str | None:
    """The value most sibling groups (same desc, other name) used at ``seq``, if unanimous
    enough to break a tie (a strict majority of the siblings' ranks)."""
    if not desc or desc in ("undefined", "default_pg"):
        return None
    rows = coll[(coll["pg_desc"] == desc) & (coll["seq"] == seq) & (coll["pg_name"] != name)]
    if rows.empty:
        return None
    rows = rows[
        [
            "pg_name",
            "rank",
            "record_id",
            "op",
            "input_dtypes",
            "output_dtypes",
            "input_sizes",
            "output_sizes",
        ]
    ].astype(
        {c: str for c in ("op", "input_dtypes", "output_dtypes", "input_sizes", "output_sizes")}
    )
    values = _check_series(_signatures(rows), kind, rule)
    counts = values.value_counts()
    if counts.empty or counts.iloc[0] * 2 <= len(values):
        return None
    return str(counts.index[0])


#: Earlier sequence numbers at which a rank's group is held against its sibling groups.
_EARLIER_SEQS = 8


def _against(mine: pd.DataFrame, theirs: pd.DataFrame) -> tuple[str, str, str] | None:
    """``(word, the siblings' value, mine)`` for the first compared side (dtype, then size)
    where every sibling rank that issued the op of ``mine`` posted one value and it is not
    ``mine``'s; ``("", "", "")`` where they posted ``mine``'s; None where nothing compares
    (no sibling issued that op, or they differ among themselves)."""
    if mine.empty or theirs.empty:
        return None
    own, sib = _signatures(mine), _signatures(theirs)
    op = str(own["op"].iat[0])
    rule = expectation(op)
    sib = sib[sib["op"] == op]
    if sib.empty:
        return None
    for kind, word in ((MatchState.DTYPE_MISMATCH, "dtype"), (MatchState.SIZE_MISMATCH, "size")):
        if kind == MatchState.SIZE_MISMATCH and not rule.sizes:
            continue
        value, values = _check_series(own, kind, rule), _check_series(sib, kind, rule)
        if value.empty or values.nunique() != 1:
            return None
        if (usual := str(values.iat[0])) != str(value.iat[0]):
            return word, usual, str(value.iat[0])
    return "", "", ""


def sibling_family(name: str, desc: str) -> str:
    """What a group's sibling groups share: its description, or where it has none, the comm
    name TorchComms gives every group of a kind (``tp`` of ``tp[6,7]``); "" where neither
    names a kind (the default group, an undefined description)."""
    if desc:
        return "" if desc in ("undefined", "default_pg") else desc
    base, bracket, _ = name.partition("[")
    return base if bracket and name.endswith("]") and base not in ("", "world") else ""


def odd_against_siblings(
    entries: pd.DataFrame, rank: int, name: str, desc: str, seq: int
) -> tuple[str, str, str] | None:
    """``("dtype" | "size", the siblings' value, rank's value)`` where ``rank``'s collective
    at ``seq`` of group ``name`` differs from what every rank of the sibling groups (same
    desc, other name) that issued the same op there posted, while at the earlier seqs both
    recorded (the last few) they posted what it did: sibling groups that differ by design
    (pipeline stages holding other layers) differ before as well. None otherwise."""
    family = sibling_family(name, desc)
    if not family:
        return None
    coll = entries.loc[~entries["is_p2p"].to_numpy(bool), _COLUMNS]
    coll = coll[(coll["pg_desc"] == desc) & (coll["seq"] <= seq)]
    coll = coll.astype({c: str for c in ("pg_name", "op", *_COLUMNS[-4:])})
    if not desc:  # TorchComms: one comm name for every group of a kind, members appended
        coll = coll[coll["pg_name"].str.startswith(f"{family}[")]
    mine = coll[(coll["pg_name"] == name) & (coll["rank"] == rank)]
    theirs = coll[coll["pg_name"] != name]
    now = _against(mine[mine["seq"] == seq], theirs[theirs["seq"] == seq])
    if not now or not now[0]:
        return None
    earlier = sorted((set(mine["seq"]) & set(theirs["seq"])) - {seq})[-_EARLIER_SEQS:]
    for s in earlier:
        before = _against(mine[mine["seq"] == s], theirs[theirs["seq"] == s])
        if before and before[0]:
            return None
    return now
