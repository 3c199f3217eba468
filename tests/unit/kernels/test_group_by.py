"""The compiled group-by kernels (analyzer.kernels._groupkeys) give what numpy's versions give, on
random, sparse, negative and degenerate keys; bad arguments are errors, never writes out
of bounds; the matching of every sample is the same with and without them; and the heap
setting of the matching keeps large blocks in the process while it lasts."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.kernels import group_by as groupkeys
from analyzer.load import parse_native as fastreader
from analyzer.load.loader import load_dumps
from analyzer.match.matching import match
from analyzer.normalize.tables import normalize
from analyzer.runtime import freed_memory_reused

SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"
KERNELS = groupkeys._kernels

needs_kernels = pytest.mark.skipif(
    KERNELS is None, reason="analyzer.kernels._groupkeys is not built (no C compiler)"
)


def _numpy(fn, *args):  # type: ignore[no-untyped-def]
    saved, groupkeys._kernels = groupkeys._kernels, None
    try:
        return fn(*args)
    finally:
        groupkeys._kernels = saved


def test_built_where_the_compiled_reader_is() -> None:
    """Both come from the same set-up: a build with the reader and without the kernels is a
    broken build, not a fallback."""
    if fastreader.native_available():
        assert groupkeys.compiled()


def _cases() -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(13)
    for n in (1, 2, 7, 1000, 50_000):
        yield f"dense-{n}", rng.integers(0, 9, n), rng.integers(0, 40, n)
        yield f"negative-{n}", rng.integers(0, 3, n), rng.integers(-50, 50, n)
        yield f"sparse-{n}", rng.integers(0, 4, n), rng.integers(-(1 << 40), 1 << 40, n)
        yield f"one-major-{n}", np.zeros(n, dtype=np.int64), rng.integers(0, 5, n)
        yield f"gaps-{n}", rng.integers(0, 50, n) * 7, rng.integers(0, 3, n) * 1000
    yield "huge", np.array([0, 1, 1]), np.array([-(1 << 62), 1 << 62, 5])
    yield "ranked", np.repeat(np.arange(64), 100), np.tile(np.arange(100), 64)


@needs_kernels
@pytest.mark.parametrize("name", [c[0] for c in _cases()])
def test_group_ids_and_pairs_as_numpy(name: str) -> None:
    _, major, minor = next(c for c in _cases() if c[0] == name)
    major, minor = major.astype(np.int64), minor.astype(np.int64)
    ids, n = groupkeys.group_ids(major, minor)
    want_ids, want_n = _numpy(groupkeys.group_ids, major, minor)
    assert n == want_n and ids.dtype == np.int64
    np.testing.assert_array_equal(ids, want_ids)
    # The definition: ids number the distinct pairs in sorted order.
    distinct = sorted(set(zip(major.tolist(), minor.tolist(), strict=True)))
    assert n == len(distinct)
    np.testing.assert_array_equal(
        ids,
        [distinct.index(p) for p in zip(major.tolist(), minor.tolist(), strict=True)]
        if len(major) <= 1000
        else want_ids,
    )
    got, want = groupkeys.pairs(major, minor), _numpy(groupkeys.pairs, major, minor)
    for field in ("ids", "major", "minor"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))


@needs_kernels
@pytest.mark.parametrize("dtype", [np.int32, np.int16])
def test_narrow_and_strided_keys_take_numpys_path_or_are_widened(dtype: type) -> None:
    rng = np.random.default_rng(3)
    major, minor = rng.integers(0, 5, 999).astype(dtype), rng.integers(0, 30, 999).astype(dtype)
    ids, n = groupkeys.group_ids(major, minor)
    want_ids, want_n = _numpy(groupkeys.group_ids, major, minor)
    assert n == want_n
    np.testing.assert_array_equal(ids, want_ids)
    out = np.zeros(5, dtype=np.int64)
    strided = rng.integers(0, 5, 2000)[::2]  # not contiguous: numpy's ufunc.at
    groupkeys.maximum_at(out, strided, np.arange(1000, dtype=np.int64))
    want = np.zeros(5, dtype=np.int64)
    np.maximum.at(want, strided, np.arange(1000))
    np.testing.assert_array_equal(out, want)


@needs_kernels
@pytest.mark.parametrize("n_groups", [1, 3, 500])
def test_reductions_as_ufunc_at(n_groups: int) -> None:
    rng = np.random.default_rng(n_groups)
    ids = rng.integers(0, n_groups, 20_000)
    values = rng.integers(-(1 << 62), 1 << 62, 20_000)
    for empty in (-1, 7):
        np.testing.assert_array_equal(
            groupkeys.reduce_max(ids, n_groups + 2, values, empty),
            _numpy(groupkeys.reduce_max, ids, n_groups + 2, values, empty),
        )
        np.testing.assert_array_equal(
            groupkeys.reduce_min(ids, n_groups + 2, values, empty),
            _numpy(groupkeys.reduce_min, ids, n_groups + 2, values, empty),
        )
    np.testing.assert_array_equal(
        groupkeys.first_of(ids, n_groups + 2), _numpy(groupkeys.first_of, ids, n_groups + 2)
    )
    lo, want = np.full(n_groups, 5, dtype=np.int64), np.full(n_groups, 5, dtype=np.int64)
    groupkeys.minimum_at(lo, ids, values)
    np.minimum.at(want, ids, values)
    np.testing.assert_array_equal(lo, want)


@needs_kernels
def test_bad_arguments_are_errors_not_writes() -> None:
    assert KERNELS is not None
    guarded = np.zeros(6, dtype=np.int64)
    out = guarded[:3]  # what lies past it must stay untouched
    with pytest.raises(ValueError, match="outside"):
        KERNELS.reduce_at(1, np.array([0, 3]), np.array([1, 2]), out)
    with pytest.raises(ValueError, match="outside"):
        KERNELS.reduce_at(0, np.array([-1]), np.array([1]), out)
    with pytest.raises(ValueError, match="outside"):
        KERNELS.reduce_at(2, np.array([0, 9]), None, out)
    assert not guarded[3:].any()  # rows before the bad one may have been reduced, in bounds
    with pytest.raises(TypeError, match="int64"):
        KERNELS.reduce_at(1, np.array([0], dtype=np.int32), np.array([1]), out)
    with pytest.raises(TypeError, match="int64"):
        KERNELS.reduce_at(1, np.array([0]), np.array([1.0]), out)
    with pytest.raises(ValueError, match="differ"):
        KERNELS.reduce_at(1, np.array([0, 1]), np.array([1]), out)
    with pytest.raises(ValueError, match="op"):
        KERNELS.reduce_at(5, np.array([0]), np.array([1]), out)
    with pytest.raises(ValueError, match="contiguous"):
        KERNELS.reduce_at(1, np.array([0]), np.array([1]), out[::2])
    frozen = np.zeros(3, dtype=np.int64)
    frozen.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        KERNELS.reduce_at(1, np.array([0]), np.array([1]), frozen)
    guarded_ids = np.zeros(8, dtype=np.int64)
    ids = guarded_ids[:4]
    with pytest.raises(ValueError, match="major code"):
        KERNELS.ranged_ids(np.array([0, 1, 2, 5]), np.arange(4), 3, 100, ids)
    with pytest.raises(ValueError, match="differ"):
        KERNELS.ranged_ids(np.array([0, 1]), np.arange(4), 3, 100, ids)
    with pytest.raises(ValueError, match="positive"):
        KERNELS.ranged_ids(np.array([0]), np.arange(1), 0, 100, ids[:1])
    assert (
        KERNELS.ranged_ids(np.array([0, 0]), np.array([0, 10**6]), 1, 100, ids[:2]) == -1
    )  # too sparse
    assert not guarded_ids.any()


@needs_kernels
@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_matching_of_every_sample_is_the_same_without_the_kernels(sample: str) -> None:
    loaded = load_dumps([SAMPLES / sample], jobs=1)
    tables = normalize(loaded)
    got = match(tables)
    want = _numpy(match, tables)
    for name in ("progress", "collectives", "mismatches", "p2p", "p2p_mismatches"):
        pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name))
    assert got.stale_completers == want.stale_completers and got.barrier_gaps == want.barrier_gaps


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps (glibc)")
def test_large_blocks_come_from_the_heap_inside_and_from_mappings_after() -> None:
    def in_heap(a: np.ndarray) -> bool:
        address = a.__array_interface__["data"][0]
        for line in Path("/proc/self/maps").read_text().splitlines():
            span, *rest = line.split()
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= address < hi:
                return rest[-1] == "[heap]" if len(rest) >= 5 else False
        return False

    size = 64 << 20  # above glibc's largest mmap threshold (32 MB)
    if groupkeys.compiled() or fastreader.native_available():  # glibc builds: the setting applies
        with freed_memory_reused():
            with freed_memory_reused():
                pass
            inside = np.ones(size // 8, dtype=np.int64)  # nested: still on after the inner
        after = np.ones(size // 8, dtype=np.int64)
        assert in_heap(inside) and not in_heap(after)


@needs_kernels
def test_first_at_max_and_narrow_keys_as_numpy() -> None:
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 40, 30_000)
    values = rng.integers(0, 9, 30_000)  # many ties: the first row of the largest is asked for
    np.testing.assert_array_equal(
        groupkeys.first_at_max(ids, 43, values), _numpy(groupkeys.first_at_max, ids, 43, values)
    )
    for major_type, minor_type in ((np.int8, np.int32), (np.int16, np.int64), (np.int32, np.int8)):
        major = rng.integers(0, 100, 30_000).astype(major_type)
        minor = rng.integers(-100, 100, 30_000).astype(minor_type)
        got, want = groupkeys.group_ids(major, minor), _numpy(groupkeys.group_ids, major, minor)
        assert got[1] == want[1]
        np.testing.assert_array_equal(got[0], want[0])
    assert KERNELS is not None
    with pytest.raises(TypeError, match="signed"):
        KERNELS.ranged_ids(
            np.array([0], dtype=np.uint8), np.array([0]), 1, 10, np.zeros(1, dtype=np.int64)
        )
    with pytest.raises(TypeError, match="signed"):
        KERNELS.ranged_ids(np.array([0]), np.array([0.5]), 1, 10, np.zeros(1, dtype=np.int64))
    guarded = np.full(6, 9, dtype=np.int64)
    with pytest.raises(ValueError, match="outside"):
        KERNELS.first_at(np.array([0, 4]), np.array([1, 1]), np.array([1, 1, 1]), guarded[:3])
    assert (guarded[3:] == 9).all()


@needs_kernels
@pytest.mark.parametrize("width", [np.int8, np.int16, np.int32, np.int64])
def test_remap_into_as_numpy(width: type) -> None:
    rng = np.random.default_rng(9)
    remaps = [rng.permutation(50)[: int(k)].astype(np.int32) for k in rng.integers(1, 50, 40)]
    codes = [
        rng.integers(0, len(r), int(rng.integers(0, 300))).astype(
            rng.choice([np.int8, np.int16, np.int32])
        )
        for r in remaps
    ]
    total = sum(len(c) for c in codes)
    got, want = np.full(total + 3, 7, dtype=width), np.full(total + 3, 7, dtype=width)
    groupkeys.remap_into(codes, remaps, got[:total])
    _numpy(groupkeys.remap_into, codes, remaps, want[:total])
    np.testing.assert_array_equal(got, want)
    assert (got[total:] == 7).all()
    assert KERNELS is not None
    with pytest.raises(ValueError, match="outside its remap"):
        KERNELS.remap_into(
            [np.array([0, 5])], [np.arange(5, dtype=np.int32)], np.zeros(2, dtype=np.int8)
        )
    with pytest.raises(ValueError, match="outside its remap"):
        KERNELS.remap_into(
            [np.array([-1])], [np.arange(5, dtype=np.int32)], np.zeros(1, dtype=np.int8)
        )
    guarded = np.zeros(4, dtype=np.int16)
    with pytest.raises(ValueError, match="more values"):
        KERNELS.remap_into([np.array([0, 1, 2])], [np.arange(5, dtype=np.int32)], guarded[:2])
    assert not guarded[2:].any()
    with pytest.raises(TypeError, match="int32"):
        KERNELS.remap_into([np.array([0])], [np.arange(5)], np.zeros(1, dtype=np.int8))
    with pytest.raises(ValueError, match="as many"):
        KERNELS.remap_into([np.array([0])], [], np.zeros(1, dtype=np.int8))
    with pytest.raises(TypeError, match="signed"):
        KERNELS.remap_into(
            [np.array([0])], [np.arange(5, dtype=np.int32)], np.zeros(1, dtype=np.uint8)
        )
