"""hangscope: which rank stopped a distributed PyTorch job, and why.

>>> import analyzer
>>> result = analyzer.analyze("sample_dumps/stall_w4")   # doctest: +SKIP
>>> result.verdict, result.culprit_ranks                  # doctest: +SKIP
(<Verdict.HANG: 'hang'>, (1,))
>>> result                                                # doctest: +SKIP
Analysis(ranks=4/4, verdict='hang', kind='not_joined', culprits=(1,), entries=27, findings=1)

The names below are imported on first use, so that ``import analyzer.capture`` in a training
script needs neither the analyzer's dependencies (pandas, networkx, ...) nor their import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Analysis": "analyzer.analysis",
    "analyze": "analyzer.analysis",
    "KINDS": "analyzer.diagnosis",
    "SCHEMA_VERSION": "analyzer.diagnosis",
    "Diagnosis": "analyzer.diagnosis",
    "Finding": "analyzer.diagnosis",
    "Verdict": "analyzer.diagnosis",
    "AnalysisConfig": "analyzer.config",
    "DEFAULT_CONFIG": "analyzer.config",
    "AnalyzerError": "analyzer.errors",
    "DumpFormatError": "analyzer.errors",
    "InputError": "analyzer.errors",
    "RankResolutionError": "analyzer.errors",
    "SchemaError": "analyzer.errors",
    "UnsafeDumpError": "analyzer.errors",
}

if TYPE_CHECKING:
    from analyzer.analysis import Analysis, analyze
    from analyzer.config import DEFAULT_CONFIG, AnalysisConfig
    from analyzer.diagnosis import KINDS, SCHEMA_VERSION, Diagnosis, Finding, Verdict
    from analyzer.errors import (
        AnalyzerError,
        DumpFormatError,
        InputError,
        RankResolutionError,
        SchemaError,
        UnsafeDumpError,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_CONFIG",
    "KINDS",
    "SCHEMA_VERSION",
    "Analysis",
    "AnalysisConfig",
    "AnalyzerError",
    "Diagnosis",
    "DumpFormatError",
    "Finding",
    "InputError",
    "RankResolutionError",
    "SchemaError",
    "UnsafeDumpError",
    "Verdict",
    "__version__",
    "analyze",
]
