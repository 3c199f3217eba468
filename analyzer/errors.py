"""Typed errors raised by the library. Only the CLI turns them into messages and exit codes."""

from __future__ import annotations


class AnalyzerError(Exception):
    """Base class of every error hangscope raises on purpose."""


class InputError(AnalyzerError):
    """The paths given do not name any readable dump (missing directory, empty glob...)."""


class OutputError(AnalyzerError):
    """A result (a store, a report) cannot be written where it was asked for."""


class DumpFormatError(AnalyzerError):
    """One file is not a flight-recorder dump: empty, truncated, foreign or malformed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class UnsafeDumpError(DumpFormatError):
    """A pickle names a Python global (code to run); it was refused, not executed."""


class RankResolutionError(AnalyzerError):
    """The global rank of a file cannot be worked out from its name."""


class SchemaError(AnalyzerError):
    """A normalized table does not have the declared columns or dtypes."""


class SavedAnalysisError(InputError):
    """A saved analysis (the JSON of ``hangscope analyze -f json``) cannot be used: too large,
    not JSON, not hangscope's, or its fingerprint is missing or altered."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
