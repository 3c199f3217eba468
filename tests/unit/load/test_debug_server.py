"""torch 2.15's debug server outputs as input, on the dump_dir its periodic dumper wrote
around a real gloo job (``tools/record_debug_server.py``): saved pages, stacks snapshots,
per_rank/ dumps, and snapshots alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import analyzer
from analyzer.errors import InputError
from analyzer.load import find_contexts, load_dumps
from analyzer.load.debug_server import chosen, page_ranks, snapshots
from analyzer.load.debug_stacks import read_stacks
from analyzer.render import render_text
from tests.conftest import SAMPLES, corpus_case

DIR = SAMPLES / "debug_server_mesh_stall_w4"


def _copy(tmp: Path, pattern: str) -> Path:
    out = tmp / "given"
    out.mkdir()
    for p in DIR.glob(pattern):
        shutil.copy(p, out / p.name)
    return out


def test_newest_complete_stacks_snapshot_taken() -> None:
    snaps = snapshots([DIR], "stacks")
    pick, newer = chosen(snaps)
    assert pick is not None and not pick.partial
    assert newer and all(s.partial.startswith("PARTIAL DATA: 2/4") for s in newer)
    assert pick.stamp < newer[0].stamp


def test_stacks_are_where_each_rank_is_now() -> None:
    """Each rank's threads from the newest snapshot it answered; ranks 1 and 2 exited and did
    not answer the newer ones: their threads from before are no sign of life now."""
    ctx = find_contexts([DIR])
    assert sorted(ctx.by_rank) == [0, 3]
    three = ctx.by_rank[3]
    assert "PARTIAL DATA" in three.reason and "stacks_" in three.reason
    newest = snapshots([DIR], "stacks")[-1]
    assert three.path == str(newest.path)
    frames = three.where_now()
    assert frames[0]["name"] == "_worker" and frames[-1]["name"] == "_run_module_as_main"


def test_a_rank_silent_in_a_newer_health_check_is_not_alive(tmp_path: Path) -> None:
    """A real debug server's folder (corpus): rank 1 crashed after the only stacks snapshot
    (taken before the fault); the newer health check says it did not answer. Its threads
    from before do not show it alive: it is blamed as a rank with no dump. Before: alive,
    stalled outside communication, certain."""
    truth, folder = corpus_case("crash_exit_tp1cp2pp2dp1_torchcomms_debugsrv_t215_s04201", tmp_path)
    assert truth["culprits"] == [1]
    assert 1 not in find_contexts([folder]).by_rank
    d = analyzer.analyze(folder, jobs=1).diagnosis
    assert d.culprit_ranks == (1,) and d.kind == "missing_dump"


def test_dump_dir_reads_per_rank_dumps_not_pages() -> None:
    a = analyzer.analyze(DIR, jobs=1)
    assert a.diagnosis.culprit_ranks == (3,)
    assert a.loaded is not None
    assert all("per_rank" in d.path for d in a.loaded.dumps)
    why = {i.reason for i in a.loaded.ignored if ".html:" in i.path}
    assert why == {"a debug-server page's section: the rank's own dump is read"}
    assert a.contexts.by_rank[3].where_now()[0]["name"] == "_worker"


def test_saved_pages_alone(tmp_path: Path) -> None:
    given = _copy(tmp_path, "*.html")
    for p in DIR.glob("stacks_*"):
        shutil.copy(p, given / p.name)
    a = analyzer.analyze(given, jobs=1)
    assert a.diagnosis.culprit_ranks == (3,)
    assert set(a.matching.dialects.names().values()) >= {"torchcomms-gloo (health check flow)"}
    # The c10d page's sections give way to the TorchComms page's ones.
    assert a.loaded is not None
    assert all(":torchcomms_rank_" in d.path for d in a.loaded.dumps)
    assert a.loaded.torchcomms.notes and "in flight" in a.loaded.torchcomms.notes[0]
    text = render_text(a)
    assert "where it is now (rank 3" in text


def test_c10d_page_alone_is_read(tmp_path: Path) -> None:
    given = _copy(tmp_path, "fr_trace_json.html")
    loaded = load_dumps([given], jobs=1)
    assert sorted(d.rank for d in loaded.dumps) == [0, 1, 2, 3]
    assert loaded.torchcomms.ranks == ()


def test_snapshots_alone_read_from_the_trace_tables(tmp_path: Path) -> None:
    given = _copy(tmp_path, "*.txt")
    a = analyzer.analyze(given, jobs=1)
    assert a.diagnosis.culprit_ranks == (3,)
    assert a.loaded is not None
    note = a.loaded.torchcomms.notes[0]
    # The newest complete table snapshot, and the PARTIAL DATA after it, are named.
    assert "torchcomms_fr_trace_20261206_171056.txt" in note and "PARTIAL DATA: 2/4" in note
    groups = {str(g) for g in a.tables.members()}
    assert {"tp[0,1]", "tp[2,3]", "dp[0,2]", "dp[1,3]"} <= groups
    assert a.contexts.by_rank[3].where_now()[0]["name"] == "_worker"


def test_stacks_alone_say_what_to_give(tmp_path: Path) -> None:
    given = _copy(tmp_path, "stacks_*.txt")
    with pytest.raises(InputError, match="per_rank/"):
        load_dumps([given], jobs=1)


def test_page_text_is_bounded_and_never_markup(tmp_path: Path) -> None:
    body = (
        '{"version": "2.10", "pg_config": {}, "pg_status": {}, '
        '"entries": [{"profiling_name": "gloo:all_reduce&lt;script&gt;"}]}'
    )
    sections = "".join(f"<h2>Rank {r}: x</h2><pre>{body}</pre>" for r in range(5))
    page = f"<!doctype html><title>x - PyTorch Distributed</title>{sections}<h2>Rank 9: y</h2><pre>not json</pre>"
    got = list(page_ranks(page, 3))
    assert [r for r, _ in got] == [0, 1, 2]
    assert b"<script>" in got[0][1]  # unescaped to text for the JSON reader, never rendered
    f = tmp_path / "page.html"
    f.write_text(page)
    # Each section is one rank's dump, checked like any other: the odd name is refused.
    with pytest.raises(InputError, match=r"page\.html:rank_0\.json: no usable entry"):
        load_dumps([f], jobs=1)


def _stacks(ranks: dict[int, bool], head: str = "") -> str:
    """A stacks snapshot: each rank's section, with a thread where it answered."""
    out = [head] if head else []
    for r, ok in ranks.items():
        out.append(f"=== Rank {r}: http://node{r}:4000/handler/dump_traceback? ===")
        out += (
            [
                "Thread 0x00007f0000000001 (most recent call first):",
                '  File "t.py", line 3 in <module>',
            ]
            if ok
            else ["Error: 503"]
        )
    return "\n".join(out) + "\n"


def _partial(k: int, n: int, silent: list[int]) -> str:
    lines = [f"PARTIAL DATA: {k}/{n} workers responded"]
    lines += [f"  Rank {r}: ConnectionError: refused" for r in silent]
    return "\n".join(lines) + "\n"


def test_a_rank_that_stopped_answering_is_named_with_its_last_answer(tmp_path: Path) -> None:
    (tmp_path / "stacks_20261207_010000.txt").write_text(_stacks({0: True, 1: True, 2: True}))
    (tmp_path / "stacks_20261207_010004.txt").write_text(
        _stacks({0: True, 1: False, 2: True}, _partial(2, 3, [1]))
    )
    (tmp_path / "c10d_health_check_20261207_010008.txt").write_text(_partial(2, 3, [1]))
    gone = read_stacks([tmp_path]).no_answer
    assert list(gone) == [1]
    assert (gone[1].answered, gone[1].since, gone[1].error) == (
        "stacks_20261207_010000.txt",
        "stacks_20261207_010004.txt",
        "ConnectionError",
    )
    assert find_contexts([tmp_path]).no_answer == gone
    assert sorted(find_contexts([tmp_path]).by_rank) == [0, 2]


def test_no_rank_is_said_gone_where_the_newest_round_does_not_show_it(tmp_path: Path) -> None:
    """It answered again (the newest round is complete), nobody answered (the frontend's
    trouble), or it never answered at all (no sign it ran with the rest)."""
    first = tmp_path / "stacks_20261207_010000.txt"
    first.write_text(_stacks({0: True, 1: True}))
    (tmp_path / "stacks_20261207_010004.txt").write_text(
        _stacks({0: True, 1: False}, _partial(1, 2, [1]))
    )
    (tmp_path / "stacks_20261207_010008.txt").write_text(_stacks({0: True, 1: True}))
    assert read_stacks([tmp_path]).no_answer == {}
    (tmp_path / "stacks_20261207_010012.txt").write_text(_partial(0, 2, [0, 1]))
    assert read_stacks([tmp_path]).no_answer == {}
    (tmp_path / "stacks_20261207_010016.txt").write_text(_partial(1, 3, [2]))
    assert read_stacks([tmp_path]).no_answer == {}
