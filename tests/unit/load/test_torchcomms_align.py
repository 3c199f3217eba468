"""Lining up the positions of a wrapped TorchComms buffer (:mod:`analyzer.load.torchcomms_align`)."""

from __future__ import annotations

from analyzer.load.torchcomms_align import _by_record, _name_of, _same_records, _same_stream, _shift

AR = "all_reduce"


def test_one_shift_that_fits_is_taken() -> None:
    def unread(fit: list[int]) -> int | None:
        raise AssertionError("the record_ids are read only where several shifts fit")

    assert _shift(["b", "c"], [["a", "b", "c"]], 1, unread) == (1, True)
    assert _shift(["a", "b"], [["a", "b", "c"]], 1, unread) == (0, True)


def test_among_several_shifts_the_record_ids_decide() -> None:
    """A run of one op fits every shift: the hint where it is one of those that fit; else 0,
    undecided (the rank's evidence is then doubtful); never a hint that does not fit."""
    mine, theirs = [AR] * 7, [[AR] * 8]
    assert _shift(mine, theirs, 1, lambda fit: None) == (0, False)
    assert _shift(mine, theirs, 1, lambda fit: 1) == (1, True)
    assert _shift(mine, theirs, 1, lambda fit: 2) == (0, False)  # 2 does not fit here
    assert _shift(["x", AR], [["y", AR, "x", AR]], 2, lambda fit: 1) == (2, True)  # only 2 fits


def test_the_record_ids_decide_only_where_both_streams_agree() -> None:
    rank3 = {5: ("world", AR), 6: ("dp", "rs"), 7: ("cp", "ag"), 8: ("world", AR)}
    rank0 = {6: ("dp", "rs"), 7: ("cp", "ag"), 8: ("world", AR), 9: ("dp", "a2a")}
    assert _same_stream(rank0, rank3)
    assert _by_record([8, 10, 11], [5, 8, 10, 11]) == 1
    other = {6: ("dp", "rs"), 7: ("world", AR), 8: ("cp", "ag")}  # another program
    assert not _same_stream(other, rank3)
    assert not _same_stream({8: ("world", AR)}, rank3)  # one shared entry decides nothing
    assert _by_record([12], [5, 8]) == 2  # newer than the member's newest: after it
    assert _by_record([], [5, 8]) is None


def test_streams_compare_comm_names_not_member_sets() -> None:
    """Two ranks of one program in different ``cp`` comms issue their own ``cp`` entries at
    the same ``record_id`` s: the streams are compared by comm name."""
    assert _name_of("cp[8,10]") == "cp" and _name_of("world[0-11]") == "world"
    assert _name_of("tp") == "tp"


def test_the_two_ends_of_a_transfer_are_one_stream() -> None:
    """A send on one rank and the recv on its peer at the same ``record_id``: one program."""
    rank1 = {28: ("cp", "p2p"), 29: ("cp", "p2p"), 30: ("world", AR)}
    rank3 = {28: ("cp", "p2p"), 29: ("cp", "p2p"), 30: ("world", AR)}
    assert _same_stream(rank1, rank3)


def test_a_newer_op_than_the_members_newest_is_not_lined_up_with_an_older_one() -> None:
    """Rank 1 lost one more entry than rank 3, and its one entry of ``cp`` (record 36) is
    newer than rank 3's newest: rank 3's one ``cp`` entry (record 24, the same op of the
    step before) fits at shift 0, and shift 1 (meeting none of it) fits too. A member running
    the same program puts record 36 after record 24: shift 1, decided (the op rank 3 never
    issued is not read as the one it did)."""
    ag = "all_gather_single"
    assert _shift([ag], [[ag]], 1, lambda fit: None, lambda: 1) == (1, True)
    assert _shift([ag], [[ag]], 1, lambda fit: None) == (0, True)  # no same program: as before
    assert _shift([ag], [["x"]], 1, lambda fit: None, lambda: 0) == (0, True)  # none meets


def test_a_comms_own_record_ids_decide_where_the_streams_differ() -> None:
    """Where the whole streams differ (another program: one rank issues more entries), the
    comm's own entries carrying the same ``record_id`` s under one fitting shift decide it."""
    assert _same_records([22, 23], [13, 14, 22, 23], 2)
    assert not _same_records([22, 23], [13, 14, 22, 23], 0)
    assert _same_records([30], [13, 14], 2)  # nothing met: nothing says otherwise


def test_a_buffer_that_lost_millions_of_entries_is_not_millions_of_shifts() -> None:
    """Past the longest reference, every shift meets nothing: they are read as one (not a
    dict of ten million shifts)."""
    ag = "all_gather_single"
    assert _shift([ag], [[ag]], 10_000_000, lambda fit: None, lambda: 5_000_000) == (
        5_000_000,
        True,
    )
    assert _shift([ag], [[ag]], 10_000_000, lambda fit: None) == (0, True)
    assert _shift([ag], [[ag]], 10_000_000, lambda fit: None, lambda: 10_000_001) == (0, True)
