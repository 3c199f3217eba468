"""Send/recv to a rank without a dump, where no completion is reported: only the waiter's
newest op of the stream is awaited, and no waiter loses its holder."""

from __future__ import annotations

import analyzer
from tests.conftest import ROOT, SAMPLES

#: A recorded corpus case: rank 1 crashed (no dump) after rank 0's sends to it in the
#: 4-member default group, where rank 0 then ran broadcasts; rank 3 stalled.
TWO_FAULTS = ROOT / "corpus" / "cases" / "two_faults_tp1pp2dp2_nccl2_t215_s00058.tar.xz"


def test_older_sends_dropped_but_the_holder_kept_in_a_wide_group() -> None:
    a = analyzer.analyze(TWO_FAULTS, jobs=1)
    assert a.diagnosis.culprit_ranks == (1, 3)
    w = a.waits
    on_1 = w[(w["holder"] == 1) & (w["waiter"] == 0) & (w["op"].astype(str) == "send")]
    assert list(on_1["seq"]) == [int(on_1["seq"].max())]  # the newest send to rank 1 alone


def test_pair_group_waits_in_its_newest_op() -> None:
    a = analyzer.analyze(SAMPLES / "nccl2_pp4_stall_w4", jobs=1)
    w = a.waits
    p2p = w[w["op"].astype(str).isin(["send", "recv"])]
    assert set(zip(p2p["waiter"], p2p["holder"], p2p["seq"])) == {(1, 2, 6), (3, 2, 6)}
