"""Record real flight-recorder dumps from small gloo jobs on loopback.

Each scenario starts W worker processes that form a gloo job on 127.0.0.1, run a few
collectives and then misbehave in one planned way (a rank stalls, crashes, or issues a
different collective). PyTorch's own flight recorder is switched on for gloo with
``TORCH_FR_BUFFER_SIZE`` and every collective gets a short timeout, so the hang resolves in
seconds.

The dump protocol is the one the NCCL watchdog uses: a side TCPStore (separate from the job's
store) carries the key ``exception_dump``. A rank whose collective raises (timeout or peer
error) sets that key; every rank runs a daemon thread that polls the key and, on seeing it,
writes its own buffer with ``torch._C._distributed_c10d._dump_fr_trace`` (pickle, file
``nccl_trace_rank_<rank>``) or ``_dump_fr_trace_json`` (file ``rank_<rank>.json``). A stalled
rank's main thread sleeps while its polling thread dumps; a crashed rank exits before and
leaves no file.

The stores, the workers' environment, spawning and ending them and their logs, and the
dump handshake are :mod:`tools.launcher`'s, shared with ``tools/record_hook.py``.

Afterwards the parent rewrites machine-specific path prefixes in stack-frame file names
(``/opt/venv/lib/pythonX.Y/...`` for the interpreter, ``/jobs/hangscope`` for this repository)
and writes ``EXPECTED.json`` next to the dumps.

Usage (needs torch; run from the repository root)::

    python -m tools.record_gloo --out sample_dumps [--only NAME ...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import launcher
from tools.launcher import HOST, REPO_ROOT, TRIGGER_KEY

__all__ = [
    "HOST",
    "REPO_ROOT",
    "SCENARIOS",
    "TRIGGER_KEY",
    "Ctx",
    "Scenario",
    "load_dump",
    "record",
    "scrub_dump",
]

# Placeholders written instead of this machine's paths.
SCRUB_PY = f"/opt/venv/lib/python{sys.version_info.major}.{sys.version_info.minor}"
SCRUB_REPO = "/jobs/hangscope"

DEFAULT_TIMEOUT_S = 3.0  # collective timeout inside the job
STALL_S = 600.0  # a stalled rank sleeps this long (its process is ended long before)
RUN_DEADLINE_S = 90.0  # hard bound on one scenario run; stragglers are killed
DUMP_WAIT_S = 5.0  # how long a rank that dumped waits for the others before exiting


# --------------------------------------------------------------------------------------
# Safe loading (the dumps only ever hold plain containers and scalars)
# --------------------------------------------------------------------------------------


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # pragma: no cover - defensive
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def load_dump(path: Path) -> Any:
    """Load a pickle or JSON dump without running any code named in it."""
    data = path.read_bytes()
    if path.suffix == ".json":
        return json.loads(data)
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


# --------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What a scenario body gets inside a worker."""

    rank: int
    world: int
    timeout: Any  # datetime.timedelta
    side: Any  # side TCPStore client (main thread only)
    torch: Any
    dist: Any
    freeze_fn: Callable[[], None] | None = None
    # Steps of the op mix (``_op_mix_steps`` names) this backend cannot run: left out.
    skip_ops: frozenset[str] = frozenset()

    def t(self, n: int = 8, dtype: Any = None) -> Any:
        dtype = dtype if dtype is not None else self.torch.float32
        return self.torch.ones(n, dtype=dtype)

    def stall(self) -> None:
        """Stop making progress, like a rank stuck in compute or data loading."""
        time.sleep(STALL_S)

    def freeze(self) -> None:
        """Write this rank's buffer as it stands, then stop the whole process (SIGSTOP), like
        a host or driver that hangs with an op in flight. Nothing in the buffer changes while
        the process is stopped (what its dump would hold whenever it was taken); the recorder
        continues it once the other ranks dumped, and it then only reports its dump. The
        store key ``frozen_<rank>`` tells the other ranks it is stopped."""
        assert self.freeze_fn is not None
        self.freeze_fn()

    def crash(self) -> None:
        """Die hard, without running any cleanup and without dumping."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(17)

    def new_group(self, ranks: list[int], desc: str) -> Any:
        return self.dist.new_group(ranks=ranks, timeout=self.timeout, group_desc=desc)


@dataclass
class Scenario:
    name: str
    world: int
    body: Callable[[Ctx], None]
    culprits: list[int]
    kind: str
    description: str
    fmt: str = "pickle"
    hang: bool = True
    deadlock: bool = False
    # Ranks that write no dump in a correct recording: a rank that crashes on purpose, or one
    # that gloo itself aborts (a receiver of an oversized message dies in the transport).
    no_dump: tuple[int, ...] = ()
    buffer_size: int = 2000
    healthy: bool = False  # no fault: rank 0 triggers the dump after everyone finished
    # Where the dumps cannot show what was injected: what an honest analysis concludes
    # instead (verdict, culprits, kind) and why. Written to EXPECTED.json as "analyzer".
    analyzer: dict[str, Any] | None = None
    # Ranks that freeze (SIGSTOP themselves, like a hung host) right after enqueuing an op;
    # the recorder continues them once the other ranks dumped, so they dump too.
    freeze: tuple[int, ...] = ()


def _warmup(c: Ctx) -> None:
    """A few ordinary steps on the default group."""
    d = c.dist
    d.barrier()
    for _ in range(2):
        d.all_reduce(c.t())
    d.broadcast(c.t(), src=0)
    out = [c.t() for _ in range(c.world)]
    d.all_gather(out, c.t())
    d.all_reduce(c.t())


def _stall_w4(c: Ctx) -> None:
    _warmup(c)
    if c.rank == 1:
        c.stall()
    c.dist.all_reduce(c.t())


def _crash_w4(c: Ctx) -> None:
    _warmup(c)
    if c.rank == 2:
        c.crash()
    c.dist.all_reduce(c.t())


def _dtype_desync_w4(c: Ctx) -> None:
    _warmup(c)
    if c.rank == 3:
        c.dist.all_reduce(c.t(8, c.torch.int64))
    else:
        c.dist.all_reduce(c.t(8, c.torch.float32))
    c.dist.all_reduce(c.t())


def _size_desync_w4(c: Ctx) -> None:
    # A shorter tensor on the odd rank: every chunk gloo sends it is no bigger than what the
    # receiver expects, so nobody aborts (compare crash_size_w4).
    _warmup(c)
    c.dist.all_reduce(c.t(4 if c.rank == 0 else 8))
    c.dist.all_reduce(c.t())


def _op_desync_w4(c: Ctx) -> None:
    _warmup(c)
    if c.rank == 2:
        c.dist.broadcast(c.t(), src=0)
    else:
        c.dist.all_reduce(c.t())
    c.dist.all_reduce(c.t())


def _healthy_w4(c: Ctx) -> None:
    _warmup(c)
    for _ in range(3):
        c.dist.all_reduce(c.t())
    c.dist.barrier()


def _make_tp_dp(c: Ctx) -> tuple[Any, Any]:
    """TP pairs {0,1},{2,3},... and DP groups {0,2,4,..},{1,3,5,..}; every rank creates all."""
    tp = dp = None
    for i in range(0, c.world, 2):
        g = c.new_group([i, i + 1], "TENSOR_MODEL_PARALLEL_GROUP")
        if c.rank in (i, i + 1):
            tp = g
    for j in range(2):
        g = c.new_group(list(range(j, c.world, 2)), "DATA_PARALLEL_GROUP")
        if c.rank % 2 == j:
            dp = g
    return tp, dp


def _tp_dp_w8_json(c: Ctx) -> None:
    tp, dp = _make_tp_dp(c)
    c.dist.barrier()
    for step in range(3):
        if step == 2 and c.rank == 5:
            c.stall()
        c.dist.all_reduce(c.t(), group=tp)
        c.dist.all_reduce(c.t(), group=dp)


def _chain_tp_dp_w8(c: Ctx) -> None:
    tp, dp = _make_tp_dp(c)
    c.dist.barrier()
    for step in range(3):
        c.dist.all_reduce(c.t(), group=tp)
        c.dist.all_reduce(c.t(), group=dp)
        if step == 1 and c.rank == 3:
            c.stall()  # after a DP all_reduce, before the next TP one


def _ring_wrap_w4(c: Ctx) -> None:
    # Ranks 0 and 1 also run extra all_reduces on their pair group, so their 16-entry windows
    # reach less far back into the world group's history than ranks 2 and 3 do.
    pair01 = c.new_group([0, 1], "pair01")
    c.new_group([2, 3], "pair23")
    for step in range(60):
        c.dist.all_reduce(c.t())
        if step % 4 == 3 and c.rank in (0, 1):
            c.dist.all_reduce(c.t(), group=pair01)
    if c.rank == 2:
        c.stall()
    c.dist.all_reduce(c.t())


def _deadlock_w4(c: Ctx) -> None:
    b = c.new_group(list(range(c.world)), "group_b")
    _warmup(c)
    c.dist.all_reduce(c.t(), group=b)
    if c.rank == 3:
        c.dist.all_reduce(c.t(), group=b)  # B first ...
        c.dist.all_reduce(c.t())  # ... then A
    else:
        c.dist.all_reduce(c.t())  # A first ...
        c.dist.all_reduce(c.t(), group=b)  # ... then B


def _p2p_unrecorded_w2(c: Ctx) -> None:
    d = c.dist
    peer = 1 - c.rank

    def exchange(n: int) -> None:
        for _ in range(n):
            if c.rank == 0:
                d.send(c.t(), dst=peer)
                d.recv(c.t(), src=peer)
            else:
                d.recv(c.t(), src=peer)
                d.send(c.t(), dst=peer)

    d.barrier()
    d.all_reduce(c.t())
    exchange(3)  # six unrecorded ops: the next all_reduce's op_id jumps past them
    d.all_reduce(c.t())
    exchange(2)
    # Rank 1 stalls before the recv that matches rank 0's next send; nothing recorded follows.
    if c.rank == 1:
        c.stall()
        d.recv(c.t(), src=peer)
    else:
        d.send(c.t(), dst=peer)
        d.recv(c.t(), src=peer)


def _crash_size_w4(c: Ctx) -> None:
    # A longer tensor on the odd rank: its peer receives a chunk larger than it posted and
    # gloo's transport aborts that peer (std::terminate on an EnforceNotMet).
    _warmup(c)
    c.dist.all_reduce(c.t(12 if c.rank == 0 else 8))
    c.dist.all_reduce(c.t())


def _size_desync_pair_w4(c: Ctx) -> None:
    # TP pairs {0,1},{2,3}: rank 2 all_reduces 12 elements in its pair where it always posted 8.
    # gloo aborts its peer 3 (it receives more than it posted): the odd rank's own dump is the
    # only witness, and nobody else is in that group to compare with.
    tp, dp = _make_tp_dp(c)
    c.dist.barrier()
    for step in range(3):
        n = 12 if step == 2 and c.rank == 2 else 8
        c.dist.all_reduce(c.t(n), group=tp)
        c.dist.all_reduce(c.t(), group=dp)


def _crash_tp_w8(c: Ctx) -> None:
    # Rank 7, the last rank, exits hard between a data-parallel all_reduce and the next
    # tensor-parallel one: nothing any other rank writes names it (gloo 2.13 writes no
    # pg_config), and its tensor-parallel peer 6 fails in an all_reduce nobody else is in.
    tp, dp = _make_tp_dp(c)
    c.dist.barrier()
    for step in range(3):
        c.dist.all_reduce(c.t(), group=tp)
        c.dist.all_reduce(c.t(), group=dp)
        if step == 1 and c.rank == 7:
            c.crash()


def _monitored_barrier_stall_w4(c: Ctx) -> None:
    # monitored_barrier runs as gloo send/recv, which the recorder does not record: rank 2
    # stalls before it, rank 0 times out waiting for rank 2's message, and no recorded op is
    # pending anywhere.
    _warmup(c)
    if c.rank == 2:
        c.stall()
    c.dist.monitored_barrier(timeout=c.timeout)
    c.dist.all_reduce(c.t())


# --------------------------------------------------------------------------------------
# The op mix: collectives whose recorded sides and sizes differ per rank by design
# --------------------------------------------------------------------------------------


def _op_mix_steps(c: Ctx) -> list[tuple[str, Callable[[], None]]]:
    """One call of every op whose entries differ between ranks by design, in a fixed order."""
    d, w, r, torch = c.dist, c.world, c.rank, c.torch
    last = w - 1

    def gather() -> None:  # only the root records outputs
        d.gather(c.t(), [c.t() for _ in range(w)] if r == 0 else None, dst=0)

    def scatter() -> None:  # only the source records inputs
        d.scatter(c.t(), [c.t() for _ in range(w)] if r == last else None, src=last)

    def all_to_all_single() -> None:  # uneven splits: rank r sends r + 1 elements to everyone
        out_splits = [q + 1 for q in range(w)]
        d.all_to_all_single(
            torch.ones(sum(out_splits)),
            torch.ones((r + 1) * w),
            output_split_sizes=out_splits,
            input_split_sizes=[r + 1] * w,
        )

    def all_to_all() -> None:  # gloo wants one size for every tensor of the list form
        d.all_to_all([c.t(4) for _ in range(w)], [c.t(4) for _ in range(w)])

    def broadcast_object_list() -> None:
        objs: list[Any] = [{"step": 1, "note": "x" * 40}] if r == 0 else [None]
        d.broadcast_object_list(objs, src=0)

    def all_gather_object() -> None:  # objects of per-rank sizes
        out: list[Any] = [None] * w
        d.all_gather_object(out, "y" * (r * 50 + 1))

    def gather_object() -> None:
        out = [None] * w if r == 0 else None
        d.gather_object("z" * (r * 30 + 1), out, dst=0)

    def scatter_object_list() -> None:
        out: list[Any] = [None]
        d.scatter_object_list(
            out, ["w" * (q * 20 + 1) for q in range(w)] if r == 0 else None, src=0
        )

    def reduce_scatter() -> None:  # gloo: one all_reduce per output
        d.reduce_scatter(c.t(), [c.t() for _ in range(w)])

    def reduce_scatter_tensor() -> None:  # gloo: one all_reduce of the whole input
        d.reduce_scatter_tensor(c.t(), c.t(8 * w))

    def all_gather_into_tensor() -> None:  # one [world, n] output
        d.all_gather_into_tensor(torch.ones(w, 8), torch.ones(1, 8))

    def all_gather() -> None:
        d.all_gather([c.t() for _ in range(w)], c.t())

    def monitored_barrier() -> None:  # send/recv inside gloo: no entry, seq gaps
        d.monitored_barrier(timeout=c.timeout)

    def monitored_barrier_all() -> None:
        d.monitored_barrier(timeout=c.timeout, wait_all_ranks=True)

    return [
        ("gather", gather),
        ("scatter", scatter),
        ("reduce", lambda: d.reduce(c.t(), dst=0)),
        ("broadcast", lambda: d.broadcast(c.t(), src=1)),
        ("all_to_all_single", all_to_all_single),
        ("all_to_all", all_to_all),
        ("broadcast_object_list", broadcast_object_list),
        ("all_gather_object", all_gather_object),
        ("gather_object", gather_object),
        ("scatter_object_list", scatter_object_list),
        ("reduce_scatter", reduce_scatter),
        ("reduce_scatter_tensor", reduce_scatter_tensor),
        ("all_gather_into_tensor", all_gather_into_tensor),
        ("all_gather", all_gather),
        ("barrier", d.barrier),
        ("monitored_barrier", monitored_barrier),
        ("monitored_barrier_all", monitored_barrier_all),
        ("all_reduce", lambda: d.all_reduce(c.t())),
    ]


def _op_mix(c: Ctx, *, stall_rank: int = -1, stall_before: str = "") -> None:
    for name, step in _op_mix_steps(c):
        if name in c.skip_ops:
            continue
        if c.rank == stall_rank and name == stall_before:
            c.stall()
        step()


def _opmix_healthy_w4(c: Ctx) -> None:
    c.dist.barrier()
    _op_mix(c)
    _op_mix(c)


def _opmix_stall_w4(c: Ctx) -> None:
    # One full round (monitored barriers included), then rank 2 stalls before the gather
    # that opens the second round: the others enqueue it (only the root with outputs).
    c.dist.barrier()
    _op_mix(c)
    _op_mix(c, stall_rank=2, stall_before="gather")


def _opmix_stall_object_w4(c: Ctx) -> None:
    # Rank 1 stalls before scatter_object_list, which gloo records as three ops.
    c.dist.barrier()
    _op_mix(c, stall_rank=1, stall_before="scatter_object_list")


def _opmix_stuck_w4(c: Ctx) -> None:
    # After a full round, rank 3 enqueues an all_reduce and its process freezes inside it
    # (SIGSTOP, like a hung host or driver); the others enqueue it once rank 3 is frozen (so
    # it cannot complete) and time out in it.
    c.dist.barrier()
    _op_mix(c)
    if c.rank == 3:
        work = c.dist.all_reduce(c.t(), async_op=True)
        c.freeze()
        work.wait()
    else:
        c.side.wait(["frozen_3"])
        time.sleep(0.2)  # rank 3 stops
        c.dist.all_reduce(c.t())


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "stall_w4",
            4,
            _stall_w4,
            [1],
            "not_joined",
            "Rank 1 stalls in compute before the 7th collective, an all_reduce, after "
            "barrier/all_reduce/broadcast/all_gather steps; ranks 0, 2 and 3 enqueue it and "
            "time out in it.",
        ),
        Scenario(
            "crash_w4",
            4,
            _crash_w4,
            [2],
            "missing_dump",
            "Rank 2 exits hard before the 7th collective, an all_reduce, and writes no dump; "
            "ranks 0, 1 and 3 fail in that all_reduce with connection errors and dump.",
            no_dump=(2,),
        ),
        Scenario(
            "dtype_desync_w4",
            4,
            _dtype_desync_w4,
            [3],
            "dtype_mismatch",
            "Rank 3 all_reduces an int64 tensor where ranks 0, 1 and 2 all_reduce float32 of "
            "the same length; gloo aborts rank 2 when it receives rank 3's oversized chunk, so "
            "rank 2 (a victim, not the culprit) leaves no dump.",
            no_dump=(2,),
        ),
        Scenario(
            "size_desync_w4",
            4,
            _size_desync_w4,
            [0],
            "size_mismatch",
            "Rank 0 all_reduces a 4-element tensor where ranks 1, 2 and 3 all_reduce 8 "
            "elements; no rank crashes, rank 0 completes its short all_reduce and enqueues the "
            "next one while ranks 1, 2 and 3 time out in the mismatched one.",
        ),
        Scenario(
            "op_desync_w4",
            4,
            _op_desync_w4,
            [2],
            "op_mismatch",
            "Rank 2 calls broadcast where ranks 0, 1 and 3 call all_reduce as the 7th "
            "collective; all four time out in it and dump.",
        ),
        Scenario(
            "healthy_w4",
            4,
            _healthy_w4,
            [],
            "no_hang",
            "No fault: every rank finishes its collectives and rank 0 then asks all ranks to dump.",
            hang=False,
            healthy=True,
        ),
        Scenario(
            "tp_dp_w8_json",
            8,
            _tp_dp_w8_json,
            [5],
            "not_joined",
            "8 ranks in tensor-parallel pairs and two data-parallel groups; rank 5 stalls "
            "before its 3rd tensor-parallel all_reduce, so rank 4 waits in TP and ranks 0, 2 "
            "and 6 wait in DP on rank 4 (JSON dumps, which carry no stack frames).",
            fmt="json",
        ),
        Scenario(
            "chain_tp_dp_w8",
            8,
            _chain_tp_dp_w8,
            [3],
            "not_joined",
            "Same topology as tp_dp_w8_json in pickle; rank 3 stalls after its 2nd "
            "data-parallel all_reduce and before its 3rd tensor-parallel one, so rank 2 waits "
            "in TP and ranks 0, 4 and 6 wait in DP on rank 2.",
        ),
        Scenario(
            "ring_wrap_w4",
            4,
            _ring_wrap_w4,
            [2],
            "not_joined",
            "A 16-entry ring buffer and 60 world all_reduces (ranks 0 and 1 also run 15 on "
            "their pair group) before rank 2 stalls, so each rank holds a different window and "
            "ranks 0 and 1 keep less of the world group's history.",
            buffer_size=16,
        ),
        Scenario(
            "deadlock_w4",
            4,
            _deadlock_w4,
            [3],
            "deadlock",
            "Ranks 0, 1 and 2 all_reduce on the default group and then on group_b while rank "
            "3 does group_b first, so each side waits for the other: a cycle.",
            deadlock=True,
        ),
        Scenario(
            "p2p_unrecorded_w2",
            2,
            _p2p_unrecorded_w2,
            [1],
            "unrecorded_ops",
            "Two ranks exchange send/recv, which gloo does not record (only the op_id gap of "
            "the next all_reduce shows them), and rank 1 stalls before the recv that rank 0's "
            "next send waits on, so the stuck op is in no buffer.",
            analyzer={
                "verdict": "inconclusive",
                "culprits": [],
                "kind": "unrecorded_ops",
                "why": (
                    "Both dumps are identical: gloo records no send/recv and its pg_status "
                    "counters do not move for them, so the stuck send and the missing recv are "
                    "in no buffer. The op_id gap of the last all_reduce is the only trace; an "
                    "honest analysis reports the unrecorded ops and cannot name rank 1."
                ),
            },
        ),
        Scenario(
            "crash_size_w4",
            4,
            _crash_size_w4,
            [0],
            "size_mismatch",
            "Rank 0 all_reduces a 12-element tensor where ranks 1, 2 and 3 all_reduce 8; gloo "
            "aborts rank 3 when it receives rank 0's oversized chunk, so rank 3 (a victim, not "
            "the culprit) leaves no dump.",
            no_dump=(3,),
        ),
        Scenario(
            "size_desync_pair_w4",
            4,
            _size_desync_pair_w4,
            [2],
            "size_mismatch",
            "TP pairs {0,1}, {2,3} and DP groups {0,2}, {1,3}. In the third step rank 2 "
            "all_reduces 12 elements in its TP pair where it always posted 8; gloo aborts its "
            "peer 3, which leaves no dump. Rank 2's own history is the only witness of the "
            "change; ranks 0 and 1 wait for 2 and 3 in the DP all_reduce.",
            no_dump=(3,),
            analyzer={
                "verdict": "inconclusive",
                "culprits": [2, 3],
                "kind": "missing_dump",
                "why": (
                    "The group has two members and one wrote no dump: rank 2 changed its size "
                    "(8 -> 12) in the op its peer died in, so either a desync by rank 2 aborted "
                    "rank 3, or rank 3 crashed on its own. Both are suspects."
                ),
            },
        ),
        Scenario(
            "opmix_healthy_w4",
            4,
            _opmix_healthy_w4,
            [],
            "no_hang",
            "No fault: two rounds of gather, scatter, reduce, broadcast, uneven "
            "all_to_all_single, all_to_all, the object collectives, reduce_scatter (list and "
            "tensor), all_gather_into_tensor, all_gather, barrier and monitored_barrier (with and "
            "without wait_all_ranks), then rank 0 asks all ranks to dump. Sides and sizes "
            "differ between ranks by design.",
            hang=False,
            healthy=True,
        ),
        Scenario(
            "opmix_stall_w4",
            4,
            _opmix_stall_w4,
            [2],
            "not_joined",
            "One round of the op mix of opmix_healthy_w4, then rank 2 stalls before the "
            "gather that opens the second round. Rank 0, the root, waits in the gather; ranks"
            " 1 and 3, whose part of a gather is a send, finish it and go on: rank 3, the "
            "source, into the scatter, and rank 1 through the scatter into the reduce (root "
            "0), where they time out.",
        ),
        Scenario(
            "opmix_stall_object_w4",
            4,
            _opmix_stall_object_w4,
            [1],
            "not_joined",
            "The op mix of opmix_healthy_w4 up to scatter_object_list, before which rank 1 "
            "stalls. Its first op is a Long broadcast from rank 0: ranks 0 and 3 wait in it, "
            "rank 2 receives it and goes on into the Byte scatter, where it times out.",
        ),
        Scenario(
            "opmix_stuck_w4",
            4,
            _opmix_stuck_w4,
            [3],
            "stuck_in_collective",
            "One round of the op mix, then rank 3 enqueues an all_reduce, writes its buffer as "
            "it stands and its process freezes inside the op (SIGSTOP, a hung host) until the "
            "others dumped; ranks 0, 1 and 2 enqueue the all_reduce after that and time out in "
            "it. Every member joined; rank 3's entry is the one that never timed out.",
            freeze=(3,),
        ),
        Scenario(
            "crash_tp_w8",
            8,
            _crash_tp_w8,
            [7],
            "missing_dump",
            "Same topology as chain_tp_dp_w8; rank 7, the last rank, exits hard after its 2nd "
            "data-parallel all_reduce and before its 3rd tensor-parallel one and writes no "
            "dump. Its tensor-parallel peer 6 fails in that all_reduce; ranks 1, 3 and 5 wait "
            "for rank 7 in the data-parallel all_reduce and ranks 0, 2 and 4 on their "
            "tensor-parallel peers. With gloo 2.13 (no pg_config) no file names rank 7.",
            no_dump=(7,),
        ),
        Scenario(
            "monitored_barrier_stall_w4",
            4,
            _monitored_barrier_stall_w4,
            [2],
            "unrecorded_ops",
            "Rank 2 stalls before a monitored_barrier, which gloo runs as send/recv that the "
            "recorder does not record; rank 0 times out waiting for rank 2, ranks 1 and 3 wait "
            "for rank 0's answer. No recorded op is pending anywhere.",
            analyzer={
                "verdict": "no_hang",
                "culprits": [],
                "kind": "no_hang",
                "why": (
                    "The stuck barrier is in no buffer and moves no counter: gloo records no "
                    "send/recv, and monitored_barrier is send/recv. Every recorded op completed, "
                    "so the honest answer is 'no hang among the recorded ops', with the caveat "
                    "the headline carries: a hang inside a send/recv leaves these same dumps."
                ),
            },
        ),
    ]
}


# --------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------


def _dump_path(out_dir: Path, rank: int, fmt: str) -> Path:
    return out_dir / (f"rank_{rank}.json" if fmt == "json" else f"nccl_trace_rank_{rank}")


def _worker(cfg: dict[str, Any]) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    scen = SCENARIOS[cfg["scenario"]]
    rank, world = cfg["rank"], scen.world
    out_dir = Path(cfg["out_dir"])
    expected_dumpers = world - len(scen.no_dump)
    log = launcher.logger(rank)

    written = threading.Event()  # a frozen rank wrote its buffer before it froze

    def write_dump() -> None:
        if scen.fmt == "json":
            data = _dump_fr_trace_json(includeCollectives=True, onlyActive=False)
        else:
            data = _dump_fr_trace(
                includeCollectives=True, includeStackTraces=True, onlyActive=False
            )
        path = _dump_path(out_dir, rank, scen.fmt)
        launcher.write_atomically(path, data)
        log(f"wrote {path.name} ({len(data)} bytes)")

    def freeze_now() -> None:
        import signal

        write_dump()
        written.set()
        side.set(f"frozen_{rank}", "1")  # the others may go on: nothing here moves any more
        log("freezing (SIGSTOP)")
        os.kill(os.getpid(), signal.SIGSTOP)
        log("continued")

    def poller() -> None:
        side = launcher.store_client(cfg["side_port"], world)
        launcher.wait_for_trigger(side)
        log(f"saw {TRIGGER_KEY} (set by rank {side.get(TRIGGER_KEY).decode()}); dumping")
        if written.is_set():
            log("buffer already written before freezing")
        else:
            write_dump()
        launcher.linger_and_exit(side, expected_dumpers, DUMP_WAIT_S)

    job_store = launcher.store_client(cfg["job_port"], world)
    timeout = timedelta(seconds=cfg["timeout_s"])
    dist.init_process_group("gloo", store=job_store, rank=rank, world_size=world, timeout=timeout)
    threading.Thread(target=poller, name="fr-dump-poller", daemon=True).start()
    side = launcher.store_client(cfg["side_port"], world)
    ctx = Ctx(
        rank=rank,
        world=world,
        timeout=timeout,
        side=side,
        torch=torch,
        dist=dist,
        freeze_fn=freeze_now,
    )
    try:
        scen.body(ctx)
        log("scenario body finished")
        if scen.healthy:
            launcher.finish_healthy(side, rank, world)
    except Exception as exc:  # noqa: BLE001 - a collective timed out or failed
        first = side.add("errors", 1) == 1
        if first:
            side.set("first_error_rank", str(rank))
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        side.set(f"error_{rank}", f"{'first ' if first else ''}{msg}")
        log(f"collective failed ({'first' if first else 'not first'}): {msg}")
        side.set(TRIGGER_KEY, str(rank))
    # The polling thread dumps and ends the process.
    time.sleep(STALL_S)


# --------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------


def _scrub_prefixes() -> list[tuple[str, str]]:
    """(machine prefix, placeholder) pairs, longest first."""
    pairs: dict[str, str] = {}
    for key in ("purelib", "platlib"):
        pairs[sysconfig.get_paths()[key]] = f"{SCRUB_PY}/site-packages"
    pairs[sysconfig.get_paths()["stdlib"]] = SCRUB_PY
    pairs[str(REPO_ROOT)] = SCRUB_REPO
    # Resolved variants too (symlinked venvs or checkouts).
    for k, v in list(pairs.items()):
        pairs.setdefault(os.path.realpath(k), v)
    return sorted(pairs.items(), key=lambda kv: len(kv[0]), reverse=True)


def _scrub_name(name: str, prefixes: list[tuple[str, str]]) -> str:
    for old, new in prefixes:
        if name == old or name.startswith(old.rstrip("/") + "/"):
            return new + name[len(old.rstrip("/")) :]
    return name


def scrub_dump(path: Path) -> bool:
    """Rewrite frame file names in a dump, keeping its format. Returns True if changed."""
    prefixes = _scrub_prefixes()
    obj = load_dump(path)
    changed = False
    # Reuse one string object per new name so pickle's memo shares it, as the original did.
    cache: dict[str, str] = {}
    for entry in obj.get("entries", []) if isinstance(obj, dict) else []:
        for frame in entry.get("frames") or []:
            fn = frame.get("filename")
            if isinstance(fn, str):
                new = cache.setdefault(fn, _scrub_name(fn, prefixes))
                if new != fn:
                    frame["filename"] = new
                    changed = True
    if changed:
        if path.suffix == ".json":
            path.write_text(json.dumps(obj, separators=(",", ":")))
        else:
            # The C++ writer uses protocol 2; keep it.
            path.write_bytes(pickle.dumps(obj, protocol=2))
    return changed


def _continue_after_dumps(
    scen: Scenario, side_store: Any, procs: list[Any], deadline: float
) -> None:
    """Continue the frozen ranks (SIGCONT) once every other rank that can dump has dumped."""
    import signal

    others = scen.world - len(scen.no_dump) - len(scen.freeze)

    def watch() -> None:
        while time.monotonic() < deadline:
            if side_store.check(["dumped"]) and side_store.add("dumped", 0) >= others:
                break
            time.sleep(0.05)
        for rank in scen.freeze:
            if procs[rank].poll() is None:
                os.kill(procs[rank].pid, signal.SIGCONT)

    threading.Thread(target=watch, name="continue-frozen", daemon=True).start()


def _run_once(scen: Scenario, out_dir: Path, timeout_s: float, log_dir: Path) -> dict[str, Any]:
    """Run the scenario's workers once; return what happened."""
    launcher.fresh_dirs(out_dir)
    job_store = launcher.free_store(scen.world)
    side_store = launcher.free_store(scen.world)
    started = time.monotonic()
    cfgs = [
        {
            "scenario": scen.name,
            "rank": rank,
            "out_dir": str(out_dir),
            "job_port": job_store.port,
            "side_port": side_store.port,
            "timeout_s": timeout_s,
        }
        for rank in range(scen.world)
    ]
    workers = launcher.spawn(
        "tools.record_gloo", cfgs, log_dir, launcher.worker_env(scen.buffer_size)
    )
    deadline = started + RUN_DEADLINE_S
    if scen.freeze:
        _continue_after_dumps(scen, side_store, [w.proc for w in workers], deadline)
    codes = launcher.wait_all(workers, deadline)  # None: a straggler killed by the recorder
    errors = {r: launcher.side_value(side_store, f"error_{r}") for r in range(scen.world)}
    launcher.remove_partial(out_dir)
    return {
        "scenario": scen.name,
        "elapsed_s": round(time.monotonic() - started, 1),
        "exit_codes": codes,
        "first_error_rank": launcher.side_value(side_store, "first_error_rank"),
        "errors": {r: e for r, e in errors.items() if e is not None},
        "dumped_ranks": sorted(
            r for r in range(scen.world) if _dump_path(out_dir, r, scen.fmt).exists()
        ),
        "logs": str(log_dir),
    }


def record(
    name: str,
    out_root: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    log_dir: Path | None = None,
    attempts: int = 3,
    verbose: bool = True,
    suffix: str = "",
) -> dict[str, Any]:
    """Run one scenario and write its dumps and EXPECTED.json under out_root/name.

    A run counts when exactly the planned ranks dumped; otherwise it is repeated (up to
    ``attempts`` times) and then reported as an error. ``suffix`` is appended to the
    directory and scenario names (e.g. ``_t215`` for a recording with another torch).
    """
    import torch

    scen = SCENARIOS[name]
    out_dir = out_root / (name + suffix)
    want = sorted(set(range(scen.world)) - set(scen.no_dump))
    log_root = log_dir or Path(tempfile.mkdtemp(prefix=f"record_gloo_{name}_"))
    summary: dict[str, Any] = {}
    for attempt in range(1, attempts + 1):
        summary = _run_once(scen, out_dir, timeout_s, log_root / f"attempt{attempt}")
        summary["attempt"] = attempt
        if verbose:
            print(json.dumps(summary, indent=1, default=str), flush=True)
        if summary["dumped_ranks"] == want:
            break
        print(
            f"{name}: dumped {summary['dumped_ranks']}, wanted {want}; "
            f"{'retrying' if attempt < attempts else 'giving up'}",
            file=sys.stderr,
        )
    else:
        raise RuntimeError(f"{name}: no run dumped exactly ranks {want}; see {log_root}")
    dumped = summary["dumped_ranks"]
    for r in dumped:
        path = _dump_path(out_dir, r, scen.fmt)
        scrub_dump(path)
        load_dump(path)  # must load with the no-globals unpickler
    expected = {
        "scenario": name + suffix,
        "world": scen.world,
        "torch": torch.__version__,
        "backend": "gloo",
        "format": scen.fmt,
        "dumped_ranks": dumped,
        "hang": scen.hang,
        "culprits": list(scen.culprits),
        "kind": scen.kind,
        "deadlock": scen.deadlock,
        "description": scen.description,
    }
    if scen.analyzer is not None:
        expected["analyzer"] = scen.analyzer
    (out_dir / "EXPECTED.json").write_text(json.dumps(expected, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("sample_dumps"))
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(SCENARIOS))
    ap.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="collective timeout in seconds (default %(default)s)",
    )
    ap.add_argument("--log-dir", type=Path, help="keep worker logs here")
    ap.add_argument(
        "--suffix", default="", help="append to each scenario's directory and name (e.g. _t215)"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    return launcher.record_each(
        args.only or list(SCENARIOS),
        lambda name: record(
            name,
            args.out,
            timeout_s=args.timeout,
            log_dir=(args.log_dir / name) if args.log_dir else None,
            suffix=args.suffix,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
