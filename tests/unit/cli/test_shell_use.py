"""The command line in scripts and shells: ``-q`` prints nothing but errors, and the shell
completion scripts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli.commands import app
from tests.conftest import ROOT, SAMPLES

runner = CliRunner()
STALL = str(SAMPLES / "stall_w4")


def test_quiet_writers_print_nothing(tmp_path: Path) -> None:
    """``-q``: report, export, graph and entries with ``-o`` say nothing on either stream;
    without it, report and export say what they wrote."""
    page, svg = str(tmp_path / "r.html"), str(tmp_path / "t.svg")
    cases = {
        "report": ["report", STALL, "-o", page, "--png", svg],
        "export": ["export", STALL, "-o", str(tmp_path / "store")],
        "graph": ["graph", STALL, "-f", "dot", "-o", str(tmp_path / "w.dot")],
        "entries": ["entries", STALL, "-f", "csv", "-o", str(tmp_path / "e.csv")],
    }
    for name, args in cases.items():
        res = runner.invoke(app, [*args, "-q", "-j", "1"])
        assert res.exit_code == 0, (name, res.output)
        assert (res.stdout, res.stderr) == ("", ""), name
    for name in ("r.html", "t.svg", "w.dot", "e.csv", "store/hangscope-store.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    said = runner.invoke(app, [*cases["report"], "-j", "1"])
    assert said.stdout.startswith(f"wrote {tmp_path / 'r.html'}\n"), said.stdout
    assert "HANG" in said.stdout
    again = runner.invoke(app, ["export", STALL, "-o", str(tmp_path / "store2"), "-j", "1"])
    assert again.stdout.startswith(f"wrote {tmp_path / 'store2'}"), again.stdout


def test_quiet_report_with_a_bad_output_still_says_why(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    res = runner.invoke(app, ["report", STALL, "-q", "-o", str(tmp_path / "f" / "r.html")])
    assert res.exit_code == 6
    assert res.stdout == "" and "hangscope: error: -o" in res.stderr


def test_completion_scripts_name_hangscope() -> None:
    for shell in ("bash", "zsh", "fish", "powershell"):
        res = runner.invoke(app, ["completion", shell])
        assert res.exit_code == 0, (shell, res.output)
        assert "hangscope" in res.stdout and "_HANGSCOPE_COMPLETE" in res.stdout, shell
    bash = runner.invoke(app, ["completion", "bash"]).stdout
    assert "complete -o default -F _hangscope_completion hangscope" in bash
    res = runner.invoke(app, ["completion", "tcsh"])
    assert res.exit_code == 2 and res.stderr.startswith("hangscope: error:")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_and_choices(tmp_path: Path) -> None:
    """The script, sourced by a real bash, completes commands and option values through a
    ``hangscope`` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "hangscope"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m analyzer "$@"\n')
    wrapper.chmod(0o755)
    script = (
        "source <(hangscope completion bash)\n"
        'ask() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=();\n'
        '  _hangscope_completion hangscope; echo "${COMPREPLY[*]}"; }\n'
        "ask hangscope an\n"
        "ask hangscope report x --plotlyjs ''\n"
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    got = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["analyze", "inline cdn"], got
