"""Invariants: the verdict does not depend on file order or file naming."""

from __future__ import annotations

import pickle
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import analyzer
from tests.conftest import dump, entry

NAMINGS = [
    "nccl_trace_rank_{r}",
    "_dump_{r}",
    "trace_rank{r}",
    "nccl_trace_rank_node07_{r}",
    "comm_lib_trace_rank_{r}",
]


def _job(world: int, culprit: int, odd_size: bool) -> dict[int, bytes]:
    out = {}
    for r in range(world):
        entries = [entry(s, state="completed", retired=True, t=s, record_id=s) for s in (1, 2, 3)]
        if odd_size:
            entries.append(entry(4, t=4, record_id=4, sizes=[[99]] if r == culprit else [[8]]))
        elif r != culprit:
            entries.append(entry(4, t=4, record_id=4))
        out[r] = pickle.dumps(dump(entries, world=world))
    return out


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    world=st.integers(min_value=3, max_value=9),
    data=st.data(),
    naming=st.sampled_from(NAMINGS),
    odd_size=st.booleans(),
)
def test_permuting_ranks_and_names_keeps_the_verdict(
    tmp_path_factory, world, data, naming, odd_size
) -> None:  # type: ignore[no-untyped-def]
    culprit = data.draw(st.integers(min_value=0, max_value=world - 1))
    order = data.draw(st.permutations(range(world)))
    blobs = _job(world, culprit, odd_size)
    base = tmp_path_factory.mktemp("job")
    ref_dir = base / "ref"
    ref_dir.mkdir()
    for r, blob in blobs.items():
        (ref_dir / f"nccl_trace_rank_{r}").write_bytes(blob)
    perm_dir = base / "perm"
    perm_dir.mkdir()
    files = []
    for r in order:
        path = perm_dir / naming.format(r=r)
        path.write_bytes(blobs[r])
        files.append(str(path))
    ref = analyzer.analyze(ref_dir).diagnosis
    got = analyzer.analyze(files).diagnosis
    assert got.culprit_ranks == ref.culprit_ranks == (culprit,)
    assert got.kind == ref.kind == ("size_mismatch" if odd_size else "not_joined")
    assert got.verdict == ref.verdict
    shutil.rmtree(base)
