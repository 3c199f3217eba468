#!/usr/bin/env python3
"""Scale benchmark: hangscope against the unpickle floor and PyTorch's fr_trace.

For each size it simulates a tensor x pipeline x data parallel NCCL job (stack frames on,
one rank stalled outside communication, ``--entries`` entries in every ring buffer), caches
the dumps under ``.bench/`` keyed by the parameters, and measures, each in a fresh process:

* ``hangscope analyze DIR -q -f json`` (wall time, peak memory of the process tree
  including the parser processes, and whether it named the injected culprit);
* the floor: plain ``pickle.load`` of every dump file, in one process and in as many
  processes as hangscope uses;
* ``python -m torch.distributed.flight_recorder.fr_trace`` on the same files, under a
  time and memory limit. fr_trace stops matching a group after ``--mismatch_cap``
  mismatches and reports pipeline send/recv as mismatches, so it is also run (together
  with hangscope, for a like-for-like ratio) on a collectives-only job of the same size;
* ``hangscope analyze STORE`` on the Parquet store ``hangscope export`` wrote for the job.

Usage::

    python bench/run_bench.py [--sizes 64,512,4096] [--entries 2000] [--with-16k]
                              [--jobs N] [--no-fr-trace] [--cache .bench]

``make bench`` installs what this needs and runs it.
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "nccl_trace_rank_"
FR_MODULE = "torch.distributed.flight_recorder.fr_trace"
DEFAULT_SIZES = "64,512,4096"
SIZE_16K = 16_384


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


def ensure_job(cache: Path, ranks: int, entries: int, *, seed: int, jobs: int,
               collectives_only: bool = False, regenerate: bool = False) -> Path:
    """The dump folder of this job, simulated unless the cache already holds it."""
    out = cache / job_key(ranks, entries, seed, collectives_only)
    if (out / "EXPECTED.json").is_file() and not regenerate:
        return out
    tp, pp, dp = topology(ranks, collectives_only=collectives_only)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    note(f"simulating {ranks} ranks (tp {tp} x pp {pp} x dp {dp}) x {entries} entries -> {out.name}")
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "tools.simulate", "-o", str(tmp), "--tp", str(tp), "--pp", str(pp),
           "--dp", str(dp), "--fault", "stall", "--buffer-size", str(entries),
           "--seed", str(seed), "--jobs", str(jobs)]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    tmp.rename(out)
    note(f"  simulated in {time.perf_counter() - t:.0f} s")
    return out


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
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _memory_kb(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0


def tree_memory_mb(pid: int) -> float:
    todo, total = [pid], 0
    while todo:
        p = todo.pop()
        total += _memory_kb(p)
        todo.extend(_children(p))
    return total / 1024


def measure(cmd: list[str], *, timeout: float | None = None, mem_limit_mb: float | None = None,
            cwd: Path = ROOT, interval: float = 0.2) -> Run:
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
            while not done.wait(interval):
                run.peak_mb = max(run.peak_mb, tree_memory_mb(proc.pid))
                elapsed = time.perf_counter() - start
                if timeout is not None and elapsed > timeout:
                    run.status = f"killed after {timeout:.0f} s"
                elif mem_limit_mb is not None and run.peak_mb > mem_limit_mb:
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


def run_hangscope(target: Path, jobs: int, expected: list[int] | None) -> Run:
    out_json = Path(os.environ.get("TMPDIR", "/tmp")) / f"hangscope-bench-{os.getpid()}.json"
    warm_cache(target)
    run = measure(hangscope_cmd() + ["analyze", str(target), "-q", "-f", "json", "-o", str(out_json),
                                     "--jobs", str(jobs)])
    if run.status == "ok" and out_json.exists():
        doc = json.loads(out_json.read_text())
        run.extra = {"culprits": doc["culprit_ranks"], "entries": doc["entries"],
                     "verdict": doc["verdict"], "readers": doc.get("readers", {})}
        if expected is not None:
            run.extra["culprit_ok"] = sorted(doc["culprit_ranks"]) == sorted(expected)
    out_json.unlink(missing_ok=True)
    if run.status != "ok":
        note(f"  hangscope {run.status}: {run.stderr.strip()[-300:]}")
    return run


def run_floor(target: Path, jobs: int) -> Run:
    warm_cache(target)
    run = measure([sys.executable, str(Path(__file__).resolve()), "--unpickle-floor", str(target),
                   "--jobs", str(jobs)])
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
    print(json.dumps({"seconds": time.perf_counter() - start, "entries": entries, "files": len(files)}))


def fr_trace_python(explicit: str | None) -> str | None:
    """A Python that can import torch's flight recorder analyzer, or None."""
    candidates = [explicit] if explicit else [str(ROOT / ".venv-torch" / "bin" / "python"), sys.executable]
    for py in candidates:
        if py and Path(py).exists():
            probe = subprocess.run([py, "-c", f"import {FR_MODULE}"], capture_output=True, check=False)
            if probe.returncode == 0:
                return py
    return None


def run_fr_trace(py: str, target: Path, timeout: float, mem_limit_mb: float) -> Run:
    warm_cache(target)
    run = measure([py, "-m", FR_MODULE, str(target), "-p", PREFIX], timeout=timeout,
                  mem_limit_mb=mem_limit_mb)
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
        ("ranks", ">"), ("job", "<"), ("entries", ">"),
        ("hangscope s", ">"), ("peak MB", ">"), ("us/entry", ">"), ("culprit", "<"),
        ("unpickle 1p s", ">"), (f"unpickle {jobs}p s", ">"), ("hs/floor 1p", ">"),
        (f"hs/floor {jobs}p", ">"), ("fr_trace s", ">"), ("fr MB", ">"), ("fr us/entry", ">"),
        ("fr/hs", ">"), ("store s", ">"), ("store MB", ">"), ("fr_trace status", "<"),
    ]
    table = []
    for r in rows:
        hs, fr, f1, fn, st = r["hs"], r.get("fr"), r.get("floor1"), r.get("floorn"), r.get("store")
        ok = hs.extra.get("culprit_ok")
        culprit = "ok" if ok else "-" if ok is None else "WRONG " + ",".join(map(str, hs.extra["culprits"][:4]))
        if ok and len(r["expected"]) == 1:
            culprit = f"ok ({r['expected'][0]})"
        table.append([
            f"{r['ranks']:,}", r["job"], f"{r['entries']:,}",
            fmt_s(hs), fmt_mb(hs), per_entry(hs, r["entries"]), culprit,
            fmt_s(f1), fmt_s(fn), ratio(hs, f1), ratio(hs, fn),
            fmt_s(fr), fmt_mb(fr), per_entry(fr, r["entries"]),
            ratio(fr, hs), fmt_s(st), fmt_mb(st),
            "-" if fr is None else r.get("fr_note") or fr.status,
        ])
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, (h, _) in enumerate(header)]
    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if a == ">" else c.ljust(w)
                         for c, w, (_, a) in zip(cells, widths, header)).rstrip()
    print(line([h for h, _ in header]))
    print(line(["-" * w for w in widths]))
    for row in table:
        print(line(row))


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 0
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{cores} cores, {mem:.0f} GB RAM, Python {platform.python_version()}, "
            f"load average {load}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"rank counts (default {DEFAULT_SIZES})")
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank (ring buffer size)")
    ap.add_argument("--with-16k", action="store_true", help=f"also {SIZE_16K:,} ranks")
    ap.add_argument("--jobs", type=int, default=0, help="hangscope parser processes (0: all cores)")
    ap.add_argument("--seed", type=int, default=0, help="simulator seed (picks the stalled rank)")
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench", help="where simulated dumps are kept")
    ap.add_argument("--regenerate", action="store_true", help="simulate again even if cached")
    ap.add_argument("--no-fr-trace", action="store_true", help="skip PyTorch's fr_trace")
    ap.add_argument("--fr-python", default=None, help="Python with torch (default .venv-torch/bin/python)")
    ap.add_argument("--fr-timeout", type=float, default=900.0, help="seconds before fr_trace is killed")
    ap.add_argument("--fr-mem-gb", type=float, default=12.0, help="memory at which fr_trace is killed")
    ap.add_argument("--no-store", action="store_true", help="skip the Parquet store re-open")
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

    fr_py = None
    fr_skip = "skipped (--no-fr-trace)" if args.no_fr_trace else None
    if not args.no_fr_trace:
        fr_py = fr_trace_python(args.fr_python)
        if fr_py is None:
            fr_skip = "skipped: torch is not installed (make bench installs it into .venv-torch)"
    note(f"machine: {machine()}")
    startup = measure(hangscope_cmd() + ["--help"])

    rows: list[dict[str, Any]] = []
    for ranks in sizes:
        jobdir = ensure_job(args.cache, ranks, args.entries, seed=args.seed, jobs=jobs,
                            regenerate=args.regenerate)
        expected = json.loads((jobdir / "EXPECTED.json").read_text())["culprits"]
        tp, pp, dp = topology(ranks)
        note(f"{ranks} ranks: hangscope")
        hs = run_hangscope(jobdir, jobs, expected)
        entries = int(hs.extra.get("entries", ranks * args.entries))
        row: dict[str, Any] = {"ranks": ranks, "job": f"tp{tp} pp{pp} dp{dp}", "entries": entries,
                               "hs": hs, "expected": expected}
        note(f"{ranks} ranks: unpickle floor")
        row["floor1"] = run_floor(jobdir, 1)
        row["floorn"] = run_floor(jobdir, jobs)
        if not args.no_store:
            note(f"{ranks} ranks: export and re-open the Parquet store")
            store = args.cache / (jobdir.name + ".store")
            shutil.rmtree(store, ignore_errors=True)
            export = measure(hangscope_cmd() + ["export", str(jobdir), "-o", str(store), "-q",
                                                "--jobs", str(jobs)])
            if export.status == "ok":
                row["store"] = run_hangscope(store, jobs, expected)
                row["store_bytes"] = sum(p.stat().st_size for p in store.iterdir())
            else:
                note(f"  export failed: {export.stderr.strip()[-300:]}")
        rows.append(row)
        if fr_py:
            note(f"{ranks} ranks: fr_trace")
            fr = run_fr_trace(fr_py, jobdir, args.fr_timeout, args.fr_mem_gb * 1024)
            row["fr"] = fr
            if fr.status != "ok":
                # Pipeline send/recv stop fr_trace (or it ran out of limits): measure both tools
                # again on a collectives-only job of the same size.
                cdir = ensure_job(args.cache, ranks, args.entries, seed=args.seed, jobs=jobs,
                                  collectives_only=True, regenerate=args.regenerate)
                cexp = json.loads((cdir / "EXPECTED.json").read_text())["culprits"]
                ctp, cpp, cdp = topology(ranks, collectives_only=True)
                note(f"{ranks} ranks, collectives only: hangscope and fr_trace")
                chs = run_hangscope(cdir, jobs, cexp)
                rows.append({
                    "ranks": ranks, "job": f"tp{ctp} pp{cpp} dp{cdp} (coll. only)",
                    "entries": int(chs.extra.get("entries", ranks * args.entries)), "hs": chs,
                    "expected": cexp, "fr": run_fr_trace(fr_py, cdir, args.fr_timeout, args.fr_mem_gb * 1024),
                })

    print(f"hangscope scale benchmark: {args.entries:,} entries per rank, stack frames on, one "
          f"stalled rank; {jobs} parser processes")
    print(f"machine: {machine()}")
    print()
    print_table(rows, jobs)
    print()
    print("hangscope s: wall time of `hangscope analyze DIR -q -f json`, process start to exit")
    print(f"  (interpreter start and imports included: {startup.wall:.2f} s for `hangscope --help`).")
    print("peak MB: largest sum of the proportional set size (PSS) of the process tree, parser")
    print("  processes included, sampled every 0.2 s (never below the largest process's max RSS).")
    print("us/entry: wall time per entry.")
    print(f"unpickle 1p / {jobs}p s: plain pickle.load of every dump file in one process / in {jobs}")
    print("  processes (the floor; interpreter start not counted). hs/floor: hangscope wall / floor.")
    print(f"fr_trace s: `python -m {FR_MODULE} DIR -p {PREFIX}`, torch 2.13,")
    print(f"  killed past {args.fr_timeout:.0f} s or {args.fr_mem_gb:.0f} GB. fr/hs: fr_trace wall / hangscope wall.")
    print("Every tool reads the files from the page cache (each is read once before each run).")
    print("store s / MB: `hangscope analyze STORE` on the Parquet store `hangscope export` wrote")
    print("  for the job (normalized tables, no dump parsing).")
    if fr_skip:
        print(f"fr_trace: {fr_skip}")
    if any(r.get("fr") and r["fr"].status.startswith("stopped") for r in rows):
        print("fr_trace 'stopped early': it stops matching after --mismatch_cap (10) mismatches in a")
        print("  group; it counts the pipeline send/recv pairs as mismatches, hence the collectives-only")
        print("  rows (pp 1, same rank count; hangscope measured again on those files).")
    reader_env = os.environ.get("HANGSCOPE_READER", "")
    print("readers: which reader parsed the dumps (native: the compiled pickle reader; python: the"
          " reference reader, also for every file the compiled one declined)"
          + (f"; HANGSCOPE_READER={reader_env}" if reader_env else ""))
    for r in rows:
        readers = r["hs"].extra.get("readers") or {}
        print(f"  {r['ranks']:,} ranks ({r['job']}): "
              + (", ".join(f"{k} {v:,}" for k, v in sorted(readers.items())) or "-"))
    wrong = [r for r in rows if r["hs"].extra.get("culprit_ok") is False]
    for r in wrong:
        print(f"culprit check FAILED for {r['ranks']} ranks ({r['job']}): expected {r['expected']}, "
              f"hangscope named {r['hs'].extra['culprits']}")
    for r in rows:
        if r.get("store_bytes"):
            print(f"store of {r['ranks']:,} ranks: {r['store_bytes'] / 2**20:,.1f} MB on disk")
    failed = [r for r in rows if r["hs"].status != "ok"]
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
