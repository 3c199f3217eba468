"""Files the CLI writes are UTF-8 whatever the locale; an ASCII terminal gets escapes.

Python turns on its UTF-8 mode by itself under the C locale (PEP 540); ``PYTHONUTF8=0`` is
how an environment turns it off, and then the locale's encoding (ASCII) is every default.
Both are run, through the real command in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, dump, entry, write_pickle

DESC = "grüne→gruppe"
LOCALES = {
    "C, UTF-8 mode off": {"LC_ALL": "C", "PYTHONUTF8": "0"},
    "C": {"LC_ALL": "C"},
}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks of a group whose desc is not ASCII; rank 1 never enqueued seq 1."""
    out = tmp_path_factory.mktemp("enc") / "job"
    out.mkdir()
    for rank, n in ((0, 3), (1, 1)):
        entries = [
            entry(s, pg=("0", DESC), record_id=s, state="completed" if s < 1 else "scheduled")
            for s in range(n)
        ]
        d = dump(entries, world=2)
        d["pg_config"]["0"]["desc"] = DESC
        write_pickle(out / f"nccl_trace_rank_{rank}", d)
    return out


def _run(args: list[str], cwd: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LC_")
        and k not in ("LANG", "LANGUAGE", "PYTHONIOENCODING", "PYTHONUTF8")
    }
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "analyzer", *args, "-q", "-j", "1"],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("locale", list(LOCALES))
def test_files_are_written_in_utf8_under_the_c_locale(
    job: Path, tmp_path: Path, locale: str
) -> None:
    env = LOCALES[locale]
    outputs = {
        "report": (["report", str(job), "--plotlyjs", "cdn", "-o", "r.html"], "r.html"),
        "analyze": (["analyze", str(job), "-o", "a.txt"], "a.txt"),
        "graph": (["graph", str(job), "-f", "dot", "-o", "g.dot"], "g.dot"),
        "graph text": (["graph", str(job), "-o", "g.txt"], "g.txt"),
    }
    for what, (args, name) in outputs.items():
        proc = _run(args, tmp_path, env)
        # Only analyze exits with the verdict: 1, or 5 (rank 1 of a group of two is a suspect).
        wrote = (1,) if what == "analyze" else (0,)
        assert proc.returncode in wrote, (what, proc.stderr.decode(errors="replace"))
        assert b"Traceback" not in proc.stderr and b"error" not in proc.stderr, (what, proc.stderr)
        text = (tmp_path / name).read_bytes().decode("utf-8")
        assert DESC in text, what
    assert "<meta charset='utf-8'>" in (tmp_path / "r.html").read_text(encoding="utf-8")
    # The file holds what the command prints where the terminal can show it.
    shown = _run(["analyze", str(job)], tmp_path, {"LC_ALL": "C.UTF-8"})
    assert shown.stdout.decode("utf-8") == (tmp_path / "a.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("locale", list(LOCALES))
def test_export_and_reopen_under_the_c_locale(job: Path, tmp_path: Path, locale: str) -> None:
    env = LOCALES[locale]
    proc = _run(["export", str(job), "-o", "store"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    again = _run(["analyze", "store", "-o", "a.txt"], tmp_path, env)
    assert again.returncode in (1, 5), again.stderr.decode(errors="replace")
    assert DESC in (tmp_path / "a.txt").read_text(encoding="utf-8")


def test_an_ascii_terminal_gets_escapes_not_a_traceback(job: Path, tmp_path: Path) -> None:
    proc = _run(["analyze", str(job)], tmp_path, LOCALES["C, UTF-8 mode off"])
    assert proc.returncode in (1, 5) and not proc.stderr, proc.stderr.decode(errors="replace")
    out = proc.stdout.decode("ascii")
    assert "gr\\xfcne\\u2192gruppe" in out
    assert out.startswith(("HANG: culprit rank", "INCONCLUSIVE: suspect rank"))


def test_sample_report_under_the_c_locale(tmp_path: Path) -> None:
    """A recorded sample: the report holds non-ASCII characters of its own (arrows, dots)."""
    proc = _run(
        [
            "report",
            str(ROOT / "sample_dumps" / "chain_tp_dp_w8"),
            "--plotlyjs",
            "cdn",
            "-o",
            "r.html",
        ],
        tmp_path,
        LOCALES["C, UTF-8 mode off"],
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr.decode(errors="replace")
    page = (tmp_path / "r.html").read_bytes().decode("utf-8")
    assert "→" in page and "HANG: culprit rank 3" in page
