"""Golden outputs: what users see, pinned.

For every sample in ``sample_dumps/`` and every fixture dump set in ``../shared/fixtures/``,
``tests/golden/`` holds the output of

* ``hangscope analyze DIR -q -j 1`` (text) with its exit code as a last line ``exit N``
  (``NAME.txt``),
* ``hangscope analyze DIR -q -j 1 -f json`` (``NAME.json``),
* ``hangscope graph DIR -q -j 1`` (``NAME.graph.txt``),
* ``hangscope analyze DIR -q -j 1 -f markdown`` (``NAME.md``, the ticket summary),

run through the CLI in-process, from the repository root with the directory given relative to
it (so file paths in the outputs are relative and no machine path gets in). NAME is the
sample's directory name, or ``fixture_<set>__<dump set>`` for a shared fixture.

``make golden`` (``python -m tests.scenarios.test_golden``) rewrites them; a difference here means a
change of what users see: review it, then run ``make golden`` and say so in the commit.

The HTML report's verdict banner (verdict, culprits, kind, headline, wait chains, missing
dumps, deadlock cycles) is checked against the text output of the same sample.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli.commands import app
from tests.conftest import FIXTURES, ROOT, SAMPLES

GOLDEN = ROOT / "tests" / "golden"
REWRITE_HINT = "run make golden after a reviewed change"
#: The three outputs of each dump set: file suffix -> CLI arguments after the directory.
OUTPUTS = {
    ".txt": ["analyze", "-q"],
    ".json": ["analyze", "-q", "-f", "json"],
    ".graph.txt": ["graph", "-q"],
    ".md": ["analyze", "-q", "-f", "markdown"],
}


@dataclass(frozen=True)
class DumpSet:
    name: str
    """File-name stem under tests/golden/."""
    rel: str
    """The directory relative to the repository root, as passed to the CLI."""

    @property
    def path(self) -> Path:
        return ROOT / self.rel


def sample_sets() -> list[DumpSet]:
    return [
        DumpSet(d.name, f"sample_dumps/{d.name}")
        for d in sorted(SAMPLES.iterdir())
        if d.is_dir() and any(d.iterdir())
    ]


def fixture_sets() -> list[DumpSet]:
    """The fixture dump sets present, and those a golden file exists for (skipped when absent)."""
    found = {}
    if FIXTURES.is_dir():
        for d in sorted(FIXTURES.glob("*/*")):
            if d.is_dir() and any(d.iterdir()):
                name = f"fixture_{d.parent.name}__{d.name}"
                found[name] = DumpSet(name, f"../shared/fixtures/{d.parent.name}/{d.name}")
    for golden in GOLDEN.glob("fixture_*.txt"):
        name = golden.name.removesuffix(".graph.txt").removesuffix(".txt")
        set_name, _, dump_set = name.removeprefix("fixture_").partition("__")
        found.setdefault(name, DumpSet(name, f"../shared/fixtures/{set_name}/{dump_set}"))
    return [found[k] for k in sorted(found)]


def all_sets() -> list[DumpSet]:
    return sample_sets() + fixture_sets()


@contextmanager
def _at_root() -> Iterator[None]:
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(here)


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """The CLI in-process from the repository root: (exit code, stdout, stderr)."""
    with _at_root():
        res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def render(ds: DumpSet) -> dict[str, str]:
    """The three golden texts of one dump set, as the code gives them now."""
    out = {}
    for suffix, args in OUTPUTS.items():
        code, stdout, stderr = run_cli([args[0], ds.rel, *args[1:], "-j", "1"])
        assert not stderr, f"{ds.rel}: {' '.join(args)} wrote to stderr: {stderr}"
        out[suffix] = stdout + f"exit {code}\n" if suffix == ".txt" else stdout
    return out


def _present(ds: DumpSet) -> None:
    if not ds.path.is_dir():
        pytest.skip(
            f"{ds.rel} is not present (the shared fixtures are provided by CI beside the "
            "repository); its golden outputs are kept but not compared"
        )


def _native_reader_built() -> bool:
    from analyzer.load.parse_native import native_available

    return native_available() and os.environ.get("HANGSCOPE_READER", "") != "python"


def _diff(expected: str, got: str, name: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True),
        got.splitlines(keepends=True),
        f"tests/golden/{name} (stored)",
        f"{name} (now)",
        n=2,
    )
    text = "".join(lines)
    return text if len(text) < 12_000 else text[:12_000] + "\n... (diff cut)\n"


def assert_same(expected: str, got: str, name: str) -> None:
    if expected != got:
        pytest.fail(
            f"{name} differs from its golden output; {REWRITE_HINT}.\n"
            + _diff(expected, got, name),
            pytrace=False,
        )


# --- the golden outputs -------------------------------------------------------------------------


@pytest.mark.parametrize("ds", all_sets(), ids=lambda ds: ds.name)
def test_outputs_match_golden(ds: DumpSet) -> None:
    _present(ds)
    if not _native_reader_built():
        pytest.skip(
            "the compiled reader is not built here: the outputs name the reader "
            "('reader: native'), the golden files were made with it"
        )
    got = render(ds)
    for suffix, text in got.items():
        golden = GOLDEN / f"{ds.name}{suffix}"
        assert golden.exists(), f"no golden output {golden.name}; {REWRITE_HINT}"
        assert_same(golden.read_text(encoding="utf-8"), text, golden.name)


def test_every_sample_has_golden_outputs_and_no_golden_is_stale() -> None:
    expected = {f"{ds.name}{suffix}" for ds in sample_sets() for suffix in OUTPUTS}
    fixtures = {f"{ds.name}{suffix}" for ds in fixture_sets() for suffix in OUTPUTS}
    stored = {p.name for p in GOLDEN.iterdir() if p.name != "README.md"}
    assert not expected - stored, (
        f"samples without golden outputs: {sorted(expected - stored)}; {REWRITE_HINT}"
    )
    assert not stored - expected - fixtures, (
        f"golden outputs of no sample: {sorted(stored - expected - fixtures)}"
    )


def test_golden_outputs_hold_no_machine_path() -> None:
    """Inputs are passed relative to the repository root: nothing names where it lies."""
    root = str(ROOT)
    for golden in sorted(GOLDEN.iterdir()):
        text = golden.read_text(encoding="utf-8")
        assert root not in text, golden.name
        assert str(ROOT.parent) not in text, golden.name
        if golden.suffix == ".json":
            doc = json.loads(text)
            for path in _file_paths(doc):
                assert not os.path.isabs(path), (golden.name, path)


def _file_paths(doc: dict[str, object]) -> Iterator[str]:
    """The paths of input files a JSON document names (not the stack frames from dumps)."""
    for key in ("skipped_files", "warnings", "ignored_files", "unreadable_folders"):
        for item in doc.get(key) or []:  # type: ignore[attr-defined]
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                yield item["path"]
    for item in doc.get("duplicates") or []:  # type: ignore[attr-defined]
        for key in ("kept", "dropped"):
            if isinstance(item, dict) and isinstance(item.get(key), str):
                yield item[key]
    for item in doc.get("where_now") or []:  # type: ignore[attr-defined]
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            yield item["path"]


# --- the outputs do not depend on the environment -----------------------------------------------

#: Dump sets run again in a child process under other settings (a child costs seconds, so a
#: few): a recorded gloo chain with stacks and an ignored file, and a real 16-rank NCCL job
#: with timestamps and queued waits. Every dump set was checked this way when the golden
#: files were made.
ENV_SETS = ["chain_tp_dp_w8", "fixture_nvrx-megatron-moe__gpu_error_2nd"]
ENVIRONMENTS = {
    "C locale, 2 parsers, 60 columns, UTC+14": (
        {"LC_ALL": "C", "COLUMNS": "60", "TZ": "Pacific/Kiritimati"},
        "2",
    ),
    "C.UTF-8, 1 parser, 200 columns, UTC-10": (
        {"LC_ALL": "C.UTF-8", "COLUMNS": "200", "TZ": "Pacific/Honolulu"},
        "1",
    ),
}


@pytest.mark.parametrize("env_name", list(ENVIRONMENTS))
def test_outputs_do_not_depend_on_locale_jobs_width_or_time_zone(env_name: str) -> None:
    """The real command in a child process, under another locale, number of parser
    processes, terminal width and time zone, prints the golden outputs byte for byte."""
    extra, jobs = ENVIRONMENTS[env_name]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LC_")
        and k not in ("LANG", "LANGUAGE", "PYTHONIOENCODING", "PYTHONUTF8")
    }
    env.update(extra)
    sets = {ds.name: ds for ds in all_sets()}
    ran = 0
    for name in ENV_SETS:
        ds = sets[name]
        if not ds.path.is_dir() or not _native_reader_built():
            continue
        for suffix, args in OUTPUTS.items():
            argv = [args[0], ds.rel, *args[1:], "-j", jobs]
            proc = subprocess.run(
                [sys.executable, "-m", "analyzer", *argv],
                cwd=ROOT,
                env=env,
                capture_output=True,
                timeout=300,
                check=False,
            )
            got = proc.stdout.decode("utf-8") + (
                f"exit {proc.returncode}\n" if suffix == ".txt" else ""
            )
            assert not proc.stderr, (name, suffix, proc.stderr.decode(errors="replace"))
            golden = GOLDEN / f"{name}{suffix}"
            assert_same(golden.read_text(encoding="utf-8"), got, f"{golden.name} [{env_name}]")
            ran += 1
    if not ran:
        pytest.skip(
            "none of the dump sets of this check is present, or the compiled reader is not built"
        )


# --- the HTML report's banner says what the text says -------------------------------------------


class _Banner(HTMLParser):
    """The text of the report's verdict banner: <p class=verdict|kind|headline> and <li>s."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.fields: dict[str, str] = {}
        self.items: list[str] = []
        self._in_banner = 0
        self._target: list[str] | None = None
        self._key = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "header" and a.get("id") == "verdict":
            self._in_banner = 1
        elif self._in_banner and tag in ("p", "li"):
            self._target, self._key = [], (a.get("class") or "") if tag == "p" else "li"

    def handle_endtag(self, tag: str) -> None:
        if tag == "header":
            self._in_banner = 0
        elif self._target is not None and tag in ("p", "li"):
            text = "".join(self._target)
            if self._key == "li":
                self.items.append(text)
            else:
                self.fields[self._key] = text
            self._target = None

    def handle_data(self, data: str) -> None:
        if self._target is not None:
            self._target.append(data)


@dataclass(frozen=True)
class Said:
    """What a verdict says, from the text output or from the report's banner."""

    verdict: str
    culprits: tuple[int, ...]
    kind: str
    headline: str
    chains: tuple[str, ...]
    missing: tuple[int, ...]
    cycles: tuple[tuple[int, ...], ...]


def _squeeze(text: str) -> str:
    """Wording without its line breaks (textwrap breaks lines at spaces and hyphens)."""
    return "".join(text.split())


def _ranks(text: str) -> tuple[int, ...]:
    """``0-3, 5`` or ``0, 1, 2, 3, 5`` (annotations in parentheses dropped) -> ranks."""
    out: list[int] = []
    for part in re.sub(r"\([^)]*\)", "", text).split(","):
        part = part.strip()
        if m := re.fullmatch(r"(\d+)-(\d+)", part):
            out.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        elif part.isdigit():
            out.append(int(part))
    return tuple(sorted(out))


#: A wait chain's line, or the line of chains of the same path folded into one.
_CHAIN = ("chain to rank ", "chains to ranks ")
_VERDICT = re.compile(r"(HANG|NO HANG|INCONCLUSIVE)(?:: culprit ranks? ([\d, -]+))?")


def said_by_text(text: str) -> Said:
    lines = text.splitlines()
    m = _VERDICT.match(lines[0])
    assert m, lines[0]
    kind = lines[0].split(" (", 1)[1].removesuffix(")") if m.group(1) == "HANG" else ""
    blocks: list[str] = []  # the indented blocks under the first line, continuation lines joined
    for line in lines[1:]:
        if not line.strip():
            break
        if line.startswith("    ") and blocks:
            blocks[-1] += " " + line.strip()
        else:
            blocks.append(line.strip())
    chains = tuple(_squeeze(b) for b in blocks if b.startswith(_CHAIN))
    missing = next(
        (
            _ranks(x.removeprefix("missing dumps: ranks "))
            for x in lines
            if x.startswith("missing dumps: ranks ")
        ),
        (),
    )
    cycles = tuple(
        _ranks(x.removeprefix("deadlock cycle: ranks "))
        for x in lines
        if x.startswith("deadlock cycle: ranks ")
    )
    return Said(
        m.group(1), _ranks(m.group(2) or ""), kind, _squeeze(blocks[0]), chains, missing, cycles
    )


def said_by_report(page: str) -> Said:
    banner = _Banner()
    banner.feed(page)
    verdict = banner.fields.get("verdict", "")
    m = _VERDICT.match(verdict)
    assert m, verdict
    items = banner.items
    return Said(
        m.group(1),
        _ranks(m.group(2) or ""),
        banner.fields.get("kind", "") if m.group(1) == "HANG" else "",
        _squeeze(banner.fields.get("headline", "")),
        tuple(_squeeze(x) for x in items if x.startswith(_CHAIN)),
        next(
            (
                _ranks(x.removeprefix("missing dumps: ranks "))
                for x in items
                if x.startswith("missing dumps: ranks ")
            ),
            (),
        ),
        tuple(
            _ranks(x.removeprefix("deadlock cycle: ranks "))
            for x in items
            if x.startswith("deadlock cycle: ranks ")
        ),
    )


def _report_params() -> list[object]:
    # Every dump set, the deadlock cycles and queued chain steps included: the report's banner
    # is built from the same wording layer as the text.
    return [pytest.param(ds, id=ds.name) for ds in all_sets()]


@pytest.mark.parametrize("ds", _report_params())
def test_report_banner_says_what_the_text_says(ds: DumpSet, tmp_path: Path) -> None:
    _present(ds)
    page = tmp_path / "report.html"
    code, _, stderr = run_cli(
        ["report", ds.rel, "-q", "-j", "1", "--plotlyjs", "cdn", "-o", str(page), "--exit-code"]
    )
    assert not stderr, stderr
    # The text output as pinned (test_outputs_match_golden checks it is the current one).
    text, _, exit_line = (
        (GOLDEN / f"{ds.name}.txt").read_text(encoding="utf-8").rstrip("\n").rpartition("\n")
    )
    assert exit_line == f"exit {code}", (exit_line, code)
    by_text, by_report = said_by_text(text), said_by_report(page.read_text(encoding="utf-8"))
    for field in ("verdict", "culprits", "kind", "headline", "chains", "missing", "cycles"):
        assert getattr(by_report, field) == getattr(by_text, field), (
            f"the report's banner and the text disagree on {field}:\n"
            f"  report: {getattr(by_report, field)}\n  text:   {getattr(by_text, field)}"
        )


# --- make golden ---------------------------------------------------------------------------------


def write_goldens() -> None:
    """Rewrite tests/golden/ from the code as it is now (``make golden``)."""
    GOLDEN.mkdir(exist_ok=True)
    keep = {"README.md"}
    for ds in all_sets():
        if not ds.path.is_dir():
            print(f"golden: {ds.rel} not present, its stored outputs are kept")
            keep.update(f"{ds.name}{suffix}" for suffix in OUTPUTS)
            continue
        for suffix, text in render(ds).items():
            (GOLDEN / f"{ds.name}{suffix}").write_text(text, encoding="utf-8")
            keep.add(f"{ds.name}{suffix}")
    for stale in sorted(p for p in GOLDEN.iterdir() if p.name not in keep):
        print(f"golden: removed {stale.name} (no such dump set)")
        stale.unlink()
    print(
        f"golden: {len(keep) - 1} files in tests/golden/; review them with git diff tests/golden/"
    )


if __name__ == "__main__":
    write_goldens()
