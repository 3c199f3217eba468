"""Property-based fuzzing of the loader on real dumps: one rank's file of a recorded sample is
mutated (its bytes, or its structure), and the analysis must neither crash nor run away, and
must keep what the untouched ranks prove.

``make test`` runs a bounded, derandomized number of examples; ``make fuzz`` runs many more
with fresh randomness (``HANGSCOPE_FUZZ_EXAMPLES``, default 2000 there).
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import pickle
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import analyzer  # imported before forking: each bounded child starts warm
from analyzer.errors import AnalyzerError
from tests.conftest import SAMPLES

EXAMPLES = int(os.environ.get("HANGSCOPE_FUZZ_EXAMPLES", "20"))
LONG = "HANGSCOPE_FUZZ_EXAMPLES" in os.environ
MEMORY_CAP = 3 << 30  # address space of the process analyzing one mutated set
TIME_CAP = 60.0

#: (sample, culprits, format) of recorded samples with one known culprit.
CASES = [
    ("chain_tp_dp_w8", [3]),
    ("stall_w4", [1]),
    ("tp_dp_w8_json", [5]),
    ("torchcomms_gloo_health_check_w4", [3]),
]

junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
    | st.sampled_from(["\x1b[2J", "nccl:all_reduce", "gloo:send 0->1", "", "0", "[0, 1]"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

FIELDS = [
    "profiling_name",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "record_id",
    "pg_id",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "time_created_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "retired",
    "is_p2p",
    "frames",
    "timeout_ms",
    "thread_name",
    "duration_ms",
]

byte_mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8),
    ),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("random"), st.binary(max_size=4096)),
    st.tuples(st.just("gzip-truncate"), st.floats(0, 1)),
)
structure_mutation = st.one_of(
    st.tuples(st.just("field"), st.integers(0, 10_000), st.sampled_from(FIELDS), junk),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.sampled_from(FIELDS)),
    st.tuples(
        st.just("top"), st.sampled_from(["pg_config", "pg_status", "entries", "version"]), junk
    ),
    st.tuples(st.just("entry"), st.integers(0, 10_000), junk),
)


def _mutate_bytes(data: bytes, m: tuple[Any, ...]) -> bytes:
    kind = m[0]
    at = lambda f: min(len(data) - 1, int(f * len(data))) if data else 0  # noqa: E731
    if kind == "truncate":
        return data[: at(m[1])]
    if kind == "flip":
        out = bytearray(data)
        for f, b in m[1]:
            if out:
                out[at(f)] = b
        return bytes(out)
    if kind == "insert":
        i = at(m[1])
        return data[:i] + m[2] + data[i:]
    if kind == "random":
        return m[1]
    packed = gzip.compress(data)
    return packed[: max(1, int(m[1] * len(packed)))]


def _mutate_structure(obj: dict[str, Any], m: tuple[Any, ...]) -> dict[str, Any]:
    """The dump with one field, entry or top-level value replaced (or a field deleted)."""
    kind = m[0]
    entries = obj.get("entries") or []
    if kind in ("field", "delete", "entry") and entries:
        i = m[1] % len(entries)
        if kind == "field":
            entries[i][m[2]] = m[3]
        elif kind == "delete":
            entries[i].pop(m[2], None)
        else:
            entries[i] = m[2]
        return obj
    if kind == "top":
        obj[m[1]] = m[2]
    return obj


def _analyze_bounded(target: str, conn: Any) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    try:
        a = analyzer.analyze(target, jobs=1)
        conn.send(("ok", a.verdict, a.culprit_ranks))
    except AnalyzerError as exc:
        conn.send(("error", type(exc).__name__, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - what the property is about
        import traceback

        conn.send(("crash", type(exc).__name__, traceback.format_exc()))


def _run(target: Path) -> tuple[str, Any, Any, float]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    start = time.monotonic()
    proc = ctx.Process(target=_analyze_bounded, args=(str(target), child))
    proc.start()
    child.close()
    got = parent.recv() if parent.poll(TIME_CAP) else ("timeout", None, None)
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if not got and proc.exitcode:
        got = ("died", proc.exitcode, None)
    return (*got, time.monotonic() - start)


def _check(sample: str, culprits: list[int], victim_pick: int, data_for: Any) -> None:
    src = SAMPLES / sample
    files = sorted(p for p in src.iterdir() if p.name != "EXPECTED.json")
    victims = [
        p
        for p in files
        if not any(p.name.endswith(f"_{c}") or p.name.endswith(f"_{c}.json") for c in culprits)
    ]
    victim = victims[victim_pick % len(victims)]
    rank = int(victim.name.split("_")[-1].split(".")[0])
    with tempfile.TemporaryDirectory(prefix="hangscope-fuzz-") as tmp:
        job = Path(tmp) / "job"
        job.mkdir()
        for p in files:
            shutil.copy(p, job / p.name)
        (job / victim.name).write_bytes(data_for(victim.read_bytes()))
        status, a, b, took = _run(job)
    assert status in ("ok", "error"), f"{status}: {a}\n{b}"
    assert took < TIME_CAP
    if status == "ok":
        # The untouched culprit stays blamed, unless the mutated rank now holds it up.
        assert set(culprits) <= set(b) or rank in b, (sample, rank, a, b)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(case=st.sampled_from(CASES), victim=st.integers(0, 100), m=byte_mutation)
def test_byte_mutations_of_one_rank(
    case: tuple[str, list[int]], victim: int, m: tuple[Any, ...]
) -> None:
    _check(case[0], case[1], victim, lambda data: _mutate_bytes(data, m))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(case=st.sampled_from(CASES[:2]), victim=st.integers(0, 100), m=structure_mutation)
def test_structure_mutations_of_one_rank(
    case: tuple[str, list[int]], victim: int, m: tuple[Any, ...]
) -> None:
    def mutate(data: bytes) -> bytes:
        return pickle.dumps(_mutate_structure(pickle.loads(data), m))

    _check(case[0], case[1], victim, mutate)


def test_mutations_change_what_they_say() -> None:
    data = bytes(range(100))
    assert len(_mutate_bytes(data, ("truncate", 0.5))) == 50
    assert _mutate_bytes(data, ("flip", [(0.0, 255)]))[0] == 255
    assert _mutate_bytes(data, ("insert", 0.1, b"xy"))[10:12] == b"xy"
    obj = _mutate_structure({"entries": [{"state": "completed"}]}, ("field", 3, "state", 7))
    assert obj["entries"][0]["state"] == 7
