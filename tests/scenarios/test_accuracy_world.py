"""Accuracy on the corpus of real recorded hangs with the job's world size given
(``--world-size N``), on the gloo cases (``make test``, about 1 min): no answer may be wrong
but the ones ``corpus/BASELINE_WORLD.json`` pins as wrong (each named in docs/corpus.md)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.corpus_runs import BASELINE_WORLD, GLOO, against_baseline, run_bench


def test_no_gloo_case_is_answered_wrong_with_the_world_size_given(tmp_path: Path) -> None:
    """The gloo cases with ``--world-size N`` (the advice of the inconclusive answer where no
    dump lists the members): the other recorders list them, so the number changes nothing
    there (``make accuracy-world`` runs every case)."""
    args = ["--world-given"] + [a for d in GLOO for a in ("--dialect", d)]
    _, records, (n, *_) = run_bench(tmp_path, *args)
    assert {r["dialect"] for r in records} == set(GLOO) and n >= 400
    baseline = json.loads(BASELINE_WORLD.read_text())
    against_baseline(records, baseline)
