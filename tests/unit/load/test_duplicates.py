"""Several dumps of one rank (:mod:`analyzer.load.duplicates`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from analyzer.load import load_dumps
from tests.conftest import entry


def test_a_snapshot_whose_op_ended_since_is_the_newer(make_job: Callable[..., Path]) -> None:
    """Two files of one buffer with the same entries, written while an op was in flight and
    again after it timed out (gloo retires it): the later one is kept, whichever folder sorts
    first. Before: a tie, and the first by path (here the earlier) was kept."""
    ops = [entry(1, retired=True), entry(2)]
    earlier = make_job({0: ops, 1: ops}, name="a_round_while_hung")
    later = make_job({0: [entry(1, retired=True), entry(2, retired=True)]}, name="b_after")
    loaded = load_dumps([earlier, later / "nccl_trace_rank_0"], jobs=1)
    kept = {d.rank: d.path for d in loaded.dumps}
    assert kept[0] == str(later / "nccl_trace_rank_0")
    [dup] = loaded.duplicates
    assert not dup.identical and dup.dropped == str(earlier / "nccl_trace_rank_0")
    # Completion states count too: a snapshot with an op completed since is the newer.
    done = make_job({0: [entry(1, retired=True), entry(2, state="completed")]}, name="c_done")
    loaded = load_dumps([earlier / "nccl_trace_rank_0", done / "nccl_trace_rank_0"], jobs=1)
    assert [d.path for d in loaded.dumps] == [str(done / "nccl_trace_rank_0")]
