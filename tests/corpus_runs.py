"""Runs of ``bench/accuracy_real.py`` for the accuracy tests: what it prints, its outcomes,
and the check of the outcomes against a baseline."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "corpus" / "BASELINE.json"
BASELINE_WORLD = ROOT / "corpus" / "BASELINE_WORLD.json"
#: The cases whose answer the world size can change: gloo's, whose dumps may list no members.
GLOO = ("gloo@2.13", "gloo@2.15")
LAST_LINE = re.compile(
    r"^real corpus(?P<given> with the world size given)?: (\d+) cases \((\d+) fault classes\), "
    r"(\d+) right, (\d+) wrong, (\d+) unsure$"
)


def run_bench(
    tmp_path: Path, *args: str
) -> tuple[list[str], list[dict[str, Any]], tuple[int, ...]]:
    """bench/accuracy_real.py's printed lines, its outcomes and the counts of its last line."""
    out = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [sys.executable, "bench/accuracy_real.py", "--json", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    m = LAST_LINE.match(lines[-1])
    assert m, lines[-1]
    assert bool(m["given"]) == ("--world-given" in args)
    records = json.loads(out.read_text())
    n, k, right, wrong, unsure = (int(g) for g in m.groups()[1:])
    assert n == len(records) == right + wrong + unsure
    assert k == len({r["fault"] for r in records})
    for r in records:  # every wrong case is printed with what the analysis said
        if r["result"] == "wrong":
            assert any(line.startswith(f"  {r['case']}: ") for line in lines), r["case"]
    return lines, records, (n, k, right, wrong, unsure)


def against_baseline(records: list[dict[str, Any]], baseline: dict[str, str]) -> None:
    """No case that was right is wrong now, and no answer is wrong but the ones the baseline
    pins as wrong (each named in docs/corpus.md with its cause)."""
    regressed = [
        f"{r['case']}: {r['why']} (said {r['said']['verdict']} {r['said']['kind']} "
        f"{r['said']['culprits']}, truth {r['truth']['culprits']})"
        for r in records
        if baseline.get(r["case"]) == "right" and r["result"] == "wrong"
    ]
    assert not regressed, "cases that were right and are wrong now:\n" + "\n".join(regressed)
    wrong_now = [
        f"{r['case']}: {r['why']}"
        for r in records
        if r["result"] == "wrong" and baseline.get(r["case"]) != "wrong"
    ]
    assert not wrong_now, "wrong answers:\n" + "\n".join(wrong_now)
