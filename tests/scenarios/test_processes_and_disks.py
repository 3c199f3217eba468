"""hangscope under supervisors, on full disks, beside other runs and among odd files.

Signals mid-parse, ``/dev/shm`` read-only or absent, standard streams closed or full, files
written onto a full disk or by two runs at once, stores that lie, dumps that are dangling
symlinks or FIFOs, folders deeper than PATH_MAX. Mounts need root and a private mount
namespace (``unshare -m``): those tests are skipped, with the reason, without them.
``python bench/hostile_processes.py`` runs every case and prints what each gives.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
STALL = SAMPLES / "stall_w4"
HEALTHY = SAMPLES / "healthy_w4"
SHM = "/dev/shm"


def _hangscope(*args: str) -> list[str]:
    return [sys.executable, "-m", "analyzer", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _mount_namespace() -> str:
    """Why mounts cannot be tried here ("" when they can)."""
    if os.geteuid() != 0:
        return "needs root for a private mount namespace"
    if shutil.which("unshare") is None:
        return "no unshare"
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return "unshare -m refused (no CAP_SYS_ADMIN here)"
    return ""


MOUNTS = pytest.mark.skipif(bool(_mount_namespace()), reason=_mount_namespace() or "-")


def _in_namespace(script: str, **kw: object) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) as root in a private mount namespace; ``$HS`` runs hangscope."""
    hs = " ".join(f"'{a}'" for a in _hangscope())
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script.replace("$HS", hs)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def job256(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """256 simulated ranks (rank 46 of a 64-rank pattern stalls): long enough a parse to
    be stopped in the middle."""
    out = tmp_path_factory.mktemp("sim") / "job"
    subprocess.run(
        [sys.executable, "-m", "tools.simulate", "-o", str(out), "--tp", "8", "--pp", "4",
         "--dp", "8", "--fault", "stall", "--jobs", "1"],
        cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(p))
    return out


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            continue
    return alive


def _spill_folders(pid: int) -> list[str]:
    try:
        return [n for n in os.listdir(SHM) if n.startswith(f"hangscope-batches-{pid}-")]
    except OSError:
        return []


@pytest.fixture()
def mid_parse(job256: Path) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """A run with 2 parser processes, caught while they parse."""
    proc = subprocess.Popen(
        _hangscope("analyze", str(job256), "-j", "2", "-q"),
        cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [c for c in _children(proc.pid) if c != proc.pid]
        if len(workers) >= 2:
            break
        time.sleep(0.01)
    time.sleep(0.3)
    if proc.poll() is not None:
        pytest.skip("the parse ended before it could be interrupted")
    yield proc, workers
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in _alive(workers):
        os.kill(pid, signal.SIGKILL)


def _gone(workers: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(workers)


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)]
)
def test_a_signal_mid_parse_unwinds_and_leaves_nothing(
    mid_parse: tuple[subprocess.Popen[bytes], list[int]], sig: int, code: int
) -> None:
    if signal.getsignal(sig) is signal.SIG_IGN:  # inherited by the run, which keeps it
        pytest.skip(f"{signal.Signals(sig).name} is ignored in this session (nohup)")
    proc, workers = mid_parse
    proc.send_signal(sig)
    start = time.monotonic()
    assert proc.wait(timeout=30) == code
    assert time.monotonic() - start < 10
    assert _gone(workers, 5), "parser processes outlived the run"
    assert not _spill_folders(proc.pid)
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


_IN_A_FINALIZER = """
import os, signal, sys, time, weakref
from analyzer.cli.process import Signalled, install_signal_handlers

install_signal_handlers()
class Thing: pass
def callback(_ref):
    os.kill(os.getpid(), signal.SIGTERM)  # the handler runs inside this weakref callback
    for _ in range(1000):
        pass
thing = Thing()
ref = weakref.ref(thing, callback)
start = time.monotonic()
try:
    del thing
    while time.monotonic() - start < 3:
        time.sleep(0.01)
    print("went on")
except Signalled as exc:
    print("unwound", exc.signum, round(time.monotonic() - start, 1))
"""


def test_a_signal_landing_in_a_finalizer_unwinds_and_prints_nothing() -> None:
    """Python drops (and prints) an exception a weakref callback raises: the signal is
    delivered again outside it, the run unwinds at once and stderr stays empty."""
    run = subprocess.run(
        [sys.executable, "-c", _IN_A_FINALIZER],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert run.stderr == ""
    word, signum, took = run.stdout.split()
    assert (word, int(signum)) == ("unwound", signal.SIGTERM)
    assert float(took) < 1.0  # not the grace period's end


def test_parser_processes_die_with_a_killed_parent(
    mid_parse: tuple[subprocess.Popen[bytes], list[int]], job256: Path
) -> None:
    proc, workers = mid_parse
    proc.kill()
    proc.wait(timeout=30)
    assert _gone(workers, 5), "parser processes outlived their killed parent"
    deadline = time.monotonic() + 5
    while _spill_folders(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _spill_folders(proc.pid):  # rarely (a parser mid-write as it ends): the next run's
        subprocess.run(
            _hangscope("analyze", str(job256), "-j", "2", "-q"),
            cwd=ROOT, env=_env(), capture_output=True, timeout=120,
        )  # fmt: skip
    assert not _spill_folders(proc.pid), "the batch folder outlived the killed run"


def test_a_timeout_of_subprocess_run_returns(job256: Path) -> None:
    """``subprocess.run(..., capture_output=True, timeout=T)`` expiring mid-parse returns:
    the parser processes, which hold the pipes, die with the killed run."""
    start = time.monotonic()
    try:
        with subprocess.Popen(
            _hangscope("analyze", str(job256), "-j", "2", "-q"),
            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        ) as proc:  # fmt: skip
            while len(_children(proc.pid)) < 2 and proc.poll() is None:
                time.sleep(0.01)
            if proc.poll() is not None:
                pytest.skip("the parse ended before the timeout")
            proc.kill()  # what subprocess.run does when its timeout expires
            proc.communicate(timeout=10)  # EOF once every holder of the pipes is gone
    except subprocess.TimeoutExpired:
        pytest.fail("the pipes stayed open: parser processes outlived the killed run")
    assert time.monotonic() - start < 20


@MOUNTS
@pytest.mark.parametrize(
    "setup",
    [
        # a new read-only tmpfs over it (a remount would make the shared one read-only)
        pytest.param("mount -t tmpfs -o ro tmpfs /dev/shm", id="read-only"),
        pytest.param(
            "mkdir -p /tmp/.hs-olddev && mount --rbind /dev /tmp/.hs-olddev && "
            "mount -t tmpfs tmpfs /dev && for n in null zero urandom random full; "
            "do ln -s /tmp/.hs-olddev/$n /dev/$n; done",
            id="absent",
        ),
    ],
)
def test_no_usable_dev_shm_parses_in_one_process_with_a_note(job256: Path, setup: str) -> None:
    got = _in_namespace(f"{setup} && exec $HS analyze {job256} -j 2 -q -f json")
    assert got.returncode == 1, got.stderr
    assert "hangscope: warning: no parser processes" in got.stderr
    assert "Traceback" not in got.stderr
    assert json.loads(got.stdout)["culprit_ranks"]


def _shell(script: str, cwd: Path) -> tuple[int, str]:
    """(exit code, stdout and stderr) of ``script``; ``$HS`` runs hangscope."""
    hs = " ".join(f"'{a}'" for a in _hangscope())
    status = cwd / "status"
    got = subprocess.run(
        ["sh", "-c", f"{script.replace('$HS', hs)}; echo $? > {status}"],
        cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return int(status.read_text()), got.stdout + got.stderr


def test_closed_stdout_is_exit_6_in_one_line(tmp_path: Path) -> None:
    code, said = _shell(f"$HS analyze {HEALTHY} -q >&-", tmp_path)
    assert code == 6, said
    assert "Traceback" not in said
    assert said.strip().splitlines() == [
        "hangscope: error: stdout: cannot write (Bad file descriptor)"
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", str(STALL)],
        ["analyze", str(HEALTHY), "-f", "json"],
        ["entries", str(STALL)],
        ["graph", str(STALL), "-f", "dot"],
        ["report", str(STALL), "-o", "r.html", "--plotlyjs", "cdn"],  # "wrote r.html"
    ],
)
def test_a_pipe_closed_by_its_reader_is_exit_141_and_nothing_said(
    tmp_path: Path, args: list[str]
) -> None:
    """``| head`` that has read enough: the reader's choice, not an error. Here the reader
    goes away before anything is written (the run takes longer than closing a pipe)."""
    run = subprocess.Popen(
        _hangscope(*args), cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert run.stdout is not None and run.stderr is not None
    run.stdout.close()
    said = run.stderr.read()
    assert (run.wait(timeout=120), said) == (141, b"")


def test_a_reader_that_reads_a_line_and_leaves_is_exit_141(job256: Path, tmp_path: Path) -> None:
    """``hangscope entries DIR | head -1`` on megabytes of entries: the first line is read,
    the rest of the stream stops there, silently."""
    run = subprocess.Popen(
        _hangscope("entries", str(job256), "-j", "2"),
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert run.stdout is not None and run.stderr is not None
    assert run.stdout.readline().startswith(b"rank ")
    run.stdout.close()
    said = run.stderr.read()
    assert (run.wait(timeout=300), said) == (141, b"")
    code, said_too = _shell(f"$HS entries {job256} -j 2 | head -1 >/dev/null", tmp_path)
    assert (code, said_too) == (0, "")  # the pipeline's code is head's; nothing on stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [(f"analyze {HEALTHY} -q", 0), (f"analyze {STALL} -q", 1), ("analyze /nonexistent", 2)],
)
def test_closed_or_full_stderr_never_changes_the_code(tmp_path: Path, args: str, code: int) -> None:
    for redirect in ("2>&-", "2>/dev/full"):
        got, said = _shell(f"$HS {args} {redirect} >/dev/null", tmp_path)
        assert got == code, (redirect, said)


def test_full_stdout_is_exit_6_even_after_the_report_was_written(tmp_path: Path) -> None:
    for args in (f"analyze {STALL}", f"report {STALL} -o r.html"):  # "wrote r.html"
        code, said = _shell(f"$HS {args} >/dev/full", tmp_path)
        assert code == 6, said
        assert said.strip().splitlines() == [
            "hangscope: error: stdout: cannot write (No space left on device)"
        ]
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")


def _analyze_json(*args: str, timeout: float = 120) -> tuple[int, dict[str, object], str]:
    got = subprocess.run(
        _hangscope("analyze", *args, "-q", "-f", "json"),
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    doc = json.loads(got.stdout) if got.stdout.strip() else {}
    return got.returncode, doc, got.stderr


def _stall_copy(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(STALL, job)
    (job / "EXPECTED.json").unlink()
    return job


@pytest.mark.parametrize("odd", ["dangling symlink", "FIFO"])
def test_a_rank_file_that_is_no_regular_file_is_skipped_with_its_reason(
    tmp_path: Path, odd: str
) -> None:
    job = _stall_copy(tmp_path)
    (job / "nccl_trace_rank_0").unlink()
    if odd == "FIFO":
        os.mkfifo(job / "nccl_trace_rank_0")
        why = "a FIFO, not a regular file"
    else:
        (job / "nccl_trace_rank_0").symlink_to(tmp_path / "gone")
        why = "a symbolic link to a missing file"
    code, doc, err = _analyze_json(str(job), timeout=60)
    assert doc["unreadable_ranks"] == [0], err
    (skipped,) = doc["skipped_files"]  # type: ignore[misc]
    assert skipped["rank"] == 0 and why in skipped["reason"]
    garbage = _stall_copy(tmp_path / "garbage")
    (garbage / "nccl_trace_rank_0").write_bytes(b"garbage")
    same_code, same, _ = _analyze_json(str(garbage))
    assert code == same_code
    # as any unreadable file of the rank: unknown, blamed only as the evidence allows
    assert doc["culprit_ranks"] == same["culprit_ranks"]
    assert doc["headline"] == same["headline"]


def test_a_dump_swapped_for_a_fifo_after_discovery_never_blocks(tmp_path: Path) -> None:
    """The file is opened with O_NONBLOCK and its type checked on the descriptor."""
    fifo = tmp_path / "nccl_trace_rank_0"
    os.mkfifo(fifo)
    code = (
        "from analyzer.load.unpack import payloads; "
        f"print([getattr(p, 'reason', p) for p in payloads({str(fifo)!r}, lenient=True)])"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert "a FIFO, not a regular file" in got.stdout, got.stderr


@pytest.fixture(scope="module")
def job64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim64") / "job"
    subprocess.run(
        [sys.executable, "-m", "tools.simulate", "-o", str(out), "--tp", "4", "--pp", "4",
         "--dp", "4", "--fault", "stall", "--jobs", "1"],
        cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (out / "EXPECTED.json").unlink()
    return out


def _on_small_disk(
    tmp_path: Path, kb: int, body: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``body`` (sh; ``$D`` a tmpfs of ``kb`` KB) and what is left on the disk after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    got = _in_namespace(
        f"mount -t tmpfs -o size={kb}k tmpfs {disk} && {{ {body.replace('$D', str(disk))}; }}; "
        f"c=$?; echo LEFT; cd {disk} && find . -mindepth 1 | sort; exit $c"
    )
    left = got.stdout.split("LEFT\n", 1)[1].split() if "LEFT\n" in got.stdout else ["?"]
    return got, left


@MOUNTS
def test_a_report_onto_a_full_disk_is_exit_6_and_leaves_no_file(tmp_path: Path) -> None:
    # 512 KB: the report of stall_w4 is 0.76 MB
    got, left = _on_small_disk(tmp_path, 512, f"$HS report {STALL} -q -o $D/report.html")
    assert got.returncode == 6, got.stderr
    assert "No space left on device" in got.stderr and "Traceback" not in got.stderr
    assert left == []


@MOUNTS
def test_an_export_onto_a_full_disk_is_exit_6_and_leaves_nothing(
    tmp_path: Path, job64: Path
) -> None:
    got, left = _on_small_disk(tmp_path, 2048, f"$HS export {job64} -q -o $D/store")
    assert got.returncode == 6, got.stderr
    assert len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert left == []


@MOUNTS
def test_a_re_export_onto_a_full_disk_leaves_the_old_store_whole(
    tmp_path: Path, job64: Path
) -> None:
    got, left = _on_small_disk(
        tmp_path,
        4096,
        f"$HS export {STALL} -q -o $D/store >/dev/null && head -c 3500k /dev/zero > $D/fill; "
        f"$HS export {job64} -q -o $D/store; c=$?; rm $D/fill; "
        "$HS analyze $D/store -q -f json > $D/after.json; echo after=$?; cat $D/after.json; "
        "rm $D/after.json; (exit $c)",
    )
    assert got.returncode == 6, got.stderr
    assert "after=1" in got.stdout
    doc = json.loads(got.stdout.split("after=1\n", 1)[1].split("LEFT\n")[0])
    assert doc["world_size"] == 4  # the old store, stall_w4's
    assert sorted(n for n in left if n.count("/") == 1) == ["./store"]


def test_concurrent_exports_leave_the_store_of_the_last_one(tmp_path: Path, job64: Path) -> None:
    out = tmp_path / "store"
    procs = [
        subprocess.Popen(
            _hangscope("export", str(job), "-q", "--force", "-o", str(out)),
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for job in (job64, STALL)
    ]
    ended: list[int] = []
    while len(ended) < 2:
        ended += [i for i, p in enumerate(procs) if p.poll() is not None and i not in ended]
        time.sleep(0.005)
    assert [p.wait() for p in procs] == [0, 0]
    code, doc, err = _analyze_json(str(out))
    assert code == 1, err
    assert doc["world_size"] == (64, 4)[ended[-1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no build folder left


def test_export_into_its_own_input_is_refused(tmp_path: Path) -> None:
    job = _stall_copy(tmp_path)
    for out in (job, tmp_path):
        got = subprocess.run(
            _hangscope("export", str(job), "-q", "-o", str(out)),
            cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert got.returncode in (2, 6), got.stderr  # an input, or a folder of other files
        assert "write the store to another folder" in got.stderr or "other files" in got.stderr
    assert sorted(p.name for p in job.iterdir()) == [f"nccl_trace_rank_{r}" for r in range(4)]


def test_an_export_over_a_folder_of_other_files_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    got = subprocess.run(
        _hangscope("export", str(STALL), "-q", "-o", str(out)),
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode == 6 and "is no hangscope store" in got.stderr, got.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def _export(src: Path, out: Path) -> Path:
    subprocess.run(
        _hangscope("export", str(src), "-q", "-o", str(out)),
        cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def _marker(store: Path, **change: object) -> None:
    path = store / "hangscope-store.json"
    meta = json.loads(path.read_text())
    for key, value in change.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "change",
    [
        {"format": "hangscope.store/1", "world_size": 10**12},
        {"world_size": 10**12},
        {"world_option": 10**12},
        {"world_size": "4"},
    ],
)
def test_a_marker_claiming_an_impossible_world_is_refused(tmp_path: Path, change: dict) -> None:
    store = _export(STALL, tmp_path / "store")
    _marker(store, **change)
    code, _, err = _analyze_json(str(store), timeout=60)
    assert code == 2, err
    assert "no job has that many ranks" in err and len(err.strip().splitlines()) == 1


def test_a_part_copied_from_another_store_is_refused(tmp_path: Path, job64: Path) -> None:
    store = _export(STALL, tmp_path / "store")
    other = _export(job64, tmp_path / "other")
    shutil.copy(other / "members.json", store / "members.json")
    code, _, err = _analyze_json(str(store))
    assert code == 2, err
    assert "members.json: not the file written with this store" in err


def test_a_store_without_digests_is_still_checked_field_by_field(tmp_path: Path) -> None:
    """Stores written before the digests: their fields are checked as a dump's are."""
    store = _export(STALL, tmp_path / "store")
    _marker(store, digests=None)
    members = json.loads((store / "members.json").read_text())
    members["members"][0][-1] = 10**12
    (store / "members.json").write_text(json.dumps(members))
    code, _, err = _analyze_json(str(store))
    assert code == 2 and "beyond any job's" in err, err
    store = _export(STALL, tmp_path / "store2")
    _marker(store, digests=None)
    inputs = json.loads((store / "inputs.json").read_text())
    inputs["skipped"] = [["nccl_trace_rank_x", 10**12, "cannot read"]]
    (store / "inputs.json").write_text(json.dumps(inputs))
    code, _, err = _analyze_json(str(store))
    assert code == 2 and "beyond any job's" in err, err


def test_a_store_beside_dumps_says_the_dumps_are_not_read(tmp_path: Path) -> None:
    store = _export(STALL, tmp_path / "store")
    shutil.copy(HEALTHY / "nccl_trace_rank_0", store / "nccl_trace_rank_0")
    code, _, err = _analyze_json(str(store))
    assert code == 1, err
    assert "hangscope: warning:" in err and "nccl_trace_rank_0" in err
    assert "those files are not read" in err


def test_a_folder_deeper_than_path_max_is_listed_and_the_analysis_goes_on(
    tmp_path: Path,
) -> None:
    job = _stall_copy(tmp_path)
    fd = os.open(job, os.O_RDONLY)
    try:
        for _ in range(25):  # 25 x 200 characters: beyond PATH_MAX (4,096)
            os.mkdir("d" * 200, dir_fd=fd)
            deeper = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
    finally:
        os.close(fd)
    code, doc, err = _analyze_json(str(job))
    assert code == 1, err
    (folder,) = doc["unreadable_folders"]  # type: ignore[misc]
    assert "File name too long" in str(folder)
    assert doc["dumped_ranks"] == 4


def test_many_files_named_like_dumps_are_not_ranks_and_cost_little(tmp_path: Path) -> None:
    """20,000 one-byte files named nccl_trace_rank_8... (bench/hostile_processes.py runs
    100,000): skipped as no dumps, never ranks; time and memory grow with the files only."""
    job = _stall_copy(tmp_path)
    for i in range(20_000):
        (job / f"nccl_trace_rank_{8 + i}").write_bytes(b"x")
    start = time.monotonic()
    code, doc, err = _analyze_json(str(job), timeout=300)
    assert code == 1, err
    assert time.monotonic() - start < 120
    assert doc["world_size"] == 4 and doc["unreadable_ranks"] == [] and doc["culprit_ranks"]
    assert len(doc["skipped_files"]) == 20_000  # type: ignore[arg-type]


def test_sigterm_mid_export_leaves_no_store_and_no_build_folder(
    tmp_path: Path, job256: Path
) -> None:
    out = tmp_path / "store"
    proc = subprocess.Popen(
        _hangscope("export", str(job256), "-j", "2", "-q", "-o", str(out)),
        cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_children(proc.pid)) < 2 and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(0.3)
    if proc.poll() is not None:
        pytest.skip("the export ended before it could be interrupted")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert list(tmp_path.iterdir()) == []
