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


def test_two_newest_rounds_no_file_orders_doubt_both(make_job: Callable[..., Path]) -> None:
    """Ranks 0 and 1 in round a, then rank 0 alone in round b and rank 1 alone in round c:
    both follow a, and no rank has a file in both, so which is newer is in no file. With
    rank 0's file of c too, c follows b and nothing is doubted (rank 0's b is superseded)."""
    from analyzer.load import unordered_rounds

    one, two = [entry(1, retired=True)], [entry(1, retired=True), entry(2)]
    a = make_job({0: one, 1: one}, name="a")
    b = make_job({0: two}, name="b")
    c = make_job({1: two}, name="c")
    loaded = load_dumps([a, b, c], jobs=1)
    doubt = unordered_rounds(loaded.dumps, loaded.duplicates)
    assert sorted(doubt) == [0, 1]
    assert "both rounds are newer than" in doubt[0] and "no file orders them" in doubt[0]
    newer = make_job({0: [entry(1, retired=True), entry(2, retired=True), entry(3)]}, name="d")
    (newer / "nccl_trace_rank_0").rename(c / "nccl_trace_rank_0")  # rank 0's file of round c
    loaded = load_dumps([a, b, c], jobs=1)
    assert unordered_rounds(loaded.dumps, loaded.duplicates) == {}


def test_a_copy_of_a_superseded_file_is_superseded_with_it(make_job: Callable[..., Path]) -> None:
    """Rank 0's file of round b is an identical copy of its file of round a, and its file of
    round c is newer: b is older than c, so rank 1, whose newest file is b's, has only an
    older round's dump. Before: only a read as older than c, b and c were not ordered, and
    rank 1's file of b was read as current."""
    from analyzer.load import unordered_rounds

    one = [entry(1, retired=True), entry(2)]
    a = make_job({0: one, 1: [entry(1, retired=True)]}, name="a")
    b = make_job({0: one, 1: [entry(1, retired=True), entry(2)]}, name="b")
    c = make_job({0: [entry(1, retired=True), entry(2, retired=True), entry(3)]}, name="c")
    loaded = load_dumps([a, b, c], jobs=1)
    assert [r for r, _ in loaded.stale] == [1]
    assert "superseded by newer ones in" in loaded.stale[0][1] and "/c" in loaded.stale[0][1]
    assert unordered_rounds(loaded.dumps, loaded.duplicates) == {}
