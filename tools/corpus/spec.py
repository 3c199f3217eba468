"""What one corpus case is made of, drawn at random from its seed (no torch needed).

A case composes a topology (tensor, pipeline and data parallel degrees, expert groups over
the data-parallel ranks, HSDP shard x replicate), a workload (the ops of one training step,
repeated), one fault (or none), how the files come out (which ranks dump, pickle or JSON,
ring-buffer size, other files beside them) and a recorder (torch's gloo recorder, or torch
2.15's recorder hook under the names nccl2 and nccl-lazy). Everything is plain data, so the
same seed always draws the same case and a case travels to the workers as JSON.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "ALL_REDUCES",
    "COLLECTIVE_OPS",
    "DIALECTS",
    "FAULTS",
    "HANG_FAULTS",
    "NO_ROUNDS",
    "P2P_OPS",
    "STALLS",
    "TIMEOUTS",
    "CaseSpec",
    "Fault",
    "Op",
    "draw",
]

#: Every fault class the generator injects, in the order of the tables.
FAULTS = (
    "stall_compute",
    "stall_lock",
    "stall_dataloader",
    "crash_exit",
    "crash_sigkill",
    "op_desync",
    "size_desync",
    "dtype_desync",
    "group_order_deadlock",
    "p2p_deadlock",
    "stuck_in_collective",
    "two_faults",
    "slow_rank",
    "healthy",
)
#: Faults after which the job hangs (the others finish).
HANG_FAULTS = frozenset(FAULTS) - {"slow_rank", "healthy"}
STALLS = ("stall_compute", "stall_lock", "stall_dataloader")
#: Generator 2's job timeout (s) per world size: 12 and 16 ranks on two cores need more, or
#: the load makes an op time out before the fault fires (measured: see docs/corpus.md).
TIMEOUTS = {4: 3.0, 8: 5.0, 12: 8.0, 16: 10.0}
#: How a rank's entries are read: gloo's own recorder (per torch version), or the recorder
#: hook as written (nccl2, every entry retired at issue), with nccl2's completion states laid
#: over (nccl2+states), or with the pipeline's pair groups on nccl-lazy (nccl-lazy).
#: ``torchcomms``: TorchComms' recorder (``tools/torchcomms_fr.py``) over the same gloo ops.
DIALECTS = ("gloo@2.13", "gloo@2.15", "nccl2", "nccl2+states", "nccl-lazy", "torchcomms")

# Op kinds of a step; each names the group it runs on.
COLLECTIVE_OPS = {
    "world_all_reduce": "world",
    "tp_all_reduce": "tp",
    "dp_all_reduce": "dp",
    "fsdp_all_gather": "shard",
    "fsdp_reduce_scatter": "shard",
    "hsdp_all_reduce": "replicate",
    "moe_all_to_all": "ep",
    "ckpt_broadcast_object": "world",  # "ckpt" when it runs on a gloo copy of the world
    "barrier": "world",
    "coalesced_all_reduce": "dp",
    "late_all_reduce": "late",
    # Generator 2 (seeds from 1000, :mod:`tools.corpus.axes`): context parallel, the eval
    # pass (forward only, then the metric's all_reduce), gloo's monitored_barrier.
    "cp_all_gather": "cp",
    "cp_all_reduce": "cp",
    "monitored_barrier": "world",
    "eval_tp_all_reduce": "tp",
    "eval_cp_all_gather": "cp",
    "eval_fsdp_all_gather": "shard",
    "eval_metric_all_reduce": "dp",
}
P2P_OPS = {
    "pp_send_recv": "pp",
    "pp_batch_isend_irecv": "pp",
    "cp_ring": "cp",
    "eval_pp_send_recv": "pp",
}
#: Kinds that run a plain all_reduce (where a desync or a frozen rank can be put).
ALL_REDUCES = (
    "world_all_reduce",
    "tp_all_reduce",
    "dp_all_reduce",
    "cp_all_reduce",
    "eval_tp_all_reduce",
    "eval_metric_all_reduce",
)


@dataclass(frozen=True)
class Op:
    """One op of a step: its kind and the group kind it runs on."""

    kind: str
    group: str


@dataclass(frozen=True)
class Fault:
    """What goes wrong: on which ranks, before which op (step, index in the step)."""

    kind: str
    ranks: tuple[int, ...] = ()
    step: int = 0
    index: int = 0
    variant: str = ""  # how: "smaller"/"larger" sizes, "int64" dtype, "broadcast" op, ...
    partner: int = -1  # the other end (p2p deadlock) or the swapped op's index (order)


#: A case's fields of interval rounds, cleared (a restart's older attempt takes none; the
#: axes that take a case's place of rounds clear them).
NO_ROUNDS: dict[str, Any] = {
    "rounds_at": (),
    "round_points": (),
    "round_compute": (),
    "rounds_missing": (),
    "round_skip": (),
    "round_late": (),
    "timer_rounds": 0,
}


@dataclass(frozen=True)
class CaseSpec:
    seed: int
    torch: str  # "2.13" or "2.15"
    recorder: str  # "gloo", "nccl2" or "nccl-lazy"
    fmt: str  # "pickle" or "json"
    policy: str  # "all" (every rank dumps) or "timed_out" (only ranks whose own op failed)
    buffer_size: int
    junk: bool
    world: int
    tp: int
    pp: int
    dp: int
    hsdp: bool  # data-parallel ranks split into shard x replicate groups
    local_sync: bool  # tensor-parallel groups made with use_local_synchronization
    steps: int
    step_ops: tuple[Op, ...]
    fault: Fault
    timeout_s: float = 3.0
    extra: dict[str, Any] = field(default_factory=dict)
    # Generator 2 only (the defaults are generator 1's cases).
    generator: int = 1
    cp: int = 1  # context-parallel degree: global rank ((d * cp + c) * pp + p) * tp + t
    eval_ops: tuple[Op, ...] = ()  # an eval pass after the steps in eval_at; its op indices
    eval_at: tuple[int, ...] = ()  # follow the step's (len(step_ops) + j)
    restart_fault: Fault | None = None  # an earlier attempt's fault: its dumps in attempt_0/
    # An elastic restart: the earlier attempt's world size (0: this one's), its DP degree
    # scaled to it (tools.corpus.axes draws it from RESTART_FIRST_SEED on).
    restart_world: int = 0
    # Groups on gloo beside the recorder hook's (nccl2, nccl-lazy): "ckpt" (the checkpoint's
    # broadcast_object_list on a gloo copy of the world), "dp" (the DP group's gloo copy).
    cpu_groups: tuple[str, ...] = ()
    # TorchComms' recorder as it writes on CUDA: backend label "nccl", every issued op
    # retired with its state read at issue (tools.corpus.axes draws it from CUDA_FIRST_SEED).
    cuda: bool = False
    # Repeated snapshots of the buffers: every rank that dumps writes a newer snapshot
    # (into SNAPSHOT_DIR) SNAPSHOT_DELAY_S after its first file, but the ranks in
    # snapshot_missing (their newer snapshot lost: the older one only).
    snapshots: bool = False
    snapshot_missing: tuple[int, ...] = ()
    # A periodic dump (tools.corpus.axes draws it from PERIODIC_FIRST_SEED on): every rank
    # writes its buffer once while the job still runs, after step ``periodic_after`` (-1:
    # none), into a folder of its own; the dumps after the hang go to a newer one, but
    # those of the ranks in ``periodic_missing`` (lost: the older round's file only).
    periodic_after: int = -1
    periodic_missing: tuple[int, ...] = ()
    # Several interval rounds (tools.corpus.axes draws them from ROUNDS_FIRST_SEED on): in
    # step ``rounds_at[k]`` each rank's own dump thread writes its buffer just after the
    # rank's main thread reached op ``round_points[k][rank]`` of that step (the step's
    # length: after its last op), the main thread going on into its ops after computing
    # ``round_compute[k][rank]`` s (no barrier lines the ranks up),
    # into a folder of the round's own; the dumps after the hang go to a newer one, but those
    # of the ranks in ``rounds_missing`` (lost: their newest file is an interval round's).
    rounds_at: tuple[int, ...] = ()
    round_points: tuple[tuple[int, ...], ...] = ()
    # ... where the rank computes this long (s) before going on (the others wait in an op)
    round_compute: tuple[tuple[float, ...], ...] = ()
    rounds_missing: tuple[int, ...] = ()
    # Late and skipped interval rounds (tools.corpus.axes draws them from LATE_FIRST_SEED
    # on): per interval round, the ranks whose dump thread skips it (``round_skip``), and
    # those whose file of that round is written so late that it lands in the next round's
    # folder (``round_late``; taken at the round's point, no file of their own in the next).
    round_skip: tuple[tuple[int, ...], ...] = ()
    round_late: tuple[tuple[int, ...], ...] = ()
    # The hang's round written by an interval timer (``timer_rounds`` > 0): after the last
    # interval round every rank's dump thread writes its buffer at every tick of a timer
    # shared by the machine's ranks (no watchdog-like poller, no dump on the rank's own
    # failure); the files are collected ``timer_rounds`` ticks after the first op failed.
    timer_rounds: int = 0
    # The recorder hook's wrapped buffers and snapshots (tools.corpus.axes draws them from
    # HOOKWRAP_FIRST_SEED on): ``hook_ring``: every buffer written as a ring of its last
    # ``buffer_size`` entries (c10d's counting the job's gloo entries only, the job run with
    # a large one); ``snapshot_layout``: where the newer snapshot goes, "dated" (a
    # ``dumps_<ts>`` folder), "numbered" (same folder, the older renamed ``<name>.1``) or
    # "stamped" (same folder, the newer named ``<name>.<YYYYmmdd-HHMMSS>``).
    hook_ring: bool = False
    snapshot_layout: str = ""
    # TorchComms on CUDA (tools.corpus.axes draws it from COPIES_FIRST_SEED on): every
    # entry's state read at issue as ``started`` (a GPU that had begun the kernel) in place
    # of ``scheduled``.
    cuda_started: bool = False
    # TorchComms on CUDA (tools.corpus.axes draws it from MIXED_FIRST_SEED on): each entry's
    # state read at issue as ``started`` with this chance, else ``scheduled`` (a mix of both
    # states in one dump, drawn per entry on a stream of the seed and the rank); 0 is off.
    cuda_mixed: float = 0.0
    # A wide world (tools.corpus.axes draws it from WIDE_FIRST_SEED on): the topology
    # redrawn with 8, 12 or 16 ranks, the job's timeout scaled with it.
    wide: bool = False
    # torch 2.15's debug server (tools.corpus.axes draws it from DEBUGSRV_FIRST_SEED on): the
    # job runs it (every rank a worker server, rank 0 the frontend and its periodic dumper,
    # every ``debugsrv_interval`` s; 0: no server), started at the start of step
    # ``debugsrv_start`` (0: before the first step), with TorchComms' handlers; the case's
    # folder is the server's ``dump_dir`` (``per_rank/rank_<r>`` written by a rank that caught
    # its timeout and by every rank the health check asks). The ranks in ``debugsrv_exit``
    # end their process (a normal exit) :data:`tools.corpus.debugsrv.EXIT_AFTER_S` after
    # their op failed, before the frontend's last round.
    debugsrv_interval: float = 0.0
    debugsrv_start: int = 0
    debugsrv_exit: tuple[int, ...] = ()
    # The recorder hook's JSON axis (tools.corpus.axes draws it from HOOKJSON_FIRST_SEED on):
    # with ``fmt`` "json" the hook's buffers (and c10d's, for the gloo groups beside them)
    # are written as JSON, as ``_dump_fr_trace_json(backend=...)`` returns them; the hook's
    # cases outside it write pickles whatever their ``fmt``.
    hookjson: bool = False

    @property
    def hooked(self) -> bool:
        """The recorder hook's case (``nccl2``, ``nccl-lazy``)."""
        return self.recorder in ("nccl2", "nccl-lazy")

    @property
    def hook_json(self) -> bool:
        """The recorder hook's dumps written as JSON (the hook's JSON axis only)."""
        return self.hooked and self.hookjson and self.fmt == "json"

    @property
    def written_fmt(self) -> str:
        """How the dumps were written, ``"json"`` or ``"pickle"``: the hook writes pickles
        whatever ``fmt`` says, except on its JSON axis."""
        if self.hooked:
            return "json" if self.hook_json else "pickle"
        return self.fmt

    @property
    def name(self) -> str:
        cp = f"cp{self.cp}" if self.cp > 1 else ""
        topo = f"tp{self.tp}{cp}pp{self.pp}dp{self.dp}" + ("h" if self.hsdp else "")
        rec = self.recorder.replace("-", "")
        tags = "".join(
            t
            for t, on in (
                ("_wide", self.wide),
                ("_eval", bool(self.eval_ops)),
                ("_mb", any(o.kind == "monitored_barrier" for o in self.step_ops)),
                ("_restart", self.restart_fault is not None),
                (f"_elastic{self.restart_world}", bool(self.restart_world)),
                ("_cpu", bool(self.cpu_groups)),
                ("_cuda", self.cuda),
                ("_snap", self.snapshots),
                ("_periodic", self.periodic_after >= 0),
                ("_rounds", bool(self.rounds_at)),
                ("_late", any(self.round_skip) or any(self.round_late) or self.timer_rounds > 0),
                ("_hookwrap", self.hook_ring or (bool(self.snapshot_layout) and self.hooked)),
                ("_copies", bool(self.snapshot_layout) and not self.hooked),
                ("_started", self.cuda_started),
                ("_mixed", self.cuda_mixed > 0),
                ("_debugsrv", self.debugsrv_interval > 0),
                ("_hookjson", self.hookjson),
            )
            if on
        )
        torch = self.torch.replace(".", "")
        return f"{self.fault.kind}_{topo}_{rec}{tags}_t{torch}_s{self.seed:05d}"

    def older_attempt(self) -> CaseSpec:
        """The spec of a restart's earlier attempt: its fault, every rank dumping, and its
        own world size when it was elastic (more or fewer DP replicas, the job's timeout
        for that size)."""
        assert self.restart_fault is not None
        older = replace(
            self,
            fault=self.restart_fault,
            restart_fault=None,
            restart_world=0,
            policy="all",
            **NO_ROUNDS,  # (interval rounds: this run's only)
        )
        if self.restart_world and self.restart_world != self.world:
            dp = self.dp * self.restart_world // self.world
            timeout = TIMEOUTS.get(self.restart_world, self.timeout_s)
            older = replace(older, world=self.restart_world, dp=dp, timeout_s=timeout)
        return older

    @property
    def all_ops(self) -> tuple[Op, ...]:
        """The step's ops, then the eval pass's (the indices a fault names)."""
        return self.step_ops + self.eval_ops

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def worker_configs(
        self, out_dir: Path, side_dir: Path, job_port: int, side_port: int, **extra: Any
    ) -> list[dict[str, Any]]:
        """Each rank's worker configuration: this case, its rank, where it writes, the job's
        and the side channel's store ports, and ``extra`` keys."""
        return [
            {
                "spec": self.to_json(),
                "rank": r,
                "out_dir": str(out_dir),
                "side_dir": str(side_dir),
                "job_port": job_port,
                "side_port": side_port,
                **extra,
            }
            for r in range(self.world)
        ]

    @staticmethod
    def from_json(doc: dict[str, Any]) -> CaseSpec:
        doc = dict(doc)
        doc["step_ops"] = tuple(Op(**o) for o in doc["step_ops"])
        doc["eval_ops"] = tuple(Op(**o) for o in doc.get("eval_ops", ()))
        doc["eval_at"] = tuple(doc.get("eval_at", ()))
        doc["cpu_groups"] = tuple(doc.get("cpu_groups", ()))
        doc["snapshot_missing"] = tuple(doc.get("snapshot_missing", ()))
        doc["periodic_missing"] = tuple(doc.get("periodic_missing", ()))
        doc["rounds_at"] = tuple(doc.get("rounds_at", ()))
        doc["round_points"] = tuple(tuple(p) for p in doc.get("round_points", ()))
        doc["round_compute"] = tuple(tuple(c) for c in doc.get("round_compute", ()))
        doc["rounds_missing"] = tuple(doc.get("rounds_missing", ()))
        doc["round_skip"] = tuple(tuple(r) for r in doc.get("round_skip", ()))
        doc["round_late"] = tuple(tuple(r) for r in doc.get("round_late", ()))
        doc["debugsrv_exit"] = tuple(doc.get("debugsrv_exit", ()))
        for key in ("fault", "restart_fault"):
            if doc.get(key) is not None:
                f = dict(doc[key])
                f["ranks"] = tuple(f["ranks"])
                doc[key] = Fault(**f)
        return CaseSpec(**doc)


def _topology(rng: random.Random) -> tuple[int, int, int, bool]:
    """(tp, pp, dp, hsdp): 4 ranks mostly, 8 sometimes, 16 rarely."""
    world = rng.choices([4, 6, 8, 16], weights=[80, 6, 12, 2])[0]
    shapes = [
        (tp, pp, world // (tp * pp))
        for tp in (1, 2, 4)
        for pp in (1, 2, 4)
        if world % (tp * pp) == 0 and world // (tp * pp) >= 1 and tp * pp < world
    ]
    tp, pp, dp = rng.choice(shapes)
    hsdp = dp >= 4 and rng.random() < 0.5
    return tp, pp, dp, hsdp


def _step_ops(rng: random.Random, tp: int, pp: int, dp: int, hsdp: bool, recorder: str) -> list[Op]:
    """A training step: a random, ordered pick of the ops this topology has."""
    pool: list[str] = ["world_all_reduce"]
    if tp > 1:
        pool += ["tp_all_reduce", "tp_all_reduce"]
    if dp > 1:
        pool += ["dp_all_reduce", "fsdp_all_gather", "fsdp_reduce_scatter", "moe_all_to_all"]
        pool += ["coalesced_all_reduce"] if recorder == "gloo" else []
    if hsdp:
        pool.append("hsdp_all_reduce")
    if pp > 1:
        pool += ["pp_send_recv", "pp_send_recv", "pp_batch_isend_irecv"]
    n = rng.randint(2, 5)
    ops = [rng.choice(pool) for _ in range(n)]
    ops.append("world_all_reduce")  # the loss: every rank meets every step
    if rng.random() < 0.25:
        ops.insert(rng.randrange(len(ops)), "barrier")
    if rng.random() < 0.15:
        ops.insert(rng.randrange(len(ops)), "ckpt_broadcast_object")
    if rng.random() < 0.15:
        ops.insert(rng.randrange(len(ops)), "late_all_reduce")
    return [Op(k, COLLECTIVE_OPS.get(k) or P2P_OPS[k]) for k in ops]


def _fault(rng: random.Random, kind: str, spec: dict[str, Any]) -> Fault | None:
    """Place ``kind`` in the drawn job, or None when this job has no place for it."""
    world, ops, steps = spec["world"], spec["step_ops"], spec["steps"]
    step = rng.randint(1, steps - 1)
    coll = [i for i, o in enumerate(ops) if o.kind in COLLECTIVE_OPS and o.kind != "barrier"]
    if kind in ("healthy",):
        return Fault(kind)
    if kind == "slow_rank":
        return Fault(kind, (rng.randrange(world),), step=1, variant=f"{rng.choice([0.2, 0.4])}")
    if kind in STALLS or kind in ("crash_exit", "crash_sigkill", "stuck_in_collective"):
        index = rng.randrange(len(ops))
        if kind == "stuck_in_collective":
            cands = [i for i in coll if ops[i].kind in ALL_REDUCES]
            if not cands:
                return None
            index = rng.choice(cands)
        return Fault(kind, (rng.randrange(world),), step=step, index=index)
    if kind == "two_faults":
        a, b = rng.sample(range(world), 2)
        index = rng.randrange(len(ops))
        return Fault(kind, (a, b), step=step, index=index, variant=rng.choice(["stall", "crash"]))
    if kind in ("op_desync", "size_desync", "dtype_desync"):
        cands = [i for i in coll if ops[i].kind in ALL_REDUCES]
        if not cands:
            return None
        variant = {
            "op_desync": rng.choice(["broadcast", "all_gather"]),
            "size_desync": rng.choice(["smaller", "larger"]),
            "dtype_desync": rng.choice(["int64", "float64", "int32"]),
        }[kind]
        return Fault(
            kind, (rng.randrange(world),), step=step, index=rng.choice(cands), variant=variant
        )
    if kind == "group_order_deadlock":
        # The rank runs a data-parallel (or duplicate world) all_reduce before the world one.
        return Fault(
            kind, (rng.randrange(world),), step=step, variant="dp" if spec["dp"] > 1 else "dup"
        )
    if kind == "p2p_deadlock":
        if spec["pp"] < 2:
            return None
        a = rng.randrange(world)
        stage_stride = spec["tp"]  # global rank = ((dp * pp) + stage) * tp + tp_index
        stage = (a // stage_stride) % spec["pp"]
        b = a + stage_stride if stage + 1 < spec["pp"] else a - stage_stride
        return Fault(kind, (min(a, b), max(a, b)), step=step)
    raise ValueError(kind)


def _recorder(rng: random.Random, torch: str) -> tuple[str, bool]:
    """(recorder, states laid over) for a torch version."""
    if torch == "2.13":
        return "gloo", False
    return rng.choices(["gloo", "nccl2", "nccl-lazy"], weights=[35, 40, 25])[0], False


def draw(seed: int, torch: str) -> CaseSpec:
    """The case of ``seed`` for a torch version ("2.13" or "2.15"): generator 1's draw below
    :data:`tools.corpus.axes.V2_FIRST_SEED` (the committed cases), generator 2's from it."""
    from tools.corpus.axes import V2_FIRST_SEED, draw_v2

    if seed >= V2_FIRST_SEED:
        return draw_v2(seed, torch)
    rng = random.Random(f"hangscope-corpus-{torch}-{seed}")
    recorder, _ = _recorder(rng, torch)
    while True:
        tp, pp, dp, hsdp = _topology(rng)
        steps = rng.randint(3, 5)
        ops = _step_ops(rng, tp, pp, dp, hsdp, recorder)
        kind = rng.choice(FAULTS)
        topo = {
            "world": tp * pp * dp,
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "step_ops": ops,
            "steps": steps,
        }
        fault = _fault(rng, kind, topo)
        if fault is not None:
            break
    policy = "all"
    if recorder != "gloo" or rng.random() < 0.3:
        policy = rng.choice(["all", "timed_out", "timed_out"])
    if fault.kind in ("stuck_in_collective", "healthy", "slow_rank"):
        policy = "all"  # a frozen rank writes its buffer as it freezes; nothing times out
    small = rng.random() < 0.2
    return CaseSpec(
        seed=seed,
        torch=torch,
        recorder=recorder,
        fmt="json" if rng.random() < 0.2 else "pickle",
        policy=policy,
        buffer_size=rng.choice([12, 16, 24]) if small else 2000,
        junk=rng.random() < 0.3,
        world=tp * pp * dp,
        tp=tp,
        pp=pp,
        dp=dp,
        hsdp=hsdp,
        local_sync=rng.random() < 0.3,
        steps=steps + (3 if small else 0),
        step_ops=tuple(ops),
        fault=fault,
        timeout_s={4: 3.0, 6: 4.0, 8: 5.0}.get(tp * pp * dp, 8.0),
    )
