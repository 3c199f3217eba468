"""Accuracy on the corpus of real recorded hangs: every case (``make test``, about 30 s).

Every case of ``corpus/cases`` runs through ``bench/accuracy_real.py``, as ``make
accuracy-real`` runs it. No answer may be wrong but the few the baseline pins as wrong (each
named in docs/corpus.md with its cause): a confident wrong culprit, a missed culprit, a missed
hang or a false alarm on any other case fails the test (an unsure answer that names the truth
among its suspects is allowed: the dumps do not decide every case).
``corpus/BASELINE.json`` pins each case's result as last measured; a case that was right and
is wrong now is named as such. A case that becomes right is progress: rewrite the baseline
(``python bench/accuracy_real.py --write-baseline``) so that it stays right.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "corpus" / "BASELINE.json"
LAST_LINE = re.compile(
    r"^real corpus: (\d+) cases \((\d+) fault classes\), (\d+) right, (\d+) wrong, (\d+) unsure$"
)


def test_no_case_is_answered_wrong(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.json"
    proc = subprocess.run(
        [sys.executable, "bench/accuracy_real.py", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    m = LAST_LINE.match(lines[-1])
    assert m, lines[-1]
    records = json.loads(out.read_text())
    n, k, right, wrong, unsure = (int(g) for g in m.groups())
    assert n == len(records) == right + wrong + unsure
    assert k == len({r["fault"] for r in records}) >= 12
    assert {r["dialect"] for r in records} >= {"gloo@2.13", "gloo@2.15", "nccl2", "nccl2+states"}
    for r in records:  # every wrong case is printed with what the analysis said
        if r["result"] == "wrong":
            assert any(line.startswith(f"  {r['case']}: ") for line in lines), r["case"]
    baseline = json.loads(BASELINE.read_text())
    regressed = [
        f"{r['case']}: {r['why']} (said {r['said']['verdict']} {r['said']['kind']} "
        f"{r['said']['culprits']}, truth {r['truth']['culprits']})"
        for r in records
        if baseline.get(r["case"]) == "right" and r["result"] == "wrong"
    ]
    assert not regressed, "cases that were right and are wrong now:\n" + "\n".join(regressed)
    # No wrong answer but the ones the baseline pins as wrong (each named in docs/corpus.md
    # with its cause): a new case answered wrong, or a case that was not wrong, fails.
    wrong_now = [
        f"{r['case']}: {r['why']}"
        for r in records
        if r["result"] == "wrong" and baseline.get(r["case"]) != "wrong"
    ]
    assert not wrong_now, "wrong answers:\n" + "\n".join(wrong_now)
    assert wrong <= sum(v == "wrong" for v in baseline.values())
    assert n == len(list((ROOT / "corpus" / "cases").glob("*.tar.xz")))  # every case ran
