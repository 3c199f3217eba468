#!/usr/bin/env python3
"""Cost of hostile and broken input: one hangscope run per case, each in a fresh process.

Every case starts from a recorded sample whose culprit is known and adds or replaces files
the way real dump directories get them (stray core files and logs, compressed copies,
truncated, foreign or crafted files, broken fields, bombs). For each case it prints the exit
code, wall time, peak memory (max RSS of the process tree) and the verdict line, next to what
the case should give.

Usage::

    python bench/hostile_input.py [--only NAME,...] [--keep DIR] [--json FILE] [--timeout S]
                                  [--big]   # also the 1 GB and 5 GB files of zeros
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import hostile  # noqa: E402 - the same hostile files as the tests
from tests.hostile import CHAIN, JSON8  # noqa: E402

_copy = hostile.copy_job


def _case_dirs(base: Path, big: bool) -> dict[str, tuple[Path | list[str], str]]:
    """name -> (input, what it should give)."""
    cases: dict[str, tuple[Path | list[str], str]] = {}

    def case(name: str, expect: str) -> Callable[[Callable[[Path], Path | list[str] | None]], None]:
        def wrap(build: Callable[[Path], Path | list[str] | None]) -> None:
            d = base / name
            d.mkdir()
            got = build(d)
            cases[name] = (d if got is None else got, expect)

        return wrap

    @case("baseline", "culprit 3, exit 1")
    def _(d: Path) -> None:
        _copy(CHAIN, d)

    @case("stray_core", "culprit 3, core file ignored")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        rnd = random.Random(1)
        (d / "core.12345").write_bytes(b"\x7fELF" + rnd.randbytes(4 << 20))

    @case("stray_log", "culprit 3, log ignored")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        (d / "train_log_1700000000").write_text("step 1 loss 2.3\n" * 200_000)

    @case("unreadable_4", "culprit 3; ranks 4-7 unreadable, unknown")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.unreadable_ranks(d)

    @case("highest_crashed", "culprit 3 (missing dump), world 4")
    def _(d: Path) -> None:
        hostile.highest_rank_crashed(d)

    @case("gz_one", "culprit 3, rank 0 read from .gz")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        p = d / "nccl_trace_rank_0"
        (d / "nccl_trace_rank_0.gz").write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()

    @case("compressed_each", "culprit 3, .zst .bz2 .xz members")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        for r, (ext, fn) in enumerate([(".bz2", bz2.compress), (".xz", lzma.compress)]):
            p = d / f"nccl_trace_rank_{r}"
            (d / (p.name + ext)).write_bytes(fn(p.read_bytes()))
            p.unlink()
        try:
            import zstandard

            p = d / "nccl_trace_rank_2"
            (d / (p.name + ".zst")).write_bytes(zstandard.ZstdCompressor().compress(p.read_bytes()))
            p.unlink()
        except ImportError:
            pass

    @case("tar_gz", "culprit 3 from one .tar.gz")
    def _(d: Path) -> Path:
        with tarfile.open(d / "dumps.tar.gz", "w:gz") as tf:
            for p in sorted(CHAIN.glob("nccl_trace_rank_*")):
                tf.add(p, arcname=f"job/{p.name}")
        return d / "dumps.tar.gz"

    @case("zip", "culprit 3 from one .zip")
    def _(d: Path) -> Path:
        with zipfile.ZipFile(d / "dumps.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted(CHAIN.glob("nccl_trace_rank_*")):
                zf.write(p, arcname=p.name)
        return d / "dumps.zip"

    @case("gzip_bomb", "culprit 3; bomb is one line")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.gzip_bomb(d / "nccl_trace_rank_9.gz", 6 << 10)  # 6 GB of zeros

    @case("wrong_type", "culprit 3; rank 5: entries dropped with a reason")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.wrong_types(d / "nccl_trace_rank_5")

    @case("deep_json", "culprit 5; one line for the deep file")
    def _(d: Path) -> None:
        _copy(JSON8, d)
        (d / "rank_9.json").write_text(hostile.deep_json(100_000))

    @case("deep_pickle", "culprit 3; one line for the deep file")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        (d / "nccl_trace_rank_9").write_bytes(hostile.deep_pickle(1_000_000))

    @case("laughs_pickle", "culprit 3; one line for the bomb")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        (d / "nccl_trace_rank_9").write_bytes(hostile.laughs())

    @case("huge_length", "culprit 3; one line")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        (d / "nccl_trace_rank_9").write_bytes(hostile.huge_length())

    @case("member_2e9", "culprit 3; absurd member dropped")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.absurd_member(d / "nccl_trace_rank_6")

    @case("zeros_64m", "culprit 3; zeros ignored without reading them")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        with open(d / "nccl_trace_rank_9", "wb") as f:
            f.write(bytes(64 << 20))

    if big:

        @case("zeros_1g", "culprit 3; zeros ignored without reading them")
        def _(d: Path) -> None:
            _copy(CHAIN, d)
            with open(d / "nccl_trace_rank_9", "wb") as f:
                for _ in range(1024):
                    f.write(bytes(1 << 20))

        @case("zeros_5g_sparse", "culprit 3; size checked before reading")
        def _(d: Path) -> None:
            _copy(CHAIN, d)
            with open(d / "nccl_trace_rank_9", "wb") as f:
                f.write(b"\x80\x04")
                f.truncate(5 << 30)

    @case("dup_identical", "culprit 3; copy merged with a note")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        (d / "sub").mkdir()
        shutil.copy(d / "nccl_trace_rank_0", d / "sub" / "nccl_trace_rank_0")

    @case("dup_different", "culprit 3; newer kept, older named as dropped")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.older_copy(d / "nccl_trace_rank_0", d / "old" / "nccl_trace_rank_0")

    @case("unranked_copy", "culprit 3; backup.bin skipped (its name carries no rank)")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.older_copy(d / "nccl_trace_rank_0", d / "backup.bin")

    @case("absurd_rank_name", "culprit 3; nccl_trace_rank_2000000000 skipped")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        shutil.copy(d / "nccl_trace_rank_0", d / "nccl_trace_rank_2000000000")

    @case("json_bom_utf16", "culprit 5; BOM and UTF-16 dumps read")
    def _(d: Path) -> None:
        _copy(JSON8, d)
        p = d / "rank_0.json"
        p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
        p = d / "rank_1.json"
        p.write_bytes(p.read_text().encode("utf-16"))

    @case("escapes", "culprit 3; no raw control characters in the output")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.escapes(d / "nccl_trace_rank_2")

    @case("corrupt_waiter", "culprit 3; rank 2 suspect, not blamed")
    def _(d: Path) -> None:
        _copy(CHAIN, d)
        hostile.corrupt_values(d / "nccl_trace_rank_2")

    @case("world_size_negative", "exit 2, --world-size rejected")
    def _(d: Path) -> list[str]:
        _copy(CHAIN, d)
        return [str(d), "--world-size", "-3"]

    @case("world_size_too_small", "exit 2, below the highest dumped rank + 1")
    def _(d: Path) -> list[str]:
        _copy(CHAIN, d)
        return [str(d), "--world-size", "4"]

    @case("world_size_absurd", "exit 2, beyond any job's ranks")
    def _(d: Path) -> list[str]:
        _copy(CHAIN, d)
        return [str(d), "--world-size", "2000000000"]

    @case("version", "exit 0, prints the version")
    def _(d: Path) -> list[str]:
        return ["--version"]

    return cases


def _summary(out: str, err: str) -> str:
    """Verdict, culprits, world and what was skipped, or the first line of the output."""
    try:
        doc = json.loads(out)
    except ValueError:
        return (out.strip().splitlines() or err.strip().splitlines() or [""])[0]
    parts = [f"{doc['verdict']} {doc['culprit_ranks']} {doc['kind']}", f"world {doc['world_size']}"]
    if doc.get("missing_dumps"):
        parts.append(f"missing {doc['missing_dumps']}")
    if doc.get("skipped_files"):
        parts.append(f"{len(doc['skipped_files'])} skipped")
    for key in ("ignored_files", "warnings", "duplicates"):
        if doc.get(key):
            parts.append(f"{len(doc[key])} {key}")
    return "; ".join(parts)


def run(cmd: list[str], timeout: float) -> dict[str, Any]:
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (12 << 30, 12 << 30)),
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        code = "timeout"
    wall = time.monotonic() - start
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit": code,
        "s": round(wall, 2),
        "out": out.decode(errors="replace"),
        "err": err.decode(errors="replace"),
        "maxrss_mb": round(ru.ru_maxrss / 1024),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--keep", type=Path, help="build the cases here and keep them")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--big", action="store_true", help="also the 1 GB and 5 GB cases")
    ap.add_argument("--hangscope", default=str(Path(sys.executable).with_name("hangscope")))
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="hangscope-hostile-"))
    base.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    results = []
    try:
        cases = _case_dirs(base, args.big)
        print(f"{'case':<22} {'exit':>7} {'s':>7} {'MB':>6}  output (first line) / should give")
        for name, (spec, expect) in cases.items():
            if only and name not in only:
                continue
            argv = spec if isinstance(spec, list) else [str(spec)]
            cmd = (
                [args.hangscope]
                + ([] if argv == ["--version"] else ["analyze"])
                + argv
                + ([] if argv == ["--version"] else ["-q", "-f", "json"])
            )
            # Peak memory of one case alone: run it from a fresh child of a fresh interpreter.
            probe = [
                sys.executable,
                "-c",
                "import resource,subprocess,sys,json;"
                "p=subprocess.run(sys.argv[1:],capture_output=True);"
                "ru=resource.getrusage(resource.RUSAGE_CHILDREN);"
                "print(json.dumps({'rss':ru.ru_maxrss,'code':p.returncode,"
                "'out':p.stdout.decode(errors='replace'),'err':p.stderr.decode(errors='replace')}))",
            ]
            r = run(probe + cmd, args.timeout)
            if r["exit"] == "timeout":
                info = {"code": "timeout", "rss": 0, "out": "", "err": ""}
            else:
                try:
                    info = json.loads(r["out"].strip().splitlines()[-1])
                except (ValueError, IndexError):
                    info = {"code": f"probe {r['exit']}", "rss": 0, "out": "", "err": r["err"]}
            first = _summary(info["out"], info["err"])
            raw = any(ch in info["out"] + info["err"] for ch in "\x1b\x07\r\x00")
            tb = "Traceback" in info["err"]
            row = {
                "case": name,
                "exit": info["code"],
                "s": r["s"],
                "mb": round(info["rss"] / 1024),
                "first": first[:110],
                "expect": expect,
                "traceback": tb,
                "raw_ctrl": raw,
            }
            results.append(row)
            flags = (" [traceback]" if tb else "") + (" [raw control chars]" if raw else "")
            print(
                f"{name:<22} {row['exit']!s:>7} {row['s']:>7.2f} {row['mb']:>6}  "
                f"{row['first']!r}{flags}\n{'':<46}should: {expect}",
                flush=True,
            )
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
