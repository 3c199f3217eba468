"""The ``hangscope`` command: a thin adapter over the library. It parses arguments, calls the
library, and turns typed errors into one-line messages and exit codes.

Exit codes: ``analyze`` (and ``report --exit-code``) 0 no hang, 1 a hang or problem found, 5
inconclusive; ``graph``, ``entries``, ``report``, ``export`` 0 once written; 2 bad usage or nothing
analyzable (or, with ``--strict``, two different dumps for one rank; stores of different
jobs; stores mixed with dumps), 3 an internal error (one line; ``hangscope --debug ...``
prints the traceback), 4 the Dask cluster of ``--scheduler`` could not be used (unreachable
scheduler, no worker, every batch failed on the workers), 6 the output could not be written
(stdout closed or full, an ``-o`` on a full disk), 141 the reader of stdout's pipe went
away (nothing said), 128 plus the signal's number for SIGINT,
SIGTERM and SIGHUP (130, 143, 129).

Modules: :mod:`~analyzer.cli.commands` (the commands), :mod:`~analyzer.cli.options` (the options
they share, ``--version`` and ``--debug``), :mod:`~analyzer.cli.entry_point` (the process:
``main`` and ``run``), :mod:`~analyzer.cli.exits` (exit codes, and the steps every command
shares: load, analyze, report errors), :mod:`~analyzer.cli.process` (signals, and standard
streams closed or full), :mod:`~analyzer.cli.table_commands` (``entries``, ``export``,
``demo``), :mod:`~analyzer.cli.report_options`, :mod:`~analyzer.cli.outputs` (outputs
checked before the work), :mod:`~analyzer.cli.conventions` (``-h``, one error style,
metavars, colour), :mod:`~analyzer.cli.progress` (the progress line), :mod:`~analyzer.cli.demo`
(the bundled samples), :mod:`~analyzer.cli.completion` (shell completion).
"""

from __future__ import annotations

from analyzer.cli.commands import app
from analyzer.cli.entry_point import main, run

__all__ = ["app", "main", "run"]
