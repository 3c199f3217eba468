#!/usr/bin/env python3
"""Scale benchmark: hangscope against the unpickle floor and PyTorch's fr_trace.

For each size it simulates a tensor x pipeline x data parallel NCCL job (stack frames on,
one rank stalled outside communication, ``--entries`` entries in every ring buffer), caches
the dumps under ``.bench/`` keyed by the parameters, and measures, each in a fresh process:

* ``hangscope analyze DIR -q -f json`` (wall time, peak memory of the process tree
  including the parser processes, and whether it named the injected culprit);
* the floor: plain ``pickle.load`` of every dump file, in one process and in as many
  processes as hangscope uses;
* ``python -m torch.distributed.flight_recorder.fr_trace`` of every torch found (.venv-torch:
  2.13, .venv-torch215: 2.15) on the same files (jobs of at most ``--fr-max-ranks``), under a
  time and memory limit. fr_trace stops matching a group after ``--mismatch_cap``
  mismatches and reports pipeline send/recv as mismatches, so it is also run (together
  with hangscope, for a like-for-like ratio) on a collectives-only job of the same size;
* ``hangscope analyze STORE`` on the Parquet store ``hangscope export`` wrote for the job.

Usage::

    python bench/run_bench.py [--sizes 512,4096] [--entries 2000] [--with-16k] [--with-65k]
                              [--jobs N] [--no-fr-trace] [--fr-max-ranks 512] [--cache .bench]

``make bench`` installs what this needs and runs it.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import pickle
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analyzer.load.discover import is_store  # noqa: E402  (after the project root is on the path)

PREFIX = "nccl_trace_rank_"
FR_MODULE = "torch.distributed.flight_recorder.fr_trace"
DEFAULT_SIZES = "512,4096"
SIZE_16K = 16_384
SIZE_65K = 65_536
#: The 65,536-rank run (four merged 16,384-rank stores) runs when this many times the 16k
#: run's peak fits in FIT_65K of the available memory: measured, it took 3.9 to 4.1 times
#: (18.7 to 19.4 GB against 4.72 GB, 19.1 GB against 4.85 GB). Past the available memory (no
#: swap here) the kernel would kill it. SCALE_65K is the margin (above every measured ratio);
#: FIT_65K only leaves room for the rest of the machine (at 0.9 the two margins together
#: refused the run on this 24 GB machine, 19.9 GiB against 90% of 22.1 GiB, where it took
#: 18.7 GiB).
SCALE_65K = 4.2
FIT_65K = 0.95


# --------------------------------------------------------------------------- jobs


def topology(ranks: int, *, collectives_only: bool = False) -> tuple[int, int, int]:
    """(tp, pp, dp) of a Megatron-like job of ``ranks`` ranks (pp = 1: no send/recv)."""
    tp = 8 if ranks >= 512 else 4 if ranks >= 64 else 2 if ranks >= 8 else 1
    pp = 1 if collectives_only else tp
    if ranks % (tp * pp):
        raise SystemExit(f"--sizes: {ranks} ranks is not a multiple of tp x pp = {tp} x {pp}")
    return tp, pp, ranks // (tp * pp)


def job_key(ranks: int, entries: int, seed: int, collectives_only: bool) -> str:
    tp, pp, dp = topology(ranks, collectives_only=collectives_only)
    return f"r{ranks}-tp{tp}-pp{pp}-dp{dp}-e{entries}-stall-seed{seed}-frames"


def simulate(
    out: Path,
    topo: tuple[int, int, int],
    entries: int,
    *,
    seed: int,
    jobs: int,
    write_ranks: tuple[int, int] | None = None,
) -> None:
    """The benchmark's job (one stalled rank) into ``out``: ``tools.simulate`` in a child."""
    tp, pp, dp = topo
    cmd = [
        sys.executable,
        "-m",
        "tools.simulate",
        "-o",
        str(out),
        "--tp",
        str(tp),
        "--pp",
        str(pp),
        "--dp",
        str(dp),
        "--fault",
        "stall",
        "--buffer-size",
        str(entries),
        "--seed",
        str(seed),
        "--jobs",
        str(jobs),
    ]
    if write_ranks is not None:
        cmd += ["--write-ranks", f"{write_ranks[0]}:{write_ranks[1]}"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def ensure_job(
    cache: Path,
    ranks: int,
    entries: int,
    *,
    seed: int,
    jobs: int,
    collectives_only: bool = False,
    regenerate: bool = False,
) -> Path:
    """The dump folder of this job, simulated unless the cache already holds it."""
    out = cache / job_key(ranks, entries, seed, collectives_only)
    if (out / "EXPECTED.json").is_file() and not regenerate:
        return out
    tp, pp, dp = topology(ranks, collectives_only=collectives_only)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    note(
        f"simulating {ranks} ranks (tp {tp} x pp {pp} x dp {dp}) x {entries} entries -> {out.name}"
    )
    t = time.perf_counter()
    simulate(tmp, (tp, pp, dp), entries, seed=seed, jobs=jobs)
    tmp.rename(out)
    note(f"  simulated in {time.perf_counter() - t:.0f} s")
    return out


def ensure_shard_stores(
    cache: Path, ranks: int, entries: int, *, seed: int, jobs: int, shards: int
) -> tuple[list[Path], list[int]]:
    """The job as ``shards`` node shards, each simulated alone (only its ranks' dumps are
    written), exported to a store with ``hangscope export`` and its dumps deleted: item 4's
    route for a job whose dumps would not fit on one disk (65,536 ranks x 2,000 entries
    write 52 GB). Returns the stores (cached) and the injected culprits."""
    key = job_key(ranks, entries, seed, False)
    tp, pp, dp = topology(ranks)
    per = -(-ranks // shards)
    expected_file = cache / f"{key}.EXPECTED.json"
    stores = [cache / f"{key}.shard{k}of{shards}.store" for k in range(shards)]
    for k, store in enumerate(stores):
        if is_store(store) and expected_file.is_file():
            continue
        lo, hi = k * per, min(ranks, (k + 1) * per)
        tmp = cache / f"{key}.shard{k}.partial"
        partial = store.with_name(store.name + ".partial")
        for d in (tmp, partial, store):
            shutil.rmtree(d, ignore_errors=True)
        note(f"simulating {ranks} ranks (tp {tp} x pp {pp} x dp {dp}), writing ranks {lo}-{hi - 1}")
        t = time.perf_counter()
        simulate(tmp, (tp, pp, dp), entries, seed=seed, jobs=jobs, write_ranks=(lo, hi))
        shutil.copy(tmp / "EXPECTED.json", expected_file)
        note(f"  simulated in {time.perf_counter() - t:.0f} s; exporting the shard")
        warm_cache(tmp)
        run = measure(
            hangscope_cmd()
            + [
                "export",
                str(tmp),
                "-o",
                str(partial),
                "-q",
                "--world-size",
                str(ranks),
                "--jobs",
                str(jobs),
            ]
        )
        if run.status != "ok":
            raise SystemExit(
                f"hangscope export of shard {k} failed ({run.status}): {run.stderr.strip()[-300:]}"
            )
        (partial / "bench-export.json").write_text(
            json.dumps({"seconds": run.wall, "peak_mb": run.peak_mb, "ranks": hi - lo}) + "\n"
        )
        partial.rename(store)
        shutil.rmtree(tmp)
    return stores, json.loads(expected_file.read_text())["culprits"]


def export_costs(stores: list[Path]) -> str:
    """What exporting the shards took, as measured when the (cached) stores were made."""
    try:
        costs = [json.loads((s / "bench-export.json").read_text()) for s in stores]
    except (OSError, ValueError):
        return ""
    return (
        f", each {max(c['ranks'] for c in costs):,} ranks in "
        f"{min(c['seconds'] for c in costs):.0f}-{max(c['seconds'] for c in costs):.0f} s and at most "
        f"{max(c['peak_mb'] for c in costs) / 1024:.1f} GB when they were made"
    )


# --------------------------------------------------------------------------- measuring


@dataclass
class Run:
    """One measured process."""

    wall: float = 0.0
    peak_mb: float = 0.0  # process tree, sampled
    maxrss_mb: float = 0.0  # largest single process (getrusage)
    cpu: float = 0.0
    code: int | None = None
    status: str = "ok"
    stdout: str = ""
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0


def _memory_kb(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them); the
    resident size where the kernel gives no PSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return _rss_kb(pid)


def tree_memory_mb(pid: int, of: Callable[[int], int] = _memory_kb) -> float:
    """The memory of ``pid`` and its descendants: PSS by default (``of=_rss_kb``: RSS)."""
    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        total += of(p)
        todo.extend(_children(p))
    return total / 1024


#: Seconds between two PSS samples of the measured tree. Reading smaps_rollup walks the whole
#: address space: 41 ms for a 4 GB process here, so every 0.2 s it took a fifth of a core (and
#: the process's memory map lock) from the run it measured: 25 s at 16,384 ranks against 19 to
#: 21 s unobserved. RSS (statm, 0.06 ms) is read every 0.2 s; PSS <= RSS, so PSS is read only
#: when the RSS sum is above the peak so far, and at most this often.
PSS_EVERY = 1.0


def measure(
    cmd: list[str],
    *,
    timeout: float | None = None,
    mem_limit_mb: float | None = None,
    cwd: Path = ROOT,
    interval: float = 0.2,
) -> Run:
    """Run ``cmd`` and wait for it; a thread samples the memory of its process tree meanwhile
    and kills it past the limits. The wall time ends when the process is reaped."""
    run = Run()
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"hangscope-bench-{os.getpid()}.out"
    err_path = out_path.with_suffix(".err")
    done = threading.Event()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, start_new_session=True)

        def watch() -> None:
            last_pss = -PSS_EVERY
            while not done.wait(interval):
                now = time.perf_counter()
                rss = tree_memory_mb(proc.pid, _rss_kb)
                if rss > run.peak_mb and now - last_pss >= PSS_EVERY:
                    run.peak_mb = max(run.peak_mb, tree_memory_mb(proc.pid))
                    last_pss = now
                elapsed = now - start
                if timeout is not None and elapsed > timeout:
                    run.status = f"killed after {timeout:.0f} s"
                elif mem_limit_mb is not None and max(run.peak_mb, rss) > mem_limit_mb:
                    run.status = f"killed at {mem_limit_mb / 1024:.3g} GB"
                else:
                    continue
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(proc.pid, 0)
        run.wall = time.perf_counter() - start
        done.set()
        watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    run.code = proc.returncode
    run.maxrss_mb = usage.ru_maxrss / 1024
    # Sampling can miss a short peak: never report less than the largest single process.
    run.peak_mb = max(run.peak_mb, run.maxrss_mb)
    run.cpu = usage.ru_utime + usage.ru_stime
    run.stdout = out_path.read_text(errors="replace")
    run.stderr = err_path.read_text(errors="replace")
    out_path.unlink()
    err_path.unlink()
    if run.status == "ok" and run.code not in (0, 1):
        run.status = f"exit {run.code}"
    return run


def compile_bytecode() -> bool:
    """Write the bytecode of hangscope's modules, as ``pip install`` of a wheel does. An
    editable install leaves it to the first import, and where ``PYTHONDONTWRITEBYTECODE`` is
    set every run compiled the modules again: about 60 ms of CPU at each start."""
    return bool(compileall.compile_dir(str(ROOT / "analyzer"), quiet=1))


def hangscope_cmd() -> list[str]:
    script = Path(sys.executable).parent / "hangscope"
    return [str(script)] if script.exists() else [sys.executable, "-m", "analyzer"]


def warm_cache(target: Path) -> None:
    """Read every file of ``target`` once, so that each tool finds the dumps in the page
    cache (the first tool measured would otherwise pay for the disk alone)."""
    for path in target.iterdir():
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass


def run_hangscope(
    target: Path | list[Path],
    jobs: int,
    expected: list[int] | None,
    scheduler: str | None = None,
    timeout: float | None = None,
) -> Run:
    """``hangscope analyze`` on one dump folder or store, or on several stores."""
    out_json = Path(os.environ.get("TMPDIR", "/tmp")) / f"hangscope-bench-{os.getpid()}.json"
    targets = target if isinstance(target, list) else [target]
    for t in targets:
        warm_cache(t)
    where = (
        ["--scheduler", scheduler]
        if scheduler
        else []
        if all(map(is_store, targets))
        # parsed already
        else ["--jobs", str(jobs)]
    )
    run = measure(
        hangscope_cmd()
        + ["analyze", *map(str, targets), "-q", "-f", "json", "-o", str(out_json), *where],
        timeout=timeout,
    )
    if run.status == "ok" and out_json.exists():
        doc = json.loads(out_json.read_text())
        run.extra = {
            "culprits": doc["culprit_ranks"],
            "entries": doc["entries"],
            "verdict": doc["verdict"],
            "readers": doc.get("readers", {}),
        }
        if expected is not None:
            run.extra["culprit_ok"] = sorted(doc["culprit_ranks"]) == sorted(expected)
    out_json.unlink(missing_ok=True)
    if run.status != "ok":
        note(f"  hangscope {run.status}: {run.stderr.strip()[-300:]}")
    return run


def run_floor(target: Path, jobs: int) -> Run:
    warm_cache(target)
    run = measure(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--unpickle-floor",
            str(target),
            "--jobs",
            str(jobs),
        ]
    )
    if run.status == "ok":
        run.extra = json.loads(run.stdout)
    return run


def _load_one(path: str) -> int:
    with open(path, "rb") as f:
        return len(pickle.load(f).get("entries") or ())


def unpickle_floor(target: Path, jobs: int) -> None:
    """Print {"seconds", "entries"}: plain pickle.load of every dump, in ``jobs`` processes."""
    files = sorted(str(p) for p in target.iterdir() if p.name.startswith(PREFIX))
    start = time.perf_counter()
    if jobs <= 1:
        entries = sum(map(_load_one, files))
    else:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            entries = sum(pool.map(_load_one, files, chunksize=4))
    print(
        json.dumps(
            {"seconds": time.perf_counter() - start, "entries": entries, "files": len(files)}
        )
    )


def fr_trace_pythons(explicit: str | None) -> list[tuple[str, str]]:
    """(torch version, Python) of every environment that can import torch's flight recorder
    analyzer: ``--fr-python``, or .venv-torch (torch 2.13) and .venv-torch215 (torch 2.15)."""
    candidates = (
        [explicit]
        if explicit
        else [
            str(ROOT / ".venv-torch" / "bin" / "python"),
            str(ROOT / ".venv-torch215" / "bin" / "python"),
        ]
    )
    found: dict[str, str] = {}
    for py in candidates:
        if py and Path(py).exists():
            probe = subprocess.run(
                [py, "-c", f"import torch, {FR_MODULE}; print(torch.__version__)"],
                capture_output=True,
                check=False,
                text=True,
            )
            if probe.returncode == 0:
                version = ".".join(probe.stdout.strip().split("+")[0].split(".")[:2])
                found.setdefault(version, py)
    return sorted(found.items())


def run_fr_traces(
    pythons: list[tuple[str, str]], target: Path, args: argparse.Namespace
) -> dict[str, Run]:
    """fr_trace of every torch version on ``target``."""
    out = {}
    for version, py in pythons:
        note(f"  fr_trace (torch {version})")
        out[version] = run_fr_trace(py, target, args.fr_timeout, args.fr_mem_gb * 1024)
    return out


def fastest(runs: dict[str, Run]) -> Run | None:
    """The faster finished fr_trace run (or the first one when none finished)."""
    done = [r for r in runs.values() if finished(r)]
    if done:
        return min(done, key=lambda r: r.wall)
    return next(iter(runs.values()), None)


def run_fr_trace(py: str, target: Path, timeout: float, mem_limit_mb: float) -> Run:
    warm_cache(target)
    run = measure(
        [py, "-m", FR_MODULE, str(target), "-p", PREFIX], timeout=timeout, mem_limit_mb=mem_limit_mb
    )
    text = run.stdout + run.stderr
    aborted = [line for line in text.splitlines() if "Too many mismatches" in line]
    if run.status == "ok" and "Traceback" in text:
        run.status = "crashed: " + text.strip().splitlines()[-1][:80]
    elif run.status == "ok" and aborted:
        group = aborted[0].split(":")[-1].replace("aborting", "").strip()
        run.status = f"stopped early: mismatch cap in {group}"
    return run


# --------------------------------------------------------------------------- report


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fmt_s(run: Run | None) -> str:
    if run is None:
        return "-"
    assert run is not None
    return f"{run.wall:.2f}" if finished(run) else "X"


def fmt_mb(run: Run | None) -> str:
    return "-" if run is None else f"{run.peak_mb:,.0f}"


def ratio(a: Run | None, b: Run | None) -> str:
    if not finished(a) or not finished(b):
        return "-"
    assert a is not None and b is not None
    return f"{a.wall / b.wall:.1f}x"


def finished(run: Run | None) -> bool:
    return run is not None and (run.status == "ok" or run.status.startswith("stopped"))


def per_entry(run: Run | None, entries: int) -> str:
    if not finished(run) or not entries:
        return "-"
    assert run is not None
    return f"{run.wall / entries * 1e6:.2f}"


def print_table(rows: list[dict[str, Any]], jobs: int) -> None:
    header = [
        ("ranks", ">"),
        ("job", "<"),
        ("entries", ">"),
        ("hangscope s", ">"),
        ("peak MB", ">"),
        ("us/entry", ">"),
        ("culprit", "<"),
        ("unpickle 1p s", ">"),
        (f"unpickle {jobs}p s", ">"),
        ("hs/floor 1p", ">"),
        (f"hs/floor {jobs}p", ">"),
        ("fr_trace s", ">"),
        ("fr MB", ">"),
        ("fr us/entry", ">"),
        ("fr/hs", ">"),
        ("store s", ">"),
        ("store MB", ">"),
        ("fr_trace status", "<"),
    ]
    versions = sorted({v for r in rows for v in r.get("frs", {})})
    header[11:11] = [(f"fr {v} s", ">") for v in versions]
    table = []
    for r in rows:
        hs, fr, f1, fn, st = r["hs"], r.get("fr"), r.get("floor1"), r.get("floorn"), r.get("store")
        ok = hs.extra.get("culprit_ok")
        culprit = (
            "ok"
            if ok
            else "-"
            if ok is None
            else "WRONG " + ",".join(map(str, hs.extra["culprits"][:4]))
        )
        if ok and len(r["expected"]) == 1:
            culprit = f"ok ({r['expected'][0]})"
        table.append(
            [
                f"{r['ranks']:,}",
                r["job"],
                f"{r['entries']:,}",
                fmt_s(hs),
                fmt_mb(hs),
                per_entry(hs, r["entries"]),
                culprit,
                fmt_s(f1),
                fmt_s(fn),
                ratio(hs, f1),
                ratio(hs, fn),
                *[fmt_s(r.get("frs", {}).get(v)) for v in versions],
                fmt_s(fr),
                fmt_mb(fr),
                per_entry(fr, r["entries"]),
                ratio(fr, hs),
                fmt_s(st),
                fmt_mb(st),
                "-" if fr is None else r.get("fr_note") or fr.status,
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, (h, _) in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if a == ">" else c.ljust(w) for c, w, (_, a) in zip(cells, widths, header)
        ).rstrip()

    print(line([h for h, _ in header]))
    print(line(["-" * w for w in widths]))
    for row in table:
        print(line(row))


def _row(rows: list[dict[str, Any]], ranks: int, coll_only: bool = False) -> dict[str, Any] | None:
    return next(
        (r for r in rows if r["ranks"] == ranks and ("coll. only" in r["job"]) == coll_only), None
    )


def targets(rows: list[dict[str, Any]], jobs: int, note_65k: str) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) of each target of the benchmark."""
    out: list[tuple[str, str, str]] = []
    r512 = _row(rows, 512)
    fr_row = _row(rows, 512, coll_only=True) or r512
    if fr_row is not None and finished(fr_row.get("fr")) and finished(fr_row["hs"]):
        fr = fr_row["fr"]
        versions = ", ".join(
            f"{v}: {x.wall:.1f} s" for v, x in sorted(fr_row["frs"].items()) if finished(x)
        )
        speedup = fr.wall / fr_row["hs"].wall
        out.append(
            (
                "512 x 2,000: >= 20x faster than the faster fr_trace",
                f"{speedup:.1f}x ({fr_row['job']}; hangscope {fr_row['hs'].wall:.1f} s; fr_trace {versions})",
                "met" if speedup >= 20 else f"NOT met (by {20 / speedup:.1f}x)",
            )
        )
    else:
        out.append(("512 x 2,000: >= 20x faster than the faster fr_trace", "-", "not measured"))
    if r512 is not None and finished(r512.get("floorn")):
        q = r512["hs"].wall / r512["floorn"].wall
        out.append(
            (
                f"512 x 2,000: hangscope / unpickle floor ({jobs} processes) <= 1.0",
                f"{q:.2f} ({r512['hs'].wall:.1f} s vs {r512['floorn'].wall:.1f} s)",
                "met" if q <= 1.0 else f"NOT met (by {q:.2f}x)",
            )
        )
    for ranks, limit_s, limit_mb in ((4096, 8.0, 2048), (SIZE_16K, 30.0, 5120)):
        r = _row(rows, ranks)
        if r is None or not finished(r["hs"]):
            out.append(
                (
                    f"{ranks:,} x 2,000: < {limit_s:.0f} s and < {limit_mb / 1024:.0f} GB",
                    "-",
                    "not run" + (" (--with-16k)" if ranks == SIZE_16K else ""),
                )
            )
            continue
        hs = r["hs"]
        ok = hs.wall < limit_s and hs.peak_mb < limit_mb
        out.append(
            (
                f"{ranks:,} x 2,000: < {limit_s:.0f} s and < {limit_mb / 1024:.0f} GB",
                f"{hs.wall:.1f} s, {hs.peak_mb / 1024:.2f} GB",
                "met"
                if ok
                else f"NOT met ({hs.wall / limit_s:.1f}x the time, {hs.peak_mb / limit_mb:.1f}x the memory)",
            )
        )
    sized = sorted(
        (
            r
            for r in rows
            if "coll. only" not in r["job"] and finished(r["hs"]) and 512 <= r["ranks"] <= SIZE_16K
        ),
        key=lambda r: r["ranks"],
    )
    if len(sized) >= 2:
        lo, hi = sized[0], sized[-1]
        a, b = lo["hs"].wall / lo["entries"] * 1e6, hi["hs"].wall / hi["entries"] * 1e6
        out.append(
            (
                f"per-entry cost flat from {lo['ranks']:,} to {hi['ranks']:,} ranks (within 25%)",
                f"{a:.2f} -> {b:.2f} us/entry ({b / a:.2f}x)",
                "met" if b <= 1.25 * a else "NOT met",
            )
        )
    out.append((f"{SIZE_65K:,} x 2,000 completes", note_65k, ""))
    return out


def mem_available_mb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def settled_mem_available_mb(limit_s: float = 60.0) -> float:
    """The available memory once the runs before have handed theirs back. Here (a VM whose
    guest reports freed pages to its host) memory a large process freed comes back over tens
    of seconds: 21.7 GB right after the 16,384-rank run, 22.9 GB 10 s later, 23.2 GB 30 s
    later. Read every second until it grows by less than 128 MB in 2 s, at most ``limit_s``."""
    readings = [mem_available_mb()]
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        readings.append(mem_available_mb())
        if len(readings) >= 3 and readings[-1] - readings[-3] < 128:
            break
    return max(readings)


def _rel(path: str) -> str:
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 0
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{cores} cores, {mem:.0f} GB RAM, Python {platform.python_version()}, load average {load}"
    )


def run_on_dask(
    target: Path, expected: list[int], workers: int, timeout: float | None = None
) -> tuple[Run | None, float, str]:
    """``hangscope analyze --scheduler`` on a fresh ``LocalCluster`` of ``workers`` worker
    processes (one thread each, loopback): (the run, the cluster's start-up seconds, why it
    did not run)."""
    try:
        from distributed import LocalCluster
    except ImportError:
        return (
            None,
            0.0,
            "skipped: dask.distributed is not installed (pip install 'hangscope[dask]')",
        )
    t = time.perf_counter()
    with LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
    ) as cluster:
        start = time.perf_counter() - t
        run = run_hangscope(
            target, workers, expected, scheduler=cluster.scheduler_address, timeout=timeout
        )
    return run, start, ""


def dask_line(row: dict[str, Any], workers: int) -> str:
    """The Dask run of ``row`` beside its default run, in one line."""
    run, start, why = row["dask"]
    if run is None:
        return f"{row['ranks']:,} ranks through a Dask LocalCluster: {why}"
    hs = row["hs"]
    if run.status != "ok":
        return f"{row['ranks']:,} ranks through a Dask LocalCluster: {run.status}: {run.stderr.strip()[-200:]}"
    named = (
        "named the injected culprit"
        if run.extra.get("culprit_ok")
        else "did NOT name the injected culprit"
    )
    return (
        f"{row['ranks']:,} ranks through a Dask LocalCluster of {workers} worker processes (1 thread "
        f"each, on the same cores): {run.wall:.1f} s, client {run.peak_mb / 1024:.2f} GB, {named}; "
        f"the default (in this process): {hs.wall:.1f} s, {hs.peak_mb / 1024:.2f} GB "
        f"(Dask / default {run.wall / hs.wall:.2f}x; cluster start-up {start:.1f} s, not counted)"
    )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"rank counts (default {DEFAULT_SIZES})")
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank (ring buffer size)")
    ap.add_argument("--with-16k", action="store_true", help=f"also {SIZE_16K:,} ranks")
    ap.add_argument("--jobs", type=int, default=0, help="hangscope parser processes (0: all cores)")
    ap.add_argument("--seed", type=int, default=0, help="simulator seed (picks the stalled rank)")
    ap.add_argument(
        "--cache", type=Path, default=ROOT / ".bench", help="where simulated dumps are kept"
    )
    ap.add_argument("--regenerate", action="store_true", help="simulate again even if cached")
    ap.add_argument("--no-fr-trace", action="store_true", help="skip PyTorch's fr_trace")
    ap.add_argument(
        "--fr-python", default=None, help="Python with torch (default .venv-torch/bin/python)"
    )
    ap.add_argument(
        "--fr-timeout", type=float, default=900.0, help="seconds before fr_trace is killed"
    )
    ap.add_argument(
        "--fr-mem-gb", type=float, default=12.0, help="memory at which fr_trace is killed"
    )
    ap.add_argument(
        "--fr-max-ranks",
        type=int,
        default=512,
        help="run fr_trace only on jobs of at most this many ranks (default 512)",
    )
    ap.add_argument(
        "--with-65k",
        action="store_true",
        help=f"also {SIZE_65K:,} ranks, when {SCALE_65K}x the 16k peak fits in {FIT_65K * 100:.0f}%% of the available memory",
    )
    ap.add_argument("--no-store", action="store_true", help="skip the Parquet store re-open")
    ap.add_argument(
        "--shards-65k",
        type=int,
        default=4,
        help=f"node shards the {SIZE_65K:,}-rank job is simulated and exported in (default 4)",
    )
    ap.add_argument(
        "--no-dask",
        action="store_true",
        help="skip the run through a Dask LocalCluster (at --dask-at ranks)",
    )
    ap.add_argument(
        "--dask-at",
        type=int,
        default=SIZE_16K,
        help=f"the job size also run through a Dask LocalCluster (default {SIZE_16K:,}, with --with-16k)",
    )
    ap.add_argument("--dask-workers", type=int, default=2, help="LocalCluster worker processes")
    ap.add_argument("--unpickle-floor", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    jobs = args.jobs or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    if args.unpickle_floor:
        unpickle_floor(args.unpickle_floor, jobs)
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.with_16k and SIZE_16K not in sizes:
        sizes.append(SIZE_16K)
    args.cache.mkdir(parents=True, exist_ok=True)

    fr_pys: list[tuple[str, str]] = []
    fr_skip = "skipped (--no-fr-trace)" if args.no_fr_trace else None
    if not args.no_fr_trace:
        fr_pys = fr_trace_pythons(args.fr_python)
        if not fr_pys:
            fr_skip = "skipped: torch is not installed (make bench installs it into .venv-torch)"
    note(f"machine: {machine()}")
    compiled = compile_bytecode()
    startup = measure(hangscope_cmd() + ["--help"])

    rows: list[dict[str, Any]] = []
    for ranks in sizes:
        jobdir = ensure_job(
            args.cache, ranks, args.entries, seed=args.seed, jobs=jobs, regenerate=args.regenerate
        )
        expected = json.loads((jobdir / "EXPECTED.json").read_text())["culprits"]
        tp, pp, dp = topology(ranks)
        note(f"{ranks} ranks: hangscope")
        hs = run_hangscope(jobdir, jobs, expected)
        entries = int(hs.extra.get("entries", ranks * args.entries))
        row: dict[str, Any] = {
            "ranks": ranks,
            "job": f"tp{tp} pp{pp} dp{dp}",
            "entries": entries,
            "hs": hs,
            "expected": expected,
        }
        note(f"{ranks} ranks: unpickle floor")
        row["floor1"] = run_floor(jobdir, 1)
        row["floorn"] = run_floor(jobdir, jobs)
        if not args.no_store:
            note(f"{ranks} ranks: export and re-open the Parquet store")
            store = args.cache / (jobdir.name + ".store")
            shutil.rmtree(store, ignore_errors=True)
            export = measure(
                hangscope_cmd()
                + ["export", str(jobdir), "-o", str(store), "-q", "--jobs", str(jobs)]
            )
            if export.status == "ok":
                row["store"] = run_hangscope(store, jobs, expected)
                row["store_bytes"] = sum(p.stat().st_size for p in store.iterdir())
            else:
                note(f"  export failed: {export.stderr.strip()[-300:]}")
        rows.append(row)
        if ranks == args.dask_at and not args.no_dask:
            note(f"{ranks} ranks: hangscope through a Dask LocalCluster")
            row["dask"] = run_on_dask(jobdir, expected, args.dask_workers)
        if fr_pys and ranks <= args.fr_max_ranks:
            note(f"{ranks} ranks: fr_trace")
            row["frs"] = run_fr_traces(fr_pys, jobdir, args)
            fr = row["fr"] = fastest(row["frs"])
            if fr is not None and fr.status != "ok":
                # Pipeline send/recv stop fr_trace (or it ran out of limits): measure both tools
                # again on a collectives-only job of the same size.
                cdir = ensure_job(
                    args.cache,
                    ranks,
                    args.entries,
                    seed=args.seed,
                    jobs=jobs,
                    collectives_only=True,
                    regenerate=args.regenerate,
                )
                cexp = json.loads((cdir / "EXPECTED.json").read_text())["culprits"]
                ctp, cpp, cdp = topology(ranks, collectives_only=True)
                note(f"{ranks} ranks, collectives only: hangscope and fr_trace")
                chs = run_hangscope(cdir, jobs, cexp)
                cfrs = run_fr_traces(fr_pys, cdir, args)
                note(f"{ranks} ranks, collectives only: unpickle floor")
                rows.append(
                    {
                        "ranks": ranks,
                        "job": f"tp{ctp} pp{cpp} dp{cdp} (coll. only)",
                        "entries": int(chs.extra.get("entries", ranks * args.entries)),
                        "hs": chs,
                        "expected": cexp,
                        "frs": cfrs,
                        "fr": fastest(cfrs),
                        "floor1": run_floor(cdir, 1),
                        "floorn": run_floor(cdir, jobs),
                    }
                )

    note_65k = "not run (pass --with-16k --with-65k)"
    r16 = _row(rows, SIZE_16K)
    if args.with_65k:
        avail = settled_mem_available_mb()
        if r16 is None or not finished(r16["hs"]):
            note_65k = "not run: no 16,384-rank figure to scale from (add --with-16k)"
        elif SCALE_65K * r16["hs"].peak_mb > FIT_65K * avail:
            note_65k = (
                f"not run: {SCALE_65K} x the 16k peak ({SCALE_65K * r16['hs'].peak_mb / 1024:.1f} GB) "
                f"does not fit in {FIT_65K:.0%} of the available memory ({avail / 1024:.1f} GB)"
            )
        else:
            # 52 GB of dumps: simulated and exported shard by shard (one store per node),
            # then the stores are merged, as on a cluster whose nodes keep their dumps.
            stores, expected = ensure_shard_stores(
                args.cache,
                SIZE_65K,
                args.entries,
                seed=args.seed,
                jobs=jobs,
                shards=args.shards_65k,
            )
            note(f"{SIZE_65K} ranks: hangscope on the {len(stores)} stores")
            hs = run_hangscope(stores, jobs, expected)
            tp, pp, dp = topology(SIZE_65K)
            rows.append(
                {
                    "ranks": SIZE_65K,
                    "job": f"tp{tp} pp{pp} dp{dp} ({len(stores)} stores)",
                    "hs": hs,
                    "expected": expected,
                    "entries": int(hs.extra.get("entries", SIZE_65K * args.entries)),
                }
            )
            note_65k = (
                f"{hs.wall:.1f} s, {hs.peak_mb / 1024:.1f} GB, culprit "
                f"{'ok' if hs.extra.get('culprit_ok') else 'WRONG'} (merging {len(stores)} "
                f"node stores written by hangscope export{export_costs(stores)}; {hs.status})"
            )
    elif r16 is not None and finished(r16["hs"]):
        avail = mem_available_mb()
        fits = SCALE_65K * r16["hs"].peak_mb <= FIT_65K * avail
        note_65k = (
            f"not run (--with-65k); {SCALE_65K} x the 16k peak is {SCALE_65K * r16['hs'].peak_mb / 1024:.1f} GB against "
            f"{avail / 1024:.1f} GB available: it would {'fit' if fits else 'not fit'}"
        )

    print(
        f"hangscope scale benchmark: {args.entries:,} entries per rank, stack frames on, one "
        f"stalled rank; {jobs} parser processes"
    )
    print(f"machine: {machine()}")
    print()
    print_table(rows, jobs)
    print()
    print("hangscope s: wall time of `hangscope analyze DIR -q -f json`, process start to exit")
    print(
        f"  (interpreter start and imports included: {startup.wall:.2f} s for `hangscope --help`;"
    )
    print(
        f"  the bytecode of analyzer/ {'written' if compiled else 'NOT written'} first, as a wheel's install writes it)."
    )
    print("peak MB: largest sum of the proportional set size (PSS) of the process tree, parser")
    print(
        f"  processes included, sampled at most every {PSS_EVERY:g} s while the RSS sum, read every 0.2 s, is"
    )
    print("  above the peak so far (never below the largest process's max RSS).")
    print("us/entry: wall time per entry.")
    print(
        f"unpickle 1p / {jobs}p s: plain pickle.load of every dump file in one process / in {jobs}"
    )
    print(
        "  processes (the floor), wall time of its process, interpreter start included as for hangscope."
    )
    print("  hs/floor: hangscope wall / floor.")
    print(
        f"fr_trace s: the faster of `python -m {FR_MODULE} DIR -p {PREFIX}` under each torch found"
    )
    print(
        f"  ({', '.join(f'torch {v}: {_rel(py)}' for v, py in fr_pys) or 'none'}; fr X.Y s: each version; run on jobs of at most {args.fr_max_ranks:,} ranks),"
    )
    print(
        f"  killed past {args.fr_timeout:.0f} s or {args.fr_mem_gb:.0f} GB. fr/hs: fr_trace wall / hangscope wall."
    )
    print("Every tool reads the files from the page cache (each is read once before each run).")
    print("store s / MB: `hangscope analyze STORE` on the Parquet store `hangscope export` wrote")
    print("  for the job (normalized tables, no dump parsing).")
    if fr_skip:
        print(f"fr_trace: {fr_skip}")
    for r in rows:
        if "dask" in r:
            print(dask_line(r, args.dask_workers))
    print()
    print("targets:")
    tab = targets(rows, jobs, note_65k)
    w = max(len(t) for t, _, _ in tab)
    for t, measured, verdict in tab:
        print(f"  {t.ljust(w)}  {measured}  {verdict}".rstrip())
    if any(r.get("fr") and r["fr"].status.startswith("stopped") for r in rows):
        print(
            "fr_trace 'stopped early': it stops matching after --mismatch_cap (10) mismatches in a"
        )
        print(
            "  group; it counts the pipeline send/recv pairs as mismatches, hence the collectives-only"
        )
        print("  rows (pp 1, same rank count; hangscope measured again on those files).")
    reader_env = os.environ.get("HANGSCOPE_READER", "")
    print(
        "readers: which reader parsed the dumps (native: the compiled pickle reader; python: the"
        " reference reader, also for every file the compiled one declined)"
        + (f"; HANGSCOPE_READER={reader_env}" if reader_env else "")
    )
    for r in rows:
        readers = r["hs"].extra.get("readers") or {}
        print(
            f"  {r['ranks']:,} ranks ({r['job']}): "
            + (", ".join(f"{k} {v:,}" for k, v in sorted(readers.items())) or "-")
        )
    wrong = [r for r in rows if r["hs"].extra.get("culprit_ok") is False]
    for r in wrong:
        print(
            f"culprit check FAILED for {r['ranks']} ranks ({r['job']}): expected {r['expected']}, "
            f"hangscope named {r['hs'].extra['culprits']}"
        )
    for r in rows:
        if r.get("store_bytes"):
            print(f"store of {r['ranks']:,} ranks: {r['store_bytes'] / 2**20:,.1f} MB on disk")
    failed = [r for r in rows if r["hs"].status != "ok"]
    failed += [
        r
        for r in rows
        if "dask" in r
        and r["dask"][0] is not None
        and (r["dask"][0].status != "ok" or not r["dask"][0].extra.get("culprit_ok"))
    ]
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
