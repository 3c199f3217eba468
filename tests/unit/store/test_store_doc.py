"""docs/store.md lists exactly the columns and dtypes of the Parquet store."""

from __future__ import annotations

import re

from analyzer.store.layout import PARSED_TABLES, TABLES
from tests.conftest import ROOT

DOC = (ROOT / "docs" / "store.md").read_text()


def _documented(table: str) -> list[tuple[str, str]]:
    section = DOC.split(f"### `{table}.parquet`", 1)[1].split("###", 1)[0].split("##", 1)[0]
    return re.findall(r"^\| `(\w+)` \| (\w+) \|", section, re.M)


def test_every_table_and_column_is_documented_with_its_dtype() -> None:
    for table, cols in {**TABLES, **PARSED_TABLES}.items():
        assert _documented(table) == [(c.name, c.dtype) for c in cols], table


def test_the_layout_names_every_file() -> None:
    for table in {**TABLES, **PARSED_TABLES}:
        assert f"DIR/{table}.parquet" in DOC
    for name in (
        "hangscope-store.json",
        "hangscope.store/3",
        "hangscope.store/2",
        "hangscope.store/1",
        "DIR/inputs.json",
        "DIR/contexts.json",
        "DIR/members.json",
    ):
        assert name in DOC, name
