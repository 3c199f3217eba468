"""Generator 2's draw: generator 1's axes and five more, for seeds from :data:`V2_FIRST_SEED`.

Seeds below it draw exactly what they drew before (:func:`tools.corpus.spec.draw`), so the
committed cases regenerate the same. From it on a case may also have:

* **context parallel**: a CP degree of 2 in the topology (global rank
  ``((d * cp + c) * pp + p) * tp + t``), CP groups of the ranks that differ only in ``c``,
  and CP ops in the step: the KV ``all_gather_into_tensor``, a ring exchange of blocking
  send/recv, a CP ``all_reduce``;
* **an eval pass** after some steps: forward-only collectives (TP all_reduce, CP and FSDP
  all_gather, the pipeline's forward send/recv), then the metric's all_reduce over DP (the
  world without DP), no backward; a fault may sit inside it;
* **monitored_barrier** (gloo only): ``torch.distributed.monitored_barrier`` with the job's
  timeout, often the op a stall or crash comes before (rank 0 then fails naming the rank);
* **a restart's older folder**: the same job run once before with another fault (a stall or a
  crash); its dumps go to ``attempt_0/`` and this run's to ``attempt_1/`` (gloo only below
  :data:`RESTART_FIRST_SEED`; from it on every recorder, and an **elastic restart** some of
  the time: the older attempt ran with twice or half the ranks, more DP replicas or fewer,
  so that ``attempt_0/`` holds files of ranks the newest attempt does not have, or lacks
  some it has);
* **TorchComms' recorder** (``torchcomms``): the same gloo ops recorded by
  :mod:`tools.torchcomms_fr` through :mod:`tools.corpus.comms`, for the stalls, crashes,
  desyncs, deadlocks, two faults and healthy or slow runs;
* **mixed recorders per rank** (seeds from :data:`CPU_FIRST_SEED`, the recorder hook only):
  some groups on gloo beside the nccl2 ones, as a GPU job keeps its CPU groups (the
  checkpoint's ``broadcast_object_list`` on a gloo copy of the world, the DP group's gloo
  copy), so that each rank writes two files from two recorders: c10d's own
  (``nccl_trace_rank_<r>``, the gloo groups) and the hook's (``nccl2_trace_rank_<r>``...).
  It is drawn from a random stream of its own, so the seeds below it draw what they drew;
* **TorchComms on CUDA** (seeds from :data:`CUDA_FIRST_SEED`, about half the ``torchcomms``
  cases, name tag ``_cuda``): the dumps as TorchComms writes them on CUDA (backend ``nccl``
  in the profiling names and ``pg_config``, every issued op retired with its state read at
  issue), and ``stuck_in_collective`` may be drawn for them; from the same seed on, every
  ``torchcomms`` case may have the pipeline's ``batch_isend_irecv``, recorded as TorchComms'
  one ``batch_op_issue`` entry;
* **repeated snapshots** (seeds from :data:`CUDA_FIRST_SEED`, gloo's recorder and
  TorchComms', name tag ``_snap``): every rank that dumps writes its buffer a second time
  some seconds later, into ``dumps_<ts>/`` under the same name (a second signal, an interval
  dump), but some ranks whose newer snapshot is lost.
Both are drawn from streams of their own.

* **a periodic dump** (seeds from :data:`PERIODIC_FIRST_SEED`, gloo's recorder, the hook's
  and TorchComms', without a restart, name tag ``_periodic``; a stream of its own): every
  rank writes its buffer once while the job still runs (after a step before the fault's,
  as a debug server's ``dump_interval`` or a cron'd signal would) into ``dumps_<ts1>/``;
  the dumps after the hang go to ``dumps_<ts2>/`` (newer), where in half the cases the
  newer file of 1 to W/2 ranks is missing (the process died, the file was lost).
* **several interval rounds** (seeds from :data:`ROUNDS_FIRST_SEED`, every recorder,
  without a restart, name tag ``_rounds``; a stream of its own, drawn in place of a
  periodic dump): 2 or 3 rounds before the hang, each after a different step and in its
  own ``dumps_<ts>/``, taken in the middle of the step: each rank's own dump thread writes
  its buffer just after the rank reached a point of its own in the step (before one of
  the step's ops, or after the last), where the rank computes 0 to 0.5 s (uneven) and
  goes on into its ops, so that the ranks are caught at different ops, some inside an op
  in flight (no barrier lines them up); the round of
  the hang lacks the files of the ranks that crashed before it (a stall is turned into a
  crash some of the time) and, in some cases, of 1 to W/2 ranks whose file was lost.
* **late and skipped rounds, and the hang's round by the timer** (seeds from
  :data:`LATE_FIRST_SEED`, in most of the cases that draw interval rounds, name tag
  ``_late``; a stream of its own): 1 to W/2 ranks skip an interval round (their dump thread
  wrote none), 1 to W/2 ranks' file of a round lands in the next round's folder (taken at
  the round, written an interval late: none of their own there), and, for hangs, the
  hang's round written by an interval timer rather than by a watchdog or the rank's own
  failure: every rank's dump thread writes at every tick after the last round, so that
  rounds are taken while the ranks are hung (ops in flight), after their ops failed, and
  a rank that made no progress writes the same bytes again; from
  :data:`LATE_RESTART_FIRST_SEED` on, for gloo's recorder and TorchComms', a restart's
  older folder (``attempt_0/``, an attempt without rounds) beside this run's rounds in
  ``attempt_1/``.
* **wide worlds** (seeds :data:`WIDE_FIRST_SEED` to :data:`WIDE_END_SEED` - 1, every recorder
  and fault class, name tag ``_wide``; a stream of its own): the topology redrawn with a
  world of 8, 12 or 16 ranks in shapes a real job uses (``tp2 cp2 pp2 dp2``, ``tp4 pp2
  dp2``, ``tp2 pp4 dp2``, ``tp1 pp2 dp8`` with HSDP, ``tp2 cp2 dp3``...), HSDP drawn where
  the DP degree is even and 4 or more, the job's timeout scaled with the world
  (:data:`TIMEOUTS`); the other axes combine with it as they draw (a restart of 16 ranks
  may be elastic, its older attempt of 8).
* **the debug server's folder** (seeds :data:`DEBUGSRV_FIRST_SEED` to
  :data:`DEBUGSRV_LAST_SEED`, torch 2.15 only, name tag ``_debugsrv``; a stream of its own,
  ``hangscope-corpus-2-debugsrv-<torch>-<seed>``, that draws the whole case in place of the
  main stream): TorchComms' recorder over gloo (gloo's own c10d recorder under it, which the
  server's ``fr_trace`` and ``c10d_health_check`` ask), 4 or 8 ranks, any fault class but a
  frozen rank (stalls, crashes, desyncs, deadlocks, two faults, healthy and slow runs), the
  job running torch 2.15's real debug server (:mod:`tools.corpus.debugsrv`: every rank a
  worker server, rank 0 the frontend and its periodic dumper, a dump interval of 1, 2 or 4 s,
  started at the start of a step up to the fault's, so that its first round lands during
  the steps before the fault or just after it), TorchComms' three handlers registered as
  :mod:`tools.record_debug_server` does (:mod:`tools.debug_server`). The case's folder is
  the server's ``dump_dir`` after the hang (``stacks_<ts>.txt``,
  ``torchcomms_fr_trace_<ts>.txt``, the health checks, ``per_rank/rank_<r>`` written by the
  tutorial's timeout handler and by the health check's dump; no other file). The culprit is
  rank 0, the frontend's process, in about a third of the cases; in half of the hangs 1 to
  W/2 other ranks exit after their op failed, before the frontend's last round (its files
  then start ``PARTIAL DATA``; rank 0's exit ends the frontend).
* **the recorder hook's dumps as JSON** (seeds :data:`HOOKJSON_FIRST_SEED` to
  :data:`HOOKJSON_LAST_SEED`, torch 2.15 only, name tag ``_hookjson``; a stream of its own,
  ``hangscope-corpus-2-hookjson-<torch>-<seed>``, that draws the whole case in place of the
  main stream): the hook's recorders (``nccl2``, or ``nccl-lazy`` beside it), every fault
  class, 4 or 8 ranks, gloo groups beside the hook's in half; the dumps written as JSON as
  torch 2.15 writes the hook's buffer (``_dump_fr_trace_json(backend=...)``: ``pg_status``
  values strings, ``time_discovered_*`` 0, ``entries`` left out when empty; the gloo groups'
  c10d buffer the same way) in :data:`HOOKJSON_JSON_SHARE` of the cases, pickles in the
  rest; a restart's older folder (``attempt_0/``, ``attempt_1/``), elastic some of the time,
  in :data:`HOOKJSON_RESTART_SHARE` (drawn as :func:`_restarts` draws them). Outside this
  range the hook's cases are written as pickles whatever their ``fmt``.
Seeds outside those ranges, and torch 2.13's, draw what they drew.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from tools.corpus.spec import (
    ALL_REDUCES,
    COLLECTIVE_OPS,
    FAULTS,
    NO_ROUNDS,
    P2P_OPS,
    STALLS,
    TIMEOUTS,
    CaseSpec,
    Fault,
    Op,
    _fault,
)

__all__ = [
    "CPU_FIRST_SEED",
    "CUDA_FIRST_SEED",
    "DEBUGSRV_FIRST_SEED",
    "DEBUGSRV_LAST_SEED",
    "HOOKJSON_FIRST_SEED",
    "HOOKJSON_LAST_SEED",
    "LATE_FIRST_SEED",
    "LATE_RESTART_FIRST_SEED",
    "MIXED_FIRST_SEED",
    "PERIODIC_FIRST_SEED",
    "RESTART_FIRST_SEED",
    "ROUNDS_FIRST_SEED",
    "TIMEOUTS",
    "V2_FIRST_SEED",
    "WIDE_END_SEED",
    "WIDE_FIRST_SEED",
    "draw_v2",
]

#: The first seed generator 2 draws (the committed generator 1 cases are below it).
V2_FIRST_SEED = 1000
#: The first seed that may draw gloo groups beside the recorder hook's (mixed recorders).
CPU_FIRST_SEED = 1100
#: The share of those seeds with a hook recorder that draw them.
CPU_SHARE = 0.5
#: The first seed that may draw a restart for any recorder, and an elastic one.
RESTART_FIRST_SEED = 1500
#: The share of those seeds that draw a restart (beside the gloo ones the main stream draws),
#: and the share of restarts whose older attempt had another world size (when it can).
RESTART_SHARE = 0.4
ELASTIC_SHARE = 0.5
#: The first seed that may draw TorchComms' CUDA flavour and repeated snapshots.
CUDA_FIRST_SEED = 2000
#: The share of TorchComms cases written as on CUDA; of gloo and TorchComms cases (without a
#: restart) with repeated snapshots; of those with some ranks' newer snapshot missing.
CUDA_SHARE = 0.5
SNAPSHOT_SHARE = 0.5
SNAPSHOT_MISSING_SHARE = 0.5
#: The first seed that may draw a periodic dump (a round taken while the job still ran),
#: the share of the cases without a restart that draw it, and the share of those with some
#: ranks' newer file missing.
PERIODIC_FIRST_SEED = 2600
PERIODIC_SHARE = 0.6
PERIODIC_MISSING_SHARE = 0.5
#: The first seed that may draw several interval rounds taken in the middle of a step, the
#: share of the cases without a restart that draw them, the share with some ranks' file of
#: the hang's round lost, and the share of stalls turned into a crash before that round.
ROUNDS_FIRST_SEED = 3000
ROUNDS_SHARE = 0.8
ROUNDS_MISSING_SHARE = 0.5
ROUNDS_CRASH_SHARE = 0.3
#: The compute (s) a rank spends at its point of a round before going on: uneven, so that
#: the ranks that went on are inside an op (in flight) when their own dump thread writes.
ROUND_COMPUTE_S = (0.0, 0.0, 0.2, 0.5)
#: The first seed that may draw late and skipped interval rounds and the hang's round by an
#: interval timer (in the cases that draw interval rounds); the share of those cases with
#: a skipped round, with a late file, and (hangs) with the timer's rounds after the hang.
LATE_FIRST_SEED = 3200
LATE_SKIP_SHARE = 0.5
LATE_LATE_SHARE = 0.5
LATE_TIMER_SHARE = 0.6
#: From this seed on, a share of those cases (gloo's recorder and TorchComms') also have a
#: restart's older folder beside the rounds (a stream of its own: the seeds before draw
#: what they drew).
LATE_RESTART_FIRST_SEED = 3240
LATE_RESTART_SHARE = 0.5
#: The first seed that may draw the recorder hook's wrapped buffers and repeated snapshots
#: (name tag ``_hookwrap``, a stream of its own): in the hook's cases without a restart, gloo
#: groups beside the hook's always, a small buffer (kept as a ring of its last entries) in
#: most, repeated snapshots in most, laid out in a dated folder or in one folder under
#: suffixed names; in place of interval rounds, periodic dumps and late rounds.
HOOKWRAP_FIRST_SEED = 3400
HOOKWRAP_RING_SHARE = 0.7
HOOKWRAP_SNAP_SHARE = 0.6
HOOKWRAP_LAYOUTS = ("dated", "numbered", "stamped")
#: The first seed that may draw suffixed copies for gloo's recorder and TorchComms' (name
#: tag ``_copies``, a stream of its own): in their cases without a restart, in place of
#: interval rounds, periodic dumps and late rounds, repeated snapshots laid out in a dated
#: folder or in one folder under suffixed names (as the hook's from HOOKWRAP_FIRST_SEED on),
#: some ranks' newer copy missing in half; and for TorchComms on CUDA, in half of those, every
#: entry's state read at issue as ``started`` (a GPU that had begun the kernel).
COPIES_FIRST_SEED = 3600
COPIES_SHARE = 0.8
COPIES_LAYOUTS = ("dated", "numbered", "numbered", "stamped", "stamped")
COPIES_STARTED_SHARE = 0.5
#: The first seed that may draw a mix of TorchComms' CUDA states (name tag ``_mixed``, a
#: stream of its own): in TorchComms' cases on CUDA, each entry's state read at issue is
#: ``started`` with a chance drawn from MIXED_SHARES, else ``scheduled``, so that one dump
#: holds both (the per-case ``started`` of COPIES_FIRST_SEED off in those).
MIXED_FIRST_SEED = 3800
MIXED_CASE_SHARE = 0.85
MIXED_SHARES = (0.25, 0.5, 0.75)
#: Seeds from WIDE_FIRST_SEED to WIDE_END_SEED - 1 draw a wide world (name tag ``_wide``, a
#: stream of its own that redraws the topology): 8, 12 or 16 ranks (WIDE_WORLDS, weighed by
#: WIDE_WEIGHTS), a shape (tp, cp, pp, dp) of WIDE_SHAPES, HSDP in WIDE_HSDP_SHARE of the
#: shapes whose DP degree is even and 4 or more.
WIDE_FIRST_SEED = 4000
WIDE_END_SEED = 4100
WIDE_WORLDS = (8, 12, 16)
WIDE_WEIGHTS = (40, 25, 35)
WIDE_SHAPES: dict[int, tuple[tuple[int, int, int, int], ...]] = {
    8: ((2, 1, 2, 2), (2, 2, 1, 2), (1, 1, 2, 4), (2, 1, 1, 4), (1, 2, 2, 2), (1, 1, 1, 8)),
    12: ((2, 1, 2, 3), (2, 2, 1, 3), (1, 1, 2, 6), (4, 1, 1, 3), (2, 1, 1, 6), (1, 2, 2, 3)),
    16: (
        (2, 2, 2, 2),
        (4, 1, 2, 2),
        (2, 1, 4, 2),
        (1, 1, 2, 8),
        (2, 1, 2, 4),
        (4, 2, 1, 2),
        (2, 1, 1, 8),
        (1, 2, 2, 4),
        (1, 1, 4, 4),
    ),
}
WIDE_HSDP_SHARE = 0.6
#: Seeds DEBUGSRV_FIRST_SEED to DEBUGSRV_LAST_SEED of torch 2.15 draw a case recorded through
#: torch 2.15's debug server (name tag ``_debugsrv``, a stream of its own, in place of the
#: main stream's draw): TorchComms' recorder over gloo, the folder the server's ``dump_dir``.
#: Its dump interval (s), the share of the cases whose culprit is rank 0 (the frontend's
#: process), and the share of hangs where 1 to W/2 other ranks exit before its last round.
DEBUGSRV_FIRST_SEED = 4200
DEBUGSRV_LAST_SEED = 4299
DEBUGSRV_INTERVALS = (1.0, 2.0, 4.0)
DEBUGSRV_RANK0_SHARE = 0.3
DEBUGSRV_EXIT_SHARE = 0.5
#: The job's timeout (s) per world size: longer than the other cases' (the server's rounds
#: share the machine's cores with the ranks).
DEBUGSRV_TIMEOUT_S = {4: 4.0, 8: 6.0}
#: Seeds HOOKJSON_FIRST_SEED to HOOKJSON_LAST_SEED of torch 2.15 draw a case of the recorder
#: hook written as JSON (name tag ``_hookjson``, a stream of its own, in place of the main
#: stream's draw): the share of them whose dumps are JSON (the rest pickles), and the share
#: with a restart's older folder (elastic in ELASTIC_SHARE of those, where the world allows).
HOOKJSON_FIRST_SEED = 4400
HOOKJSON_LAST_SEED = 4499
HOOKJSON_JSON_SHARE = 0.75
HOOKJSON_RESTART_SHARE = 0.55
#: Its fault classes: a frozen rank's op is in flight only on CUDA (not drawn here).
DEBUGSRV_FAULTS = tuple(k for k in FAULTS if k != "stuck_in_collective")
#: Step ops TorchComms' stand-in does not record as TorchComms would (or cannot run).
NOT_TORCHCOMMS = frozenset(
    {"pp_batch_isend_irecv", "ckpt_broadcast_object", "late_all_reduce", "coalesced_all_reduce"}
)
#: Those it records from :data:`CUDA_FIRST_SEED` on: the batch as one ``batch_op_issue``.
BATCHED = frozenset({"pp_batch_isend_irecv"})


def _topology(rng: random.Random) -> tuple[int, int, int, int, bool]:
    """(tp, cp, pp, dp, hsdp): 4 ranks mostly, 8 sometimes; CP 2 in about half."""
    world = rng.choices([4, 8], weights=[75, 25])[0]
    cp = 2 if rng.random() < 0.45 else 1
    shapes = [
        (tp, pp, world // (tp * cp * pp))
        for tp in (1, 2, 4)
        for pp in (1, 2)
        if world % (tp * cp * pp) == 0 and (tp * pp < world if cp == 1 else tp * cp * pp <= world)
    ]
    tp, pp, dp = rng.choice(shapes)
    return tp, cp, pp, dp, dp >= 4 and rng.random() < 0.5


def _wide_topology(rng: random.Random) -> tuple[int, int, int, int, bool]:
    """(tp, cp, pp, dp, hsdp) of a wide world: 8, 12 or 16 ranks in a shape of
    :data:`WIDE_SHAPES`, HSDP (shard pairs x replicas) some of the time where DP allows."""
    world = rng.choices(WIDE_WORLDS, weights=WIDE_WEIGHTS)[0]
    tp, cp, pp, dp = rng.choice(WIDE_SHAPES[world])
    return tp, cp, pp, dp, dp >= 4 and dp % 2 == 0 and rng.random() < WIDE_HSDP_SHARE


def _step_ops(
    rng: random.Random,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    hsdp: bool,
    recorder: str,
    batched: bool = False,
) -> list[Op]:
    """``batched``: TorchComms records the pipeline's batch_isend_irecv (``batch_op_issue``)."""
    pool: list[str] = ["world_all_reduce"]
    if tp > 1:
        pool += ["tp_all_reduce", "tp_all_reduce"]
    if cp > 1:
        pool += ["cp_all_gather", "cp_ring", "cp_all_reduce"]
    if dp > 1:
        pool += ["dp_all_reduce", "fsdp_all_gather", "fsdp_reduce_scatter", "moe_all_to_all"]
        pool += ["coalesced_all_reduce"] if recorder == "gloo" else []
    if hsdp:
        pool.append("hsdp_all_reduce")
    if pp > 1:
        pool += ["pp_send_recv", "pp_send_recv", "pp_batch_isend_irecv"]
    if recorder == "torchcomms":
        pool = [k for k in pool if k not in NOT_TORCHCOMMS or (batched and k in BATCHED)]
    ops = [rng.choice(pool) for _ in range(rng.randint(2, 5))]
    if cp > 1 and not any(k.startswith("cp_") for k in ops):
        ops.insert(rng.randrange(len(ops) + 1), rng.choice(["cp_all_gather", "cp_ring"]))
    ops.append("world_all_reduce")
    extras = [("barrier", 0.2), ("ckpt_broadcast_object", 0.1), ("late_all_reduce", 0.1)]
    if recorder == "gloo":
        extras.append(("monitored_barrier", 0.45))
    for kind, p in extras:
        if rng.random() < p and not (recorder == "torchcomms" and kind in NOT_TORCHCOMMS):
            ops.insert(rng.randrange(len(ops)), kind)
    return [_op(k, dp) for k in ops]


def _op(kind: str, dp: int) -> Op:
    group = COLLECTIVE_OPS.get(kind) or P2P_OPS[kind]
    if kind == "eval_metric_all_reduce" and dp == 1:
        group = "world"
    return Op(kind, group)


def _eval_ops(rng: random.Random, tp: int, cp: int, pp: int, dp: int) -> list[Op]:
    """The eval pass: forward collectives in model order, then the metric's all_reduce."""
    forward = [
        k
        for k, on in (
            ("eval_fsdp_all_gather", dp > 1),
            ("eval_pp_send_recv", pp > 1),
            ("eval_tp_all_reduce", tp > 1),
            ("eval_cp_all_gather", cp > 1),
        )
        if on
    ]
    picked = set(rng.sample(forward, rng.randint(min(1, len(forward)), len(forward))))
    kinds = [k for k in forward if k in picked] + ["eval_metric_all_reduce"]
    return [_op(k, dp) for k in kinds]


def _recorder(rng: random.Random, torch: str) -> str:
    if torch == "2.13":
        return rng.choices(["gloo", "torchcomms"], weights=[65, 35])[0]
    return rng.choices(["gloo", "nccl2", "nccl-lazy", "torchcomms"], weights=[30, 25, 15, 30])[0]


def _place(rng: random.Random, f: Fault, n_step: int, spec: CaseSpec) -> Fault:
    """Move a fault into the eval pass or onto the monitored_barrier some of the time, and
    onto a step that has an eval pass when its op is one of the pass's."""
    ops = spec.all_ops
    movable = f.kind in STALLS or f.kind in ("crash_exit", "crash_sigkill", "two_faults")
    mb = [i for i, o in enumerate(ops) if o.kind == "monitored_barrier"]
    if movable and mb and rng.random() < 0.6:
        f = replace(f, index=rng.choice(mb))
    elif spec.eval_ops and f.kind not in ("healthy", "slow_rank") and rng.random() < 0.5:
        evals = list(range(n_step, len(ops)))
        if f.kind in ("op_desync", "size_desync", "dtype_desync", "stuck_in_collective"):
            evals = [i for i in evals if ops[i].kind in ALL_REDUCES]
        if movable or f.kind.endswith("desync") or f.kind == "stuck_in_collective":
            f = replace(f, index=rng.choice(evals))
    if f.index >= n_step and f.kind not in ("healthy", "slow_rank"):
        f = replace(f, step=rng.choice([s for s in spec.eval_at if s >= 1]))
    return f


def _cpu_groups(seed: int, spec: CaseSpec) -> CaseSpec:
    """Put some groups on gloo beside the hook's (from a stream of its own: the rest of the
    draw stays what it was): the checkpoint's broadcast_object_list on a gloo copy of the
    world (added to the step when it has none), the DP group's gloo copy, or both. The
    buffer stays large: c10d's recorder also holds the forwarding backends' own gloo ops,
    taken out when the file is written (:func:`tools.hook_backend.c10d_gloo_dump`), which a
    ring that wrapped would have pushed out of the buffer."""
    if seed < CPU_FIRST_SEED or spec.recorder not in ("nccl2", "nccl-lazy"):
        return spec
    rng = random.Random(f"hangscope-corpus-2-cpu-{spec.torch}-{seed}")
    if rng.random() >= CPU_SHARE:
        return spec
    return replace(_with_cpu_groups(rng, spec), buffer_size=2000)


def _with_cpu_groups(rng: random.Random, spec: CaseSpec) -> CaseSpec:
    """``spec`` with gloo groups beside the hook's, drawn from ``rng``: the checkpoint's object
    broadcast on a gloo copy of the world (one is put in a step that has none), the DP
    group's gloo copy, or both."""
    choices = [("ckpt",)] + ([("dp",), ("ckpt", "dp")] if spec.dp > 1 else [])
    groups = rng.choice(choices)
    ops, fault = list(spec.step_ops), spec.fault
    if "ckpt" in groups:
        at = [i for i, o in enumerate(ops) if o.kind == "ckpt_broadcast_object"]
        if not at:
            at = [rng.randrange(len(ops))]
            ops.insert(at[0], Op("ckpt_broadcast_object", "world"))
            if fault.index >= at[0] and fault.kind not in ("healthy", "slow_rank"):
                fault = replace(fault, index=fault.index + 1)
        ops = [Op(o.kind, "ckpt") if o.kind == "ckpt_broadcast_object" else o for o in ops]
    return replace(spec, step_ops=tuple(ops), fault=fault, cpu_groups=groups)


def _older_world(spec: CaseSpec, rng: random.Random) -> int:
    """Another world size for the older attempt (0: the same): twice the DP replicas (4
    ranks then, 8 before) or half of them (8 then, 4 before, or 16 then, 8 before, in a wide
    world: a node was lost), when the DP
    groups (and HSDP's shard and replicate groups) still have two ranks or more."""
    if rng.random() >= ELASTIC_SHARE:
        return 0
    sizes = [2 * spec.world] if spec.world == 4 else []
    half = spec.dp // 2
    if spec.world in (8, 16) and spec.dp % 2 == 0 and half >= (4 if spec.hsdp else 2):
        sizes.append(spec.world // 2)
    return rng.choice(sizes) if sizes else 0


def _restarts(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`RESTART_FIRST_SEED` on (a stream of its own: the rest of the draw stays
    what it was): a restart for any recorder, and an older attempt of another world size."""
    if seed < RESTART_FIRST_SEED:
        return spec
    rng = random.Random(f"hangscope-corpus-2-restart-{spec.torch}-{seed}")
    restart = spec.restart_fault
    if restart is None and rng.random() < RESTART_SHARE:
        restart = Fault(
            rng.choice(["stall_compute", "crash_exit"]),
            (0,),
            step=rng.randint(1, spec.steps - 1),
            index=rng.randrange(len(spec.step_ops)),
        )
    if restart is None:
        return spec
    return _with_restart(spec, rng, restart)


def _with_restart(spec: CaseSpec, rng: random.Random, restart: Fault) -> CaseSpec:
    """``spec`` with the older attempt's fault ``restart`` (its rank redrawn here), of another
    world size some of the time (:func:`_older_world`), drawn from ``rng``."""
    older = _older_world(spec, rng)
    # the injected rank among the older attempt's ranks (past the newest's ones half the
    # time when it had more: a rank of the node that was lost)
    world = older or spec.world
    ranks = range(spec.world, world) if world > spec.world and rng.random() < 0.5 else range(world)
    restart = replace(restart, ranks=(rng.choice(ranks),))
    return replace(spec, restart_fault=restart, restart_world=older)


def _cuda(seed: int, torch: str, recorder: str) -> bool:
    """From :data:`CUDA_FIRST_SEED` on, TorchComms' dumps as written on CUDA (a stream of
    its own), for about half the ``torchcomms`` cases."""
    if seed < CUDA_FIRST_SEED or recorder != "torchcomms":
        return False
    return random.Random(f"hangscope-corpus-2-cuda-{torch}-{seed}").random() < CUDA_SHARE


def _some_ranks(rng: random.Random, world: int, share: float) -> tuple[int, ...]:
    """With chance ``share``, 1 to ``world // 2`` ranks drawn from ``rng`` (whose file is
    lost, or who skip a round), sorted; else none."""
    if rng.random() < share:
        return tuple(sorted(rng.sample(range(world), rng.randint(1, world // 2))))
    return ()


def _snapshots(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`CUDA_FIRST_SEED` on (a stream of its own): a newer snapshot of every
    dumping rank's buffer beside its first file, some ranks' newer snapshot missing."""
    if seed < CUDA_FIRST_SEED or spec.recorder not in ("gloo", "torchcomms"):
        return spec
    if spec.restart_fault is not None:
        return spec
    rng = random.Random(f"hangscope-corpus-2-snapshot-{spec.torch}-{seed}")
    if rng.random() >= SNAPSHOT_SHARE:
        return spec
    missing = _some_ranks(rng, spec.world, SNAPSHOT_MISSING_SHARE)
    return replace(spec, snapshots=True, snapshot_missing=missing)


def _periodic(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`PERIODIC_FIRST_SEED` on (a stream of its own): a round of dumps of every
    rank taken while the job still runs, after a step before the fault's (in place of
    repeated snapshots, which it is not drawn with), and in half of them the newer file of
    1 to W/2 ranks missing."""
    if seed < PERIODIC_FIRST_SEED or spec.restart_fault is not None:
        return spec
    rng = random.Random(f"hangscope-corpus-2-periodic-{spec.torch}-{seed}")
    if rng.random() >= PERIODIC_SHARE:
        return spec
    # the fault fires in step fault.step (>= 1 for a hang); a healthy or slow run: any
    # step but the last (the round is not the run's final dump)
    hang = spec.fault.kind not in ("healthy", "slow_rank")
    after = rng.randrange(spec.fault.step if hang else spec.steps - 1)
    missing = _some_ranks(rng, spec.world, PERIODIC_MISSING_SHARE)
    return replace(
        spec, snapshots=False, snapshot_missing=(), periodic_after=after, periodic_missing=missing
    )


def _rounds(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`ROUNDS_FIRST_SEED` on (a stream of its own): 2 or 3 interval rounds
    before the hang, each in a step of its own and taken in the middle of it (a point per
    rank: before one of the step's ops, or after its last), in place of a periodic dump or
    repeated snapshots; a stall turned into a crash some of the time (the rank's newest file
    is then an interval round's); the file of the hang's round of 1 to W/2 ranks lost in
    some cases. The fault moves to a later step when the rounds do not fit before it."""
    if seed < ROUNDS_FIRST_SEED or spec.restart_fault is not None:
        return spec
    rng = random.Random(f"hangscope-corpus-2-rounds-{spec.torch}-{seed}")
    if rng.random() >= ROUNDS_SHARE:
        return spec
    f = spec.fault
    hang = f.kind not in ("healthy", "slow_rank")
    n = rng.choice([2, 3])
    if hang:
        if f.kind in STALLS and rng.random() < ROUNDS_CRASH_SHARE:
            f = replace(f, kind=rng.choice(["crash_exit", "crash_sigkill"]))
        n_step = len(spec.step_ops)
        steps = [s for s in range(2, spec.steps) if f.index < n_step or s in spec.eval_at]
        if not steps:
            return spec
        if f.step < n:  # the rounds come before the fault's step
            f = replace(f, step=rng.choice([s for s in steps if s >= n] or steps))
        n = min(n, f.step)
    else:
        n = min(n, spec.steps - 1)
    at = tuple(sorted(rng.sample(range(f.step if hang else spec.steps - 1), n)))
    points = tuple(
        tuple(rng.randrange(len(spec.step_ops) + 1) for _ in range(spec.world)) for _ in at
    )
    compute = tuple(tuple(rng.choice(ROUND_COMPUTE_S) for _ in range(spec.world)) for _ in at)
    missing = _some_ranks(rng, spec.world, ROUNDS_MISSING_SHARE)
    return replace(
        spec,
        fault=f,
        round_compute=compute,
        snapshots=False,
        snapshot_missing=(),
        periodic_after=-1,
        periodic_missing=(),
        rounds_at=at,
        round_points=points,
        rounds_missing=missing,
    )


def _late(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`LATE_FIRST_SEED` on (a stream of its own), in the cases with interval
    rounds: ranks that skip a round, ranks whose file of a round lands in the next round's
    folder, and (hangs but a frozen rank) the hang's round written by an interval timer,
    collected 1 to 3 ticks after the first op failed."""
    if seed < LATE_FIRST_SEED or not spec.rounds_at:
        return spec
    rng = random.Random(f"hangscope-corpus-2-late-{spec.torch}-{seed}")
    n, w = len(spec.rounds_at), spec.world
    skip: list[tuple[int, ...]] = [() for _ in range(n)]
    late: list[tuple[int, ...]] = [() for _ in range(n)]
    if rng.random() < LATE_SKIP_SHARE:
        k = rng.randrange(n)
        skip[k] = tuple(sorted(rng.sample(range(w), rng.randint(1, w // 2))))
    if n > 1 and rng.random() < LATE_LATE_SHARE:
        k = rng.randrange(n - 1)  # lands in round k + 1's folder (an interval round's)
        free = [r for r in range(w) if r not in skip[k] + skip[k + 1]]
        late[k] = tuple(sorted(rng.sample(free, rng.randint(1, min(w // 2, len(free))))))
    timer = 0
    hang = spec.fault.kind not in ("healthy", "slow_rank", "stuck_in_collective")
    if hang and rng.random() < LATE_TIMER_SHARE:
        timer = rng.randint(1, 3)
    if not (any(skip) or any(late) or timer):
        return spec
    spec = replace(spec, round_skip=tuple(skip), round_late=tuple(late), timer_rounds=timer)
    if seed < LATE_RESTART_FIRST_SEED or spec.recorder not in ("gloo", "torchcomms"):
        return spec
    rng = random.Random(f"hangscope-corpus-2-late-restart-{spec.torch}-{seed}")
    if rng.random() >= LATE_RESTART_SHARE:
        return spec
    older = Fault(
        rng.choice(["stall_compute", "crash_exit"]),
        (rng.randrange(w),),
        step=rng.randint(1, spec.steps - 1),
        index=rng.randrange(len(spec.step_ops)),
    )
    return replace(spec, restart_fault=older)


def _hookwrap(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`HOOKWRAP_FIRST_SEED` on (a stream of its own), the recorder hook's cases
    without a restart: gloo groups beside the hook's (drawn here when the mixed-recorder
    stream drew none), and a small buffer that wraps (every buffer, c10d's included, kept
    as a ring of its last ``buffer_size`` entries, c10d's counting the job's gloo entries
    only, as on a GPU where the hook's backends leave nothing there), repeated snapshots
    (every dumping rank writes its buffers again the job's timeout plus 1 s later: in a
    ``dumps_<ts>`` folder, or in the same folder with the older renamed ``<name>.1`` or the
    newer named ``<name>.<YYYYmmdd-HHMMSS>``), or both; in place of interval rounds,
    periodic dumps and late rounds."""
    if seed < HOOKWRAP_FIRST_SEED or spec.recorder not in ("nccl2", "nccl-lazy"):
        return spec
    if spec.restart_fault is not None:
        return spec
    rng = random.Random(f"hangscope-corpus-2-hookwrap-{spec.torch}-{seed}")
    ring = rng.random() < HOOKWRAP_RING_SHARE
    snap = rng.random() < HOOKWRAP_SNAP_SHARE or not ring
    layout = rng.choice(HOOKWRAP_LAYOUTS)
    missing = _some_ranks(rng, spec.world, SNAPSHOT_MISSING_SHARE)
    size = rng.choice([8, 12, 16])
    if not spec.cpu_groups:
        spec = _with_cpu_groups(rng, spec)
    spec = replace(
        spec,
        periodic_after=-1,
        periodic_missing=(),
        **NO_ROUNDS,
        snapshots=snap,
        snapshot_missing=missing if snap else (),
        snapshot_layout=layout if snap else "",
        hook_ring=ring,
    )
    if ring:  # a later step for the fault, so that the job's gloo entries wrap too
        steps, f = max(spec.steps, 7), spec.fault
        if f.kind not in ("healthy", "slow_rank"):
            later = [s for s in range(4, steps) if f.index < len(spec.step_ops)]
            later = later or [s for s in spec.eval_at if s >= 4] or [f.step]
            f = replace(f, step=rng.choice(later))
        spec = replace(spec, buffer_size=size, steps=steps, fault=f)
    return spec


def _copies(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`COPIES_FIRST_SEED` on (a stream of its own), gloo's recorder and
    TorchComms' cases without a restart: repeated snapshots of every dumping rank's buffer,
    the newer one the job's timeout plus 1 s later, in a ``dumps_<ts>`` folder or in the
    same folder with the older renamed ``<name>.1`` or the newer named
    ``<name>.<YYYYmmdd-HHMMSS>``, some ranks' newer copy missing in half; TorchComms on CUDA
    with its entries' state read at issue as ``started`` in half; in place of interval
    rounds, periodic dumps and late rounds."""
    if seed < COPIES_FIRST_SEED or spec.recorder not in ("gloo", "torchcomms"):
        return spec
    if spec.restart_fault is not None:
        return spec
    rng = random.Random(f"hangscope-corpus-2-copies-{spec.torch}-{seed}")
    if rng.random() >= COPIES_SHARE:
        return spec
    layout = rng.choice(COPIES_LAYOUTS)
    missing = _some_ranks(rng, spec.world, SNAPSHOT_MISSING_SHARE)
    started = spec.cuda and rng.random() < COPIES_STARTED_SHARE
    return replace(
        spec,
        periodic_after=-1,
        periodic_missing=(),
        **NO_ROUNDS,
        snapshots=True,
        snapshot_missing=missing,
        snapshot_layout=layout,
        cuda_started=started,
    )


def _mixed(seed: int, spec: CaseSpec) -> CaseSpec:
    """From :data:`MIXED_FIRST_SEED` on (a stream of its own), TorchComms' cases on CUDA:
    each entry's state read at issue ``started`` with a drawn chance, else ``scheduled``."""
    if seed < MIXED_FIRST_SEED or not spec.cuda:
        return spec
    rng = random.Random(f"hangscope-corpus-2-mixed-{spec.torch}-{seed}")
    if rng.random() >= MIXED_CASE_SHARE:
        return spec
    return replace(spec, cuda_started=False, cuda_mixed=rng.choice(MIXED_SHARES))


@dataclass(frozen=True)
class _Job:
    """A job drawn with a fault that fits it (:func:`_draw_job`)."""

    tp: int
    cp: int
    pp: int
    dp: int
    hsdp: bool
    steps: int
    ops: list[Op]
    evals: list[Op]
    fault: Fault

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


def _draw_job(
    rng: random.Random,
    recorder: str,
    kind: Callable[[], str],
    *,
    cuda_ops: bool,
    evals: bool,
    wide: random.Random | None = None,
) -> _Job:
    """A topology, steps, step ops (and, with ``evals``, an eval pass some of the time) and a
    fault of ``kind()`` placed in them, drawn again until the fault fits. With ``wide`` the
    topology is redrawn from that stream (the main stream's draw unused). Each axis calls it
    in the order its committed seeds drew in."""
    while True:
        tp, cp, pp, dp, hsdp = _topology(rng)
        if wide is not None:
            tp, cp, pp, dp, hsdp = _wide_topology(wide)
        steps = rng.randint(3, 5)
        ops = _step_ops(rng, tp, cp, pp, dp, hsdp, recorder, cuda_ops)
        extra = _eval_ops(rng, tp, cp, pp, dp) if evals and rng.random() < 0.4 else []
        world = tp * cp * pp * dp
        topo = {"world": world, "tp": tp, "pp": pp, "dp": dp, "steps": steps}
        fault = _fault(rng, kind(), {**topo, "step_ops": ops + extra})
        if fault is not None:
            return _Job(tp, cp, pp, dp, hsdp, steps, ops, extra, fault)


def _debugsrv(seed: int, torch: str) -> CaseSpec:
    """The case of a seed of the debug server's axis (a stream of its own): TorchComms'
    recorder over gloo, 4 or 8 ranks, any fault class but a frozen rank; the server started
    at the start of a step up to the fault's, with a dump interval drawn from
    :data:`DEBUGSRV_INTERVALS`; the culprit rank 0 (the frontend's process) some of the time;
    for hangs, 1 to W/2 other ranks exiting after their op failed in half of them."""
    rng = random.Random(f"hangscope-corpus-2-debugsrv-{torch}-{seed}")
    kind = rng.choice(DEBUGSRV_FAULTS)
    job = _draw_job(rng, "torchcomms", lambda: kind, cuda_ops=True, evals=False)
    fault, world, steps = job.fault, job.world, job.steps
    hang = kind not in ("healthy", "slow_rank")
    if fault.ranks and kind != "p2p_deadlock" and rng.random() < DEBUGSRV_RANK0_SHARE:
        other = [r for r in fault.ranks if r != 0][: len(fault.ranks) - 1]
        ranks = (0, *other)
        if len(ranks) == 2 and rng.random() < 0.5:  # two faults: rank 0 the stalled or not
            ranks = (ranks[1], ranks[0])
        fault = replace(fault, ranks=ranks)
    interval = rng.choice(DEBUGSRV_INTERVALS)
    start = rng.randint(0, fault.step if hang else steps - 1)
    leave: tuple[int, ...] = ()
    if hang and rng.random() < DEBUGSRV_EXIT_SHARE:
        others = [r for r in range(world) if r not in fault.ranks]
        leave = tuple(sorted(rng.sample(others, rng.randint(1, min(world // 2, len(others))))))
    return CaseSpec(
        seed=seed,
        torch=torch,
        recorder="torchcomms",
        fmt="pickle",
        policy="timed_out",  # the tutorial's handler: a rank that caught its timeout dumps
        buffer_size=2000,
        junk=False,
        world=world,
        tp=job.tp,
        pp=job.pp,
        dp=job.dp,
        hsdp=job.hsdp,
        local_sync=False,
        steps=steps,
        step_ops=tuple(job.ops),
        fault=fault,
        timeout_s=DEBUGSRV_TIMEOUT_S[world],
        generator=2,
        cp=job.cp,
        debugsrv_interval=interval,
        debugsrv_start=start,
        debugsrv_exit=leave,
    )


def _hookjson(seed: int, torch: str) -> CaseSpec:
    """The case of a seed of the hook's JSON axis (a stream of its own): the recorder hook
    (``nccl2``, or ``nccl-lazy`` beside it), any fault class, 4 or 8 ranks, gloo groups
    beside the hook's in half; its dumps written as JSON (``_dump_fr_trace_json(backend=...)``,
    as torch 2.15 writes the hook's buffer) in :data:`HOOKJSON_JSON_SHARE` of the cases,
    pickles in the rest; a restart's older folder in :data:`HOOKJSON_RESTART_SHARE`, elastic
    some of the time (drawn as :func:`_restarts` draws them)."""
    rng = random.Random(f"hangscope-corpus-2-hookjson-{torch}-{seed}")
    recorder = rng.choices(["nccl2", "nccl-lazy"], weights=[60, 40])[0]
    kind = rng.choice(FAULTS)
    job = _draw_job(rng, recorder, lambda: kind, cuda_ops=True, evals=True)
    ops, evals, steps = job.ops, job.evals, job.steps
    policy = rng.choice(["all", "timed_out"])
    if kind in ("stuck_in_collective", "healthy", "slow_rank"):
        policy = "all"
    spec = CaseSpec(
        seed=seed,
        torch=torch,
        recorder=recorder,
        fmt="json" if rng.random() < HOOKJSON_JSON_SHARE else "pickle",
        policy=policy,
        buffer_size=2000,
        junk=rng.random() < 0.3,
        world=job.world,
        tp=job.tp,
        pp=job.pp,
        dp=job.dp,
        hsdp=job.hsdp,
        local_sync=rng.random() < 0.3,
        steps=steps,
        step_ops=tuple(ops),
        fault=job.fault,
        timeout_s=TIMEOUTS[job.world],
        generator=2,
        cp=job.cp,
        eval_ops=tuple(evals),
        eval_at=tuple(range(1, steps, 2)) if evals else (),
        hookjson=True,
    )
    spec = replace(spec, fault=_place(rng, job.fault, len(ops), spec))
    if rng.random() < CPU_SHARE:
        spec = _with_cpu_groups(rng, spec)
    if rng.random() < HOOKJSON_RESTART_SHARE:
        older = Fault(
            rng.choice(["stall_compute", "crash_exit"]),
            (0,),
            step=rng.randint(1, spec.steps - 1),
            index=rng.randrange(len(spec.step_ops)),
        )
        spec = _with_restart(spec, rng, older)
    return spec


def draw_v2(seed: int, torch: str) -> CaseSpec:
    """Generator 2's case of ``seed`` for a torch version."""
    if torch == "2.15" and DEBUGSRV_FIRST_SEED <= seed <= DEBUGSRV_LAST_SEED:
        return _debugsrv(seed, torch)
    if torch == "2.15" and HOOKJSON_FIRST_SEED <= seed <= HOOKJSON_LAST_SEED:
        return _hookjson(seed, torch)
    rng = random.Random(f"hangscope-corpus-2-{torch}-{seed}")
    recorder = _recorder(rng, torch)
    cuda = _cuda(seed, torch, recorder)  # a frozen rank's op is in flight only on CUDA
    faults = [
        k
        for k in FAULTS
        if not (recorder == "torchcomms" and not cuda and k == "stuck_in_collective")
    ]
    wide = None
    if WIDE_FIRST_SEED <= seed < WIDE_END_SEED:
        wide = random.Random(f"hangscope-corpus-2-wide-{torch}-{seed}")
    job = _draw_job(
        rng,
        recorder,
        lambda: rng.choice(faults),
        cuda_ops=seed >= CUDA_FIRST_SEED,
        evals=True,
        wide=wide,
    )
    tp, cp, pp, dp, hsdp = job.tp, job.cp, job.pp, job.dp, job.hsdp
    steps, ops, evals, fault, world = job.steps, job.ops, job.evals, job.fault, job.world
    policy = "all"
    if recorder != "gloo" or rng.random() < 0.3:
        policy = rng.choice(["all", "timed_out"])
    if fault.kind in ("stuck_in_collective", "healthy", "slow_rank"):
        policy = "all"
    small = rng.random() < 0.15
    restart = None
    if recorder == "gloo" and rng.random() < 0.3:
        restart = Fault(
            rng.choice(["stall_compute", "crash_exit"]),
            (rng.randrange(world),),
            step=rng.randint(1, steps - 1),
            index=rng.randrange(len(ops)),
        )
    spec = CaseSpec(
        seed=seed,
        torch=torch,
        recorder=recorder,
        fmt="json" if rng.random() < 0.2 else "pickle",
        policy=policy,
        buffer_size=rng.choice([12, 16, 24]) if small else 2000,
        junk=rng.random() < 0.3,
        world=world,
        tp=tp,
        pp=pp,
        dp=dp,
        hsdp=hsdp,
        local_sync=recorder != "torchcomms" and rng.random() < 0.3,
        steps=steps + (3 if small else 0),
        step_ops=tuple(ops),
        fault=fault,
        timeout_s=TIMEOUTS[world],
        generator=2,
        cp=cp,
        eval_ops=tuple(evals),
        eval_at=tuple(range(1, steps + (3 if small else 0), 2)) if evals else (),
        restart_fault=restart,
        cuda=cuda,
        wide=wide is not None,
    )
    spec = _cpu_groups(seed, replace(spec, fault=_place(rng, fault, len(ops), spec)))
    spec = _periodic(seed, _snapshots(seed, _restarts(seed, spec)))
    return _mixed(seed, _copies(seed, _hookwrap(seed, _late(seed, _rounds(seed, spec)))))
