"""Progress on stderr while reading dumps: on a terminal only, never with --quiet."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli.progress import ProgressPrinter

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "sample_dumps" / "chain_tp_dp_w8"
pty = pytest.importorskip("pty")


def _stderr(args: list[str], *, terminal: bool, env: dict[str, str] | None = None) -> str:
    cmd = [sys.executable, "-m", "analyzer", "analyze", str(JOB), *args]
    env = {**os.environ, **(env or {})}
    if not terminal:
        return subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env
        ).stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=120)
    os.close(master)
    return out.decode(errors="replace")


def test_progress_on_a_terminal_shows_reading_then_the_phases_and_is_erased() -> None:
    text = _stderr([], terminal=True, env={"HANGSCOPE_PROGRESS_AFTER": "0"})
    # 9 files: every file is looked at (the sample's EXPECTED.json too, then ignored).
    assert re.search(r"reading dumps: 9/9 files, [\d,]+ entries, [\d,]+ entries/s", text), text
    assert re.search(r"analyzing [\d,]+ entries of 9 files… \d+ s", text), text
    assert "\r\x1b[K" in text and text.endswith("\r\x1b[K")  # each line cleared; erased at the end
    assert "\n" not in text


def test_a_run_under_a_second_shows_nothing() -> None:
    assert _stderr([], terminal=True, env={"HANGSCOPE_PROGRESS_AFTER": "60"}) == ""


def test_quiet_or_no_terminal_means_no_progress() -> None:
    zero = {"HANGSCOPE_PROGRESS_AFTER": "0"}
    assert "reading dumps" not in _stderr(["-q"], terminal=True, env=zero)
    assert "reading dumps" not in _stderr([], terminal=False, env=zero)


def test_printer_throttles_clears_and_erases(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    printer = ProgressPrinter(True)
    printer.start -= 5.0  # as if reading for 5 s
    printer(1, 4, 2_000)
    printer(2, 4, 4_000)  # within 0.25 s of the last line: skipped
    printer(4, 4, 8_000)  # the last file always prints, then the next phase
    printer.erase()
    err = capsys.readouterr().err
    assert err.count("reading dumps:") == 2
    assert "\r\x1b[Kreading dumps: 4/4 files, 8,000 entries" in err
    assert "\r\x1b[Kanalyzing 8,000 entries of 4 files… 5 s" in err
    assert err.endswith("\r\x1b[K") and "\n" not in err
    assert ProgressPrinter(False).enabled is False
