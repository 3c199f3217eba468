"""Generate corpus cases: real torch jobs on loopback, one random case per seed.

    python -m tools.corpus.generate --out corpus/cases --count 50        # next 50 seeds
    python -m tools.corpus.generate --out corpus/cases --seeds 7 12       # those seeds

Run it with the Python of the torch to record (torch 2.13 draws gloo cases; torch 2.15 draws
gloo, nccl2 and nccl-lazy cases through :mod:`tools.hook_backend`; from seed 1000 on,
generator 2 also draws TorchComms' recorder with either, :mod:`tools.corpus.axes`). ``--count``
continues from the highest seed in ``--out``, and from 1000 at least. Each kept case becomes
``<out>/<name>.tar.xz``: a folder with the dumps (frame paths scrubbed as the samples' are,
and, where drawn, other files beside them) and ``TRUTH.json``. A recorder-hook run gives two
cases: as recorded, and with nccl2's completion states laid over (``_states``). A run whose
fault did not fire as designed is discarded (its seed is skipped) and said so on stderr.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import random
import re
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from tools import launcher
from tools import record_gloo as rg
from tools.corpus.axes import V2_FIRST_SEED
from tools.corpus.spec import CaseSpec, draw
from tools.corpus.truth import expected, judge, read_logs
from tools.corpus.worker import (
    NEWER_DIR,
    PERIODIC_DIR,
    ROUND_DIR,
    SNAPSHOT_DELAY_S,
    TICK_DIR,
    TICK_S,
)

RUN_DEADLINE_S = 75.0
NO_HANG_GIVE_UP_S = 45.0
DUMP_WAIT_S = 25.0  # after the first op failed, for the ranks' files (8 ranks or fewer)
GENERATOR = "tools/corpus {}"  # the spec's generator version
ATTEMPTS = ("attempt_0", "attempt_1")  # a restart: the older attempt's dumps, then this run's


def _files(out_dir: Path) -> dict[int, list[Path]]:
    ranks: dict[int, list[Path]] = {}
    for p in sorted(out_dir.iterdir()):
        m = re.search(r"rank_(\d+)(\.json)?$", p.name)
        if m:
            ranks.setdefault(int(m.group(1)), []).append(p)
    return ranks


def _wait(spec: CaseSpec, workers: list[launcher.Worker], side: Any, out_dir: Path) -> set[int]:
    """Wait until the dumps are in (per policy) or the run is hopeless; return the ranks
    whose process died on its own (crashed or aborted) before the end."""
    started = time.monotonic()
    slack = 3.0 * spec.world  # starting torch in every rank shares the machine's cores
    # A rank's first dump takes seconds (the stack symbolizer starts), longer when 12 or 16
    # ranks dump at once on the machine's cores; with repeated snapshots its file is in only
    # after its newer one (the job's timeout plus SNAPSHOT_DELAY_S later).
    dump_wait = DUMP_WAIT_S * max(1.0, spec.world / 8)
    dump_wait += spec.timeout_s + SNAPSHOT_DELAY_S if spec.snapshots else 0.0
    t_err: float | None = None
    healthy = spec.fault.kind in ("healthy", "slow_rank")
    while time.monotonic() - started < RUN_DEADLINE_S + slack + dump_wait - DUMP_WAIT_S:
        time.sleep(0.1)
        alive = {w.rank for w in workers if w.running()}
        dumped = set(_files(out_dir))
        if not alive:
            break
        if healthy:
            if len(dumped) == spec.world:
                time.sleep(0.3)
                break
            continue
        if t_err is None and side.add("errors", 0) > 0:
            t_err = time.monotonic()
        if t_err is None:
            if time.monotonic() - started > NO_HANG_GIVE_UP_S + slack:
                break
            continue
        since = time.monotonic() - t_err
        if spec.timer_rounds:  # the timer's rounds: collected that many ticks after
            if since > spec.timer_rounds * TICK_S + 0.8:
                time.sleep(0.3)
                break
            continue
        if spec.policy == "all" and (alive <= dumped or since > dump_wait):
            time.sleep(0.3)
            break
        failed = side.add("errors", 0)
        settled = since > spec.timeout_s + 1.5 and len(dumped) >= failed
        if spec.policy == "timed_out" and (settled or since > spec.timeout_s + dump_wait):
            break
    died = {w.rank for w in workers if not w.running()}
    launcher.end(workers)
    launcher.remove_partial(out_dir)
    return died


def run(spec: CaseSpec, work: Path) -> tuple[dict[str, Any] | None, str]:
    """Run the case once in ``work``; (truth, "") or (None, why it was discarded). A case
    with a restart runs its older attempt first (in ``work/attempt_0``, checked the same
    way), then itself."""
    if spec.debugsrv_interval:  # the debug server's folder
        from tools.corpus import debugsrv

        return debugsrv.run(spec, work)
    older: dict[str, Any] | None = None
    if spec.restart_fault is not None:
        older, why = run(spec.older_attempt(), work / ATTEMPTS[0])
        if older is None:
            return None, f"the older attempt: {why}"
    truth, why = _run_once(spec, work)
    if truth is not None and older is not None:
        truth["restart"] = {
            "folders": list(ATTEMPTS),
            "analyzed": ATTEMPTS[1],
            "worlds": {ATTEMPTS[0]: older["world"], ATTEMPTS[1]: spec.world},
            "elastic": older["world"] != spec.world,
            "older": {
                "world": older["world"],
                "fault": spec.restart_fault.kind if spec.restart_fault else "",
                "ranks": list(spec.restart_fault.ranks) if spec.restart_fault else [],
                "culprits": older["culprits"],
                "dumped_ranks": older["dumped_ranks"],
                "injected": {
                    "step": spec.restart_fault.step if spec.restart_fault else 0,
                    "op_index": spec.restart_fault.index if spec.restart_fault else 0,
                },
            },
        }
    return truth, why


def _run_once(spec: CaseSpec, work: Path) -> tuple[dict[str, Any] | None, str]:
    out_dir, side_dir, log_dir = work / "out", work / "side", work / "logs"
    launcher.fresh_dirs(out_dir, side_dir, log_dir)
    job_store = launcher.free_store(spec.world)
    side_store = launcher.free_store(spec.world)
    cfgs = spec.worker_configs(out_dir, side_dir, job_store.port, side_store.port)
    started = time.monotonic()
    env = launcher.worker_env(2000 if spec.hook_ring else spec.buffer_size)
    env["TORCH_DISABLE_ADDR2LINE"] = "1"  # C++ frames are not in the dumps; addr2line takes s
    workers = launcher.spawn("tools.corpus.worker", cfgs, log_dir, env)
    died = _wait(spec, workers, side_store, out_dir)
    elapsed = time.monotonic() - started
    logs = read_logs(log_dir, spec.world)
    ticks: list[dict[str, Any]] = []
    why = ""
    if spec.timer_rounds:
        ticks, why = _timer_rounds(spec, out_dir, work / "side", log_dir, logs, died)
        if why:
            return None, why
    dumped = set(_files(out_dir))
    why = judge(spec, logs, died, dumped)
    if not why and spec.periodic_after >= 0:
        early = set(_files(out_dir / PERIODIC_DIR)) if (out_dir / PERIODIC_DIR).is_dir() else set()
        if early != set(range(spec.world)):
            why = f"the periodic round holds ranks {sorted(early)} only"
    if not why and spec.rounds_at:
        why = _rounds_complete(spec, out_dir)
    if why:
        return None, why
    rounds: dict[str, Any] = {}
    if spec.rounds_at:  # the files of the hang's round of these ranks are taken out (lost)
        lost = sorted(dumped & set(spec.rounds_missing))
        rounds = {"at": list(spec.rounds_at), "caught": _caught(log_dir, spec), "ticks": ticks}
        rounds["ranks_in"] = [
            sorted(_files(out_dir / f"{ROUND_DIR}{k}")) for k in range(len(spec.rounds_at))
        ]
        rounds |= {"newer": sorted(dumped - set(lost)), "lost": lost}
        rounds["no_newer_file"] = _why_no_file(spec, dumped, died, set(lost))
        dumped = dumped - set(lost)
    periodic: dict[str, Any] = {}
    if spec.periodic_after >= 0:  # the newer files of these ranks are taken out (keep)
        lost = sorted(dumped & set(spec.periodic_missing))
        periodic = {"after_step": spec.periodic_after, "older": list(range(spec.world))}
        periodic |= {"newer": sorted(dumped - set(lost)), "newer_missing": lost}
        # the truth is what the files after the hang say: a rank whose newer file is lost
        # has only a dump from before the fault (its culprit is a missing dump)
        dumped = dumped - set(lost)
    truth = expected(spec, dumped, died)
    if periodic:
        truth["periodic"] = periodic
    if rounds:
        truth["rounds"] = rounds
    if spec.snapshots:  # which ranks wrote which snapshot
        newer = out_dir / NEWER_DIR
        truth["snapshots"] = {
            "older": sorted(dumped),
            "newer": sorted(_files(newer)) if newer.is_dir() else [],
        }
    aborted = sorted(died - set(spec.fault.ranks))
    truth.update(
        {
            "world": spec.world,
            "dumped_ranks": sorted(dumped),
            "aborted_ranks": aborted,
            "first_error_rank": min(
                ((t, r) for r, log in logs.items() for t, _ in log.errors), default=(0, None)
            )[1],
            "elapsed_s": round(elapsed, 1),
        }
    )
    return truth, ""


_ROUND_LINE = re.compile(
    r"^\[rank (\d+) [0-9.]+\] ROUND (\d+) (written during .*|skipped during .*|holds .*)$"
)
_TICK_LINE = re.compile(r"^\[rank (\d+) [0-9.]+\] TICK (\d+) written during (.*)$")


def _timer_rounds(
    spec: CaseSpec, out_dir: Path, side_dir: Path, log_dir: Path, logs: Any, died: set[int]
) -> tuple[list[dict[str, Any]], str]:
    """Lay the interval timer's rounds out: the newest tick whose files are all in (every
    rank that did not die) becomes the hang's round (its files moved into ``out_dir``, its
    hook ops renamed as the dumps after the hang's), the ticks before it interval rounds
    after the drawn ones (``round_<n + i>``), the ticks after it (cut off as the run was
    ended) dropped. ([per tick: its tick, ranks, when taken, where each rank was], why the
    run is discarded or "")."""
    found = sorted(
        (int(p.name[len(TICK_DIR) :]), p)
        for p in out_dir.iterdir()
        if p.is_dir() and p.name.startswith(TICK_DIR)
    )
    live = set(range(spec.world)) - died
    while found and not live <= set(_files(found[-1][1])):
        shutil.rmtree(found.pop()[1])
    if not found:
        return [], "no tick of the interval timer holds every live rank's file"
    t_fire = min(t for log in logs.values() for t, _ in log.faults)
    t_err = min((t for log in logs.values() for t, _ in log.errors), default=None)
    if found[-1][0] * TICK_S < t_fire:
        return [], "the interval timer's newest round was taken before the fault fired"
    caught: dict[int, dict[str, str]] = {}
    for r in range(spec.world):
        path = log_dir / f"rank_{r}.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            m = _TICK_LINE.match(line)
            if m and int(m.group(1)) == r:
                caught.setdefault(int(m.group(2)), {})[str(r)] = m.group(3)
    ticks = []
    n = len(spec.rounds_at)
    for i, (j, folder) in enumerate(found):
        at = j * TICK_S
        taken = "by the interval timer while running"
        if at >= t_fire:
            taken = "by the interval timer while hung (ops in flight)"
        if t_err is not None and at >= t_err:
            taken = "by the interval timer after the first op failed"
        ranks = sorted(_files(folder))
        ticks.append({"tick": i, "ranks": ranks, "taken": taken, "caught_in": caught.get(j, {})})
        last = i == len(found) - 1
        into = out_dir if last else out_dir / f"{ROUND_DIR}{n + i}"
        into.mkdir(exist_ok=True)
        for p in [p for p in folder.iterdir() if p.is_file()]:
            os.replace(p, into / p.name)
        folder.rmdir()
        for ops in side_dir.glob(f"{TICK_DIR}{j}_*.ops.json"):
            rest = ops.name[len(f"{TICK_DIR}{j}_") :]
            ops.rename(side_dir / (rest if last else f"{ROUND_DIR}{n + i}_{rest}"))
    for extra in side_dir.glob(f"{TICK_DIR}*.ops.json"):
        extra.unlink()
    return ticks, ""


def _rounds_complete(spec: CaseSpec, out_dir: Path) -> str:
    """Why a run with interval rounds is discarded ("" when every round holds every rank's
    file and the rounds, then the dumps after the hang, are named by later and later
    seconds, as an interval dump's folders are)."""
    names = []
    n = len(spec.rounds_at)
    extra = sum(1 for p in out_dir.iterdir() if p.is_dir() and p.name.startswith(ROUND_DIR)) - n
    for k in range(n + max(extra, 0)):
        folder = out_dir / f"{ROUND_DIR}{k}"
        got = set(_files(folder)) if folder.is_dir() else set()
        want = set(range(spec.world))
        if k < len(spec.round_skip):  # skipped, or landing in the next round's folder
            want -= set(spec.round_skip[k]) | set(spec.round_late[k])
        if k >= n:  # the interval timer's: whoever wrote at that tick
            want = got
        if not got:
            return f"interval round {k} holds no file"
        if got != want:
            return f"interval round {k} holds ranks {sorted(got)}, not {sorted(want)}"
        names.append(_dumps_folder([p for p in folder.iterdir() if p.is_file()]))
    late = [p for ps in _files(out_dir).values() for p in ps]
    if late:
        names.append(_dumps_folder(late))
    if names != sorted(set(names)):
        return f"the rounds are not named by later and later seconds: {names}"
    return ""


def _caught(log_dir: Path, spec: CaseSpec) -> list[dict[str, str]]:
    """Per interval round, where each rank's main thread was as its dump thread wrote the
    round (``step.index op``, from the rank's own log)."""
    caught: list[dict[str, str]] = [{} for _ in spec.rounds_at]
    for r in range(spec.world):
        path = log_dir / f"rank_{r}.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            m = _ROUND_LINE.match(line)
            if m and int(m.group(1)) == r:
                text = m.group(3)
                text = (
                    text[len("written during ") :] if text.startswith("written during ") else text
                )
                caught[int(m.group(2))][str(r)] = text
    return caught


def _why_no_file(spec: CaseSpec, dumped: set[int], died: set[int], lost: set[int]) -> dict:
    """Every rank without a file in the hang's round, and why: ``lost`` (it wrote one, taken
    out), ``crashed`` (the injected crash, before the round), ``aborted`` (gloo killed it),
    ``frozen``, or ``wrote none`` (under ``timed_out``, no op of its own failed)."""
    why: dict[str, str] = {}
    for r in range(spec.world):
        if r in lost:
            why[str(r)] = "lost"
        elif r in dumped:
            continue
        elif r in died and r in spec.fault.ranks:
            why[str(r)] = "crashed"
        elif r in died:
            why[str(r)] = "aborted"
        else:
            why[str(r)] = "wrote none"
    return why


def _dumps_folder(files: list[Path]) -> str:
    """An interval dump's folder name: the time of its newest file."""
    when = max(p.stat().st_mtime for p in files)
    return time.strftime("dumps_%Y%m%d_%H%M%S", time.gmtime(when))


def _periodic_rounds(spec: CaseSpec, truth: dict[str, Any], out_dir: Path) -> list[Path]:
    """Lay a periodic dump's two rounds out as an interval dump's folders: the round taken
    while the job ran in ``dumps_<ts1>/``, the dumps after the hang in ``dumps_<ts2>/``
    (newer) without the files of the ranks whose newer file is lost; ``truth["periodic"]``
    becomes ``recorded.periodic``'s rounds."""
    early = out_dir / PERIODIC_DIR
    older = early.rename(out_dir / _dumps_folder([p for p in early.iterdir() if p.is_file()]))
    late = [p for ps in _files(out_dir).values() for p in ps]
    name = _dumps_folder(late)
    if name <= older.name:
        raise RuntimeError(f"the newer round {name} is not newer than {older.name}")
    newer = out_dir / name
    _hang_round(out_dir, newer, set(truth["periodic"]["newer_missing"]))
    truth["periodic"]["folders"] = [older.name, newer.name]
    return [older, newer]


def _hang_round(out_dir: Path, newer: Path, lost: set[int]) -> None:
    """Move the dumps left in ``out_dir`` (those written after the hang) into the new folder
    ``newer``, but the files of the ranks in ``lost``, which are deleted."""
    newer.mkdir()
    for r, files in _files(out_dir).items():
        for p in files:
            if r in lost:
                p.unlink()
            else:
                p.rename(newer / p.name)


def _interval_round_dirs(truth: dict[str, Any], out_dir: Path) -> list[Path]:
    """Lay the interval rounds out as an interval dump's folders: round ``k`` in
    ``dumps_<ts_k>/``, the dumps after the hang in a newer ``dumps_<ts>/`` without the files
    of the ranks whose file is lost; ``truth["rounds"]["folders"]`` names them in order."""
    rounds = sorted(
        (p for p in out_dir.iterdir() if p.is_dir() and p.name.startswith(ROUND_DIR)),
        key=lambda p: int(p.name[len(ROUND_DIR) :]),
    )
    dirs = [
        p.rename(out_dir / _dumps_folder([f for f in p.iterdir() if f.is_file()])) for p in rounds
    ]
    newer = out_dir / _dumps_folder([p for ps in _files(out_dir).values() for p in ps])
    if newer.name <= dirs[-1].name:
        raise RuntimeError(f"the hang's round {newer.name} is not newer than {dirs[-1].name}")
    _hang_round(out_dir, newer, set(truth["rounds"]["lost"]))
    truth["rounds"]["folders"] = [d.name for d in dirs] + [newer.name]
    return [*dirs, newer]


def _junk(folder: Path, seed: int) -> list[str]:
    """Files people find beside dumps: a job log, a core file, a note."""
    rng = random.Random(seed)
    (folder / "train.log").write_text(
        "".join(f"step {i} loss {rng.random():.4f}\n" for i in range(20))
        + "watchdog: collective operation timed out\n"
    )
    (folder / f"core.{rng.randint(1000, 9999)}").write_bytes(rng.randbytes(2048))
    (folder / "NOTES.txt").write_text("dumps copied from the nodes after the job hung\n")
    return sorted(
        p.name for p in folder.iterdir() if p.is_file() and not re.search(r"rank_\d+", p.name)
    )


def _pack(dest: Path, name: str, folder: Path, truth: dict[str, Any]) -> Path:
    """``dest/name.tar.xz`` holding ``name/`` (the files) and ``name/TRUTH.json``,
    byte-for-byte reproducible from the same files."""
    buf = io.BytesIO()
    files = sorted((p.relative_to(folder).as_posix(), p) for p in folder.rglob("*") if p.is_file())
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        members = [(rel, p.read_bytes()) for rel, p in files]
        members.append(("TRUTH.json", (json.dumps(truth, indent=1) + "\n").encode()))
        for fname, data in members:
            info = tarfile.TarInfo(f"{name}/{fname}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    path = dest / f"{name}.tar.xz"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return path


def _describe(spec: CaseSpec, truth: dict[str, Any], dialect: str) -> dict[str, Any]:
    import torch

    f = spec.fault
    doc: dict[str, Any] = {
        "case": "",
        "generator": GENERATOR.format(spec.generator),
        "seed": spec.seed,
        "fault": f.kind,
        **truth,
        "injected": {
            "ranks": list(f.ranks),
            "step": f.step,
            "op_index": f.index,
            "op": spec.all_ops[f.index].kind if f.ranks else "",
            "variant": f.variant,
        },
        "recorded": {
            "torch": torch.__version__,
            "backend": spec.recorder,
            "dialect": dialect,
            "format": spec.written_fmt,
            "policy": spec.policy,
            "buffer_size": spec.buffer_size,
            **({"buffer_kept_as_ring": True} if spec.hook_ring else {}),
            "junk_beside": spec.junk,
        },
        "topology": {"tp": spec.tp, "pp": spec.pp, "dp": spec.dp, "hsdp": spec.hsdp},
        "local_sync": spec.local_sync,
        "steps": spec.steps,
        "step_ops": [o.kind for o in spec.step_ops],
    }
    if "snapshots" in doc:  # repeated snapshots: in `recorded`, with the newer folder's name
        doc["recorded"]["snapshots"] = {
            "older": {"folder": ".", "ranks": doc["snapshots"]["older"]},
            "newer": {
                "folder": doc["snapshots"].get("folder", ""),
                "ranks": doc["snapshots"]["newer"],
            },
            "newer_missing": sorted(
                set(doc["snapshots"]["older"]) - set(doc["snapshots"]["newer"])
            ),
        }
        if "layout" in doc["snapshots"]:  # suffixed copies (_hookwrap, _copies)
            doc["recorded"]["snapshots"]["layout"] = {
                "dated": "the newer in dumps_<ts>/ under the same name",
                "numbered": "one folder: the older renamed <name>.1, the newer <name>",
                "stamped": "one folder: the older <name>, the newer <name>.<YYYYmmdd-HHMMSS>",
            }[doc["snapshots"]["layout"]]
        del doc["snapshots"]
    if "periodic" in doc:  # a periodic dump: its rounds in `recorded`
        p = doc.pop("periodic")
        doc["recorded"]["periodic"] = {
            "rounds": [
                {"folder": p["folders"][0], "ranks": p["older"], "taken": "while running"},
                {"folder": p["folders"][1], "ranks": p["newer"], "taken": "after the hang"},
            ],
            "older_after_step": p["after_step"],
            "newer_missing": p["newer_missing"],
        }
    if "rounds" in doc:  # several interval rounds, then the hang's: in `recorded`
        p = doc.pop("rounds")
        doc["recorded"]["rounds"] = {
            "rounds": [
                {
                    "folder": folder,
                    "ranks": ranks,
                    "taken": "while running, in the middle of a step",
                    "in_step": step,
                    "points": {str(r): _point(spec, pts[r]) for r in range(spec.world)},
                    "compute_s": {str(r): c[r] for r in range(spec.world)},
                    "caught_in": caught,
                }
                for folder, step, pts, c, caught, ranks in zip(
                    p["folders"],
                    p["at"],
                    spec.round_points,
                    spec.round_compute,
                    p["caught"],
                    p.get("ranks_in") or [list(range(spec.world))] * len(p["at"]),
                )
            ]
            + [
                {"folder": folder, "ranks": t["ranks"], "taken": t["taken"]}
                | {"caught_in": t["caught_in"]}
                for folder, t in zip(p["folders"][len(p["at"]) : -1], p.get("ticks", [])[:-1])
            ]
            + [
                {
                    "folder": p["folders"][-1],
                    "ranks": p["newer"],
                    "taken": p["ticks"][-1]["taken"] if p.get("ticks") else "after the hang",
                }
                | ({"caught_in": p["ticks"][-1]["caught_in"]} if p.get("ticks") else {})
            ],
            "newer_missing": p["lost"],
            "no_newer_file": p["no_newer_file"],
        }
        if spec.round_skip or spec.timer_rounds:  # the late axis: what each round lacks
            late = doc["recorded"]["rounds"]
            late["skipped"] = {str(k): list(r) for k, r in enumerate(spec.round_skip) if r}
            late["landed_late"] = {
                str(k): {"ranks": list(r), "in_folder": p["folders"][k + 1]}
                for k, r in enumerate(spec.round_late)
                if r
            }
            late["hang_round_by"] = (
                f"the interval timer ({TICK_S} s), {spec.timer_rounds} tick(s) after the "
                "first op failed; no watchdog or failure dump"
                if spec.timer_rounds
                else "the watchdog-like poller or the rank's own failure"
            )
    if spec.cpu_groups:
        doc["recorded"]["cpu_groups"] = {
            "backend": "gloo",
            "groups": list(spec.cpu_groups),
            "files": [f"{spec.recorder}_trace_rank_<r>", "nccl_trace_rank_<r>"]
            if spec.recorder == "nccl2"
            else ["nccl2_trace_rank_<r>", "nccl-lazy_trace_rank_<r>", "nccl_trace_rank_<r>"],
        }
    if spec.generator >= 2:
        doc["topology"]["cp"] = spec.cp
        doc["eval_ops"] = [o.kind for o in spec.eval_ops]
        doc["eval_at"] = list(spec.eval_at)
    return doc


def _point(spec: CaseSpec, index: int) -> str:
    """A rank's point in an interval round's step: before op ``index``, or after the last."""
    if index >= len(spec.step_ops):
        return "after the step's last op"
    return f"before op {index} {spec.step_ops[index].kind}"


def keep(spec: CaseSpec, truth: dict[str, Any], work: Path, dest: Path) -> list[Path]:
    """Scrub the dumps, lay the states over (hook), add junk, pack the case(s)."""
    from tools.hook_backend import overlay_states

    if spec.debugsrv_interval:  # the debug server's folder
        from tools.corpus import debugsrv

        return debugsrv.keep(spec, truth, work, dest)
    out_dir = work / "out"
    dirs = [out_dir]
    if spec.restart_fault is not None:  # the older attempt's dumps beside this run's
        out_dir = work / "attempts"
        launcher.fresh_dirs(out_dir)
        shutil.copytree(work / ATTEMPTS[0] / "out", out_dir / ATTEMPTS[0])
        shutil.copytree(work / "out", out_dir / ATTEMPTS[1])
        dirs = [out_dir / a for a in ATTEMPTS]
    newer = out_dir / NEWER_DIR
    if newer.is_dir():
        launcher.remove_partial(newer)
    if newer.is_dir() and not any(newer.iterdir()):
        newer.rmdir()
    if spec.snapshots and newer.is_dir():  # named as an interval dump's folder: its time
        when = max(p.stat().st_mtime for p in newer.iterdir())
        folder = time.strftime("dumps_%Y%m%d_%H%M%S", time.gmtime(when))
        newer = newer.rename(out_dir / folder)
        dirs.append(newer)
        truth["snapshots"]["folder"] = folder
    noted = {out_dir: ""}  # a folder of dumps: the prefix of its noted ops (the hook's)
    if spec.snapshot_layout and spec.snapshots and newer.is_dir():
        noted[newer] = f"{NEWER_DIR}_"
    if spec.periodic_after >= 0:
        dirs = _periodic_rounds(spec, truth, out_dir)
        noted = {dirs[0]: f"{PERIODIC_DIR}_", dirs[1]: ""}
    if spec.rounds_at:  # (with a restart: this run's rounds in attempt_1/)
        older_dirs = dirs[:-1] if spec.restart_fault is not None else []
        dirs = _interval_round_dirs(truth, dirs[-1])
        noted = {d: f"{ROUND_DIR}{k}_" for k, d in enumerate(dirs[:-1])} | {dirs[-1]: ""}
        if older_dirs and spec.recorder in ("nccl2", "nccl-lazy"):
            raise RuntimeError("interval rounds with a restart: the hook's states not laid over")
        dirs = older_dirs + dirs
    for files in (f for d in dirs for f in _files(d).values()):
        for p in files:
            rg.scrub_dump(p)
            rg.load_dump(p)  # loads with the no-globals unpickler
    dialect = "gloo@" + spec.torch if spec.recorder == "gloo" else spec.recorder
    dialect += "/gloo" if spec.cpu_groups else ""  # two recorders per rank
    dialect += "-cuda" if spec.cuda else ""  # TorchComms' CUDA flavour
    variants = [("", out_dir, dialect)]
    if spec.recorder in ("nccl2", "nccl-lazy"):
        states = work / "states"
        launcher.fresh_dirs(states)
        # each attempt's dumps with the ops its own run noted (a restart's older attempt
        # ran in work/attempt_0)
        attempts = [(d, work / "side", states / d.relative_to(out_dir)) for d in noted]
        if spec.restart_fault is not None:
            attempts = [(out_dir / a, work / a / "side", states / a) for a in ATTEMPTS]
            attempts[-1] = (out_dir / ATTEMPTS[-1], work / "side", states / ATTEMPTS[-1])
        for folder, side, into in attempts:
            into.mkdir(parents=True, exist_ok=True)
            for files in _files(folder).values():
                for p in files:
                    if p.name.startswith("nccl_trace_rank_"):  # c10d's gloo groups: as written
                        shutil.copyfile(p, into / p.name)
                        continue
                    ops = json.loads(
                        (side / f"{noted.get(folder, '')}{p.name}.ops.json").read_text()
                    )
                    obj = overlay_states(rg.load_dump(p), p.name.split("_trace_rank_")[0], ops)
                    if p.suffix == ".json":  # as the JSON writer writes it
                        text = json.dumps(obj, separators=(",", ":"), sort_keys=True)
                        (into / p.name).write_text(text)
                    else:
                        (into / p.name).write_bytes(pickle.dumps(obj, protocol=2))
        variants.append(("_states", states, dialect + "+states"))
    if spec.snapshot_layout in ("numbered", "stamped") and "folder" in truth.get("snapshots", {}):
        for _, folder, _ in variants:
            _one_folder(spec.snapshot_layout, folder, folder / truth["snapshots"]["folder"])
        truth["snapshots"]["folder"] = "."
    if spec.snapshot_layout and "snapshots" in truth:
        truth["snapshots"]["layout"] = spec.snapshot_layout
    paths = []
    for suffix, folder, dialect in variants:
        name = spec.name + suffix
        doc = _describe(spec, truth, dialect)
        doc["case"] = name
        if spec.cuda_started:  # TorchComms on CUDA: the state read at issue
            doc["recorded"]["cuda_state_at_issue"] = "started"
        if spec.cuda_mixed > 0:  # a mix of both states, each entry's drawn at issue
            doc["recorded"]["cuda_state_at_issue"] = f"started or scheduled ({spec.cuda_mixed:g})"
        if spec.junk:
            doc["recorded"]["junk_files"] = _junk(folder, spec.seed)
        paths.append(_pack(dest, name, folder, doc))
    return paths


def _one_folder(layout: str, folder: Path, newer: Path) -> None:
    """Repeated snapshots in one folder under suffixed names: ``numbered``, the older file
    renamed ``<name>.1`` and the newer under the name (as a rotation leaves them);
    ``stamped``, the newer named ``<name>.<YYYYmmdd-HHMMSS>`` (its time) beside the older."""
    for p in sorted(newer.iterdir()):
        if layout == "numbered":
            old = folder / p.name
            if old.exists():
                old.rename(folder / f"{p.name}.1")
            p.rename(folder / p.name)
        else:
            when = time.strftime("%Y%m%d-%H%M%S", time.gmtime(p.stat().st_mtime))
            p.rename(folder / f"{p.name}.{when}")
    newer.rmdir()


def _next_seed(dest: Path, torch_short: str) -> int:
    seeds = [
        int(m.group(1))
        for p in dest.glob(f"*_t{torch_short.replace('.', '')}_s*.tar.xz")
        if (m := re.search(r"_s(\d+)(_states)?\.tar\.xz$", p.name))
    ]
    return max([*seeds, V2_FIRST_SEED - 1]) + 1  # new seeds draw with generator 2


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("corpus/cases"))
    ap.add_argument("--count", type=int, default=10, help="cases to keep (default 10)")
    ap.add_argument("--seeds", type=int, nargs="*", help="exactly these seeds")
    ap.add_argument("--attempts", type=int, default=2, help="runs per seed before discarding")
    ap.add_argument("--work", type=Path, help="run here and keep the last run's logs")
    ap.add_argument("--discards", type=Path, help="keep the logs of discarded runs here")
    ap.add_argument(
        "--only-tag", default="", help="skip the seeds whose case name lacks this tag (_rounds)"
    )
    args = ap.parse_args(argv)
    short = ".".join(torch.__version__.split(".")[:2])
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = iter(args.seeds) if args.seeds else _count_from(_next_seed(args.out, short))
    kept = discarded = 0
    work = args.work or Path(tempfile.mkdtemp(prefix="hangscope-corpus-"))
    try:
        while kept < (len(args.seeds) if args.seeds else args.count):
            seed = next(seeds, None)
            if seed is None:
                break
            spec = draw(seed, short)
            if args.only_tag and f"{args.only_tag}_" not in spec.name:
                continue
            for attempt in range(1, args.attempts + 1):
                t0 = time.monotonic()
                truth, why = run(spec, work)
                took = time.monotonic() - t0
                if truth is not None:
                    paths = keep(spec, truth, work, args.out)
                    kept += 1
                    print(f"kept {' '.join(p.name for p in paths)} ({took:.1f} s)", flush=True)
                    break
                if args.discards:
                    shutil.copytree(work / "logs", args.discards / f"{spec.name}_{attempt}")
                print(
                    f"seed {seed} {spec.name} attempt {attempt}: {why} ({took:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                discarded += 1
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"kept {kept}, discarded {discarded}", flush=True)
    return 0


def _count_from(n: int) -> Any:
    while True:
        yield n
        n += 1


if __name__ == "__main__":
    sys.exit(main())
