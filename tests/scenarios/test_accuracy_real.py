"""Accuracy on the corpus of real recorded hangs: every case (``make test``, about 3 min;
``test_accuracy_world.py`` runs the gloo cases with the world size given).

Every case of ``corpus/cases`` runs through ``bench/accuracy_real.py``, as ``make
accuracy-real`` runs it. No answer may be wrong but the few the baseline pins as wrong (each
named in docs/corpus.md with its cause): a confident wrong culprit, a missed culprit, a missed
hang or a false alarm on any other case fails the test (an unsure answer that names the truth
among its suspects is allowed: the dumps do not decide every case).
``corpus/BASELINE.json`` pins each case's result as last measured; a case that was right and
is wrong now is named as such. A case that becomes right is progress: rewrite the baseline
(``python bench/accuracy_real.py --write-baseline``) so that it stays right;
``corpus/BASELINE_WORLD.json`` pins the results with the world size given
(``--world-given --write-baseline``).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.corpus_runs import BASELINE, ROOT, against_baseline, run_bench


def test_no_case_is_answered_wrong(tmp_path: Path) -> None:
    _, records, (n, k, _, wrong, _) = run_bench(tmp_path)
    assert k >= 12
    assert {r["dialect"] for r in records} >= {"gloo@2.13", "gloo@2.15", "nccl2", "nccl2+states"}
    baseline = json.loads(BASELINE.read_text())
    against_baseline(records, baseline)
    assert wrong <= sum(v == "wrong" for v in baseline.values())
    assert n == len(list((ROOT / "corpus" / "cases").glob("*.tar.xz")))  # every case ran
