"""hangscope: which rank stopped a distributed PyTorch job, and why.

>>> import analyzer
>>> result = analyzer.analyze("sample_dumps/stall_w4")   # doctest: +SKIP
>>> result.culprit_ranks                                  # doctest: +SKIP
[1]
"""

from analyzer.analysis import Analysis, analyze
from analyzer.diagnosis import KINDS, SCHEMA_VERSION, Diagnosis, Finding, Verdict
from analyzer.errors import (
    AnalyzerError,
    DumpFormatError,
    InputError,
    RankResolutionError,
    SchemaError,
    UnsafeDumpError,
)

__version__ = "0.1.0"

__all__ = [
    "Analysis", "analyze", "Diagnosis", "Finding", "Verdict", "KINDS", "SCHEMA_VERSION",
    "AnalyzerError", "DumpFormatError", "InputError", "RankResolutionError", "SchemaError",
    "UnsafeDumpError", "__version__",
]
