"""The README stays true: its example output is what the tool prints, every command is there."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from analyzer.cli import app
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_setup_commands() -> None:
    first_block = README.split("```sh", 1)[1].split("```", 1)[0]
    assert "make demo" in first_block and "make test" in first_block


def test_readme_example_output_is_current() -> None:
    block = re.search(r"```console\n\$ hangscope analyze (\S+)\n(.*?)```", README, re.S)
    assert block, "README has no example session"
    path, shown = block.group(1), block.group(2)
    res = CliRunner().invoke(app, ["analyze", str(ROOT / path), "-q"])
    assert res.stdout.strip() == shown.strip()


def test_every_command_is_documented() -> None:
    for name in [c.name or c.callback.__name__ for c in app.registered_commands]:  # type: ignore[union-attr]
        assert f"hangscope {name}" in README, name
        res = CliRunner().invoke(app, [name, "--help"])
        assert res.exit_code == 0 and "Usage" in res.stdout


def test_every_kind_is_documented() -> None:
    from analyzer.diagnosis import KINDS

    for kind in KINDS:
        assert f"`{kind}`" in README or kind in README, kind
