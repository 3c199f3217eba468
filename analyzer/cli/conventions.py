"""The terminal conventions of the ``hangscope`` command: ``-h`` beside ``--help``, usage
errors in the one style of the tool's own errors (``hangscope: error: ...``, one line, exit
2), ``--debug`` accepted after the command too, metavars (``N``, ``FILE``) instead of type
names in ``--help``, and, on a terminal only, text wrapped to its width with the verdict in
colour (never when piped or with ``NO_COLOR`` set)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from analyzer.cli.options import DEBUG

__all__ = [
    "HELP_OPTIONS",
    "INVOKED",
    "HangscopeGroup",
    "colour_verdict",
    "on_terminal",
    "text_width",
]

#: The arguments the command was given (``INVOKED["argv"]``), for the report's header.
INVOKED: dict[str, list[str]] = {"argv": []}
#: ``-h`` and ``--help`` on every command.
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}


def on_terminal() -> bool:
    """stdout is a terminal (output for people, not for a pipe or a file)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def text_width() -> int:
    """The terminal's width on a terminal (at least 60), else 100 (files and pipes are the
    same everywhere)."""
    if not on_terminal():
        return 100
    return max(60, shutil.get_terminal_size((100, 24)).columns - 1)


_COLOURS = {"HANG": "31", "NO HANG": "32", "INCONCLUSIVE": "33"}
_HEAD = re.compile(r"^(HANG|NO HANG|INCONCLUSIVE)(: culprit ranks? [\d, ]*\d)?")


def colour_verdict(text: str) -> str:
    """The verdict of the first line in colour and bold culprits, on a terminal without
    ``NO_COLOR``; ``text`` unchanged otherwise."""
    if not on_terminal() or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return text
    m = _HEAD.match(text)
    if not m:
        return text
    word, culprits = m.group(1), m.group(2) or ""
    head = f"\x1b[1;{_COLOURS[word]}m{word}\x1b[0m"
    if culprits:
        head += f"\x1b[1m{culprits}\x1b[0m"
    return head + text[m.end() :]


def _show(message: str, hint: str = "") -> None:
    from analyzer.escape import clean

    message = message.replace("Value error, ", "").strip()
    typer.echo(f"hangscope: error: {clean(message)}" + (f" ({hint})" if hint else ""), err=True)


def _metavar_display(param: Any) -> Any:
    """``--jobs N`` instead of ``--jobs <int>``; nothing for a flag; ``PATH...`` for the
    paths (not ``{paths}...``)."""
    if getattr(param, "_metavar_shown", False):
        return param
    param._metavar_shown = True
    metavar = getattr(param, "metavar", None)
    if getattr(param, "param_type_name", "") == "argument":
        if metavar:
            param.get_usage_pieces = lambda ctx: [metavar]
            param.display_type_rich = lambda ctx: None
    elif getattr(param, "is_flag", False) or getattr(param, "count", False):
        param.display_type_rich = lambda ctx: None
    elif metavar:
        param.display_type_rich = lambda ctx: metavar
    return param


def _with_metavars(cmd: Any) -> Any:
    """``cmd`` whose parameters (the help option included) show metavars."""
    if cmd is None or getattr(cmd, "_metavars", False):
        return cmd
    cmd._metavars = True
    params = cmd.get_params
    cmd.get_params = lambda ctx: [_metavar_display(p) for p in params(ctx)]
    return cmd


class HangscopeGroup(TyperGroup):
    """The command group with the conventions of this module."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return _with_metavars(super().get_command(ctx, cmd_name))

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        from typer._click.exceptions import (  # typer's own click
            ClickException,
            NoArgsIsHelpError,
            UsageError,
        )
        from typer.exceptions import Abort

        argv = list(sys.argv[1:] if args is None else args)
        if "--debug" in argv[1:]:  # after the command too: hangscope analyze DIR --debug
            DEBUG["on"] = True
            cut = argv.index("--") if "--" in argv else len(argv)
            argv = [a for i, a in enumerate(argv) if i >= cut or a != "--debug" or i == 0]
        _with_metavars(self)
        INVOKED["argv"] = argv
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(argv, prog_name, complete_var, False, **extra)
        except NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except UsageError as e:
            path = e.ctx.command_path if e.ctx is not None else "hangscope"
            _show(e.format_message(), f"see {path} --help")
            sys.exit(e.exit_code)
        except ClickException as e:
            _show(e.format_message())
            sys.exit(e.exit_code)
        except Abort:
            _show("aborted")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)
