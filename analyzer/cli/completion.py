"""Shell completion: ``hangscope completion bash|zsh|fish|powershell`` prints the script a
shell sources, and a shell asking for completions (``_HANGSCOPE_COMPLETE`` set by that
script) is answered before any command runs.

The scripts and the answers are typer's; the name and the variable are fixed here
(``hangscope``, ``_HANGSCOPE_COMPLETE``) rather than taken from how the process was started,
so ``python -m analyzer completion bash`` prints the script of the installed command."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer

__all__ = ["COMPLETE_VAR", "Shell", "completion", "prepare_completion"]

#: The variable the completion scripts set when they ask for completions.
COMPLETE_VAR = "_HANGSCOPE_COMPLETE"
PROG = "hangscope"


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


def prepare_completion() -> None:
    """When a shell asks for completions, make typer's answers for each shell known (typer
    registers them only for its own ``--install-completion`` options, which hangscope has
    not: the command below replaces them)."""
    if os.environ.get(COMPLETE_VAR):
        from typer.completion import completion_init

        completion_init()


def completion(
    shell: Annotated[
        Shell,
        typer.Argument(metavar="SHELL", help="bash, zsh, fish or powershell", show_default=False),
    ],
) -> None:
    """Print the shell completion script of hangscope, to source from the shell's start file.

    Example: hangscope completion bash > ~/.local/share/bash-completion/completions/hangscope
    """
    from typer.completion import get_completion_script

    from analyzer.cli.exits import say

    say(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell.value))
