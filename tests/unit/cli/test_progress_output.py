"""Progress on stderr while reading dumps: on a terminal only, never with --quiet."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.cli.exits import ProgressPrinter

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "sample_dumps" / "chain_tp_dp_w8"
pty = pytest.importorskip("pty")


def _stderr(args: list[str], *, terminal: bool) -> str:
    cmd = [sys.executable, "-m", "analyzer", "analyze", str(JOB), *args]
    if not terminal:
        return subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        ).stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave)
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


def test_progress_on_a_terminal_shows_files_entries_and_rate() -> None:
    text = _stderr([], terminal=True)
    # 9 files: every file is looked at (the sample's EXPECTED.json too, then ignored).
    assert re.search(r"reading dumps: 9/9 files, [\d,]+ entries, [\d,]+ entries/s", text), text


def test_quiet_or_no_terminal_means_no_progress() -> None:
    assert "reading dumps" not in _stderr(["-q"], terminal=True)
    assert "reading dumps" not in _stderr([], terminal=False)


def test_printer_throttles_and_ends_the_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    printer = ProgressPrinter(True)
    printer.start -= 5.0  # as if reading for 5 s
    printer(1, 4, 2_000)
    printer(2, 4, 4_000)  # within 0.25 s of the last line: skipped
    printer(4, 4, 8_000)  # the last file always prints, then a newline
    err = capsys.readouterr().err
    assert err.count("reading dumps:") == 2
    assert "4/4 files, 8,000 entries" in err and err.endswith("\n")
    assert ProgressPrinter(False).enabled is False
