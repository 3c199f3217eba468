"""What an on-call engineer meets through the command: the ticket summary (``--format
markdown``), exit codes that compose, outputs checked before the work."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from analyzer.cli.commands import app
from tests.conftest import SAMPLES, entry

runner = CliRunner()


def _stall_job(make_job: Callable[..., Path]) -> Path:
    job = {r: [entry(1, state="completed", retired=True), entry(2)] for r in (0, 2, 3)}
    job[1] = [entry(1, state="completed", retired=True)]
    return make_job(job)


# --- the ticket summary ---------------------------------------------------------------------------


def test_markdown_summary_has_what_a_ticket_needs() -> None:
    src = str(SAMPLES / "chain_tp_dp_w8")
    res = runner.invoke(app, ["analyze", src, "-q", "-f", "markdown"])
    assert res.exit_code == 1, res.stdout
    md = res.stdout
    assert md.startswith("### HANG: culprit rank 3 (a rank stalled outside communication)\n")
    assert "- **Culprit:** rank 3 — **certain**: its own dump shows it never enqueued" in md
    assert "- **Kind:** a rank stalled outside communication (`not_joined`)" in md
    assert "- **Why:** rank 3 never enqueued all_reduce" in md
    assert "- **Chain to rank 3:** `rank 0 → 2 → 3`" in md
    assert re.search(r"- \*\*Read:\*\* 8 of 8 ranks; 53 entries \(gloo\); missing: none", md)
    assert f"input `{src}`" in md and "hangscope 0.1.0" in md
    # The culprit's own last op and stack, and the awaited op labelled with who issued it.
    assert "**Rank 3 last issued all_reduce DATA_PARALLEL_GROUP seq 2** at:" in md
    assert "record_gloo.py:216 in _chain_tp_dp_w8" in md
    assert "as issued by rank 2** at:" in md
    assert md.count("```") % 2 == 0


def test_markdown_escapes_dump_text(make_job: Callable[..., Path]) -> None:
    pg = ("0", "*evil*<b>[x](y)")
    job = {
        r: [entry(1, state="completed", retired=True, pg=pg), entry(2, pg=pg)] for r in (0, 2, 3)
    }
    job[1] = [entry(1, state="completed", retired=True, pg=pg)]
    res = runner.invoke(app, ["analyze", str(make_job(job)), "-q", "-f", "markdown"])
    assert res.exit_code == 1, res.stdout
    assert "*evil*" not in res.stdout.replace("\\*evil\\*", "")
    assert "<b>" not in res.stdout and "\\<b\\>" in res.stdout


def test_report_carries_the_markdown_block(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    res = runner.invoke(
        app,
        ["report", str(SAMPLES / "stall_w4"), "-q", "--plotlyjs", "cdn", "-o", str(page)],
    )
    html = page.read_text(encoding="utf-8")
    assert res.exit_code in (0, 1)
    assert "id='ticket-md'" in html and "### HANG: culprit rank 1" in html


# --- exit codes that compose ----------------------------------------------------------------------


def test_analyze_exit_code_is_the_verdict() -> None:
    for sample, code in (("stall_w4", 1), ("healthy_w4", 0), ("p2p_unrecorded_w2", 5)):
        res = runner.invoke(app, ["analyze", str(SAMPLES / sample), "-q", "-j", "1"])
        assert res.exit_code == code, (sample, res.stdout)
    res = runner.invoke(app, ["analyze", str(SAMPLES / "p2p_unrecorded_w2"), "-q", "-j", "1"])
    assert res.stdout.startswith("INCONCLUSIVE")


def test_writing_commands_exit_0_once_written(tmp_path: Path) -> None:
    stall = str(SAMPLES / "stall_w4")
    dot = tmp_path / "w.dot"
    assert runner.invoke(app, ["graph", stall, "-q", "-f", "dot", "-o", str(dot)]).exit_code == 0
    assert dot.read_text().startswith("digraph")
    assert runner.invoke(app, ["entries", stall, "-q", "-n", "1"]).exit_code == 0
    assert runner.invoke(app, ["export", stall, "-q", "-o", str(tmp_path / "s")]).exit_code == 0
    page = tmp_path / "r.html"
    args = ["report", stall, "-q", "--plotlyjs", "cdn", "-o", str(page)]
    assert runner.invoke(app, args).exit_code == 0 and page.exists()
    # --exit-code: the verdict's code, as analyze gives it
    assert runner.invoke(app, [*args, "--exit-code"]).exit_code == 1
    inconclusive = str(SAMPLES / "p2p_unrecorded_w2")
    args = ["report", inconclusive, "-q", "--plotlyjs", "cdn", "-o", str(page), "--exit-code"]
    assert runner.invoke(app, args).exit_code == 5


# --- outputs are checked before the work ----------------------------------------------------------

SLOW_ARGS = {
    "analyze": ["analyze", "-f", "json"],
    "graph": ["graph", "-f", "dot"],
    "report": ["report", "--plotlyjs", "cdn"],
}


def test_a_missing_output_folder_is_created_by_every_command(tmp_path: Path) -> None:
    stall = str(SAMPLES / "stall_w4")
    for name, args in SLOW_ARGS.items():
        out = tmp_path / "new" / name / "out.x"
        res = runner.invoke(app, [args[0], stall, *args[1:], "-q", "-o", str(out)])
        assert res.exit_code in (0, 1), (name, res.stderr)
        assert out.is_file(), name
    store = tmp_path / "new" / "deeper" / "store"
    assert runner.invoke(app, ["export", stall, "-q", "-o", str(store)]).exit_code == 0


def test_a_bad_output_is_refused_before_any_dump_is_read(tmp_path: Path) -> None:
    """Given an input that does not exist, the output is what is reported: it is checked
    first."""
    (tmp_path / "afile").write_text("x")
    nowhere = str(tmp_path / "no-such-dumps")
    for name, args in SLOW_ARGS.items():
        for out, says in (
            (tmp_path / "afile" / "out.x", "is a file, not a folder"),
            (tmp_path, "is a folder; give a file name"),
        ):
            res = runner.invoke(app, [args[0], nowhere, *args[1:], "-q", "-o", str(out)])
            assert res.exit_code == 6, (name, out, res.stderr)
            assert res.stderr.startswith("hangscope: error: -o ") and says in res.stderr
            assert len(res.stderr.splitlines()) == 1
    res = runner.invoke(app, ["export", nowhere, "-q", "-o", str(tmp_path / "afile")])
    assert res.exit_code == 6 and "is a file" in res.stderr
    png = ["report", nowhere, "-q", "-o", str(tmp_path / "r.html"), "--png", str(tmp_path)]
    res = runner.invoke(app, png)
    assert res.exit_code == 6 and res.stderr.startswith("hangscope: error: --png ")


def test_an_unwritable_output_folder_is_refused(tmp_path: Path) -> None:
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere
            return
        res = runner.invoke(
            app, ["analyze", str(tmp_path / "none"), "-o", str(locked / "a.txt"), "-q"]
        )
        assert res.exit_code == 6 and "not writable" in res.stderr
    finally:
        locked.chmod(0o700)


def test_export_refuses_a_folder_that_is_not_its_store(tmp_path: Path) -> None:
    stall, chain = str(SAMPLES / "stall_w4"), str(SAMPLES / "chain_tp_dp_w8")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["export", stall, "-q", "-o", str(notes)])
    assert res.exit_code == 6 and "no hangscope store" in res.stderr
    assert sorted(p.name for p in notes.iterdir()) == ["notes.txt"]
    # The dump folder itself is such a folder.
    res = runner.invoke(app, ["export", stall, "-q", "-o", stall])
    assert res.exit_code == 6
    # A store of the same job is rewritten; of another job, refused, and left as it was.
    store = tmp_path / "store"
    assert runner.invoke(app, ["export", chain, "-q", "-o", str(store)]).exit_code == 0
    assert runner.invoke(app, ["export", chain, "-q", "-o", str(store)]).exit_code == 0
    before = sorted(p.name for p in store.iterdir())
    res = runner.invoke(app, ["export", stall, "-q", "-o", str(store)])
    assert res.exit_code == 6 and "store of another job" in res.stderr
    assert sorted(p.name for p in store.iterdir()) == before
    assert '"world_size": 8' in (store / "hangscope-store.json").read_text()
    # --force replaces a store of another job; a folder of other files is never written into.
    assert runner.invoke(app, ["export", stall, "-q", "-o", str(store), "--force"]).exit_code == 0
    assert '"world_size": 4' in (store / "hangscope-store.json").read_text()
    res = runner.invoke(app, ["export", stall, "-q", "-o", str(notes), "--force"])
    assert res.exit_code == 6 and sorted(p.name for p in notes.iterdir()) == ["notes.txt"]


# --- whose stack it is ----------------------------------------------------------------------------


def test_stacks_say_whose_they_are() -> None:
    res = runner.invoke(app, ["analyze", str(SAMPLES / "chain_tp_dp_w8"), "-q", "-j", "1"])
    text = res.stdout
    assert "  issued at:" not in text
    awaited = text.index(
        "  awaited op (all_reduce TENSOR_MODEL_PARALLEL_GROUP seq 3), as issued by rank 2 at:"
    )
    own = text.index("  rank 3 last issued all_reduce DATA_PARALLEL_GROUP seq 2 at:")
    assert awaited < own
    assert "record_gloo.py:215 in _chain_tp_dp_w8" in text[awaited:own]
    assert "record_gloo.py:216 in _chain_tp_dp_w8" in text[own:]


def test_a_deadlock_names_both_sides_and_their_stacks() -> None:
    res = runner.invoke(app, ["analyze", str(SAMPLES / "deadlock_w4"), "-q", "-j", "1"])
    text = res.stdout
    a = text.index(
        "  ranks 0-2 blocked in all_reduce default_pg seq 7 (waiting on rank 3), issued at:"
    )
    b = text.index(
        "  rank 3 blocked in all_reduce group_b seq 2 (waiting on ranks 0-2), issued at:"
    )
    assert "record_gloo.py:243" in text[a:b] and "record_gloo.py:240" in text[b:]


def test_the_graph_cycle_line_shows_only_waits_that_exist() -> None:
    res = runner.invoke(app, ["graph", str(SAMPLES / "deadlock_w4"), "-q", "-j", "1"])
    assert res.stdout.splitlines()[-1] == "cycle: 0, 1, 2 -> 3; 3 -> 0, 1, 2"


# --- the answer stays on one screen at scale ------------------------------------------------------


def test_a_stuck_tensor_parallel_group_at_scale_fits_one_screen(tmp_path: Path) -> None:
    """Eight culprits, eight chains of the same path: one folded arrow line with its detail,
    one stack for the eight (2,048 ranks print 25 lines the same way)."""
    from tools.simulate import simulate_job

    job = simulate_job(
        tmp_path / "job", tp=8, pp=4, dp=4, fault="gpu_stuck", seed=3, buffer_size=200
    )
    res = runner.invoke(app, ["analyze", str(tmp_path / "job"), "-q", "-j", "1"])
    lines = res.stdout.splitlines()
    assert res.exit_code == 1 and len(lines) < 30, res.stdout
    assert job["culprits"] == list(range(112, 120))
    folded = [x for x in lines if x.startswith("  chains to ranks 112-119: ranks ")]
    assert folded and folded[0].endswith("→ 112-119")
    assert not [x for x in lines if x.startswith("  chain to rank ")]
    assert (
        "  ranks 112-119 issued _all_gather_base TENSOR_MODEL_PARALLEL_GROUP seq 176 at:" in lines
    )
    md = runner.invoke(app, ["analyze", str(tmp_path / "job"), "-q", "-j", "1", "-f", "markdown"])
    assert md.stdout.count("**Chains to ranks 112-119:**") == 1


def test_findings_that_repeat_per_rank_fold() -> None:
    res = runner.invoke(app, ["analyze", str(SAMPLES / "nccl2_size_desync_w4"), "-q", "-j", "1"])
    text = res.stdout
    assert "  - [not_joined] ranks 1-3, each alike; shown for rank 1: rank 1 never" in text
    assert text.count("[not_joined]") == 1


# --- entries at scale -----------------------------------------------------------------------------


def test_entries_jsonl_has_real_arrays_and_times_relative_to_the_hang(tmp_path: Path) -> None:
    import json

    out = tmp_path / "sub" / "e.jsonl"
    args = ["entries", str(SAMPLES / "stall_w4"), "-q", "-j", "1", "-f", "jsonl", "-o", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and not res.stdout
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 27
    reduce = next(r for r in rows if r["profiling_name"] == "gloo:all_reduce")
    assert reduce["input_sizes"] == [[8]] and reduce["input_dtypes"] == ["Float"]
    assert all(r["t_s"] <= 0 for r in rows) and max(r["t_s"] for r in rows) == 0
    assert not list(out.parent.glob(".e.jsonl.*"))  # no temporary file left


def test_entries_text_streams_in_blocks(make_job: Callable[..., Path]) -> None:
    from analyzer import analyze
    from analyzer.render import entry_rows

    job = {r: [entry(s, state="completed", retired=True) for s in range(1, 2500)] for r in range(2)}
    a = analyze(make_job(job), jobs=1)
    blocks = entry_rows(a.tables, a.tables.entries, "text")
    header_and_first = next(blocks)
    assert header_and_first.startswith("rank  record_id")  # made before the rest is rendered
    rest = "".join(blocks)
    assert len((header_and_first + rest).splitlines()) == 1 + 2 * 2499


def test_entries_unknown_group_or_rank_lists_those_that_exist() -> None:
    stall = str(SAMPLES / "stall_w4")
    res = runner.invoke(app, ["entries", stall, "-q", "-j", "1", "-g", "nosuchgroup"])
    assert res.exit_code == 2
    assert res.stderr == "hangscope: error: no group 'nosuchgroup'; groups: default_pg (0)\n"
    res = runner.invoke(app, ["entries", stall, "-q", "-j", "1", "-r", "99"])
    assert res.exit_code == 2 and res.stderr.endswith("no dump of rank 99; ranks: 0-3\n")


# --- terminal conventions -------------------------------------------------------------------------


def test_short_help_and_version() -> None:
    assert runner.invoke(app, ["-h"]).exit_code == 0
    res = runner.invoke(app, ["analyze", "-h"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "Usage: hangscope analyze [OPTIONS] PATH..." in res.stdout
    for typename in ("<bool>", "<int>", "<str>", "<path>", "list[str]", "{paths}"):
        assert typename not in res.stdout, typename
    assert " N " in res.stdout and " FILE " in res.stdout
    res = runner.invoke(app, ["-V"])
    assert res.exit_code == 0 and res.stdout.startswith("hangscope ")


def test_usage_errors_are_one_line_in_the_tool_style() -> None:
    res = runner.invoke(app, ["analyze", "x", "-f", "xml"])
    assert res.exit_code == 2
    assert res.stderr.startswith("hangscope: error: Invalid value for '--format'")
    assert "Value error" not in res.stderr and len(res.stderr.splitlines()) == 1
    res = runner.invoke(app, ["anlyze"])
    assert res.exit_code == 2 and "Did you mean 'analyze'?" in res.stderr
    assert len(res.stderr.splitlines()) == 1


def test_debug_after_the_command() -> None:
    from analyzer.cli.options import DEBUG

    before = DEBUG["on"]
    try:
        res = runner.invoke(app, ["analyze", "/no/such/dumps", "--debug"])
        assert res.exit_code == 2 and "no such file or directory" in res.stderr
        assert DEBUG["on"]
    finally:
        DEBUG["on"] = before


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """The command's stdout when stdout is a terminal (a pseudo-terminal)."""
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import ROOT

    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "analyzer", *args],
        stdout=sub,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "80", **env},
    )
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=120)
    os.close(main)
    return out.decode("utf-8", "replace")


def test_colour_on_a_terminal_only_and_never_with_no_color() -> None:
    import os

    args = ["analyze", str(SAMPLES / "stall_w4"), "-q", "-j", "1"]
    env = {k: "" for k in ("NO_COLOR",)}
    shown = _on_a_terminal(args, {**env, "TERM": "xterm"})
    assert "\x1b[1;31mHANG\x1b[0m\x1b[1m: culprit rank 1\x1b[0m" in shown
    assert max(len(x) for x in shown.splitlines()) <= 80  # wrapped to the terminal
    assert "\x1b[" not in _on_a_terminal(args, {"NO_COLOR": "1", "TERM": "xterm"})
    piped = runner.invoke(app, args, env={"TERM": "xterm", "NO_COLOR": ""})
    assert "\x1b[" not in piped.stdout
    assert os.environ.get("NO_COLOR", "") == os.environ.get("NO_COLOR", "")


# --- a pip user can start -------------------------------------------------------------------------


def test_demo_analyzes_a_bundled_sample() -> None:
    res = runner.invoke(app, ["demo"])
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("$ hangscope analyze ") and lines[0].endswith("chain_tp_dp_w8")
    assert lines[1].startswith("HANG: culprit rank 3")
    assert "next: hangscope report " in res.stdout
    listed = runner.invoke(app, ["demo", "--list"]).stdout
    assert "deadlock_w4" in listed
    res = runner.invoke(app, ["demo", "nosuch"])
    assert res.exit_code == 2 and "no sample 'nosuch'; samples: " in res.stderr


def test_the_wheel_carries_the_demo_samples_and_an_spdx_license() -> None:
    import ast
    import tomllib

    from tests.conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    (requires,) = project["build-system"]["requires"]
    assert ">=77" in requires and "<" in requires  # PEP 639 and bounded
    setup = (ROOT / "setup.py").read_text()
    samples = next(
        ast.literal_eval(n.value)
        for n in ast.walk(ast.parse(setup))
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DEMO_SAMPLES"
    )
    manifest = (ROOT / "MANIFEST.in").read_text()
    for name in samples:
        assert (SAMPLES / name).is_dir() and f"sample_dumps/{name} *" in manifest, name


def test_notebooks_use_only_the_public_api() -> None:
    import json

    from tests.conftest import ROOT

    for path in sorted((ROOT / "dashboards").glob("*.ipynb")):
        code = "\n".join(
            "".join(c["source"])
            for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"
        )
        assert "analyzer." not in code.replace("analyzer.analyze", "").replace(
            "analyzer.AnalyzerError", ""
        ).replace("analyzer.capture", ""), path.name
        assert "mkdtemp" not in code, path.name
