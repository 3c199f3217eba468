"""The corpus's generator draws what it says, and its checker scores answers as documented."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tools.corpus.axes import (
    CPU_FIRST_SEED,
    CUDA_FIRST_SEED,
    DEBUGSRV_FIRST_SEED,
    DEBUGSRV_LAST_SEED,
    HOOKJSON_FIRST_SEED,
    HOOKJSON_LAST_SEED,
    HOOKWRAP_FIRST_SEED,
    LATE_FIRST_SEED,
    LATE_RESTART_FIRST_SEED,
    NOT_TORCHCOMMS,
    PERIODIC_FIRST_SEED,
    RESTART_FIRST_SEED,
    ROUNDS_FIRST_SEED,
    TIMEOUTS,
    V2_FIRST_SEED,
    WIDE_END_SEED,
    WIDE_FIRST_SEED,
)
from tools.corpus.check import Said, case_paths, classify, read_case, read_said
from tools.corpus.spec import FAULTS, CaseSpec, draw

TORCH = ("2.13", "2.15")

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"

STALL = {"hang": True, "culprits": [1], "kinds": ["not_joined"]}
TWO = {"hang": True, "culprits": [1, 3], "kinds": ["not_joined", "missing_dump"]}
DESYNC_NOFILE = {
    "hang": True,
    "culprits": [3],
    "kinds": ["size_mismatch"],
    "dumped_ranks": [0, 1, 2],
}
HEALTHY = {"hang": False, "culprits": [], "kinds": ["no_hang"]}


def _rounds(taken: str) -> dict:
    """A stalled rank 2 whose file of the newest round is lost, with one in a round ``taken``."""
    rounds = [{"ranks": [0, 1, 2, 3], "taken": taken}, {"ranks": [0, 1, 3], "taken": taken}]
    return {
        "hang": True,
        "fault": "stall_dataloader",
        "culprits": [2],
        "kinds": ["missing_dump"],
        "dumped_ranks": [0, 1, 3],
        "recorded": {"rounds": {"rounds": rounds}},
    }


STALL_SEEN = _rounds("by the interval timer after the first op failed")
STALL_BEFORE = _rounds("by the interval timer while running")


def said(
    verdict: str, kind: str, *culprits: tuple[int, str], suspects: tuple[int, ...] = ()
) -> Said:
    return Said(verdict, kind, tuple(culprits), suspects)


@pytest.mark.parametrize(
    ("truth", "answer", "result", "why"),
    [
        (STALL, said("hang", "not_joined", (1, "certain")), "right", ""),
        (STALL, said("hang", "missing_dump", (1, "certain")), "wrong", "right culprit, wrong kind"),
        (STALL, said("hang", "not_joined", (2, "certain")), "wrong", "confident wrong culprit"),
        (STALL, said("hang", "not_joined", (1, "likely"), (2, "certain")), "wrong", "confident"),
        (STALL, said("no_hang", "no_hang"), "wrong", "missed hang"),
        (STALL, said("inconclusive", "inconclusive"), "unsure", ""),
        (STALL, said("inconclusive", "inconclusive", suspects=(0, 1)), "unsure", ""),
        (STALL, said("inconclusive", "inconclusive", suspects=(0, 2)), "wrong", "not among"),
        (STALL, said("hang", "not_joined", (1, "suspect"), (2, "suspect")), "unsure", ""),
        (STALL, said("hang", "not_joined", (2, "suspect")), "wrong", "not among"),
        (STALL, said("error", "SchemaError"), "wrong", "the analysis failed"),
        (TWO, said("hang", "missing_dump", (1, "certain"), (3, "likely")), "right", ""),
        (TWO, said("hang", "not_joined", (1, "certain")), "wrong", "missed a culprit"),
        (TWO, said("hang", "not_joined", (1, "certain"), (3, "suspect")), "unsure", ""),
        (DESYNC_NOFILE, said("hang", "missing_dump", (3, "certain")), "right", ""),
        (DESYNC_NOFILE, said("hang", "not_joined", (3, "certain")), "wrong", "wrong kind"),
        (
            {**DESYNC_NOFILE, "dumped_ranks": [0, 1, 2, 3]},
            said("hang", "missing_dump", (3, "certain")),
            "wrong",
            "wrong kind",
        ),
        # its file of a round taken while hung shows it never joined: that kind is right too
        (STALL_SEEN, said("hang", "not_joined", (2, "certain")), "right", ""),
        (STALL_SEEN, said("hang", "missing_dump", (2, "likely")), "right", ""),
        (STALL_BEFORE, said("hang", "not_joined", (2, "certain")), "wrong", "wrong kind"),
        (
            {**STALL_SEEN, "fault": "size_desync", "kinds": ["size_mismatch"]},
            said("hang", "not_joined", (2, "certain")),
            "wrong",
            "wrong kind",
        ),
        (HEALTHY, said("no_hang", "no_hang"), "right", ""),
        (HEALTHY, said("inconclusive", "inconclusive"), "unsure", ""),
        (HEALTHY, said("hang", "not_joined", (0, "certain")), "wrong", "false alarm"),
    ],
)
def test_classify(truth: dict, answer: Said, result: str, why: str) -> None:
    got, reason = classify(truth, answer)
    assert got == result and why in reason


def test_reads_the_old_schema_every_culprit_confident() -> None:
    doc = json.loads((GOLDEN / "stall_w4.json").read_text())
    s = read_said(doc)
    assert s.verdict == "hang" and s.kind == "not_joined"
    assert s.culprits == ((1, "certain"),) and s.suspects == ()


def test_reads_the_new_schema_with_confidence_and_suspects() -> None:
    doc = {
        "schema": "hangscope.diagnosis/1.1",
        "verdict": "hang",
        "kind": "missing_dump",
        "culprit_ranks": [2, 5],
        "culprits": [
            {"rank": 2, "confidence": "certain", "because": "its peers wait on it"},
            {"rank": 5, "confidence": "suspect", "because": "no dump"},
        ],
        "suspects": [5, {"rank": 6}],
        "suspect_ranks": [7],  # dumps with dropped values, not suspects
    }
    s = read_said(doc)
    assert s.culprits == ((2, "certain"), (5, "suspect"))
    assert s.suspects == (5, 6)


def test_suspect_ranks_of_the_old_schema_are_not_suspects() -> None:
    s = read_said({"verdict": "inconclusive", "kind": "inconclusive", "suspect_ranks": [3]})
    assert s.suspects == () and s.culprits == ()


def test_draw_is_a_function_of_the_seed_and_round_trips() -> None:
    for torch in ("2.13", "2.15"):
        a, b = draw(17, torch), draw(17, torch)
        assert a == b
        assert CaseSpec.from_json(json.loads(json.dumps(a.to_json()))) == a
        assert a.world == a.tp * a.pp * a.dp and 4 <= a.world <= 16


def test_every_fault_class_and_recorder_is_drawn() -> None:
    specs = [draw(seed, torch) for seed in range(300) for torch in ("2.13", "2.15")]
    assert {s.fault.kind for s in specs} == set(FAULTS)
    assert {s.recorder for s in specs} == {"gloo", "nccl2", "nccl-lazy"}
    assert {s.recorder for s in specs if s.torch == "2.13"} == {"gloo"}
    assert {s.policy for s in specs} == {"all", "timed_out"}
    for s in specs:
        assert s.fault.step < s.steps and s.fault.index < len(s.step_ops)
        if s.fault.kind in ("healthy", "slow_rank", "stuck_in_collective"):
            assert s.policy == "all"  # nothing times out / the frozen rank dumps as it freezes
        if s.fault.kind == "p2p_deadlock":
            a, b = s.fault.ranks
            assert s.pp > 1 and b - a == s.tp  # neighbouring stages


def test_read_case_writes_only_inside_its_folder(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in [
            ("case/nccl_trace_rank_0", b"x"),
            ("../../escape", b"y"),
            ("case/TRUTH.json", json.dumps({"case": "case", "hang": False}).encode()),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "case.tar.xz"
    path.write_bytes(buf.getvalue())
    truth, folder = read_case(path, tmp_path / "out")
    assert truth == {"case": "case", "hang": False}
    assert folder is not None
    assert sorted(p.name for p in folder.iterdir()) == ["escape", "nccl_trace_rank_0"]
    assert not (tmp_path / "escape").exists()


def test_every_committed_case_has_a_complete_truth() -> None:
    paths = case_paths(ROOT / "corpus" / "cases")
    assert paths, "corpus/cases holds the recorded cases"
    for path in paths:
        truth, _ = read_case(path)
        assert truth["case"] == path.name.removesuffix(".tar.xz")
        assert truth["fault"] in FAULTS
        assert set(truth["culprits"]) <= set(range(truth["world"]))
        assert truth["hang"] == (truth["fault"] not in ("healthy", "slow_rank"))
        assert truth["kinds"] and truth["dumped_ranks"]
        rec = truth["recorded"]
        assert rec["torch"].startswith(("2.13", "2.15")) and rec["policy"] in ("all", "timed_out")


def _dump_formats(path: Path) -> set[str]:
    """How a case's rank files are written, read from their first byte (a pickle's protocol
    mark, or JSON's opening brace); logs, notes and the debug server's text files left out."""
    found: set[str] = set()
    with tarfile.open(path, "r:xz") as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if not member.isfile() or "rank_" not in name or name.endswith(".txt"):
                continue
            fileobj = tar.extractfile(member)
            first = fileobj.read(1) if fileobj is not None else b""
            found.add({b"\x80": "pickle", b"{": "json"}.get(first, repr(first)))
    return found


def test_every_committed_case_says_how_its_dumps_are_written() -> None:
    """``recorded.format`` is what the files are: the recorder hook wrote pickles whatever
    its case drew, except on its JSON axis."""
    wrong = []
    for path in case_paths(ROOT / "corpus" / "cases"):
        truth, _ = read_case(path)
        if _dump_formats(path) != {truth["recorded"]["format"]}:
            wrong.append(path.name)
    assert not wrong


def test_the_hook_writes_json_only_on_its_json_axis() -> None:
    spec = draw(1018, "2.15")
    assert spec.hooked and spec.fmt == "json" and not spec.hookjson
    assert spec.written_fmt == "pickle"
    on_axis = draw(4400, "2.15")
    assert on_axis.hookjson and on_axis.fmt == "json" and on_axis.written_fmt == "json"


def test_read_case_keeps_a_restarts_attempt_folders(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name in (
            "case/attempt_0/nccl_trace_rank_0",
            "case/attempt_1/nccl_trace_rank_0",
            "case/attempt_1/dumps_20261207_013008/nccl_trace_rank_1",
            "case/a/../../b/escape",
            "case/train.log",
        ):
            info = tarfile.TarInfo(name)
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
    path = tmp_path / "case.tar.xz"
    path.write_bytes(buf.getvalue())
    _, folder = read_case(path, tmp_path / "out")
    assert folder is not None
    got = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert got == [
        "attempt_0/nccl_trace_rank_0",
        "attempt_1/dumps_20261207_013008/nccl_trace_rank_1",
        "attempt_1/nccl_trace_rank_0",
        "escape",
        "train.log",
    ]
    assert (folder / "attempt_1" / "nccl_trace_rank_0").read_text().startswith("case/attempt_1")


def test_generator_1_seeds_draw_the_committed_cases() -> None:
    """New axes are drawn only from :data:`V2_FIRST_SEED` on: every committed case of
    generator 1 is still what its seed draws (but three recorded before an earlier change
    of the draw, whose seeds draw another case now)."""
    redrawn = []
    for path in case_paths(ROOT / "corpus" / "cases"):
        truth, _ = read_case(path)
        if truth["generator"] != "tools/corpus 1":
            continue
        spec = draw(truth["seed"], truth["recorded"]["torch"][:4])
        assert spec.generator == 1 and spec.cp == 1 and not spec.eval_ops
        if spec.name != truth["case"].removesuffix("_states"):
            redrawn.append(truth["case"])
            continue
        assert [o.kind for o in spec.step_ops] == truth["step_ops"]
        assert spec.steps == truth["steps"] and spec.policy == truth["recorded"]["policy"]
        assert spec.fault.index == truth["injected"]["op_index"]
        assert spec.fault.step == truth["injected"]["step"]
    assert len(redrawn) <= 3, redrawn


def test_generator_2_draws_the_new_axes() -> None:
    specs = [draw(seed, t) for seed in range(V2_FIRST_SEED, V2_FIRST_SEED + 300) for t in TORCH]
    assert all(s.generator == 2 for s in specs)
    assert {s.recorder for s in specs} == {"gloo", "nccl2", "nccl-lazy", "torchcomms"}
    assert {s.recorder for s in specs if s.torch == "2.13"} == {"gloo", "torchcomms"}
    assert any(s.cp == 2 for s in specs) and any(s.eval_ops for s in specs)
    assert any(s.restart_fault for s in specs)
    for s in specs:
        kinds = [o.kind for o in s.step_ops]
        assert s.world == s.tp * s.cp * s.pp * s.dp
        assert s.fault.step < s.steps and s.fault.index < len(s.all_ops)
        if s.fault.index >= len(s.step_ops) and s.fault.kind not in ("healthy", "slow_rank"):
            assert s.fault.step in s.eval_at  # a fault in the eval pass: a step that has one
        if s.eval_ops:
            assert s.eval_ops[-1].kind == "eval_metric_all_reduce" and s.eval_at[0] == 1
        if s.cp > 1:
            assert any(k.startswith("cp_") for k in kinds)
        if "monitored_barrier" in kinds or s.restart_fault:
            assert s.recorder == "gloo"  # (below RESTART_FIRST_SEED)
        assert not s.restart_world
        if s.recorder == "torchcomms":
            assert s.fault.kind != "stuck_in_collective" and not s.local_sync
            assert not set(kinds) & NOT_TORCHCOMMS
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    on_mb = [
        s for s in specs if s.fault.ranks and s.all_ops[s.fault.index].kind == "monitored_barrier"
    ]
    assert on_mb  # a stall or crash right before the monitored_barrier


def test_generator_2_seeds_draw_the_committed_cases() -> None:
    """An axis added to generator 2 leaves the seeds recorded before it drawing the same
    case: every committed case of generator 2 is still what its seed draws."""
    for path in case_paths(ROOT / "corpus" / "cases"):
        truth, _ = read_case(path)
        if truth["generator"] != "tools/corpus 2":
            continue
        spec = draw(truth["seed"], truth["recorded"]["torch"][:4])
        assert spec.name == truth["case"].removesuffix("_states")
        assert [o.kind for o in spec.all_ops] == truth["step_ops"] + truth["eval_ops"]
        assert spec.steps == truth["steps"] and spec.policy == truth["recorded"]["policy"]
        assert (spec.fault.step, spec.fault.index) == (
            truth["injected"]["step"],
            truth["injected"]["op_index"],
        )
        assert list(spec.cpu_groups) == truth["recorded"].get("cpu_groups", {}).get("groups", [])


def test_mixed_recorders_are_drawn_only_beside_the_hook() -> None:
    seeds = range(V2_FIRST_SEED, CPU_FIRST_SEED + 300)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    mixed = [s for s in specs if s.cpu_groups]
    assert mixed and {g for s in mixed for g in s.cpu_groups} == {"ckpt", "dp"}
    for s in mixed:
        assert s.seed >= CPU_FIRST_SEED and s.torch == "2.15"
        assert s.recorder in ("nccl2", "nccl-lazy") and s.name.endswith(f"_cpu_t215_s{s.seed:05d}")
        assert s.buffer_size == 2000  # c10d's buffer must not wrap (the forwarders' ops go)
        if "ckpt" in s.cpu_groups:
            kinds = {(o.kind, o.group) for o in s.step_ops}
            assert ("ckpt_broadcast_object", "ckpt") in kinds
            assert ("ckpt_broadcast_object", "world") not in kinds
        if "dp" in s.cpu_groups:
            assert s.dp > 1
        if s.fault.ranks and s.fault.kind not in ("slow_rank", "group_order_deadlock"):
            assert s.fault.index < len(s.all_ops)
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    share = len(mixed) / sum(s.recorder in ("nccl2", "nccl-lazy") for s in specs[-600:])
    assert 0.3 < share < 0.7


def test_restarts_for_every_recorder_and_elastic_ones_from_their_first_seed() -> None:
    seeds = range(RESTART_FIRST_SEED, RESTART_FIRST_SEED + 300)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    restarts = [s for s in specs if s.restart_fault]
    assert {s.recorder for s in restarts} == {"gloo", "nccl2", "nccl-lazy", "torchcomms"}
    elastic = [s for s in restarts if s.restart_world]
    assert {(s.world, s.restart_world) for s in elastic} == {(4, 8), (8, 4)}
    assert any(s.restart_fault.ranks[0] >= s.world for s in elastic)  # a rank that is gone
    for s in restarts:
        assert s.restart_fault is not None and s.restart_fault.step < s.steps
        older = s.older_attempt()
        assert older.restart_fault is None and older.policy == "all"
        assert older.fault == s.restart_fault and older.step_ops == s.step_ops
        assert older.world == older.tp * older.cp * older.pp * older.dp
        assert older.world == (s.restart_world or s.world)
        assert s.restart_fault.ranks[0] < older.world
        if s.restart_world:  # the DP groups (HSDP's shard and replicate) keep two ranks
            assert (
                older.dp >= (4 if s.hsdp else 2)
                and older.timeout_s == {4: 3.0, 8: 5.0}[older.world]
            )
        assert ("_elastic" in s.name) == bool(s.restart_world)
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_torchcomms_on_cuda_and_repeated_snapshots_from_their_first_seed() -> None:
    seeds = range(CUDA_FIRST_SEED, CUDA_FIRST_SEED + 300)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    before = [draw(seed, t) for seed in range(V2_FIRST_SEED, CUDA_FIRST_SEED) for t in TORCH]
    assert not any(s.cuda or s.snapshots for s in before)
    comms = [s for s in specs if s.recorder == "torchcomms"]
    cuda = [s for s in comms if s.cuda]
    assert 0.3 < len(cuda) / len(comms) < 0.7 and all("_cuda" in s.name for s in cuda)
    assert all(s.recorder == "torchcomms" for s in specs if s.cuda)
    stuck = {s.cuda for s in comms if s.fault.kind == "stuck_in_collective"}
    assert stuck == {True}  # a frozen rank's op is in flight only on CUDA
    assert any(any(o.kind == "pp_batch_isend_irecv" for o in s.step_ops) for s in comms)
    snaps = [s for s in specs if s.snapshots]
    assert {s.recorder for s in snaps} == {"gloo", "torchcomms"}
    assert all(s.restart_fault is None and "_snap" in s.name for s in snaps)
    missing = [s for s in snaps if s.snapshot_missing]
    assert missing and len(missing) < len(snaps)
    assert all(0 < len(s.snapshot_missing) <= s.world // 2 for s in missing)
    for s in cuda + snaps:
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_periodic_dumps_from_their_first_seed() -> None:
    """A round of dumps taken while the job still runs: drawn from its own seed on, for
    every recorder, never with a restart or repeated snapshots, before the fault's step."""
    seeds = range(PERIODIC_FIRST_SEED, PERIODIC_FIRST_SEED + 300)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    before = [draw(seed, t) for seed in range(V2_FIRST_SEED, PERIODIC_FIRST_SEED) for t in TORCH]
    assert not any(s.periodic_after >= 0 or s.periodic_missing for s in before)
    periodic = [s for s in specs if s.periodic_after >= 0]
    assert {s.recorder for s in periodic} == {"gloo", "nccl2", "nccl-lazy", "torchcomms"}
    assert {s.torch for s in periodic if s.recorder == "gloo"} == {"2.13", "2.15"}
    assert any(not s.periodic_after for s in periodic) and any(s.periodic_after for s in periodic)
    for s in periodic:
        assert s.restart_fault is None and not s.snapshots and "_periodic" in s.name
        if s.fault.kind in ("healthy", "slow_rank"):
            assert s.periodic_after < s.steps - 1
        else:
            assert s.periodic_after < s.fault.step  # while the job still runs
        assert len(s.periodic_missing) <= s.world // 2
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    missing = [s for s in periodic if s.periodic_missing]
    assert 0.3 < len(missing) / len(periodic) < 0.7
    assert any(set(s.periodic_missing) & set(s.fault.ranks) for s in missing)
    assert any(s.fault.ranks and not set(s.periodic_missing) & set(s.fault.ranks) for s in missing)
    assert not any("_periodic" in s.name for s in specs if s.periodic_after < 0)


def test_interval_rounds_from_their_first_seed() -> None:
    """Several interval rounds taken in the middle of a step: drawn from their own seed on,
    for every recorder, never with a restart, a periodic dump or repeated snapshots, in
    steps before the fault's; each rank at a point of its own."""
    seeds = range(ROUNDS_FIRST_SEED, ROUNDS_FIRST_SEED + 300)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    before = [
        draw(seed, t) for seed in range(PERIODIC_FIRST_SEED, ROUNDS_FIRST_SEED) for t in TORCH
    ]
    assert not any(s.rounds_at or s.round_points or s.rounds_missing for s in before)
    rounds = [s for s in specs if s.rounds_at]
    assert 0.4 < len(rounds) / len(specs) < 0.8
    assert {s.recorder for s in rounds} == {"gloo", "nccl2", "nccl-lazy", "torchcomms"}
    assert {s.torch for s in rounds if s.recorder == "gloo"} == {"2.13", "2.15"}
    assert {len(s.rounds_at) for s in rounds} == {2, 3}
    for s in rounds:
        # (a restart beside late rounds: tools.corpus.axes' late axis, from its own seed)
        late_restart = s.seed >= LATE_RESTART_FIRST_SEED and "_late" in s.name
        assert s.restart_fault is None or late_restart
        assert not s.snapshots and s.periodic_after < 0
        assert "_rounds" in s.name and "_periodic" not in s.name
        assert list(s.rounds_at) == sorted(set(s.rounds_at))
        if s.fault.kind in ("healthy", "slow_rank"):
            assert s.rounds_at[-1] < s.steps - 1
        else:
            assert s.rounds_at[-1] < s.fault.step < s.steps  # every round before the hang
        if s.fault.index >= len(s.step_ops) and s.fault.kind not in ("healthy", "slow_rank"):
            assert s.fault.step in s.eval_at
        assert len(s.round_points) == len(s.round_compute) == len(s.rounds_at)
        for points, compute in zip(s.round_points, s.round_compute):
            assert len(points) == len(compute) == s.world
            assert all(0 <= i <= len(s.step_ops) for i in points)
            assert all(0 <= c < s.timeout_s / 2 for c in compute)
        assert len(s.rounds_missing) <= s.world // 2
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    # ranks caught at different points of one round, some computing while others go on
    assert any(len(set(p)) > 1 for s in rounds for p in s.round_points)
    assert any(len(set(c)) > 1 for s in rounds for c in s.round_compute)
    missing = [s for s in rounds if s.rounds_missing]
    assert 0.3 < len(missing) / len(rounds) < 0.7
    crashes = [s for s in rounds if s.fault.kind in ("crash_exit", "crash_sigkill")]
    assert len(crashes) > sum(s.fault.kind == "stall_compute" for s in rounds) / 2
    assert not any("_rounds" in s.name for s in specs if not s.rounds_at)


def test_late_rounds_from_their_first_seed() -> None:
    """Skipped rounds, files landing in the next round's folder, and the hang's round by an
    interval timer: drawn from their own seed on, only with interval rounds, never before."""
    seeds = range(LATE_FIRST_SEED, LATE_FIRST_SEED + 300)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    before = [draw(seed, t) for seed in range(ROUNDS_FIRST_SEED, LATE_FIRST_SEED) for t in TORCH]
    assert not any(s.round_skip or s.round_late or s.timer_rounds for s in before)
    late = [s for s in specs if "_late" in s.name]
    assert 0.2 < len(late) / len(specs) < 0.5  # most of the cases with interval rounds
    assert {s.recorder for s in late} == {"gloo", "nccl2", "nccl-lazy", "torchcomms"}
    assert any(any(s.round_skip) for s in late) and any(any(s.round_late) for s in late)
    assert {s.timer_rounds for s in late} == {0, 1, 2, 3}
    restarts = [s for s in late if s.restart_fault is not None]
    assert restarts and not any(s.restart_fault for s in late if s.seed < LATE_RESTART_FIRST_SEED)
    for s in late:
        assert s.rounds_at and "_rounds" in s.name
        n = len(s.rounds_at)
        assert len(s.round_skip) == len(s.round_late) == n
        assert not s.round_late[-1]  # a late file lands in an interval round's folder
        for k in range(n):
            assert len(s.round_skip[k]) + len(s.round_late[k]) <= s.world // 2 * 2
            assert len(s.round_skip[k]) <= s.world // 2 and len(s.round_late[k]) <= s.world // 2
            nxt = s.round_skip[k + 1] if k + 1 < n else ()
            assert not set(s.round_late[k]) & (set(s.round_skip[k]) | set(nxt))
        if s.timer_rounds:
            assert s.fault.kind not in ("healthy", "slow_rank", "stuck_in_collective")
        if s.restart_fault is not None:  # beside the rounds: an older attempt without them
            assert s.seed >= LATE_RESTART_FIRST_SEED and s.recorder in ("gloo", "torchcomms")
            older = s.older_attempt()
            assert not older.rounds_at and not older.timer_rounds and not any(older.round_late)
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s
    assert not any(
        s.round_skip or s.round_late or s.timer_rounds for s in specs if "_late" not in s.name
    )


def test_hook_small_buffers_and_snapshots_from_their_first_seed() -> None:
    """The recorder hook's small buffers beside gloo groups and its repeated snapshots (in a
    dated folder or in one folder under suffixed names): from their own seed on, the hook's
    cases without a restart only, in place of interval rounds and periodic dumps."""
    seeds = range(HOOKWRAP_FIRST_SEED, HOOKWRAP_FIRST_SEED + 300)
    before = [draw(seed, "2.15") for seed in range(LATE_FIRST_SEED, HOOKWRAP_FIRST_SEED)]
    assert not any(s.hook_ring or s.snapshot_layout for s in before)
    specs = [draw(seed, t) for seed in seeds for t in TORCH]
    wrap = [s for s in specs if "_hookwrap" in s.name]
    assert wrap and {s.recorder for s in wrap} == {"nccl2", "nccl-lazy"}
    assert all(s.torch == "2.15" for s in wrap)
    hook = [s for s in specs if s.recorder in ("nccl2", "nccl-lazy") and not s.restart_fault]
    assert len(hook) == len(wrap)
    assert {s.snapshot_layout for s in wrap} == {"", "dated", "numbered", "stamped"}
    for s in wrap:
        assert s.cpu_groups and s.restart_fault is None
        assert s.hook_ring or s.snapshots
        assert not s.rounds_at and s.periodic_after < 0 and not s.timer_rounds
        assert bool(s.snapshot_layout) == s.snapshots
        if s.hook_ring:
            assert s.buffer_size in (8, 12, 16) and s.steps >= 7
        assert len(s.snapshot_missing) <= s.world // 2
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_wide_worlds_from_their_first_seed_to_their_end() -> None:
    """Worlds of 8, 12 and 16 ranks: drawn for every seed of the axis's range, every recorder
    and fault class, the job's timeout scaled with the world; never before or after it."""
    specs = [draw(seed, t) for seed in range(WIDE_FIRST_SEED, WIDE_END_SEED) for t in TORCH]
    others = [draw(seed, t) for seed in range(3900, WIDE_FIRST_SEED) for t in TORCH]
    others += [draw(seed, t) for seed in range(WIDE_END_SEED, WIDE_END_SEED + 50) for t in TORCH]
    assert not any(s.wide or "_wide" in s.name or s.world > 8 for s in others)
    assert all(s.wide and "_wide_" in s.name for s in specs)
    assert {s.world for s in specs} == {8, 12, 16}
    assert {s.recorder for s in specs} == {"gloo", "nccl2", "nccl-lazy", "torchcomms"}
    assert {s.cuda for s in specs if s.recorder == "torchcomms"} == {False, True}
    assert {s.fault.kind for s in specs} == set(FAULTS)
    assert any(s.cp > 1 for s in specs) and any(s.hsdp for s in specs)
    assert any(s.pp == 4 for s in specs) and any(s.tp == 4 for s in specs)
    assert any(s.dp == 3 for s in specs)
    assert {(s.world, s.restart_world) for s in specs if s.restart_world} == {(8, 4), (16, 8)}
    for s in specs:
        assert s.world == s.tp * s.cp * s.pp * s.dp and s.timeout_s == TIMEOUTS[s.world]
        if s.hsdp:
            assert s.dp >= 4 and s.dp % 2 == 0
        assert s.fault.step < s.steps and s.fault.index < len(s.all_ops)
        assert all(r < s.world for r in s.fault.ranks)
        if s.restart_fault is not None:
            older = s.older_attempt()
            assert older.world == older.tp * older.cp * older.pp * older.dp
            assert older.timeout_s == TIMEOUTS[older.world]


def _torch215_axis(
    first: int, last: int, tag: str, drawn: Callable[[CaseSpec], bool]
) -> list[CaseSpec]:
    """The specs of torch 2.15's seeds ``first`` to ``last`` of an axis of its own, checked
    to carry its name tag, with torch 2.13's seeds there and the seeds around it without."""
    seeds = range(first, last + 1)
    assert not any(tag in draw(seed, "2.13").name for seed in seeds)
    assert not any(drawn(draw(seed, t)) for seed in (first - 1, last + 1) for t in TORCH)
    specs = [draw(seed, "2.15") for seed in seeds]
    assert all(tag in s.name and s.name.endswith(f"_s{s.seed:05d}") for s in specs)
    return specs


def test_debug_server_cases_from_their_first_seed() -> None:
    """The debug server's folder (``_debugsrv``): seeds DEBUGSRV_FIRST_SEED to
    DEBUGSRV_LAST_SEED of torch 2.15 only, TorchComms' recorder over gloo, every fault class
    but a frozen rank, 4 and 8 ranks, the culprit rank 0 in some, ranks that exit before the
    frontend's last round (never a culprit) in some; no other axis drawn with it."""
    specs = _torch215_axis(
        DEBUGSRV_FIRST_SEED, DEBUGSRV_LAST_SEED, "_debugsrv", lambda s: bool(s.debugsrv_interval)
    )
    assert {s.fault.kind for s in specs} == set(FAULTS) - {"stuck_in_collective"}
    assert {s.world for s in specs} == {4, 8}
    assert {s.debugsrv_interval for s in specs} == {1.0, 2.0, 4.0}
    assert any(0 in s.fault.ranks for s in specs if s.fault.kind != "healthy")
    assert any(s.debugsrv_exit for s in specs) and any(0 in s.debugsrv_exit for s in specs)
    for s in specs:
        assert s.recorder == "torchcomms" and not s.cuda and not s.local_sync
        assert s.restart_fault is None and not s.rounds_at and not s.snapshots
        assert s.periodic_after < 0 and not s.eval_ops and not s.junk
        assert not {o.kind for o in s.step_ops} & (NOT_TORCHCOMMS - {"pp_batch_isend_irecv"})
        assert not set(s.debugsrv_exit) & set(s.fault.ranks)
        assert len(s.debugsrv_exit) <= s.world // 2
        hang = s.fault.kind not in ("healthy", "slow_rank")
        assert 0 <= s.debugsrv_start <= (s.fault.step if hang else s.steps - 1)
        assert hang or not s.debugsrv_exit
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_hook_json_cases_from_their_first_seed() -> None:
    """The recorder hook written as JSON (``_hookjson``): seeds HOOKJSON_FIRST_SEED to
    HOOKJSON_LAST_SEED of torch 2.15 only, nccl2 and nccl-lazy, every fault class, 4 and 8
    ranks, JSON in most and pickles in the rest, a restart's older folder (some elastic) in
    about half; no rounds, snapshots or periodic dumps drawn with it."""
    specs = _torch215_axis(
        HOOKJSON_FIRST_SEED, HOOKJSON_LAST_SEED, "_hookjson", lambda s: s.hookjson
    )
    assert {s.fault.kind for s in specs} == set(FAULTS)
    assert {s.world for s in specs} == {4, 8}
    assert {s.recorder for s in specs} == {"nccl2", "nccl-lazy"}
    n_json = sum(s.hook_json for s in specs)
    n_restart = sum(s.restart_fault is not None for s in specs)
    assert 60 <= n_json <= 90 and 30 <= n_restart <= 70
    assert any(s.restart_world for s in specs) and any(s.cpu_groups for s in specs)
    for s in specs:
        assert s.hooked and s.torch == "2.15" and s.buffer_size == 2000
        assert not s.rounds_at and not s.snapshots and s.periodic_after < 0 and not s.hook_ring
        assert all(r < s.world for r in s.fault.ranks)
        if s.restart_fault is not None:
            older = s.older_attempt()
            assert older.world == older.tp * older.cp * older.pp * older.dp
            assert older.hook_json == s.hook_json  # both attempts written alike
        assert CaseSpec.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_a_frozen_ranks_peer_that_had_not_entered_its_op_discards_the_run(tmp_path: Path) -> None:
    """stuck_in_collective is kept only where every peer of the frozen rank entered its op
    before the first failure; a peer still outside it (load) leaves dumps of a stall."""
    from tools.corpus.truth import judge, read_logs

    spec = next(
        s
        for seed in range(4400, 4700)
        if (s := draw(seed, "2.15")).fault.kind == "stuck_in_collective" and s.policy == "all"
    )
    frozen, peer = spec.fault.ranks[0], (spec.fault.ranks[0] + 1) % spec.world
    where = f"{spec.fault.step}.{spec.fault.index}"

    def logs(joins_at: float) -> dict:
        for r in range(spec.world):
            lines = [f"[rank {r} 1.0] OP {where}"]
            if r == frozen:
                lines += [f"[rank {r} 1.1] FAULT stuck_in_collective freezing in {where}"]
                lines += [f"[rank {r} 1.2] DUMPED a"]
            if r == peer:
                lines += [f"[rank {r} 1.0] AWAITS {where}", f"[rank {r} {joins_at}] JOINS {where}"]
            if r == (frozen + 2) % spec.world:
                lines += [f"[rank {r} 5.0] ERROR at {where}: timed out"]
            (tmp_path / f"rank_{r}.log").write_text("\n".join(lines) + "\n")
        return read_logs(tmp_path, spec.world)

    everyone = set(range(spec.world))
    assert judge(spec, logs(joins_at=1.5), set(), everyone) is None
    late = judge(spec, logs(joins_at=6.0), set(), everyone)
    assert late == f"ranks [{peer}] had not entered the frozen rank's op when the first op failed"


def test_one_file_lost_takes_the_lowest_and_highest_waiter_and_never_the_only_file() -> None:
    """`make accuracy-lost-one` takes away a rank that is no culprit, never the only dumped
    rank: with no file left the analysis rightly refuses, which scored as a wrong answer."""
    from tools.corpus.subsets import lost_ranks

    assert lost_ranks({"culprits": [3], "dumped_ranks": [0, 1, 2]}) == [0, 2]
    assert lost_ranks({"culprits": [0], "dumped_ranks": [0, 1]}) == [1]
    assert lost_ranks({"culprits": [3], "dumped_ranks": [1]}) == []
    assert lost_ranks({"culprits": [1], "dumped_ranks": [1]}) == []
