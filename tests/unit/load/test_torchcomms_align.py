"""Lining up the positions of a wrapped TorchComms buffer (:mod:`analyzer.load.torchcomms_align`)."""

from __future__ import annotations

from analyzer.load.torchcomms_align import _by_record, _same_stream, _shift

AR = "all_reduce"


def test_one_shift_that_fits_is_taken() -> None:
    def unread() -> int | None:
        raise AssertionError("the record_ids are read only where several shifts fit")

    assert _shift(["b", "c"], [["a", "b", "c"]], 1, unread) == 1
    assert _shift(["a", "b"], [["a", "b", "c"]], 1, unread) == 0


def test_among_several_shifts_the_record_ids_decide() -> None:
    """A run of one op fits every shift: 0 without a hint (as before), the hint where it is
    one of those that fit, and never a hint that does not fit."""
    mine, theirs = [AR] * 7, [[AR] * 8]
    assert _shift(mine, theirs, 1, lambda: None) == 0
    assert _shift(mine, theirs, 1, lambda: 1) == 1
    assert _shift(mine, theirs, 1, lambda: 2) == 0  # 2 does not fit here
    assert _shift(["x", AR], [["y", AR, "x", AR]], 2, lambda: 1) == 2  # only 2 fits


def test_the_record_ids_decide_only_where_both_streams_agree() -> None:
    rank3 = {5: ("world", AR), 6: ("dp", "rs"), 7: ("cp", "ag"), 8: ("world", AR)}
    rank0 = {6: ("dp", "rs"), 7: ("cp", "ag"), 8: ("world", AR), 9: ("dp", "a2a")}
    assert _same_stream(rank0, rank3)
    assert _by_record([8, 10, 11], [5, 8, 10, 11]) == 1
    other = {6: ("dp", "rs"), 7: ("world", AR), 8: ("cp", "ag")}  # another program
    assert not _same_stream(other, rank3)
    assert not _same_stream({8: ("world", AR)}, rank3)  # one shared entry decides nothing
    assert _by_record([12], [5, 8]) is None
