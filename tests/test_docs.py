"""The docs stay true: the README's example output is what the tool prints, every command is
in the README and in docs/cli.md, docs/cli.md's options table is what ``--help`` prints, every
kind is explained, and every relative link leads to a file and heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from analyzer.cli.commands import app
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()
OUTPUT_DOC = (ROOT / "docs" / "output.md").read_text()


def test_readme_starts_with_the_two_setup_commands() -> None:
    first_block = README.split("```sh", 1)[1].split("```", 1)[0]
    assert "make demo" in first_block and "make test" in first_block


def test_readme_example_output_is_current() -> None:
    block = re.search(r"```console\n\$ hangscope analyze (\S+)\n(.*?)```", README, re.S)
    assert block, "README has no example session"
    path, shown = block.group(1), block.group(2)
    res = CliRunner().invoke(app, ["analyze", str(ROOT / path), "-q"])
    assert res.stdout.strip() == shown.strip()


def test_readme_ticket_summary_is_current() -> None:
    """The README's first screen shows the Markdown summary as the tool prints it (its
    first part, up to the source line)."""
    block = re.search(r"````markdown\n(.*?)````", README, re.S)
    assert block, "README shows no ticket summary"
    import os

    here = os.getcwd()
    os.chdir(ROOT)  # the input path is printed as given
    try:
        res = CliRunner().invoke(
            app, ["analyze", "sample_dumps/chain_tp_dp_w8", "-q", "-f", "markdown"]
        )
    finally:
        os.chdir(here)
    assert res.stdout.startswith(block.group(1))
    assert README.index("````markdown") < 1500  # on the first screen


def test_every_command_is_in_the_readme_and_in_the_cli_page() -> None:
    for name in [c.name or c.callback.__name__ for c in app.registered_commands]:  # type: ignore[union-attr]
        assert f"hangscope {name}" in README, name
        assert f"hangscope {name}" in CLI_DOC, name
        res = CliRunner().invoke(app, [name, "--help"])
        assert res.exit_code == 0 and "Usage" in res.stdout


def test_how_to_read_the_output_names_every_kind() -> None:
    from analyzer.diagnosis import KINDS

    section = README.split("## How to read the output", 1)[1].split("\n## ", 1)[0]
    verdicts = {"no_hang": "`NO HANG`", "inconclusive": "`INCONCLUSIVE`"}
    for kind in KINDS:
        assert f"`{kind}`" in section or verdicts.get(kind, "?") in section, kind


def test_every_kind_has_a_row_in_the_taxonomy() -> None:
    from analyzer.diagnosis import KINDS

    taxonomy = OUTPUT_DOC.split("## Taxonomy (`kind`)", 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\| ([^|]+) \|", taxonomy, re.M)
    named = {kind for cell in first_cells for kind in re.findall(r"`(\w+)`", cell)}
    assert set(KINDS) <= named, sorted(set(KINDS) - named)


# --- the options tables against --help -----------------------------------------------------------

_OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][a-z0-9-]*)")
TOP = "hangscope"


def _commands() -> dict[str, object]:
    """``{name: click command}`` of every command, and the top-level group as ``hangscope``."""
    import typer.main

    group = typer.main.get_command(app)
    return {TOP: group, **group.commands}  # type: ignore[attr-defined]


def _declared_options(command: object) -> set[str]:
    """Every option name the command declares, ``-h``/``--help`` included."""
    names = {"--help", "-h"}
    for param in command.params:  # type: ignore[attr-defined]
        if param.param_type_name == "option":
            names.update(param.opts, param.secondary_opts)
    return names


def _help_options(name: str) -> set[str]:
    """The option names ``--help`` prints in its options panel (a wide terminal, so that no
    name is cut)."""
    args = ["--help"] if name == TOP else [name, "--help"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    found: set[str] = set()
    in_options = False
    for line in res.stdout.splitlines():
        if "Options" in line and line.lstrip().startswith(("╭", "+")):
            in_options = True
        elif line.lstrip().startswith(("╰", "+")):
            in_options = False
        elif in_options:
            words = line.strip().strip("│|").split()
            if words[:1] == ["*"]:  # a required option
                words = words[1:]
            for word in words:
                if not word.startswith("-"):
                    break
                found.add(word.rstrip(","))
    return found


def _options_table() -> dict[str, set[str]]:
    """docs/cli.md's options table: ``{command: option names listed for it}``."""
    head = "| option | commands | what it does |"
    assert head in CLI_DOC, "docs/cli.md has no options table"
    rows = CLI_DOC.split(head, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    listed: dict[str, set[str]] = {}
    known = set(_commands())
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 3, row
        options = {
            _OPTION.match(code.split()[0]).group(1)  # type: ignore[union-attr]
            for code in re.findall(r"`([^`]+)`", cells[0])
        }
        commands = [c for c in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cells[1]))]
        assert commands and set(commands) <= known, (row, set(commands) - known)
        for command in commands:
            listed.setdefault(command, set()).update(options)
    return listed


def test_help_prints_every_declared_option() -> None:
    for name, command in _commands().items():
        assert _help_options(name) == _declared_options(command), name


def test_options_table_lists_exactly_the_options_of_every_command() -> None:
    listed = _options_table()
    for name, command in _commands().items():
        actual = _help_options(name)
        assert actual == _declared_options(command), name
        documented = listed.get(name, set())
        assert not documented - actual, (
            f"docs/cli.md lists options {name} does not have: {sorted(documented - actual)}"
        )
        assert not actual - documented, (
            f"docs/cli.md does not list these options of {name}: {sorted(actual - documented)}"
        )


def test_command_synopses_use_real_options() -> None:
    """The command tables' synopses (``hangscope graph PATH... [-f ...] [-o FILE]``), in the
    README and in docs/cli.md."""
    commands = _commands()
    for text in (README, CLI_DOC):
        synopses = re.findall(r"^\| `hangscope (\w+) ([^`]*)` \|", text, re.M)
        assert synopses
        for name, synopsis in synopses:
            options = set(_OPTION.findall(synopsis))
            assert options <= _declared_options(commands[name]), (name, options)


# --- relative links ------------------------------------------------------------------------------

PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text without code blocks and code spans (a ``[x](y)`` in code is no link)."""
    return _CODE.sub("", _FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces
    as hyphens, ``-1``, ``-2`` ... after repeats."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _relative_links(page: Path) -> list[str]:
    return [
        t for t in _LINK.findall(_prose(page.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)
    ]  # http:, https:, mailto: ...


def test_the_link_check_reads_every_page() -> None:
    """The README links every page of docs/, so the link check below is not vacuous."""
    docs = {p.relative_to(ROOT).as_posix() for p in PAGES if p.parent.name == "docs"}
    assert {"docs/cli.md", "docs/output.md", "docs/diagnosis.md", "docs/store.md"} <= docs
    assert docs | {"CONTRIBUTING.md"} <= {
        t.partition("#")[0] for t in _relative_links(ROOT / "README.md")
    }


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in _relative_links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if ROOT.resolve() not in dest.parents:
                broken.append(f"{page.relative_to(ROOT)}: {target} (outside the repository)")
            elif not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
