"""Backend dialects (analyzer/match/dialect.py): the prefix table, what each rank's own content
confirms or overrides, and what matching and diagnosis make of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import analyzer
from analyzer.match.dialect_defaults import HOOK, NONE, OBSERVED, PREFIXES, default_for
from tests.conftest import dump, entry, write_pickle


def _hook_entry(
    op_id: int,
    seq: int,
    *,
    op: str = "all_reduce",
    backend: str = "nccl2",
    state: str = "completed",
    retired: bool = True,
    p2p_seq: int = 0,
    sizes: list[list[int]] | None = None,
    dtype: str = "Float",
    pg: tuple[str, str] = ("0", "default_pg"),
    pg_id: int = 0,
    t: int = 0,
) -> dict[str, Any]:
    """An entry as torch 2.15's recorder hook writes it: op_id counts every op of the group
    (0-based), send/recv carry one side of their shapes."""
    e = entry(
        seq,
        op=op,
        backend=backend,
        state=state,
        retired=retired,
        p2p_seq=p2p_seq,
        sizes=sizes,
        dtype=dtype,
        pg=pg,
        pg_id=pg_id,
        t=t if t else op_id,
    )
    e["op_id"] = op_id
    if op.startswith("send"):
        e["is_p2p"] = True
        e["output_sizes"], e["output_dtypes"] = [], []
    elif op.startswith("recv"):
        e["is_p2p"] = True
        e["input_sizes"], e["input_dtypes"] = [], []
    return e


def _hook_dump(
    entries: list[dict[str, Any]],
    world: int,
    last_enqueued: int | None = None,
    last_completed: int = -1,
) -> dict[str, Any]:
    status = {
        "0": {
            "last_enqueued_collective": max(e["op_id"] for e in entries)
            if last_enqueued is None
            else last_enqueued,
            "last_started_collective": -1,
            "last_completed_collective": last_completed,
        }
    }
    d = dump(entries, world=world, backend="nccl2", status=status)
    d["comm_lib_version"] = ""
    return d


def _write(
    out: Path, per_rank: dict[int, dict[str, Any]], prefix: str = "nccl2_trace_rank_"
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for rank, obj in per_rank.items():
        for i, e in enumerate(obj["entries"]):
            e["record_id"] = i
        write_pickle(out / f"{prefix}{rank}", obj)
    return out


def _pipeline_pair(
    recv_sizes: list[list[int]] | None = None, recv_dtype: str = "Float", *, completed: bool = True
) -> dict[int, dict[str, Any]]:
    """Rank 0 sends three tensors of 8 to rank 1 between all_reduces; all done but the last."""
    st = "completed" if completed else "scheduled"
    r0, r1 = [], []
    op = 0
    for step in range(3):
        last = step == 2
        state = "scheduled" if last else st
        r0.append(
            _hook_entry(op, step, op="send 0->1", p2p_seq=step + 1, state=state, retired=not last)
        )
        r1.append(
            _hook_entry(
                op,
                step,
                op="recv 1<-0",
                p2p_seq=step + 1,
                state=state,
                retired=not last,
                sizes=recv_sizes if last and recv_sizes else None,
                dtype=recv_dtype if last else "Float",
            )
        )
        op += 1
        if not last:
            for r in (r0, r1):
                r.append(_hook_entry(op, step + 1, state=st, retired=True))
            op += 1
    return {0: _hook_dump(r0, 2), 1: _hook_dump(r1, 2)}


def test_prefix_table_covers_every_backend_named_in_the_issue() -> None:
    for name in ("nccl", "nccl-legacy", "nccl2", "nccl-lazy", "c10d", "gloo", "xccl", "ucc", "mpi"):
        assert name in PREFIXES
    assert PREFIXES["nccl"].name == "nccl-legacy" and PREFIXES["nccl"].completion == OBSERVED
    assert PREFIXES["nccl"].counter == "seq" and not PREFIXES["nccl"].one_sided_p2p
    assert PREFIXES["nccl2"].completion == HOOK and PREFIXES["nccl2"].counter == "op_id"
    assert PREFIXES["nccl2"].one_sided_p2p and PREFIXES["nccl2"].dump_policy == "own_timeout"
    assert PREFIXES["gloo"].completion == NONE and not PREFIXES["gloo"].records_p2p
    custom = default_for("my_plugin")
    assert custom.completion == NONE and custom.counter == "op_id" and custom.one_sided_p2p


def test_content_overrides_the_prefix(tmp_path: Path) -> None:
    # A hook dump whose backend reports no completion: every entry scheduled + retired.
    entries = [_hook_entry(i, i + 1, state="scheduled", retired=True) for i in range(4)]
    job = _write(tmp_path / "j", {r: _hook_dump([dict(e) for e in entries], 2) for r in (0, 1)})
    d = analyzer.analyze(job).matching.dialects.of(0)
    assert d is not None and d.name == "nccl2" and d.completion == NONE
    assert any("completion is not reported" in w for w in d.evidence)
    # A custom name that does report completion.
    entries = [_hook_entry(i, i + 1, backend="mybackend") for i in range(3)]
    job = _write(
        tmp_path / "k",
        {r: _hook_dump([dict(e) for e in entries], 2) for r in (0, 1)},
        prefix="trace_rank_",
    )
    d = analyzer.analyze(job).matching.dialects.of(1)
    assert d is not None and d.completion == HOOK


def test_one_sided_send_recv_is_no_size_mismatch(tmp_path: Path) -> None:
    # The hook writes a send's shapes as inputs and a recv's as outputs: compared as they
    # were, every pair would disagree.
    a = analyzer.analyze(_write(tmp_path / "j", _pipeline_pair()))
    assert a.matching.p2p_mismatches.empty
    assert not any(f.kind in ("size_mismatch", "dtype_mismatch") for f in a.diagnosis.findings)
    assert a.matching.dialects.of(0).one_sided_p2p


@pytest.mark.parametrize(
    ("sizes", "dtype", "kind"), [([[4]], "Float", "size_mismatch"), (None, "Int", "dtype_mismatch")]
)
def test_real_send_recv_mismatch_is_still_found(
    tmp_path: Path, sizes: Any, dtype: str, kind: str
) -> None:
    a = analyzer.analyze(_write(tmp_path / "j", _pipeline_pair(sizes, dtype)))
    d = a.diagnosis
    assert d.kind == kind and d.culprit_ranks == (1,), d.headline


def test_op_id_counters_are_compared_with_op_ids(tmp_path: Path) -> None:
    # Counter 5 = op_id of the last entry, sequence number 3: read as seq, the counter would
    # run ahead of the entries and read as ops the buffer never saw.
    per = {}
    for r in (0, 1):
        es = [
            _hook_entry(0, 1),
            _hook_entry(1, 1, op="send 0->1" if r == 0 else "recv 1<-0", p2p_seq=1),
            _hook_entry(2, 2),
            _hook_entry(3, 2, op="recv 0<-1" if r == 0 else "send 1->0", p2p_seq=2),
            _hook_entry(4, 2, op="barrier", sizes=[]),
            _hook_entry(5, 3),
        ]
        per[r] = _hook_dump(es, 2, last_enqueued=5, last_completed=5)
    a = analyzer.analyze(_write(tmp_path / "j", per))
    assert a.matching.dialects.of(0).counter == "op_id"
    assert a.diagnosis.verdict.value == "no_hang", a.diagnosis.headline
    assert not any(f.kind == "unrecorded_ops" for f in a.diagnosis.findings)
    prog = a.matching.progress
    assert set(prog["enqueued"]) == {3} and set(prog["op_progress"]) == {5}


def test_missing_file_under_nccl2_reads_stalled_or_crashed(tmp_path: Path) -> None:
    per = {}
    for r in (0, 1, 2):
        es = [_hook_entry(i, i + 1) for i in range(4)] + [
            _hook_entry(4, 5, state="scheduled", retired=False)
        ]
        per[r] = _hook_dump(es, 4, last_completed=3)
    a = analyzer.analyze(_write(tmp_path / "j", per))
    d = a.diagnosis
    assert d.culprit_ranks == (3,) and d.kind == "missing_dump"
    assert (
        "no dump: stalled outside communication or crashed (this backend dumps only ranks "
        "whose own ops timed out)"
    ) in d.headline
    assert "crashed, was killed" not in d.headline
    from analyzer.render.json_doc import to_json
    from analyzer.render.text import render_text

    assert "no dump: stalled outside communication or crashed" in render_text(a).splitlines()[0]
    doc = to_json(a)
    assert doc["dialects"]["per_rank"] == {"0": "nccl2", "1": "nccl2", "2": "nccl2"}
    assert "no dump: stalled outside communication or crashed" in a.report_html()


def test_legacy_nccl_missing_file_still_reads_crashed(tmp_path: Path) -> None:
    per = {}
    for r in (0, 1, 2):
        es = [entry(i, state="completed", retired=True) for i in range(1, 5)] + [entry(5)]
        per[r] = dump(es, world=4)
    a = analyzer.analyze(_write(tmp_path / "j", per, prefix="nccl_trace_rank_"))
    assert a.diagnosis.kind == "missing_dump"
    assert "crashed, was killed, or hung before dumping" in a.diagnosis.headline


def test_no_module_but_dialect_tests_backend_names() -> None:
    root = Path(analyzer.__file__).parent
    for name in (
        "match/matching.py",
        "match/expectations.py",
        *sorted(f"waits/{p.name}" for p in (root / "waits").glob("*.py")),
        *sorted(f"diagnosis/{p.name}" for p in (root / "diagnosis").glob("*.py")),
    ):
        text = (root / name).read_text()
        for backend in ('"gloo"', "'gloo'", '"nccl"', '"nccl2"', "gloo_like"):
            assert backend not in text, (name, backend)


def test_op_id_counter_ahead_of_the_buffer_is_unrecorded_ops(tmp_path: Path) -> None:
    per = {}
    for r in (0, 1):
        es = [_hook_entry(i, i + 1) for i in range(3)]
        per[r] = _hook_dump(es, 2, last_enqueued=2 if r == 0 else 4, last_completed=2)
    d = analyzer.analyze(_write(tmp_path / "j", per)).diagnosis
    found = [f for f in d.findings if f.kind == "unrecorded_ops"]
    assert len(found) == 1 and found[0].ranks == (1,)
    assert found[0].evidence == {"counters": {"1": 4}, "last_recorded_op_id": {"1": 2}}
