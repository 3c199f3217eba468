#!/usr/bin/env python3
"""Hostile processes, disks and folders: one hangscope run per case, each in a fresh process.

The cases of a supervisor's life: signals mid-parse (SIGTERM, SIGHUP, SIGINT, SIGKILL, a
``subprocess.run`` timeout), ``/dev/shm`` read-only, absent or small, stdout and stderr
closed or full, reports and stores written onto a full disk or by two exports at once,
stores that lie, dumps that are dangling symlinks or FIFOs, folders deeper than PATH_MAX and
100,000 files named like dumps. For each case it prints the exit code, wall time, peak
memory (max RSS of the process tree), what was left behind (parser processes still alive,
batch folders in ``/dev/shm``, partial files) and what the case should give.

Mounts (a small tmpfs for a full disk, a read-only or absent ``/dev/shm``) need root and a
private mount namespace (``unshare -m``): those cases say "skipped" without them.

Usage::

    python bench/hostile_processes.py [--only NAME,...] [--big DIR] [--json FILE]
        [--root SRC]   # run the hangscope of another source tree (e.g. a checkout of main)

``--big DIR``: a large job for the signal and ``/dev/shm`` cases, e.g. the 4,096 ranks of
``python -m tools.simulate -o DIR --tp 8 --pp 8 --dp 64 --fault stall --buffer-size 2000``
(default: 64 simulated ranks, written on the fly).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_dumps"
SHM = "/dev/shm"
SPILL = "hangscope-batches-"


@dataclass
class Outcome:
    name: str
    expect: str
    code: int | None = None
    seconds: float = 0.0
    rss_mb: float = 0.0
    left: list[str] = field(default_factory=list)
    note: str = ""


def _spill_folders() -> set[str]:
    try:
        return {n for n in os.listdir(SHM) if n.startswith(SPILL)}
    except OSError:
        return set()


def _running(folder: str) -> bool:
    """Whether the run that made the batch folder ``folder`` is still running."""
    pid = folder[len(SPILL) :].partition("-")[0]
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        return True
    return True


def _tagged(tag: str) -> list[int]:
    """Processes whose environment carries ``tag`` (the parser processes of one run)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"HANGSCOPE_BENCH_TAG={tag}".encode() in f.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


class Runner:
    def __init__(self, root: Path, work: Path) -> None:
        self.root = root
        self.work = work

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "analyzer", *args]

    def run(
        self,
        args: list[str],
        *,
        kill: tuple[float, int] | None = None,
        shell: str | None = None,
        timeout: float = 300,
        stdin: int | None = subprocess.DEVNULL,
        summary: bool = False,
    ) -> tuple[int | None, float, float, str, list[str]]:
        """(exit code, seconds, max RSS MB, stderr's last line, leftovers) of one run.
        ``kill``: (after seconds, signal) sent to the main process. ``shell``: a shell
        script run as root in a private mount namespace, ``$HS`` the command."""
        tag = uuid.uuid4().hex
        env = {**os.environ, "HANGSCOPE_BENCH_TAG": tag, "PYTHONPATH": str(self.root)}
        before = _spill_folders()
        cmd = args
        if shell is not None:
            hs = " ".join(f"'{a}'" for a in args)
            cmd = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                shell.replace("$HS", hs),
            ]
        err = tempfile.TemporaryFile()  # noqa: SIM115 - read after the run
        out = tempfile.TemporaryFile()  # noqa: SIM115 - read after the run
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdin=stdin, stdout=out, stderr=err)
        if kill is not None:
            time.sleep(kill[0])
            if proc.poll() is None:
                os.kill(proc.pid, kill[1])
        code: int | None = None
        rss = 0.0
        while time.monotonic() - start < timeout:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                rss = usage.ru_maxrss / 1024
                proc.returncode = code
                break
            time.sleep(0.02)
        seconds = time.monotonic() - start
        if code is None:
            proc.kill()
            proc.wait()
        time.sleep(1.0)  # what dies with the run has a second to go
        left = [f"{len(alive)} parser process(es) alive" for alive in [_tagged(tag)] if alive]
        for pid in _tagged(tag):
            os.kill(pid, signal.SIGKILL)
        mine = f"{SPILL}{proc.pid}-"  # the folders of this run (not another one's)
        new = {n for n in _spill_folders() - before if n.startswith(mine) or not _running(n)}
        others = {n for n in new if not n.startswith(mine)}
        if others and shell is None:  # left by other runs of this machine meanwhile
            new -= others
        if new:
            left.append(f"{len(new)} batch folder(s) in /dev/shm")
            for n in new:
                shutil.rmtree(os.path.join(SHM, n), ignore_errors=True)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else ""
        if any("Traceback" in ln for ln in lines):
            last = "TRACEBACK: " + last
        if summary:
            out.seek(0)
            last = _summary(out.read()) + (f" | {last}" if last else "")
        return code, seconds, rss, last[:160], left


def _summary(raw: bytes) -> str:
    """The verdict, culprits and what was skipped, of an ``analyze -f json`` output."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return "(no JSON)"
    skipped = [
        f"{s.get('path', '')[-24:]}: {s.get('reason', '')[:50]}" for s in doc["skipped_files"]
    ]
    return (
        f"{doc['verdict']}, culprits {doc['culprit_ranks']}, unreadable ranks "
        f"{doc['unreadable_ranks']}, missing {str(doc['missing_dumps'])[:40]}, "
        f"{len(doc['skipped_files'])} skipped {skipped[:1]}, "
        f"unreadable folders {len(doc['unreadable_folders'])}"
    )


def _can_mount() -> str:
    if os.geteuid() != 0:
        return "not root"
    ok = subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    return "" if ok else "no private mount namespace"


def _files(folder: Path) -> list[str]:
    if not folder.exists():
        return ["(absent)"]
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


Case = Callable[[Runner, Path, Path], Outcome]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


def _signal_case(name: str, sig: int, expect: str) -> Case:
    def run(r: Runner, big: Path, tmp: Path) -> Outcome:
        code, s, rss, last, left = r.run(
            r.argv("analyze", str(big), "-j", "2", "-q"), kill=(2.0, sig)
        )
        return Outcome(name, expect, code, s, rss, left, last)

    run.__name__ = f"case_{name}"
    return case(run)


_signal_case("sigterm", signal.SIGTERM, "exit 143 at once, nothing left")
_signal_case("sighup", signal.SIGHUP, "exit 129 at once, nothing left")
_signal_case("sigint", signal.SIGINT, "exit 130 at once, nothing left")
_signal_case("sigkill", signal.SIGKILL, "exit -9; parser processes gone, no batch folder")


@case
def case_run_timeout(r: Runner, big: Path, tmp: Path) -> Outcome:
    tag = uuid.uuid4().hex
    env = {**os.environ, "HANGSCOPE_BENCH_TAG": tag, "PYTHONPATH": str(r.root)}
    start = time.monotonic()
    note = "returned"
    try:
        subprocess.run(
            r.argv("analyze", str(big), "-j", "2", "-q"),
            cwd=r.root,
            env=env,
            capture_output=True,
            timeout=2.0,
        )
    except subprocess.TimeoutExpired:
        note = "TimeoutExpired raised"
    s = time.monotonic() - start
    time.sleep(1.0)
    alive = _tagged(tag)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    left = [f"{len(alive)} parser process(es) alive"] if alive else []
    return Outcome(
        "run_timeout", "subprocess.run(timeout=2) returns in ~2 s", None, s, 0, left, note
    )


def _mount_case(name: str, script: str, expect: str, data: str = "big") -> Case:
    def run(r: Runner, big: Path, tmp: Path) -> Outcome:
        why = _can_mount()
        if why:
            return Outcome(name, expect, note=f"skipped: {why}")
        job = big if data == "big" else tmp / "job64"
        code, s, rss, last, left = r.run(r.argv("analyze", str(job), "-j", "2", "-q"), shell=script)
        return Outcome(name, expect, code, s, rss, left, last)

    run.__name__ = f"case_{name}"
    return case(run)


_mount_case(
    # a new read-only tmpfs over it (a remount would make the shared one read-only for all)
    "shm_readonly",
    "mount -t tmpfs -o ro tmpfs /dev/shm && exec $HS",
    "exit 1 (culprit), a note",
    "64",
)
_mount_case(
    "shm_absent",
    "mkdir -p /tmp/.olddev && mount --rbind /dev /tmp/.olddev && mount -t tmpfs tmpfs /dev && "
    "for n in null zero urandom random full tty; do ln -s /tmp/.olddev/$n /dev/$n; done && exec $HS",
    "exit 1 (culprit), a note",
    "64",
)
_mount_case(
    "shm_64mb",
    "mount -t tmpfs -o size=64m tmpfs /dev/shm && ( $HS & pid=$!; peak=0; "
    "while kill -0 $pid 2>/dev/null; do u=$(df -k --output=used /dev/shm | tail -1); "
    "[ $u -gt $peak ] && peak=$u; sleep 0.05; done; wait $pid; c=$?; "
    'echo "peak /dev/shm use: $((peak * 100 / 65536))%" >&2; exit $c )',
    "exit 1, /dev/shm use bounded (well under 97%)",
)


def _stream_case(name: str, args: list[str], redirect: str, expect: str) -> Case:
    def run(r: Runner, big: Path, tmp: Path) -> Outcome:
        hs = " ".join(f"'{a}'" for a in r.argv(*args))
        tag = uuid.uuid4().hex
        env = {**os.environ, "HANGSCOPE_BENCH_TAG": tag, "PYTHONPATH": str(r.root)}
        start = time.monotonic()
        status = tmp / f"{name}.exit"
        proc = subprocess.run(
            ["sh", "-c", f"{hs} {redirect}; echo $? > {status}"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        s = time.monotonic() - start
        out = proc.stdout + proc.stderr
        code = int(status.read_text()) if status.exists() else None
        note = "TRACEBACK" if "Traceback" in out else out.replace("\n", " | ")[:160]
        if (tmp / "r.html").exists():
            note += f" (r.html: {(tmp / 'r.html').stat().st_size:,} bytes)"
        return Outcome(name, expect, code, s, 0, [], note)

    run.__name__ = f"case_{name}"
    return case(run)


STALL = str(SAMPLES / "stall_w4")
HEALTHY = str(SAMPLES / "healthy_w4")
_stream_case("stdout_closed", ["analyze", HEALTHY], ">&-", "exit 6, one line, no traceback")
_stream_case("stderr_closed_ok", ["analyze", HEALTHY, "-q"], "2>&- >/dev/null", "exit 0")
_stream_case("stderr_closed_bad", ["analyze", "/nonexistent"], "2>&- >/dev/null", "exit 2")
_stream_case("stdout_full", ["analyze", STALL], ">/dev/full", "exit 6, one line")
_stream_case("stderr_full_bad", ["analyze", "/nonexistent"], "2>/dev/full", "exit 2")
_stream_case(
    "report_stdout_full",
    ["report", STALL, "-o", "r.html"],  # "wrote r.html" on stdout
    ">/dev/full",
    "exit 6 (r.html written)",
)


def _small_disk(kb: int, body: str) -> str:
    return (
        f"mount -t tmpfs -o size={kb}k tmpfs $D && {body}; c=$?; "
        "echo \"left: $(cd $D && find . -mindepth 1 | sort | tr '\\n' ' ')\" >&2; exit $c"
    )


def _disk_case(name: str, kb: int, body: str, expect: str) -> Case:
    def run(r: Runner, big: Path, tmp: Path) -> Outcome:
        why = _can_mount()
        if why:
            return Outcome(name, expect, note=f"skipped: {why}")
        d = tmp / name
        d.mkdir()
        hs = " ".join(f"'{a}'" for a in r.argv())
        body_ = body.replace("$HSB", hs).replace("JOB64", str(tmp / "job64"))
        script = _small_disk(kb, body_).replace("$D", str(d))
        code, s, rss, last, left = r.run(["true"], shell=script)
        return Outcome(name, expect, code, s, rss, left, last)

    run.__name__ = f"case_{name}"
    return case(run)


_disk_case(
    "report_full_disk",
    512,  # the report of stall_w4 is 0.76 MB
    f"$HSB report {STALL} -q -o $D/report.html",
    "exit 6, no report.html",
)
_disk_case(
    "export_full_disk",
    2048,
    "$HSB export JOB64 -q -o $D/store",
    "exit 6, no store nor partial folder",
)
_disk_case(
    "reexport_full_disk",
    4096,
    f"$HSB export {STALL} -q -o $D/store >/dev/null && head -c 3500k /dev/zero > $D/fill; "
    "$HSB export JOB64 -q -o $D/store; c=$?; rm -f $D/fill; "
    '$HSB analyze $D/store -q >/dev/null; echo "analyze after: $?" >&2; exit $c',
    "exit 6; the old store still reads (analyze after: 1)",
)


@case
def case_concurrent_exports(r: Runner, big: Path, tmp: Path) -> Outcome:
    out = tmp / "concurrent"
    env = {**os.environ, "PYTHONPATH": str(r.root)}
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            r.argv("export", str(j), "-q", "-o", str(out)),
            cwd=r.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for j in (tmp / "job64", tmp / "job64b")
    ]
    ended: list[int] = []  # the order the exports finished in
    while len(ended) < len(procs):
        ended += [i for i, p in enumerate(procs) if p.poll() is not None and i not in ended]
        time.sleep(0.01)
    codes = [p.wait() for p in procs]
    s = time.monotonic() - start
    read = subprocess.run(
        r.argv("analyze", str(out), "-q", "-f", "json"),
        cwd=r.root,
        env=env,
        capture_output=True,
        text=True,
    )
    culprits = "unreadable"
    if read.returncode in (0, 1):
        culprits = str(json.loads(read.stdout)["culprit_ranks"])
    last = ("job64", "job64b")[ended[-1]]
    note = (
        f"exports exited {codes}, {last} last; store's culprits {culprits} "
        "(job64: [46], job64b: [0])"
    )
    return Outcome(
        "concurrent_exports",
        "the store of an export that exited 0",
        read.returncode,
        s,
        0,
        [],
        note,
    )


def _store_case(name: str, build: Callable[[Runner, Path, Path], list[str]], expect: str) -> Case:
    def run(r: Runner, big: Path, tmp: Path) -> Outcome:
        args = build(r, tmp, tmp / name)
        code, s, rss, last, left = r.run(
            ["sh", "-c", f"ulimit -v 4000000; exec {' '.join(repr(a) for a in r.argv(*args))}"]
        )
        return Outcome(name, expect, code, s, rss, left, last)

    run.__name__ = f"case_{name}"
    return case(run)


def _export(r: Runner, src: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(r.root)}
    subprocess.run(
        r.argv("export", str(src), "-q", "-o", str(out)),
        cwd=r.root,
        env=env,
        capture_output=True,
        check=True,
    )


def _huge_marker(r: Runner, tmp: Path, d: Path) -> list[str]:
    _export(r, SAMPLES / "stall_w4", d)
    meta = json.loads((d / "hangscope-store.json").read_text())
    meta.update(format="hangscope.store/1", world_size=10**12)
    (d / "hangscope-store.json").write_text(json.dumps(meta))
    return ["analyze", str(d), "-q"]


def _foreign_members(r: Runner, tmp: Path, d: Path) -> list[str]:
    _export(r, tmp / "job64", d)
    _export(r, tmp / "job512", tmp / "store512")
    shutil.copy(tmp / "store512" / "members.json", d / "members.json")
    return ["analyze", str(d), "-q"]


def _export_into_itself(r: Runner, tmp: Path, d: Path) -> list[str]:
    shutil.copytree(SAMPLES / "stall_w4", d)
    return ["export", str(d), "-q", "-o", str(d)]


_store_case("store_huge_world", _huge_marker, "exit 2, one line, little memory")
_store_case("store_foreign_members", _foreign_members, "exit 2: parts of another job")
_store_case("export_into_itself", _export_into_itself, "exit 2: refused")


def _odd_dump(name: str, make: Callable[[Path], None], expect: str) -> Case:
    def run(r: Runner, big: Path, tmp: Path) -> Outcome:
        d = tmp / name
        shutil.copytree(SAMPLES / "stall_w4", d)
        (d / "EXPECTED.json").unlink()
        make(d)
        code, s, rss, last, left = r.run(
            r.argv("analyze", str(d), "-f", "json", "-q"), timeout=60, summary=True
        )
        return Outcome(name, expect, code, s, rss, left, last)

    run.__name__ = f"case_{name}"
    return case(run)


def _dangling(d: Path) -> None:
    (d / "nccl_trace_rank_1").unlink()
    (d / "nccl_trace_rank_1").symlink_to(d / "gone")


def _fifo(d: Path) -> None:
    (d / "nccl_trace_rank_1").unlink()
    os.mkfifo(d / "nccl_trace_rank_1")


def _deep(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        for _ in range(40):  # 40 x 200 characters: beyond PATH_MAX (4096)
            name = "d" * 200
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


def _many(d: Path) -> None:
    for i in range(100_000):
        with open(d / f"nccl_trace_rank_{8 + i}", "wb") as f:
            f.write(b"x")


_odd_dump("dangling_symlink", _dangling, "exit 1; rank 1 skipped (unknown), not crashed")
_odd_dump("fifo_dump", _fifo, "exit 1 in a moment; rank 1 skipped (unknown)")
_odd_dump("deeper_than_path_max", _deep, "exit 1; the deep folder listed unreadable")
_odd_dump("many_dump_names", _many, "bounded time and memory")


def _prepare(r: Runner, tmp: Path) -> None:
    sim = [sys.executable, "-m", "tools.simulate", "--fault", "stall", "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, extra in (
        ("job64", ["--tp", "4", "--pp", "4", "--dp", "4"]),
        ("job64b", ["--tp", "4", "--pp", "4", "--dp", "4", "--seed", "7", "--fault", "crash"]),
        ("job512", ["--tp", "8", "--pp", "8", "--dp", "8", "--entries-per-rank", "50"]),
    ):
        subprocess.run(
            [*sim, "-o", str(tmp / name), *extra],
            cwd=ROOT,
            env=env,
            capture_output=True,
            check=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--big", type=Path, default=None)
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    only = [n for n in args.only.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="hostile-processes-") as t:
        tmp = Path(t)
        r = Runner(args.root.resolve(), tmp)
        _prepare(r, tmp)
        big = args.big or tmp / "job64"
        results = []
        for name, fn in CASES.items():
            if only and name not in only:
                continue
            o = fn(r, big, tmp)
            results.append(o)
            print(
                f"{o.name:24} exit {o.code!s:>4}  {o.seconds:7.2f} s  {o.rss_mb:7.0f} MB  "
                f"left: {', '.join(o.left) or 'nothing'}\n{'':24} want: {o.expect}\n"
                f"{'':24} said: {o.note}",
                flush=True,
            )
        if args.json:
            args.json.write_text(json.dumps([asdict(o) for o in results], indent=1))


if __name__ == "__main__":
    main()
